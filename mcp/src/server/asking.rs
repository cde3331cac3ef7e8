//! A tool's questions to the client's user, in both spec eras.
//!
//! - 2025-era sessions: an `elicitation/create` request to the client, while the call waits
//!   ([`ElicitAnswerer`]).
//! - 2026-07-28 requests cannot carry a server-to-client request. The call runs in a task of its
//!   own ([`RunningCall`]); when its tool asks, the request ends with an `InputRequiredResult`
//!   holding the questions (each under the key its tool gave it, else `rho/ask-N`, N counting
//!   the call's questions) and a `requestState` naming the parked call, an unguessable token.
//!   The client's retry carries the answers and the state: each answer goes to its question, and
//!   once every question asked together has one the tool goes on, and the retry waits for the
//!   call's end or its next questions; questions a retry left unanswered (or answered with
//!   something that is no answer) are asked again. A retry whose state names no parked call
//!   (tampered with, expired, or used already) is refused (`-32602`). Answers a request carries
//!   before any question (a client that knows what the tool will ask, by its key) are handed to
//!   the tool's questions of those keys at once. A parked call no retry claims within the host's
//!   bound on a question is cancelled (it ends `error`, with its one end event).
//!
//! Either way the schema goes to the client as the tool wrote it when MCP's form schema can
//! carry it; one it cannot is declined with the reason, and the tool reads it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rho_runtime::{Answerer, Question, Reply, ToolCall, ToolResult};
use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema,
    InputRequest, InputRequests, InputRequiredResult, InputResponses,
};
use rmcp::{Peer, RoleServer};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// The prefix of the key of a question its tool gave none (`rho/ask-1`, `rho/ask-2`, ...).
pub const ASK_KEY_PREFIX: &str = "rho/ask-";

/// The prefix of the `requestState` of a call parked on its tool's question.
const STATE_PREFIX: &str = "rho-ask-";

/// `schema` as MCP's form schema, or why it cannot be one.
fn form_schema(schema: &serde_json::Value) -> Result<ElicitationSchema, String> {
    serde_json::from_value(schema.clone()).map_err(|e| {
        format!(
            "the question's schema is not one an MCP client can show as a form (an object of \
             strings, numbers, booleans and enums): {e}"
        )
    })
}

/// The elicitation request of `question`, or why its schema cannot be asked.
fn elicit_params(question: &Question) -> Result<ElicitRequestParams, String> {
    Ok(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: question.message.clone(),
        requested_schema: form_schema(&question.schema)?,
    })
}

/// The reply of an elicitation's `action` and `content`.
fn reply_of(action: &ElicitationAction, content: Option<serde_json::Value>) -> Reply {
    match action {
        ElicitationAction::Accept => {
            Reply::Accepted(content.unwrap_or_else(|| serde_json::json!({})))
        }
        ElicitationAction::Decline => Reply::Declined("the user declined".into()),
        ElicitationAction::Cancel => Reply::Cancelled("the user dismissed the question".into()),
        other => Reply::Cancelled(format!("the client answered {other:?}")),
    }
}

/// Asks a 2025-era session's client by `elicitation/create`; a client that declared no
/// elicitation cannot be asked, and every question is declined saying so.
pub struct ElicitAnswerer {
    /// The session's peer.
    pub peer: Peer<RoleServer>,
    /// Whether the client declared elicitation.
    pub can: bool,
}

#[async_trait::async_trait]
impl Answerer for ElicitAnswerer {
    /// 2025-era clients take one `elicitation/create` at a time: questions asked together are
    /// asked one after another ([`Answerer::answer_all`]'s default).
    async fn answer(&self, question: &Question, _call: &ToolCall) -> Reply {
        if !self.can {
            return Reply::Declined(
                "this client cannot ask its user (it declared no elicitation)".into(),
            );
        }
        let params = match elicit_params(question) {
            Ok(params) => params,
            Err(why) => return Reply::Declined(why),
        };
        match self.peer.create_elicitation(params).await {
            Ok(ElicitResult {
                action, content, ..
            }) => reply_of(&action, content),
            Err(e) => Reply::Cancelled(format!("asking the client failed: {e}")),
        }
    }
}

/// Questions asked together on their way from a call's tool to the request that runs it
/// (2026-07-28).
type Asked = (Vec<Question>, oneshot::Sender<Vec<Reply>>);

/// Hands a call's questions to the request running it.
struct ForwardingAnswerer(mpsc::Sender<Asked>);

#[async_trait::async_trait]
impl Answerer for ForwardingAnswerer {
    async fn answer(&self, question: &Question, call: &ToolCall) -> Reply {
        self.answer_all(std::slice::from_ref(question), call)
            .await
            .pop()
            .unwrap_or_else(|| Reply::Cancelled("the client did not answer the question".into()))
    }

    async fn answer_all(&self, questions: &[Question], _call: &ToolCall) -> Vec<Reply> {
        let unanswered = |why: &str| {
            questions
                .iter()
                .map(|_| Reply::Cancelled(why.into()))
                .collect()
        };
        let (reply, replied) = oneshot::channel();
        if self.0.send((questions.to_vec(), reply)).await.is_err() {
            return unanswered("the request running the call has ended");
        }
        replied
            .await
            .unwrap_or_else(|_| unanswered("the client did not answer the question"))
    }
}

/// Questions asked together, open until each has its reply.
struct Open {
    /// Each question's key and elicitation request (`None`: already replied).
    questions: Vec<(String, Option<ElicitRequestParams>)>,
    /// The replies so far.
    replies: Vec<Option<Reply>>,
    /// Where the replies go once all are in.
    to: oneshot::Sender<Vec<Reply>>,
    /// When they were asked (the host's bound on a question runs from then).
    asked_at: tokio::time::Instant,
}

impl Open {
    /// The questions still unanswered, as the client is asked them.
    fn requests(&self) -> InputRequests {
        self.questions
            .iter()
            .zip(&self.replies)
            .filter(|(_, reply)| reply.is_none())
            .filter_map(|((key, params), _)| {
                let params = params.clone()?;
                Some((
                    key.clone(),
                    InputRequest::Elicitation(ElicitRequest::new(params)),
                ))
            })
            .collect()
    }

    /// Takes what `responses` answers (by key; what is no answer is left open).
    fn take(&mut self, responses: &InputResponses) {
        for ((key, _), reply) in self.questions.iter().zip(&mut self.replies) {
            if reply.is_some() {
                continue;
            }
            let Some(answer) = responses.get(key) else {
                continue;
            };
            if let Ok(ElicitResult {
                action, content, ..
            }) = serde_json::from_value::<ElicitResult>(answer.clone())
            {
                *reply = Some(reply_of(&action, content));
            }
        }
    }

    /// Whether every question has its reply.
    fn answered(&self) -> bool {
        self.replies.iter().all(Option::is_some)
    }

    /// Whether the tool no longer waits for the replies: the host's bound on a question passed
    /// (the tool read them as cancelled and went on), or the call ended.
    fn given_up(&self) -> bool {
        self.to.is_closed()
    }

    /// Hands the replies to the tool (a question still open reads `why`, as cancelled).
    fn close(self, why: &str) {
        let replies = self
            .replies
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Reply::Cancelled(why.into())))
            .collect();
        let _ = self.to.send(replies);
    }
}

/// What a running call does next.
pub enum Step {
    /// It ended.
    Done(ToolResult),
    /// Its tool asks; the request ends with this result (the call is parked).
    Asks(InputRequiredResult),
}

/// The result of a call's task: its end, or `crashed` if the task itself failed.
fn end_of(ended: Result<ToolResult, tokio::task::JoinError>) -> ToolResult {
    ended.unwrap_or_else(|_| {
        ToolResult::failed(
            "?",
            "?",
            rho_runtime::Outcome::Crashed,
            "rho: the call's task failed inside the server",
        )
    })
}

/// A call running in a task of its own whose tool's questions come out here (2026-07-28).
pub struct RunningCall {
    result: tokio::task::JoinHandle<ToolResult>,
    questions: mpsc::Receiver<Asked>,
    /// The questions the client was sent, until each has its reply.
    open: Option<Open>,
    /// Answers the client gave before any question: handed to the questions of their keys.
    given: InputResponses,
    /// How many questions without a key were named so far.
    named: u64,
    /// The call's end, once [`RunningCall::asks_within`] saw it.
    ended: Option<ToolResult>,
    /// Questions [`RunningCall::asks_within`] received, not yet opened.
    pending: Option<Asked>,
    /// The tool and call id of a call that becomes an MCP Task once its first questions are
    /// answered (a tool that asks first).
    pub task_after_answers: Option<(String, String)>,
    /// Cancels the call.
    cancel: CancellationToken,
    /// Whatever must live as long as the call (its turn among the calls at once).
    _holds: Box<dyn Send>,
}

impl RunningCall {
    /// Starts `run` (given the answerer its questions go to and the call's cancellation), the
    /// call holding `holds` until it ends.
    pub fn start<F, Fut>(run: F, holds: Box<dyn Send>) -> RunningCall
    where
        F: FnOnce(Arc<dyn Answerer>, CancellationToken) -> Fut,
        Fut: std::future::Future<Output = ToolResult> + Send + 'static,
    {
        let (to, questions) = mpsc::channel(1);
        let cancel = CancellationToken::new();
        let result = tokio::spawn(run(Arc::new(ForwardingAnswerer(to)), cancel.clone()));
        RunningCall {
            result,
            questions,
            open: None,
            given: InputResponses::new(),
            named: 0,
            ended: None,
            pending: None,
            task_after_answers: None,
            cancel,
            _holds: holds,
        }
    }

    /// The answers a request carried before the tool asked anything: its questions of those
    /// keys get them at once.
    pub fn with_answers(mut self, given: Option<&InputResponses>) -> Self {
        self.given = given.cloned().unwrap_or_default();
        self
    }

    /// Waits up to `window` for the tool's first questions (what [`RunningCall::next`] then
    /// returns); whether it asked within it. A call that ended meanwhile did not.
    pub async fn asks_within(&mut self, window: std::time::Duration) -> bool {
        if self.ended.is_some() {
            return false;
        }
        if self.pending.is_some() || self.open.is_some() {
            return true;
        }
        tokio::select! {
            biased;
            ended = &mut self.result => {
                self.ended = Some(end_of(ended));
                false
            }
            Some(asked) = self.questions.recv() => {
                self.pending = Some(asked);
                true
            }
            () = tokio::time::sleep(window) => false,
        }
    }

    /// Waits for the call's end or its tool's next questions (those a retry left open first);
    /// `cancel` (the request's) cancels the call.
    pub async fn next(&mut self, cancel: &CancellationToken) -> Step {
        if let Some(result) = self.ended.take() {
            return Step::Done(result);
        }
        // Questions the tool no longer waits for are not asked again.
        if self.open.as_ref().is_some_and(Open::given_up) {
            self.open = None;
        }
        // Questions a retry left unanswered are asked again.
        if let Some(open) = &self.open {
            return Step::Asks(InputRequiredResult::new(Some(open.requests()), None));
        }
        if let Some(requests) = self.open_pending() {
            return Step::Asks(InputRequiredResult::new(Some(requests), None));
        }
        // Once cancelled, the call's end is all there is to wait for (a cancelled token is
        // ready at every poll: selecting it again would spin without yielding).
        let mut cancelling = false;
        loop {
            tokio::select! {
                biased;
                ended = &mut self.result => return Step::Done(end_of(ended)),
                Some((questions, reply)) = self.questions.recv() => {
                    // A cancelled call is not parked on a question: its tool reads it as
                    // cancelled and the call ends.
                    if cancelling {
                        let cancelled = questions
                            .iter()
                            .map(|_| Reply::Cancelled("the call was cancelled".into()))
                            .collect();
                        let _ = reply.send(cancelled);
                        continue;
                    }
                    self.pending = Some((questions, reply));
                    if let Some(requests) = self.open_pending() {
                        return Step::Asks(InputRequiredResult::new(Some(requests), None));
                    }
                }
                () = cancel.cancelled(), if !cancelling => {
                    cancelling = true;
                    self.cancel.cancel();
                }
            }
        }
    }

    /// Cancels the call and waits for its end, declining every question it asks meanwhile: for
    /// a call no request drives any more (a task cancelled, expired or refused).
    pub async fn finish(mut self) -> ToolResult {
        self.cancel.cancel();
        if let Some(result) = self.ended.take() {
            return result;
        }
        if let Some(open) = self.open.take() {
            open.close("the call was cancelled");
        }
        if let Some((questions, reply)) = self.pending.take() {
            let cancelled = questions
                .iter()
                .map(|_| Reply::Cancelled("the call was cancelled".into()))
                .collect();
            let _ = reply.send(cancelled);
        }
        loop {
            tokio::select! {
                biased;
                ended = &mut self.result => return end_of(ended),
                Some((questions, reply)) = self.questions.recv() => {
                    let cancelled = questions
                        .iter()
                        .map(|_| Reply::Cancelled("the call was cancelled".into()))
                        .collect();
                    let _ = reply.send(cancelled);
                }
            }
        }
    }

    /// Opens the questions received and not yet opened: the requests of those still open, or
    /// `None` (none received, or the answers given before answered them all: the tool has them).
    pub fn open_pending(&mut self) -> Option<InputRequests> {
        let (questions, reply) = self.pending.take()?;
        let open = self.open_questions(questions, reply);
        if open.answered() {
            open.close("");
            return None;
        }
        let requests = open.requests();
        self.open = Some(open);
        Some(requests)
    }

    /// How long the open questions may still wait for their answers, of the host's `bound`
    /// (all of it when none are open).
    pub fn ask_time_left(&self, bound: std::time::Duration) -> std::time::Duration {
        self.open
            .as_ref()
            .map_or(bound, |open| bound.saturating_sub(open.asked_at.elapsed()))
    }

    /// The questions of one asking, keyed: those the client cannot be shown (their schema is
    /// no form) declined with the reason, those whose answer the client gave before answered.
    fn open_questions(
        &mut self,
        questions: Vec<Question>,
        to: oneshot::Sender<Vec<Reply>>,
    ) -> Open {
        let mut open = Open {
            questions: Vec::with_capacity(questions.len()),
            replies: Vec::with_capacity(questions.len()),
            to,
            asked_at: tokio::time::Instant::now(),
        };
        for question in questions {
            let key = question.key.clone().unwrap_or_else(|| {
                self.named += 1;
                format!("{ASK_KEY_PREFIX}{}", self.named)
            });
            let (params, reply) = match elicit_params(&question) {
                Ok(params) => (Some(params), None),
                Err(why) => (None, Some(Reply::Declined(why))),
            };
            open.questions.push((key, params));
            open.replies.push(reply);
        }
        if !self.given.is_empty() {
            open.take(&self.given);
            // Each answer given before is used once.
            for (key, _) in &open.questions {
                self.given.remove(key);
            }
        }
        open
    }

    /// Hands the client's answers (a retry's `inputResponses`, a `tasks/update`'s) to the open
    /// questions of their keys. Once every question has its answer the tool has them all and
    /// goes on (`None`); else the questions still open, to ask again (the client may answer
    /// them one at a time).
    pub fn answer(&mut self, responses: Option<&InputResponses>) -> Option<InputRequests> {
        let mut open = self.open.take()?;
        // The tool went on without them (the host's bound passed): nothing to hand over.
        if open.given_up() {
            return None;
        }
        if let Some(responses) = responses {
            open.take(responses);
        }
        if open.answered() {
            open.close("");
            return None;
        }
        let requests = open.requests();
        self.open = Some(open);
        Some(requests)
    }

    /// Gives up on the open questions (the host's bound on a question passed): each still
    /// unanswered reads as cancelled, and the tool goes on.
    pub fn give_up(&mut self) {
        if let Some(open) = self.open.take() {
            open.close("no answer came within the host's bound on a question");
        }
    }
}

/// The calls parked on a question, by `requestState`, each bound to who made it, for at most
/// what is left of the host's bound on a question.
#[derive(Clone, Default)]
pub struct Parked {
    calls: Arc<Mutex<HashMap<String, (String, RunningCall)>>>,
}

impl Parked {
    /// Parks `call` of `owner` until a retry of theirs claims it, at most `within`; past it the
    /// call is cancelled. The `requestState` that claims it; `Err` (the call handed back) without
    /// randomness for it (a guessable state would let anyone answer the call's questions).
    pub fn park(
        &self,
        owner: String,
        call: RunningCall,
        within: Duration,
    ) -> Result<String, Box<RunningCall>> {
        let mut bytes = [0u8; 16];
        if getrandom::fill(&mut bytes).is_err() {
            return Err(Box::new(call));
        }
        let state: String = std::iter::once(STATE_PREFIX.to_owned())
            .chain(bytes.iter().map(|b| format!("{b:02x}")))
            .collect();
        self.lock().insert(state.clone(), (owner, call));
        let calls = self.clone();
        let expired = state.clone();
        tokio::spawn(async move {
            tokio::time::sleep(within).await;
            if let Some((_, call)) = calls.lock().remove(&expired) {
                tracing::info!(state = %expired, "a call parked on a question no retry claimed is cancelled");
                call.cancel.cancel();
            }
        });
        Ok(state)
    }

    /// The call `owner` parked under `state`, taken out (`None`: not a state of a parked call of
    /// theirs, or one already claimed or expired).
    pub fn claim(&self, state: &str, owner: &str) -> Option<RunningCall> {
        let mut calls = self.lock();
        if calls.get(state).is_none_or(|(made_by, _)| made_by != owner) {
            return None;
        }
        calls.remove(state).map(|(_, call)| call)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, RunningCall)>> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
