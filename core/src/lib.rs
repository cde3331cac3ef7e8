//! rho's host library: plugin loading, the tool runner, the agent loop and the event bus.
//!
//! ```no_run
//! use std::path::Path;
//! use rho_core::{Bus, ToolCall, ToolRegistry, ToolRunner, RunnerConfig, RunOptions, allow_all};
//!
//! # async fn demo() {
//! let bus = Bus::default();
//! let registry = ToolRegistry::new(bus.clone());
//! let (_dir, report) = registry
//!     .add_plugin_dir(Path::new("plugins-dir"), Default::default())
//!     .await
//!     .expect("a private copy directory");
//! for line in &report.errors {
//!     eprintln!("{line}"); // one line per plugin that failed; the others serve
//! }
//! let runner = ToolRunner::new(registry, RunnerConfig::default());
//! let call = ToolCall::new("c1", "echo", serde_json::json!({"text": "hi"}));
//! let result = runner.run(&call, &allow_all(), &RunOptions::default()).await;
//! println!("{}: {}", result.outcome, result.text());
//! # }
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
pub mod invoke;
pub mod isolate;
pub mod journal;
pub mod model;
pub mod outcome;
mod panic;
pub mod plugin;
pub mod registry;
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
pub use runner::{RunOptions, RunnerConfig, ToolRunner};
pub use session::{KeepDetails, KeptDetails, Loop, LoopConfig, Message, RunSummary};
pub use spec::ToolSpec;
pub use watch::{DEFAULT_DEBOUNCE, DirWatcher, WatchError};
