//! [2/8]: the runner and the loop: gate, timeout clock, crash texts, details, typed outcomes,
//! ordering, and exactly one end per call.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::sync::Arc;
use std::time::{Duration, Instant};

use rho_runtime::{
    Answer, CallOptions, DirOptions, EventKind, Gate, GateCtx, Host, HostBuilder, KeepDetails,
    KeptDetails, LogLevel, Loop, LoopConfig, Message, Outcome, Tool, ToolCall, ToolCtx, ToolError,
    ToolSpec, Verdict, allow_all,
};
use rho_tests::{call, gated, host_with, plugin_dir, timeout};
use serde_json::{Value, json};
use tokio_stream::StreamExt;

/// Waits `delay` before answering; blocks tools named in `block`.
struct SlowGate {
    delay: Duration,
    only: Option<&'static str>,
}

#[async_trait::async_trait]
impl Gate for SlowGate {
    async fn check(&self, call: &ToolCall, _ctx: &GateCtx) -> Verdict {
        if self.only.is_none_or(|t| t == call.name) {
            tokio::time::sleep(self.delay).await;
        }
        Verdict::Allow
    }
}

struct PanicGate;

#[async_trait::async_trait]
impl Gate for PanicGate {
    async fn check(&self, _call: &ToolCall, _ctx: &GateCtx) -> Verdict {
        panic!("gate exploded")
    }
}

/// A gate written without `async_trait` that panics before it returns its future.
struct EagerPanicGate;

impl Gate for EagerPanicGate {
    fn check<'a, 'b, 'c, 'd>(
        &'a self,
        _call: &'b ToolCall,
        _ctx: &'c GateCtx,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Verdict> + Send + 'd>>
    where
        'a: 'd,
        'b: 'd,
        'c: 'd,
        Self: 'd,
    {
        panic!("gate exploded early")
    }
}

/// A host-native tool that panics with a non-string payload, or answers details of a given size.
struct Native;

#[async_trait::async_trait]
impl Tool for Native {
    fn spec(&self) -> ToolSpec {
        ToolSpec::native(
            "native",
            "host tool",
            json!({"type": "object", "properties": {"mode": {"type": "string"}, "n": {"type": "integer"}}, "required": ["mode"]}),
        )
    }
    async fn call(&self, args: Value, ctx: ToolCtx) -> Result<Answer, ToolError> {
        match args["mode"].as_str() {
            Some("big_update") => {
                ctx.update(&"u".repeat(args["n"].as_u64().unwrap_or(0) as usize));
                Ok(Answer::text("updated"))
            }
            Some("log") => {
                ctx.log(LogLevel::Debug, "starting");
                ctx.update("half way");
                ctx.log(LogLevel::Warning, "disk almost full");
                ctx.log(
                    LogLevel::Error,
                    &"e".repeat(args["n"].as_u64().unwrap_or(0) as usize),
                );
                // Kept: a line after the answer, when the call has ended, goes nowhere.
                let late = ctx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    late.log(LogLevel::Emergency, "after the end");
                });
                Ok(Answer::text("logged"))
            }
            Some("fail_late") => {
                // Holds its thread past its deadline, then fails: on a runtime of one thread the
                // runner sees the failure and the deadline at once.
                let past = ctx.deadline().unwrap() + Duration::from_millis(50);
                std::thread::sleep(past.saturating_duration_since(std::time::Instant::now()));
                Err(ToolError::new("stopped at the deadline"))
            }
            Some("panic_any") => std::panic::panic_any(42_i64),
            Some("panic") => panic!("native boom"),
            Some("details") => {
                let n = args["n"].as_u64().unwrap_or(0) as usize;
                Ok(Answer::text("with details").with_details(json!({"blob": "x".repeat(n)})))
            }
            _ => Ok(Answer::text("native ok")),
        }
    }
}

/// A host serving `echo`, `faults` and `files` in process and the [`Native`] tool.
struct FaultsHost {
    host: Host,
    /// The plugin directory, kept as long as the host.
    _dir: tempfile::TempDir,
}

/// A [`FaultsHost`] with `timeout_ms` as the default timeout and the builder's other defaults
/// changed by `configure` (a gate, quarantine...).
async fn faults_host(
    timeout_ms: u64,
    configure: impl FnOnce(HostBuilder) -> HostBuilder,
) -> FaultsHost {
    let dir = plugin_dir(&["echo", "faults", "files"]);
    let (host, report) = host_with(dir.path(), DirOptions::in_process(), |b| {
        configure(b.runner(timeout(timeout_ms)).tool(Arc::new(Native)))
    })
    .await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    FaultsHost { host, _dir: dir }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_outcome_through_the_public_api() {
    let FaultsHost { host, _dir } = faults_host(400, |b| {
        b.quarantine(rho_runtime::QuarantinePolicy {
            max_failures: 2,
            window: Duration::from_secs(60),
            ..Default::default()
        })
    })
    .await;
    let opts = CallOptions::default();
    let deny: Arc<dyn Gate> = Arc::new(rho_runtime::DenyList::new(["echo"]));
    let all = allow_all();
    let cases: Vec<(ToolCall, &Arc<dyn Gate>, Outcome, &str)> = vec![
        (
            call("ok", "echo", json!({"text": "x"})),
            &all,
            Outcome::Ok,
            "x",
        ),
        (
            call("err", "fail", json!({"message": "nope"})),
            &all,
            Outcome::Error,
            "nope",
        ),
        (
            call("blk", "echo", json!({"text": "x"})),
            &deny,
            Outcome::Blocked,
            "tool `echo` is denied by the host's gate",
        ),
        (
            call("to", "spin_cancellable", json!({})),
            &all,
            Outcome::TimedOut,
            "tool `spin_cancellable` timed out after 400 ms",
        ),
        (
            call("unk", "nope", json!({})),
            &all,
            Outcome::UnknownTool,
            "",
        ),
        (
            call("inv", "echo", json!({"text": 5})),
            &all,
            Outcome::InvalidArguments,
            "invalid arguments for tool `echo`: argument `text`: 5 is not of type \"string\"",
        ),
        (
            call("cr1", "panic", json!({"message": "a"})),
            &all,
            Outcome::Crashed,
            "",
        ),
        (
            call("cr2", "panic", json!({"message": "b"})),
            &all,
            Outcome::Crashed,
            "",
        ),
        (
            call("q", "panic", json!({"message": "c"})),
            &all,
            Outcome::Quarantined,
            "",
        ),
    ];
    for (c, gate, outcome, text) in cases {
        let r = host.call_with(&c, &gated(gate.clone())).await;
        assert_eq!(r.outcome, outcome, "{}: {}", c.id, &*r.text());
        assert_eq!(r.is_error(), outcome != Outcome::Ok);
        if !text.is_empty() {
            assert_eq!(&*r.text(), text, "{}", c.id);
        }
        if outcome == Outcome::UnknownTool {
            assert!(
                r.text().starts_with("unknown tool `nope`; the tools are: "),
                "{}",
                &*r.text()
            );
            assert!(r.text().contains("echo, exit_process"), "{}", &*r.text());
        }
        if outcome == Outcome::Quarantined {
            assert!(
                r.text()
                    .contains("quarantined after 2 crash(es) and 0 timeout(s)"),
                "{}",
                &*r.text()
            );
            assert!(
                r.text()
                    .contains("last failure: crashed: tool `panic` panicked at"),
                "{}",
                &*r.text()
            );
        }
    }
    let err = host
        .call_with(&call("e2", "fail", json!({"message": "m"})), &opts)
        .await;
    assert_eq!(err.details, Some(json!({"reason": "asked to fail"})));
    assert!(host.lift_quarantine("panic"));
    let r = host
        .call_with(&call("again", "panic", json!({"message": "d"})), &opts)
        .await;
    assert_eq!(r.outcome, Outcome::Crashed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_gate_delays_neither_a_sibling_nor_the_loop() {
    let gate: Arc<dyn Gate> = Arc::new(SlowGate {
        delay: Duration::from_secs(2),
        only: Some("slow"),
    });
    let FaultsHost { host, _dir } = faults_host(10_000, |b| b.gate(gate)).await;
    let mut events = host.subscribe();
    let mut session = Loop::new("s", host.clone(), LoopConfig::default());
    let started = Instant::now();
    let batch = tokio::spawn(async move {
        let calls = [
            call("gated", "slow", json!({"ms": 1})),
            call("free", "echo", json!({"text": "fast"})),
        ];
        let results = session.run_batch(&calls).await;
        (results, session)
    });
    // The sibling's end arrives long before the gate answers.
    let mut sibling_done = None;
    let mut gate_waiting = None;
    while let Some(rho_runtime::BusItem::Event(e)) = events.next().await {
        match &e.kind {
            EventKind::ToolGateWaiting { call_id, .. } if call_id == "gated" => {
                gate_waiting = Some(started.elapsed())
            }
            EventKind::ToolExecutionEnd { call_id, .. } if call_id == "free" => {
                sibling_done = Some(started.elapsed())
            }
            EventKind::ToolExecutionEnd { call_id, .. } if call_id == "gated" => break,
            _ => {}
        }
    }
    let (results, session) = batch.await.unwrap();
    let sibling_done = sibling_done.expect("sibling ended");
    assert!(
        sibling_done < Duration::from_millis(1000),
        "sibling took {sibling_done:?}"
    );
    assert!(gate_waiting.expect("gate waiting event") < Duration::from_millis(1000));
    assert!(started.elapsed() >= Duration::from_secs(2));
    // Results in the model's order; the session recorded them in completion order.
    assert_eq!(
        results
            .iter()
            .map(|r| r.call_id.as_str())
            .collect::<Vec<_>>(),
        ["gated", "free"]
    );
    let recorded: Vec<&str> = session
        .messages()
        .iter()
        .filter_map(|m| match m {
            Message::Tool { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(recorded, ["free", "gated"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_time_never_counts_against_the_timeout() {
    let FaultsHost { host, _dir } = faults_host(250, |b| b).await;
    let gate: Arc<dyn Gate> = Arc::new(SlowGate {
        delay: Duration::from_millis(300),
        only: None,
    });
    let r = host
        .call_with(&call("1", "sleep", json!({"ms": 200})), &gated(gate))
        .await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
    assert!(r.duration >= Duration::from_millis(500), "{:?}", r.duration);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_tool_and_gate_panics_are_crashes_with_texts() {
    let FaultsHost { host, _dir } = faults_host(5_000, |b| b).await;
    let opts = CallOptions::default();
    let r = host
        .call_with(&call("1", "native", json!({"mode": "panic_any"})), &opts)
        .await;
    assert_eq!(r.outcome, Outcome::Crashed);
    assert!(
        r.text()
            .starts_with("tool `native` panicked at tests/tests/runner.rs:"),
        "{}",
        &*r.text()
    );
    assert!(
        r.text().ends_with(" with a non-string payload"),
        "{}",
        &*r.text()
    );
    let r = host
        .call_with(&call("2", "native", json!({"mode": "panic"})), &opts)
        .await;
    assert!(r.text().ends_with(": native boom"), "{}", &*r.text());
    let gate: Arc<dyn Gate> = Arc::new(PanicGate);
    let r = host
        .call_with(&call("3", "echo", json!({"text": "x"})), &gated(gate))
        .await;
    assert_eq!(r.outcome, Outcome::Crashed);
    assert!(
        r.text()
            .starts_with("the gate panicked at tests/tests/runner.rs:"),
        "{}",
        &*r.text()
    );
    assert!(r.text().ends_with(": gate exploded"), "{}", &*r.text());
    let gate: Arc<dyn Gate> = Arc::new(EagerPanicGate);
    let r = host
        .call_with(&call("3b", "echo", json!({"text": "x"})), &gated(gate))
        .await;
    assert_eq!(r.outcome, Outcome::Crashed, "{}", &*r.text());
    assert!(
        r.text()
            .starts_with("the gate panicked at tests/tests/runner.rs:")
            && r.text().ends_with(": gate exploded early"),
        "{}",
        &*r.text()
    );
    let r = host
        .call_with(&call("4", "native", json!({"mode": "fine"})), &opts)
        .await;
    assert_eq!((r.outcome, &*r.text()), (Outcome::Ok, "native ok"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_details_modes() {
    let FaultsHost { host, _dir } = faults_host(5_000, |b| b).await;
    for (mode, n, expected) in [
        (KeepDetails::None, 10, "none"),
        (KeepDetails::All, 10_000, "kept"),
        (KeepDetails::UpTo(100), 10, "kept"),
        (KeepDetails::UpTo(100), 1000, "dropped"),
    ] {
        let config = LoopConfig {
            keep_details: mode,
            ..LoopConfig::default()
        };
        let mut session = Loop::new("s", host.clone(), config);
        let results = session
            .run_batch(&[call("1", "native", json!({"mode": "details", "n": n}))])
            .await;
        assert_eq!(
            results[0].details.as_ref().unwrap()["blob"]
                .as_str()
                .unwrap()
                .len(),
            n,
            "the result always has them"
        );
        let Some(Message::Tool { details, .. }) = session.messages().last() else {
            panic!("no tool message")
        };
        match (expected, details) {
            ("none", KeptDetails::None) => {}
            ("kept", KeptDetails::Kept(v)) => assert_eq!(v["blob"].as_str().unwrap().len(), n),
            ("dropped", KeptDetails::Dropped { bytes }) => assert_eq!(*bytes, n + 11),
            other => panic!("{mode:?} with {n}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_ends_exactly_once() {
    let gate: Arc<dyn Gate> = Arc::new(rho_runtime::DenyList::new(["echo"]));
    let FaultsHost { host, _dir } = faults_host(300, |b| b.gate(gate)).await;
    let mut events = host.subscribe();
    let mut session = Loop::new(
        "s",
        host.clone(),
        LoopConfig {
            max_parallel: 3,
            ..Default::default()
        },
    );
    let calls = vec![
        call("a", "echo", json!({"text": "blocked"})),
        call("b", "nope", json!({})),
        call("c", "panic", json!({"message": "x"})),
        call("d", "spin_cancellable", json!({})),
        call("e", "sleep", json!({"ms": 20})),
        call("f", "sleep", json!({"ms": "bad"})),
        call("g", "native", json!({"mode": "panic"})),
    ];
    let results = session.run_batch(&calls).await;
    assert_eq!(results.len(), calls.len());
    let outcomes: Vec<Outcome> = results.iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        [
            Outcome::Blocked,
            Outcome::UnknownTool,
            Outcome::Crashed,
            Outcome::TimedOut,
            Outcome::Ok,
            Outcome::InvalidArguments,
            Outcome::Crashed,
        ]
    );
    let mut ends = std::collections::HashMap::new();
    let mut starts = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while let Ok(Some(rho_runtime::BusItem::Event(e))) =
        tokio::time::timeout_at(deadline, events.next()).await
    {
        match &e.kind {
            EventKind::ToolExecutionEnd { call_id, .. } => {
                *ends.entry(call_id.clone()).or_insert(0) += 1
            }
            EventKind::ToolExecutionStart { .. } => starts += 1,
            _ => {}
        }
    }
    assert_eq!(starts, calls.len());
    assert_eq!(ends.len(), calls.len());
    assert!(ends.values().all(|&n| n == 1), "{ends:?}");
    // The gate panicking: one end too.
    let mut events = host.subscribe();
    let gate: Arc<dyn Gate> = Arc::new(PanicGate);
    let r = host
        .call_with(&call("z", "echo", json!({"text": "x"})), &gated(gate))
        .await;
    assert_eq!(r.outcome, Outcome::Crashed);
    let mut n = 0;
    while let Ok(Some(rho_runtime::BusItem::Event(e))) =
        tokio::time::timeout(Duration::from_millis(100), events.next()).await
    {
        if matches!(e.kind, EventKind::ToolExecutionEnd { .. }) {
            n += 1;
        }
    }
    assert_eq!(n, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_ends_at_once() {
    let FaultsHost { host, _dir } = faults_host(10_000, |b| b).await;
    let token = tokio_util_cancel();
    let opts = CallOptions {
        session_id: None,
        cancel: Some(token.clone()),
        ..Default::default()
    };
    let started = Instant::now();
    let cancel_later = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        token.cancel();
    });
    let r = host
        .call_with(&call("1", "spin_cancellable", json!({})), &opts)
        .await;
    cancel_later.await.unwrap();
    assert_eq!(r.outcome, Outcome::Error);
    assert_eq!(
        &*r.text(),
        "call of tool `spin_cancellable` cancelled by the client"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

fn tokio_util_cancel() -> rho_runtime::CancellationToken {
    rho_runtime::CancellationToken::new()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_session_runs_turns_until_no_calls() {
    let FaultsHost { host, _dir } = faults_host(5_000, |b| b).await;
    let script = json!([
        {"text": "first", "tool_calls": [{"id": "1", "name": "echo", "arguments": {"text": "one"}}]},
        {"text": "second", "tool_calls": [{"id": "2", "name": "echo", "arguments": {"text": "two"}}]},
        {"text": "done"},
        {"text": "never reached", "tool_calls": [{"id": "3", "name": "echo", "arguments": {"text": "x"}}]}
    ]);
    let model = rho_runtime::ScriptedModel::from_json(&script.to_string()).unwrap();
    let mut events = host.subscribe();
    let mut session = Loop::new("s1", host.clone(), LoopConfig::default());
    let summary = session.run(&model).await.unwrap();
    assert_eq!(summary.turns, 3);
    assert_eq!(summary.reason, rho_runtime::StopReason::Done);
    let mut types = Vec::new();
    while let Ok(Some(rho_runtime::BusItem::Event(e))) =
        tokio::time::timeout(Duration::from_millis(100), events.next()).await
    {
        assert_eq!(e.session_id.as_deref(), Some("s1"));
        types.push(e.kind.type_name());
    }
    assert_eq!(types.first(), Some(&"agent_start"));
    assert_eq!(types.last(), Some(&"agent_end"));
    assert_eq!(types.iter().filter(|t| **t == "turn_start").count(), 3);
    assert_eq!(
        types.iter().filter(|t| **t == "tool_execution_end").count(),
        2
    );
    let max = LoopConfig {
        max_turns: 1,
        ..Default::default()
    };
    let model = rho_runtime::ScriptedModel::from_json(&script.to_string()).unwrap();
    let summary = Loop::new("s2", host.clone(), max)
        .run(&model)
        .await
        .unwrap();
    assert_eq!(
        (summary.turns, summary.reason),
        (1, rho_runtime::StopReason::MaxTurns)
    );
}

/// A tool that fails after its deadline has passed (a component stopped at it, a tool that gave
/// up) ends `timed_out`, even when the runner sees its end before its timer (a runtime of one
/// busy thread): which comes first in time decides, not which the runner polls first.
#[tokio::test]
async fn a_failure_past_the_deadline_is_a_timeout() {
    let h = faults_host(100, |b| b).await;
    let r = h.host.call("native", json!({"mode": "fail_late"})).await;
    assert_eq!(r.outcome, Outcome::TimedOut, "{}", &*r.text());
    assert!(r.text().contains("100 ms"), "{}", &*r.text());
    // A failure in time stays what it is.
    let r = h.host.call("fail", json!({"message": "no"})).await;
    assert_eq!(r.outcome, Outcome::Error, "{}", &*r.text());
    h.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_cannot_declare_itself_out_of_the_hosts_timeout() {
    let dir = plugin_dir(&["faults"]);
    // `slow` declares 1000 ms for itself; the host caps what tools declare at 200 ms.
    let config = rho_runtime::RunnerConfig {
        default_timeout: Duration::from_secs(30),
        max_tool_timeout: Duration::from_millis(200),
        ..Default::default()
    };
    let (host, _report) =
        host_with(dir.path(), DirOptions::in_process(), |b| b.runner(config)).await;
    let started = Instant::now();
    let r = host
        .call_with(
            &call("1", "slow", json!({"ms": 5000})),
            &CallOptions::default(),
        )
        .await;
    assert_eq!(r.outcome, Outcome::TimedOut, "{}", &*r.text());
    assert!(r.text().contains("200 ms"), "{}", &*r.text());
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_call_midway_still_ends_it_once_and_stops_its_tool() {
    let dir = plugin_dir(&["faults"]);
    let (host, _report) = host_with(dir.path(), DirOptions::in_process(), |b| {
        b.runner(timeout(30_000))
    })
    .await;
    let mut events = host.subscribe();
    // `sleep` stops when cancelled: dropped at 100 ms, it ends at once, not at 5 s.
    let started = Instant::now();
    let dropped = tokio::time::timeout(
        Duration::from_millis(100),
        host.call_with(
            &call("dropped", "sleep", json!({"ms": 5000})),
            &CallOptions::default(),
        ),
    )
    .await;
    assert!(dropped.is_err());
    let mut ends = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while let Ok(Some(item)) = tokio::time::timeout_at(deadline, events.next()).await {
        if let rho_runtime::BusItem::Event(e) = item
            && let EventKind::ToolExecutionEnd {
                call_id, outcome, ..
            } = &e.kind
            && call_id == "dropped"
        {
            ends.push(*outcome);
            // Another end would follow within this window if there were one.
            if started.elapsed() > Duration::from_secs(1) {
                break;
            }
        }
    }
    assert_eq!(ends, [Outcome::Error], "exactly one end, at once");
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_partial_update_is_cut_before_it_is_published() {
    let FaultsHost { host, _dir } = faults_host(5_000, |b| b).await;
    let mut events = host.subscribe_filtered(
        rho_runtime::Filter::default().types([rho_runtime::EventType::ToolExecutionUpdate]),
    );
    let r = host
        .call_with(
            &call("1", "native", json!({"mode": "big_update", "n": 8 << 20})),
            &CallOptions::default(),
        )
        .await;
    assert_eq!(r.outcome, Outcome::Ok);
    let Some(rho_runtime::BusItem::Event(e)) = events.next().await else {
        panic!("no update")
    };
    let EventKind::ToolExecutionUpdate { partial, .. } = &e.kind else {
        unreachable!()
    };
    assert!(
        partial.len() <= rho_runtime::MAX_UPDATE_BYTES + 100,
        "{}",
        partial.len()
    );
    assert!(partial.ends_with("[rho: update cut from 8388608 bytes]"));
}

/// A tool's log lines reach the bus and the call's hook with their levels, in order with its
/// updates and before its end, cut at the update bound; none after the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_lines_reach_the_bus_and_the_hook_in_order_and_never_after_the_end() {
    let FaultsHost { host, _dir } = faults_host(5_000, |b| b).await;
    let mut events = host.subscribe();
    let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
    let options = CallOptions {
        on_log: Some({
            let heard = heard.clone();
            Arc::new(move |level: LogLevel, line: &str| {
                heard.lock().unwrap().push((level, line.len()));
            })
        }),
        ..CallOptions::default()
    };
    let r = host
        .call_with(
            &call("1", "native", json!({"mode": "log", "n": 1 << 20})),
            &options,
        )
        .await;
    assert_eq!((r.outcome, &*r.text()), (Outcome::Ok, "logged"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut seen = Vec::new();
    while let Ok(Some(item)) = tokio::time::timeout(Duration::from_millis(100), events.next()).await
    {
        let rho_runtime::BusItem::Event(e) = item else {
            continue;
        };
        match &e.kind {
            EventKind::ToolExecutionLog {
                level,
                message,
                tool,
                ..
            } => {
                assert_eq!(tool, "native");
                seen.push(format!("{level}:{}", message.len().min(20)));
                if *level == LogLevel::Error {
                    assert!(message.ends_with("[rho: log line cut from 1048576 bytes]"));
                }
            }
            EventKind::ToolExecutionUpdate { partial, .. } => {
                seen.push(format!("update:{partial}"))
            }
            EventKind::ToolExecutionEnd { .. } => seen.push("end".into()),
            _ => {}
        }
    }
    assert_eq!(
        seen,
        [
            "debug:8",
            "update:half way",
            "warning:16",
            "error:20",
            "end"
        ],
        "no line after the end"
    );
    let heard = heard.lock().unwrap().clone();
    assert_eq!(heard.len(), 3, "{heard:?}");
    assert_eq!(heard[0], (LogLevel::Debug, 8));
    assert_eq!(heard[1], (LogLevel::Warning, 16));
    assert!(heard[2].0 == LogLevel::Error && heard[2].1 <= rho_runtime::MAX_UPDATE_BYTES + 100);
}

/// Blocks its thread (a host's bug: it should await) for as long as it is told, then allows.
struct ThreadBlockingGate(Duration);

#[async_trait::async_trait]
impl Gate for ThreadBlockingGate {
    async fn check(&self, _call: &ToolCall, _ctx: &GateCtx) -> Verdict {
        std::thread::sleep(self.0);
        Verdict::Allow
    }
}

/// The call's task and its supervisor are separate tasks: a gate that blocks its worker thread
/// for 1.5 s does not hold back a client's cancellation 200 ms in, which ends the call at once on
/// the runtime's other worker thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_that_blocks_its_thread_does_not_hold_back_a_cancellation() {
    let FaultsHost { host, _dir } = faults_host(5_000, |b| b).await;
    let cancel = tokio_util_cancel();
    let options = CallOptions {
        cancel: Some(cancel.clone()),
        gate: Some(Arc::new(ThreadBlockingGate(Duration::from_millis(1500)))),
        ..CallOptions::default()
    };
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        cancel.cancel();
    });
    let started = Instant::now();
    let r = host
        .call_with(&call("blocking", "echo", json!({"text": "x"})), &options)
        .await;
    let took = started.elapsed();
    let _ = canceller.join();
    assert_eq!(r.outcome, Outcome::Error, "{}", &*r.text());
    assert!(
        r.text().contains("cancelled by the client"),
        "{}",
        &*r.text()
    );
    assert!(took < Duration::from_millis(1200), "ended after {took:?}");
}

/// A call whose gate and tool never block runs in one task (its work driven in place); a sibling
/// call's gate that blocks a worker thread for 2 s does not hold back its timeout: it ends
/// `timed_out` near its 300 ms on the runtime's other worker thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_that_blocks_its_thread_does_not_hold_back_a_sibling_timeout() {
    let FaultsHost { host, _dir } = faults_host(300, |b| b).await;
    let started = Instant::now();
    let dozing = {
        let host = host.clone();
        tokio::spawn(async move {
            let r = host
                .call_with(
                    &call("dozing", "doze", json!({"ms": 5_000})),
                    &CallOptions::default(),
                )
                .await;
            (r, started.elapsed())
        })
    };
    let blocked = {
        let host = host.clone();
        tokio::spawn(async move {
            let options = CallOptions {
                gate: Some(Arc::new(ThreadBlockingGate(Duration::from_millis(2_000)))),
                ..CallOptions::default()
            };
            host.call_with(&call("blocked", "echo", json!({"text": "x"})), &options)
                .await
        })
    };
    let (r, took) = dozing.await.unwrap();
    assert_eq!(r.outcome, Outcome::TimedOut, "{}", &*r.text());
    assert!(took < Duration::from_millis(1_200), "ended after {took:?}");
    let r = blocked.await.unwrap();
    assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
}

/// A model that fails on its first turn.
struct Failing;

#[async_trait::async_trait]
impl rho_runtime::Model for Failing {
    async fn next_turn(
        &self,
        _messages: &[rho_runtime::Message],
        _tools: &[rho_runtime::ToolSpec],
    ) -> Result<Option<rho_runtime::AssistantTurn>, rho_runtime::ModelError> {
        Err(rho_runtime::ModelError("rate limited".into()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_model_ends_the_loop_with_its_error_as_the_stop_reason() {
    let FaultsHost { host, _dir } = faults_host(5_000, |b| b).await;
    let mut events = host.subscribe_filtered(
        rho_runtime::Filter::default().types([rho_runtime::EventType::AgentEnd]),
    );
    let error = Loop::new("s1", host.clone(), LoopConfig::default())
        .run(&Failing)
        .await
        .unwrap_err();
    assert_eq!(error.to_string(), "rate limited");
    let Ok(Some(rho_runtime::BusItem::Event(end))) =
        tokio::time::timeout(Duration::from_secs(5), events.next()).await
    else {
        panic!("no agent_end")
    };
    let rho_runtime::EventKind::AgentEnd { turns, reason } = &end.kind else {
        panic!("{end:?}")
    };
    assert_eq!(
        (*turns, reason),
        (
            0,
            &rho_runtime::StopReason::ModelError("rate limited".into())
        )
    );
    // On the wire, the string journals have always held.
    let wire = serde_json::to_value(&end).unwrap();
    assert_eq!(wire["reason"], "model_error: rate limited");
}
