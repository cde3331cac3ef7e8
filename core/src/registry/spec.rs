//! [`ToolSpec`]: a tool as the model and the host see it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tool's public description. Serialized, it is one element of `rho tools --json`:
/// `{"name", "description", "parameters", "timeout_ms", "plugin", "plugin_version"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by (`^[a-zA-Z0-9_-]{1,64}$`).
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// The JSON Schema of its arguments (an object).
    pub parameters: Value,
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
            description: description.into(),
            parameters,
            timeout_ms: None,
            plugin: None,
            plugin_version: None,
        }
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
