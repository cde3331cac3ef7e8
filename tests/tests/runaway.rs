//! A plugin thread that ignores cancellation: the call times out, the host moves on, the thread is
//! counted as a runaway against its plugin. In a test binary of its own: the spinning thread keeps
//! a core busy until the process exits.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::time::{Duration, Instant};

use rho_runtime::{CallOptions, DirOptions, Outcome};
use rho_tests::{call, host_with, plugin_dir, timeout};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spin_times_out_and_the_next_call_on_the_plugin_answers() {
    let dir = plugin_dir(&["echo", "faults"]);
    let (host, _report) = host_with(dir.path(), DirOptions::in_process(), |b| {
        b.runner(timeout(500))
    })
    .await;
    let started = Instant::now();
    let r = host
        .call_with(&call("1", "spin", json!({})), &CallOptions::default())
        .await;
    let took = started.elapsed();
    assert_eq!(r.outcome, Outcome::TimedOut);
    assert_eq!(&*r.text(), "tool `spin` timed out after 500 ms");
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_millis(1500),
        "{took:?}"
    );
    let next = host
        .call_with(
            &call("2", "sleep", json!({"ms": 5})),
            &CallOptions::default(),
        )
        .await;
    assert_eq!((next.outcome, &*next.text()), (Outcome::Ok, "slept 5 ms"));
    let stats = host.stats();
    let spin = stats.iter().find(|s| s.tool == "spin").unwrap();
    assert_eq!(
        spin.runaway_threads, 1,
        "the spinning thread is counted against its plugin"
    );
    assert_eq!(spin.timed_out, 1);
    let echo = stats.iter().find(|s| s.tool == "echo").unwrap();
    assert_eq!(echo.runaway_threads, 0, "other plugins are not charged");
    // A cancellable tool notices the flag and its thread is released.
    let r = host
        .call_with(
            &call("3", "spin_cancellable", json!({})),
            &CallOptions::default(),
        )
        .await;
    assert_eq!(r.outcome, Outcome::TimedOut);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stats = host.stats();
    assert_eq!(
        stats
            .iter()
            .find(|s| s.tool == "spin")
            .unwrap()
            .runaway_threads,
        1
    );
}
