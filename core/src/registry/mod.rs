//! [`ToolRegistry`]: the tools of every source (host-native tools, plugin directories) under one
//! name space, with per-tool stats and quarantine.
//!
//! Name conflicts follow one rule: sources rank in the order they were added to the registry, and
//! within a plugin directory plugins rank by file name; the first offer of a name serves it. Each
//! conflict is published once as `tool_name_conflict`, naming both origins.

pub(crate) mod health;
pub(crate) mod health_view;
pub(crate) mod origin;
pub(crate) mod remote;

use crate::registry::origin::Origin;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use serde_json::Value;

use crate::bus::Bus;
use crate::bus::events::EventKind;
use crate::call::invoke::{Invoke, NativeInvoke, Tool};
use crate::call::validate::{Checked, SchemaValidator};
use crate::registry::health::{
    Admission, CallEnd, Change, Charge, Health, QuarantinePolicy, QuarantineState, ToolKey,
    ToolStats,
};
use rho_protocol::ToolResult;
use rho_protocol::ToolSpec;

/// A source's place in the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SourceId(u64);

/// A tool ready to run: its spec, how to run it, and its argument validator.
#[derive(Clone)]
pub struct ResolvedTool {
    /// The tool's spec.
    pub spec: Arc<ToolSpec>,
    /// Which load of its plugin serves it (0 for host-native tools); a reload makes a new one.
    pub generation: u64,
    /// Where it comes from.
    pub origin: Arc<Origin>,
    pub(crate) invoke: Arc<dyn Invoke>,
    pub(crate) validator: Arc<SchemaValidator>,
    pub(crate) output_validator: Option<Arc<SchemaValidator>>,
}

impl ResolvedTool {
    /// Builds a resolved tool; the spec's schema must compile.
    pub(crate) fn new(
        spec: ToolSpec,
        generation: u64,
        origin: Origin,
        invoke: Arc<dyn Invoke>,
    ) -> Result<Self, String> {
        let refused = |e: String| format!("tool `{}` refused: {e}", spec.name);
        let validator =
            SchemaValidator::new(&spec.parameters, "its parameters are").map_err(refused)?;
        let output_validator = match &spec.output_schema {
            Some(schema) => Some(Arc::new(
                SchemaValidator::new(schema, "its output schema is").map_err(refused)?,
            )),
            None => None,
        };
        Ok(ResolvedTool {
            spec: Arc::new(spec),
            generation,
            origin: Arc::new(origin),
            invoke,
            validator: Arc::new(validator),
            output_validator,
        })
    }

    /// Checks `args` against the tool's schema.
    pub(crate) fn check_args(&self, args: &Value) -> Result<(), String> {
        self.validator
            .check(&self.spec.name, args, Checked::Arguments)
    }

    /// How the tool's answers are checked, movable into the call's task.
    pub(crate) fn answer_check(&self) -> AnswerCheck {
        AnswerCheck {
            tool: self.spec.clone(),
            validator: self.output_validator.clone(),
        }
    }
}

/// A tool's output schema check, run on a blocking thread inside the call (so under its deadline,
/// its cancellation and the host's stop, and never on a runtime thread).
pub(crate) struct AnswerCheck {
    tool: Arc<ToolSpec>,
    validator: Option<Arc<SchemaValidator>>,
}

impl AnswerCheck {
    /// Whether there is anything to check.
    pub fn needed(&self) -> bool {
        self.validator.is_some()
    }

    /// Checks a structured answer: a tool that declares an output schema must answer with
    /// structured content that matches it.
    pub fn check(&self, structured: Option<&Value>) -> Result<(), String> {
        match (&self.validator, structured) {
            (None, _) => Ok(()),
            (Some(_), None) => Err(format!(
                "tool `{}` declares an output schema but answered without structured content",
                self.tool.name
            )),
            (Some(v), Some(value)) => {
                let bytes = serde_json::to_vec(value)
                    .map(|b| b.len())
                    .unwrap_or(usize::MAX);
                if bytes > MAX_STRUCTURED_BYTES {
                    return Err(format!(
                        "tool `{}` answered with {bytes} bytes of structured content, over the \
                         {MAX_STRUCTURED_BYTES} a host checks",
                        self.tool.name
                    ));
                }
                v.check(&self.tool.name, value, Checked::Answer)
            }
        }
    }
}

/// The largest structured answer a host checks against its schema, bytes of JSON: with the caps
/// on schemas, a check is bounded in time too.
pub(crate) const MAX_STRUCTURED_BYTES: usize = 4 << 20;

/// Why a tool could not be added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The name does not match `^[a-zA-Z0-9_-]{1,64}$`.
    #[error("tool {0:?} refused: a tool name must match ^[a-zA-Z0-9_-]{{1,64}}$")]
    BadName(String),
    /// The spec's schema does not compile.
    #[error("{0}")]
    BadSchema(String),
    /// The host already added a native tool of that name.
    #[error("tool `{0}` refused: the host already has a tool of that name")]
    Duplicate(String),
}

struct Inner {
    bus: Bus,
    policy: RwLock<QuarantinePolicy>,
    next_source: AtomicU64,
    next_generation: AtomicU64,
    sources: Mutex<BTreeMap<SourceId, Vec<ResolvedTool>>>,
    snapshot: RwLock<Arc<BTreeMap<String, ResolvedTool>>>,
    reported_conflicts: Mutex<HashSet<(String, String, String)>>,
    health: Mutex<Health>,
    native: SourceId,
    /// Plugin files whose load is under way (isolated loads run beside everything else).
    loading: Mutex<BTreeSet<PathBuf>>,
    /// Bumped whenever the tools served or the files loading change.
    changed: tokio::sync::watch::Sender<u64>,
}

/// The tools a host serves. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct ToolRegistry {
    inner: Arc<Inner>,
}

impl ToolRegistry {
    /// An empty registry publishing its events on `bus`.
    pub fn new(bus: Bus) -> Self {
        let inner = Inner {
            bus,
            policy: RwLock::new(QuarantinePolicy::default()),
            next_source: AtomicU64::new(1),
            next_generation: AtomicU64::new(1),
            sources: Mutex::new(BTreeMap::new()),
            snapshot: RwLock::new(Arc::new(BTreeMap::new())),
            reported_conflicts: Mutex::new(HashSet::new()),
            health: Mutex::new(Health::default()),
            native: SourceId(0),
            loading: Mutex::new(BTreeSet::new()),
            changed: tokio::sync::watch::Sender::new(0),
        };
        ToolRegistry {
            inner: Arc::new(inner),
        }
    }

    /// The bus the registry publishes on.
    pub fn bus(&self) -> &Bus {
        &self.inner.bus
    }

    /// Sets the quarantine policy for calls ending from now on.
    pub fn set_quarantine_policy(&self, policy: QuarantinePolicy) {
        *self
            .inner
            .policy
            .write()
            .unwrap_or_else(PoisonError::into_inner) = policy;
    }

    /// Adds a host-native tool. Host-native tools rank before every plugin.
    pub fn add_tool(&self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let mut spec = tool.spec();
        spec.hints = spec.hints.normalized();
        if !rho_plugin_api::is_valid_tool_name(&spec.name) {
            return Err(RegistryError::BadName(spec.name));
        }
        let name = spec.name.clone();
        let resolved = ResolvedTool::new(spec, 0, Origin::Host, Arc::new(NativeInvoke(tool)))
            .map_err(RegistryError::BadSchema)?;
        {
            let mut sources = self.sources();
            let natives = sources.entry(self.inner.native).or_default();
            if natives.iter().any(|t| t.spec.name == name) {
                return Err(RegistryError::Duplicate(name));
            }
            natives.push(resolved);
        }
        self.rebuild();
        Ok(())
    }

    /// The tools now served, sorted by name.
    pub fn tools(&self) -> Vec<ToolSpec> {
        self.snapshot()
            .values()
            .map(|t| (*t.spec).clone())
            .collect()
    }

    /// The names of the tools now served, sorted.
    pub fn names(&self) -> Vec<String> {
        self.snapshot().keys().cloned().collect()
    }

    /// The tool now serving `name`.
    pub fn lookup(&self, name: &str) -> Option<ResolvedTool> {
        self.snapshot().get(name).cloned()
    }

    /// The plugin files whose load is under way, sorted.
    pub fn loading(&self) -> Vec<PathBuf> {
        self.loading_set().iter().cloned().collect()
    }

    fn loading_set(&self) -> std::sync::MutexGuard<'_, BTreeSet<PathBuf>> {
        self.inner
            .loading
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks `file` as loading (or done), for calls that wait for a name not served yet.
    pub(crate) fn set_loading(&self, file: &Path, loading: bool) {
        let changed = if loading {
            self.loading_set().insert(file.to_owned())
        } else {
            self.loading_set().remove(file)
        };
        if changed {
            self.inner.changed.send_modify(|n| *n += 1);
        }
    }

    /// The tool serving `name`, waiting up to `bound` for it while plugin files are still
    /// loading; `None` at once when nothing is loading.
    pub(crate) async fn wait_for(&self, name: &str, bound: Duration) -> Option<ResolvedTool> {
        let mut changes = self.inner.changed.subscribe();
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            if let Some(tool) = self.lookup(name) {
                return Some(tool);
            }
            if self.loading_set().is_empty() {
                return None;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return self.lookup(name),
            }
        }
    }

    fn snapshot(&self) -> Arc<BTreeMap<String, ResolvedTool>> {
        self.inner
            .snapshot
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn sources(&self) -> std::sync::MutexGuard<'_, BTreeMap<SourceId, Vec<ResolvedTool>>> {
        self.inner
            .sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.inner
            .health
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A new source's id; sources rank in the order of their ids.
    pub(crate) fn new_source(&self) -> SourceId {
        SourceId(self.inner.next_source.fetch_add(1, Ordering::Relaxed))
    }

    /// A new generation number for a plugin load.
    pub(crate) fn new_generation(&self) -> u64 {
        self.inner.next_generation.fetch_add(1, Ordering::Relaxed)
    }

    /// Replaces every tool of `source` at once (empty removes them): calls that start after this
    /// returns see the new set; calls already running keep what they resolved.
    pub(crate) fn set_source_tools(&self, source: SourceId, tools: Vec<ResolvedTool>) {
        {
            let mut sources = self.sources();
            if tools.is_empty() {
                sources.remove(&source);
            } else {
                sources.insert(source, tools);
            }
        }
        self.rebuild();
    }

    fn rebuild(&self) {
        let mut map: BTreeMap<String, ResolvedTool> = BTreeMap::new();
        let mut conflicts = Vec::new();
        for tools in self.sources().values() {
            for tool in tools {
                match map.get(&tool.spec.name) {
                    Some(kept) => conflicts.push((
                        tool.spec.name.clone(),
                        kept.origin.to_string(),
                        tool.origin.to_string(),
                    )),
                    None => {
                        map.insert(tool.spec.name.clone(), tool.clone());
                    }
                }
            }
        }
        let generations: HashMap<String, u64> =
            map.iter().map(|(n, t)| (n.clone(), t.generation)).collect();
        *self
            .inner
            .snapshot
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(map);
        self.inner.changed.send_modify(|n| *n += 1);
        let mut reported = self
            .inner
            .reported_conflicts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (tool, kept, ignored) in conflicts {
            if reported.insert((tool.clone(), kept.clone(), ignored.clone())) {
                tracing::warn!(%tool, %kept, %ignored, "tool name conflict");
                self.inner.bus.publish(
                    None,
                    EventKind::ToolNameConflict {
                        tool,
                        kept,
                        ignored,
                    },
                );
            }
        }
        drop(reported);
        let stale = self.health().stale_quarantines(&generations);
        for tool in stale {
            self.restore(&tool, "a new version of its plugin was loaded");
        }
    }

    /// Lifts the quarantine of `tool` (the host's explicit call); returns whether it was
    /// quarantined. Publishes `tool_restored`.
    pub fn lift_quarantine(&self, tool: &str) -> bool {
        self.restore(tool, "the host lifted the quarantine")
    }

    fn restore(&self, tool: &str, reason: &str) -> bool {
        let lifted = self.health().lift(tool);
        if lifted {
            let origin = self
                .lookup(tool)
                .map(|t| t.origin.to_string())
                .unwrap_or_default();
            self.inner.bus.publish(
                None,
                EventKind::ToolRestored {
                    tool: tool.to_owned(),
                    origin,
                    reason: reason.to_owned(),
                },
            );
        }
        lifted
    }

    /// Whether the call `call_id` of `tool` may run: `Err` with the quarantine's text while the
    /// tool is quarantined, except for the one call that probes it once its cool-down is over
    /// (published as `tool_probing`): that one gets its [`Probe`], to hand to [`Self::record`].
    pub(crate) fn admit(
        &self,
        tool: &ResolvedTool,
        call_id: &str,
    ) -> Result<Option<Probe>, String> {
        let admission = self.health().admit(&tool.spec.name, tool.generation);
        match admission {
            Admission::Serve => Ok(None),
            Admission::Refused(reason) => Err(reason),
            Admission::Probe(token) => {
                tracing::info!(tool = %tool.spec.name, call = %call_id, "probing a quarantined tool");
                let origin = tool.origin.to_string();
                self.inner.bus.publish(
                    None,
                    EventKind::ToolProbing {
                        tool: tool.spec.name.clone(),
                        origin: origin.clone(),
                        call_id: call_id.to_owned(),
                    },
                );
                Ok(Some(Probe {
                    registry: self.clone(),
                    tool: tool.spec.name.clone(),
                    origin,
                    token: Some(token),
                }))
            }
        }
    }

    /// Records how a call of `tool` ended (the seed's `watch`): counts, durations, quarantine
    /// after repeated crashes or timeouts, and the decision of a probe. `charge` says whom the end
    /// is charged to: the tool; another tool of the same origin that caused a crash (it hung,
    /// and the process serving both was restarted); or no one (the client or the host ended the
    /// call: a probe so ended decides nothing).
    pub(crate) fn record(
        &self,
        tool: &ResolvedTool,
        result: &ToolResult,
        charge: &Charge,
        probe: Option<Probe>,
    ) {
        let policy = *self
            .inner
            .policy
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        // Another tool of the same origin caused it: charged to that one. One that cannot be
        // found as such (refused, delisted, another origin's now) is charged nothing: never
        // this call's tool.
        let caused_by = match charge {
            Charge::Culprit(by) => Some(by),
            Charge::Tool | Charge::Nobody => None,
        };
        let culprit = caused_by
            .and_then(|by| self.lookup(by))
            .filter(|culprit| culprit.origin == tool.origin);
        let charge_own = *charge == Charge::Tool;
        fn key(tool: &ResolvedTool) -> ToolKey<'_> {
            ToolKey {
                tool: &tool.spec.name,
                origin: &tool.origin,
                generation: tool.generation,
            }
        }
        let text = result.text();
        let end = CallEnd {
            probe: probe.and_then(Probe::decided),
            outcome: result.outcome,
            duration: result.duration,
            text: &text,
        };
        let changes = {
            let mut health = self.health();
            let own = health.record(&policy, &key(tool), &end, charge_own);
            let charged = culprit
                .as_ref()
                .map(|culprit| (culprit, health.charge(&policy, &key(culprit), &end)));
            [Some((tool, own)), charged]
        };
        for (tool, change) in changes.into_iter().flatten() {
            // Nothing built for the ends that change nothing (nearly every call).
            let event = match change {
                Change::None => continue,
                Change::Quarantined(state) => quarantined(state, tool.origin.to_string()),
                Change::Restored(reason) => {
                    tracing::info!(tool = %tool.spec.name, %reason, "quarantine lifted");
                    EventKind::ToolRestored {
                        tool: tool.spec.name.clone(),
                        origin: tool.origin.to_string(),
                        reason,
                    }
                }
            };
            self.inner.bus.publish(None, event);
        }
    }

    /// The figures of every tool served now, sorted by name (tools never called have zeros).
    pub fn stats(&self) -> Vec<ToolStats> {
        let snapshot = self.snapshot();
        let health = self.health();
        snapshot
            .values()
            .map(|tool| {
                let mut stats = health.stats(&tool.spec.name).unwrap_or_default();
                stats.tool = tool.spec.name.clone();
                stats.origin = Origin::clone(&tool.origin);
                stats.runaway_threads = tool.invoke.runaway_threads();
                stats
            })
            .collect()
    }
}

/// The `tool_quarantined` event of `state`.
fn quarantined(state: QuarantineState, origin: String) -> EventKind {
    let QuarantineState {
        tool,
        reason,
        probe_after_ms,
        failed_probes,
    } = state;
    tracing::warn!(%tool, %reason, ?probe_after_ms, "tool quarantined");
    EventKind::ToolQuarantined {
        tool,
        origin,
        reason,
        probe_after_ms,
        failed_probes,
    }
}

/// The call probing a quarantined tool ([`ToolRegistry::admit`]): its end, recorded, decides the
/// quarantine ([`ToolRegistry::record`]); dropped unrecorded (its task died), it is given back
/// and the next call probes.
pub(crate) struct Probe {
    registry: ToolRegistry,
    tool: String,
    origin: String,
    /// `None` once recorded.
    token: Option<u64>,
}

impl Probe {
    /// Its token, for the record that decides it.
    fn decided(mut self) -> Option<u64> {
        self.token.take()
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        let Some(token) = self.token else { return };
        let released = self.registry.health().release_probe(&self.tool, token);
        if let Some(state) = released {
            let event = quarantined(state, std::mem::take(&mut self.origin));
            self.registry.inner.bus.publish(None, event);
        }
    }
}
