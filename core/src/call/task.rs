//! A call's own work (the gate, the tool, the check of its answer) as its supervising loop
//! drives it: inside the call's task when nothing in it can block the polling thread, in a task
//! of its own otherwise. Either way the loop sees one future that ends once, with how the work
//! ended or why it could not.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use rho_plugin_api::Answer;
use rho_protocol::{CrashReason, Failure, Outcome, ToolResult, crash_text};
use tokio::task::{JoinError, JoinHandle};
use tokio_util::sync::CancellationToken;

use crate::bus::events::EventKind;
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
    /// Stops the work: an inline one is dropped at once, a spawned one at its next await.
    pub(crate) fn abort(&mut self) {
        match self {
            CallTask::Inline(work) => *work = None,
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

/// A call's end when its work died before publishing one (a panic inside the runner, whose
/// last step publishes the end): the call still ends once, `crashed`, with its event (were it
/// a probe, its guard gave it back).
pub(crate) struct Fallback {
    pub(crate) bus: crate::bus::Bus,
    pub(crate) call: std::sync::Arc<crate::call::gate::ToolCall>,
    pub(crate) session: Option<String>,
}

impl Fallback {
    fn end(self) -> ToolResult {
        let text = "rho: the call's task failed inside the runner";
        let result = ToolResult::failed(&self.call.id, &self.call.name, Outcome::Crashed, text);
        self.bus.publish(
            self.session.as_deref(),
            EventKind::ToolExecutionEnd {
                call_id: result.call_id.clone(),
                tool: result.tool.clone(),
                outcome: result.outcome,
                output: (&result.output).into(),
                is_error: true,
                structured: None,
                details: None,
                full_text: None,
                duration_ms: 0.0,
            },
        );
        result
    }
}

/// A whole call (`ToolRunner::run`'s work) driven by its caller's task; dropped before its end,
/// it cancels the call and hands what is left to a task of its own, which ends it (so a caller
/// that goes away never loses a call's end or its event).
pub(crate) struct RunsToEnd<W>
where
    W: Future<Output = Result<ToolResult, Caught>> + Send + Unpin + 'static,
{
    pub(crate) work: Option<W>,
    /// The call's own cancellation, fired when the caller goes away.
    pub(crate) abandoned: CancellationToken,
    pub(crate) fallback: Option<Fallback>,
}

impl<W> Future for RunsToEnd<W>
where
    W: Future<Output = Result<ToolResult, Caught>> + Send + Unpin + 'static,
{
    type Output = ToolResult;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ToolResult> {
        let this = self.get_mut();
        let (Some(work), Some(_)) = (this.work.as_mut(), this.fallback.as_ref()) else {
            // Polled again after its end: nothing more to give.
            return Poll::Pending;
        };
        let ended = std::task::ready!(Pin::new(work).poll(cx));
        this.work = None;
        let fallback = this.fallback.take();
        Poll::Ready(match (ended, fallback) {
            (Ok(result), _) => result,
            (Err(caught), fallback) => {
                tracing::error!(panic = %caught.describe("the runner"), "a call's work panicked");
                fallback.map(Fallback::end).unwrap_or_else(|| {
                    ToolResult::failed("", "", Outcome::Crashed, "rho: the call's work panicked")
                })
            }
        })
    }
}

impl<W> Drop for RunsToEnd<W>
where
    W: Future<Output = Result<ToolResult, Caught>> + Send + Unpin + 'static,
{
    fn drop(&mut self) {
        let (Some(work), Some(fallback)) = (self.work.take(), self.fallback.take()) else {
            return;
        };
        self.abandoned.cancel();
        let rest = async move {
            if work.await.is_err() {
                fallback.end();
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(rest);
            }
            // Dropped outside any runtime: nothing can drive the rest (its end event may be out
            // already, so none is made up here).
            Err(_) => {
                tracing::warn!("a call dropped outside a runtime ends without its tool's end");
            }
        }
    }
}
