//! What a plugin declares beyond its tools' names, descriptions and argument schemas: the hints of
//! each tool ([`ToolHints`]), its title, output schema and result limit, and the capabilities the
//! plugin needs ([`Capabilities`]).
//!
//! These are wire types: a plugin built against interface 2 or later hands its [`Declaration`] to
//! the host as JSON (the `declare` entry point of [`crate::ffi::PluginMod`]), so later additions
//! are new optional JSON fields, not a new ABI. A field a host does not know is ignored; a field a
//! plugin does not send takes its default. No I/O here.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a tool says about its behaviour: the four hints of the Model Context Protocol
/// (`readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint`).
///
/// The defaults are MCP's, the cautious reading of a tool that says nothing: it may write
/// (`read_only: false`), what it writes may destroy (`destructive: true`), calling it twice may
/// differ from calling it once (`idempotent: false`), and it may reach the world outside the host
/// (`open_world: true`). Hints are the tool's word: a host uses them to decide what to ask a
/// person about and what may run side by side, never as a security boundary.
///
/// ```
/// use rho_plugin_api::ToolHints;
/// let hints = ToolHints::default();
/// assert!(!hints.read_only && hints.destructive && !hints.idempotent && hints.open_world);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct ToolHints {
    /// The tool changes nothing (MCP `readOnlyHint`). A read-only tool is also not destructive.
    pub read_only: bool,
    /// What the tool changes may be destroyed or overwritten, not only added to (MCP
    /// `destructiveHint`; meaningful only when `read_only` is false).
    pub destructive: bool,
    /// Calling it again with the same arguments has no further effect (MCP `idempotentHint`).
    pub idempotent: bool,
    /// It reaches things outside the host (the web, other services), not a closed domain (MCP
    /// `openWorldHint`).
    pub open_world: bool,
}

impl Default for ToolHints {
    fn default() -> Self {
        ToolHints {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: true,
        }
    }
}

impl ToolHints {
    /// The hints as hosts state them: a read-only tool is not destructive (MCP gives
    /// `destructiveHint` meaning only for tools that write).
    pub fn normalized(self) -> Self {
        ToolHints {
            destructive: self.destructive && !self.read_only,
            ..self
        }
    }
}

impl std::fmt::Display for ToolHints {
    /// The hints in words: `read-only, idempotent, closed world`, `destructive, open world`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let effect = match (self.read_only, self.destructive) {
            (true, _) => "read-only",
            (false, true) => "destructive",
            (false, false) => "additive",
        };
        f.write_str(effect)?;
        if self.idempotent {
            f.write_str(", idempotent")?;
        }
        f.write_str(if self.open_world {
            ", open world"
        } else {
            ", closed world"
        })
    }
}

impl std::fmt::Display for Capabilities {
    /// The capabilities in words: `read /srv; network; env API_TOKEN`, or `nothing`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if !self.read.is_empty() {
            parts.push(format!("read {}", self.read.join(", ")));
        }
        if !self.write.is_empty() {
            parts.push(format!("write {}", self.write.join(", ")));
        }
        if self.network {
            parts.push("network".to_owned());
        }
        if self.processes {
            parts.push("processes".to_owned());
        }
        if !self.env.is_empty() {
            parts.push(format!("env {}", self.env.join(", ")));
        }
        if parts.is_empty() {
            f.write_str("nothing")
        } else {
            f.write_str(&parts.join("; "))
        }
    }
}

/// What a plugin needs beyond computing: the paths it reads and writes, the network, environment
/// variables, child processes. Declared once per plugin (see [`crate::export_plugin!`]); a host
/// that isolates the plugin compares it with what it grants and refuses a plugin that asks for
/// more, naming the capability.
///
/// ```
/// use rho_plugin_api::Capabilities;
/// let needs = Capabilities::none().read("/srv/photos").network().env("API_TOKEN");
/// assert!(needs.network && needs.read == ["/srv/photos"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Capabilities {
    /// Paths (and what is beneath them) the plugin reads.
    pub read: Vec<String>,
    /// Paths (and what is beneath them) the plugin reads and writes.
    pub write: Vec<String>,
    /// Network access.
    pub network: bool,
    /// Environment variables it reads.
    pub env: Vec<String>,
    /// Starting child processes.
    pub processes: bool,
}

impl Capabilities {
    /// Nothing beyond computing on its arguments (and its own scratch space).
    pub fn none() -> Self {
        Capabilities::default()
    }

    /// Also reads `path` and what is beneath it.
    pub fn read(mut self, path: impl Into<String>) -> Self {
        self.read.push(path.into());
        self
    }

    /// Also reads and writes `path` and what is beneath it.
    pub fn write(mut self, path: impl Into<String>) -> Self {
        self.write.push(path.into());
        self
    }

    /// Also uses the network.
    pub fn network(mut self) -> Self {
        self.network = true;
        self
    }

    /// Also reads the environment variable `key`.
    pub fn env(mut self, key: impl Into<String>) -> Self {
        self.env.push(key.into());
        self
    }

    /// Also starts child processes.
    pub fn processes(mut self) -> Self {
        self.processes = true;
        self
    }
}

/// What one tool declares beyond its name, description and argument schema.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ToolDeclaration {
    /// The tool's name (as in its description).
    pub name: String,
    /// A title for people.
    pub title: Option<String>,
    /// Its hints.
    pub hints: ToolHints,
    /// The JSON Schema of its structured answers, if it answers with structured data.
    pub output_schema: Option<Value>,
    /// The longest text of an answer the model gets, in bytes; longer text is cut with a note.
    pub max_result_bytes: Option<u64>,
    /// Its idle limit, milliseconds: a call that sends no partial update for this long ends
    /// `timed_out` (under its total timeout).
    pub idle_timeout_ms: Option<u64>,
    /// Whether its calls may outlive the client's request as MCP Tasks.
    #[serde(skip_serializing_if = "TaskSupport::is_never")]
    pub task_support: TaskSupport,
    /// Whether a call asks its questions first, before its long work: a task's questions are
    /// then asked within the request, and the task is made once they are answered.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub asks_first: bool,
}

/// Whether a tool's calls run as MCP Tasks (`io.modelcontextprotocol/tasks`) for clients that
/// declare them: the call outlives the request that started it, and the client polls for its
/// end. A host may also run any tool whose timeout is long enough as a task.
///
/// ```
/// use rho_plugin_api::declare::TaskSupport;
/// assert_eq!(serde_json::to_string(&TaskSupport::Required).unwrap(), "\"required\"");
/// assert!(TaskSupport::default().is_never());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskSupport {
    /// Answered within the request (unless the host decides the tool is long).
    #[default]
    Never,
    /// A task for clients that declare tasks; within the request for the others.
    Optional,
    /// Only as a task: a client that does not declare tasks is refused (`-32021`).
    Required,
}

impl TaskSupport {
    /// Whether this is [`TaskSupport::Never`].
    pub fn is_never(&self) -> bool {
        *self == TaskSupport::Never
    }
}

/// Everything a plugin declares: its capabilities and, per tool, a [`ToolDeclaration`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Declaration {
    /// What the plugin needs.
    pub capabilities: Capabilities,
    /// One entry per tool, in the order of its description.
    pub tools: Vec<ToolDeclaration>,
}
