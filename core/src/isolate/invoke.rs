//! One call in a worker: acquire a worker, send the call, relay partial updates, and turn whatever
//! comes back (an answer, a failure, the worker's death, a broken frame) into the call's end. If
//! the runner gives up (timeout, cancellation) the worker gets a cancel message and, unless it
//! answers within the grace period, SIGKILL; the host never waits for it.

use std::sync::Arc;

use serde_json::Value;

use crate::call::invoke::{CallFuture, Failure, Invoke, ToolCtx};
use crate::isolate::pool::{Pool, Worker};
use rho_protocol::CrashReason;
use rho_protocol::answer;
use rho_protocol::frames::{
    AnswerLayout, Frame, FrameError, FromWorker, ToWorker, decode_answer, decode_details,
    decode_questions,
};

/// One tool of an isolated plugin version.
pub(crate) struct IsolatedInvoke {
    pub pool: Pool,
    pub tool: Arc<str>,
}

/// Owns the worker while a call runs. Dropped unfinished (the runner gave up), it cancels the call
/// and kills the worker after the grace period unless the worker answers first.
struct CallGuard {
    worker: Option<Worker>,
    pool: Pool,
    id: u64,
}

impl CallGuard {
    fn worker(&mut self) -> Option<&mut Worker> {
        self.worker.as_mut()
    }

    /// The call ended cleanly: the worker serves the next one.
    fn release(mut self) {
        if let Some(worker) = self.worker.take() {
            self.pool.release(worker);
        }
        self.pool.top_up();
    }

    /// The worker is dead or broken: stop it (its end, if it crashed, is read already), then
    /// replace it.
    fn kill(mut self) {
        drop(self.worker.take());
        self.pool.top_up();
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        let Some(mut worker) = self.worker.take() else {
            return;
        };
        let pool = self.pool.clone();
        let id = self.id;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let grace = pool.options().cancel_grace;
            let limit = pool.options().max_frame;
            // The send is inside the grace period too: a worker that never reads its cancel
            // channel must not hold this task (and the worker) forever.
            let settled = tokio::time::timeout(grace, async {
                // A tool waiting for the replies to its questions reads this one (no reply: each
                // reads as cancelled; a worker not waiting skips it), then its cancellation.
                let unasked = ToWorker::Answered {
                    id,
                    replies: Vec::new(),
                    time_left_ms: None,
                };
                if worker.send(&unasked, &[]).await.is_err()
                    || worker.send(&ToWorker::Cancel { id }, &[]).await.is_err()
                {
                    return false;
                }
                loop {
                    match worker.read(limit).await {
                        Ok(Frame {
                            message:
                                FromWorker::Answer { id: a, .. } | FromWorker::Failure { id: a, .. },
                            ..
                        }) if a == id => {
                            return true;
                        }
                        Ok(_) => {}
                        Err(_) => return false,
                    }
                }
            })
            .await;
            if settled == Ok(true) {
                pool.release(worker);
            } else {
                // SIGKILL to its process group.
                drop(worker);
            }
            pool.top_up();
        });
    }
}

impl Invoke for IsolatedInvoke {
    /// The plugin runs in a worker process; the future only waits on its pipes.
    fn never_blocks(&self) -> bool {
        true
    }

    fn runs(&self) -> crate::Runs {
        crate::Runs::Worker
    }

    fn invoke(&self, args: Arc<Value>, ctx: ToolCtx) -> CallFuture {
        let pool = self.pool.clone();
        let tool = self.tool.clone();
        Box::pin(async move {
            let crash = |reason| Err(Failure::Crash(reason));
            let mut worker = match pool.acquire().await {
                Ok(worker) => worker,
                Err(e) => {
                    return crash(CrashReason::ProcessDied(format!(
                        "no worker could be started: {e}"
                    )));
                }
            };
            let id = worker.next_id();
            let call = ToWorker::Call {
                id,
                tool: tool.to_string(),
                call_id: ctx.call_id().to_owned(),
                time_left_ms: ctx
                    .time_left()
                    .map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX)),
                traceparent: ctx.traceparent().map(str::to_owned),
            };
            let args = crate::call::json::to_json(&args);
            let limit = pool.options().max_frame;
            let mut guard = CallGuard {
                worker: Some(worker),
                pool,
                id,
            };
            let Some(worker) = guard.worker() else {
                return crash(CrashReason::Aborted);
            };
            if worker.send(&call, args.as_bytes()).await.is_err() {
                let how = worker
                    .exit_text(std::time::Duration::from_secs(1), " before the call")
                    .await;
                guard.kill();
                return crash(CrashReason::ProcessDied(how));
            }
            loop {
                let Some(worker) = guard.worker() else {
                    return crash(CrashReason::Aborted);
                };
                match worker.read(limit).await {
                    Ok(Frame {
                        message: FromWorker::Update { id: u, partial },
                        ..
                    }) => {
                        // An update of an earlier call (a thread the plugin left running) is
                        // dropped, not taken for a broken protocol.
                        if u == id {
                            ctx.update(&partial);
                        }
                    }
                    Ok(Frame {
                        message: FromWorker::Log { id: u, level, line },
                        ..
                    }) => {
                        // As an update: a line of an earlier call is dropped.
                        if u == id {
                            ctx.log(level, &line);
                        }
                    }
                    Ok(Frame {
                        message: FromWorker::Ask { id: q, questions },
                        blobs,
                    }) if q == id => {
                        let replies = match decode_questions(&questions, blobs) {
                            Ok(questions) => ctx.ask_all(questions).await,
                            Err(why) => {
                                guard.kill();
                                return crash(CrashReason::Protocol(why));
                            }
                        };
                        let answered = ToWorker::Answered {
                            id,
                            replies,
                            time_left_ms: ctx
                                .time_left()
                                .map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX)),
                        };
                        let Some(worker) = guard.worker() else {
                            return crash(CrashReason::Aborted);
                        };
                        // A worker gone meanwhile is found by the next read.
                        let _ = worker.send(&answered, &[]).await;
                    }
                    Ok(Frame {
                        message:
                            FromWorker::Answer {
                                id: a,
                                kind,
                                text_len,
                                images,
                                blocks,
                                details,
                                structured,
                                spent,
                            },
                        blobs,
                    }) if a == id => {
                        let layout = AnswerLayout {
                            kind,
                            text_len,
                            images,
                            blocks,
                            details,
                            structured,
                        };
                        let answer = decode_answer(&tool, layout, blobs);
                        match &answer {
                            Err(Failure::Crash(CrashReason::Protocol(_))) => guard.kill(),
                            // Damaged by the call: a fresh worker serves the next one.
                            _ if spent => guard.kill(),
                            _ => guard.release(),
                        }
                        return answer;
                    }
                    Ok(Frame {
                        message:
                            FromWorker::Failure {
                                id: f,
                                kind,
                                message,
                                details,
                                spent,
                            },
                        ..
                    }) if f == id => {
                        let failure =
                            answer::failure(kind, message, || decode_details(&tool, details));
                        match &failure {
                            Failure::Crash(CrashReason::Protocol(_)) => guard.kill(),
                            _ if spent => guard.kill(),
                            _ => guard.release(),
                        }
                        return Err(failure);
                    }
                    Ok(Frame { message, .. }) => {
                        guard.kill();
                        return crash(CrashReason::Protocol(format!(
                            "an unexpected message: {message:?}"
                        )));
                    }
                    Err(FrameError::Closed) => {
                        let how = worker
                            .exit_text(std::time::Duration::from_secs(2), " during the call")
                            .await;
                        guard.kill();
                        return crash(CrashReason::ProcessDied(how));
                    }
                    Err(error) => {
                        guard.kill();
                        return crash(CrashReason::Protocol(error.to_string()));
                    }
                }
            }
        })
    }
}
