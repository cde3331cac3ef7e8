//! Calling a plugin in process: synchronous FFI on a thread of the detached pool, the answer
//! copied into host-owned data on that thread, and runaway threads counted when the host gives up.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use rho_plugin_api::ffi::PluginModRef;
use rho_protocol::{CrashReason, Failure};
use rho_worker::loader::{CallInfo, call_module, parse_outcome};
use serde_json::Value;

use crate::call::invoke::{CallFuture, Invoke, ToolCtx};

/// One plugin version loaded in process, shared by its tools.
pub(crate) struct InProcessPlugin {
    pub module: PluginModRef,
    /// Blocking threads still running calls the host gave up on.
    pub runaway: AtomicUsize,
}

/// One tool of an in-process plugin.
pub(crate) struct InProcessInvoke {
    pub plugin: Arc<InProcessPlugin>,
    pub tool: Arc<str>,
}

const RUNNING: u8 = 0;
const FINISHED: u8 = 1;
const ABANDONED: u8 = 2;

/// Counts the blocking thread as a runaway if the call's future is dropped before the thread
/// finishes; the thread uncounts itself when it finally does.
struct RunawayGuard {
    state: Arc<AtomicU8>,
    plugin: Arc<InProcessPlugin>,
}

impl Drop for RunawayGuard {
    fn drop(&mut self) {
        if self
            .state
            .compare_exchange(RUNNING, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.plugin.runaway.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Invoke for InProcessInvoke {
    fn invoke(&self, args: Arc<Value>, ctx: ToolCtx) -> CallFuture {
        let plugin = self.plugin.clone();
        let tool = self.tool.clone();
        Box::pin(async move {
            let state = Arc::new(AtomicU8::new(RUNNING));
            let guard = RunawayGuard {
                state: state.clone(),
                plugin: plugin.clone(),
            };
            let module = plugin.module;
            let thread_plugin = plugin.clone();
            let (tx, rx) = tokio::sync::oneshot::channel();
            let spawned = crate::plugin::pool::spawn(move || {
                let args_json = crate::call::json::to_json(&args);
                let on_update = |partial: &str| ctx.update(partial);
                let on_log = |level, line: &str| ctx.log(level, line);
                let on_ask = |question| ctx.ask_blocking(question);
                let info = CallInfo {
                    time_left: ctx.time_left(),
                    traceparent: ctx.traceparent().unwrap_or_default(),
                    on_log: Some(&on_log),
                    on_ask: Some(&on_ask),
                };
                let raw = call_module(
                    module,
                    &tool,
                    &args_json,
                    ctx.call_id(),
                    ctx.cancel_flag(),
                    &on_update,
                    info,
                );
                let result = parse_outcome(&tool, raw);
                if state.swap(FINISHED, Ordering::AcqRel) == ABANDONED {
                    thread_plugin.runaway.fetch_sub(1, Ordering::Relaxed);
                }
                let _ = tx.send(result);
            });
            if let Err(e) = spawned {
                drop(guard);
                return Err(Failure::Crash(CrashReason::Formatted(format!(
                    "no thread could be started for the call: {e}"
                ))));
            }
            let result = rx.await;
            drop(guard);
            // The job always sends; a closed channel means the thread died, which only a bug in
            // this crate could cause (the plugin catches its own panics).
            result.unwrap_or(Err(Failure::Crash(CrashReason::Aborted)))
        })
    }

    /// The plugin runs on a thread of the detached pool; the future only waits for its answer.
    fn never_blocks(&self) -> bool {
        true
    }

    fn runs(&self) -> crate::Runs {
        crate::Runs::Host
    }

    fn runaway_threads(&self) -> usize {
        self.plugin.runaway.load(Ordering::Relaxed)
    }
}
