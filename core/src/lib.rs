//! rho's host library: plugin loading, the tool runner, the agent loop and the event bus.
//!
//! [`Host`] is the façade you'll be talking to:
//!
//! ```no_run
//! use rho_core::{DirOptions, Host, Verdict, gate_fn};
//!
//! # async fn demo() -> Result<(), rho_core::HostError> {
//! let (host, reports) = Host::builder()
//!     .plugin_dir("plugins", DirOptions::default()) // Isolation::Process for untrusted plugins
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
#![warn(missing_docs)]

pub mod bus;
pub mod details;
pub mod error;
pub mod events;
pub mod gate;
mod health;
mod host;
pub mod invoke;
pub mod isolate;
pub mod journal;
pub mod model;
pub mod outcome;
mod panic;
pub mod plugin;
pub mod registry;
mod rules;
pub mod runner;
pub mod session;
pub mod spec;
mod validate;
pub mod watch;

pub use bus::{Bus, BusItem, Filter, Subscription};
pub use error::LoadError;
pub use events::{Event, EventKind, OutputView};
pub use gate::{AllowAll, DenyList, Gate, GateCtx, ToolCall, Verdict, allow_all};
pub use health::{QuarantinePolicy, ToolStats, percentile};
pub use host::{Host, HostBuilder, HostError, async_gate_fn, gate_fn};
pub use invoke::{Tool, ToolCtx};
pub use isolate::sandbox::{Grants, Identity, SandboxReport};
pub use isolate::{WorkerLimits, WorkerOptions};
pub use journal::Journal;
pub use model::{AssistantTurn, Model, ModelError, ScriptedModel};
pub use outcome::{CrashReason, Outcome, Reply, ToolResult, crash_text, timeout_text, to_result};
pub use plugin::dir::{DirOptions, Isolation, PluginDir, ScanReport};
pub use plugin::load::PluginInfo;
pub use plugin::trust::Trust;
pub use registry::{RegistryError, ResolvedTool, ToolRegistry};
/// The plugin API this host speaks, for hosts and tools that need its ABI types.
pub use rho_plugin_api as plugin_api;
pub use rho_plugin_api::{Answer, Image, Output, ToolError};
pub use rules::{Action, Asker, GateRule, RuleGate, pattern_matches};
pub use runner::{RunOptions, RunnerConfig, ToolRunner};
pub use session::{KeepDetails, KeptDetails, Loop, LoopConfig, Message, RunSummary};
pub use spec::ToolSpec;
pub use watch::{DEFAULT_DEBOUNCE, DirWatcher, WatchError};
