//! [7/13] Wasm components, as far as they go today: the example plugins and the fault plugin,
//! built by these tests for `wasm32-wasip2` from the same crates as their native builds, served
//! in a host by `rho-runtime-wasm`'s `WasmSource`: the same answers as native; a trap (a panic)
//! is `crashed` with the panic's message; an endless loop is `timed_out` at its timeout and the
//! next call answers; a memory bomb is `crashed` at the limit; updates, log lines, questions,
//! blocks and errors with details map.
#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use rho_runtime::plugin_api::{LogLevel, Question, Reply};
use rho_runtime::{CallOptions, Host, Outcome, RunnerConfig, ToolCall};
use rho_runtime_wasm::WasmSource;
use rho_tests::{call, plugin_dir, workspace_dir};
use serde_json::json;

/// The component of plugin crate `name`, built once per test process (the target added with
/// rustup when missing).
fn component(name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<()>> = OnceLock::new();
    let _one = BUILT.get_or_init(Mutex::default).lock().unwrap();
    let target = rho_tests::built().parent().unwrap().to_owned();
    let file = target
        .join("wasm32-wasip2/debug")
        .join(format!("{name}.wasm"));
    let added = std::process::Command::new("rustup")
        .args(["target", "add", "wasm32-wasip2"])
        .output()
        .unwrap();
    assert!(added.status.success(), "rustup target add wasm32-wasip2");
    let status = std::process::Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--target", "wasm32-wasip2", "-p", name])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(workspace_dir())
        .status()
        .unwrap();
    assert!(status.success(), "building {name} for wasm32-wasip2");
    file
}

/// A host serving the component of plugin crate `name`, once its tools are listed.
async fn host_of(name: &str, runner: RunnerConfig) -> Host {
    host_serving(name, WasmSource::file(component(name)), runner).await
}

/// A host serving `source` (as `wasm:NAME`), once its tools are listed.
async fn host_serving(name: &str, source: WasmSource, runner: RunnerConfig) -> Host {
    let (host, _) = Host::builder()
        .source(&format!("wasm:{name}"), source)
        .runner(runner)
        .build()
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while host.tools().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the component's tools never came"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    host
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_plugins_as_components_answer_as_their_native_builds() {
    let native_dir = plugin_dir(&["echo", "picture"]);
    let native = rho_tests::host(native_dir.path()).await;
    for (plugin, tool, args) in [
        ("echo", "echo", json!({"text": "hi there"})),
        ("picture", "checkerboard", json!({"size": 16})),
    ] {
        let wasm = host_of(plugin, RunnerConfig::default()).await;
        let spec = wasm.tools().into_iter().find(|t| t.name == tool).unwrap();
        let native_spec = native.tools().into_iter().find(|t| t.name == tool).unwrap();
        assert_eq!(spec.parameters, native_spec.parameters, "{tool}");
        assert_eq!(spec.hints, native_spec.hints, "{tool}");
        assert_eq!(spec.title, native_spec.title, "{tool}");
        assert_eq!(spec.plugin, native_spec.plugin, "{tool}");
        let a = wasm.call(tool, args.clone()).await;
        let b = native.call(tool, args).await;
        assert_eq!(a.outcome, Outcome::Ok, "{}", a.text());
        assert_eq!((a.outcome, a.text()), (b.outcome, b.text()), "{tool}");
        assert_eq!(a.output.images(), b.output.images(), "{tool}");
        assert_eq!(a.structured, b.structured, "{tool}");
        wasm.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_in_a_component_end_their_call_and_the_next_call_answers() {
    let mut runner = RunnerConfig::default();
    runner
        .timeout_overrides
        .insert("spin".into(), Duration::from_millis(300));
    let host = host_of("faults", runner).await;
    // A panic aborts the instance: `crashed`, with the panic's message from its stderr.
    let r = host.call("panic", json!({"message": "boom"})).await;
    assert_eq!(r.outcome, Outcome::Crashed, "{}", r.text());
    assert!(r.text().contains("boom"), "{}", r.text());
    // An endless loop ignoring cancellation is stopped at its timeout, and the component serves
    // the next call at once (a fresh instance).
    let started = Instant::now();
    let r = host.call("spin", json!({})).await;
    assert_eq!(r.outcome, Outcome::TimedOut, "{}", r.text());
    assert!(started.elapsed() < Duration::from_secs(2));
    let r = host.call("nap", json!({"ms": 1})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    // A memory bomb fails at the instance's limit (256 MiB).
    let r = host.call("alloc", json!({"mib": 1024})).await;
    assert_eq!(r.outcome, Outcome::Crashed, "{}", r.text());
    let r = host.call("alloc", json!({"mib": 16})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    // An error with details stays one.
    let r = host.call("fail", json!({"message": "no"})).await;
    assert_eq!(r.outcome, Outcome::Error, "{}", r.text());
    assert!(r.details.is_some(), "{r:?}");
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_components_updates_logs_questions_and_blocks_reach_the_host() {
    let host = host_of("faults", RunnerConfig::default()).await;
    let updates = std::sync::Arc::new(Mutex::new(Vec::new()));
    let options = CallOptions {
        on_update: Some({
            let updates = updates.clone();
            std::sync::Arc::new(move |u: &str| updates.lock().unwrap().push(u.to_owned()))
        }),
        ..CallOptions::default()
    };
    let r = host
        .call_with(
            &call("u", "updates", json!({"count": 3, "interval_ms": 1})),
            &options,
        )
        .await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    assert_eq!(updates.lock().unwrap().len(), 3);

    let mut events = host.subscribe();
    let r = host.call("log_levels", json!({})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    let mut levels = Vec::new();
    while let Ok(Some(rho_runtime::BusItem::Event(e))) = tokio::time::timeout(
        Duration::from_millis(300),
        tokio_stream::StreamExt::next(&mut events),
    )
    .await
    {
        if let rho_runtime::EventKind::ToolExecutionLog { level, .. } = e.kind {
            levels.push(level);
        }
    }
    assert!(levels.contains(&LogLevel::Warning), "{levels:?}");

    let answerer =
        |_q: Question, _c: ToolCall| async move { Reply::Accepted(json!({"confirm": true})) };
    let options = CallOptions {
        answerer: Some(std::sync::Arc::new(answerer)),
        ..CallOptions::default()
    };
    let r = host
        .call_with(&call("a", "ask", json!({"message": "Sure?"})), &options)
        .await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    assert!(r.text().contains("confirm"), "{}", r.text());

    let r = host.call("blocks", json!({})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    assert_eq!(r.output.blocks().len(), 7, "{:?}", r.output);
    assert_eq!(r.output.text(), "first\nlast", "{:?}", r.output);
    host.shutdown().await;
}

/// A component reaches the files its grants name, at their own paths, and nothing else: the
/// `files` plugin reads a passage under its read grant, and is refused a file beside it that its
/// native build would read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_reads_what_its_grants_name_and_nothing_else() {
    let base = tempfile::tempdir().unwrap();
    let (granted, other) = (base.path().join("granted"), base.path().join("other"));
    for dir in [&granted, &other] {
        std::fs::create_dir(dir).unwrap();
        std::fs::write(dir.join("a.txt"), "one\ntwo\n").unwrap();
    }
    let grants = rho_runtime::Grants {
        read: vec![granted.clone()],
        ..rho_runtime::Grants::default()
    };
    let source = WasmSource::file(component("files")).grants(grants);
    let host = host_serving("files", source, RunnerConfig::default()).await;
    let read = |dir: &std::path::Path| json!({"path": dir.join("a.txt").display().to_string(), "start_line": 1, "end_line": 2});
    let r = host.call("read_passage", read(&granted)).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    assert_eq!(r.text(), "1 | one\n2 | two\n");
    let r = host.call("read_passage", read(&other)).await;
    assert_eq!(r.outcome, Outcome::Error, "{}", r.text());
    assert!(r.text().contains("cannot read"), "{}", r.text());
    host.shutdown().await;
}
