//! [`Host`]: the façade a host talks to. It owns the bus, the registry, the plugin directories
//! and their watchers, the runner and the gate; nothing it needs can be dropped from under it.
//!
//! ```no_run
//! use rho_core::{BusItem, DirOptions, Host, Verdict, gate_fn};
//!
//! # async fn demo() -> Result<(), rho_core::HostError> {
//! let (host, reports) = Host::builder()
//!     .plugin_dir("plugins", DirOptions::default())
//!     .watch(true) // hot reload
//!     .gate(gate_fn(|call| match call.name.as_str() {
//!         "rm_rf" => Verdict::Block("not here".into()),
//!         _ => Verdict::Allow,
//!     }))
//!     .build()
//!     .await?;
//! reports.iter().flat_map(|r| &r.errors).for_each(|e| eprintln!("{e}"));
//! let mut events = host.subscribe();
//! let result = host.call("echo", serde_json::json!({"text": "hi"})).await;
//! println!("{}: {}", result.outcome, result.text());
//! if let Some(BusItem::Event(event)) = events.recv().await {
//!     println!("{}", event.kind.type_name());
//! }
//! host.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Dropping the host stops its watchers; its isolated workers stop with their pools. `shutdown`
//! does it in order: calls in flight end (each with its one end event), then the directories shut
//! down (workers stopped, private copies removed).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;

use crate::bus::{Bus, Filter, Subscription};
use crate::error::LoadError;
use crate::gate::{Gate, GateCtx, ToolCall, Verdict, allow_all};
use crate::health::{QuarantinePolicy, ToolStats};
use crate::invoke::Tool;
use crate::journal::{Journal, JournalError};
use crate::outcome::ToolResult;
use crate::plugin::dir::{DirOptions, PluginDir, ScanReport};
use crate::registry::{RegistryError, ToolRegistry};
use crate::runner::{RunOptions, RunnerConfig, ToolRunner};
use crate::spec::ToolSpec;
use crate::watch::{DEFAULT_DEBOUNCE, DirWatcher};

/// A gate from a closure: `gate_fn(|call| Verdict::Allow)`. For a gate that waits (a person's
/// approval), see [`async_gate_fn`].
pub fn gate_fn<F>(decide: F) -> Arc<dyn Gate>
where
    F: Fn(&ToolCall) -> Verdict + Send + Sync + 'static,
{
    struct FnGate<F>(F);
    #[async_trait::async_trait]
    impl<F> Gate for FnGate<F>
    where
        F: Fn(&ToolCall) -> Verdict + Send + Sync + 'static,
    {
        async fn check(&self, call: &ToolCall, _ctx: &GateCtx) -> Verdict {
            (self.0)(call)
        }
    }
    Arc::new(FnGate(decide))
}

/// A gate from an async closure, for gates that wait (it runs inside the call's task: the wait
/// blocks neither the loop nor other calls, and never counts against the tool's timeout).
pub fn async_gate_fn<F, Fut>(decide: F) -> Arc<dyn Gate>
where
    F: Fn(ToolCall) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Verdict> + Send + 'static,
{
    struct AsyncFnGate<F>(F);
    #[async_trait::async_trait]
    impl<F, Fut> Gate for AsyncFnGate<F>
    where
        F: Fn(ToolCall) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Verdict> + Send + 'static,
    {
        async fn check(&self, call: &ToolCall, _ctx: &GateCtx) -> Verdict {
            (self.0)(call.clone()).await
        }
    }
    Arc::new(AsyncFnGate(decide))
}

/// Builds a [`Host`]: plugin directories, hot reload, the gate, the runner's settings, the
/// quarantine policy and host-native tools. Every setting has a default; `build` loads.
pub struct HostBuilder {
    dirs: Vec<(PathBuf, DirOptions)>,
    watch: bool,
    gate: Arc<dyn Gate>,
    runner: RunnerConfig,
    quarantine: Option<QuarantinePolicy>,
    tools: Vec<Arc<dyn Tool>>,
}

impl HostBuilder {
    /// Adds a plugin directory (in process or isolated, per `options`).
    pub fn plugin_dir(mut self, dir: impl AsRef<Path>, options: DirOptions) -> Self {
        self.dirs.push((dir.as_ref().to_owned(), options));
        self
    }

    /// Watches the directories and reloads what changes (default: off).
    pub fn watch(mut self, on: bool) -> Self {
        self.watch = on;
        self
    }

    /// The gate every call passes (default: [`allow_all`]).
    pub fn gate(mut self, gate: Arc<dyn Gate>) -> Self {
        self.gate = gate;
        self
    }

    /// The runner's settings (timeouts).
    pub fn runner(mut self, config: RunnerConfig) -> Self {
        self.runner = config;
        self
    }

    /// The quarantine policy (default: [`QuarantinePolicy::default`]).
    pub fn quarantine(mut self, policy: QuarantinePolicy) -> Self {
        self.quarantine = Some(policy);
        self
    }

    /// A host-native tool (it ranks before plugin tools of the same name).
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Loads every directory and starts the watchers. Returns the host and one report per
    /// directory (a plugin that failed is a line there; the others serve). `Err` only when a
    /// directory's private copy directory cannot be made, or a native tool's name is taken.
    pub async fn build(self) -> Result<(Host, Vec<ScanReport>), HostError> {
        let bus = Bus::default();
        let registry = ToolRegistry::new(bus.clone());
        if let Some(policy) = self.quarantine {
            registry.set_quarantine_policy(policy);
        }
        for tool in self.tools {
            registry.add_tool(tool)?;
        }
        let mut dirs = Vec::new();
        let mut reports = Vec::new();
        for (path, options) in self.dirs {
            let (dir, report) = registry.add_plugin_dir(&path, options).await?;
            dirs.push(dir);
            reports.push(report);
        }
        let mut watchers = Vec::new();
        if self.watch {
            for dir in &dirs {
                match dir.watch(DEFAULT_DEBOUNCE) {
                    Ok(watcher) => watchers.push(watcher),
                    Err(e) => tracing::warn!(error = %e, "a plugin directory is not watched"),
                }
            }
        }
        let runner = ToolRunner::new(registry.clone(), self.runner);
        Ok((
            Host {
                bus,
                registry,
                runner,
                gate: self.gate,
                dirs,
                _watchers: watchers,
                journal: Mutex::new(None),
                calls: AtomicU64::new(0),
            },
            reports,
        ))
    }
}

/// Why a host could not be built. One line.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// A plugin directory could not be set up.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A native tool could not be added.
    #[error(transparent)]
    Tool(#[from] RegistryError),
}

/// A rho host: plugin directories loaded (and watched), a runner, a gate and a bus. Built by
/// [`Host::builder`].
pub struct Host {
    bus: Bus,
    registry: ToolRegistry,
    runner: ToolRunner,
    gate: Arc<dyn Gate>,
    dirs: Vec<PluginDir>,
    _watchers: Vec<DirWatcher>,
    journal: Mutex<Option<Journal>>,
    calls: AtomicU64,
}

impl Host {
    /// A builder with the defaults: no directory, no watching, [`allow_all`], default runner
    /// settings and quarantine.
    pub fn builder() -> HostBuilder {
        HostBuilder {
            dirs: Vec::new(),
            watch: false,
            gate: allow_all(),
            runner: RunnerConfig::default(),
            quarantine: None,
            tools: Vec::new(),
        }
    }

    /// Calls `tool` with `args` (id `call-N`) through the gate and the runner: ends exactly once,
    /// with one `tool_execution_end` event.
    pub async fn call(&self, tool: &str, args: Value) -> ToolResult {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let call = ToolCall::new(format!("call-{n}"), tool, args);
        self.call_with(&call, &RunOptions::default()).await
    }

    /// Runs `call` with `options` (its session, its cancellation).
    pub async fn call_with(&self, call: &ToolCall, options: &RunOptions) -> ToolResult {
        self.runner.run(call, &self.gate, options).await
    }

    /// The tools served now.
    pub fn tools(&self) -> Vec<ToolSpec> {
        self.registry.tools()
    }

    /// Per-tool statistics (outcomes, latency, quarantine).
    pub fn stats(&self) -> Vec<ToolStats> {
        self.registry.stats()
    }

    /// Every event from now on. Ends when the host is dropped.
    pub fn subscribe(&self) -> Subscription {
        self.bus.subscribe()
    }

    /// The events `filter` lets through, from now on.
    pub fn subscribe_filtered(&self, filter: Filter) -> Subscription {
        self.bus.subscribe_filtered(filter)
    }

    /// Writes every event from now on to the JSON-lines journal at `path` (kept by the host).
    pub fn journal(&self, path: &Path) -> Result<(), JournalError> {
        let journal = Journal::attach(&self.bus, path)?;
        *self.journal.lock().unwrap_or_else(PoisonError::into_inner) = Some(journal);
        Ok(())
    }

    /// Rescans every directory now (what watching does on a change).
    pub async fn reload(&self) -> Vec<ScanReport> {
        let mut reports = Vec::new();
        for dir in &self.dirs {
            reports.push(dir.scan().await);
        }
        reports
    }

    /// Stops the host: calls in flight end at once ("the host is stopping"), each with its end
    /// event (2 s at most), the journal is synced, workers stop and private copies are removed.
    pub async fn shutdown(&self) {
        self.runner.stop("the host shut down");
        if !self.runner.stopped(Duration::from_secs(2)).await {
            tracing::warn!(in_flight = self.runner.in_flight(), "calls still running");
        }
        let journal = self
            .journal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(journal) = journal
            && let Err(e) = journal.sync(Duration::from_secs(1))
        {
            tracing::warn!(error = %e, "syncing the journal");
        }
        for dir in &self.dirs {
            dir.shut_down().await;
        }
    }

    /// The bus (for subscribers that need more than [`Host::subscribe`]).
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// The registry.
    pub fn registry(&self) -> &ToolRegistry {
        &self.registry
    }

    /// The runner.
    pub fn runner(&self) -> &ToolRunner {
        &self.runner
    }
}
