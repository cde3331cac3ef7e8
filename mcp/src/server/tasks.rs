//! MCP Tasks on `rho serve` (`io.modelcontextprotocol/tasks`, SEP-2663, the 2026-07-28
//! revision): a call that outlives the request that started it.
//!
//! When a client declares the extension (in the request's `_meta` capabilities, or at its
//! session's start) and the tool is long (it declares task support, or its timeout is at least
//! `[serve] task_after_ms`), `tools/call` answers at once with a task (`resultType: "task"`);
//! the call runs on in a task of its own ([`RunningCall`]). The client then:
//!
//! - polls `tasks/get`: `working`, `input_required` (the tool asks: its questions are in
//!   `inputRequests`, each under its key, as [`super::asking`] names them), then a terminal
//!   status;
//! - answers questions with `tasks/update` (`inputResponses`), acknowledged at once: all of
//!   them, or some (the task stays `input_required`, showing only those still open, until each
//!   has its answer);
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
//! running then is cancelled and forgotten.
//!
//! Tasks are durable in the server's journal: each is recorded when it is made and at each change
//! of status (a `task_changed` event: its id, a digest of its owner, its status and, at its end,
//! its result), and a server started on the same journal file (a fixed `--journal PATH`: the
//! default journal is a new file each time) reads them back before it serves. A task that had
//! ended answers `tasks/get` with its end as before; one whose call the restart interrupted
//! (working, or waiting for an answer) is `failed`, saying so. TTLs run on across the restart.
//! Owners are bound by a digest of their token, so a task survives for the clients of the same
//! token (or the one stdio client); an MCP session does not survive a restart, nor do its tasks. A question no `tasks/update` answers within the
//! host's bound on a question is given up (the tool reads it as cancelled and goes on). At most
//! [`MAX_TASKS`] tasks are kept at once; past it a call that would be a task is refused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rho_runtime::{Bus, EventKind, EventType, Host, Outcome, TaskStatus as Recorded, ToolResult};
use rmcp::ErrorData as McpError;
use rmcp::RoleServer;
use rmcp::model::{
    CreateTaskResult, DetailedTask, GetTaskResult, InputRequests, InputResponses, JsonObject, Task,
    TaskPayload, TaskStatus,
};
use rmcp::service::RequestContext;
use tokio_util::sync::CancellationToken;

use super::asking::{RunningCall, Step};
use crate::convert::mcp_result;

/// The most tasks one server keeps at once (ended ones included, until their TTL).
pub const MAX_TASKS: usize = 4096;

/// The most of them one owner (a session, a token's clients, the stdio client) keeps: one
/// client cannot take every other's room.
pub const MAX_TASKS_PER_OWNER: usize = 1024;

/// The most of them the clients of one peer address keep, all their sessions together: a peer
/// that opens many sessions cannot take every other's room either.
pub const MAX_TASKS_PER_PEER: usize = 1024;

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
    /// Where tasks are recorded (the host's bus, so its journal).
    bus: Bus,
}

/// One task.
struct Entry {
    /// Who made it ([`owner`]).
    owner: String,
    /// The peer address it came from (over HTTP; `None` over stdio, and for a task of an
    /// earlier run).
    peer: Option<std::net::IpAddr>,
    /// Its metadata as `tasks/get` shows it (status kept in step with `state`).
    task: Task,
    state: State,
    /// When it is forgotten.
    expires: Instant,
    /// How many times its state changed (tells a question from the next one).
    touches: u64,
    /// Cancels its call.
    cancel: CancellationToken,
    /// The tool it runs and its call's id (for its records).
    tool: String,
    call_id: String,
    /// When it was made, Unix milliseconds.
    created_ms: u64,
}

/// Where a task is.
enum State {
    /// Its call runs.
    Working,
    /// Its tool asks: the question, and the call parked until the client answers.
    Asks {
        requests: InputRequests,
        call: Box<RunningCall>,
    },
    /// Its end.
    Ended(TaskPayload),
}

/// Who made the request of `context`: its MCP session, else its bearer token, else the stdio
/// client (the one client of a server over stdio).
pub fn owner(context: &RequestContext<RoleServer>) -> String {
    #[cfg(feature = "server-http")]
    if let Some(parts) = context.extensions.get::<axum::http::request::Parts>() {
        return http_owner(parts);
    }
    let _ = context;
    "stdio".into()
}

/// The owner of a request over HTTP: its MCP session, else who sent it (its principal, as its
/// token told the endpoint: never the token).
#[cfg(feature = "server-http")]
fn http_owner(parts: &axum::http::request::Parts) -> String {
    // Neither the session id is kept (tasks are recorded in the journal): its SHA-256 tells its
    // clients apart from others, and is the same after a restart.
    if let Some(session) = parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
    {
        return format!(
            "session {}",
            &rho_runtime::sha256_hex(session.as_bytes())[..32]
        );
    }
    match parts
        .extensions
        .get::<std::sync::Arc<rho_runtime::Principal>>()
    {
        Some(principal) => format!("principal {principal}"),
        None => "http".into(),
    }
}

/// The peer address of `context`'s request, when it came over HTTP.
fn peer_of(context: &RequestContext<RoleServer>) -> Option<std::net::IpAddr> {
    #[cfg(feature = "server-http")]
    if let Some(parts) = context.extensions.get::<axum::http::request::Parts>() {
        return parts
            .extensions
            .get::<crate::http::Peer>()
            .map(|peer| peer.0);
    }
    let _ = context;
    None
}

/// A new task id: 128 random bits, hex; `None` without randomness (a guessable id would let
/// any client of the same token read the task).
fn new_id() -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Now, as RFC 3339 to the millisecond (what `createdAt` and `lastUpdatedAt` hold; a restored
/// task shows the same times).
fn timestamp() -> String {
    rfc3339(super::now_ms())
}

/// Unix milliseconds as RFC 3339 (a restored task's times).
fn rfc3339(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .unwrap_or_default()
        .to_rfc3339()
}

/// The error of a task id that is unknown, expired or someone else's.
fn unknown(id: &str) -> McpError {
    McpError::invalid_params(
        format!("no task `{id}` (unknown, expired, or not yours)"),
        None,
    )
}

impl Tasks {
    /// Tasks of `host` (recorded on its bus, so in its journal; those its journal holds from
    /// earlier runs read back first, [`Tasks::restore`]) readable for `ttl_ms` after their
    /// creation, polled every `poll_ms`, their answers at most `max_result_bytes`, a question
    /// open at most the host's bound. Expired tasks are forgotten as they expire (a task of the
    /// tokio runtime this is called in).
    pub fn new(host: &Host, ttl_ms: u64, poll_ms: u64, max_result_bytes: usize) -> Tasks {
        let tasks = Tasks {
            entries: Arc::default(),
            ttl: Duration::from_millis(ttl_ms),
            poll_ms,
            max_result_bytes,
            ask_timeout: host.ask_timeout(),
            bus: host.bus().clone(),
        };
        tasks.restore(host);
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

    /// Makes `call` (started, running) the task of the client of `context`, readable before
    /// this returns, and drives it in a task of its own. The `CreateTaskResult` for the client;
    /// `Err` (the call cancelled): no randomness for its id, or no room (see
    /// [`Tasks::make_room`]).
    pub fn create(
        &self,
        context: &RequestContext<RoleServer>,
        tool: &str,
        call_id: &str,
        call: RunningCall,
    ) -> Result<CreateTaskResult, McpError> {
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
        let (owner, peer) = (owner(context), peer_of(context));
        if let Err(why) = self.make_room(&owner, peer) {
            return refused(call, why);
        }
        let created_ms = super::now_ms();
        let now = rfc3339(created_ms);
        let task = Task::new(id.clone(), TaskStatus::Working, now.clone(), now)
            .with_ttl_ms(self.ttl.as_millis() as u64)
            .with_poll_interval_ms(self.poll_ms);
        let cancel = CancellationToken::new();
        let entry = Entry {
            owner,
            peer,
            task: task.clone(),
            state: State::Working,
            expires: Instant::now() + self.ttl,
            touches: 0,
            cancel: cancel.clone(),
            tool: tool.to_owned(),
            call_id: call_id.to_owned(),
            created_ms,
        };
        self.record(&id, &entry);
        self.lock().insert(id.clone(), entry);
        self.drive(id, call, cancel);
        Ok(CreateTaskResult::new(task))
    }

    /// Room for one more task of `owner` from `peer`. Past a bound (the owner's, the peer's, the
    /// server's), an ended task goes to make room, the oldest of whoever is past it (for the
    /// server's bound, of the peer, else the owner, keeping the most): a client that floods the
    /// server with tasks loses its own finished ones first. `Err` says why there is no room:
    /// every task in the way still runs.
    fn make_room(&self, owner: &str, peer: Option<std::net::IpAddr>) -> Result<(), &'static str> {
        let mut entries = self.lock();
        let oldest_ended = |entries: &HashMap<String, Entry>, of: &dyn Fn(&Entry) -> bool| {
            entries
                .iter()
                .filter(|(_, e)| of(e) && matches!(e.state, State::Ended(_)))
                .min_by_key(|(_, e)| e.created_ms)
                .map(|(id, _)| id.clone())
        };
        let free = |entries: &mut HashMap<String, Entry>, of: &dyn Fn(&Entry) -> bool| {
            let id = oldest_ended(entries, of)?;
            entries.remove(&id).map(|_| ())
        };
        let by_owner = |e: &Entry| e.owner == owner;
        if entries.values().filter(|e| by_owner(e)).count() >= MAX_TASKS_PER_OWNER
            && free(&mut entries, &by_owner).is_none()
        {
            return Err(
                "you keep too many tasks (1024) still running; wait for some to end, or cancel them",
            );
        }
        let by_peer = |e: &Entry| peer.is_some() && e.peer == peer;
        if peer.is_some()
            && entries.values().filter(|e| by_peer(e)).count() >= MAX_TASKS_PER_PEER
            && free(&mut entries, &by_peer).is_none()
        {
            return Err(
                "the clients of your address keep too many tasks (1024) still running; wait for some to end",
            );
        }
        if entries.len() >= MAX_TASKS {
            // Whoever keeps the most: by peer address where there is one, else by owner.
            let mut counts: HashMap<String, usize> = HashMap::new();
            for e in entries
                .values()
                .filter(|e| matches!(e.state, State::Ended(_)))
            {
                let holder = e.peer.map_or_else(|| e.owner.clone(), |p| p.to_string());
                *counts.entry(holder).or_default() += 1;
            }
            let heaviest = counts.into_iter().max_by_key(|(_, n)| *n).map(|(h, _)| h);
            let of_heaviest = |e: &Entry| {
                heaviest.as_deref()
                    == Some(&e.peer.map_or_else(|| e.owner.clone(), |p| p.to_string()))
            };
            if free(&mut entries, &of_heaviest).is_none() {
                return Err("the server keeps too many tasks still running; try again later");
            }
        }
        Ok(())
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
                        call: Box::new(call),
                    }
                }
                (Step::Done(_), None) => return,
            };
            tasks.touch(&id, entry);
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
            call.give_up();
            tasks.touch(&id, entry);
            let cancel = entry.cancel.clone();
            drop(entries);
            tasks.drive(id, *call, cancel);
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

    /// `tasks/update`: hands `responses` to the questions the task's tool asked, by key; once
    /// each has its answer the task works on, until then it shows those still open. Responses
    /// to a task that asks nothing now, and keys it did not ask, are ignored (acknowledged all
    /// the same).
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
        let State::Asks {
            requests: before,
            mut call,
        } = std::mem::replace(&mut entry.state, State::Working)
        else {
            return Ok(());
        };
        if let Some(requests) = call.answer(Some(responses)) {
            // Some are still open: the task keeps asking those. An update that answered
            // nothing changes nothing (nor restarts the bound on the question).
            let progressed = requests.len() < before.len();
            entry.state = State::Asks { requests, call };
            if progressed {
                self.touch(id, entry);
                self.give_up_unanswered(id, entry.touches);
            }
            return Ok(());
        }
        self.touch(id, entry);
        let cancel = entry.cancel.clone();
        drop(entries);
        self.drive(id.to_owned(), *call, cancel);
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
        self.touch(id, entry);
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

impl Tasks {
    /// Task `id`'s status and `lastUpdatedAt` after a change of its state, recorded.
    fn touch(&self, id: &str, entry: &mut Entry) {
        entry.task.status = match &entry.state {
            State::Working => TaskStatus::Working,
            State::Asks { .. } => TaskStatus::InputRequired,
            State::Ended(payload) => payload.status(),
        };
        entry.task.last_updated_at = timestamp();
        entry.touches += 1;
        self.record(id, entry);
    }

    /// Publishes task `id`'s record (to the journal, among others). A result over
    /// [`MAX_EVENT_TEXT`](rho_runtime::MAX_EVENT_TEXT) bytes of JSON is not put in it (events
    /// stay bounded): after a restart such a task reads as failed, saying so.
    fn record(&self, id: &str, entry: &Entry) {
        let (status, end) = match &entry.state {
            State::Working => (Recorded::Working, None),
            State::Asks { .. } => (Recorded::InputRequired, None),
            State::Ended(TaskPayload::Completed { result }) => {
                (Recorded::Completed, Some(result.clone()))
            }
            State::Ended(TaskPayload::Failed { error }) => (Recorded::Failed, Some(error.clone())),
            State::Ended(_) => (Recorded::Cancelled, None),
        };
        self.bus.publish(
            None,
            EventKind::TaskChanged {
                task_id: id.to_owned(),
                owner: entry.owner.clone(),
                status,
                tool: entry.tool.clone(),
                call_id: entry.call_id.clone(),
                created_ms: entry.created_ms,
                ttl_ms: self.ttl.as_millis() as u64,
                end: end.map(serde_json::Value::Object).filter(kept_in_records),
            },
        );
    }

    /// Reads back the tasks earlier runs recorded in the host's journal, those not yet expired:
    /// an ended one as it ended, one a restart interrupted as `failed` (recorded so).
    fn restore(&self, host: &Host) {
        let Some(earlier) = host.earlier(EventType::TaskChanged) else {
            return;
        };
        let earlier = match earlier {
            Ok(earlier) => earlier,
            Err(e) => {
                tracing::warn!("tasks of earlier runs not read back: {e}");
                return;
            }
        };
        // The last record of each task not expired yet, oldest task first (at most
        // `MAX_TASKS` of them: the newest).
        let now = super::now_ms();
        let mut last: HashMap<String, (u64, rho_runtime::Event)> = HashMap::new();
        let mut order = 0u64;
        for event in earlier {
            let event = match event {
                Ok(event) => event,
                Err(e) => {
                    tracing::warn!("tasks of earlier runs read back in part: {e}");
                    break;
                }
            };
            let EventKind::TaskChanged {
                task_id,
                created_ms,
                ttl_ms,
                ..
            } = &event.kind
            else {
                continue;
            };
            if created_ms.saturating_add(*ttl_ms) <= now {
                last.remove(task_id);
                continue;
            }
            let first = last.get(task_id).map_or_else(
                || {
                    order += 1;
                    order
                },
                |(first, _)| *first,
            );
            last.insert(task_id.clone(), (first, event));
            if last.len() > MAX_TASKS {
                // The oldest goes.
                if let Some(oldest) = last
                    .iter()
                    .min_by_key(|(_, (first, _))| *first)
                    .map(|(id, _)| id.clone())
                {
                    last.remove(&oldest);
                }
            }
        }
        let mut last: Vec<_> = last.into_values().collect();
        last.sort_by_key(|(order, _)| *order);
        let mut interrupted = 0;
        for (_, event) in last {
            let EventKind::TaskChanged {
                task_id,
                owner,
                status,
                tool,
                call_id,
                created_ms,
                ttl_ms,
                end,
            } = event.kind
            else {
                continue;
            };
            let Some(left) = (created_ms + ttl_ms)
                .checked_sub(now)
                .filter(|&left| left > 0)
            else {
                continue;
            };
            let object = |end: Option<serde_json::Value>| match end {
                Some(serde_json::Value::Object(object)) => object,
                _ => JsonObject::new(),
            };
            let payload = match status {
                Recorded::Completed if end.is_none() => TaskPayload::Failed {
                    error: as_object(&McpError::internal_error(
                        "rho: the server restarted; this task's result was too large to keep \
                         across a restart",
                        None,
                    )),
                },
                Recorded::Completed => TaskPayload::Completed {
                    result: object(end),
                },
                Recorded::Failed => TaskPayload::Failed { error: object(end) },
                Recorded::Cancelled => TaskPayload::Cancelled,
                _ => {
                    interrupted += 1;
                    TaskPayload::Failed {
                        error: as_object(&McpError::internal_error(
                            "rho: the server restarted while this task ran; its call was \
                             interrupted and did not end",
                            None,
                        )),
                    }
                }
            };
            let mut entry = Entry {
                owner,
                peer: None,
                task: Task::new(
                    task_id.clone(),
                    payload.status(),
                    rfc3339(created_ms),
                    rfc3339(event.ts_ms),
                )
                .with_ttl_ms(ttl_ms)
                .with_poll_interval_ms(self.poll_ms),
                state: State::Ended(payload),
                expires: Instant::now() + Duration::from_millis(left),
                touches: 0,
                cancel: CancellationToken::new(),
                tool,
                call_id,
                created_ms,
            };
            if !status.is_terminal() {
                self.touch(&task_id, &mut entry);
            }
            let mut entries = self.lock();
            if entries.len() >= MAX_TASKS {
                break;
            }
            entries.insert(task_id, entry);
        }
        if interrupted > 0 {
            tracing::info!(interrupted, "tasks a restart interrupted are failed");
        }
    }
}

/// `value` as a JSON object (what a task inlines).
fn as_object(value: &impl serde::Serialize) -> JsonObject {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::Object(object)) => object,
        _ => JsonObject::new(),
    }
}

/// Whether a task's end is small enough to go in its record.
fn kept_in_records(end: &serde_json::Value) -> bool {
    serde_json::to_vec(end).is_ok_and(|bytes| bytes.len() <= rho_runtime::MAX_EVENT_TEXT)
}
