//! [4/9] groundwork: `rho_runtime::Host`, the façade: built, watched, gated by closures, shut down.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::time::{Duration, Instant};

use rho_runtime::{
    BusItem, DirOptions, Host, Isolation, Outcome, Verdict, WorkerOptions, async_gate_fn, gate_fn,
};
use rho_tests::{install, plugin_dir};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_landing_just_after_build_is_loaded() {
    for attempt in 0..20u64 {
        let dir = plugin_dir(&["echo"]);
        let (host, reports) = Host::builder()
            .plugin_dir(dir.path(), DirOptions::in_process())
            .watch(true)
            .build()
            .await
            .unwrap();
        assert!(reports[0].errors.is_empty());
        tokio::time::sleep(Duration::from_millis(attempt * 15)).await;
        install(dir.path(), "faults");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !host.tools().iter().any(|t| t.name == "segfault") {
            assert!(Instant::now() < deadline, "attempt {attempt}: never loaded");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closures_gate_calls_and_events_arrive() {
    let dir = plugin_dir(&["echo"]);
    let (host, _) = Host::builder()
        .plugin_dir(dir.path(), DirOptions::in_process())
        .gate(gate_fn(|call| {
            if call.arguments["text"] == "forbidden" {
                Verdict::Block("not that".into())
            } else {
                Verdict::Allow
            }
        }))
        .build()
        .await
        .unwrap();
    let mut events = host.subscribe();
    let r = host.call("echo", json!({"text": "hi"})).await;
    assert_eq!((r.outcome, &*r.text()), (Outcome::Ok, "hi"));
    let r = host.call("echo", json!({"text": "forbidden"})).await;
    assert_eq!((r.outcome, &*r.text()), (Outcome::Blocked, "not that"));
    let Some(BusItem::Event(first)) = events.recv().await else {
        panic!("no event")
    };
    assert_eq!(first.kind.type_name(), "tool_execution_start");

    let (host, _) = Host::builder()
        .plugin_dir(dir.path(), DirOptions::in_process())
        .gate(async_gate_fn(|_call| async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Verdict::Allow
        }))
        .build()
        .await
        .unwrap();
    let r = host.call("echo", json!({"text": "waited"})).await;
    assert_eq!((r.outcome, &*r.text()), (Outcome::Ok, "waited"));
    // A subscription ends when its host is gone.
    let mut events = host.subscribe();
    drop(host);
    assert!(events.recv().await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_calls_in_flight_and_stops_the_workers() {
    let dir = plugin_dir(&["faults"]);
    let isolated = DirOptions {
        isolation: Isolation::Process(WorkerOptions::default()),
        ..DirOptions::in_process()
    };
    let (host, _) = Host::builder()
        .plugin_dir(dir.path(), isolated)
        .build()
        .await
        .unwrap();
    let host = std::sync::Arc::new(host);
    let calling = {
        let host = host.clone();
        tokio::spawn(async move { host.call("sleep", json!({"ms": 30_000})).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    host.shutdown().await;
    let r = calling.await.unwrap();
    assert_eq!(r.outcome, Outcome::Error, "{}", &*r.text());
    assert!(r.text().contains("the host is stopping"), "{}", &*r.text());
    assert!(started.elapsed() < Duration::from_secs(3));
    // Its workers are gone.
    let deadline = Instant::now() + Duration::from_secs(3);
    while rho_tests::live_workers() > 0 {
        assert!(Instant::now() < deadline, "workers left after shutdown");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn the_example_host_builds_and_runs() {
    let profile = rho_tests::built();
    let mut build =
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    build
        .args(["build", "--quiet", "-p", "rho-runtime", "--example", "host"])
        .env("CARGO_TARGET_DIR", profile.parent().unwrap())
        .current_dir(rho_tests::workspace_dir());
    if profile.file_name().is_some_and(|n| n == "release") {
        build.arg("--release");
    }
    assert!(
        build.status().unwrap().success(),
        "building the example host"
    );
    let dir = plugin_dir(&["echo", "faults"]);
    let run = |tool: &str, args: &str| {
        // No rho-worker on PATH nor named: the example is its own worker.
        let out = std::process::Command::new(profile.join("examples").join("host"))
            .arg(dir.path())
            .args([tool, args])
            .env_remove("RHO_WORKER")
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(run("echo", r#"{"text":"hi"}"#).trim(), "ok: hi");
    assert_eq!(
        run("exit_process", r#"{"code":0}"#).trim(),
        "blocked: not in this host"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_call_midway_in_a_worker_ends_it_once_and_frees_the_worker() {
    let dir = plugin_dir(&["faults", "echo"]);
    let (host, report) = rho_tests::host_with(dir.path(), rho_tests::one_worker(), |b| b).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let mut events = host.subscribe_filtered(
        rho_runtime::Filter::default().types([rho_runtime::EventType::ToolExecutionEnd]),
    );
    let started = Instant::now();
    let call = rho_tests::call("dropped", "sleep", json!({"ms": 30_000}));
    let dropped = tokio::time::timeout(
        Duration::from_millis(300),
        host.call_with(&call, &rho_runtime::CallOptions::default()),
    )
    .await;
    assert!(dropped.is_err(), "the call should still have been running");
    // The call's one end event, at once.
    let mut ends = Vec::new();
    while let Ok(Some(BusItem::Event(e))) =
        tokio::time::timeout(Duration::from_secs(2), events.recv()).await
    {
        if let rho_runtime::EventKind::ToolExecutionEnd {
            call_id, outcome, ..
        } = &e.kind
        {
            ends.push((call_id.clone(), *outcome));
        }
    }
    assert_eq!(ends, [("dropped".to_owned(), Outcome::Error)]);
    // The only worker is free again: the next call does not wait 30 s for `sleep`.
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        host.call("echo", json!({"text": "next"})),
    )
    .await
    .expect("the worker was not freed");
    assert_eq!((r.outcome, &*r.text()), (Outcome::Ok, "next"));
    assert!(started.elapsed() < Duration::from_secs(8));
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calls_update_hook_gets_its_updates_in_order_and_none_after_its_end() {
    let dir = plugin_dir(&["faults"]);
    for options in [DirOptions::in_process(), rho_tests::isolated()] {
        let (host, report) = rho_tests::host_with(dir.path(), options, |b| b).await;
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let hook_seen = seen.clone();
        let options = rho_runtime::CallOptions {
            on_update: Some(std::sync::Arc::new(move |partial: &str| {
                hook_seen.lock().unwrap().push(partial.to_owned())
            })),
            ..Default::default()
        };
        // Another call at the same time: its updates do not reach this hook.
        let other = host.clone();
        let beside = tokio::spawn(async move {
            other
                .call("updates", json!({"count": 5, "interval_ms": 1}))
                .await
        });
        let call = rho_tests::call("hooked", "updates", json!({"count": 20, "interval_ms": 1}));
        let r = host.call_with(&call, &options).await;
        assert_eq!((r.outcome, &*r.text()), (Outcome::Ok, "sent 20 updates"));
        let expected: Vec<String> = (1..=20).map(|i| format!("update {i}/20")).collect();
        assert_eq!(*seen.lock().unwrap(), expected);
        assert_eq!(beside.await.unwrap().outcome, Outcome::Ok);
        // Nothing arrives after the call's end.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(seen.lock().unwrap().len(), 20);
        host.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_timeout_and_a_panicking_update_hook_still_end_every_call_once_as_the_tool_did() {
    let dir = plugin_dir(&["faults"]);
    for options in [DirOptions::in_process(), rho_tests::isolated()] {
        // `Duration::MAX`: no timeout at all, not an overflow.
        let never = rho_runtime::RunnerConfig {
            default_timeout: Duration::MAX,
            ..Default::default()
        };
        let (host, report) = rho_tests::host_with(dir.path(), options, |b| b.runner(never)).await;
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        let mut ends = host.subscribe_filtered(
            rho_runtime::Filter::default().types([rho_runtime::EventType::ToolExecutionEnd]),
        );
        let hooked = rho_runtime::CallOptions {
            on_update: Some(std::sync::Arc::new(|_: &str| {
                panic!("the host's hook has a bug")
            })),
            ..Default::default()
        };
        for n in 0..4 {
            let call = rho_tests::call(
                &format!("h{n}"),
                "updates",
                json!({"count": 3, "interval_ms": 0}),
            );
            let r = host.call_with(&call, &hooked).await;
            // The hook's panic is the host's bug: the tool answered, and is not quarantined.
            assert_eq!(
                (r.outcome, &*r.text()),
                (Outcome::Ok, "sent 3 updates"),
                "call {n}"
            );
        }
        let mut seen = 0;
        while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(300), ends.recv()).await
        {
            seen += 1;
        }
        assert_eq!(seen, 4, "one end event per call");
        assert!(host.stats().iter().all(|s| s.quarantine.is_none()));
        host.shutdown().await;
    }
}

/// `shutdown` ends the host's subscriptions after its last event (before: only dropping every
/// clone of the host did, so a subscriber of a host shut down waited forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_subscriptions_after_the_last_event() {
    let dir = rho_tests::plugin_dir(&["echo"]);
    let (host, _) =
        rho_tests::host_with(dir.path(), rho_runtime::DirOptions::in_process(), |b| b).await;
    let mut events = host.subscribe();
    let r = host.call("echo", serde_json::json!({"text": "hi"})).await;
    assert_eq!(r.outcome, rho_runtime::Outcome::Ok);
    host.shutdown().await;
    let mut last = None;
    let ended = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while let Some(item) = events.recv().await {
            if let rho_runtime::BusItem::Event(event) = item {
                last = Some(event.kind.type_name());
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the subscription did not end");
    assert_eq!(last, Some("tool_execution_end"));
    // A subscription opened after the shutdown ends at once; the host (a clone) still lives.
    let mut late = host.subscribe();
    assert!(late.recv().await.is_none());
}
