//! [`Tool`]: one tool of a plugin, built from a plain Rust function.

use std::sync::OnceLock;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::declare::{ToolDeclaration, ToolHints};
use crate::{Answer, Ctx, ToolError};

/// The longest tool name model APIs accept.
pub const MAX_TOOL_NAME_LEN: usize = 64;

/// Whether `name` is a tool name model APIs accept: `^[a-zA-Z0-9_-]{1,64}$`.
pub fn is_valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TOOL_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Why a call did not produce an answer, as the plugin glue sees it.
#[derive(Debug)]
pub enum CallFailure {
    /// The tool answered with an error.
    Tool(ToolError),
    /// The arguments did not deserialize into the tool's argument type.
    InvalidArguments(String),
}

type Handler = Box<dyn Fn(&str, &Ctx) -> Result<Answer, CallFailure> + Send + Sync>;

/// One tool: a name, a description, the JSON Schema of its arguments (derived from the argument
/// type), the function that runs it, and what it declares: a timeout, a title, its
/// [`ToolHints`], the schema of its structured answers ([`Tool::structured`]) and a result limit.
///
/// ```
/// use rho_plugin_api::{Answer, Ctx, JsonSchema, Tool, ToolError};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Deserialize, JsonSchema)]
/// struct Path { path: String }
///
/// #[derive(Serialize, JsonSchema)]
/// struct Listing { entries: Vec<String> }
///
/// fn list(args: Path, _ctx: &Ctx) -> Result<Listing, ToolError> {
///     Ok(Listing { entries: vec![args.path] })
/// }
///
/// let tool = Tool::structured("list", "Lists a directory.", list)
///     .title("List a directory")
///     .read_only(true)
///     .idempotent(true)
///     .open_world(false)
///     .max_result_bytes(50_000);
/// assert!(tool.hints().read_only && !tool.hints().destructive);
/// assert!(tool.declaration().output_schema.is_some());
/// ```
pub struct Tool {
    name: String,
    description: String,
    parameters: LazySchema,
    timeout_ms: Option<u64>,
    /// What it declares, but for its output schema.
    declared: ToolDeclaration,
    /// The schema of its structured answers, if it has one.
    output_schema: Option<LazySchema>,
    /// `declared` with the output schema, made when first asked for.
    declaration: OnceLock<ToolDeclaration>,
    handler: Handler,
}

/// A type's JSON Schema, made when first asked for: a call finds and runs its tool without
/// deriving any schema (a component builds its tools anew in each instance, so this is most of
/// the work a call would do before its own).
struct LazySchema {
    make: fn() -> Value,
    made: OnceLock<Value>,
}

impl LazySchema {
    /// The schema of `T`.
    fn of<T: JsonSchema>() -> Self {
        LazySchema {
            make: schema_of::<T>,
            made: OnceLock::new(),
        }
    }

    fn get(&self) -> &Value {
        self.made.get_or_init(self.make)
    }
}

/// The JSON Schema of `T`, as a JSON value.
fn schema_of<T: JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T))
        .unwrap_or_else(|_| Value::Object(Default::default()))
}

impl Tool {
    /// A tool named `name` that runs `run`. The argument type `A` gives the JSON Schema
    /// (`#[derive(Deserialize, JsonSchema)]`; doc comments on fields become descriptions).
    pub fn new<A, F>(name: impl Into<String>, description: impl Into<String>, run: F) -> Self
    where
        A: DeserializeOwned + JsonSchema,
        F: Fn(A, &Ctx) -> Result<Answer, ToolError> + Send + Sync + 'static,
    {
        let name = name.into();
        Tool {
            declared: ToolDeclaration {
                name: name.clone(),
                ..ToolDeclaration::default()
            },
            name,
            description: description.into(),
            parameters: LazySchema::of::<A>(),
            timeout_ms: None,
            output_schema: None,
            declaration: OnceLock::new(),
            handler: Box::new(move |args_json, ctx| {
                let args: A = serde_json::from_str(args_json)
                    .map_err(|e| CallFailure::InvalidArguments(e.to_string()))?;
                run(args, ctx).map_err(CallFailure::Tool)
            }),
        }
    }

    /// A tool that answers with structured data of type `O`: its output schema is derived from
    /// `O` (`#[derive(Serialize, JsonSchema)]`, a struct: MCP wants an object), and each answer
    /// carries the data as structured content with its JSON text for the model. The host checks
    /// every answer against the schema.
    pub fn structured<A, O, F>(
        name: impl Into<String>,
        description: impl Into<String>,
        run: F,
    ) -> Self
    where
        A: DeserializeOwned + JsonSchema,
        O: Serialize + JsonSchema,
        F: Fn(A, &Ctx) -> Result<O, ToolError> + Send + Sync + 'static,
    {
        let mut tool = Tool::new(name, description, move |args: A, ctx: &Ctx| {
            let data = run(args, ctx)?;
            let value = serde_json::to_value(&data)
                .map_err(|e| ToolError::new(format!("its answer did not serialize: {e}")))?;
            Ok(Answer::structured(value))
        });
        tool.output_schema = Some(LazySchema::of::<O>());
        tool
    }

    /// The same tool with its own timeout: the host ends a call of it that runs longer.
    pub fn timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.timeout_ms = Some(timeout_ms);
        self
    }

    /// The same tool with an idle limit: a call of it that sends no partial update
    /// ([`Ctx::update`]) for `idle_timeout_ms` ends `timed_out`, however long its total timeout
    /// (the host's settings win over it). For a tool that may run long while it says how it
    /// gets on: alive as long as it speaks, stopped soon after it falls silent.
    pub fn idle_timeout_ms(mut self, idle_timeout_ms: u64) -> Self {
        self.declared_mut().idle_timeout_ms = Some(idle_timeout_ms);
        self
    }

    /// The same tool, its calls run as MCP Tasks for clients that declare them ([`TaskSupport`]):
    /// for a tool that may run longer than a client waits on one request.
    ///
    /// [`TaskSupport`]: crate::declare::TaskSupport
    pub fn task_support(mut self, task_support: crate::declare::TaskSupport) -> Self {
        self.declared_mut().task_support = task_support;
        self
    }

    /// The same tool, saying its calls ask their questions first ([`crate::Ctx::ask`], at the
    /// start), before the long work: a client that declares tasks gets those questions within
    /// its request (MCP's input-required rounds), and the call becomes a task once they are
    /// answered, rather than a task whose first state is a question. A call that asks nothing
    /// within the first moments becomes a task all the same.
    pub fn asks_first(mut self) -> Self {
        self.declared_mut().asks_first = true;
        self
    }

    /// The same tool with a title for people (the name stays what the model calls).
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.declared_mut().title = Some(title.into());
        self
    }

    /// Whether the tool changes nothing (a read-only tool is stated not destructive).
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.declared_mut().hints.read_only = read_only;
        self
    }

    /// Whether what the tool changes may be destroyed or overwritten (default `true`).
    pub fn destructive(mut self, destructive: bool) -> Self {
        self.declared_mut().hints.destructive = destructive;
        self
    }

    /// Whether calling it again with the same arguments has no further effect (default `false`).
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.declared_mut().hints.idempotent = idempotent;
        self
    }

    /// Whether it reaches things outside the host (default `true`).
    pub fn open_world(mut self, open_world: bool) -> Self {
        self.declared_mut().hints.open_world = open_world;
        self
    }

    /// The longest text of an answer the model gets, in bytes: the host cuts longer text with a
    /// note saying so, and keeps the whole for itself.
    pub fn max_result_bytes(mut self, bytes: u64) -> Self {
        self.declared_mut().max_result_bytes = Some(bytes);
        self
    }

    /// The tool's hints, as hosts state them ([`ToolHints::normalized`]).
    pub fn hints(&self) -> ToolHints {
        self.declared.hints.normalized()
    }

    /// What the tool declares beyond its description, as the host receives it.
    pub fn declaration(&self) -> &ToolDeclaration {
        self.declaration.get_or_init(|| ToolDeclaration {
            output_schema: self.output_schema.as_ref().map(|s| s.get().clone()),
            ..self.declared.clone()
        })
    }

    /// Its declaration to change (a builder's step): the one made for [`Tool::declaration`], if
    /// any, is made again.
    fn declared_mut(&mut self) -> &mut ToolDeclaration {
        self.declaration.take();
        &mut self.declared
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tool's description.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The JSON Schema of the tool's arguments.
    pub fn parameters(&self) -> &Value {
        self.parameters.get()
    }

    /// The tool's own timeout, if it has one.
    pub fn timeout(&self) -> Option<u64> {
        self.timeout_ms
    }

    /// Runs the tool on `args_json` (JSON text), as the plugin glue does.
    pub fn run(&self, args_json: &str, ctx: &Ctx) -> Result<Answer, CallFailure> {
        (self.handler)(args_json, ctx)
    }
}

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.name)
            .field("timeout_ms", &self.timeout_ms)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names() {
        assert!(is_valid_tool_name("read_passage"));
        assert!(is_valid_tool_name("a-B_9"));
        assert!(is_valid_tool_name(&"x".repeat(64)));
        assert!(!is_valid_tool_name(&"x".repeat(65)));
        assert!(!is_valid_tool_name(""));
        assert!(!is_valid_tool_name("has space"));
        assert!(!is_valid_tool_name("dot.name"));
        assert!(!is_valid_tool_name("é"));
    }
}
