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
//! Task ids are unguessable (128 random bits) and bound to who made them: the MCP session, else
//! the bearer token, else the one stdio client. Another's id reads as unknown (`-32602`).
//! A task is readable for its `ttlMs` (`[serve] task_ttl_ms`) after its creation; a task still
//! running then is cancelled and forgotten.

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
    match header("authorization") {
        Some(token) => format!("token {token}"),
        None => "http".into(),
    }
}

/// A new task id: 128 random bits, hex.
fn new_id() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No randomness: still unique (a counter and the time), only guessable.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        bytes[..8].copy_from_slice(&n.to_le_bytes());
        bytes[8..].copy_from_slice(&crate::render::now_ms().to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
    /// at most `max_result_bytes`.
    pub fn new(ttl_ms: u64, poll_ms: u64, max_result_bytes: usize) -> Tasks {
        Tasks {
            entries: Arc::default(),
            ttl: Duration::from_millis(ttl_ms),
            poll_ms,
            max_result_bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes `call` (started, running) the task of `owner`, readable before this returns, and
    /// drives it in a task of its own. The `CreateTaskResult` for the client.
    pub fn create(&self, owner: String, call: RunningCall) -> CreateTaskResult {
        self.forget_expired();
        let id = new_id();
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
                cancel: cancel.clone(),
            },
        );
        self.drive(id, call, cancel);
        CreateTaskResult::new(task)
    }

    /// Runs the task's call to its end or its next question, and records where it is.
    fn drive(&self, id: String, mut call: RunningCall, cancel: CancellationToken) {
        let tasks = self.clone();
        tokio::spawn(async move {
            let step = call.next(&cancel).await;
            let mut entries = tasks.lock();
            let Some(entry) = entries.get_mut(&id) else {
                return;
            };
            // Cancelled (or expired) meanwhile: it stays so.
            if matches!(entry.state, State::Ended(_)) {
                return;
            }
            entry.state = match step {
                Step::Done(result) => State::Ended(tasks.payload(&result)),
                Step::Asks(asked) => State::Asks {
                    requests: asked.input_requests.unwrap_or_default(),
                    call,
                },
            };
            entry.touch();
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
        // A call parked on a question is driven to its end (its question cancelled).
        if let State::Asks { call, .. } =
            std::mem::replace(&mut entry.state, State::Ended(TaskPayload::Cancelled))
        {
            let cancel = entry.cancel.clone();
            tokio::spawn(async move {
                let mut call = call;
                let _ = call.next(&cancel).await;
            });
        }
        entry.touch();
        Ok(())
    }

    /// Forgets the tasks past their TTL, cancelling those still running.
    fn forget_expired(&self) {
        let now = Instant::now();
        self.lock().retain(|_, entry| {
            let keep = entry.expires > now;
            if !keep {
                entry.cancel.cancel();
            }
            keep
        });
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
    }
}

/// `value` as a JSON object (what a task inlines).
fn as_object(value: &impl serde::Serialize) -> JsonObject {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::Object(object)) => object,
        _ => JsonObject::new(),
    }
}
