//! rho's host library: plugin loading, the tool runner, the agent loop and the event bus.
//!
//! [`Host`] is the façade you'll be talking to:
//!
//! ```no_run
//! use rho_runtime::{DirOptions, Host, Verdict, gate_fn};
//!
//! # async fn demo() -> Result<(), rho_runtime::HostError> {
//! let (host, reports) = Host::builder()
//!     .plugin_dir("plugins", DirOptions::default()) // sandboxed workers; in_process() if trusted
//!     .watch(true)                                  // hot reload
//!     .gate(gate_fn(|call| if call.name == "rm_rf" { Verdict::Block("no".into()) } else { Verdict::Allow }))
//!     .build()
//!     .await?;
//! reports.iter().flat_map(|r| &r.errors).for_each(|e| eprintln!("{e}")); // the others serve
//! let mut events = host.subscribe();                                        // every event
//! let result = host.call("echo", serde_json::json!({"text": "hi"})).await;
//! println!("{}: {} ({:?})", result.outcome, result.text(), events.recv().await);
//! host.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Every call ends exactly once, with a typed [`Outcome`] and one `tool_execution_end` event,
//! whatever the plugin, the gate or the operating system does.
//!
//! # Which one when
//!
//! The crate's names are flat (one path each); by what you want to do:
//!
//! - **Build a host**: [`Host::builder`] ([`HostBuilder`]), from a file with [`HostConfig`]
//!   (`.config(&config)`). Plugin directories take [`DirOptions`] (isolated by default,
//!   [`DirOptions::in_process`] for your own code; [`WorkerOptions`] for the workers); other
//!   tools come as a native [`Tool`] (`.tool(..)`) or a [`ToolSource`] (`.source(..)`: MCP
//!   servers in `rho-mcp`, other hosts in `rho-bridge-nats`), components through a
//!   [`ComponentEngine`] (`rho-runtime-wasm`). Call [`run_if_worker`] first thing in `main`.
//! - **Decide who may run what** (a gate runs before every call, in the call's task):
//!   - a plain function of the call: [`gate_fn`]; one that awaits (a UI, a biometric prompt):
//!     [`async_gate_fn`];
//!   - allow / deny / ask by tool name and hints, as `rho.toml`'s `[[gate]]` says: [`RuleGate`]
//!     of [`GateRule`]s, whose `ask` goes to an [`Asker`] (any async closure of a
//!     [`ToolCall`] to a [`Verdict`] is one);
//!   - your own type with state: implement [`Gate`]; a fixed list of names: [`DenyList`];
//!     everything: [`allow_all`] (the default).
//!
//!   [`Asker`] asks *whether a call may run*; [`Answerer`] answers *a tool's own question*
//!   ([`Question`] → [`Reply`], `ctx.ask` in a plugin): set one with
//!   [`HostBuilder::answerer`] or per call ([`CallOptions::answerer`]); without one, tools read
//!   [`NO_ONE_TO_ASK`].
//! - **Call**: [`Host::call`] for the common case; [`Host::call_with`] with a [`ToolCall`] and
//!   [`CallOptions`] (session, cancellation, a per-call gate, update and log hooks, trace
//!   context). Every call ends with one [`ToolResult`] of one [`Outcome`]; a model's loop over
//!   calls is [`Loop`] with a [`Model`].
//! - **Follow what happens**: [`Host::subscribe`] (a [`Subscription`] of [`BusItem`]s: every
//!   [`Event`], told when it lagged) or [`Host::subscribe_filtered`] with a [`Filter`] of
//!   [`EventType`]s; a [`Sink`] on the [`Bus`] sees every event in order inside `publish` (what
//!   [`Journal`] is: a host's journal file, `HostBuilder::journal`, read back with
//!   [`read_range`] or [`Host::replay`]); per-tool health from events: [`HealthView`], from the
//!   host: [`Host::stats`] ([`ToolStats`]).
//! - **What crosses from below**: the vocabulary of a call is rho-protocol's, re-exported here
//!   ([`ToolSpec`], [`ToolResult`], [`Failure`], ...; all of it as [`protocol`]); a plugin's
//!   words are rho-plugin-api's ([`Answer`], [`Block`], ...; all of it as [`plugin_api`]).
//!   rho-protocol and rho-worker are this crate's internals: depend on them only through it.
#![warn(missing_docs)]

mod agent;
mod bus;
mod call;
mod config;
mod host;
mod isolate;
mod millis;
mod plugin;
mod registry;

pub use agent::model::{AssistantTurn, KeptDetails, Message, Model, ModelError, ScriptedModel};
pub use agent::session::{Loop, RunSummary};
pub use agent::settings::{CallOrder, KeepDetails, LoopConfig};
pub use agent::stop::{StopReason, UnknownStopReason};
pub use bus::event_type::{EventType, UnknownEventType};
pub use bus::events::{
    CallRef, ContentView, Event, EventKind, ImageView, MAX_EVENT_TEXT, OutputView, Runs, ServedBy,
    SourceState, TaskStatus,
};
pub use bus::journal::{Earlier, INDEX_EVERY, Journal, JournalError, Replay, read_range};
pub use bus::{Bus, BusItem, DEFAULT_CAPACITY, Filter, RECENT_IMAGE_BYTES, Sink, Subscription};
pub use call::ask::{Answerer, NO_ONE_TO_ASK, NoOneToAsk, no_one_to_ask};
pub use call::gate::{DenyList, Gate, GateCtx, ToolCall, Verdict, allow_all};
pub use call::invoke::{Tool, ToolCtx, is_valid_traceparent};
pub use call::limits::{LimitRule, Limits, Per, Rate, source_name};
pub use call::options::{CallOptions, CancellationToken, LogHook, RunnerConfig, UpdateHook};
pub use call::policy::{Policy, PolicyAction, PolicyQuery, Via};
pub use call::principal::{AuthMethod, Principal};
pub use call::rules::{Action, Asker, GateRule, RuleGate, pattern_matches};
pub use call::sender::MAX_UPDATE_BYTES;
pub use config::{
    ConfigError, HostConfig, MAX_PARALLEL, MAX_TIMEOUT_MS, PluginSource, RunnerSettings,
    resolve_path,
};
pub use host::{Host, HostBuilder, HostError, async_gate_fn, gate_fn};
pub use isolate::WorkerOptions;
pub use isolate::command::{SandboxedChild, SandboxedCommand, SpawnError};
pub use plugin::component::{ComponentEngine, LoadedComponent};
pub use plugin::lock::{LOCK_VERSION, LockError, LockedPlugin, PluginLock};
pub use plugin::options::{DirOptions, Isolation};
pub use plugin::scan::ScanReport;
pub use plugin::watch::DEFAULT_DEBOUNCE;
pub use registry::RegistryError;
pub use registry::health::{QuarantinePolicy, ToolStats};
pub use registry::health_view::HealthView;
pub use registry::origin::Origin;
pub use registry::remote::{RemoteCall, RemoteSource, RemoteTool, RemoteToolEntry, ToolSource};
/// The plugin API this host speaks, for hosts and tools that need its ABI types.
pub use rho_plugin_api as plugin_api;
pub use rho_plugin_api::declare::TaskSupport;
pub use rho_plugin_api::{
    Answer, Audio, Block, Capabilities, Image, LogLevel, Output, Question, Reply, Resource,
    ResourceContents, ResourceLink, ToolError, ToolHints,
};

/// The vocabulary of a call and its end, shared with workers and tools: `rho-protocol`.
pub use rho_protocol as protocol;
pub use rho_protocol::details::{parse_within, text_depth};
pub use rho_protocol::{
    CrashReason, Decision, Failure, Grants, Identity, MAX_DETAILS_BYTES, MAX_GRANTS, MAX_IMAGES,
    Outcome, SandboxReport, ToolResult, ToolSpec, WasmSandbox, WorkerLimits,
};
pub use rho_worker::loader::trust::{PluginKind, Trust, plugin_kind};
pub use rho_worker::loader::{PluginInfo, sha256_hex};
pub use rho_worker::sandbox::host::secure_temp_dir;
pub use rho_worker::{LoadError, run_if_worker};
