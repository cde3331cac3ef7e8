//! [`ToolSpec`]: a tool as the model and the host see it.

use rho_plugin_api::ToolHints;
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
