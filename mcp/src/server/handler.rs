//! The MCP server over a host: its tool list (quarantined tools left out, meta-tools on demand),
//! its calls (each in a task of its own behind the gate, asking the client's user when a rule
//! asks), and list-change notices to every session and listener.

use std::sync::{Arc, Mutex, PoisonError};

use rho_runtime::{
    Action, Asker, BusItem, CallOptions, EventType, Filter, GateRule, Host, Outcome, RuleGate,
    ToolCall, ToolResult, Verdict,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, InitializeResult, InputRequiredResult,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerNotification,
    SubscriptionFilter, Tool, ToolListChangedNotification,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext, SubscriptionSink};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler};
use serde_json::Value;
use tokio_stream::StreamExt;

use super::asking::{ElicitAnswerer, Parked, RunningCall, Step};
use super::logging::{self, SessionLevel};
use super::meta_tools;
use super::notes::Notes;
use super::observe::{
    RequestInfo, RequestObserver, principal_in, principal_of, request_id, via_in,
};
use super::settings::ServeConfig;
use super::tasks::{Tasks, owner};
use crate::convert::{mcp_result, mcp_tool};

/// The MCP server.
#[derive(Clone)]
pub struct RhoServer {
    host: Host,
    max_result_bytes: usize,
    /// Calls running at once at most; more wait for a turn (a client cannot start a thread per
    /// request without bound).
    turns: Arc<tokio::sync::Semaphore>,
    /// The gate rules calls run under, asking the client's user when one asks; `None`: the
    /// host's own gate.
    rules: Option<Arc<Vec<GateRule>>>,
    /// Told of every request, if any observes them.
    observer: Option<Arc<dyn RequestObserver>>,
    fallback: Action,
    /// Who is told when the tool list changes.
    audience: Arc<Mutex<Audience>>,
    calls: Arc<std::sync::atomic::AtomicU64>,
    /// List and answer the meta-tools ([`super::meta_tools`]).
    meta_tools: bool,
    /// The least level of log lines this session is sent.
    log_level: SessionLevel,
    /// Calls parked on their tool's question (2026-07-28), shared by every session.
    parked: Parked,
    /// Calls running as MCP Tasks, shared by every session.
    tasks: Tasks,
    /// A tool whose timeout is over this runs as a task for clients that declare tasks.
    task_after: Option<std::time::Duration>,
}

/// Who hears of tool list changes: the peers of initialized sessions (2025-era: one over stdio,
/// any number over HTTP) and the `subscriptions/listen` streams (2026-07-28, where no session
/// sends `notifications/initialized`). Closed ones are dropped when next told.
#[derive(Default)]
struct Audience {
    peers: Vec<Told<Peer<RoleServer>>>,
    listeners: Vec<Told<SubscriptionSink>>,
}

/// One client told of tool list changes: where to, who it is, and the names the policy let it
/// see when it was last told (a policy change tells only those whose names changed).
struct Told<T> {
    to: T,
    principal: Arc<rho_runtime::Principal>,
    via: rho_runtime::Via,
    sees: Vec<String>,
}

impl<T> Told<T> {
    fn new(to: T, host: &Host, extensions: &rmcp::model::Extensions) -> Self {
        let (principal, via) = (principal_in(extensions), via_in(extensions));
        let sees = visible(host, &principal, via);
        Told {
            to,
            principal,
            via,
            sees,
        }
    }

    /// Reads what it may see now; whether to tell it (always, unless `policy_only` and that
    /// did not change).
    fn refresh(&mut self, host: &Host, policy_only: bool) -> bool {
        let sees = visible(host, &self.principal, self.via);
        let differs = sees != self.sees;
        self.sees = sees;
        !policy_only || differs
    }
}

/// The names of the tools `principal` may list now.
fn visible(host: &Host, principal: &rho_runtime::Principal, via: rho_runtime::Via) -> Vec<String> {
    host.tools_for(Some(principal), via)
        .into_iter()
        .map(|spec| spec.name)
        .collect()
}

/// Asks the MCP client's user through elicitation when the client supports it; otherwise applies
/// the configured fallback.
struct ElicitAsker {
    peer: Peer<RoleServer>,
    fallback: Action,
    /// How this request's client can be asked.
    asking: Asking,
}

/// How the user of a request's client can be asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asking {
    /// By an `elicitation/create` request to the client (2025-era sessions that declared
    /// elicitation).
    Request,
    /// Already asked, by an `InputRequiredResult` round trip (2026-07-28); the user's answer.
    Answered(bool),
    /// Not at all: the fallback decides.
    Cannot,
}

#[derive(serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct Approval {
    /// Allow the call?
    approve: bool,
}

rmcp::elicit_safe!(Approval);

/// The key of the approval question in an `InputRequiredResult` (2026-07-28).
const APPROVAL_KEY: &str = "rho/approve";

/// The `requestState` of a round that asks for a call's approval (the call has not started:
/// nothing is parked).
const APPROVAL_STATE: &str = "rho-approval";

/// How long a call of a tool that asks first may take to ask before it becomes a task all the
/// same.
const FIRST_QUESTIONS_WINDOW: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether a call runs as an MCP Task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AsTask {
    /// Answered within the request.
    No,
    /// A task from the start.
    Now,
    /// Its first questions within the request, then a task (a tool that asks first).
    AfterQuestions,
}

impl ElicitAsker {
    fn fallback(&self, call: &ToolCall, why: &str) -> Verdict {
        match self.fallback {
            Action::Allow => Verdict::Allow,
            _ => Verdict::Block(format!(
                "tool `{}` needs approval and {why}; the host's fallback denies it",
                call.name
            )),
        }
    }
}

#[async_trait::async_trait]
impl Asker for ElicitAsker {
    async fn ask(&self, call: &ToolCall) -> Verdict {
        match self.asking {
            Asking::Request => {}
            Asking::Answered(true) => return Verdict::Allow,
            Asking::Answered(false) => {
                return Verdict::Block(format!("the user declined the call of `{}`", call.name));
            }
            Asking::Cannot => return self.fallback(call, "the client cannot ask its user"),
        }
        let question = format!("Allow rho to run `{}` with {}?", call.name, call.arguments);
        match self.peer.elicit::<Approval>(question).await {
            Ok(Some(Approval { approve: true })) => Verdict::Allow,
            Ok(_) => Verdict::Block(format!("the user declined the call of `{}`", call.name)),
            Err(
                rmcp::service::ElicitationError::UserDeclined
                | rmcp::service::ElicitationError::UserCancelled,
            ) => Verdict::Block(format!("the user declined the call of `{}`", call.name)),
            Err(e) => self.fallback(call, &format!("asking the user failed ({e})")),
        }
    }
}
impl RhoServer {
    /// The server of `host`'s tools, as `[serve]` says, its calls behind the host's own gate;
    /// from now on every session and listener it serves hears of tool list changes.
    pub fn new(host: &Host, serve: &ServeConfig) -> RhoServer {
        let server = RhoServer {
            host: host.clone(),
            max_result_bytes: serve.max_result_bytes,
            turns: Arc::new(tokio::sync::Semaphore::new(serve.max_calls)),
            rules: None,
            observer: None,
            fallback: serve.ask_fallback,
            audience: Arc::default(),
            calls: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            meta_tools: serve.meta_tools,
            log_level: SessionLevel::default(),
            parked: Parked::default(),
            tasks: Tasks::new(
                host,
                serve.task_ttl_ms,
                serve.task_poll_ms,
                serve.max_result_bytes,
            ),
            task_after: serve.task_after_ms.map(std::time::Duration::from_millis),
        };
        announce_changes(host, server.audience.clone());
        server
    }

    /// The same server, its calls behind `rules` instead of the host's gate: a rule that asks
    /// asks the client's user (elicitation, or an input-required round of 2026-07-28), and
    /// follows `[serve] ask_fallback` when the client cannot ask.
    pub fn gate_rules(mut self, rules: &[GateRule]) -> RhoServer {
        self.rules = Some(Arc::new(rules.to_vec()));
        self
    }

    /// The same server, `observer` told of every request it answers (an OpenTelemetry export's
    /// SERVER spans).
    pub fn observed_by(mut self, observer: Arc<dyn RequestObserver>) -> RhoServer {
        self.observer = Some(observer);
        self
    }

    /// The host whose tools this server serves.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The tools as `tools/list` shows them now to the sender of `context`'s request: those the
    /// policy in force lets it list, quarantined ones left out; with meta-tools on, those two
    /// first (a plugin's tool of the same name hidden).
    fn listed(&self, context: &RequestContext<RoleServer>) -> Vec<Tool> {
        let hidden = self.quarantined();
        let meta = self.meta_tools.then(meta_tools::tools);
        let (principal, via) = (principal_of(context), via_in(&context.extensions));
        let plugin_tools = self
            .host
            .tools_for(Some(&principal), via)
            .iter()
            .filter(|t| !hidden.contains(&t.name))
            .filter(|t| !(self.meta_tools && meta_tools::is_meta(&t.name)))
            .map(mcp_tool)
            .collect::<Vec<_>>();
        meta.into_iter().flatten().chain(plugin_tools).collect()
    }

    /// Tools quarantined and cooling down (or with no cool-down): listed again once a call may
    /// probe them.
    fn quarantined(&self) -> Vec<String> {
        let now_ms = super::now_ms();
        self.host
            .stats()
            .into_iter()
            .filter(|s| s.quarantine.is_some() && s.probe_after_ms.is_none_or(|at| at > now_ms))
            .map(|s| s.tool)
            .collect()
    }

    /// How the user of this request's client can be asked, should the gate ask. A 2026-07-28
    /// request cannot carry a server-to-client request: when a rule asks about this call, its
    /// first round ends with an `InputRequiredResult` (`Err`) holding the question, and the
    /// client's retry carries the answer (no call starts until then).
    fn asking(
        &self,
        call: &ToolCall,
        context: &RequestContext<RoleServer>,
        answers: Option<&rmcp::model::InputResponses>,
    ) -> Result<Asking, Box<InputRequiredResult>> {
        if !modern(context) {
            return Ok(if can_elicit(context) {
                Asking::Request
            } else {
                Asking::Cannot
            });
        }
        if let Some(answer) = answers.and_then(|a| a.get(APPROVAL_KEY)) {
            let approved = answer["action"] == "accept" && answer["content"]["approve"] == true;
            return Ok(Asking::Answered(approved));
        }
        let can = can_elicit(context);
        let hints = self
            .host
            .tools()
            .into_iter()
            .find(|t| t.name == call.name)
            .map(|t| t.hints)
            .unwrap_or_default();
        let asks = self
            .rules
            .iter()
            .flat_map(|rules| rules.iter())
            .find(|rule| rule.matches(&call.name, &hints))
            .is_some_and(|rule| rule.action == Action::Ask);
        if !asks {
            // No rule asks about this call now; should one by the time it runs (a reload in
            // between), the answer is no.
            return Ok(Asking::Answered(false));
        }
        if !can {
            return Ok(Asking::Cannot);
        }
        let question = format!("Allow rho to run `{}` with {}?", call.name, call.arguments);
        let schema = match rmcp::model::ElicitationSchema::from_type::<Approval>() {
            Ok(schema) => schema,
            Err(_) => return Ok(Asking::Cannot),
        };
        let elicit = rmcp::model::ElicitRequest::new(
            rmcp::model::ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: question,
                requested_schema: schema,
            },
        );
        let requests = std::collections::BTreeMap::from([(
            APPROVAL_KEY.to_owned(),
            rmcp::model::InputRequest::Elicitation(elicit),
        )]);
        Err(Box::new(InputRequiredResult::new(
            Some(requests),
            Some(APPROVAL_STATE.into()),
        )))
    }

    /// Whether a call of `name` for the client of `context` runs as an MCP Task: the client
    /// declared tasks and the tool is long (it declares task support, or its timeout is over
    /// `task_after`); a tool that asks first asks within the request when the client can
    /// elicit there (2026-07-28). `Err`: the tool runs only as a task and the client declared
    /// none (`-32021`, naming the extension).
    fn runs_as_task(
        &self,
        name: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<AsTask, McpError> {
        use rho_runtime::TaskSupport;
        let Some(spec) = self.host.spec(name) else {
            return Ok(AsTask::No);
        };
        let declared = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        if spec.task_support == TaskSupport::Required && !declared {
            return Err(McpError::missing_required_client_capability(
                rmcp::model::ClientCapabilities::builder()
                    .enable_tasks()
                    .build(),
            ));
        }
        let long = spec.task_support != TaskSupport::Never
            || self
                .task_after
                .is_some_and(|after| self.host.timeout_for(&spec) > after);
        Ok(match (declared && long, spec.asks_first) {
            (false, _) => AsTask::No,
            (true, true) if modern(context) && can_elicit(context) => AsTask::AfterQuestions,
            (true, _) => AsTask::Now,
        })
    }

    /// `tools/call`, its calls' trace context `traceparent` when a server span stands for the
    /// request (else the request's own).
    async fn call_tool_traced(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        traceparent: Option<String>,
    ) -> Result<CallToolResponse, McpError> {
        if self.meta_tools {
            if request.name == meta_tools::FIND {
                let arguments = request.arguments.unwrap_or_default();
                return Ok(CallToolResponse::Complete(meta_tools::find(
                    &self.listed(&context),
                    &arguments,
                )));
            }
            if request.name == meta_tools::CALL {
                return match meta_tools::unwrap_call(request) {
                    Ok(inner) => self.call(inner, context, traceparent).await,
                    Err(refused) => Ok(CallToolResponse::Complete(*refused)),
                };
            }
        }
        self.call(request, context, traceparent).await
    }

    /// Runs the call in a task of its own: whatever happens, the request gets an answer.
    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        traceparent: Option<String>,
    ) -> Result<CallToolResponse, McpError> {
        // The retry of a round whose tool asked (2026-07-28): the answers go to the parked
        // call, which goes on once its questions have them all (a call that asks first then
        // becomes a task). A state that names no parked call is refused: tampered with,
        // expired, or used already.
        if let Some(state) = request
            .request_state
            .as_deref()
            .filter(|state| *state != APPROVAL_STATE)
        {
            let Some(mut running) = self.parked.claim(state, &owner(&context)) else {
                return Err(McpError::invalid_params(
                    "rho: the requestState names no call of yours waiting for answers (altered, \
                     expired after the host's bound on a question, or used already); call the \
                     tool again without it",
                    None,
                ));
            };
            let open = running.answer(request.input_responses.as_ref());
            if open.is_none()
                && let Some((tool, call_id)) = running.task_after_answers.take()
            {
                let task = self.tasks.create(&context, &tool, &call_id, running)?;
                return Ok(CallToolResponse::Task(task));
            }
            return Ok(self.drive(running, &context).await);
        }
        let mode = self.runs_as_task(&request.name, &context)?;
        let as_task = mode != AsTask::No;
        // The server's own counter: request ids `1` and `"1"` are different requests.
        let n = self
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let call_id = format!("mcp-{n}-{}", request_id(&context));
        // Over an HTTP session: cancelled when the client drops the response.
        #[cfg(feature = "server-http")]
        let _registered = crate::http::register(
            context.extensions.get::<axum::http::request::Parts>(),
            &serde_json::to_value(&context.id).unwrap_or_default(),
            context.ct.clone(),
        );
        let call = ToolCall::new(
            call_id.clone(),
            request.name.to_string(),
            Value::Object(request.arguments.unwrap_or_default()),
        )
        .by(principal_of(&context));
        // Progress and log lines before the response (`super::notes`).
        // A task's request ends at once: its progress and log lines have no request to go with.
        let token = context.meta.get_progress_token().filter(|_| !as_task);
        // A 2026-07-28 request carries its own level; a 2025-era session has the one it set.
        let level = logging::requested(&context.meta)
            .or_else(|| self.log_level.get())
            .filter(|_| !as_task);
        let (on_update, on_log, notes) =
            Notes::start(context.peer.clone(), call.name.clone(), token, level);
        let asking = match self.asking(&call, &context, request.input_responses.as_ref()) {
            Ok(asking) => asking,
            Err(input_required) => {
                drop(notes);
                return Ok(CallToolResponse::InputRequired(*input_required));
            }
        };
        let gate = self.rules.as_ref().map(|rules| {
            Arc::new(RuleGate::new(
                (**rules).clone(),
                Arc::new(ElicitAsker {
                    peer: context.peer.clone(),
                    fallback: self.fallback,
                    asking,
                }),
            )) as Arc<dyn rho_runtime::Gate>
        });
        // W3C trace context from the request's `_meta.traceparent` (checked by the runner).
        let traceparent = traceparent.or_else(|| {
            context
                .meta
                .get("traceparent")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        let mut options = CallOptions {
            cancel: Some(context.ct.clone()),
            traceparent,
            gate,
            on_update,
            on_log,
            via: via_in(&context.extensions),
            ..CallOptions::default()
        };
        let turn = tokio::select! {
            turn = self.turns.clone().acquire_owned() => turn.ok(),
            () = context.ct.cancelled() => None,
        };
        let Some(turn) = turn else {
            return Ok(CallToolResponse::Complete(mcp_result(
                &ToolResult::failed(
                    &call.id,
                    &call.name,
                    Outcome::Error,
                    "rho: the call was cancelled before it started",
                ),
                self.max_result_bytes,
            )));
        };
        // A tool's questions: a 2026-07-28 client that can elicit is asked by input-required
        // rounds (the call runs in a task of its own, parked between them); a 2025-era one by
        // `elicitation/create`; any other is declined.
        // A task's call outlives this request: the client polls the task for its end, and its
        // tool's questions come through `tasks/get`.
        let response = if as_task || (modern(&context) && can_elicit(&context)) {
            let host = self.host.clone();
            let (tool, call_id) = (call.name.clone(), call.id.clone());
            let given = request.input_responses.clone();
            let mut running = RunningCall::start(
                move |answerer, cancel| async move {
                    let options = CallOptions {
                        answerer: Some(answerer),
                        cancel: Some(cancel),
                        ..options
                    };
                    host.call_with(&call, &options).await
                },
                Box::new(turn),
            )
            .with_answers(given.as_ref());
            if mode == AsTask::AfterQuestions && running.asks_within(FIRST_QUESTIONS_WINDOW).await {
                match running.open_pending() {
                    // Asked within the request; the task once they are answered.
                    Some(_) => {
                        running.task_after_answers = Some((tool, call_id));
                        self.drive(running, &context).await
                    }
                    // The request carried every answer: the task now.
                    None => CallToolResponse::Task(
                        self.tasks.create(&context, &tool, &call_id, running)?,
                    ),
                }
            } else if as_task {
                CallToolResponse::Task(self.tasks.create(&context, &tool, &call_id, running)?)
            } else {
                self.drive(running, &context).await
            }
        } else {
            options.answerer = Some(Arc::new(ElicitAnswerer {
                peer: context.peer.clone(),
                can: can_elicit(&context),
            }));
            let result = self.host.call_with(&call, &options).await;
            drop(turn);
            CallToolResponse::Complete(mcp_result(&result, self.max_result_bytes))
        };
        if let Some(notes) = notes {
            notes.finish(&call_id).await;
        }
        Ok(response)
    }

    /// Runs a 2026-07-28 call to its end or its tool's next question: the end is the answer;
    /// a question parks the call and is the answer (`InputRequiredResult`, the parked call's
    /// state in its `requestState`).
    async fn drive(
        &self,
        mut running: RunningCall,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        match running.next(&context.ct).await {
            Step::Done(result) => {
                CallToolResponse::Complete(mcp_result(&result, self.max_result_bytes))
            }
            Step::Asks(mut input_required) => {
                let within = running.ask_time_left(self.host.ask_timeout());
                match self.parked.park(owner(context), running, within) {
                    Ok(state) => {
                        input_required.request_state = Some(state);
                        CallToolResponse::InputRequired(input_required)
                    }
                    Err(running) => {
                        tokio::spawn(running.finish());
                        CallToolResponse::Complete(mcp_result(
                            &ToolResult::failed(
                                "?",
                                "?",
                                Outcome::Error,
                                "rho: the tool asks a question, but there is no randomness to \
                                 make its requestState unguessable: not asked",
                            ),
                            self.max_result_bytes,
                        ))
                    }
                }
            }
        }
    }
}

/// Whether `context`'s request is of the 2026-07-28 revision or later.
fn modern(context: &RequestContext<RoleServer>) -> bool {
    context
        .meta
        .protocol_version()
        .is_some_and(|v| v.to_string().as_str() >= "2026-07-28")
}

/// Whether the client of `context`'s request declared elicitation: in the request (2026-07-28)
/// or at its session's start (2025 era).
fn can_elicit(context: &RequestContext<RoleServer>) -> bool {
    if modern(context) {
        context
            .meta
            .client_capabilities()
            .is_some_and(|caps| caps.elicitation.is_some())
    } else {
        context
            .peer
            .peer_info()
            .is_some_and(|info| info.capabilities.elicitation.is_some())
    }
}

impl ServerHandler for RhoServer {
    fn get_info(&self) -> InitializeResult {
        // Logging is deprecated after the 2025 revisions (see `super::logging`).
        #[allow(deprecated)]
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_tasks()
            .build();
        InitializeResult::new(capabilities)
            .with_server_info(Implementation::new("rho", env!("CARGO_PKG_VERSION")))
            .with_instructions("Compiled tools from rho plugins. Every call ends with one outcome; see _meta[\"rho/outcome\"].")
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let span = (self.observer.as_ref())
            .map(|observer| observer.begin(RequestInfo::of("tools/list", None, &context)));
        let tools = self.listed(&context);
        // Fresh only now: a client that caches lists (2026-07-28) sees a reload at its next look.
        let listed = Ok(ListToolsResult::with_all_items(tools).with_ttl_ms(0));
        if let Some(span) = span {
            span.end(None);
        }
        listed
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // Observed (OpenTelemetry): a SERVER span for the request, the call's span its child.
        let Some(observer) = &self.observer else {
            return self.call_tool_traced(request, context, None).await;
        };
        let span = observer.begin(RequestInfo::of("tools/call", Some(&request.name), &context));
        let traceparent = span.traceparent();
        let response = self.call_tool_traced(request, context, traceparent).await;
        let error_type = match &response {
            Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => {
                Some("tool_error".to_owned())
            }
            Err(e) => Some(e.code.0.to_string()),
            _ => None,
        };
        span.end(error_type);
        response
    }

    /// `tasks/get` ([`super::tasks`]).
    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, McpError> {
        self.tasks.get(&owner(&context), &request.task_id)
    }

    /// `tasks/update`: the answer to a task's question.
    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks
            .update(&owner(&context), &request.task_id, &request.input_responses)
    }

    /// `tasks/cancel`.
    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks.cancel(&owner(&context), &request.task_id)
    }

    /// `logging/setLevel`: this session is sent the log lines of its calls at `level` and above.
    #[allow(deprecated)] // MCP logging: see `super::logging`.
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.log_level
            .set(crate::convert::logs::from_mcp(request.level));
        Ok(())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let told = Told::new(context.peer, &self.host, &context.extensions);
        self.audience
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .peers
            .push(told);
    }

    /// `subscriptions/listen` (2026-07-28): tool list changes only (rho has no prompts or
    /// resources).
    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), McpError> {
        let told = Told::new(
            subscription.sink().clone(),
            &self.host,
            &subscription.request_context().extensions,
        );
        self.audience
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .listeners
            .push(told);
        subscription.cancelled().await;
        Ok(())
    }
}

/// Tells every client the tool list changed after every reload, removal and quarantine change,
/// and when a quarantined tool's cool-down ends (it is listed again for the call that probes it);
/// after a policy change, only those whose list it changed.
fn announce_changes(host: &Host, audience: Arc<Mutex<Audience>>) {
    let mut events = host.subscribe_filtered(Filter::default().types([
        EventType::PolicyChanged,
        EventType::PluginLoaded,
        EventType::PluginReloaded,
        EventType::PluginRemoved,
        EventType::RemoteToolsChanged,
        EventType::ToolQuarantined,
        EventType::ToolRestored,
    ]));
    let (cooled, mut cooled_down) = tokio::sync::mpsc::unbounded_channel::<()>();
    // When a quarantined tool's cool-down ends at `at` (Unix ms), the list changes again.
    let when_cooled = move |at: u64| {
        let wait = std::time::Duration::from_millis(at.saturating_sub(super::now_ms()));
        let cooled = cooled.clone();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let _ = cooled.send(());
        });
    };
    let host = host.clone();
    tokio::spawn(async move {
        loop {
            let mut policy_only = false;
            tokio::select! {
                item = events.next() => match item {
                    None => return,
                    Some(BusItem::Event(event)) => {
                        policy_only = matches!(event.kind, rho_runtime::EventKind::PolicyChanged { .. });
                        if let rho_runtime::EventKind::ToolQuarantined {
                            probe_after_ms: Some(at),
                            ..
                        } = event.kind
                        {
                            when_cooled(at);
                        }
                    }
                    // Events missed: the cool-downs are read from the host's figures instead.
                    Some(BusItem::Lagged { .. }) => {
                        let now = super::now_ms();
                        host.stats()
                            .iter()
                            .filter_map(|s| s.probe_after_ms.filter(|at| *at > now))
                            .for_each(&when_cooled);
                    }
                },
                Some(()) = cooled_down.recv() => {}
            }
            tool_list_changed(&audience, &host, policy_only).await;
        }
    });
}

/// Tells the clients of `audience` their tool list changed (with `policy_only`, only those
/// whose policy-visible names changed); forgets those gone.
async fn tool_list_changed(audience: &Mutex<Audience>, host: &Host, policy_only: bool) {
    let (peers, listeners) = {
        let mut audience = audience.lock().unwrap_or_else(PoisonError::into_inner);
        audience.peers.retain(|p| !p.to.is_transport_closed());
        let peers: Vec<Peer<RoleServer>> = (audience.peers.iter_mut())
            .filter_map(|told| told.refresh(host, policy_only).then(|| told.to.clone()))
            .collect();
        let listeners: Vec<SubscriptionSink> = (audience.listeners.iter_mut())
            .filter_map(|told| told.refresh(host, policy_only).then(|| told.to.clone()))
            .collect();
        (peers, listeners)
    };
    for peer in peers {
        let _ = peer.notify_tool_list_changed().await;
    }
    let mut closed = Vec::new();
    for sink in listeners {
        let changed =
            ServerNotification::ToolListChangedNotification(ToolListChangedNotification::default());
        if sink.send(changed).await.is_err() {
            closed.push(sink.id().clone());
        }
    }
    if !closed.is_empty() {
        let mut audience = audience.lock().unwrap_or_else(PoisonError::into_inner);
        audience.listeners.retain(|s| !closed.contains(s.to.id()));
    }
}
