//! The settings of a runner ([`RunnerConfig`]) and of one call ([`CallOptions`]), and the time
//! limits they give a tool: its total timeout and its idle limit.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

pub use tokio_util::sync::CancellationToken;

use crate::call::ask::Answerer;
use crate::call::gate::Gate;
use rho_protocol::ToolSpec;

/// The runner's settings.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// The timeout of a tool that has none of its own.
    pub default_timeout: Duration,
    /// Timeouts the host sets per tool name; they win over the tool's own.
    pub timeout_overrides: HashMap<String, Duration>,
    /// Idle limits the host sets per tool name; they win over the tool's own (a call's own,
    /// [`CallOptions::idle_timeout`], wins over both). A call that sends no partial update for
    /// this long ends `timed_out`, under its total timeout.
    pub idle_timeout_overrides: HashMap<String, Duration>,
    /// How long the gate may take before `tool_gate_waiting` is published.
    pub gate_waiting_after: Duration,
    /// The longest timeout a tool may declare for itself (a plugin must not opt out of the
    /// host's timeout); the host's own overrides are not capped.
    pub max_tool_timeout: Duration,
    /// The host's result limit, in bytes of answer text: longer text is cut with a note for the
    /// model, the whole kept in [`ToolResult::full_text`](crate::ToolResult::full_text) and the end event. A tool's own limit
    /// applies when it is smaller. `None`: no limit but the tools' own.
    pub max_result_bytes: Option<usize>,
    /// How long plugin files still loading are waited for: by [`HostBuilder::build`](crate::HostBuilder::build)
    /// (it returns once every file has loaded or failed, or after this long, naming those still
    /// loading), and by a call of a tool name not known yet while some file is still loading
    /// (after this long it ends `unknown_tool`, naming the files still loading). A call of a tool
    /// already loaded never waits.
    pub load_wait: Duration,
    /// How long a tool's question to the user may stay open ([`crate::Answerer`]): past it the
    /// tool reads `Reply::Cancelled` and goes on. The call's timeout is paused meanwhile.
    pub ask_timeout: Duration,
}

/// The default [`RunnerConfig::load_wait`]: 2 s.
pub const DEFAULT_LOAD_WAIT: Duration = Duration::from_secs(2);

impl Default for RunnerConfig {
    /// A 60 s default timeout, no overrides, `tool_gate_waiting` after 100 ms, tools' own
    /// timeouts capped at 10 minutes, no result limit but the tools' own, loads waited for 2 s,
    /// questions open at most 10 minutes.
    fn default() -> Self {
        RunnerConfig {
            default_timeout: Duration::from_secs(60),
            timeout_overrides: HashMap::new(),
            idle_timeout_overrides: HashMap::new(),
            gate_waiting_after: Duration::from_millis(100),
            max_tool_timeout: Duration::from_secs(600),
            max_result_bytes: None,
            load_wait: DEFAULT_LOAD_WAIT,
            ask_timeout: Duration::from_secs(600),
        }
    }
}

/// Receives one call's partial updates, in order, each cut at
/// [`MAX_UPDATE_BYTES`](crate::MAX_UPDATE_BYTES): see
/// [`CallOptions::on_update`].
pub type UpdateHook = Arc<dyn Fn(&str) + Send + Sync>;

/// Receives one call's log lines with their levels, in order, each cut at
/// [`MAX_UPDATE_BYTES`](crate::MAX_UPDATE_BYTES): see [`CallOptions::on_log`].
pub type LogHook = Arc<dyn Fn(rho_plugin_api::LogLevel, &str) + Send + Sync>;

/// Options of one call beyond its id, tool and arguments. Every field is optional; the default
/// runs the call in no session, behind the host's gate, cancelled by nothing but its timeout.
///
/// ```
/// use rho_runtime::{CallOptions, CancellationToken};
/// let cancel = CancellationToken::new();
/// let options = CallOptions {
///     session_id: Some("s1".into()),
///     cancel: Some(cancel.clone()),
///     on_update: Some(std::sync::Arc::new(|partial: &str| eprintln!("{partial}"))),
///     ..CallOptions::default()
/// };
/// # let _ = options;
/// ```
#[derive(Clone, Default)]
pub struct CallOptions {
    /// The session the call belongs to (its events carry it).
    pub session_id: Option<String>,
    /// Cancels the call from outside (a client's cancellation): it ends `error`, the tool's
    /// cancellation flag is set and its task aborted.
    pub cancel: Option<CancellationToken>,
    /// The gate of this call instead of the host's (for example one that asks the client that
    /// sent it).
    pub gate: Option<Arc<dyn Gate>>,
    /// Who answers this call's questions to the user instead of the host's answerer (for
    /// example an MCP client's elicitation).
    pub answerer: Option<Arc<dyn Answerer>>,
    /// Called with each partial update of this call as its `tool_execution_update` event is
    /// published; never after the call's `tool_execution_end`. It runs on the plugin's thread (or the worker's
    /// reader): hand the text on (a channel) and return.
    pub on_update: Option<UpdateHook>,
    /// Called with each log line of this call as its `tool_execution_log` event is published,
    /// in order with its updates; never after the call's `tool_execution_end`. It runs where
    /// [`on_update`](Self::on_update) does: hand the line on and return.
    pub on_log: Option<LogHook>,
    /// The call's W3C trace context (`traceparent`: from an MCP request's
    /// `_meta.traceparent`, or the host's own tracing), handed on to the tool
    /// ([`ToolCtx::traceparent`](crate::ToolCtx::traceparent), a plugin's `Ctx::traceparent`). One that is not valid
    /// ([`is_valid_traceparent`](crate::is_valid_traceparent)) is dropped.
    pub traceparent: Option<String>,
    /// This call's idle limit, instead of the host's or the tool's: it ends `timed_out` once it
    /// has sent no partial update for this long (each update, and each answered question, starts
    /// the wait again), under its total timeout.
    pub idle_timeout: Option<Duration>,
    /// How the call reached the host (a policy may read it): [`Via::Embedded`] by default.
    pub via: crate::Via,
}

impl RunnerConfig {
    /// The total timeout of a call of the tool `spec`: the host's override, else the tool's own
    /// (at most [`RunnerConfig::max_tool_timeout`]), else the default.
    pub fn timeout_for(&self, spec: &ToolSpec) -> Duration {
        let own = spec
            .timeout_ms
            .map(|ms| Duration::from_millis(ms).min(self.max_tool_timeout));
        self.timeout_overrides
            .get(&spec.name)
            .copied()
            .or(own)
            .unwrap_or(self.default_timeout)
    }

    /// The idle limit of a call of the tool `spec` with `options`: the call's own, else the
    /// host's override, else the tool's own (at most [`RunnerConfig::max_tool_timeout`]);
    /// `None`: none (the total timeout alone).
    pub fn idle_timeout_for(&self, spec: &ToolSpec, options: &CallOptions) -> Option<Duration> {
        let own = spec
            .idle_timeout_ms
            .map(|ms| Duration::from_millis(ms).min(self.max_tool_timeout));
        options
            .idle_timeout
            .or_else(|| self.idle_timeout_overrides.get(&spec.name).copied().or(own))
    }
}
