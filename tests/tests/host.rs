//! [4/9] groundwork: `rho_core::Host`, the façade: built, watched, gated by closures, shut down.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::time::{Duration, Instant};

use rho_core::{
    BusItem, DirOptions, Host, Isolation, Outcome, Verdict, WorkerOptions, async_gate_fn, gate_fn,
};
use rho_tests::{install, plugin_dir};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_landing_just_after_build_is_loaded() {
    for attempt in 0..20u64 {
        let dir = plugin_dir(&["echo"]);
        let (host, reports) = Host::builder()
            .plugin_dir(dir.path(), DirOptions::default())
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
        .plugin_dir(dir.path(), DirOptions::default())
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
    assert_eq!((r.outcome, r.text()), (Outcome::Ok, "hi"));
    let r = host.call("echo", json!({"text": "forbidden"})).await;
    assert_eq!((r.outcome, r.text()), (Outcome::Blocked, "not that"));
    let Some(BusItem::Event(first)) = events.recv().await else {
        panic!("no event")
    };
    assert_eq!(first.kind.type_name(), "tool_execution_start");

    let (host, _) = Host::builder()
        .plugin_dir(dir.path(), DirOptions::default())
        .gate(async_gate_fn(|_call| async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Verdict::Allow
        }))
        .build()
        .await
        .unwrap();
    let r = host.call("echo", json!({"text": "waited"})).await;
    assert_eq!((r.outcome, r.text()), (Outcome::Ok, "waited"));
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
        ..DirOptions::default()
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
    assert_eq!(r.outcome, Outcome::Error, "{}", r.text());
    assert!(r.text().contains("the host is stopping"), "{}", r.text());
    assert!(started.elapsed() < Duration::from_secs(3));
    // Its workers are gone.
    let me = std::process::id().to_string();
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let workers = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
                stat.contains("(rho-worker")
                    && stat.rfind(')').is_some_and(|i| {
                        let rest: Vec<&str> = stat[i + 2..].split(' ').collect();
                        rest.first() != Some(&"Z") && rest.get(1) == Some(&me.as_str())
                    })
            })
            .count();
        if workers == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{workers} workers left");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn the_example_host_builds_and_runs() {
    let profile = rho_tests::built();
    let mut build =
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    build
        .args(["build", "--quiet", "-p", "rho-core", "--example", "host"])
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
        let out = std::process::Command::new(profile.join("examples").join("host"))
            .arg(dir.path())
            .args([tool, args])
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
