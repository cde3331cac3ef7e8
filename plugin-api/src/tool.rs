//! [`Tool`]: one tool of a plugin, built from a plain Rust function.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

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
/// type), an optional timeout, and the function that runs it.
pub struct Tool {
    name: String,
    description: String,
    parameters: Value,
    timeout_ms: Option<u64>,
    handler: Handler,
}

impl Tool {
    /// A tool named `name` that runs `run`. The argument type `A` gives the JSON Schema
    /// (`#[derive(Deserialize, JsonSchema)]`; doc comments on fields become descriptions).
    pub fn new<A, F>(name: impl Into<String>, description: impl Into<String>, run: F) -> Self
    where
        A: DeserializeOwned + JsonSchema,
        F: Fn(A, &Ctx) -> Result<Answer, ToolError> + Send + Sync + 'static,
    {
        let schema = schemars::schema_for!(A);
        let parameters =
            serde_json::to_value(&schema).unwrap_or_else(|_| Value::Object(Default::default()));
        Tool {
            name: name.into(),
            description: description.into(),
            parameters,
            timeout_ms: None,
            handler: Box::new(move |args_json, ctx| {
                let args: A = serde_json::from_str(args_json)
                    .map_err(|e| CallFailure::InvalidArguments(e.to_string()))?;
                run(args, ctx).map_err(CallFailure::Tool)
            }),
        }
    }

    /// The same tool with its own timeout: the host ends a call of it that runs longer.
    pub fn timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.timeout_ms = Some(timeout_ms);
        self
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
        &self.parameters
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
