//! MCP Tasks on `rho serve` (`io.modelcontextprotocol/tasks`, SEP-2663, the 2026-07-28
//! revision): a call that outlives the request that started it.
//!
//! When a client declares the extension (in the request's `_meta` capabilities, or at its
//! session's start) and the tool is long (it declares task support, or its timeout is at least
//! `[serve] task_after_ms`), `tools/call` answers at once with a task (`resultType: "task"`);
//! the call runs on in a task of its own ([`RunningCall`]). The client then:
//!
//! - polls `tasks/get`: `working`, `input_required` (the tool asks: the question is in
//!   `inputRequests` under [`ASK_KEY`](super::asking::ASK_KEY)), then a terminal status;
//! - answers a question with `tasks/update` (`inputResponses`), acknowledged at once;
//! - cancels with `tasks/cancel`: the task is `cancelled` from then on and the call is cancelled
//!   (it ends, with its one end event, as a cancelled call does).
//!
//! Outcomes map to statuses one way: every call that ran ends `completed`, its result inlined
//! as `tools/call` would have answered it (`isError: true` and `_meta["rho/outcome"]` for every
//! outcome but `ok`); a call refused before it ran because the request was wrong (an unknown
//! tool, arguments that do not fit its schema) ends `failed` with the JSON-RPC error `-32602`;
//! a cancelled task stays `cancelled`.
//!
//! Task ids are unguessable (128 random bits; without randomness no task is made) and bound to
//! who made them: the MCP session (2025-era clients), else the bearer token (one per server: it
//! tells the server's clients from no one else), else the one stdio client. Another's id reads as
//! unknown (`-32602`); the id itself is the secret between clients of one token.
//! A task is readable for its `ttlMs` (`[serve] task_ttl_ms`) after its creation; a task still
//! running then is cancelled and forgotten. A question no `tasks/update` answers within the
//! host's bound on a question is given up (the tool reads it as cancelled and goes on). At most
//! [`MAX_TASKS`] tasks are kept at once; past it a call that would be a task is refused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rho_runtime::{Outcome, ToolResult};
use rmcp::ErrorData as McpError;
use rmcp::RoleServer;
use rmcp::model::{
    CreateTaskResult, DetailedTask, GetTaskResult, InputRequests, InputResponses, JsonObject, Task,
    TaskPayload, TaskStatus,
};
use rmcp::service::RequestContext;
use tokio_util::sync::CancellationToken;

use super::asking::{RunningCall, Step};
use super::mcp::mcp_result;

/// The most tasks one server keeps at once (ended ones included, until their TTL).
pub const MAX_TASKS: usize = 4096;

/// The tasks of one `rho serve`, shared by every session.
#[derive(Clone)]
pub struct Tasks {
    entries: Arc<Mutex<HashMap<String, Entry>>>,
    /// How long a task stays readable after its creation.
    ttl: Duration,
    /// How often clients are told to poll.
    poll_ms: u64,
    /// The largest answer sent to a client ([`mcp_result`]).
    max_result_bytes: usize,
    /// How long a question may stay unanswered.
    ask_timeout: Duration,
}

/// One task.
struct Entry {
    /// Who made it ([`owner`]).
    owner: String,
    /// Its metadata as `tasks/get` shows it (status kept in step with `state`).
    task: Task,
    state: State,
    /// When it is forgotten.
    expires: Instant,
    /// How many times its state changed (tells a question from the next one).
    touches: u64,
    /// Cancels its call.
    cancel: CancellationToken,
}

/// Where a task is.
enum State {
    /// Its call runs.
    Working,
    /// Its tool asks: the question, and the call parked until the client answers.
    Asks {
        requests: InputRequests,
        call: RunningCall,
    },
    /// Its end.
    Ended(TaskPayload),
}

/// Who made the request of `context`: its MCP session, else its bearer token, else the stdio
/// client (the one client of a server over stdio).
pub fn owner(context: &RequestContext<RoleServer>) -> String {
    let Some(parts) = context.extensions.get::<axum::http::request::Parts>() else {
        return "stdio".into();
    };
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    if let Some(session) = header("mcp-session-id") {
        return format!("session {session}");
    }
    // The token itself is not kept: its hash tells its clients apart from others.
    match header("authorization") {
        Some(token) => {
            use std::hash::{Hash, Hasher};
            let token = token.trim();
            let token = token
                .get(..7)
                .filter(|scheme| scheme.eq_ignore_ascii_case("bearer "))
                .map_or(token, |_| token[7..].trim());
            let mut hasher = std::hash::DefaultHasher::new();
            token.hash(&mut hasher);
            format!("token {:016x}", hasher.finish())
        }
        None => "http".into(),
    }
}

/// A new task id: 128 random bits, hex; `None` without randomness (a guessable id would let
/// any client of the same token read the task).
fn new_id() -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Now, as RFC 3339 (what `createdAt` and `lastUpdatedAt` hold).
fn timestamp() -> String {
    rmcp::task_manager::current_timestamp()
}

/// The error of a task id that is unknown, expired or someone else's.
fn unknown(id: &str) -> McpError {
    McpError::invalid_params(
        format!("no task `{id}` (unknown, expired, or not yours)"),
        None,
    )
}

impl Tasks {
    /// Tasks readable for `ttl_ms` after their creation, polled every `poll_ms`, their answers
    /// at most `max_result_bytes`, a question open at most `ask_timeout`. Expired tasks are
    /// forgotten as they expire (a task of the tokio runtime this is called in).
    pub fn new(ttl_ms: u64, poll_ms: u64, max_result_bytes: usize, ask_timeout: Duration) -> Tasks {
        let tasks = Tasks {
            entries: Arc::default(),
            ttl: Duration::from_millis(ttl_ms),
            poll_ms,
            max_result_bytes,
            ask_timeout,
        };
        let sweeper = tasks.clone();
        let every = tasks.ttl.min(Duration::from_secs(60));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                sweeper.forget_expired();
            }
        });
        tasks
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes `call` (started, running) the task of `owner`, readable before this returns, and
    /// drives it in a task of its own. The `CreateTaskResult` for the client; `Err` (the call
    /// cancelled): no randomness for its id, or [`MAX_TASKS`] tasks kept already.
    pub fn create(&self, owner: String, call: RunningCall) -> Result<CreateTaskResult, McpError> {
        self.forget_expired();
        let refused = |call: RunningCall, why: &str| {
            tokio::spawn(call.finish());
            Err(McpError::internal_error(
                format!("rho: no task made: {why}"),
                None,
            ))
        };
        let Some(id) = new_id() else {
            return refused(call, "no randomness for its id");
        };
        if self.lock().len() >= MAX_TASKS {
            return refused(call, "the server keeps too many tasks; try again later");
        }
        let now = timestamp();
        let task = Task::new(id.clone(), TaskStatus::Working, now.clone(), now)
            .with_ttl_ms(self.ttl.as_millis() as u64)
            .with_poll_interval_ms(self.poll_ms);
        let cancel = CancellationToken::new();
        self.lock().insert(
            id.clone(),
            Entry {
                owner,
                task: task.clone(),
                state: State::Working,
                expires: Instant::now() + self.ttl,
                touches: 0,
                cancel: cancel.clone(),
            },
        );
        self.drive(id, call, cancel);
        Ok(CreateTaskResult::new(task))
    }

    /// Runs the task's call to its end or its next question, and records where it is.
    fn drive(&self, id: String, mut call: RunningCall, cancel: CancellationToken) {
        let tasks = self.clone();
        tokio::spawn(async move {
            let step = call.next(&cancel).await;
            // Built before the lock: an answer may be large.
            let ended = match &step {
                Step::Done(result) => Some(tasks.payload(result)),
                Step::Asks(_) => None,
            };
            let mut entries = tasks.lock();
            let Some(entry) = entries
                .get_mut(&id)
                .filter(|e| !matches!(e.state, State::Ended(_)))
            else {
                // Cancelled or expired meanwhile: it stays so, and a call that asked is ended.
                drop(entries);
                if let Step::Asks(_) = step {
                    tokio::spawn(call.finish());
                }
                return;
            };
            entry.state = match (step, ended) {
                (_, Some(payload)) => State::Ended(payload),
                (Step::Asks(asked), None) => {
                    tasks.give_up_unanswered(&id, entry.touches + 1);
                    State::Asks {
                        requests: asked.input_requests.unwrap_or_default(),
                        call,
                    }
                }
                (Step::Done(_), None) => return,
            };
            entry.touch();
        });
    }

    /// After the host's bound on a question, if task `id` still waits on the question it asked
    /// at its `touches`-th change, the question is given up: the tool reads it as cancelled and
    /// the call goes on.
    fn give_up_unanswered(&self, id: &str, touches: u64) {
        let tasks = self.clone();
        let id = id.to_owned();
        let wait = self.ask_timeout;
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let mut entries = tasks.lock();
            let Some(entry) = entries.get_mut(&id).filter(|e| e.touches == touches) else {
                return;
            };
            let State::Asks { mut call, .. } = std::mem::replace(&mut entry.state, State::Working)
            else {
                return;
            };
            call.answer(None);
            entry.touch();
            let cancel = entry.cancel.clone();
            drop(entries);
            tasks.drive(id, call, cancel);
        });
    }

    /// The terminal payload of a call's `result`.
    fn payload(&self, result: &ToolResult) -> TaskPayload {
        if matches!(
            result.outcome,
            Outcome::UnknownTool | Outcome::InvalidArguments
        ) {
            let error = McpError::invalid_params(result.output.text().to_string(), None);
            return TaskPayload::Failed {
                error: as_object(&error),
            };
        }
        TaskPayload::Completed {
            result: as_object(&mcp_result(result, self.max_result_bytes)),
        }
    }

    /// `tasks/get`: the task of `id` as it is now, if it is `owner`'s.
    pub fn get(&self, owner: &str, id: &str) -> Result<GetTaskResult, McpError> {
        self.forget_expired();
        let entries = self.lock();
        let entry = entries
            .get(id)
            .filter(|e| e.owner == owner)
            .ok_or_else(|| unknown(id))?;
        let payload = match &entry.state {
            State::Working => TaskPayload::Working,
            State::Asks { requests, .. } => TaskPayload::InputRequired {
                input_requests: requests.clone(),
            },
            State::Ended(payload) => payload.clone(),
        };
        Ok(GetTaskResult::new(DetailedTask::new(
            entry.task.clone(),
            payload,
        )))
    }

    /// `tasks/update`: hands `responses` to the question the task's tool asked; the task works
    /// on. Responses to a task that asks nothing now are ignored (acknowledged all the same).
    pub fn update(
        &self,
        owner: &str,
        id: &str,
        responses: &InputResponses,
    ) -> Result<(), McpError> {
        let mut entries = self.lock();
        let entry = entries
            .get_mut(id)
            .filter(|e| e.owner == owner)
            .ok_or_else(|| unknown(id))?;
        if !matches!(entry.state, State::Asks { .. }) {
            return Ok(());
        }
        let State::Asks { mut call, .. } = std::mem::replace(&mut entry.state, State::Working)
        else {
            return Ok(());
        };
        call.answer(Some(responses));
        entry.touch();
        let cancel = entry.cancel.clone();
        drop(entries);
        self.drive(id.to_owned(), call, cancel);
        Ok(())
    }

    /// `tasks/cancel`: the task is `cancelled` from now on and its call is cancelled; a task
    /// that already ended stays as it ended.
    pub fn cancel(&self, owner: &str, id: &str) -> Result<(), McpError> {
        let mut entries = self.lock();
        let entry = entries
            .get_mut(id)
            .filter(|e| e.owner == owner)
            .ok_or_else(|| unknown(id))?;
        if matches!(entry.state, State::Ended(_)) {
            return Ok(());
        }
        entry.cancel.cancel();
        let previous = std::mem::replace(&mut entry.state, State::Ended(TaskPayload::Cancelled));
        entry.touch();
        drop(entries);
        // A call parked on a question is ended here (a running one by its driver).
        if let State::Asks { call, .. } = previous {
            tokio::spawn(call.finish());
        }
        Ok(())
    }

    /// Forgets the tasks past their TTL, ending the calls of those still running.
    fn forget_expired(&self) {
        let now = Instant::now();
        let expired: Vec<Entry> = {
            let mut entries = self.lock();
            let ids: Vec<String> = entries
                .iter()
                .filter(|(_, e)| e.expires <= now)
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| entries.remove(id)).collect()
        };
        for entry in expired {
            entry.cancel.cancel();
            if let State::Asks { call, .. } = entry.state {
                tokio::spawn(call.finish());
            }
        }
    }
}

impl Entry {
    /// Its status and `lastUpdatedAt` after a change of its state.
    fn touch(&mut self) {
        self.task.status = match &self.state {
            State::Working => TaskStatus::Working,
            State::Asks { .. } => TaskStatus::InputRequired,
            State::Ended(payload) => payload.status(),
        };
        self.task.last_updated_at = timestamp();
        self.touches += 1;
    }
}

/// `value` as a JSON object (what a task inlines).
fn as_object(value: &impl serde::Serialize) -> JsonObject {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::Object(object)) => object,
        _ => JsonObject::new(),
    }
}
