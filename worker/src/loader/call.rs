//! Calling a loaded plugin on the current thread: synchronous FFI, the answer copied into host
//! data (checked: UTF-8, JSON, the answer codec's limits) before it leaves the call.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use abi_stable::std_types::{ROption, RResult, RStr, RString};
use rho_plugin_api::Answer;
use rho_plugin_api::Image;
use rho_plugin_api::ffi::{FfiAnswer2, FfiCallInfo, FfiCtx, FfiOutcome2, PluginModRef};
use rho_protocol::answer::{self, FailureKind};
use rho_protocol::{CrashReason, Failure};

use crate::loader::abi::plain_text;

/// Copies a plugin's answer into host-owned data. Text, mime types, messages or details that are
/// not UTF-8, and details that are not JSON (or nest deeper than [`MAX_DETAILS_DEPTH`](rho_plugin_api::MAX_DETAILS_DEPTH)), make the
/// call crash with a text naming the field: the plugin broke its contract. An answer over the
/// codec's limits ([`MAX_IMAGES`](rho_protocol::answer::MAX_IMAGES) images, details of
/// [`MAX_DETAILS_BYTES`](rho_protocol::answer::MAX_DETAILS_BYTES)) is the tool's error, and what
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
    let call_with = crate::loader::abi::uses_interface_2(module)
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
