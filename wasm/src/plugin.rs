//! A loaded component ([`WasmPlugin`]) and its calls: each in an instance of its own, made
//! ahead of the call.
//!
//! # Instances made ahead
//!
//! A call never shares an instance: each runs in a fresh one, in which nothing has run. Making an
//! instance (a pool slot, its memory image, WASI with the grants) and taking a used one down
//! cost tens of microseconds, so both happen off the caller's path: each loaded component keeps
//! up to [`SPARES_PER_COMPONENT`] instances made ahead (after each call, in a task of its own
//! once the caller has its answer, as the used instance is taken down). A call takes one when
//! there is one, else makes its own. The engine holds at most `SPARES` (32) such
//! instances for all its components.
//!
//! (Warming instances up by running the component's `describe` in them made a call itself a few
//! microseconds instead of tens, but cost more CPU than it saved on a busy two-core machine, and
//! a call would no longer start from a pristine instance: measured and left out.)

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::task::Poll;

use rho_runtime::plugin_api::{Answer, Block, BlockHead, Image, Output, ToolError};
use rho_runtime::{Failure, Grants, SandboxReport, ToolCtx, ToolSpec, WasmSandbox};
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;
use wasmtime::Store;

use crate::shared::bindings::exports::rho::plugin::tools as wit;
use crate::shared::bindings::{Plugin, PluginPre};
use crate::shared::{CallState, EngineInner, block_on};

/// Instances made ahead per loaded component.
const SPARES_PER_COMPONENT: usize = 2;

/// A loaded component: its tools as specs, ready to call, each call with the component's grants
/// (files by WASI preopens at their own paths, environment keys, the network). Cheap to clone.
#[derive(Clone)]
pub struct WasmPlugin {
    inner: Arc<PluginInner>,
}

pub(crate) struct PluginInner {
    pub(crate) engine: Arc<EngineInner>,
    pub(crate) pre: PluginPre<CallState>,
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) tools: Vec<ToolSpec>,
    pub(crate) rejected: Vec<String>,
    pub(crate) capabilities: rho_runtime::Capabilities,
    pub(crate) grants: Grants,
    /// Its scratch directory: `Ok(None)` when the engine gives none, `Err` why it has none.
    pub(crate) scratch: Result<Option<Scratch>, String>,
    /// Instances made ahead of calls.
    pub(crate) spares: Mutex<Vec<Ready>>,
}

/// An instance made for one call, with its store (its WASI, limits and stderr).
pub(crate) struct Ready {
    store: Store<CallState>,
    plugin: Plugin,
    /// The engine's leave for a spare; `None` for an instance a call made for itself.
    _spare: Option<OwnedSemaphorePermit>,
}

/// A loaded component's scratch directory: a bounded tmpfs reached only through `root` (it
/// lives as long as a descriptor into it), reopened by its `/proc/self/fd` path for each
/// call's preopen.
pub(crate) struct Scratch {
    root: std::os::fd::OwnedFd,
}

impl Scratch {
    /// Whether less than a page of it is free.
    fn is_full(&self) -> bool {
        use std::os::fd::AsRawFd;
        // SAFETY: a zeroed statvfs filled by the kernel for our own descriptor.
        unsafe {
            let mut stat: libc::statvfs = std::mem::zeroed();
            libc::fstatvfs(self.root.as_raw_fd(), &mut stat) == 0 && stat.f_bavail == 0
        }
    }

    /// The path that reopens its root.
    fn path(&self) -> PathBuf {
        use std::os::fd::AsRawFd;
        PathBuf::from(format!("/proc/self/fd/{}", self.root.as_raw_fd()))
    }
}

impl Scratch {
    /// A scratch directory of `bytes` (none for 0); `Err` says why there is none.
    #[cfg(target_os = "linux")]
    pub(crate) fn new(bytes: u64) -> Result<Option<Scratch>, String> {
        if bytes == 0 {
            return Ok(None);
        }
        // Each call's preopen reopens it by its /proc path: checked once here, so a host without
        // /proc runs its components without a scratch rather than failing every call.
        let made = rho_worker::sandbox::scratch::bounded_tmpfs(bytes).and_then(|root| {
            let scratch = Scratch { root };
            match std::fs::File::open(scratch.path()) {
                Ok(_) => Ok(scratch),
                Err(e) => Err(std::io::Error::other(format!(
                    "a scratch directory: reopening it by its /proc path: {e}"
                ))),
            }
        });
        match made {
            Ok(scratch) => Ok(Some(scratch)),
            Err(e) => {
                tracing::warn!("a component runs without a scratch directory: {e}");
                Err(e.to_string())
            }
        }
    }

    /// No scratch directory off Linux (yet: a bounded in-memory one needs the kernel's tmpfs).
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn new(bytes: u64) -> Result<Option<Scratch>, String> {
        if bytes == 0 {
            return Ok(None);
        }
        Err("a scratch directory: only on Linux".into())
    }
}

impl WasmPlugin {
    pub(crate) fn new(inner: PluginInner) -> WasmPlugin {
        WasmPlugin {
            inner: Arc::new(inner),
        }
    }

    /// The plugin's name (its crate's).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The plugin's version (its crate's).
    pub fn version(&self) -> &str {
        &self.inner.version
    }

    /// Its tools, checked as a native plugin's are.
    pub fn tools(&self) -> &[ToolSpec] {
        &self.inner.tools
    }

    /// The tools refused, one line each saying why.
    pub fn rejected(&self) -> &[String] {
        &self.inner.rejected
    }

    /// What it says it needs (its declaration's capabilities).
    pub fn capabilities(&self) -> &rho_runtime::Capabilities {
        &self.inner.capabilities
    }

    /// What confines its calls: the engine's limits, its scratch directory, its grants; what
    /// could not be set up is in `missing`.
    pub fn sandbox(&self) -> SandboxReport {
        let inner = &self.inner;
        let limits = inner.engine.limits;
        let grants = &inner.grants;
        let grant_lines = grants
            .read
            .iter()
            .map(|p| format!("read {}", p.display()))
            .chain(
                grants
                    .write
                    .iter()
                    .map(|p| format!("write {}", p.display())),
            )
            .collect();
        let (scratch_bytes, missing) = match &inner.scratch {
            Ok(Some(_)) => (limits.scratch_bytes, Vec::new()),
            Ok(None) => (0, Vec::new()),
            Err(why) => (0, vec![why.clone()]),
        };
        SandboxReport {
            grants: grant_lines,
            missing,
            wasm: Some(WasmSandbox {
                memory_bytes: limits.memory_bytes as u64,
                fuel: limits.fuel,
                scratch_bytes,
                network: grants.network,
                env: grants.env.clone(),
            }),
            ..SandboxReport::default()
        }
    }

    /// Calls `tool` with `args` in an instance no other call has used, stopped at `ctx`'s
    /// deadline or cancellation while it runs, and at its cancellation ([`ToolCtx::cancel`],
    /// which a host's runner does at the deadline) while it waits in a host call (a deadline
    /// alone does not stop a wait: a question's wait moves it). The call starts on the
    /// caller's thread: one that ends before
    /// the engine's next epoch tick (a millisecond) never changes threads; one that runs longer,
    /// or waits (for a file, a question), goes on on a blocking thread. Up to two fresh instances
    /// per component (32 per engine) are made ahead of calls, so a call usually finds one ready.
    /// At most 112 calls of one engine run at once; more wait for a turn (their timeout runs
    /// meanwhile).
    pub async fn call(&self, tool: &str, args: &Value, ctx: ToolCtx) -> Result<Answer, Failure> {
        let engine = &self.inner.engine;
        let Ok(turn) = engine.calls.clone().acquire_owned().await else {
            return Err(Failure::crashed("the wasm engine is closed"));
        };
        let running = engine.ticker.running();
        let spare = self.lock_spares().pop();
        let ready = match spare {
            Some(ready) => ready,
            None => match self.ready(None).await {
                Ok(ready) => ready,
                Err(e) => return Err(Failure::crashed(e)),
            },
        };
        let plugin = self.clone();
        let (tool, args) = (tool.to_owned(), args.to_string());
        let watched = ctx.clone();
        let mut call = Box::pin(async move {
            let ended = plugin.run(ready, &tool, &args, ctx).await;
            drop(running);
            ended
        });
        // Its first slice here; the rest, if any, on a blocking thread.
        let first = std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await;
        let (ended, used) = match first {
            Poll::Ready(ended) => ended,
            Poll::Pending => {
                let (answer, answered) = tokio::sync::oneshot::channel();
                let plugin = self.clone();
                let thread = tokio::task::spawn_blocking(move || {
                    block_on(async {
                        let (ended, used) = until_given_up(call, &watched).await;
                        let _ = answer.send(ended);
                        plugin.after_call(used, turn).await;
                    })
                });
                return match answered.await {
                    Ok(ended) => ended,
                    Err(_) => {
                        let why = match thread.await {
                            Err(e) => e.to_string(),
                            Ok(()) => "it ended without an answer".into(),
                        };
                        Err(Failure::crashed(format!(
                            "the call of component `{}` ended abnormally: {why}",
                            self.inner.name
                        )))
                    }
                };
            }
        };
        // The caller goes on now; the instance is taken down and the next one made after, on
        // this runtime (tens of microseconds: waking a blocking thread for it costs more).
        let plugin = self.clone();
        tokio::spawn(async move { plugin.after_call(used, turn).await });
        ended
    }

    /// After a call: its instance taken down, its turn given back, instances made ahead (tens
    /// of microseconds, without waiting on anything).
    async fn after_call(&self, used: Option<Store<CallState>>, turn: OwnedSemaphorePermit) {
        drop((used, turn));
        self.make_ahead().await;
    }

    /// Makes instances ahead of calls until it has [`SPARES_PER_COMPONENT`] or the engine has
    /// no leave for more (tens of microseconds each, without waiting on anything).
    async fn make_ahead(&self) {
        let spares = &self.inner.engine.spares;
        while self.spare_count() < SPARES_PER_COMPONENT {
            let Ok(leave) = spares.clone().try_acquire_owned() else {
                return;
            };
            match self.ready(Some(leave)).await {
                Ok(ready) => self.lock_spares().push(ready),
                Err(e) => {
                    tracing::debug!(component = %self.inner.name, "no instance made ahead: {e}");
                    return;
                }
            }
        }
    }

    fn spare_count(&self) -> usize {
        self.lock_spares().len()
    }

    fn lock_spares(&self) -> std::sync::MutexGuard<'_, Vec<Ready>> {
        // A panic while holding it leaves a list of instances, each whole.
        self.inner
            .spares
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A fresh instance with the component's grants, held as a spare under `leave` (the
    /// engine's) or made for the call at hand.
    async fn ready(&self, leave: Option<OwnedSemaphorePermit>) -> Result<Ready, String> {
        let scratch = match &self.inner.scratch {
            Ok(Some(scratch)) => Some(scratch.path()),
            _ => None,
        };
        let mut store = self
            .inner
            .engine
            .store(&self.inner.grants, scratch.as_deref())?;
        let plugin = self
            .inner
            .pre
            .instantiate_async(&mut store)
            .await
            .map_err(|e| self.trap_text(&store, &e))?;
        Ok(Ready {
            store,
            plugin,
            _spare: leave,
        })
    }

    /// Runs the call in `ready`; returns how it ended and the used store (to be dropped once
    /// the caller has the answer).
    async fn run(
        &self,
        ready: Ready,
        tool: &str,
        args_json: &str,
        ctx: ToolCtx,
    ) -> (Result<Answer, Failure>, Option<Store<CallState>>) {
        let info = wit::CallInfo {
            call_id: ctx.call_id().to_owned(),
            time_left_ms: ctx
                .time_left()
                .map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX)),
            traceparent: ctx.traceparent().unwrap_or_default().to_owned(),
        };
        // No longer a spare: the engine's leave for one goes back now.
        let Ready {
            mut store,
            plugin,
            _spare,
        } = ready;
        drop(_spare);
        store.data_mut().ctx = Some(ctx);
        store.set_epoch_deadline(1);
        if let Some(fuel) = self.inner.engine.limits.fuel
            && let Err(e) = store.set_fuel(fuel)
        {
            return (
                Err(Failure::crashed(format!("setting its fuel: {e}"))),
                None,
            );
        }
        let ended = plugin
            .rho_plugin_tools()
            .call_call(&mut store, tool, args_json, &info)
            .await;
        let ended = match ended {
            Ok(Ok(answer)) => answer_of(answer),
            Ok(Err(failure)) => Err(self.noting_full_scratch(failure_of(failure))),
            Err(e) => Err(Failure::crashed(self.trap_text(&store, &e))),
        };
        (ended, Some(store))
    }

    /// A trap's text: the trap itself (not the wasm backtrace wrapped around it) and the
    /// component's last words on stderr.
    fn trap_text(&self, store: &Store<CallState>, e: &wasmtime::Error) -> String {
        let words = store.data().stderr.said();
        format!(
            "component `{}` trapped: {}{words}",
            self.inner.name,
            e.root_cause()
        )
    }

    /// `failure`, a tool error, with a note when the scratch directory is full: WASI's file
    /// streams report a write past its size as a bare I/O error ("os error 29"), which says
    /// nothing of why.
    fn noting_full_scratch(&self, failure: Failure) -> Failure {
        let full = matches!(&self.inner.scratch, Ok(Some(scratch)) if scratch.is_full());
        match failure {
            Failure::Tool(mut error) if full => {
                let size = self.inner.engine.limits.scratch_bytes;
                error.message = format!(
                    "{} (its scratch directory /tmp is full: {} KiB, [wasm] scratch_mb)",
                    error.message,
                    size >> 10
                );
                Failure::Tool(error)
            }
            other => other,
        }
    }
}

/// `call` run to its end, or until its call is given up (the runner cancels it at its timeout,
/// the client's cancellation or a stop) while the component waits in a host call, where the
/// epoch does not reach it (a long WASI sleep): then it is dropped there, its instance with it,
/// and its turn and thread are free at once.
async fn until_given_up<F>(
    call: F,
    ctx: &ToolCtx,
) -> (Result<Answer, Failure>, Option<Store<CallState>>)
where
    F: Future<Output = (Result<Answer, Failure>, Option<Store<CallState>>)>,
{
    let given_up = async {
        while !ctx.is_cancelled() {
            tokio::time::sleep(GIVEN_UP_POLL).await;
        }
    };
    tokio::select! {
        ended = call => ended,
        () = given_up => (Err(Failure::crashed("the call was given up while it waited")), None),
    }
}

/// How often a call that went on on a blocking thread checks whether it was given up.
const GIVEN_UP_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// A component's answer as rho's.
fn answer_of(answer: wit::Answer) -> Result<Answer, Failure> {
    let json = |text: Option<String>, what: &str| {
        text.map(|t| serde_json::from_str::<Value>(&t))
            .transpose()
            .map_err(|e| Failure::crashed(format!("the component's {what} are not JSON: {e}")))
    };
    let details = json(answer.details_json, "details")?;
    let structured = json(answer.structured_json, "structured content")?;
    let image = |i: wit::Image| Image::new(i.mime_type, i.bytes);
    let output = if !answer.blocks.is_empty() {
        let mut blocks = Vec::with_capacity(answer.blocks.len());
        for block in answer.blocks {
            let head: BlockHead = serde_json::from_str(&block.head_json)
                .map_err(|e| Failure::crashed(format!("a block's head is not one: {e}")))?;
            blocks.push(Block::from_parts(head, block.payload).map_err(Failure::crashed)?);
        }
        Output::Blocks(blocks)
    } else {
        match answer.kind {
            wit::OutputKind::Text => Output::Text(answer.text),
            wit::OutputKind::Image => match answer.images.into_iter().next() {
                Some(i) => Output::Image {
                    image: image(i),
                    text: answer.text,
                },
                None => Output::Text(answer.text),
            },
            wit::OutputKind::Images => Output::Images {
                images: answer.images.into_iter().map(image).collect(),
                text: answer.text,
            },
        }
    };
    Ok(Answer {
        output,
        structured,
        details,
    })
}

/// A component's failure as rho's.
fn failure_of(failure: wit::Failure) -> Failure {
    match failure.kind {
        wit::FailureKind::Error => {
            let mut error = ToolError::new(failure.message);
            error.details = failure
                .details_json
                .and_then(|json| serde_json::from_str(&json).ok());
            Failure::Tool(error)
        }
        wit::FailureKind::InvalidArguments => Failure::InvalidArguments(failure.message),
        wit::FailureKind::UnknownTool => Failure::UnknownTool(failure.message),
        wit::FailureKind::Panic => Failure::crashed(failure.message),
    }
}
