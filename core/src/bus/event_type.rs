//! [`EventType`]: an event's type without its data. A [`Filter`](crate::Filter) names types by it,
//! so a filter cannot name a type that does not exist; the bus counts listeners per type, so an
//! event nobody would receive is never built. Its text form is the event's `"type"` tag
//! (`tool_execution_end`), for configuration and command lines: [`str::parse`] refuses any other
//! text with a line that lists the types.
//!
//! ```
//! use rho_runtime::EventType;
//!
//! let end: EventType = "tool_execution_end".parse().unwrap();
//! assert_eq!(end, EventType::ToolExecutionEnd);
//! assert_eq!(end.to_string(), "tool_execution_end");
//! assert!("tool_execution_ended".parse::<EventType>().is_err());
//! ```

use serde::{Deserialize, Serialize};

/// An event's type: one per variant of [`EventKind`](crate::EventKind), serialized as its
/// `"type"` tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    /// An agent loop started.
    AgentStart,
    /// An agent loop ended.
    AgentEnd,
    /// A turn of the loop started.
    TurnStart,
    /// A turn of the loop ended.
    TurnEnd,
    /// A message was added to a session.
    MessageEnd,
    /// A tool call started.
    ToolExecutionStart,
    /// A tool call waits for the approval gate.
    ToolGateWaiting,
    /// A tool call passed the gate and runs.
    ToolRunning,
    /// A tool call reported progress.
    ToolExecutionUpdate,
    /// A running tool wrote a log line.
    ToolExecutionLog,
    /// A tool call ended (exactly once per call).
    ToolExecutionEnd,
    /// A plugin loaded.
    PluginLoaded,
    /// A plugin file failed to load or was refused.
    PluginLoadFailed,
    /// A plugin was replaced by a new version.
    PluginReloaded,
    /// A plugin's file went away.
    PluginRemoved,
    /// Two sources offered a tool of the same name.
    ToolNameConflict,
    /// A tool was quarantined.
    ToolQuarantined,
    /// A call probes a quarantined tool after its cool-down.
    ToolProbing,
    /// A quarantined tool was restored.
    ToolRestored,
    /// The tools of a remote source changed.
    RemoteToolsChanged,
    /// An exporter's link to its destination changed or is behind.
    ExportStatus,
    /// A warning about the host's health.
    Warning,
    /// A tool source's state changed (starting, serving, restarting, down).
    SourceStateChanged,
    /// A long call's task (MCP Tasks on `rho serve`) was made or changed status.
    TaskChanged,
    /// A server refused a request for who sent it (no token, a bad one, a scope missing).
    AccessRefused,
    /// The host's policy was put in force, swapped or removed.
    PolicyChanged,
}

/// Text that is no event type, with the types there are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no event type `{given}` (the types: {})", EventType::ALL.map(EventType::name).join(", "))]
pub struct UnknownEventType {
    /// The text given.
    pub given: String,
}

impl EventType {
    /// Every type, in the order of their variants.
    pub const ALL: [EventType; 26] = [
        EventType::AgentStart,
        EventType::AgentEnd,
        EventType::TurnStart,
        EventType::TurnEnd,
        EventType::MessageEnd,
        EventType::ToolExecutionStart,
        EventType::ToolGateWaiting,
        EventType::ToolRunning,
        EventType::ToolExecutionUpdate,
        EventType::ToolExecutionLog,
        EventType::ToolExecutionEnd,
        EventType::PluginLoaded,
        EventType::PluginLoadFailed,
        EventType::PluginReloaded,
        EventType::PluginRemoved,
        EventType::ToolNameConflict,
        EventType::ToolQuarantined,
        EventType::ToolProbing,
        EventType::ToolRestored,
        EventType::RemoteToolsChanged,
        EventType::ExportStatus,
        EventType::Warning,
        EventType::SourceStateChanged,
        EventType::TaskChanged,
        EventType::AccessRefused,
        EventType::PolicyChanged,
    ];

    /// Its place in [`EventType::ALL`].
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The `"type"` tag of events of this type.
    pub fn name(self) -> &'static str {
        match self {
            EventType::AgentStart => "agent_start",
            EventType::AgentEnd => "agent_end",
            EventType::TurnStart => "turn_start",
            EventType::TurnEnd => "turn_end",
            EventType::MessageEnd => "message_end",
            EventType::ToolExecutionStart => "tool_execution_start",
            EventType::ToolGateWaiting => "tool_gate_waiting",
            EventType::ToolRunning => "tool_running",
            EventType::ToolExecutionUpdate => "tool_execution_update",
            EventType::ToolExecutionLog => "tool_execution_log",
            EventType::ToolExecutionEnd => "tool_execution_end",
            EventType::PluginLoaded => "plugin_loaded",
            EventType::PluginLoadFailed => "plugin_load_failed",
            EventType::PluginReloaded => "plugin_reloaded",
            EventType::PluginRemoved => "plugin_removed",
            EventType::ToolNameConflict => "tool_name_conflict",
            EventType::ToolQuarantined => "tool_quarantined",
            EventType::ToolProbing => "tool_probing",
            EventType::ToolRestored => "tool_restored",
            EventType::RemoteToolsChanged => "remote_tools_changed",
            EventType::SourceStateChanged => "source_state_changed",
            EventType::ExportStatus => "export_status",
            EventType::Warning => "warning",
            EventType::TaskChanged => "task_changed",
            EventType::AccessRefused => "access_refused",
            EventType::PolicyChanged => "policy_changed",
        }
    }
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for EventType {
    type Err = UnknownEventType;

    /// The type whose `"type"` tag is `text`.
    fn from_str(text: &str) -> Result<EventType, UnknownEventType> {
        EventType::ALL
            .into_iter()
            .find(|t| t.name() == text)
            .ok_or_else(|| UnknownEventType {
                given: text.to_owned(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::EventType;

    #[test]
    fn each_type_has_its_own_name_place_and_serialized_form() {
        for (i, ty) in EventType::ALL.into_iter().enumerate() {
            assert_eq!(ty.index(), i);
            assert_eq!(ty.name().parse::<EventType>(), Ok(ty));
            assert_eq!(ty.to_string(), ty.name());
            assert_eq!(
                serde_json::to_value(ty).ok(),
                Some(serde_json::Value::from(ty.name()))
            );
            let back: Option<EventType> =
                serde_json::from_value(serde_json::Value::from(ty.name())).ok();
            assert_eq!(back, Some(ty));
        }
    }

    #[test]
    fn text_that_is_no_type_is_refused_with_the_types_there_are() {
        let error = "tool_execution_ended".parse::<EventType>().unwrap_err();
        let line = error.to_string();
        assert!(
            line.starts_with("no event type `tool_execution_ended` (the types: agent_start, "),
            "{line}"
        );
        assert!(
            line.ends_with("task_changed, access_refused, policy_changed)"),
            "{line}"
        );
        assert!(serde_json::from_str::<EventType>("\"toolexecutionend\"").is_err());
    }
}
