//! One call in a worker: acquire a worker, send the call, relay partial updates, and turn whatever
//! comes back (an answer, a failure, the worker's death, a broken frame) into the call's end. If
//! the runner gives up (timeout, cancellation) the worker gets a cancel message and, unless it
//! answers within the grace period, SIGKILL; the host never waits for it.

use std::sync::Arc;

use rho_plugin_api::{Answer, Image, Question};

use rho_protocol::answer::{self, OutputKind};
use serde_json::Value;

use crate::call::invoke::{CallFuture, Failure, Invoke, ToolCtx};
use crate::isolate::pool::{Pool, Worker};
use rho_protocol::CrashReason;
use rho_protocol::frames::{
    BlockHeads, Frame, FrameError, FromWorker, ImageHeads, QuestionHead, ToWorker,
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
                        let replies = match questions_of(&questions, blobs) {
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
                        let shape = AnswerShape {
                            kind,
                            text_len,
                            images,
                            blocks,
                            details,
                            structured,
                        };
                        let answer = to_answer(&tool, shape, blobs);
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
                        let failure = answer::failure(kind, message, || details_of(&tool, details));
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

fn details_of(tool: &str, details: Option<String>) -> Result<Option<Value>, Failure> {
    json_of(tool, "details", details)
}

/// A worker's JSON text (`what` of `tool`: details, structured content) as a value, through the
/// answer codec's one reader of such parts.
fn json_of(tool: &str, what: &str, json: Option<String>) -> Result<Option<Value>, Failure> {
    let part = json
        .map(|json| answer::json_part(tool, what, &json))
        .transpose();
    // The worker checked the plugin's text before sending it: text the host cannot read was
    // forged on the channel.
    part.map_err(|failure| match failure {
        Failure::Crash(CrashReason::Formatted(text)) => Failure::Crash(CrashReason::Protocol(text)),
        other => other,
    })
}

/// The question of an `Ask` message: its message (`message_len` bytes of `blobs`) and its
/// schema (the rest), or why they are not one (the worker checked them: this is a forged frame).
/// The questions of an `Ask` frame, from their heads and the frame's blobs (each question's
/// message then its schema): what the worker checked, checked again (the worker runs the
/// plugin's code).
fn questions_of(heads: &[QuestionHead], blobs: Vec<u8>) -> Result<Vec<Question>, String> {
    let announced = heads.iter().try_fold(0usize, |sum, head| {
        sum.checked_add(head.message_len)?
            .checked_add(head.schema_len)
    });
    if heads.is_empty()
        || heads.len() > rho_protocol::answer::MAX_QUESTIONS_AT_ONCE
        || announced.is_none_or(|n| n > rho_protocol::answer::MAX_QUESTION_BYTES)
        || announced != Some(blobs.len())
    {
        return Err(format!(
            "{} questions announcing {announced:?} bytes carried {}",
            heads.len(),
            blobs.len()
        ));
    }
    let mut keys = std::collections::HashSet::new();
    let mut at = 0;
    let mut questions = Vec::with_capacity(heads.len());
    for head in heads {
        let mut text = |len: usize, what: &str| {
            let part = std::str::from_utf8(&blobs[at..at + len])
                .map_err(|_| format!("a question's {what} not UTF-8"));
            at += len;
            part
        };
        let message = text(head.message_len, "message")?.to_owned();
        let schema = rho_protocol::details::parse(text(head.schema_len, "schema")?)
            .map_err(|e| format!("a question's schema {e}"))?;
        let question = Question::new(message, schema);
        questions.push(match &head.key {
            Some(key) if !rho_plugin_api::is_valid_key(key) || !keys.insert(key.clone()) => {
                return Err(format!("a question's key `{key}` is not one or not unique"));
            }
            Some(key) => question.with_key(key.clone()),
            None => question,
        });
    }
    Ok(questions)
}

/// The parts of an `Answer` message besides its blobs.
struct AnswerShape {
    kind: OutputKind,
    text_len: usize,
    images: ImageHeads,
    blocks: BlockHeads,
    details: Option<String>,
    structured: Option<String>,
}

fn to_answer(tool: &str, shape: AnswerShape, mut blobs: Vec<u8>) -> Result<Answer, Failure> {
    let AnswerShape {
        kind,
        text_len,
        images,
        blocks,
        details,
        structured,
    } = shape;
    if kind == OutputKind::Blocks {
        return to_blocks(tool, blocks, blobs, details, structured);
    }
    // The heads' lengths were summed as they were read (none past the limit was kept).
    let announced = images.total_len().and_then(|len| len.checked_add(text_len));
    if announced != Some(blobs.len()) {
        return Err(Failure::Crash(CrashReason::Protocol(format!(
            "an answer announcing {text_len} text bytes and {} image bytes carried {}",
            images
                .total_len()
                .map_or_else(|| "more than 2^64".to_owned(), |n| n.to_string()),
            blobs.len()
        ))));
    }
    if images.count() > answer::MAX_IMAGES {
        return Err(answer::too_many_images(tool, images.count()));
    }
    let heads = images.heads();
    // The common shapes keep the buffer the frame was read into: text alone is the whole of it,
    // and so is a lone image after empty text. Others copy each part out once.
    let (text, images) = match heads {
        [] => (blobs, Vec::new()),
        [head] if text_len == 0 => (Vec::new(), vec![Image::new(head.mime_type.clone(), blobs)]),
        _ => {
            let mut at = text_len;
            let images = heads
                .iter()
                .map(|head| {
                    let image = Image::new(head.mime_type.clone(), &blobs[at..at + head.len]);
                    at += head.len;
                    image
                })
                .collect();
            blobs.truncate(text_len);
            (blobs, images)
        }
    };
    let text = String::from_utf8(text).map_err(|e| {
        Failure::Crash(CrashReason::Protocol(format!(
            "invalid UTF-8 in the answer's text: {}",
            e.utf8_error()
        )))
    })?;
    Ok(Answer {
        output: answer::output(tool, kind, text, images)?,
        structured: json_of(tool, "structured content", structured)?,
        details: details_of(tool, details)?,
    })
}

/// An answer of blocks: each head's payload cut from `blobs` in order.
fn to_blocks(
    tool: &str,
    blocks: BlockHeads,
    mut blobs: Vec<u8>,
    details: Option<String>,
    structured: Option<String>,
) -> Result<Answer, Failure> {
    if blocks.total_len() != Some(blobs.len()) {
        return Err(Failure::Crash(CrashReason::Protocol(format!(
            "an answer announcing {} block bytes carried {}",
            blocks
                .total_len()
                .map_or_else(|| "more than 2^64".to_owned(), |n| n.to_string()),
            blobs.len()
        ))));
    }
    let count = blocks.count();
    if count > answer::MAX_BLOCKS {
        return Err(answer::too_many_blocks(tool, count));
    }
    // Cut from the end, so each payload is moved out once.
    let mut parts: Vec<_> = blocks
        .into_heads()
        .into_iter()
        .rev()
        .map(|frame| {
            let payload = blobs.split_off(blobs.len() - frame.len);
            (frame.head, payload)
        })
        .collect();
    parts.reverse();
    let output = answer::blocks(tool, count, parts).map_err(|failure| match failure {
        Failure::Crash(CrashReason::Formatted(text)) => Failure::Crash(CrashReason::Protocol(text)),
        other => other,
    })?;
    Ok(Answer {
        output,
        structured: json_of(tool, "structured content", structured)?,
        details: details_of(tool, details)?,
    })
}
