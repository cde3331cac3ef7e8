//! Idle limits ([9/13]): a call that keeps sending partial updates runs as long as its total
//! timeout allows; one that falls silent ends `timed_out` at its idle limit, naming it. The limit
//! comes from the tool's declaration (`faults`' `heartbeat`: 500 ms), the host's configuration
//! or the call's options, in reverse order of precedence. Real plugin (`faults`, in process and
//! isolated), through `Host::call`.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::collections::HashMap;
use std::time::Duration;

use rho_runtime::{CallOptions, DirOptions, Host, Outcome, RunnerConfig, ToolResult};
use rho_tests::{call, host_with, plugin_dir};
use serde_json::json;

/// A host of `faults` with `options`, a 10 s default timeout and the host's idle limits `idle`.
async fn host(options: DirOptions, idle: &[(&str, u64)]) -> (Host, tempfile::TempDir) {
    let dir = plugin_dir(&["faults"]);
    let runner = RunnerConfig {
        default_timeout: Duration::from_secs(10),
        idle_timeout_overrides: idle
            .iter()
            .map(|(tool, ms)| (tool.to_string(), Duration::from_millis(*ms)))
            .collect::<HashMap<_, _>>(),
        timeout_overrides: HashMap::from([("updates".into(), Duration::from_millis(1500))]),
        ..RunnerConfig::default()
    };
    let (host, report) = host_with(dir.path(), options, |b| b.runner(runner)).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    (host, dir)
}

/// A call's options with its own idle limit.
fn idle(ms: u64) -> CallOptions {
    CallOptions {
        idle_timeout: Some(Duration::from_millis(ms)),
        ..CallOptions::default()
    }
}

/// Ended `timed_out` by an idle limit of `limit_ms`, after at least that long.
fn idled_out(r: &ToolResult, limit_ms: u64) {
    assert_eq!(r.outcome, Outcome::TimedOut, "{}", r.text());
    let named = format!("no update for {limit_ms} ms (its idle limit)");
    assert!(r.text().contains(&named), "{}", r.text());
    assert!(r.duration >= Duration::from_millis(limit_ms), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_keep_a_call_alive_and_silence_ends_it_at_the_idle_limit() {
    let (host, _dir) = host(DirOptions::in_process(), &[("sleep", 300)]).await;
    // Updates every 100 ms for 3 s under the tool's own 500 ms idle limit (10 s in all): `ok`.
    let r = host
        .call("heartbeat", json!({"count": 30, "interval_ms": 100}))
        .await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    assert!(r.duration >= Duration::from_secs(3), "{r:?}");
    // One update, then 2 s of silence: ended at the idle limit, long before the silence ends.
    let r = host
        .call("heartbeat", json!({"count": 2, "interval_ms": 2000}))
        .await;
    idled_out(&r, 500);
    assert!(r.duration < Duration::from_millis(1900), "{r:?}");
    assert!(r.text().contains("after running"), "{}", r.text());
    // The host's idle limit for a tool that declares none.
    let r = host.call("sleep", json!({"ms": 5000})).await;
    idled_out(&r, 300);
    assert!(r.duration < Duration::from_millis(4000), "{r:?}");
    // A call's own limit wins over the tool's.
    let args = json!({"count": 5, "interval_ms": 400});
    let r = host
        .call_with(&call("c", "heartbeat", args), &idle(50))
        .await;
    idled_out(&r, 50);
    // Updates do not outlive the total timeout (1.5 s for `updates`): it ends `timed_out` naming
    // that.
    let args = json!({"count": 100, "interval_ms": 100});
    let r = host
        .call_with(&call("t", "updates", args), &idle(500))
        .await;
    assert_eq!(r.outcome, Outcome::TimedOut, "{}", r.text());
    assert_eq!(r.text(), "tool `updates` timed out after 1500 ms");
    // A limit too long to add to now is none: the call runs to its end.
    let args = json!({"count": 2, "interval_ms": 10});
    let never = CallOptions {
        idle_timeout: Some(Duration::MAX),
        ..CallOptions::default()
    };
    let r = host.call_with(&call("m", "updates", args), &never).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    // The tool's own limit is in its spec.
    let spec = host.tools().into_iter().find(|t| t.name == "heartbeat");
    assert_eq!(spec.and_then(|s| s.idle_timeout_ms), Some(500));
    host.shutdown().await;
}

/// The same through an isolated worker: its updates cross the process boundary and still count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_tools_updates_keep_it_alive_too() {
    let (host, _dir) = host(rho_tests::isolated(), &[]).await;
    let r = host
        .call("heartbeat", json!({"count": 12, "interval_ms": 100}))
        .await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    let r = host
        .call("heartbeat", json!({"count": 2, "interval_ms": 3000}))
        .await;
    idled_out(&r, 500);
    assert!(r.duration < Duration::from_millis(2900), "{r:?}");
    host.shutdown().await;
}
