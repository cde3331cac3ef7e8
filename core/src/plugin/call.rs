//! Calling a plugin in process: synchronous FFI on a blocking thread, the answer copied into
//! host-owned data inside that call, and runaway threads counted when the host gives up.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

use std::time::Duration;

use abi_stable::std_types::{ROption, RResult, RStr, RString};
use rho_plugin_api::ffi::{FfiAnswer2, FfiCallInfo, FfiCtx, FfiOutcome2, PluginModRef};
use rho_plugin_api::{Answer, Image};
use serde_json::Value;

use crate::call::answer::{self, FailureKind};
use crate::call::invoke::{CallFuture, Failure, Invoke, ToolCtx};
use crate::call::outcome::CrashReason;

/// A plugin's string as host data, refused unless it is UTF-8: abi_stable's `RString` takes its
/// maker's word for it, and text that is not UTF-8 must never reach a client.
pub(crate) fn plain_text(s: RString) -> Option<String> {
    String::from_utf8(s.into_bytes().into_vec()).ok()
}

/// Copies a plugin's answer into host-owned data. Text, mime types, messages or details that are
/// not UTF-8, and details that are not JSON (or nest deeper than [`MAX_DETAILS_DEPTH`](rho_plugin_api::MAX_DETAILS_DEPTH)), make the
/// call crash with a text naming the field: the plugin broke its contract. An answer over the
/// codec's limits ([`MAX_IMAGES`](crate::call::answer::MAX_IMAGES) images, details of
/// [`MAX_DETAILS_BYTES`](crate::call::answer::MAX_DETAILS_BYTES)) is the tool's error, and what
/// lies past the limit is not copied.
pub fn answer_from_ffi(tool: &str, outcome: FfiOutcome2) -> Result<Answer, Failure> {
    let broken = |what: &str| {
        Failure::Crash(CrashReason::Formatted(format!(
            "tool `{tool}` answered with {what} not UTF-8"
        )))
    };
    let json = |what: &str, json: ROption<RString>| match json.into_option() {
        None => Ok(None),
        Some(json) => {
            let json = plain_text(json).ok_or_else(|| broken(&format!("{what} that are")))?;
            answer::json_part(tool, what, &json).map(Some)
        }
    };
    match outcome {
        RResult::ROk(FfiAnswer2 {
            answer,
            structured_json,
        }) => {
            if answer.images.len() > answer::MAX_IMAGES {
                return Err(answer::too_many_images(tool, answer.images.len()));
            }
            let structured = json("structured content", structured_json)?;
            let details = json("details", answer.details_json)?;
            let text = plain_text(answer.text).ok_or_else(|| broken("a text that is"))?;
            let mut images = Vec::with_capacity(answer.images.len());
            for image in answer.images {
                let mime =
                    plain_text(image.mime_type).ok_or_else(|| broken("a mime type that is"))?;
                images.push(Image::new(mime, image.bytes.as_slice()));
            }
            let output = answer::output(tool, answer.kind.into(), text, images)?;
            Ok(Answer {
                output,
                structured,
                details,
            })
        }
        RResult::RErr(failure) => {
            let message =
                plain_text(failure.message).ok_or_else(|| broken("an error message that is"))?;
            let kind = FailureKind::from(failure.kind);
            // A panic's message from the plugin's glue does not name the tool; the host does.
            let message = match kind {
                FailureKind::Panic => format!("tool `{tool}` {message}"),
                _ => message,
            };
            Err(answer::failure(kind, message, || {
                json("details", failure.details_json)
            }))
        }
    }
}

/// What a plugin is told about a call besides its arguments (interface 2; a plugin of interface
/// 1 is told nothing of it).
#[derive(Debug, Clone, Copy, Default)]
pub struct CallInfo<'a> {
    /// Time left until the host ends the call, as of now.
    pub time_left: Option<Duration>,
    /// The call's W3C `traceparent`; empty when none.
    pub traceparent: &'a str,
}

/// Calls `tool` of `module` on the current thread and copies the answer. A partial update that
/// is not UTF-8 is not forwarded and makes the call crash when it ends.
pub fn call_module(
    module: PluginModRef,
    tool: &str,
    args_json: &str,
    call_id: &str,
    cancelled: &AtomicBool,
    on_update: &(dyn Fn(&str) + Sync),
    info: CallInfo<'_>,
) -> Result<Answer, Failure> {
    let bad_update = AtomicBool::new(false);
    let checked = |update: Option<&str>| match update {
        Some(text) if !bad_update.load(Ordering::Relaxed) => on_update(text),
        Some(_) => {}
        None => bad_update.store(true, Ordering::Relaxed),
    };
    let checked: &(dyn Fn(Option<&str>) + Sync) = &checked;
    let ctx = FfiCtx::new(call_id, cancelled, &checked);
    let (tool_name, args) = (RStr::from_str(tool), RStr::from_str(args_json));
    let call_with = crate::plugin::load::uses_interface_2(module)
        .then(|| module.call_with())
        .flatten();
    let outcome = match call_with {
        Some(call_with) => {
            let info = FfiCallInfo {
                time_left_ms: info
                    .time_left
                    .map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX))
                    .into(),
                traceparent: RStr::from_str(info.traceparent),
            };
            call_with(tool_name, args, ctx, info)
        }
        None => match (module.call())(tool_name, args, ctx) {
            RResult::ROk(answer) => RResult::ROk(FfiAnswer2 {
                answer,
                structured_json: ROption::RNone,
            }),
            RResult::RErr(failure) => RResult::RErr(failure),
        },
    };
    let answer = answer_from_ffi(tool, outcome);
    if bad_update.load(Ordering::Relaxed) {
        return Err(Failure::Crash(CrashReason::Formatted(format!(
            "tool `{tool}` sent a partial update that is not UTF-8"
        ))));
    }
    answer
}

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
                let info = CallInfo {
                    time_left: ctx.time_left(),
                    traceparent: ctx.traceparent().unwrap_or_default(),
                };
                let result = call_module(
                    module,
                    &tool,
                    &args_json,
                    ctx.call_id(),
                    ctx.cancel_flag(),
                    &on_update,
                    info,
                );
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

    fn runaway_threads(&self) -> usize {
        self.plugin.runaway.load(Ordering::Relaxed)
    }
}
