//! [`ToolRunner`]: runs one tool call in its own task, behind the gate and under a timeout whose
//! clock starts only when the gate allows, and ends it exactly once with a typed outcome and one
//! `tool_execution_end` event, whatever the tool, the gate or the task does.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rho_plugin_api::{Output, Reply};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;

use crate::bus::Bus;
use crate::bus::event_type::EventType;
use crate::bus::events::{EventKind, OutputView, ServedBy};
use crate::call::ask::{Answerer, Asking};
use crate::call::gate::{Gate, GateCtx, ToolCall, Verdict};
use crate::call::invoke::{EndsOnDrop, Failure, ToolCtx, is_valid_traceparent};
use crate::call::limits::Limits;
use crate::call::options::{CallOptions, CancellationToken, RunnerConfig};
use crate::call::panic::{Caught, catch};
use crate::call::policy::{Policy, decide_call, may_list, refused};
use crate::call::sender::{Activity, CallSink};
use crate::call::task::{CallTask, TaskEnd, end_event, fallback_end};
use crate::registry::health::Charge;
use crate::registry::{Probe, ResolvedTool, ToolRegistry};
use rho_protocol::{
    CrashReason, Decision, Outcome, ToolResult, crash_text, cut_output, idle_timeout_text,
    normalize, timeout_text, with_text,
};

/// Runs tool calls. Cheap to clone; clones share the registry, the bus, the task tracker and the
/// stop switch.
#[derive(Clone)]
pub struct ToolRunner {
    registry: ToolRegistry,
    config: Arc<RunnerConfig>,
    tracker: TaskTracker,
    stop: Arc<Stop>,
    /// The policy in force, swapped whole ([`ToolRunner::set_policy`]).
    policy: Arc<std::sync::RwLock<Option<Arc<dyn Policy>>>>,
    limits: Limits,
}

/// The runner's stop switch and the calls in flight.
#[derive(Default)]
struct Stop {
    token: CancellationToken,
    reason: std::sync::Mutex<String>,
    in_flight: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

impl Stop {
    fn text(&self, tool: &str) -> String {
        let reason = self
            .reason
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        format!("call of tool `{tool}` abandoned: the host is stopping ({reason})")
    }
}

/// Counts a run in flight until its end event is out.
struct InFlight(Arc<Stop>);

impl InFlight {
    fn new(stop: &Arc<Stop>) -> Self {
        stop.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(stop.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl ToolRunner {
    /// A runner over `registry`, publishing on the registry's bus.
    pub fn new(registry: ToolRegistry, config: RunnerConfig) -> Self {
        ToolRunner {
            registry,
            config: Arc::new(config),
            tracker: TaskTracker::new(),
            stop: Arc::default(),
            policy: Arc::default(),
            limits: Limits::default(),
        }
    }

    /// The same runner, counting calls against `limits`.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Puts `policy` in force for every call that starts from now on (`None`: everything is
    /// allowed); calls already past it keep their decision.
    pub fn set_policy(&self, policy: Option<Arc<dyn Policy>>) {
        *self
            .policy
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = policy;
    }

    /// The policy in force now.
    pub fn policy(&self) -> Option<Arc<dyn Policy>> {
        self.policy
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Stops the runner: every call in flight ends at once `error` with a text saying the host is
    /// stopping and why (`reason`: "SIGTERM", "the client closed its input"), its tool cancelled;
    /// calls started from now on end the same way. Each still publishes its one end event. Wait
    /// for them with [`ToolRunner::stopped`].
    pub fn stop(&self, reason: &str) {
        *self
            .stop
            .reason
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = reason.to_owned();
        self.stop.token.cancel();
    }

    /// Waits up to `within` until no call is in flight (each has published its end event);
    /// `false` if some still are.
    pub async fn stopped(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let idle = self.stop.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.stop.in_flight.load(Ordering::Acquire) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return self.stop.in_flight.load(Ordering::Acquire) == 0;
            }
        }
    }

    /// How long a tool's question may stay open ([`RunnerConfig::ask_timeout`]).
    pub fn ask_timeout(&self) -> Duration {
        self.config.ask_timeout
    }

    /// The total timeout of a call of `spec` ([`RunnerConfig::timeout_for`]).
    pub fn spec_timeout(&self, spec: &rho_protocol::ToolSpec) -> Duration {
        self.config.timeout_for(spec)
    }

    /// Calls in flight now (started, end event not yet published).
    pub fn in_flight(&self) -> usize {
        self.stop.in_flight.load(Ordering::Acquire)
    }

    /// The bus the runner publishes on.
    pub fn bus(&self) -> &Bus {
        self.registry.bus()
    }

    /// The timeout that applies to `tool`: the host's override, else the tool's own (at most
    /// `max_tool_timeout`), else the default.
    pub fn timeout_for(&self, tool: &ResolvedTool) -> Duration {
        self.config.timeout_for(&tool.spec)
    }

    /// Runs `call` to its end: publishes `tool_execution_start`, resolves and validates it, runs
    /// the gate and then the tool, and publishes exactly one `tool_execution_end`. Never panics
    /// and never hangs past the tool's timeout once the gate has allowed.
    ///
    /// The call runs in a task of its own (one per call, not tied to the caller): the gate and
    /// the tool are driven inside it, unless either may block its thread, which then runs in a
    /// task of its own too (so that it holds back neither the timeout nor a cancellation).
    ///
    /// Cancellation-safe: dropping the returned future midway does not lose the call: it is
    /// cancelled as by `options.cancel` and ends at once (`error`), its tool cancelled (an
    /// isolated worker is cancelled, then killed), with its one end event. To stop a call and
    /// still get its result, cancel `options.cancel`.
    pub async fn run(
        &self,
        call: &ToolCall,
        gate: &Arc<dyn Gate>,
        answerer: &Arc<dyn Answerer>,
        options: &CallOptions,
    ) -> ToolResult {
        // Cancelled when this future is dropped before the call ended.
        let abandoned = match &options.cancel {
            Some(outer) => outer.child_token(),
            None => CancellationToken::new(),
        };
        let drop_guard = abandoned.clone().drop_guard();
        let runner = self.clone();
        // One copy of the call, shared by the task and the gate.
        let (task_call, gate, answerer) = (Arc::new(call.clone()), gate.clone(), answerer.clone());
        let task_options = CallOptions {
            cancel: Some(abandoned),
            ..options.clone()
        };
        // Boxed: the task's cell then holds a pointer, not the whole call's state to copy.
        let joined = tokio::spawn(Box::pin(async move {
            runner
                .run_to_end(&task_call, &gate, &answerer, &task_options)
                .await
        }))
        .await;
        drop_guard.disarm();
        // The task died before its end event (publishing it is its last step): the call still
        // ends once, with its event.
        joined.unwrap_or_else(|_| fallback_end(self.bus(), call, options.session_id.as_deref()))
    }

    async fn run_to_end(
        &self,
        call: &Arc<ToolCall>,
        gate: &Arc<dyn Gate>,
        answerer: &Arc<dyn Answerer>,
        options: &CallOptions,
    ) -> ToolResult {
        let started = Instant::now();
        let _in_flight = InFlight::new(&self.stop);
        let session = options.session_id.as_deref();
        self.bus()
            .emit_wanted(session, EventType::ToolExecutionStart, || {
                EventKind::ToolExecutionStart {
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    args: call.arguments.clone(),
                    traceparent: options
                        .traceparent
                        .as_deref()
                        .filter(|t| is_valid_traceparent(t))
                        .map(str::to_owned),
                    principal: call.principal.clone(),
                }
            })
            .await;
        let resolved = match self.registry.lookup(&call.name) {
            Some(tool) => Some(tool),
            // A plugin file may be about to serve it: wait for the files still loading, within
            // the bound (a name that is served already never waits).
            None => {
                self.registry
                    .wait_for(&call.name, self.config.load_wait)
                    .await
            }
        };
        let (mut result, charge, probe) = match &resolved {
            _ if self.stop.token.is_cancelled() => {
                let text = self.stop.text(&call.name);
                let stopped = ToolResult::failed(&call.id, &call.name, Outcome::Error, text);
                (stopped, Charge::Nobody, None)
            }
            None => {
                let text = self.unknown_text(&call.name, call.principal.as_deref(), options.via);
                let unknown = ToolResult::failed(&call.id, &call.name, Outcome::UnknownTool, text);
                (unknown, Charge::Nobody, None)
            }
            Some(tool) => self.execute(call, tool, gate, answerer, options).await,
        };
        result.duration = started.elapsed();
        if let Some(tool) = &resolved {
            self.registry.record(tool, &result, &charge, probe);
        }
        // The view (a copy of the text, a hash of each image) is built only for someone who reads
        // it: a subscriber or sink of end events, or the store of recent images.
        let bus = self.bus();
        let keep_images = bus.keeps_images_of(&result.output);
        let end_wanted = bus.wants(EventType::ToolExecutionEnd);
        if keep_images || end_wanted {
            let output = OutputView::from(&result.output);
            if keep_images {
                bus.keep_images(&output, &result.output);
            }
            if end_wanted {
                let served_by = resolved.as_ref().map(|tool| ServedBy {
                    origin: (*tool.origin).clone(),
                    runs: tool.invoke.runs(),
                });
                let principal = call.principal.clone();
                bus.publish(session, end_event(&result, output, served_by, principal));
            }
        }
        tokio::task::coop::consume_budget().await;
        result
    }

    /// An unknown tool's text, naming the tools there are: those the policy in force lets
    /// `principal` list (a name it may not see is never told).
    fn unknown_text(
        &self,
        name: &str,
        principal: Option<&crate::Principal>,
        via: crate::Via,
    ) -> String {
        let mut names = self.registry.names();
        if let Some(policy) = self.policy() {
            names.retain(|name| {
                (self.registry.lookup(name))
                    .is_some_and(|t| may_list(&*policy, &t.spec, &t.origin, principal, via))
            });
        }
        let mut text = if names.is_empty() {
            format!("unknown tool `{name}`: no tools are available")
        } else {
            format!("unknown tool `{name}`; the tools are: {}", names.join(", "))
        };
        let loading = self.registry.loading();
        if !loading.is_empty() {
            let files: Vec<String> = loading.iter().map(|p| p.display().to_string()).collect();
            text.push_str(&format!(
                " (still loading after {} ms: {})",
                self.config.load_wait.as_millis(),
                files.join(", ")
            ));
        }
        text
    }

    async fn execute(
        &self,
        call: &Arc<ToolCall>,
        tool: &ResolvedTool,
        gate: &Arc<dyn Gate>,
        answerer: &Arc<dyn Answerer>,
        options: &CallOptions,
    ) -> (ToolResult, Charge, Option<Probe>) {
        // A probe that ends here never reached the tool: its guard gives it back.
        let fail = |outcome, text: String| {
            let failed = ToolResult::failed(&call.id, &call.name, outcome, text);
            (failed, Charge::Tool, None)
        };
        let probe = match self.registry.admit(tool, &call.id) {
            Ok(probe) => probe,
            Err(reason) => return fail(Outcome::Quarantined, reason),
        };
        // Shared, not copied: the gate, the tool and the start event read the call's own.
        let args = match &*call.arguments {
            Value::Null => Arc::new(Value::Object(Default::default())),
            _ => call.arguments.clone(),
        };
        if let Err(text) = tool.check_args(&args) {
            return fail(Outcome::InvalidArguments, text);
        }
        // The policy, then the rates: a call forbidden or over a limit reaches neither the gate
        // nor the tool.
        let decision = match self.decide(call, tool, &args, options).await {
            Ok(decision) => decision,
            Err((outcome, text, decision)) => {
                let (mut refused, charge, probe) = fail(outcome, text);
                refused.decision = decision;
                return (refused, charge, probe);
            }
        };
        let traceparent = match options.traceparent.as_deref() {
            Some(t) if is_valid_traceparent(t) => Some(Arc::from(t)),
            Some(t) => {
                tracing::debug!(call = %call.id, traceparent = %t, "invalid traceparent dropped");
                None
            }
            None => None,
        };
        // The idle limit, and when the call last showed it is alive: each update moves it.
        let idle = self
            .config
            .idle_timeout_for(&tool.spec, options)
            .map(|limit| (limit, Arc::new(Activity::new())));
        let sink = CallSink {
            ended: std::sync::Mutex::new(false),
            bus: self.bus().clone(),
            session: options.session_id.clone(),
            call: call.clone(),
            on_update: options.on_update.clone(),
            on_log: options.on_log.clone(),
            activity: idle.as_ref().map(|(_, activity)| activity.clone()),
        };
        let ctx = ToolCtx::for_call(sink, traceparent);
        // The call's sends end with it, also when this future dies before the end.
        let _ends = EndsOnDrop(ctx.clone());
        let (running_tx, running_rx) = oneshot::channel::<Instant>();
        let task = self.call_task(call, tool, gate, options, args, ctx.clone(), running_tx);
        let answerer = options.answerer.as_ref().unwrap_or(answerer);
        let (mut result, charge) = self
            .supervise(call, tool, options, task, running_rx, answerer, &ctx, idle)
            .await;
        ctx.end_sends();
        result.decision = decision;
        (result, charge, probe)
    }

    /// What the policy and the rate limits say of `call`: `Ok(None)` when neither is in force,
    /// `Ok(Some(allowed))` when they let it through, else the outcome, text and decision it
    /// ends with. A policy that may take long is asked on the blocking pool, the call still
    /// cancellable meanwhile.
    async fn decide(
        &self,
        call: &Arc<ToolCall>,
        tool: &ResolvedTool,
        args: &Arc<Value>,
        options: &CallOptions,
    ) -> Result<Option<Decision>, (Outcome, String, Option<Decision>)> {
        let principal = call.principal.as_deref();
        let mut allowed = None;
        if let Some(policy) = self.policy() {
            let abandoned = async {
                let cancelled = async {
                    match &options.cancel {
                        Some(cancel) => cancel.cancelled().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = self.stop.token.cancelled() => (Outcome::Error, self.stop.text(&call.name)),
                    () = cancelled => {
                        let text = format!("call of tool `{}` cancelled by the client", call.name);
                        (Outcome::Error, text)
                    }
                }
            };
            let called = (&tool.spec, &tool.origin);
            let decision = decide_call(policy, call, called, args, options.via, abandoned)
                .await
                .map_err(|(outcome, text)| (outcome, text, None))?;
            if !decision.allows() {
                return Err(refused(&call.name, principal, decision));
            }
            allowed = Some(decision);
        }
        if !self.limits.is_empty() {
            if let Err(limited) = self.limits.admit(&call.name, &tool.origin, principal) {
                return Err(refused(&call.name, principal, limited));
            }
            allowed.get_or_insert(Decision::Allowed {
                policies: Vec::new(),
            });
        }
        Ok(allowed)
    }

    /// The call's own work: the gate, then the tool, then the check of its answer. Driven inside
    /// the call's task when neither the gate nor the tool can block the polling thread, in a task
    /// of its own otherwise (so that a gate or a native tool that blocks its thread cannot hold
    /// back the call's timeout or cancellation, which the supervising loop fires).
    #[allow(clippy::too_many_arguments)]
    fn call_task(
        &self,
        call: &Arc<ToolCall>,
        tool: &ResolvedTool,
        gate: &Arc<dyn Gate>,
        options: &CallOptions,
        args: Arc<Value>,
        ctx: ToolCtx,
        running_tx: oneshot::Sender<Instant>,
    ) -> CallTask<impl Future<Output = Result<TaskEnd, Caught>> + Send + Unpin + 'static> {
        let inline = gate.never_blocks() && tool.invoke.never_blocks();
        let gate = gate.clone();
        let task_call = call.clone();
        let gate_ctx = GateCtx {
            session_id: options.session_id.clone(),
            tool: tool.spec.clone(),
        };
        let invoke = tool.invoke.clone();
        let answer_check = tool.answer_check();
        let bus = self.bus().clone();
        let session = options.session_id.clone();
        let timeout = self.timeout_for(tool);
        // Under a concurrency limit, the call waits for its turn before the gate.
        let queue = (self
            .limits
            .queues(&call.name, &tool.origin, call.principal.as_deref()))
        .then(|| (self.limits.clone(), tool.origin.clone()));
        let work = async move {
            let _turns = match queue {
                Some((limits, origin)) => {
                    let principal = task_call.principal.as_deref();
                    Some(limits.turns(&task_call.name, &origin, principal).await)
                }
                None => None,
            };
            match catch(|| gate.check(&task_call, &gate_ctx)).await {
                Err(caught) => return TaskEnd::GateCrashed(caught.describe("the gate")),
                Ok(Verdict::Block(reason)) => return TaskEnd::Blocked(reason),
                Ok(Verdict::Allow) => {}
            }
            // Published here, before the tool can send its first update; the loop starts the
            // timeout clock from the instant sent.
            if bus.wants(EventType::ToolRunning) {
                bus.publish(
                    session.as_deref(),
                    EventKind::ToolRunning {
                        call_id: task_call.id.clone(),
                        tool: task_call.name.clone(),
                        timeout_ms: timeout.as_millis() as u64,
                    },
                );
            }
            let allowed_at = Instant::now();
            if let Some(deadline) = allowed_at.checked_add(timeout) {
                ctx.start_clock(deadline);
            }
            let _ = running_tx.send(allowed_at);
            let task_ctx = ctx.clone();
            match catch(|| invoke.invoke(args, ctx)).await {
                Ok(Ok(answer)) if answer_check.needed() => {
                    // Schema checks cost what the plugin's schema and answer make them: off the
                    // runtime threads, and inside the call, so its deadline still holds.
                    let checked = tokio::task::spawn_blocking(move || {
                        let verdict = answer_check.check(answer.structured.as_ref());
                        (answer, verdict)
                    })
                    .await;
                    match checked {
                        Ok((answer, Ok(()))) => TaskEnd::Answered(Ok(answer)),
                        Ok((_, Err(text))) => TaskEnd::BrokeSchema(text),
                        Err(_) => TaskEnd::Answered(Err(Failure::Crash(CrashReason::Formatted(
                            format!("checking the answer of tool `{}` failed", task_call.name),
                        )))),
                    }
                }
                Ok(Err(_)) if task_ctx.past_deadline() => TaskEnd::FailedPastDeadline,
                Ok(answer) => TaskEnd::Answered(answer),
                Err(caught) => TaskEnd::Answered(Err(Failure::Crash(CrashReason::Formatted(
                    caught.describe(&format!("tool `{}`", task_call.name)),
                )))),
            }
        };
        if inline {
            let work = Box::pin(work);
            CallTask::Inline(Some(catch(move || work)))
        } else {
            CallTask::Spawned(self.tracker.spawn(work))
        }
    }

    /// The loop's side of a call: arms the timeout (and the idle limit, if any) when the task
    /// says the gate allowed, publishes `tool_gate_waiting` and `tool_running`, asks the tool's
    /// questions (both paused while one is open, the deadline moved by its wait, the idle wait
    /// started again by its answer), and turns however the task ends into a result.
    #[allow(clippy::too_many_arguments)]
    async fn supervise(
        &self,
        call: &ToolCall,
        tool: &ResolvedTool,
        options: &CallOptions,
        mut task: CallTask<impl Future<Output = Result<TaskEnd, Caught>> + Send + Unpin>,
        mut running_rx: oneshot::Receiver<Instant>,
        answerer: &Arc<dyn Answerer>,
        ctx: &ToolCtx,
        idle: Option<(Duration, Arc<Activity>)>,
    ) -> (ToolResult, Charge) {
        // However the loop ends (or is dropped), the tool's questions from then on are
        // answered at once.
        struct ClosesInbox<'a>(&'a ToolCtx);
        impl Drop for ClosesInbox<'_> {
            fn drop(&mut self) {
                self.0.close_inbox();
            }
        }
        let _closes_inbox = ClosesInbox(ctx);
        // Whom its end is charged to: the tool, unless the client or the host ended it.
        let mut charge = Charge::Tool;
        let session = options.session_id.as_deref();
        let timeout = self.timeout_for(tool);
        let cancelled = async {
            match &options.cancel {
                Some(cancel) => cancel.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(cancelled);
        let stopped = self.stop.token.cancelled();
        tokio::pin!(stopped);
        // One timer: first the gate's `tool_gate_waiting` notice, then, once the gate allowed,
        // the call's deadline.
        // One reading of the clock for the timers' starts.
        let now = tokio::time::Instant::now();
        let timer = match now.checked_add(self.config.gate_waiting_after) {
            Some(at) => tokio::time::sleep_until(at),
            None => tokio::time::sleep(self.config.gate_waiting_after),
        };
        tokio::pin!(timer);
        let mut timer_armed = true;
        let mut gate_answered = false;
        // The call's deadline once the gate allowed (`None`: none), moved by each question.
        let mut deadline: Option<tokio::time::Instant> = None;
        // The question open now: its reply, where the reply goes, when it was asked.
        let mut asking: Option<Asking> = None;
        let ask_bound = tokio::time::sleep_until(now);
        tokio::pin!(ask_bound);
        // The idle limit's timer, armed while the tool runs and no question is open; when it
        // fires, it waits on from the tool's last update, if there was one since.
        let idle_timer = tokio::time::sleep_until(now);
        tokio::pin!(idle_timer);
        let mut idle_armed = false;
        let mut running_since = now.into_std();
        // Arms `timer` for `deadline`, if there is one; returns whether it did.
        let arm = |timer: std::pin::Pin<&mut tokio::time::Sleep>, deadline: Option<_>| {
            deadline.map(|deadline| timer.reset(deadline)).is_some()
        };
        // A limit too long to add to now (`Duration::MAX`) is none.
        let rearm_idle = |timer: std::pin::Pin<&mut tokio::time::Sleep>| match &idle {
            Some((limit, activity)) => {
                activity.touch();
                arm(timer, tokio::time::Instant::now().checked_add(*limit))
            }
            None => false,
        };
        let end = loop {
            tokio::select! {
                biased;
                // The work first: in place, it allows and starts the tool in this poll, and
                // the allowance below is then read at once (one arming of the timer, no wake).
                // Work in place may spend the task's whole cooperative budget (a worker that
                // floods the channel): the branches below are polled outside the budget, so
                // the allowance, a reply and the timers are never held back by it.
                ended = &mut task => break ended,
                allowed = tokio::task::unconstrained(&mut running_rx), if !gate_answered => {
                    gate_answered = true;
                    // An error means the task ended without allowing: its end comes next.
                    // A timeout too long to add (`Duration::MAX`: "never") is no deadline.
                    deadline = allowed
                        .as_ref()
                        .ok()
                        .and_then(|at| tokio::time::Instant::from_std(*at).checked_add(timeout));
                    timer_armed = arm(timer.as_mut(), deadline);
                    if let Ok(at) = allowed {
                        running_since = at;
                        idle_armed = rearm_idle(idle_timer.as_mut());
                    }
                }
                asked = ctx.asked(), if asking.is_none() => {
                    // The timeout and the idle limit pause while the user is asked.
                    timer_armed = false;
                    idle_armed = false;
                    let now = tokio::time::Instant::now();
                    ask_bound.as_mut().reset(now + self.config.ask_timeout);
                    asking = Some(Asking::start(asked, answerer.clone(), call));
                }
                reply = tokio::task::unconstrained(Asking::reply(&mut asking)), if asking.is_some() => {
                    if let Some(open) = asking.take() {
                        deadline = open.finish(reply, deadline, |at| ctx.move_deadline(at));
                    }
                    timer_armed = arm(timer.as_mut(), deadline);
                    idle_armed = rearm_idle(idle_timer.as_mut());
                }
                () = tokio::task::unconstrained(&mut ask_bound), if asking.is_some() => {
                    let text = format!(
                        "no answer within {} s (the host's bound on a question)",
                        self.config.ask_timeout.as_secs()
                    );
                    if let Some(open) = asking.take() {
                        let replies = open.all(Reply::Cancelled(text));
                        deadline = open.finish(replies, deadline, |at| ctx.move_deadline(at));
                    }
                    timer_armed = arm(timer.as_mut(), deadline);
                    idle_armed = rearm_idle(idle_timer.as_mut());
                }
                () = tokio::task::unconstrained(&mut timer), if timer_armed => {
                    if gate_answered {
                        ctx.cancel();
                        task.abort();
                        break Err((Outcome::TimedOut, timeout_text(&call.name, timeout)));
                    }
                    timer_armed = false;
                    self.bus().emit_wanted(session, EventType::ToolGateWaiting, || EventKind::ToolGateWaiting {
                        call_id: call.id.clone(),
                        tool: call.name.clone(),
                    }).await;
                }
                () = tokio::task::unconstrained(&mut idle_timer), if idle_armed => {
                    if let Some((limit, activity)) = &idle {
                        let due = tokio::time::Instant::from_std(activity.last()).checked_add(*limit);
                        if let Some(due) = due.filter(|due| *due > tokio::time::Instant::now()) {
                            idle_timer.as_mut().reset(due);
                        } else {
                            ctx.cancel();
                            task.abort();
                            let text = idle_timeout_text(&call.name, *limit, running_since.elapsed());
                            break Err((Outcome::TimedOut, text));
                        }
                    }
                }
                () = &mut stopped => {
                    ctx.cancel();
                    task.abort();
                    charge = Charge::Nobody;
                    break Err((Outcome::Error, self.stop.text(&call.name)));
                }
                () = &mut cancelled => {
                    ctx.cancel();
                    task.abort();
                    charge = Charge::Nobody;
                    break Err((Outcome::Error, format!("call of tool `{}` cancelled by the client", call.name)));
                }
            }
        };
        let mut structured = None;
        let (outcome, output, details) = match end {
            Ok(TaskEnd::Blocked(reason)) => (Outcome::Blocked, Output::Text(reason), None),
            Ok(TaskEnd::GateCrashed(text)) => {
                // The gate's crash, not the tool's.
                charge = Charge::Nobody;
                (Outcome::Crashed, Output::Text(text), None)
            }
            Ok(TaskEnd::BrokeSchema(text)) => (Outcome::Error, Output::Text(text), None),
            Ok(TaskEnd::FailedPastDeadline) => (
                Outcome::TimedOut,
                Output::Text(timeout_text(&call.name, self.timeout_for(tool))),
                None,
            ),
            Ok(TaskEnd::Answered(Ok(answer))) => {
                let reply = normalize(Ok(answer));
                match reply.result {
                    Ok(output) => {
                        // Structured content only from a tool that declares (and so had checked)
                        // its schema. The text is the tool's own (an MCP server's text content
                        // as it sent it); a tool that wrote none reads as the content's JSON, so
                        // the model never reads an empty answer.
                        let output = match (&tool.spec.output_schema, reply.structured) {
                            (Some(_), Some(data)) => {
                                let output = if output.text().is_empty() {
                                    with_text(output, data.to_string())
                                } else {
                                    output
                                };
                                structured = Some(data);
                                output
                            }
                            _ => output,
                        };
                        (Outcome::Ok, output, reply.details)
                    }
                    Err(text) => (Outcome::Error, Output::Text(text), reply.details),
                }
            }
            Ok(TaskEnd::Answered(Err(failure))) => match failure {
                Failure::Tool(error) => {
                    let reply = normalize(Err(error));
                    let text = reply.result.err().unwrap_or_default();
                    (Outcome::Error, Output::Text(text), reply.details)
                }
                Failure::Crash(reason) => {
                    if let CrashReason::CausedBy { by, .. } = &reason {
                        charge = Charge::Culprit(by.clone());
                    }
                    (Outcome::Crashed, Output::Text(crash_text(&reason)), None)
                }
                Failure::InvalidArguments(text) => (
                    Outcome::InvalidArguments,
                    Output::Text(format!(
                        "invalid arguments for tool `{}`: {text}",
                        call.name
                    )),
                    None,
                ),
                Failure::UnknownTool(text) => (Outcome::UnknownTool, Output::Text(text), None),
                Failure::Unavailable(text) => (Outcome::Unavailable, Output::Text(text), None),
            },
            Err((outcome, text)) => (outcome, Output::Text(text), None),
        };
        // The tool's own limit and the host's: the smaller wins (a tool cannot declare itself
        // out of the host's limit).
        let own = tool
            .spec
            .max_result_bytes
            .map(|bytes| usize::try_from(bytes).unwrap_or(usize::MAX));
        let limit = match (own, self.config.max_result_bytes) {
            (Some(own), Some(host)) => Some(own.min(host)),
            (own, host) => own.or(host),
        };
        let (output, full_text) = match limit {
            Some(limit) => cut_output(&call.name, output, limit),
            None => (output, None),
        };
        let result = ToolResult {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            outcome,
            output,
            structured,
            details,
            full_text,
            duration: Duration::ZERO,
            decision: None,
        };
        (result, charge)
    }
}
