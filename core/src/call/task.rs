//! A call's own work (the gate, the tool, the check of its answer) as its supervising loop
//! drives it: inside the call's task when nothing in it can block the polling thread, in a task
//! of its own otherwise. Either way the loop sees one future that ends once, with how the work
//! ended or why it could not. And the call's end when its task died before it published one.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use rho_plugin_api::Answer;
use rho_protocol::{CrashReason, Failure, Outcome, ToolResult, crash_text};
use tokio::task::{JoinError, JoinHandle};

use crate::bus::Bus;
use crate::bus::events::{EventKind, OutputView, ServedBy, event_text};
use crate::call::gate::ToolCall;
use crate::call::panic::{Caught, payload_message};

/// What ended a call's work, as the work reports it.
pub(crate) enum TaskEnd {
    Blocked(String),
    Answered(Result<Answer, Failure>),
    GateCrashed(String),
    /// The answer broke the tool's output schema: the text says where.
    BrokeSchema(String),
    /// The tool failed past its deadline (a component stopped at it): `timed_out`, seen first or not.
    FailedPastDeadline,
}

/// A call's work: driven in place (`Inline`: the gate and the tool never block the thread that
/// polls them) or in a task of its own (`Spawned`). Resolves to the work's end, or to the outcome
/// and text of a work that panicked or was stopped.
pub(crate) enum CallTask<F> {
    /// Polled by the supervising loop itself; `None` once aborted.
    Inline(Option<F>),
    /// A task of its own, joined.
    Spawned(JoinHandle<TaskEnd>),
}

impl<F> CallTask<F> {
    /// Stops the work: an inline one is dropped at once (a panic in its drop, a tool's code, is
    /// caught and logged: the call still ends here), a spawned one at its next await.
    pub(crate) fn abort(&mut self) {
        match self {
            CallTask::Inline(work) => {
                let work = work.take();
                let dropped =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(work)));
                if let Err(payload) = dropped {
                    let message = payload_message(payload);
                    tracing::error!(?message, "dropping a stopped call's work panicked");
                }
            }
            CallTask::Spawned(task) => task.abort(),
        }
    }
}

impl<F> Future for CallTask<F>
where
    F: Future<Output = Result<TaskEnd, Caught>> + Unpin,
{
    type Output = Result<TaskEnd, (Outcome, String)>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            CallTask::Inline(None) => Poll::Ready(Err(aborted())),
            CallTask::Inline(Some(work)) => Pin::new(work).poll(cx).map(|ended| {
                ended.map_err(|caught| {
                    let text = caught.describe("the tool's task");
                    (Outcome::Crashed, crash_text(&CrashReason::Formatted(text)))
                })
            }),
            CallTask::Spawned(task) => Pin::new(task).poll(cx).map(joined),
        }
    }
}

fn aborted() -> (Outcome, String) {
    (Outcome::Crashed, crash_text(&CrashReason::Aborted))
}

/// A spawned task's join result as its end, reading nothing of a foreign panic payload but a
/// `&str` or `String`.
fn joined(joined: Result<TaskEnd, JoinError>) -> Result<TaskEnd, (Outcome, String)> {
    match joined {
        Ok(end) => Ok(end),
        Err(error) if error.is_panic() => {
            let reason = match payload_message(error.into_panic()) {
                Some(message) => {
                    CrashReason::Formatted(format!("the tool's task panicked: {message}"))
                }
                None => CrashReason::NonStringPanic,
            };
            Err((Outcome::Crashed, crash_text(&reason)))
        }
        Err(_) => Err(aborted()),
    }
}

/// A call's end when its task died before publishing one (a panic inside the runner, whose last
/// step publishes the end): the call still ends once, `crashed`, with its event (were it a probe,
/// its guard gave it back).
pub(crate) fn fallback_end(bus: &Bus, call: &ToolCall, session: Option<&str>) -> ToolResult {
    let text = "rho: the call's task failed inside the runner";
    let result = ToolResult::failed(&call.id, &call.name, Outcome::Crashed, text);
    let principal = call.principal.clone();
    bus.publish(
        session,
        end_event(&result, (&result.output).into(), None, principal),
    );
    result
}

/// The `tool_execution_end` event of `result`, with `output` its view, served by `served_by`.
pub(crate) fn end_event(
    result: &ToolResult,
    output: OutputView,
    served_by: Option<ServedBy>,
    principal: Option<std::sync::Arc<crate::Principal>>,
) -> EventKind {
    EventKind::ToolExecutionEnd {
        call_id: result.call_id.clone(),
        tool: result.tool.clone(),
        outcome: result.outcome,
        output,
        is_error: result.is_error(),
        structured: result.structured.clone(),
        details: result.details.clone(),
        full_text: result.full_text.as_deref().map(event_text),
        duration_ms: result.duration.as_secs_f64() * 1000.0,
        served_by,
        principal,
        decision: result.decision.clone(),
    }
}
