//! [`ToolSpec`]: a tool as the model and the host see it, and the host's checks of one
//! ([`check_tools`] for a plugin's or a component's, [`spec_problem`] for any source's).

use rho_plugin_api::ToolHints;
use rho_plugin_api::declare::{TaskSupport, ToolDeclaration};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tool's public description. Serialized, it is one element of `rho tools --json`:
/// `{"name", "title", "description", "parameters", "output_schema", "hints", "max_result_bytes",
/// "timeout_ms", "plugin", "plugin_version"}`. What a plugin of interface 1 cannot declare takes
/// its default: no title, no output schema, no result limit, and [`ToolHints::default`] (MCP's
/// cautious defaults: may write, destructive, not idempotent, open world).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by (`^[a-zA-Z0-9_-]{1,64}$`).
    pub name: String,
    /// A title for people, if it has one.
    #[serde(default)]
    pub title: Option<String>,
    /// What it does, for the model.
    pub description: String,
    /// The JSON Schema of its arguments (an object).
    pub parameters: Value,
    /// The JSON Schema of its structured answers (an object schema), if it answers with
    /// structured data; every such answer is checked against it.
    #[serde(default)]
    pub output_schema: Option<Value>,
    /// What it says about its behaviour (MCP's four hints), always all four.
    #[serde(default)]
    pub hints: ToolHints,
    /// The longest answer text the model gets, in bytes; longer text is cut with a note.
    #[serde(default)]
    pub max_result_bytes: Option<u64>,
    /// Its own timeout, if it has one (else the host's default applies).
    pub timeout_ms: Option<u64>,
    /// Its own idle limit, milliseconds, if it has one: a call that sends no partial update for
    /// this long ends `timed_out`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_ms: Option<u64>,
    /// Whether its calls run as MCP Tasks for clients that declare them.
    #[serde(default, skip_serializing_if = "TaskSupport::is_never")]
    pub task_support: TaskSupport,
    /// Whether its calls ask their questions first (see the plugin API's `Tool::asks_first`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub asks_first: bool,
    /// The plugin it comes from (`None` for a host-native tool).
    pub plugin: Option<String>,
    /// That plugin's version.
    pub plugin_version: Option<String>,
}

impl ToolSpec {
    /// A host-native tool's spec: no plugin, no timeout of its own.
    pub fn native(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
    ) -> Self {
        ToolSpec {
            name: name.into(),
            title: None,
            description: description.into(),
            parameters,
            output_schema: None,
            hints: ToolHints::default(),
            max_result_bytes: None,
            timeout_ms: None,
            idle_timeout_ms: None,
            task_support: TaskSupport::Never,
            asks_first: false,
            plugin: None,
            plugin_version: None,
        }
    }

    /// The same spec with `hints` (a read-only tool is stated not destructive).
    pub fn with_hints(mut self, hints: ToolHints) -> Self {
        self.hints = hints.normalized();
        self
    }

    /// The same spec with its own timeout.
    pub fn with_timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.timeout_ms = Some(timeout_ms);
        self
    }

    /// `plugin@version` for a plugin tool, `host` for a native one.
    pub fn origin(&self) -> String {
        match (&self.plugin, &self.plugin_version) {
            (Some(p), Some(v)) => format!("{p}@{v}"),
            (Some(p), None) => p.clone(),
            _ => "host".into(),
        }
    }
}

/// The largest JSON Schema a plugin may declare (arguments or answers), bytes of JSON.
pub const MAX_SCHEMA_BYTES: usize = 256 << 10;

/// The most regular expressions (`pattern`, `patternProperties` entries) one schema may hold:
/// each costs up to twice the host's bound on one compiled pattern and a match per key to check.
pub const MAX_SCHEMA_PATTERNS: usize = 64;

/// Why `schema` is too costly for the host to take from a plugin, if it is.
pub fn schema_cost_problem(schema: &Value) -> Option<String> {
    let bytes = serde_json::to_vec(schema)
        .map(|b| b.len())
        .unwrap_or(usize::MAX);
    if bytes > MAX_SCHEMA_BYTES {
        return Some(format!(
            "{bytes} bytes of JSON, over the {MAX_SCHEMA_BYTES} a host takes"
        ));
    }
    fn patterns(value: &Value) -> usize {
        match value {
            Value::Object(map) => map
                .iter()
                .map(|(key, v)| match (key.as_str(), v) {
                    ("pattern", Value::String(_)) => 1,
                    ("patternProperties", Value::Object(p)) => {
                        p.len() + p.values().map(patterns).sum::<usize>()
                    }
                    _ => patterns(v),
                })
                .sum(),
            Value::Array(items) => items.iter().map(patterns).sum(),
            _ => 0,
        }
    }
    let count = patterns(schema);
    (count > MAX_SCHEMA_PATTERNS).then(|| {
        format!("{count} regular expressions, over the {MAX_SCHEMA_PATTERNS} a host takes")
    })
}

/// A tool as a plugin described it, before the host's checks: `None` for a string that was not
/// UTF-8, a schema that did not parse as `Value::Null`; what it declared beside.
pub struct RawTool {
    /// Its name, if it was UTF-8.
    pub name: Option<String>,
    /// Its description, if it was UTF-8.
    pub description: Option<String>,
    /// Its parameters' JSON Schema, if it was UTF-8 (`Null` when it did not parse).
    pub parameters: Option<serde_json::Value>,
    /// Its own timeout, milliseconds.
    pub timeout_ms: Option<u64>,
    /// What its plugin declared of it (title, hints, output schema, result limit).
    pub declared: ToolDeclaration,
}

impl RawTool {
    /// A spec as an isolated worker announced it, to be checked again by the host.
    pub fn announced(spec: ToolSpec) -> Self {
        RawTool {
            declared: ToolDeclaration {
                name: spec.name.clone(),
                title: spec.title,
                hints: spec.hints,
                output_schema: spec.output_schema,
                max_result_bytes: spec.max_result_bytes,
                idle_timeout_ms: spec.idle_timeout_ms,
                task_support: spec.task_support,
                asks_first: spec.asks_first,
            },
            name: Some(spec.name),
            description: Some(spec.description),
            parameters: Some(spec.parameters),
            timeout_ms: spec.timeout_ms,
        }
    }
}

/// Why a tool is refused, if it is, whether a plugin or a remote source offers it: its argument
/// schema is not a JSON object; its title is empty, longer than 128 characters or holds control
/// or invisible characters; its output schema does not describe an object (`"type": "object"`,
/// as MCP requires); its result limit is zero; or one of its schemas costs too much to compile.
pub fn spec_problem(spec: &ToolSpec) -> Option<String> {
    if !spec.parameters.is_object() {
        return Some("its parameters are not a JSON Schema object".into());
    }
    if let Some(title) = &spec.title
        && (title.is_empty() || title.chars().count() > 128 || title.chars().any(invisible))
    {
        return Some(
            "its title must be 1 to 128 characters without control, format or separator \
             characters"
                .into(),
        );
    }
    if let Some(schema) = &spec.output_schema
        && schema.get("type").and_then(|t| t.as_str()) != Some("object")
    {
        return Some(
            "its output schema must describe an object (`\"type\": \"object\"`, as MCP requires)"
                .into(),
        );
    }
    if spec.max_result_bytes == Some(0) {
        return Some("its result limit must be at least 1 byte".into());
    }
    if spec.idle_timeout_ms == Some(0) {
        return Some("its idle limit must be at least 1 ms".into());
    }
    let costly = |which: &str, schema: &serde_json::Value| {
        schema_cost_problem(schema).map(|problem| format!("its {which} has {problem}"))
    };
    costly("argument schema", &spec.parameters).or_else(|| {
        spec.output_schema
            .as_ref()
            .and_then(|schema| costly("output schema", schema))
    })
}

/// The host's checks of a plugin's tools, the same in process and isolated (where the worker's
/// word is taken for nothing): refused, one line each, are tools with a name, description or
/// schema that is not UTF-8, a bad name, a duplicate name or a schema that is not a JSON object.
/// A refused name is shown escaped and cut to its first 64 characters. The specs name `plugin`
/// and `version` as the host read them; `file` is the plugin's file as a line shows it.
pub fn check_tools(
    file: &str,
    plugin: &str,
    version: &str,
    raw: Vec<RawTool>,
) -> (Vec<ToolSpec>, Vec<String>) {
    let mut tools: Vec<ToolSpec> = Vec::new();
    let mut rejected = Vec::new();
    for (i, tool) in raw.into_iter().enumerate() {
        let Some(name) = tool.name else {
            rejected.push(format!(
                "{file}: tool #{} refused: its name is not UTF-8",
                i + 1
            ));
            continue;
        };
        if !rho_plugin_api::is_valid_tool_name(&name) {
            let mut shown: String = name.chars().take(64).collect();
            if shown.len() < name.len() {
                shown.push_str("...");
            }
            rejected.push(format!(
                "{file}: tool {shown:?} refused: a tool name must match ^[a-zA-Z0-9_-]{{1,64}}$"
            ));
            continue;
        }
        if tools.iter().any(|t| t.name == name) {
            rejected.push(format!(
                "{file}: tool `{name}` refused: the plugin lists it twice"
            ));
            continue;
        }
        let (Some(description), Some(parameters)) = (tool.description, tool.parameters) else {
            rejected.push(format!(
                "{file}: tool `{name}` refused: its description or schema is not UTF-8"
            ));
            continue;
        };
        let ToolDeclaration {
            title,
            hints,
            output_schema,
            max_result_bytes,
            idle_timeout_ms,
            task_support,
            asks_first,
            ..
        } = tool.declared;
        let spec = ToolSpec {
            name,
            title,
            description,
            parameters,
            output_schema,
            hints: hints.normalized(),
            max_result_bytes,
            timeout_ms: tool.timeout_ms,
            idle_timeout_ms,
            task_support,
            asks_first,
            plugin: Some(plugin.to_owned()),
            plugin_version: Some(version.to_owned()),
        };
        match spec_problem(&spec) {
            Some(problem) => {
                rejected.push(format!("{file}: tool `{}` refused: {problem}", spec.name));
            }
            None => tools.push(spec),
        }
    }
    (tools, rejected)
}

/// Characters a title must not hold: controls, and the invisible ones that reorder or hide text
/// (bidirectional overrides and isolates, zero-width characters, line and paragraph separators).
fn invisible(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}' | '\u{feff}' | '\u{00ad}')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn costly_schemas_are_named() {
        assert_eq!(schema_cost_problem(&json!({"type": "object"})), None);
        let many: serde_json::Map<String, Value> = (0..65)
            .map(|i| (format!("^x{i}"), json!({"type": "integer"})))
            .collect();
        assert_eq!(
            schema_cost_problem(&json!({"patternProperties": many})).as_deref(),
            Some("65 regular expressions, over the 64 a host takes")
        );
        let big = json!({"description": "x".repeat(MAX_SCHEMA_BYTES)});
        assert!(schema_cost_problem(&big).is_some_and(|p| p.contains("bytes of JSON")));
    }

    #[test]
    fn refuses_a_zero_result_limit_or_idle_limit() {
        let mut spec = ToolSpec::native("t", "d", json!({"type": "object"}));
        assert_eq!(spec_problem(&spec), None);
        spec.idle_timeout_ms = Some(0);
        assert_eq!(
            spec_problem(&spec).as_deref(),
            Some("its idle limit must be at least 1 ms")
        );
        spec.idle_timeout_ms = Some(1);
        spec.max_result_bytes = Some(0);
        assert!(spec_problem(&spec).is_some());
    }
}
