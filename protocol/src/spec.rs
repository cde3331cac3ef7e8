//! [`ToolSpec`]: a tool as the model and the host see it.

use rho_plugin_api::ToolHints;
use rho_plugin_api::declare::TaskSupport;
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
}
