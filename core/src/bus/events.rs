//! The typed events published on the [`crate::Bus`]. Serialized, each is one JSON object with a
//! `"type"` tag, its `seq`, a timestamp `ts_ms` (Unix milliseconds) and the `session_id` where
//! there is one.

use rho_plugin_api::{Block, Output};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::bus::event_type::EventType;
use rho_protocol::Outcome;

/// One event as subscribers receive it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Position on its bus: 1 for the first event, then +1 for each, without gaps.
    pub seq: u64,
    /// When it was published, Unix milliseconds.
    pub ts_ms: u64,
    /// The session it belongs to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What served a call ([`EventKind::ToolExecutionEnd`]): where its tool comes from and where
/// its code ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServedBy {
    /// Where the tool comes from.
    pub origin: crate::Origin,
    /// Where its code ran.
    pub runs: Runs,
}

/// Where a tool's code runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Runs {
    /// On the host's own threads: a native tool, an in-process plugin.
    Host,
    /// In a sandboxed worker process of the host's.
    Worker,
    /// Where its source runs it: an MCP server's process, another host over NATS, the host's
    /// component engine.
    Source,
}

/// An image as events show it: its mime type and size (the bytes stay in the session).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageView {
    /// e.g. `image/png`.
    pub mime_type: String,
    /// Size of the encoded image.
    pub bytes: usize,
    /// SHA-256 of its bytes, lowercase hex: [`Bus::image`](crate::Bus::image) hands back the
    /// bytes of recent ones.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sha256: String,
}

/// The most bytes of one text an event keeps (a call's output text, its whole text when cut):
/// 1 MiB. Past it the event holds the first 1 MiB and a note of how much was left out; the
/// call's [`ToolResult`](crate::ToolResult) keeps the whole. With the answer codec's limits
/// ([`MAX_IMAGES`](crate::MAX_IMAGES) image summaries, details and structured content of
/// [`MAX_DETAILS_BYTES`](crate::MAX_DETAILS_BYTES) each), this bounds what one end event holds on
/// the bus and writes to a journal, whatever the tool answered.
pub const MAX_EVENT_TEXT: usize = 1 << 20;

/// `text` as events keep it: whole up to [`MAX_EVENT_TEXT`], else cut at a character boundary
/// with a note saying how much was left out.
pub(crate) fn event_text(text: &str) -> String {
    if text.len() <= MAX_EVENT_TEXT {
        return text.to_owned();
    }
    let at = (0..=MAX_EVENT_TEXT)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    format!(
        "{}\n[rho: events keep {at} of {} bytes of this text; the call's result has the whole]",
        &text[..at],
        text.len()
    )
}

/// A call's output as events show it: the text (up to [`MAX_EVENT_TEXT`]), the images
/// summarized, and the other blocks of an answer of blocks summarized.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputView {
    /// The text the model reads.
    pub text: String,
    /// The images, summarized.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageView>,
    /// The audio, embedded resources and links of an answer of blocks, in order, summarized.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<ContentView>,
}

/// A block other than text and images as events show it (the bytes stay in the result).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentView {
    /// Audio.
    Audio {
        /// e.g. `audio/wav`.
        mime_type: String,
        /// Size of the encoded audio.
        bytes: usize,
    },
    /// An embedded resource.
    Resource {
        /// Its URI.
        uri: String,
        /// Its mime type.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// Size of its text or bytes.
        bytes: usize,
    },
    /// A link to a resource.
    Link {
        /// Its URI.
        uri: String,
        /// Its name.
        name: String,
    },
}

impl From<&Output> for OutputView {
    fn from(output: &Output) -> Self {
        OutputView {
            text: event_text(&output.text()),
            images: output
                .images()
                .iter()
                .map(|i| ImageView {
                    mime_type: i.mime_type.clone(),
                    bytes: i.bytes.len(),
                    sha256: rho_worker::loader::sha256_hex(&i.bytes),
                })
                .collect(),
            content: output
                .blocks()
                .iter()
                .filter_map(|block| match block {
                    Block::Text(_) | Block::Image(_) => None,
                    Block::Audio(audio) => Some(ContentView::Audio {
                        mime_type: audio.mime_type.clone(),
                        bytes: audio.bytes.len(),
                    }),
                    Block::Resource(resource) => Some(ContentView::Resource {
                        uri: resource.uri.clone(),
                        mime_type: resource.mime_type.clone(),
                        bytes: block.payload().len(),
                    }),
                    Block::Link(link) => Some(ContentView::Link {
                        uri: link.uri.clone(),
                        name: link.name.clone(),
                    }),
                })
                .collect(),
        }
    }
}

/// A tool call as a `message_end` event lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRef {
    /// The call's id.
    pub id: String,
    /// The tool asked for.
    pub name: String,
}

/// What happened. The variant's name, in snake case, is the event's `"type"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// A session's loop started.
    AgentStart {},
    /// A session's loop ended.
    AgentEnd {
        /// Turns the model took.
        turns: u32,
        /// Why it stopped (`done`, `max_turns` or `model_error: ...` on the wire).
        reason: crate::StopReason,
    },
    /// A turn started (the model is asked).
    TurnStart {
        /// The turn's number, from 1.
        turn: u32,
    },
    /// A turn ended (all its tool calls ended).
    TurnEnd {
        /// The turn's number.
        turn: u32,
        /// How many tool calls it made.
        tool_calls: usize,
    },
    /// A message was completed and added to the session.
    MessageEnd {
        /// `assistant` (tool results have their own events).
        role: String,
        /// The message's text.
        text: String,
        /// The tool calls it asks for.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<CallRef>,
    },
    /// A tool call started (before validation and the gate).
    ToolExecutionStart {
        /// The call's id.
        call_id: String,
        /// The tool asked for.
        tool: String,
        /// Its arguments.
        args: std::sync::Arc<Value>,
        /// The call's W3C trace context, when its caller gave a valid one
        /// ([`CallOptions::traceparent`](crate::CallOptions::traceparent)): what a trace
        /// exporter parents the call's span with.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        traceparent: Option<String>,
        /// Who asked for it, when the host knows ([`ToolCall::principal`](crate::ToolCall)).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        principal: Option<std::sync::Arc<crate::Principal>>,
    },
    /// The gate has not answered within a short moment (a screen can show "waiting for approval").
    ToolGateWaiting {
        /// The call's id.
        call_id: String,
        /// The tool.
        tool: String,
    },
    /// The gate allowed the call; its timeout clock started.
    ToolRunning {
        /// The call's id.
        call_id: String,
        /// The tool.
        tool: String,
        /// The timeout now running.
        timeout_ms: u64,
    },
    /// A running tool sent a partial update.
    ToolExecutionUpdate {
        /// The call's id.
        call_id: String,
        /// The tool.
        tool: String,
        /// The update's text.
        partial: String,
    },
    /// A running tool wrote a log line (never after its call's end).
    ToolExecutionLog {
        /// The call's id.
        call_id: String,
        /// The tool.
        tool: String,
        /// How much it matters.
        level: rho_plugin_api::LogLevel,
        /// The line, cut at [`MAX_UPDATE_BYTES`](crate::MAX_UPDATE_BYTES) with a note.
        message: String,
    },
    /// A tool call ended: exactly one per call, whatever happened.
    ToolExecutionEnd {
        /// The call's id.
        call_id: String,
        /// The tool asked for.
        tool: String,
        /// How it ended.
        outcome: Outcome,
        /// What the model reads.
        output: OutputView,
        /// Whether the model reads it as an error.
        is_error: bool,
        /// Structured content of an `ok` answer (checked against the tool's output schema).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        structured: Option<Value>,
        /// Details for screens.
        details: Option<Value>,
        /// The whole text, when `output`'s was cut at the tool's result limit (up to
        /// [`MAX_EVENT_TEXT`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        full_text: Option<String>,
        /// From start to end, milliseconds.
        duration_ms: f64,
        /// What served the call, as it was when the call ran; `None` when no tool did (an
        /// unknown tool, a host that was stopping). A reader of a journal, or an exporter that
        /// turns this event into a span after the host is gone, reads the truth here.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        served_by: Option<ServedBy>,
        /// Who asked for it, as at its start.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        principal: Option<std::sync::Arc<crate::Principal>>,
        /// What the host's policy and limits decided of it, when any are in force: allowed by
        /// which policies, forbidden by which, or over which limit.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        decision: Option<crate::Decision>,
    },
    /// A plugin was loaded and its tools registered.
    PluginLoaded {
        /// The plugin's name.
        plugin: String,
        /// Its version.
        version: String,
        /// The file.
        path: String,
        /// Its tools, as the registry holds them (hints, output schemas and limits included).
        /// Journals written before hints existed hold names here: they read as specs with only
        /// a name.
        #[serde(deserialize_with = "specs_or_names")]
        tools: Vec<crate::ToolSpec>,
        /// The build: SHA-256 of the file's content (builds of one version differ here).
        #[serde(default)]
        sha256: String,
        /// Whether it runs out of process.
        isolated: bool,
        /// Isolated plugins: what of the sandbox is in force (see [`SandboxReport`](crate::SandboxReport)).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sandbox: Option<rho_protocol::SandboxReport>,
        /// What the plugin says it needs.
        #[serde(default)]
        capabilities: rho_plugin_api::Capabilities,
        /// What the host grants it (isolated plugins); `null` in process, where it has every
        /// power of the host.
        #[serde(default)]
        granted: Option<rho_protocol::Grants>,
    },
    /// A plugin file could not be loaded (or was refused); any older version keeps serving.
    PluginLoadFailed {
        /// The file.
        path: String,
        /// One line: what, which file, why.
        error: String,
    },
    /// A plugin file changed and its new version replaced the old one.
    PluginReloaded {
        /// The plugin's name.
        plugin: String,
        /// The file.
        path: String,
        /// The version replaced.
        old_version: String,
        /// The version now serving.
        new_version: String,
        /// The build replaced: SHA-256 of its content.
        #[serde(default)]
        old_sha256: String,
        /// The build now serving.
        #[serde(default)]
        new_sha256: String,
        /// Tools the new version adds.
        tools_added: Vec<String>,
        /// Tools the new version no longer has.
        tools_removed: Vec<String>,
    },
    /// A plugin file was deleted; its tools are gone.
    PluginRemoved {
        /// The plugin's name.
        plugin: String,
        /// The file.
        path: String,
        /// The tools removed.
        tools: Vec<String>,
    },
    /// Two sources offer a tool of the same name; `kept` serves it, `ignored` does not.
    ToolNameConflict {
        /// The tool's name.
        tool: String,
        /// Origin that serves it (`plugin@version` or `host`).
        kept: String,
        /// Origin that is ignored.
        ignored: String,
    },
    /// A tool failed too often and is quarantined (or quarantined again: its probe failed).
    ToolQuarantined {
        /// The tool.
        tool: String,
        /// Its origin.
        origin: String,
        /// Why: counts and the last failure, or the failed probe.
        reason: String,
        /// When a call may probe it (Unix time, milliseconds); absent: it stays quarantined
        /// until a new build or the host lifts it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        probe_after_ms: Option<u64>,
        /// Probes that failed before this quarantine.
        #[serde(default, skip_serializing_if = "is_zero")]
        failed_probes: u32,
    },
    /// A call probes a quarantined tool, its cool-down over: its end lifts the quarantine or
    /// quarantines the tool again.
    ToolProbing {
        /// The tool.
        tool: String,
        /// Its origin.
        origin: String,
        /// The probing call.
        call_id: String,
    },
    /// A quarantined tool serves again.
    ToolRestored {
        /// The tool.
        tool: String,
        /// Its origin.
        origin: String,
        /// Why (its probe answered, a new version, or the host lifted it).
        reason: String,
    },
    /// A remote source's tools changed (a node joined, left or reloaded).
    RemoteToolsChanged {
        /// The source (`nats://HOST:PORT`).
        source: String,
        /// Every tool it offers now.
        tools: Vec<String>,
        /// Tools offered now that were not (or from another origin): `name (origin)`.
        added: Vec<String>,
        /// Tools no longer offered.
        removed: Vec<String>,
    },
    /// A tool source's state changed: an MCP server starting, serving, restarting after a
    /// backoff, or down for good.
    SourceStateChanged {
        /// The source (`mcp:everything`).
        source: String,
        /// Its kind, as the source names it (`mcp stdio`).
        kind: String,
        /// Its state now.
        state: SourceState,
        /// While restarting: in how many milliseconds it is tried again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_in_ms: Option<u64>,
        /// Why, in words: how it went down, what it is waiting for (empty while serving).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        message: String,
    },
    /// How far an exporter of this bus (the NATS bridge) has got: published when it loses or
    /// regains its destination, and every few seconds while it is behind.
    ExportStatus {
        /// The exporter and its destination (`nats://HOST:PORT stream RHO_EVENTS`).
        exporter: String,
        /// Whether it reaches its destination now.
        connected: bool,
        /// The last seq its destination has confirmed (0: none yet).
        confirmed: u64,
        /// How many events of this run are not confirmed yet.
        behind: u64,
        /// Why it is not connected, if it is not.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// How many items it dropped so far (its queue full, an export that failed): an
        /// exporter that never waits (OpenTelemetry's) drops rather than falls behind.
        #[serde(default, skip_serializing_if = "is_zero")]
        dropped: u64,
    },
    /// A server refused a request for who sent it: the HTTP status (401: no usable token,
    /// 403: a scope missing), why in a few words (`token expired`, `wrong audience`, `unknown
    /// key`, never the token), and the peer address.
    AccessRefused {
        /// 401 or 403.
        status: u16,
        /// Why, in a few words.
        reason: String,
        /// The peer address.
        peer: String,
    },
    /// The host's policy was put in force, swapped for another (a reloaded file) or removed:
    /// from now on calls are decided, and lists shown, by `policy`.
    PolicyChanged {
        /// What is in force now ([`Policy::describe`](crate::Policy::describe)); `None`: no
        /// policy, everything is allowed.
        policy: Option<String>,
    },
    /// A warning about the host's health (e.g. too many plugin versions left mapped).
    Warning {
        /// The subject (a plugin, a file, a worker pool).
        subject: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// A long call's task (MCP Tasks on `rho serve`) was made or changed status. The record a
    /// restarted server reads back from its journal ([`Journal::earlier`](crate::Journal::earlier))
    /// to answer for the tasks an earlier run made: one when the task is made, one at each
    /// change, the last with its end.
    TaskChanged {
        /// The task's id (unguessable: who holds it may read the task).
        task_id: String,
        /// Who may read it: a digest of the session or token that made it, never the secret.
        owner: String,
        /// Its status now.
        status: TaskStatus,
        /// The tool it runs.
        tool: String,
        /// Its call's id.
        call_id: String,
        /// When it was made, Unix milliseconds.
        created_ms: u64,
        /// How long after it was made it stays readable.
        ttl_ms: u64,
        /// Its end as the server answers it, for `completed` (the tool's result) and `failed`
        /// (the error): a JSON object.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        end: Option<Value>,
    },
}

/// Where a task is ([`EventKind::TaskChanged`]): MCP Tasks' statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TaskStatus {
    /// Its call runs.
    Working,
    /// Its tool asked a question and waits for the answer.
    InputRequired,
    /// Its call ended (with any outcome: the result says which).
    Completed,
    /// It could not run, or a server restart interrupted it.
    Failed,
    /// Its client cancelled it.
    Cancelled,
}

impl TaskStatus {
    /// Whether the task has ended (nothing changes it any more).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }
}

impl EventKind {
    /// The event's `"type"` tag.
    pub fn type_name(&self) -> &'static str {
        self.event_type().name()
    }

    /// The event's type: what a [`Filter`](crate::Filter) names.
    pub fn event_type(&self) -> EventType {
        match self {
            EventKind::AgentStart {} => EventType::AgentStart,
            EventKind::AgentEnd { .. } => EventType::AgentEnd,
            EventKind::TurnStart { .. } => EventType::TurnStart,
            EventKind::TurnEnd { .. } => EventType::TurnEnd,
            EventKind::MessageEnd { .. } => EventType::MessageEnd,
            EventKind::ToolExecutionStart { .. } => EventType::ToolExecutionStart,
            EventKind::ToolGateWaiting { .. } => EventType::ToolGateWaiting,
            EventKind::ToolRunning { .. } => EventType::ToolRunning,
            EventKind::ToolExecutionUpdate { .. } => EventType::ToolExecutionUpdate,
            EventKind::ToolExecutionLog { .. } => EventType::ToolExecutionLog,
            EventKind::ToolExecutionEnd { .. } => EventType::ToolExecutionEnd,
            EventKind::PluginLoaded { .. } => EventType::PluginLoaded,
            EventKind::PluginLoadFailed { .. } => EventType::PluginLoadFailed,
            EventKind::PluginReloaded { .. } => EventType::PluginReloaded,
            EventKind::PluginRemoved { .. } => EventType::PluginRemoved,
            EventKind::ToolNameConflict { .. } => EventType::ToolNameConflict,
            EventKind::ToolQuarantined { .. } => EventType::ToolQuarantined,
            EventKind::ToolProbing { .. } => EventType::ToolProbing,
            EventKind::ToolRestored { .. } => EventType::ToolRestored,
            EventKind::RemoteToolsChanged { .. } => EventType::RemoteToolsChanged,
            EventKind::SourceStateChanged { .. } => EventType::SourceStateChanged,
            EventKind::ExportStatus { .. } => EventType::ExportStatus,
            EventKind::TaskChanged { .. } => EventType::TaskChanged,
            EventKind::Warning { .. } => EventType::Warning,
            EventKind::AccessRefused { .. } => EventType::AccessRefused,
            EventKind::PolicyChanged { .. } => EventType::PolicyChanged,
        }
    }

    /// The tool the event is about, if it is about one.
    pub fn tool(&self) -> Option<&str> {
        match self {
            EventKind::ToolExecutionStart { tool, .. }
            | EventKind::ToolGateWaiting { tool, .. }
            | EventKind::ToolRunning { tool, .. }
            | EventKind::ToolExecutionUpdate { tool, .. }
            | EventKind::ToolExecutionLog { tool, .. }
            | EventKind::ToolExecutionEnd { tool, .. }
            | EventKind::ToolNameConflict { tool, .. }
            | EventKind::ToolQuarantined { tool, .. }
            | EventKind::ToolProbing { tool, .. }
            | EventKind::ToolRestored { tool, .. } => Some(tool),
            _ => None,
        }
    }

    /// The call the event is about, if it is about one.
    pub fn call_id(&self) -> Option<&str> {
        match self {
            EventKind::ToolExecutionStart { call_id, .. }
            | EventKind::ToolGateWaiting { call_id, .. }
            | EventKind::ToolRunning { call_id, .. }
            | EventKind::ToolExecutionUpdate { call_id, .. }
            | EventKind::ToolExecutionLog { call_id, .. }
            | EventKind::ToolExecutionEnd { call_id, .. } => Some(call_id),
            _ => None,
        }
    }
}

/// `plugin_loaded`'s tools as they are written now (specs) or as earlier journals hold them
/// (names).
fn specs_or_names<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<crate::ToolSpec>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Entry {
        Spec(Box<crate::ToolSpec>),
        Name(String),
    }
    Ok(Vec::<Entry>::deserialize(deserializer)?
        .into_iter()
        .map(|entry| match entry {
            Entry::Spec(spec) => *spec,
            Entry::Name(name) => {
                crate::ToolSpec::native(name, "", Value::Object(Default::default()))
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plugin_loaded_of_an_earlier_journal_reads_its_tool_names() {
        let line = json!({"seq": 1, "ts_ms": 0, "type": "plugin_loaded", "plugin": "echo",
            "version": "0.1.0", "path": "/p/libecho.so", "tools": ["echo"], "isolated": false});
        let event: Event = serde_json::from_value(line).unwrap();
        let EventKind::PluginLoaded { tools, .. } = event.kind else {
            panic!("not plugin_loaded")
        };
        assert_eq!(tools[0].name, "echo");
    }

    #[test]
    fn one_flat_object_with_type_tag() {
        let event = Event {
            seq: 7,
            ts_ms: 1,
            session_id: Some("s1".into()),
            kind: EventKind::ToolRunning {
                call_id: "c1".into(),
                tool: "echo".into(),
                timeout_ms: 500,
            },
        };
        let value = serde_json::to_value(&event).unwrap();
        assert_eq!(
            value,
            json!({"seq": 7, "ts_ms": 1, "session_id": "s1", "type": "tool_running",
                   "call_id": "c1", "tool": "echo", "timeout_ms": 500})
        );
        let back: Event = serde_json::from_value(value).unwrap();
        assert_eq!(back, event);
        let start = Event {
            seq: 1,
            ts_ms: 0,
            session_id: None,
            kind: EventKind::AgentStart {},
        };
        assert_eq!(
            serde_json::to_value(&start).unwrap(),
            json!({"seq": 1, "ts_ms": 0, "type": "agent_start"})
        );
        assert_eq!(start.kind.type_name(), "agent_start");
    }
}

/// The state of a tool source that runs something (an MCP server), as `source_state_changed`
/// events say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceState {
    /// Starting and initializing; its tools are not offered yet (or still those of before).
    Starting,
    /// Up: its tools serve.
    Serving,
    /// Down, tried again after a backoff (the event's `retry_in_ms`): its calls end
    /// `unavailable` meanwhile.
    Restarting,
    /// Down and not tried again (the event's message says why).
    Down,
}

impl std::fmt::Display for SourceState {
    /// `starting`, `serving`, `restarting`, `down`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SourceState::Starting => "starting",
            SourceState::Serving => "serving",
            SourceState::Restarting => "restarting",
            SourceState::Down => "down",
        })
    }
}

/// Whether `n` is zero (a field left out of an event's JSON).
fn is_zero<N: Default + PartialEq>(n: &N) -> bool {
    *n == N::default()
}
