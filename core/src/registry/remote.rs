//! Tools served from elsewhere: another process or machine (`rho-bridge-nats`'s nodes).
//!
//! A [`ToolSource`] is started by the host ([`crate::HostBuilder::source`], [`Host::add_source`])
//! with a [`RemoteSource`], its place in the registry, and offers tools through it for as long as
//! the host runs, changing them as it likes ([`RemoteSource::set_tools`]). A remote tool is a
//! tool like any other to everything above the registry: a call of one goes through the calling
//! host's gate, its timeout clock starts when the gate allows and is enforced here (the tool's
//! future is dropped, which is how a source tells its far end to cancel), its updates stream to
//! the call's hook, and its end is counted in the host's health under the tool's *origin*: every
//! node serving `plugin@version` adds to the same tally, so crashes and timeouts count against
//! the plugin version across nodes, and quarantine applies to all of them.
//!
//! A remote call fails as any call does, with a [`Failure`]: `crashed` when its far end dies
//! ([`Failure::crashed`], whose text names it), `unavailable` when nothing there can run it
//! ([`Failure::Unavailable`]), `error` when the tool there answered with one.
//!
//! [`Host::add_source`]: crate::Host::add_source

use crate::registry::origin::Origin;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use rho_plugin_api::Answer;
use serde_json::Value;

use crate::bus::Bus;
use crate::bus::events::{EventKind, SourceState};
use crate::call::invoke::{CallFuture, Failure, Invoke, ToolCtx};
use crate::registry::{ResolvedTool, SourceId, ToolRegistry};
use rho_protocol::ToolSpec;

/// The future of one remote call.
pub type RemoteCall = Pin<Box<dyn Future<Output = Result<Answer, Failure>> + Send>>;

/// How a remote tool is called. The future is dropped when the call ends early (its timeout,
/// the caller's cancellation, the host's stop): a source tells its far end to cancel then.
pub trait RemoteTool: Send + Sync + 'static {
    /// Calls the tool with arguments already checked against its schema. `ctx` has the call's
    /// id, its deadline (set: the clock has started), its traceparent and its update hook.
    fn call(&self, args: Arc<Value>, ctx: ToolCtx) -> RemoteCall;

    /// `true` when polling the call's future never blocks the polling thread for long (it waits
    /// on a process, the network or a thread of its own, or computes in slices of about a
    /// millisecond): the runner then drives it inside the call's own task. `false` (the
    /// default) runs it in a task of its own, so that a blocked thread holds back neither the
    /// call's timeout nor its cancellation.
    fn never_blocks(&self) -> bool {
        false
    }
}

/// A tool a remote source offers.
#[derive(Clone)]
pub struct RemoteToolEntry {
    /// What the tool is, as its far end declares it.
    pub spec: ToolSpec,
    /// What serves it at the far end, for people and for health: `plugin@version` for a NATS
    /// node (the same for every node serving that version, so they share one tally). The
    /// registry's [`Origin`](crate::Origin) adds the source's name.
    pub origin: String,
    /// How to call it.
    pub tool: Arc<dyn RemoteTool>,
}

/// Something that offers tools from elsewhere. The host runs [`ToolSource::run`] in a task of
/// its own from its start (or [`crate::Host::add_source`]) until it shuts down (the future is
/// dropped then).
pub trait ToolSource: Send + 'static {
    /// Offers tools through `source` (and changes them) for as long as the host runs.
    fn run(self: Box<Self>, source: RemoteSource) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// A remote source's place in the host's registry: its tools replace each other as a set.
#[derive(Clone)]
pub struct RemoteSource {
    inner: Arc<SourceInner>,
}

struct SourceInner {
    name: String,
    registry: ToolRegistry,
    id: SourceId,
    /// The generation of each (tool, origin) offered so far: the same origin keeps its tally.
    state: Mutex<Offered>,
}

#[derive(Default)]
struct Offered {
    generations: HashMap<(String, String), u64>,
    /// What is offered now: tool name -> origin.
    offered: BTreeMap<String, String>,
}

impl RemoteSource {
    pub(crate) fn new(registry: &ToolRegistry, name: &str) -> RemoteSource {
        RemoteSource {
            inner: Arc::new(SourceInner {
                name: name.to_owned(),
                registry: registry.clone(),
                id: registry.new_source(),
                state: Mutex::default(),
            }),
        }
    }

    /// The source's name (`nats://HOST:PORT`), as events and origins show it.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The host's bus, for a source's own warnings.
    pub fn bus(&self) -> &Bus {
        self.inner.registry.bus()
    }

    /// Says the source's state changed: a `source_state_changed` event with its name, `kind`
    /// (how the source names its kind: `mcp stdio`), the state, when it is tried again (while
    /// restarting) and why (how it went down; empty while serving).
    pub fn set_state(
        &self,
        kind: &str,
        state: SourceState,
        retry_in: Option<std::time::Duration>,
        message: impl Into<String>,
    ) {
        self.bus().publish(
            None,
            EventKind::SourceStateChanged {
                source: self.inner.name.clone(),
                kind: kind.to_owned(),
                state,
                retry_in_ms: retry_in.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                message: message.into(),
            },
        );
    }

    /// Replaces the tools this source offers (empty: none). A tool whose name is not a tool name
    /// (or is offered twice) or whose schema does not compile is refused: the returned lines say which and why, the others serve. When the set of names
    /// or origins changed, a `remote_tools_changed` event says how (MCP clients are told the list
    /// changed).
    pub fn set_tools(&self, entries: Vec<RemoteToolEntry>) -> Vec<String> {
        let inner = &self.inner;
        let mut state = inner.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut refused = Vec::new();
        let mut resolved = Vec::new();
        let mut offered = BTreeMap::new();
        for entry in entries {
            if !rho_plugin_api::is_valid_tool_name(&entry.spec.name)
                || offered.contains_key(&entry.spec.name)
            {
                let shown: String = entry.spec.name.chars().take(64).collect();
                refused.push(format!(
                    "{}: tool {shown:?} refused: a tool name must match ^[a-zA-Z0-9_-]{{1,64}}$ \
                     and be offered once",
                    inner.name
                ));
                continue;
            }
            if let Some(problem) = rho_protocol::spec_problem(&entry.spec) {
                refused.push(format!(
                    "{}: tool `{}` refused: {problem}",
                    inner.name, entry.spec.name
                ));
                continue;
            }
            let origin_ok = !entry.origin.is_empty()
                && entry.origin.chars().count() <= 256
                && !entry.origin.chars().any(char::is_control);
            if !origin_ok {
                refused.push(format!(
                    "{}: tool `{}` refused: its origin must be 1 to 256 characters without control characters",
                    inner.name, entry.spec.name
                ));
                continue;
            }
            let mut entry = entry;
            entry.spec.hints = entry.spec.hints.normalized();
            let key = (entry.spec.name.clone(), entry.origin.clone());
            let generation = *state
                .generations
                .entry(key)
                .or_insert_with(|| inner.registry.new_generation());
            let name = entry.spec.name.clone();
            let invoke: Arc<dyn Invoke> = Arc::new(RemoteInvoke {
                tool: entry.tool,
                name: name.as_str().into(),
            });
            let origin = Origin::Remote {
                offered: entry.origin.clone(),
                via: inner.name.clone(),
            };
            match ResolvedTool::new(entry.spec, generation, origin, invoke) {
                Ok(tool) => {
                    offered.insert(name, entry.origin);
                    resolved.push(tool);
                }
                Err(why) => refused.push(why),
            }
        }
        inner.registry.set_source_tools(inner.id, resolved);
        if offered != state.offered {
            let added = offered
                .iter()
                .filter(|(name, origin)| state.offered.get(*name) != Some(*origin))
                .map(|(name, origin)| format!("{name} ({origin})"))
                .collect();
            let removed = state
                .offered
                .keys()
                .filter(|name| !offered.contains_key(*name))
                .cloned()
                .collect();
            state.offered = offered;
            inner.registry.bus().publish(
                None,
                EventKind::RemoteToolsChanged {
                    source: inner.name.clone(),
                    tools: state.offered.keys().cloned().collect(),
                    added,
                    removed,
                },
            );
        }
        refused
    }
}

/// A remote tool (a remote source's, or a component's) as the runner calls it: its answers held
/// to the answer codec's limits.
pub(crate) struct RemoteInvoke {
    pub tool: Arc<dyn RemoteTool>,
    pub name: Arc<str>,
}

impl Invoke for RemoteInvoke {
    fn invoke(&self, args: Arc<Value>, ctx: ToolCtx) -> CallFuture {
        let call = self.tool.call(args, ctx);
        let name = self.name.clone();
        Box::pin(async move {
            let answer = call.await?;
            rho_protocol::answer::check_limits(&name, &answer)?;
            Ok(answer)
        })
    }

    fn never_blocks(&self) -> bool {
        self.tool.never_blocks()
    }

    fn runs(&self) -> crate::Runs {
        crate::Runs::Source
    }
}
