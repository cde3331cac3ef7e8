//! How a resolved tool is run, whatever it is: a host-native [`Tool`], a plugin in process, or a
//! plugin in a worker process. The runner only sees [`Invoke`].

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rho_plugin_api::{Answer, LogLevel, Question, Reply, ToolError};
use tokio::sync::oneshot;

use crate::call::ask::{Asked, Inbox};
use crate::call::sender::CallSink;
use serde_json::Value;

pub use rho_protocol::Failure;
use rho_protocol::ToolSpec;

/// A boxed future of a call's answer.
pub type CallFuture = Pin<Box<dyn Future<Output = Result<Answer, Failure>> + Send>>;

/// Runs calls of one resolved tool. Implementations copy every answer into host-owned data before
/// the future completes.
pub(crate) trait Invoke: Send + Sync {
    /// Starts the call. Dropping the future abandons it (the runner does so at the timeout, after
    /// setting the context's cancellation flag).
    fn invoke(&self, args: Arc<Value>, ctx: ToolCtx) -> CallFuture;

    /// `true` when polling the call's future never blocks the polling thread (the work runs on
    /// a thread, in a process or across the network of its own): the runner may then drive it
    /// inside the call's own task.
    fn never_blocks(&self) -> bool;

    /// Where the tool's code runs.
    fn runs(&self) -> crate::Runs;

    /// Blocking threads still running calls the host gave up on.
    fn runaway_threads(&self) -> usize {
        0
    }
}

/// The context a tool gets for one call: its id, its cancellation flag, ways to send partial
/// updates and log lines, its deadline and its trace context. Cheap to clone: clones share one allocation.
#[derive(Clone)]
pub struct ToolCtx {
    shared: Arc<CtxShared>,
}

/// What the clones of one call's [`ToolCtx`] share.
struct CtxShared {
    /// The call (its id, for the tool).
    call: Arc<crate::call::gate::ToolCall>,
    cancelled: AtomicBool,
    /// Where updates and log lines go.
    sends: Sends,
    /// Set when the gate allows; moved later by each question's wait.
    deadline: Mutex<Option<Instant>>,
    traceparent: Option<Arc<str>>,
    /// Where the call's questions go (its runner); `None`: no one to ask.
    inbox: Option<Inbox>,
}

impl ToolCtx {
    /// A context for call `call_id` that hands partial updates to `on_update` (and drops log
    /// lines; questions are declined).
    pub fn new(call_id: &str, on_update: Arc<dyn Fn(&str) + Send + Sync>) -> Self {
        let call = crate::call::gate::ToolCall::new(call_id, "", Value::Null);
        ToolCtx {
            shared: Arc::new(CtxShared {
                call: Arc::new(call),
                cancelled: AtomicBool::new(false),
                sends: Sends::Hook(on_update),
                deadline: Mutex::new(None),
                traceparent: None,
                inbox: None,
            }),
        }
    }

    /// The runner's context of a call: updates and log lines to the call's `sink`, its
    /// `traceparent` (already checked), and an inbox for its questions ([`ToolCtx::asked`]).
    pub(crate) fn for_call(sink: CallSink, traceparent: Option<Arc<str>>) -> Self {
        ToolCtx {
            shared: Arc::new(CtxShared {
                call: sink.call.clone(),
                cancelled: AtomicBool::new(false),
                sends: Sends::Call(sink),
                deadline: Mutex::new(None),
                traceparent,
                inbox: Some(Inbox::default()),
            }),
        }
    }

    /// The call has ended: the tool's updates and log lines are dropped from now on.
    pub(crate) fn end_sends(&self) {
        if let Sends::Call(sink) = &self.shared.sends {
            sink.end();
        }
    }

    /// Starts the call's clock: the runner does when the gate allows, the deadline being that
    /// instant plus the tool's timeout. Only the first call counts.
    pub(crate) fn start_clock(&self, deadline: Instant) {
        let mut at = self
            .shared
            .deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if at.is_none() {
            *at = Some(deadline);
        }
    }

    /// Moves the deadline to `deadline` (the runner does after a question's wait).
    pub(crate) fn move_deadline(&self, deadline: Instant) {
        *self
            .shared
            .deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(deadline);
    }

    /// The call's id.
    pub fn call_id(&self) -> &str {
        &self.shared.call.id
    }

    /// When the runner ends the call at its timeout (set once the gate has allowed it); `None`
    /// before that or without a timeout.
    pub fn deadline(&self) -> Option<Instant> {
        *self
            .shared
            .deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether [`ToolCtx::deadline`] has passed.
    pub(crate) fn past_deadline(&self) -> bool {
        self.deadline().is_some_and(|at| Instant::now() >= at)
    }

    /// How long until [`ToolCtx::deadline`], zero once it has passed.
    pub fn time_left(&self) -> Option<Duration> {
        self.deadline()
            .map(|at| at.saturating_duration_since(Instant::now()))
    }

    /// The call's W3C `traceparent`, if its caller gave a valid one
    /// ([`CallOptions::traceparent`](crate::CallOptions::traceparent)).
    pub fn traceparent(&self) -> Option<&str> {
        self.shared.traceparent.as_deref()
    }

    /// Who the call is made for, when the host knows ([`ToolCall::principal`](crate::ToolCall)):
    /// what a token proved, never the token.
    pub fn principal(&self) -> Option<&Arc<crate::Principal>> {
        self.shared.call.principal.as_ref()
    }

    /// Whether the host has given up on the call.
    pub fn is_cancelled(&self) -> bool {
        self.shared.cancelled.load(Ordering::Relaxed)
    }

    /// Marks the call cancelled; the tool sees it through [`ToolCtx::is_cancelled`].
    pub fn cancel(&self) {
        self.shared.cancelled.store(true, Ordering::Relaxed);
    }

    /// Sends a partial update for the call.
    pub fn update(&self, partial: &str) {
        match &self.shared.sends {
            Sends::Hook(on_update) => on_update(partial),
            Sends::Call(sink) => sink.update(partial),
        }
    }

    /// Writes a log line of the call at `level`: a `tool_execution_log` event (journal, views,
    /// NATS) and the call's [`CallOptions::on_log`](crate::CallOptions::on_log) (an MCP client's
    /// `notifications/message`), in order with its updates, never after the call's end; a line
    /// over [`MAX_UPDATE_BYTES`](crate::MAX_UPDATE_BYTES) is cut with a note.
    pub fn log(&self, level: LogLevel, message: &str) {
        if let Sends::Call(sink) = &self.shared.sends {
            sink.log(level, message);
        }
    }

    /// Asks the user `question` and waits for the reply (see [`crate::Answerer`]): the wait does
    /// not count against the call's timeout (its [`deadline`](ToolCtx::deadline) moves later by
    /// the time the question was open) and is bounded
    /// ([`RunnerConfig::ask_timeout`](crate::RunnerConfig::ask_timeout)). A context made
    /// outside a runner ([`ToolCtx::new`]) declines.
    pub async fn ask(&self, question: Question) -> Reply {
        self.ask_all(vec![question])
            .await
            .pop()
            .unwrap_or_else(ended)
    }

    /// Asks the user `questions` together (see [`crate::Answerer::answer_all`]) and waits for
    /// every reply: one per question, in order. The wait is one wait, as with
    /// [`ToolCtx::ask`].
    pub async fn ask_all(&self, questions: Vec<Question>) -> Vec<Reply> {
        let count = questions.len();
        let replies = match self.send_questions(questions) {
            Ok(replied) => replied.await.ok(),
            Err(declined) => Some(declined),
        };
        filled(replies, count)
    }

    /// [`ToolCtx::ask_all`] for a plugin's thread (not a runtime thread): blocks it until the
    /// replies, and says the time left then.
    pub(crate) fn ask_blocking(&self, questions: Vec<Question>) -> (Vec<Reply>, Option<Duration>) {
        let count = questions.len();
        let replies = match self.send_questions(questions) {
            Ok(replied) => replied.blocking_recv().ok(),
            Err(declined) => Some(declined),
        };
        (filled(replies, count), self.time_left())
    }

    fn send_questions(
        &self,
        questions: Vec<Question>,
    ) -> Result<oneshot::Receiver<Vec<Reply>>, Vec<Reply>> {
        let Some(inbox) = &self.shared.inbox else {
            let declined = Reply::Declined(crate::call::ask::NO_ONE_TO_ASK.into());
            return Err(vec![declined; questions.len()]);
        };
        let count = questions.len();
        let (reply, replied) = oneshot::channel();
        inbox
            .send(Asked { questions, reply })
            .map_err(|_| vec![ended(); count])?;
        Ok(replied)
    }

    /// The next questions the tool asked (the runner's side); pending for ever for a context
    /// without an inbox.
    pub(crate) async fn asked(&self) -> Asked {
        match &self.shared.inbox {
            Some(inbox) => inbox.next().await,
            None => std::future::pending().await,
        }
    }

    /// Closes the call's inbox: its questions from now on are answered `Cancelled` at once.
    pub(crate) fn close_inbox(&self) {
        if let Some(inbox) = &self.shared.inbox {
            inbox.close();
        }
    }

    /// The cancellation flag itself (what a plugin polls).
    pub(crate) fn cancel_flag(&self) -> &AtomicBool {
        &self.shared.cancelled
    }
}

/// Where a context's updates and log lines go.
enum Sends {
    /// A context made outside a runner ([`ToolCtx::new`]): updates to a closure, log lines
    /// dropped.
    Hook(Arc<dyn Fn(&str) + Send + Sync>),
    /// A runner's call.
    Call(CallSink),
}

/// Ends a call's sends when dropped, also when its runner's future dies before the end (a panic,
/// an abort): the end event then published is still the call's last.
pub(crate) struct EndsOnDrop(pub(crate) ToolCtx);

impl Drop for EndsOnDrop {
    fn drop(&mut self) {
        self.0.end_sends();
    }
}

/// The reply to a question of a call that ended meanwhile.
fn ended() -> Reply {
    Reply::Cancelled("the call ended before the question was answered".into())
}

/// `replies` as one per question: none (the call ended) or too few read as [`ended`].
fn filled(replies: Option<Vec<Reply>>, count: usize) -> Vec<Reply> {
    let mut replies = replies.unwrap_or_default();
    replies.resize_with(count, ended);
    replies.truncate(count);
    replies
}

/// Whether `value` is a W3C trace context `traceparent` a host hands on: version `00` to `fe`,
/// a 32-digit trace id and a 16-digit parent id (lowercase hex, not all zeros) and 2 digits of
/// flags, dash-separated (`00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01`).
pub fn is_valid_traceparent(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let nonzero = |s: &str| s.bytes().any(|b| b != b'0');
    matches!(parts.as_slice(), [version, trace, parent, flags]
        if hex(version, 2) && *version != "ff"
            && hex(trace, 32) && nonzero(trace)
            && hex(parent, 16) && nonzero(parent)
            && hex(flags, 2))
}

/// A host-native tool: a host adds tools without writing a plugin. The runner runs it exactly like
/// a plugin tool (gate, timeout, events, crash accounting); a panic in it ends the call `crashed`.
#[async_trait::async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The tool's description. Its name must match `^[a-zA-Z0-9_-]{1,64}$`.
    fn spec(&self) -> ToolSpec;

    /// Runs one call. Dropped at the timeout: an async tool needs no cancellation polling.
    async fn call(&self, args: Value, ctx: ToolCtx) -> Result<Answer, ToolError>;
}

/// Runs a native [`Tool`].
pub(crate) struct NativeInvoke(pub Arc<dyn Tool>);

impl Invoke for NativeInvoke {
    fn invoke(&self, args: Arc<Value>, ctx: ToolCtx) -> CallFuture {
        let tool = self.0.clone();
        Box::pin(async move {
            let args = Arc::unwrap_or_clone(args);
            tool.call(args, ctx).await.map_err(Failure::Tool)
        })
    }

    /// A host's tool may block its thread: it runs in a task of its own.
    fn never_blocks(&self) -> bool {
        false
    }

    fn runs(&self) -> crate::Runs {
        crate::Runs::Host
    }
}
