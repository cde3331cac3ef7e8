//! A tool's questions to the user: who answers them ([`Answerer`]), and how a call's question
//! reaches the runner, which bounds the wait and moves the call's deadline by it.
//!
//! A tool asks through [`ToolCtx::ask`](crate::ToolCtx::ask) (a plugin through its `Ctx::ask`).
//! The question goes to the call's runner, which asks the call's answerer
//! ([`CallOptions::answerer`](crate::CallOptions::answerer), else the host's,
//! [`HostBuilder::answerer`](crate::HostBuilder::answerer), else [`NoOneToAsk`]). While the
//! question is open the call's timeout is paused: its deadline moves later by exactly the time
//! the question was open. The wait itself is bounded
//! ([`RunnerConfig::ask_timeout`](crate::RunnerConfig::ask_timeout)): past it the tool reads
//! [`Reply::Cancelled`] and goes on. A call cancelled or stopped while its tool waits ends as
//! any call does; the tool reads `Cancelled`. A tool may ask several questions at once
//! ([`ToolCtx::ask_all`](crate::ToolCtx::ask_all)): they reach the answerer together
//! ([`Answerer::answer_all`]) and the wait is one wait, bounded as one. A call's askings are
//! answered one at a time, in the order the tool made them.

use std::sync::Arc;

use rho_plugin_api::{Question, Reply};
use tokio::sync::oneshot;

use crate::call::gate::ToolCall;
use crate::call::panic::catch;

/// Answers the questions tools ask their user in the middle of a call (a person at a terminal,
/// an MCP client's elicitation). Implemented by every async closure
/// `Fn(Question, ToolCall) -> impl Future<Output = Reply>`.
///
/// Unlike the gate's [`Asker`](crate::Asker), which asks whether a call may start, an answerer
/// carries the tool's own question and the JSON Schema of its answer.
///
/// ```
/// use std::sync::Arc;
/// use rho_runtime::{Answerer, Question, Reply, ToolCall};
/// use serde_json::json;
/// let always_yes: Arc<dyn Answerer> = Arc::new(|question: Question, _call: ToolCall| async move {
///     Reply::Accepted(json!({"confirm": true}))
/// });
/// # let _ = always_yes;
/// ```
#[async_trait::async_trait]
pub trait Answerer: Send + Sync + 'static {
    /// The user's reply to `question`, asked by the tool of `call`. A panic in it cancels the
    /// question (the tool reads `Cancelled`), never the call.
    async fn answer(&self, question: &Question, call: &ToolCall) -> Reply;

    /// The user's replies to `questions`, asked together by the tool of `call`: one reply per
    /// question, in their order (missing ones read as cancelled). By default they are answered
    /// one after another with [`Answerer::answer`]; an answerer that can show them together
    /// (an MCP client's `inputRequests`) does so.
    async fn answer_all(&self, questions: &[Question], call: &ToolCall) -> Vec<Reply> {
        let mut replies = Vec::with_capacity(questions.len());
        for question in questions {
            replies.push(self.answer(question, call).await);
        }
        replies
    }
}

#[async_trait::async_trait]
impl<F, Fut> Answerer for F
where
    F: Fn(Question, ToolCall) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Reply> + Send,
{
    async fn answer(&self, question: &Question, call: &ToolCall) -> Reply {
        self(question.clone(), call.clone()).await
    }
}

/// The answerer of a host that has no one to ask: every question is declined, with a reason
/// the tool can read.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoOneToAsk;

/// The reason [`NoOneToAsk`] gives.
pub const NO_ONE_TO_ASK: &str = "no one can be asked here: the host has no way to reach a user";

#[async_trait::async_trait]
impl Answerer for NoOneToAsk {
    async fn answer(&self, _question: &Question, _call: &ToolCall) -> Reply {
        Reply::Declined(NO_ONE_TO_ASK.into())
    }
}

/// [`NoOneToAsk`] as a shareable handle.
pub fn no_one_to_ask() -> Arc<dyn Answerer> {
    Arc::new(NoOneToAsk)
}

/// Questions asked together on their way from a running tool to its call's runner.
pub(crate) struct Asked {
    /// The questions.
    pub questions: Vec<Question>,
    /// Where the replies go, one per question (dropped unanswered: the tool reads `Cancelled`).
    pub reply: oneshot::Sender<Vec<Reply>>,
}

/// A call's questions on their way from its tool to its runner: a queue inside the call's
/// context (nothing to allocate for a call that asks nothing), closed when the call ends, after
/// which a question is answered [`Reply::Cancelled`] at once.
#[derive(Default)]
pub(crate) struct Inbox {
    queue: std::sync::Mutex<InboxQueue>,
    /// The runner's wait for the next questions (one waiter: the call's loop).
    arrived: futures_util::task::AtomicWaker,
}

#[derive(Default)]
struct InboxQueue {
    asked: std::collections::VecDeque<Asked>,
    closed: bool,
}

impl Inbox {
    fn queue(&self) -> std::sync::MutexGuard<'_, InboxQueue> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues `asked` for the runner; gives it back once the call has ended.
    pub(crate) fn send(&self, asked: Asked) -> Result<(), Asked> {
        let mut queue = self.queue();
        if queue.closed {
            return Err(asked);
        }
        queue.asked.push_back(asked);
        drop(queue);
        self.arrived.wake();
        Ok(())
    }

    /// The next questions asked, in order; waits for them. One waiter at a time (the call's
    /// loop): a later one takes the wake-up of an earlier.
    pub(crate) async fn next(&self) -> Asked {
        std::future::poll_fn(|cx| {
            if let Some(asked) = self.queue().asked.pop_front() {
                return std::task::Poll::Ready(asked);
            }
            self.arrived.register(cx.waker());
            // Questions queued between the look above and the registration still wake it.
            match self.queue().asked.pop_front() {
                Some(asked) => std::task::Poll::Ready(asked),
                None => std::task::Poll::Pending,
            }
        })
        .await
    }

    /// Closes the inbox: questions still queued are dropped (their tools read `Cancelled`), and
    /// so is every later one.
    pub(crate) fn close(&self) {
        let dropped = {
            let mut queue = self.queue();
            queue.closed = true;
            std::mem::take(&mut queue.asked)
        };
        drop(dropped);
    }
}

/// The questions open now (asked together).
pub(crate) struct Asking {
    reply: std::pin::Pin<Box<dyn std::future::Future<Output = Vec<Reply>> + Send>>,
    to: oneshot::Sender<Vec<Reply>>,
    /// How many questions.
    count: usize,
    asked_at: tokio::time::Instant,
}

impl Asking {
    /// Asks `answerer` the questions of `asked` (a panic in it cancels them).
    pub(crate) fn start(asked: Asked, answerer: Arc<dyn Answerer>, call: &ToolCall) -> Asking {
        let Asked {
            questions,
            reply: to,
        } = asked;
        let call = call.clone();
        let count = questions.len();
        tracing::debug!(call = %call.id, tool = %call.name, count, "the tool asks its user");
        let reply = Box::pin(async move {
            let mut replies = match catch(|| answerer.answer_all(&questions, &call)).await {
                Ok(replies) => replies,
                Err(caught) => {
                    let why = caught.describe("the host's answerer");
                    return questions
                        .iter()
                        .map(|_| Reply::Cancelled(why.clone()))
                        .collect();
                }
            };
            replies.resize_with(questions.len(), || {
                Reply::Cancelled("the host's answerer gave no reply".into())
            });
            replies.truncate(questions.len());
            tokio::task::spawn_blocking(move || {
                questions
                    .iter()
                    .zip(replies)
                    .map(|(question, reply)| crate::call::ask::checked(question, reply))
                    .collect()
            })
            .await
            .unwrap_or_else(|_| {
                (0..count)
                    .map(|_| Reply::Cancelled("checking the answer failed".into()))
                    .collect()
            })
        });
        Asking {
            reply,
            to,
            count,
            asked_at: tokio::time::Instant::now(),
        }
    }

    /// The replies of the questions open in `asking` (pending while none are).
    pub(crate) async fn reply(asking: &mut Option<Asking>) -> Vec<Reply> {
        match asking {
            Some(open) => (&mut open.reply).await,
            None => std::future::pending().await,
        }
    }

    /// `reply` for every question open (the host's bound passed).
    pub(crate) fn all(&self, reply: Reply) -> Vec<Reply> {
        vec![reply; self.count]
    }

    /// Hands `replies` to the tool, the call's `deadline` moved later by the time the questions
    /// were open first (`move_to` tells the tool's context, so the tool reads the moved one with
    /// its replies); the moved deadline.
    pub(crate) fn finish(
        self,
        replies: Vec<Reply>,
        deadline: Option<tokio::time::Instant>,
        move_to: impl FnOnce(std::time::Instant),
    ) -> Option<tokio::time::Instant> {
        let waited = self.asked_at.elapsed();
        let moved = deadline.and_then(|at| at.checked_add(waited));
        if let Some(moved) = moved {
            move_to(moved.into_std());
        }
        let _ = self.to.send(replies);
        moved
    }
}

/// `reply` as the tool reads it: an accepted answer that does not fit the question's schema
/// (or a schema that is not one) becomes `Cancelled`, naming why. Run off the runtime's threads:
/// the schema is the tool's.
pub(crate) fn checked(question: &Question, reply: Reply) -> Reply {
    let Reply::Accepted(answer) = reply else {
        return reply;
    };
    if let Some(problem) = rho_protocol::schema_cost_problem(&question.schema) {
        return Reply::Cancelled(format!("the question's schema {problem}"));
    }
    match crate::call::validate::SchemaValidator::new(&question.schema, "the question's schema is")
    {
        Ok(validator) if validator.fits(&answer) => Reply::Accepted(answer),
        Ok(_) => Reply::Cancelled(format!(
            "the answer does not fit the question's schema: {answer}"
        )),
        Err(why) => Reply::Cancelled(why),
    }
}
