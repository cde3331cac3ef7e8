//! A tool's questions to the client's user, in both spec eras.
//!
//! - 2025-era sessions: an `elicitation/create` request to the client, while the call waits
//!   ([`ElicitAnswerer`]).
//! - 2026-07-28 requests cannot carry a server-to-client request. The call runs in a task of its
//!   own ([`RunningCall`]); when its tool asks, the request ends with an `InputRequiredResult`
//!   holding the question (key [`ASK_KEY`]) and a `requestState` naming the parked call, an
//!   unguessable token. The client's retry carries the answer and the state: the answer goes to
//!   the tool, which goes on, and the retry waits for the call's end or its next question.
//!   A parked call no retry claims within the host's bound on a question is cancelled (it ends
//!   `error`, with its one end event).
//!
//! Either way the schema goes to the client as the tool wrote it when MCP's form schema can
//! carry it; one it cannot is declined with the reason, and the tool reads it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rho_runtime::{Answerer, Question, Reply, ToolCall, ToolResult};
use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema,
    InputRequest, InputRequiredResult, InputResponses,
};
use rmcp::{Peer, RoleServer};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// The key of a tool's question in an `InputRequiredResult` (2026-07-28).
pub const ASK_KEY: &str = "rho/ask";

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

/// A question on its way from a call's tool to the request that runs it (2026-07-28).
type Asked = (Question, oneshot::Sender<Reply>);

/// Hands a call's questions to the request running it.
struct ForwardingAnswerer(mpsc::Sender<Asked>);

#[async_trait::async_trait]
impl Answerer for ForwardingAnswerer {
    async fn answer(&self, question: &Question, _call: &ToolCall) -> Reply {
        let (reply, replied) = oneshot::channel();
        if self.0.send((question.clone(), reply)).await.is_err() {
            return Reply::Cancelled("the request running the call has ended".into());
        }
        replied
            .await
            .unwrap_or_else(|_| Reply::Cancelled("the client did not answer the question".into()))
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
    /// Where the answer to the question the client was sent goes.
    open: Option<oneshot::Sender<Reply>>,
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
            cancel,
            _holds: holds,
        }
    }

    /// Waits for the call's end or its tool's next question; `cancel` (the request's) cancels
    /// the call.
    pub async fn next(&mut self, cancel: &CancellationToken) -> Step {
        // Once cancelled, the call's end is all there is to wait for (a cancelled token is
        // ready at every poll: selecting it again would spin without yielding).
        let mut cancelling = false;
        loop {
            tokio::select! {
                biased;
                ended = &mut self.result => return Step::Done(end_of(ended)),
                Some((question, reply)) = self.questions.recv() => {
                    match elicit_params(&question) {
                        Ok(params) => {
                            self.open = Some(reply);
                            let requests = std::collections::BTreeMap::from([(
                                ASK_KEY.to_owned(),
                                InputRequest::Elicitation(ElicitRequest::new(params)),
                            )]);
                            return Step::Asks(InputRequiredResult::new(Some(requests), None));
                        }
                        Err(why) => {
                            let _ = reply.send(Reply::Declined(why));
                        }
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
        if let Some(open) = self.open.take() {
            let _ = open.send(Reply::Cancelled("the call was cancelled".into()));
        }
        loop {
            tokio::select! {
                biased;
                ended = &mut self.result => return end_of(ended),
                Some((_, reply)) = self.questions.recv() => {
                    let _ = reply.send(Reply::Cancelled("the call was cancelled".into()));
                }
            }
        }
    }

    /// Hands the client's answer (from a retry's `inputResponses`) to the open question.
    pub fn answer(&mut self, responses: Option<&InputResponses>) {
        let Some(open) = self.open.take() else {
            return;
        };
        let reply = match responses.and_then(|r| r.get(ASK_KEY)) {
            None => Reply::Cancelled("the client's retry carried no answer".into()),
            Some(answer) => match serde_json::from_value::<ElicitResult>(answer.clone()) {
                Ok(ElicitResult {
                    action, content, ..
                }) => reply_of(&action, content),
                Err(e) => Reply::Cancelled(format!("the client's answer is not one: {e}")),
            },
        };
        let _ = open.send(reply);
    }
}

/// The calls parked on a question, by `requestState`, each for at most the host's bound on a
/// question.
#[derive(Clone, Default)]
pub struct Parked {
    calls: Arc<Mutex<HashMap<String, RunningCall>>>,
}

impl Parked {
    /// Parks `call` until a retry claims it, at most `within`; past it the call is cancelled.
    /// The `requestState` that claims it.
    pub fn park(&self, call: RunningCall, within: Duration) -> String {
        let mut bytes = [0u8; 16];
        // Without randomness the state is still unique (a counter), only guessable.
        if getrandom::fill(&mut bytes).is_err() {
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            bytes[..8].copy_from_slice(&n.to_le_bytes());
        }
        let state: String = std::iter::once(STATE_PREFIX.to_owned())
            .chain(bytes.iter().map(|b| format!("{b:02x}")))
            .collect();
        self.lock().insert(state.clone(), call);
        let calls = self.clone();
        let expired = state.clone();
        tokio::spawn(async move {
            tokio::time::sleep(within).await;
            if let Some(call) = calls.lock().remove(&expired) {
                tracing::info!(state = %expired, "a call parked on a question no retry claimed is cancelled");
                call.cancel.cancel();
            }
        });
        state
    }

    /// The call parked under `state`, taken out (`None`: not a state of a parked call, or one
    /// already claimed or expired).
    pub fn claim(&self, state: Option<&str>) -> Option<RunningCall> {
        let state = state.filter(|s| s.starts_with(STATE_PREFIX))?;
        self.lock().remove(state)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, RunningCall>> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
