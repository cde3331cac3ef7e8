//! Quarantine that cools down ([9/13]): a quarantined tool refuses calls during its cool-down,
//! then takes one call as a probe: an answer lifts the quarantine, a crash quarantines it again
//! for longer. Real plugin (`faults`, in process), real crashes (panics), through `Host::call`.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rho_runtime::{Event, EventKind, Host, Outcome, QuarantinePolicy, Subscription};
use rho_tests::{call, host_with, plugin_dir, wait_for};
use serde_json::json;

/// Quarantine after 3 crashes; a first cool-down of 1 s, then 3 s.
fn policy() -> QuarantinePolicy {
    QuarantinePolicy {
        max_failures: 3,
        window: Duration::from_secs(60),
        cool_down: Duration::from_secs(1),
        cool_down_growth: 3,
        max_cool_down: Duration::from_secs(10),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The next `tool_quarantined` of `tool`: its `probe_after_ms` and failed probes.
async fn quarantined(events: &mut Subscription, tool: &str) -> (u64, u32) {
    let event = wait_for(
        events,
        Duration::from_secs(10),
        |e| matches!(&e.kind, EventKind::ToolQuarantined { tool: t, .. } if t == tool),
    )
    .await
    .expect("tool_quarantined");
    let EventKind::ToolQuarantined {
        probe_after_ms,
        failed_probes,
        ..
    } = &event.kind
    else {
        unreachable!()
    };
    (probe_after_ms.expect("a cool-down"), *failed_probes)
}

/// Sleeps until `at_ms` (Unix milliseconds) and a margin past it.
async fn until(at_ms: u64) {
    let wait = at_ms.saturating_sub(now_ms()) + 100;
    tokio::time::sleep(Duration::from_millis(wait)).await;
}

/// The next event of type `kind` about `tool`.
async fn next(events: &mut Subscription, kind: &str, tool: &str) -> Arc<Event> {
    wait_for(events, Duration::from_secs(5), |e| {
        e.kind.type_name() == kind && e.kind.tool() == Some(tool)
    })
    .await
    .unwrap_or_else(|| panic!("no {kind} of {tool}"))
}

async fn host() -> (Host, Subscription, tempfile::TempDir) {
    let dir = plugin_dir(&["faults"]);
    let bus = rho_runtime::Bus::default();
    let events = bus.subscribe();
    // `sleep` times out after a second.
    let mut runner = rho_runtime::RunnerConfig::default();
    runner
        .timeout_overrides
        .insert("sleep".into(), Duration::from_secs(1));
    let (host, report) = host_with(dir.path(), rho_runtime::DirOptions::in_process(), |b| {
        b.bus(bus).quarantine(policy()).runner(runner)
    })
    .await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    (host, events, dir)
}

/// A tool that crashes on its first three calls only: quarantined, refused during the cool-down,
/// probed by the first call after it, and serving again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_recovers_is_probed_after_its_cool_down_and_lifted() {
    let (host, mut events, _dir) = host().await;
    let flaky = || host.call("flaky", json!({"crashes": 3}));
    for _ in 0..3 {
        assert_eq!(flaky().await.outcome, Outcome::Crashed);
    }
    let (probe_after, failed) = quarantined(&mut events, "flaky").await;
    assert_eq!(failed, 0);
    // Its cool-down is a second from the quarantine.
    let cool_down = probe_after.saturating_sub(now_ms());
    assert!(cool_down <= 1000, "{cool_down} ms");
    let stats = host.stats();
    let state = stats.iter().find(|s| s.tool == "flaky").unwrap();
    assert_eq!(state.probe_after_ms, Some(probe_after));
    let refused = flaky().await;
    assert_eq!(refused.outcome, Outcome::Quarantined, "{}", refused.text());
    assert!(
        refused.text().contains("will probe it"),
        "{}",
        refused.text()
    );
    until(probe_after).await;
    // The probe: the tool has recovered, it answers, the quarantine is lifted.
    let probe = flaky().await;
    assert_eq!(probe.outcome, Outcome::Ok, "{}", probe.text());
    let probing = next(&mut events, "tool_probing", "flaky").await;
    let EventKind::ToolProbing { call_id, .. } = &probing.kind else {
        unreachable!()
    };
    assert_eq!(call_id, &probe.call_id);
    let restored = next(&mut events, "tool_restored", "flaky").await;
    let EventKind::ToolRestored { reason, .. } = &restored.kind else {
        unreachable!()
    };
    assert!(reason.contains("probe"), "{reason}");
    assert_eq!(flaky().await.outcome, Outcome::Ok);
    let stats = host.stats();
    let state = stats.iter().find(|s| s.tool == "flaky").unwrap();
    assert!(state.quarantine.is_none() && !state.probing, "{state:?}");
    assert_eq!(state.quarantined_calls, 1, "{state:?}");
    host.shutdown().await;
}

/// A tool that keeps crashing: its probe crashes, and it is quarantined again for three times
/// as long; calls meanwhile end `quarantined`, and the next probe comes after the longer wait.
/// Only one call probes at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_keeps_crashing_is_quarantined_again_for_longer() {
    let (host, mut events, _dir) = host().await;
    let host = Arc::new(host);
    let panic = || host.call("panic", json!({"message": "still broken"}));
    for _ in 0..3 {
        assert_eq!(panic().await.outcome, Outcome::Crashed);
    }
    let (probe_after, _) = quarantined(&mut events, "panic").await;
    until(probe_after).await;
    let probe = panic().await;
    assert_eq!(probe.outcome, Outcome::Crashed, "{}", probe.text());
    let quarantined_at = now_ms();
    let (again, failed) = quarantined(&mut events, "panic").await;
    assert_eq!(failed, 1);
    // Three seconds this time (1 s times 3).
    let cool_down = again.saturating_sub(quarantined_at);
    assert!((2000..=3000).contains(&cool_down), "{cool_down} ms");
    // A second past the first cool-down's length: still refused.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let refused = panic().await;
    assert_eq!(refused.outcome, Outcome::Quarantined, "{}", refused.text());
    until(again).await;
    // Two calls at once after the cool-down: one probes (and crashes), the other is refused.
    let (a, b) = tokio::join!(panic(), panic());
    let mut outcomes = [a.outcome, b.outcome];
    outcomes.sort_by_key(|o| o.as_str());
    assert_eq!(
        outcomes,
        [Outcome::Crashed, Outcome::Quarantined],
        "{a:?} {b:?}"
    );
    let (_, failed) = quarantined(&mut events, "panic").await;
    assert_eq!(failed, 2);
    host.shutdown().await;
}

/// The probe is the call admitted as one, not whatever call carries its id: a call refused under
/// the probe's id, while the probe runs, leaves the probe alone (a third call is still refused),
/// and the probe's answer lifts the quarantine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_shares_the_probes_id_does_not_take_its_place() {
    let (host, mut events, _dir) = host().await;
    let host = Arc::new(host);
    // Three timeouts (a second each) quarantine `sleep`.
    for i in 0..3 {
        let slept = host
            .call_with(
                &call(&format!("t{i}"), "sleep", json!({"ms": 5000})),
                &Default::default(),
            )
            .await;
        assert_eq!(slept.outcome, Outcome::TimedOut, "{}", slept.text());
    }
    let (probe_after, _) = quarantined(&mut events, "sleep").await;
    until(probe_after).await;
    let probing = {
        let host = host.clone();
        tokio::spawn(async move {
            host.call_with(
                &call("dup", "sleep", json!({"ms": 600})),
                &Default::default(),
            )
            .await
        })
    };
    next(&mut events, "tool_probing", "sleep").await;
    let dup = host
        .call_with(&call("dup", "sleep", json!({"ms": 1})), &Default::default())
        .await;
    assert_eq!(dup.outcome, Outcome::Quarantined, "{}", dup.text());
    let other = host
        .call_with(
            &call("other", "sleep", json!({"ms": 1})),
            &Default::default(),
        )
        .await;
    assert_eq!(other.outcome, Outcome::Quarantined, "{}", other.text());
    assert!(other.text().contains("probing it now"), "{}", other.text());
    let probe = probing.await.unwrap();
    assert_eq!(probe.outcome, Outcome::Ok, "{}", probe.text());
    next(&mut events, "tool_restored", "sleep").await;
    host.shutdown().await;
}
