//! [`Host`]: the façade a host talks to. It owns the bus, the registry, the plugin directories
//! and their watchers, the runner and the gate; nothing it needs can be dropped from under it.
//!
//! ```no_run
//! use rho_runtime::{BusItem, DirOptions, Host, Verdict, gate_fn};
//!
//! # async fn demo() -> Result<(), rho_runtime::HostError> {
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

use crate::agent::settings::LoopConfig;
use crate::bus::journal::{Journal, JournalError};
use crate::bus::{Bus, Filter, Subscription};
use crate::call::ask::Answerer;
use crate::call::gate::{Gate, GateCtx, ToolCall, Verdict, allow_all};
use crate::call::invoke::Tool;
use crate::call::options::{CallOptions, RunnerConfig};
use crate::call::rules::{Asker, GateRule, RuleGate};
use crate::call::runner::ToolRunner;
use crate::config::HostConfig;
use crate::plugin::component::ComponentEngine;
use crate::plugin::dir::PluginDir;
use crate::plugin::options::DirOptions;
use crate::plugin::scan::ScanReport;
use crate::plugin::watch::{DEFAULT_DEBOUNCE, DirWatcher};
use crate::registry::health::{QuarantinePolicy, ToolStats};
use crate::registry::remote::{RemoteSource, ToolSource};
use crate::registry::{RegistryError, ToolRegistry};
use rho_protocol::ToolResult;
use rho_protocol::ToolSpec;
use rho_worker::LoadError;
use rho_worker::loader::load::PluginInfo;

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
/// quarantine policy, a journal and host-native tools. Every setting has a default; `build` loads.
#[must_use = "a builder does nothing until `build`"]
pub struct HostBuilder {
    dirs: Vec<(PathBuf, DirOptions)>,
    watch: bool,
    gate: Option<Arc<dyn Gate>>,
    rules: Vec<GateRule>,
    asker: Option<Arc<dyn Asker>>,
    answerer: Option<Arc<dyn Answerer>>,
    runner: RunnerConfig,
    agent: LoopConfig,
    quarantine: Option<QuarantinePolicy>,
    journal: Option<PathBuf>,
    tools: Vec<Arc<dyn Tool>>,
    bus: Option<Bus>,
    sources: Vec<(String, Box<dyn ToolSource>)>,
    components: Option<Arc<dyn ComponentEngine>>,
    policy: Option<Arc<dyn crate::Policy>>,
    limits: Vec<crate::LimitRule>,
}

impl HostBuilder {
    /// Adds a source of tools served elsewhere (`rho_bridge_nats::NodeTools`: other hosts' tools
    /// over NATS), named `name` in events and origins; it runs from `build` until the host
    /// shuts down, after the directories in rank.
    pub fn source(mut self, name: &str, source: impl ToolSource) -> Self {
        self.sources.push((name.to_owned(), Box::new(source)));
        self
    }

    /// Adds a plugin directory (in process or isolated, per `options`). Directories rank in the
    /// order they are added: the first to offer a tool name serves it.
    pub fn plugin_dir(mut self, dir: impl AsRef<Path>, options: DirOptions) -> Self {
        self.dirs.push((dir.as_ref().to_owned(), options));
        self
    }

    /// Loads the `.wasm` files of every plugin directory as components with `engine`
    /// (`rho_runtime_wasm::WasmEngine`); without one they are not plugins. See
    /// [`ComponentEngine`] for what a component shares with a native plugin and what not.
    pub fn components(mut self, engine: impl ComponentEngine) -> Self {
        self.components = Some(Arc::new(engine));
        self
    }

    /// Watches the directories and reloads what changes (default: off). A file that lands at
    /// any time after `build` starts is loaded.
    pub fn watch(mut self, on: bool) -> Self {
        self.watch = on;
        self
    }

    /// The gate every call passes (default: the configuration's rules, else [`allow_all`]).
    /// A call may bring its own ([`CallOptions::gate`]).
    pub fn gate(mut self, gate: Arc<dyn Gate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Who "ask" rules of the configuration ask (default: nobody, so they deny). Any async
    /// closure `Fn(ToolCall) -> impl Future<Output = Verdict>` is an [`Asker`].
    pub fn asker(mut self, asker: Arc<dyn Asker>) -> Self {
        self.asker = Some(asker);
        self
    }

    /// Who answers the questions tools ask their user mid-call ([`Answerer`]; default:
    /// [`NoOneToAsk`](crate::NoOneToAsk), which declines each with a reason the tool reads).
    /// A call may bring its own ([`CallOptions::answerer`]).
    pub fn answerer(mut self, answerer: Arc<dyn Answerer>) -> Self {
        self.answerer = Some(answerer);
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

    /// Writes every event to the JSON-lines journal at `path` from the start (plugin loads
    /// included); appends to an existing file.
    pub fn journal(mut self, path: impl AsRef<Path>) -> Self {
        self.journal = Some(path.as_ref().to_owned());
        self
    }

    /// Publishes on `bus` (default: a new one): subscribe to it before `build` to see the
    /// first loads' events as well.
    pub fn bus(mut self, bus: Bus) -> Self {
        self.bus = Some(bus);
        self
    }

    /// A host-native tool (it ranks before plugin tools of the same name).
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Everything a [`HostConfig`] states: its plugin directories (after those added so far),
    /// the runner and loop settings, quarantine, gate rules (asking through
    /// [`asker`](Self::asker)). Call
    /// [`HostConfig::check`] first: `config` is taken as it is.
    pub fn config(mut self, config: &HostConfig) -> Self {
        for source in &config.plugins {
            self.dirs
                .push((source.dir.clone(), source.dir_options(&config.workers)));
        }
        self.runner = config.runner_config();
        self.agent = config.loop_config();
        self.quarantine = Some(config.quarantine);
        self.rules = config.gate.clone();
        self.limits = config.limit.clone();
        self
    }

    /// Decides every call, and every list shown to a principal, by `policy` (see
    /// [`Policy`](crate::Policy)); swap it later with [`Host::set_policy`]. None by default:
    /// everything is allowed.
    pub fn policy(mut self, policy: Arc<dyn crate::Policy>) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Counts calls against `rules` ([`Limits`](crate::Limits)), after those a configuration
    /// gave.
    pub fn limits(mut self, rules: Vec<crate::LimitRule>) -> Self {
        self.limits.extend(rules);
        self
    }

    /// Loads every directory and starts the watchers. Returns the host and one report per
    /// directory, in order (a plugin that failed is a line there, the others serve; a directory
    /// that cannot be used at all has its `dir_error`). `Err` only when the journal cannot be
    /// opened, a directory's private copy directory cannot be made, or a native tool's name is
    /// taken.
    ///
    /// It returns once every file has loaded or failed, or once
    /// [`RunnerConfig::load_wait`] (2 s by default) has passed, whichever comes first: isolated
    /// files load beside each other, and one whose load-time code is slow or hangs holds up
    /// nothing else. Such a file is named in its report's
    /// [`loading`](ScanReport::loading) (and a `warning` event); it serves as soon as it has
    /// loaded (`plugin_loaded`), or fails at its directory's `load_timeout`
    /// (`plugin_load_failed`). Meanwhile a call of a tool name not served yet waits up to
    /// `load_wait` for it. In process, glibc's loader lock makes a hanging load-time function
    /// hold every later `dlopen`: such a directory's scan still waits up to its `load_timeout`.
    pub async fn build(self) -> Result<(Host, Vec<ScanReport>), HostError> {
        let bus = self.bus.unwrap_or_default();
        let journal = match &self.journal {
            Some(path) => Some(Journal::attach(&bus, path)?),
            None => None,
        };
        let registry = ToolRegistry::new(bus.clone());
        if let Some(policy) = self.quarantine {
            registry.set_quarantine_policy(policy);
        }
        for tool in self.tools {
            registry.add_tool(tool)?;
        }
        // Every directory's loads start before any is waited for; all are waited for together,
        // up to one deadline.
        let deadline = tokio::time::Instant::now() + self.runner.load_wait;
        let mut dirs = Vec::new();
        let mut scans = Vec::new();
        for (path, options) in self.dirs {
            let (dir, scanning) = registry
                .add_plugin_dir(
                    &path,
                    options,
                    self.components.clone(),
                    self.runner.load_wait,
                )
                .await?;
            dirs.push(dir);
            scans.push(scanning);
        }
        let mut reports = Vec::new();
        for scanning in scans {
            reports.push(scanning.settle(deadline).await);
        }
        let mut watchers = Vec::new();
        if self.watch {
            for dir in &dirs {
                match dir.watch(DEFAULT_DEBOUNCE) {
                    Ok(watcher) => watchers.push(watcher),
                    Err(e) => {
                        tracing::warn!(error = %e, "a plugin directory is not watched");
                        bus.publish(
                            None,
                            crate::bus::events::EventKind::Warning {
                                subject: dir.path().display().to_string(),
                                message: format!("not watched, changes are not loaded: {e}"),
                            },
                        );
                    }
                }
            }
        }
        let gate = match (self.gate, self.rules.is_empty()) {
            (Some(gate), _) => gate,
            (None, true) => allow_all(),
            (None, false) => Arc::new(RuleGate::new(
                self.rules,
                self.asker.unwrap_or_else(|| Arc::new(Nobody)),
            )),
        };
        let runner = ToolRunner::new(registry.clone(), self.runner)
            .with_limits(crate::Limits::new(self.limits));
        runner.set_policy(self.policy);
        let sources = self
            .sources
            .into_iter()
            .map(|(name, source)| start_source(&registry, &name, source))
            .collect();
        let inner = Inner {
            sources: Mutex::new(sources),
            bus,
            registry,
            runner,
            gate,
            answerer: self
                .answerer
                .unwrap_or_else(crate::call::ask::no_one_to_ask),
            agent: self.agent,
            dirs,
            watchers: Mutex::new(watchers),
            journal: Mutex::new(journal),
            calls: AtomicU64::new(0),
        };
        Ok((
            Host {
                inner: Arc::new(inner),
            },
            reports,
        ))
    }
}

/// The asker when a host has none: "ask" rules deny.
struct Nobody;

#[async_trait::async_trait]
impl Asker for Nobody {
    async fn ask(&self, call: &ToolCall) -> Verdict {
        Verdict::Block(format!(
            "tool `{}` needs approval and this host has no one to ask",
            call.name
        ))
    }
}

/// Why a host could not be built. One line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// A plugin directory could not be set up.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A native tool could not be added.
    #[error(transparent)]
    Tool(#[from] RegistryError),
    /// The journal could not be opened.
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// A rho host: plugin directories loaded (and watched), a runner, a gate and a bus. Built by
/// [`Host::builder`].
///
/// Cheap to clone: clones share one host. It stops when the last clone is dropped (watchers end,
/// isolated workers are stopped; calls in flight still end with their end event) or, in order
/// and awaited, at [`Host::shutdown`]. A journal writes as long as its bus lives (see
/// [`Subscription`] for when that is).
#[derive(Clone)]
pub struct Host {
    inner: Arc<Inner>,
}

struct Inner {
    /// The remote sources' tasks, stopped at shutdown.
    sources: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    bus: Bus,
    registry: ToolRegistry,
    runner: ToolRunner,
    gate: Arc<dyn Gate>,
    answerer: Arc<dyn Answerer>,
    agent: LoopConfig,
    dirs: Vec<PluginDir>,
    watchers: Mutex<Vec<DirWatcher>>,
    journal: Mutex<Option<Journal>>,
    calls: AtomicU64,
}

/// Runs `source` in a task of its own, with its place in `registry`.
fn start_source(
    registry: &ToolRegistry,
    name: &str,
    source: Box<dyn ToolSource>,
) -> tokio::task::JoinHandle<()> {
    let handle = RemoteSource::new(registry, name);
    tokio::spawn(source.run(handle))
}

impl Inner {
    /// Stops the remote sources' tasks (their tools stay until the registry goes); returns them,
    /// to be awaited.
    fn stop_sources(&self) -> Vec<tokio::task::JoinHandle<()>> {
        let tasks: Vec<_> = self
            .sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
            .collect();
        for task in &tasks {
            task.abort();
        }
        tasks
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.stop_sources();
        // Calls in flight end at once (each still with its end event); the directories'
        // workers stop with their pools.
        self.runner.stop("the host was dropped");
    }
}

impl Host {
    /// A builder with the defaults: no directory, no watching, [`allow_all`], default runner
    /// settings and quarantine.
    pub fn builder() -> HostBuilder {
        HostBuilder {
            dirs: Vec::new(),
            watch: false,
            gate: None,
            rules: Vec::new(),
            asker: None,
            answerer: None,
            runner: RunnerConfig::default(),
            agent: LoopConfig::default(),
            quarantine: None,
            journal: None,
            tools: Vec::new(),
            bus: None,
            sources: Vec::new(),
            components: None,
            policy: None,
            limits: Vec::new(),
        }
    }

    /// Calls `tool` with `args` (id `call-N`) through the host's gate and the runner. Ends
    /// exactly once, with one `tool_execution_end` event.
    pub async fn call(&self, tool: &str, args: Value) -> ToolResult {
        let n = self.inner.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let call = ToolCall::new(format!("call-{n}"), tool, args);
        self.call_with(&call, &CallOptions::default()).await
    }

    /// Runs `call` (its own id) with `options`: its session, its cancellation, its own gate, a
    /// hook for its partial updates.
    ///
    /// Ends exactly once, with one `tool_execution_end` event, and is cancellation-safe: the call
    /// runs in a task of its own, so dropping this future midway cancels the call (as
    /// `options.cancel` would: it ends `error`, its tool is cancelled, an isolated worker stopped)
    /// and its end event still follows.
    pub async fn call_with(&self, call: &ToolCall, options: &CallOptions) -> ToolResult {
        let gate = options.gate.as_ref().unwrap_or(&self.inner.gate);
        let answerer = &self.inner.answerer;
        self.inner.runner.run(call, gate, answerer, options).await
    }

    /// How long a tool's question to the user may stay open
    /// ([`RunnerConfig::ask_timeout`](crate::RunnerConfig::ask_timeout)).
    pub fn ask_timeout(&self) -> std::time::Duration {
        self.inner.runner.ask_timeout()
    }

    /// The total timeout a call of the tool `spec` gets: the host's override, else the tool's
    /// own, else the default ([`RunnerConfig::timeout_for`](crate::RunnerConfig::timeout_for)).
    pub fn timeout_for(&self, spec: &ToolSpec) -> std::time::Duration {
        self.inner.runner.spec_timeout(spec)
    }

    /// The spec of the tool served now as `name`, if one is (no copy of the others).
    pub fn spec(&self, name: &str) -> Option<std::sync::Arc<ToolSpec>> {
        self.inner.registry.lookup(name).map(|tool| tool.spec)
    }

    /// Where the tool served now as `name` comes from, if one is.
    pub fn origin(&self, name: &str) -> Option<crate::Origin> {
        self.inner
            .registry
            .lookup(name)
            .map(|tool| (*tool.origin).clone())
    }

    /// The tools served now, by name.
    pub fn tools(&self) -> Vec<ToolSpec> {
        self.inner.registry.tools()
    }

    /// The tools served now that the policy in force lets `principal` list (all of them when
    /// there is no policy), by name. What a server shows a caller.
    pub fn tools_for(
        &self,
        principal: Option<&crate::Principal>,
        via: crate::Via,
    ) -> Vec<ToolSpec> {
        let tools = self.inner.registry.tools();
        let Some(policy) = self.inner.runner.policy() else {
            return tools;
        };
        tools
            .into_iter()
            .filter(|spec| self.may(&*policy, spec, principal, via))
            .collect()
    }

    /// Whether the policy in force lets `principal` list the tool served as `name` (`false`
    /// when none is; `true` for any served tool when there is no policy).
    pub fn may_list(
        &self,
        name: &str,
        principal: Option<&crate::Principal>,
        via: crate::Via,
    ) -> bool {
        let Some(tool) = self.inner.registry.lookup(name) else {
            return false;
        };
        match self.inner.runner.policy() {
            Some(policy) => self.may(&*policy, &tool.spec, principal, via),
            None => true,
        }
    }

    fn may(
        &self,
        policy: &dyn crate::Policy,
        spec: &ToolSpec,
        principal: Option<&crate::Principal>,
        via: crate::Via,
    ) -> bool {
        (self.inner.registry.lookup(&spec.name)).is_some_and(|tool| {
            crate::call::policy::may_list(policy, spec, &tool.origin, principal, via)
        })
    }

    /// Puts `policy` in force for every call and list from now on (`None`: no policy,
    /// everything allowed), and publishes `policy_changed`. Calls already past their decision
    /// keep it.
    pub fn set_policy(&self, policy: Option<Arc<dyn crate::Policy>>) {
        let described = policy.as_ref().map(|p| p.describe());
        self.inner.runner.set_policy(policy);
        self.inner.bus.publish(
            None,
            crate::bus::events::EventKind::PolicyChanged { policy: described },
        );
    }

    /// The policy in force now, if any.
    pub fn policy_in_force(&self) -> Option<Arc<dyn crate::Policy>> {
        self.inner.runner.policy()
    }

    /// The plugins loaded now, directory by directory.
    pub async fn plugins(&self) -> Vec<PluginInfo> {
        let mut plugins = Vec::new();
        for dir in &self.inner.dirs {
            plugins.extend(dir.plugins().await);
        }
        plugins
    }

    /// Per-tool statistics (outcomes, latency, quarantine).
    pub fn stats(&self) -> Vec<ToolStats> {
        self.inner.registry.stats()
    }

    /// Lifts the quarantine of `tool`; returns whether it was quarantined.
    pub fn lift_quarantine(&self, tool: &str) -> bool {
        self.inner.registry.lift_quarantine(tool)
    }

    /// Every event from now on. The subscription ends (`recv` gives `None`) when the bus is gone:
    /// the host's last clone dropped, every call it ran ended, no plugin thread still holding a
    /// call's context (an in-process tool that ignores its timeout keeps it), and no [`Bus`]
    /// clone of your own (given to [`HostBuilder::bus`] or taken from [`Host::bus`]) left.
    pub fn subscribe(&self) -> Subscription {
        self.inner.bus.subscribe()
    }

    /// The events `filter` lets through, from now on; ends as [`Host::subscribe`] does.
    pub fn subscribe_filtered(&self, filter: Filter) -> Subscription {
        self.inner.bus.subscribe_filtered(filter)
    }

    /// Writes every event from now on to the JSON-lines journal at `path` as well (an earlier
    /// journal keeps writing: a journal writes as long as the bus lives). To journal the plugin
    /// loads too, see [`HostBuilder::journal`].
    pub fn journal(&self, path: &Path) -> Result<(), JournalError> {
        let journal = Journal::attach(&self.inner.bus, path)?;
        *self
            .inner
            .journal
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(journal);
        Ok(())
    }

    /// The events of type `kind` that earlier hosts wrote to this host's journal file (see
    /// [`Journal::earlier`]): what a restarted host reads back to answer for an earlier run.
    /// `None` without a journal. It reads the file: call it from a blocking thread, or at start.
    pub fn earlier(&self, kind: crate::EventType) -> Option<Result<crate::Earlier, JournalError>> {
        self.current_journal().map(|j| j.earlier(kind))
    }

    /// The journal the host writes now, if any.
    fn current_journal(&self) -> Option<Journal> {
        self.inner
            .journal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The events with seq in `from..=to` from the host's journal (the one of
    /// [`HostBuilder::journal`] or the latest [`Host::journal`]), once written: how a subscriber
    /// that starts late or lags (a page reconnecting with the last seq it saw) gets every event
    /// once. `None` without a journal. It blocks until `to` is written (five seconds at most),
    /// and so does reading the [`crate::Replay`]: call it from a blocking thread.
    pub fn replay(&self, from: u64, to: u64) -> Option<Result<crate::Replay, JournalError>> {
        self.current_journal().map(|j| j.replay(from, to))
    }

    /// Rescans every directory now (what watching does on a change); one report per directory.
    pub async fn reload(&self) -> Vec<ScanReport> {
        let mut reports = Vec::new();
        for dir in &self.inner.dirs {
            reports.push(dir.scan().await);
        }
        reports
    }

    /// The loop settings of the builder's configuration (see [`Host::agent_loop`]).
    pub(crate) fn loop_config(&self) -> LoopConfig {
        self.inner.agent.clone()
    }

    /// Stops the host, saying why: calls in flight end at once (`error`, "the host is stopping
    /// (`reason`)"), each with its end event (2 s at most), the journal is synced, watchers
    /// stop, workers stop and private copies are removed; then the bus is closed, so every
    /// subscription ends after the last event. Later calls end `error` at once.
    pub async fn shutdown_because(&self, reason: &str) {
        let inner = &self.inner;
        inner.runner.stop(reason);
        // The sources' futures dropped before this returns: what they hold (an MCP server's
        // sandbox, its private home) is gone with them, not left to a runtime that may exit.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        for task in inner.stop_sources() {
            let _ = tokio::time::timeout_at(deadline, task).await;
        }
        if !inner.runner.stopped(Duration::from_secs(2)).await {
            tracing::warn!(in_flight = inner.runner.in_flight(), "calls still running");
        }
        let journal = inner
            .journal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(journal) = journal
            && let Err(e) = journal.sync(Duration::from_secs(1))
        {
            tracing::warn!(error = %e, "syncing the journal");
        }
        inner
            .watchers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        for dir in &inner.dirs {
            dir.shut_down().await;
        }
        // Every event of the host is out: its subscriptions end after the last one.
        inner.bus.close();
    }

    /// Adds a source of tools served elsewhere to a running host (see [`HostBuilder::source`]).
    pub fn add_source(&self, name: &str, source: impl ToolSource) {
        let task = start_source(&self.inner.registry, name, Box::new(source));
        self.inner
            .sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(task);
    }

    /// [`Host::shutdown_because`] "the host shut down".
    pub async fn shutdown(&self) {
        self.shutdown_because("the host shut down").await;
    }

    /// The bus, for subscribers that take it (a [`Journal`] of their own) and for publishing
    /// a host's own events.
    pub fn bus(&self) -> &Bus {
        &self.inner.bus
    }

    /// Calls running now (their end event not yet out).
    pub fn in_flight(&self) -> usize {
        self.inner.runner.in_flight()
    }
}
