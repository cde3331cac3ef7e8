//! [7/13] Wasm components: the example plugins and the fault plugin, built by these tests for
//! `wasm32-wasip2` from the same crates as their native builds, loaded as `.wasm` files from
//! plugin directories beside native libraries: the same answers as native; a trap (a panic) is
//! `crashed` with the panic's message and counted against the plugin; an endless loop is
//! `timed_out` at its timeout and the next call answers; a memory bomb is `crashed` at the limit;
//! fuel runs out; grants are the directory's (files, writes, the network); updates, log lines,
//! questions, blocks and errors with details map; hot reload under a stream of calls loses none;
//! a compile cache on disk is used across engines and refused when others can write it.
#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rho_runtime::plugin_api::{LogLevel, Question, Reply};
use rho_runtime::{
    CallOptions, DirOptions, EventKind, Grants, Host, Isolation, Outcome, RunnerConfig, ScanReport,
    ToolCall, WorkerOptions,
};
use rho_runtime_wasm::{WasmEngine, WasmLimits};
use rho_tests::{build_component, call, install, install_bytes, wait_for, workspace_dir};
use serde_json::json;

/// Puts the component of plugin crate `name` into `dir` as `NAME.wasm`.
fn install_component(dir: &Path, name: &str) -> PathBuf {
    let to = dir.join(format!("{name}.wasm"));
    build_component(name, None, &to);
    to
}

/// An engine with the default limits.
fn engine() -> WasmEngine {
    WasmEngine::new(WasmLimits::default()).unwrap()
}

/// Isolated directory options (the default) with `grants` for its plugins and components.
fn granting(grants: Grants) -> DirOptions {
    DirOptions {
        isolation: Isolation::Process(WorkerOptions {
            grants,
            ..WorkerOptions::default()
        }),
        ..DirOptions::default()
    }
}

/// How long these tests let a component compile: a debug build of the host compiles a small
/// component in about a second on this machine, more under load.
const COMPILE: Duration = Duration::from_secs(60);

/// `runner` with a host that waits for its components to compile before it answers.
fn patient(runner: RunnerConfig) -> RunnerConfig {
    RunnerConfig {
        load_wait: COMPILE,
        ..runner
    }
}

/// A host serving `dir` with `options` (its load timeout [`COMPILE`]), a patient runner, and
/// what `configure` adds; returns once everything in it has loaded or failed.
async fn loaded(
    dir: &Path,
    options: DirOptions,
    configure: impl FnOnce(rho_runtime::HostBuilder) -> rho_runtime::HostBuilder,
) -> (Host, ScanReport) {
    let options = DirOptions {
        load_timeout: COMPILE,
        ..options
    };
    let (host, report) = rho_tests::host_with(dir, options, |b| {
        configure(b.runner(patient(RunnerConfig::default())))
    })
    .await;
    assert!(report.loading.is_empty(), "{:?}", report.loading);
    (host, report)
}

/// A host serving `dir` with `options` and `engine` for its components, with `runner`; panics
/// when anything in it fails to load.
async fn host_of(
    dir: &Path,
    options: DirOptions,
    engine: WasmEngine,
    runner: RunnerConfig,
) -> (Host, ScanReport) {
    let (host, report) = loaded(dir, options, |b| {
        b.components(engine).runner(patient(runner))
    })
    .await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    (host, report)
}

/// A runner whose timeouts for the tools named are these (milliseconds).
fn timeouts(of: &[(&str, u64)]) -> RunnerConfig {
    let mut runner = RunnerConfig::default();
    for (tool, ms) in of {
        runner
            .timeout_overrides
            .insert((*tool).into(), Duration::from_millis(*ms));
    }
    runner
}

/// A host serving a directory of just the component of `name`, in process.
async fn component_host(name: &str, runner: RunnerConfig) -> (Host, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    install_component(dir.path(), name);
    let (host, _) = host_of(dir.path(), DirOptions::in_process(), engine(), runner).await;
    (host, dir)
}

/// Native and component builds side by side in one directory each way round: the component
/// answers as its native build (specs, text, images, structured content), and its load event
/// says it is a wasm component, not isolated, and what confines it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_load_beside_native_plugins_and_answer_as_their_native_builds() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    install(a.path(), "echo");
    install_component(a.path(), "picture");
    install_component(b.path(), "echo");
    install(b.path(), "picture");
    let bus = rho_runtime::Bus::default();
    let mut events = bus.subscribe();
    let (mixed_a, report_a) = loaded(a.path(), DirOptions::default(), |b| {
        b.components(engine()).bus(bus.clone())
    })
    .await;
    let (mixed_b, report_b) = host_of(
        b.path(),
        DirOptions::default(),
        engine(),
        RunnerConfig::default(),
    )
    .await;
    assert_eq!(report_a.loaded.len(), 2, "{report_a:?}");
    assert_eq!(report_b.loaded.len(), 2, "{report_b:?}");
    for (tool, args, wasm, native) in [
        ("echo", json!({"text": "hi there"}), &mixed_b, &mixed_a),
        ("checkerboard", json!({"size": 16}), &mixed_a, &mixed_b),
    ] {
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
    }
    // What the journal and the views learn of each: the load events.
    let mut loaded = std::collections::BTreeMap::new();
    while loaded.len() < 2 {
        let e = wait_for(&mut events, Duration::from_secs(5), |e| {
            matches!(e.kind, EventKind::PluginLoaded { .. })
        })
        .await
        .expect("two plugin_loaded events");
        if let EventKind::PluginLoaded {
            plugin,
            isolated,
            sandbox,
            ..
        } = &e.kind
        {
            let sandbox = sandbox.as_ref().map(ToString::to_string);
            loaded.insert(plugin.clone(), (*isolated, sandbox.unwrap_or_default()));
        }
    }
    let (picture_isolated, picture_sandbox) = &loaded["picture"];
    let (echo_isolated, echo_sandbox) = &loaded["echo"];
    assert!(!picture_isolated && *echo_isolated);
    assert_eq!(
        picture_sandbox,
        "wasm component: memory 256 MiB, scratch 64 MiB, no network, environment PATH LANG LC_ALL \
         TZ RUST_LOG"
    );
    assert!(echo_sandbox.contains("namespaces"), "{echo_sandbox}");
    mixed_a.shutdown().await;
    mixed_b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_in_a_component_end_their_call_count_against_it_and_the_next_call_answers() {
    let (host, _dir) = component_host("faults", timeouts(&[("spin", 300)])).await;
    // A panic aborts the instance: `crashed`, with the panic's message from its stderr.
    let r = host.call("panic", json!({"message": "boom"})).await;
    assert_eq!(r.outcome, Outcome::Crashed, "{}", r.text());
    assert!(r.text().contains("boom"), "{}", r.text());
    let stats = host.stats();
    let panic = stats.iter().find(|s| s.tool == "panic").unwrap();
    assert_eq!(panic.crashed, 1, "{panic:?}");
    assert!(
        panic.origin.to_string().contains("(faults.wasm)"),
        "{}",
        panic.origin
    );
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
    // A component that says much on stderr (the host keeps only its last words) still answers,
    // and a panic after it is still explained.
    let chatter = "x".repeat(100_000);
    let r = host.call("print", json!({"text": chatter})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    let r = host
        .call("panic", json!({"message": "after the chatter"}))
        .await;
    assert_eq!(r.outcome, Outcome::Crashed, "{}", r.text());
    assert!(r.text().contains("after the chatter"), "{}", r.text());
    // An error with details stays one.
    let r = host.call("fail", json!({"message": "no"})).await;
    assert_eq!(r.outcome, Outcome::Error, "{}", r.text());
    assert!(r.details.is_some(), "{r:?}");
    host.shutdown().await;
}

/// A call starts on its caller's thread and moves to a blocking thread once it runs past an epoch
/// tick: two components computing for long hold neither of a two-thread runtime's threads (a
/// timer on it keeps firing), and on a single-threaded runtime (`#[tokio::test]`'s) a call
/// that loops still ends at its timeout and the next answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_computing_for_long_leave_the_async_threads_free() {
    let (host, _dir) = component_host("faults", timeouts(&[("spin", 1500)])).await;
    let spins: Vec<_> = (0..2)
        .map(|_| {
            let host = host.clone();
            tokio::spawn(async move { host.call("spin", json!({})).await })
        })
        .collect();
    // The spins have started (each holds its thread for a tick at most).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut late = Duration::ZERO;
    for _ in 0..20 {
        let asked = Instant::now();
        tokio::time::sleep(Duration::from_millis(10)).await;
        late = late.max(asked.elapsed().saturating_sub(Duration::from_millis(10)));
    }
    // Held threads would make each sleep wait for a spin's whole timeout.
    assert!(
        late < Duration::from_millis(500),
        "a timer was {late:?} late"
    );
    for spin in spins {
        let r = spin.await.unwrap();
        assert_eq!(r.outcome, Outcome::TimedOut, "{}", r.text());
    }
    host.shutdown().await;
}

/// A component given up while it waits in a host call (one long WASI sleep, which the epoch does
/// not reach) is dropped there: its turn is free at once. More calls than an engine runs at once
/// (112), each dozing a minute past a 300 ms timeout, and the next call still answers at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_given_up_inside_a_host_call_free_their_turns() {
    let runner = timeouts(&[("doze", 300), ("nap", 5000)]);
    // Quarantine off: on a loaded machine some of the 120 calls start after three others timed
    // out, and a quarantine would end them before they take a turn (not what this tests).
    let dir = tempfile::tempdir().unwrap();
    install_component(dir.path(), "faults");
    let no_quarantine = rho_runtime::QuarantinePolicy {
        max_failures: 0,
        ..rho_runtime::QuarantinePolicy::default()
    };
    let (host, report) = loaded(dir.path(), DirOptions::in_process(), |b| {
        b.components(engine())
            .runner(patient(runner))
            .quarantine(no_quarantine)
    })
    .await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let dozes: Vec<_> = (0..120)
        .map(|_| {
            let host = host.clone();
            tokio::spawn(async move { host.call("doze", json!({"ms": 60_000})).await })
        })
        .collect();
    for doze in dozes {
        let r = doze.await.unwrap();
        assert_eq!(r.outcome, Outcome::TimedOut, "{}", r.text());
    }
    let r = host.call("nap", json!({"ms": 1})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    host.shutdown().await;
}

#[tokio::test]
async fn a_component_on_a_single_threaded_runtime_is_stopped_at_its_timeout() {
    let (host, _dir) = component_host("faults", timeouts(&[("spin", 300)])).await;
    let r = host.call("spin", json!({})).await;
    assert_eq!(r.outcome, Outcome::TimedOut, "{}", r.text());
    let r = host.call("nap", json!({"ms": 20})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    host.shutdown().await;
}

/// With fuel, an endless loop ends `crashed` when its fuel is spent, long before its timeout;
/// a short call is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_spends_its_fuel_is_stopped() {
    let dir = tempfile::tempdir().unwrap();
    install_component(dir.path(), "faults");
    let engine = WasmEngine::new(WasmLimits {
        fuel: Some(50_000_000),
        ..WasmLimits::default()
    })
    .unwrap();
    let (host, _) = host_of(
        dir.path(),
        DirOptions::in_process(),
        engine,
        RunnerConfig::default(),
    )
    .await;
    let r = host.call("spin", json!({})).await;
    assert_eq!(r.outcome, Outcome::Crashed, "{}", r.text());
    assert!(r.text().contains("fuel"), "{}", r.text());
    let r = host.call("nap", json!({"ms": 1})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_components_updates_logs_questions_and_blocks_reach_the_host() {
    let (host, _dir) = component_host("faults", RunnerConfig::default()).await;
    let (options, updates) = rho_tests::collecting_updates();
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
    while let Some(e) = wait_for(&mut events, Duration::from_millis(300), |e| {
        matches!(e.kind, EventKind::ToolExecutionLog { .. })
    })
    .await
    {
        if let EventKind::ToolExecutionLog { level, .. } = e.kind {
            levels.push(level);
        }
    }
    assert!(levels.contains(&LogLevel::Warning), "{levels:?}");

    let answerer =
        |_q: Question, _c: ToolCall| async move { Reply::Accepted(json!({"confirm": true})) };
    let options = CallOptions {
        answerer: Some(Arc::new(answerer)),
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

/// A component gets its directory's grants and nothing else: it reads under its read grant and
/// is refused a file beside it; it writes under its write grant and nowhere else; it opens a
/// connection only with the network grant; it sees only the granted environment keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_reaches_what_its_directorys_grants_name_and_nothing_else() {
    let base = tempfile::tempdir().unwrap();
    let [granted, other, out] = ["granted", "other", "out"].map(|d| base.path().join(d));
    for dir in [&granted, &other, &out] {
        std::fs::create_dir(dir).unwrap();
        std::fs::write(dir.join("a.txt"), "one\ntwo\n").unwrap();
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    // SAFETY: set before the hosts start; no other thread of this test reads the environment.
    unsafe { std::env::set_var("RHO_WASM_TEST_KEY", "seen") };
    let grants = Grants {
        read: vec![granted.clone()],
        write: vec![out.clone()],
        env: vec!["RHO_WASM_TEST_KEY".into()],
        ..Grants::default()
    };
    let plugins = tempfile::tempdir().unwrap();
    install_component(plugins.path(), "files");
    install_component(plugins.path(), "faults");
    let (host, _) = host_of(
        plugins.path(),
        granting(grants.clone()),
        engine(),
        RunnerConfig::default(),
    )
    .await;
    let read = |dir: &Path| json!({"path": dir.join("a.txt").display().to_string(), "start_line": 1, "end_line": 2});
    let r = host.call("read_passage", read(&granted)).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    assert_eq!(r.text(), "1 | one\n2 | two\n");
    let r = host.call("read_passage", read(&other)).await;
    assert_eq!(r.outcome, Outcome::Error, "{}", r.text());
    assert!(r.text().contains("cannot read"), "{}", r.text());
    let write =
        |dir: &Path| json!({"path": dir.join("w.txt").display().to_string(), "text": "written"});
    let r = host.call("write_file", write(&out)).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    assert_eq!(
        std::fs::read_to_string(out.join("w.txt")).unwrap(),
        "written"
    );
    for refused in [&granted, &other] {
        let r = host.call("write_file", write(refused)).await;
        assert_eq!(r.outcome, Outcome::Error, "{}", r.text());
        assert!(!refused.join("w.txt").exists());
    }
    let r = host
        .call("getenv", json!({"name": "RHO_WASM_TEST_KEY"}))
        .await;
    assert_eq!(r.text(), "seen");
    let r = host.call("getenv", json!({"name": "PATH"})).await;
    assert_eq!(r.text(), "(unset)");
    let r = host.call("connect", json!({"addr": addr})).await;
    assert_eq!(r.outcome, Outcome::Error, "{}", r.text());
    host.shutdown().await;

    // With the network granted, the same call connects.
    let networked = Grants {
        network: true,
        ..grants
    };
    let (host, _) = host_of(
        plugins.path(),
        granting(networked),
        engine(),
        RunnerConfig::default(),
    )
    .await;
    let r = host.call("connect", json!({"addr": addr})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    host.shutdown().await;
}

/// A component's `/tmp` is a scratch directory of its own, bounded by the engine's limit: its
/// files last from call to call, a write past the bound fails with a clear error (the call
/// ends `error`, the component serves on), and neither the host's `/tmp` nor another
/// component's scratch is reachable through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_components_scratch_directory_is_its_own_and_bounded() {
    let host_file = tempfile::Builder::new()
        .tempfile_in("/tmp")
        .unwrap()
        .into_temp_path();
    std::fs::write(&host_file, "the host's\n").unwrap();
    let plugins = tempfile::tempdir().unwrap();
    install_component(plugins.path(), "files");
    install_component(plugins.path(), "faults");
    let limits = WasmLimits {
        scratch_bytes: 1 << 20,
        ..WasmLimits::default()
    };
    let bus = rho_runtime::Bus::default();
    let mut events = bus.subscribe();
    let (host, _) = loaded(plugins.path(), DirOptions::in_process(), |b| {
        b.components(WasmEngine::new(limits).unwrap())
            .bus(bus.clone())
    })
    .await;
    let e = wait_for(
        &mut events,
        Duration::from_secs(5),
        |e| matches!(&e.kind, EventKind::PluginLoaded { plugin, .. } if plugin == "faults"),
    )
    .await
    .expect("faults loaded");
    let EventKind::PluginLoaded { sandbox, .. } = &e.kind else {
        unreachable!()
    };
    let sandbox = sandbox
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(sandbox.contains("scratch 1 MiB"), "{sandbox}");
    let write =
        |path: &str, kib: usize| json!({"path": path, "text": "x".repeat(1024), "times": kib});
    let r = host.call("write_file", write("/tmp/first", 600)).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    // The first file is still there (600 KiB of the 1 MiB): the second does not fit.
    let r = host.call("write_file", write("/tmp/second", 600)).await;
    assert_eq!(r.outcome, Outcome::Error, "{}", r.text());
    // As README says: the component reads WASI's bare I/O error, the text names why.
    assert!(
        r.text().contains("os error 29")
            && r.text()
                .ends_with("(its scratch directory /tmp is full: 1024 KiB, [wasm] scratch_mb)"),
        "{}",
        r.text()
    );
    // Full until the component frees space: emptying the part written makes room again.
    let r = host.call("write_file", write("/tmp/small", 10)).await;
    assert_eq!(r.outcome, Outcome::Error, "{}", r.text());
    let r = host.call("write_file", write("/tmp/second", 0)).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    let r = host.call("write_file", write("/tmp/small", 10)).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.text());
    let read = |path: &str| json!({"path": path, "start_line": 1, "end_line": 1});
    for path in [host_file.to_str().unwrap(), "/tmp/first"] {
        let r = host.call("read_passage", read(path)).await;
        assert_eq!(r.outcome, Outcome::Error, "{path}: {}", r.text());
    }
    host.shutdown().await;
}

/// A component that asks for more than its directory grants is refused at load with one line,
/// as an isolated plugin is; a `.wasm` that is not a component is refused, and the directory's
/// other plugins serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_are_refused_for_missing_grants_and_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    install_component(dir.path(), "needs");
    install_component(dir.path(), "echo");
    std::fs::write(dir.path().join("core.wasm"), b"\0asm\x01\0\0\0").unwrap();
    std::fs::write(dir.path().join("text.wasm"), b"hello").unwrap();
    let (host, report) = loaded(dir.path(), DirOptions::default(), |b| {
        b.components(engine())
    })
    .await;
    let errors = report.errors.join("\n");
    assert_eq!(report.errors.len(), 3, "{errors}");
    assert!(
        errors.contains("needs.wasm: refused: the plugin asks for reading"),
        "{errors}"
    );
    assert!(
        errors.contains("core.wasm: not a loadable library: a core WebAssembly module"),
        "{errors}"
    );
    assert!(
        errors.contains("text.wasm: not a loadable library: not a WebAssembly component"),
        "{errors}"
    );
    assert_eq!(host.call("echo", json!({"text": "x"})).await.text(), "x");
    host.shutdown().await;
    // Without an engine, `.wasm` files are not plugins at all.
    let (host, report) = loaded(dir.path(), DirOptions::default(), |b| b).await;
    assert!(
        report.errors.is_empty() && report.loaded.is_empty(),
        "{report:?}"
    );
    host.shutdown().await;
}

/// A watched directory's component replaced a hundred times while four callers call it: every
/// call answers, from one build or the other, and the last build serves at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_reloaded_under_a_stream_of_calls_loses_none() {
    let staging = tempfile::tempdir().unwrap();
    let [v2, default] = [("v2", "faults-v2.wasm"), ("", "faults.wasm")].map(|(tag, name)| {
        let to = staging.path().join(name);
        build_component("faults", (!tag.is_empty()).then_some(tag), &to);
        std::fs::read(to).unwrap()
    });
    let variants = [default, v2];
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("faults.wasm");
    std::fs::write(&target, &variants[0]).unwrap();
    let (host, _) = loaded(dir.path(), DirOptions::in_process(), |b| {
        b.components(engine()).watch(true)
    })
    .await;
    let mut sub = host.subscribe();
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let mut callers = Vec::new();
    for w in 0..4 {
        let (host, stop, calls) = (host.clone(), stop.clone(), calls.clone());
        callers.push(tokio::spawn(async move {
            let mut bad = Vec::new();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let c = call(&format!("w{w}-{n}"), "build_tag", json!({}));
                let r = host.call_with(&c, &CallOptions::default()).await;
                calls.fetch_add(1, Ordering::Relaxed);
                if r.outcome != Outcome::Ok {
                    bad.push(format!("{}: {} {}", c.id, r.outcome, &*r.text()));
                }
            }
            bad
        }));
    }
    for i in 1..=100 {
        install_bytes(&target, &variants[i % 2]);
        let reloaded = wait_for(&mut sub, COMPILE, |e| {
            matches!(e.kind, EventKind::PluginReloaded { .. })
        })
        .await;
        assert!(reloaded.is_some(), "reload {i} not seen");
    }
    stop.store(true, Ordering::Relaxed);
    let mut bad = Vec::new();
    for caller in callers {
        bad.extend(caller.await.unwrap());
    }
    assert!(
        bad.is_empty(),
        "{} failed calls, first: {:?}",
        bad.len(),
        bad.first()
    );
    assert!(
        calls.load(Ordering::Relaxed) > 100,
        "calls ran during the reloads"
    );
    let r = host.call("build_tag", json!({})).await;
    assert_eq!(
        (r.outcome, r.text().into_owned()),
        (Outcome::Ok, "default".into())
    );
    host.shutdown().await;
}

/// A compile cache on disk: what one engine compiled, a second one (a restart) takes from the
/// cache and does not compile. Shown by planting: the cached code of `echo` put in place of
/// `picture`'s, the second engine's `picture` is `echo` (which is why the cache directory is held
/// to a plugin directory's trust rules). A cache directory others can write is refused with one
/// line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compile_cache_serves_a_restart_and_refuses_a_directory_others_can_write() {
    let dir = tempfile::tempdir().unwrap();
    let [echo, picture] = ["echo", "picture"].map(|name| {
        let file = install_component(dir.path(), name);
        let bytes = std::fs::read(&file).unwrap();
        (file, bytes)
    });
    let cache = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().join("wasm");
    let cached = || WasmEngine::builder().cache_dir(&cache_dir).build().unwrap();
    let first = cached();
    let [echo_tools, picture_tools] = [&echo, &picture].map(|(file, bytes)| {
        let plugin = first.load(file, bytes, &Grants::default()).unwrap();
        plugin.tools().to_vec()
    });
    let mode = std::fs::metadata(&cache_dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    let cached_file = |bytes: &[u8]| {
        let sha = rho_runtime::sha256_hex(bytes);
        let found: Vec<PathBuf> = std::fs::read_dir(&cache_dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&sha))
            .collect();
        assert_eq!(found.len(), 1, "{found:?}");
        found[0].clone()
    };
    let (echo_cached, picture_cached) = (cached_file(&echo.1), cached_file(&picture.1));
    let second = cached();
    let plugin = second
        .load(&picture.0, &picture.1, &Grants::default())
        .unwrap();
    assert_eq!(plugin.tools(), picture_tools);
    std::fs::copy(&echo_cached, &picture_cached).unwrap();
    let planted = cached()
        .load(&picture.0, &picture.1, &Grants::default())
        .unwrap();
    assert_eq!(planted.tools(), echo_tools);
    // A cached file others could have written is not read: compiled again, and replaced.
    std::fs::set_permissions(&picture_cached, std::fs::Permissions::from_mode(0o666)).unwrap();
    let recompiled = cached()
        .load(&picture.0, &picture.1, &Grants::default())
        .unwrap();
    assert_eq!(recompiled.tools(), picture_tools);
    std::fs::set_permissions(&cache_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let refused = WasmEngine::builder().cache_dir(&cache_dir).build();
    let line = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(line.contains("writable by"), "{line}");
    assert!(!line.contains('\n'), "{line}");
}

/// The author's path, as a user types it: `rho plugin new greet --wasm` makes a crate whose
/// manifest says it is a component; `rho plugin dev --out DIR` builds `greet.wasm` and installs
/// it, and again after an edit (a watching host reloads it); `rho call` serves it from the
/// directory, through `rho`'s own engine; `rho plugin check` reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rho_plugin_new_wasm_and_dev_build_install_and_reload_a_component() {
    let place = tempfile::tempdir().unwrap();
    let cache = place.path().join("cache");
    let rho = |args: &[&str]| {
        let mut command = std::process::Command::new(rho_tests::rho_bin());
        command.args(args).env("XDG_CACHE_HOME", &cache);
        command
    };
    let api = workspace_dir().join("plugin-api");
    let made = rho(&["plugin", "new", "greet", "--wasm", "--api"])
        .arg(&api)
        .current_dir(place.path())
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let crate_dir = place.path().join("greet");
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains("[package.metadata.rho]\nbuild = \"component\""),
        "{manifest}"
    );
    let out = place.path().join("plugins");
    std::fs::create_dir(&out).unwrap();
    let (host, _) = loaded(&out, DirOptions::default(), |b| {
        b.components(engine()).watch(true)
    })
    .await;
    let target = rho_tests::built().parent().unwrap().to_owned();
    let mut dev = rho(&["plugin", "dev", "--out"])
        .arg(&out)
        .current_dir(&crate_dir)
        .env("CARGO_TARGET_DIR", &target)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let answer = |host: Host, want: &'static str| async move {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let r = host.call("greet", json!({"name": "Ada"})).await;
            if &*r.text() == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "never answered {want:?}: {}",
                &*r.text()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    answer(host.clone(), "Hello, Ada!").await;
    assert!(out.join("greet.wasm").is_file());
    let source = crate_dir.join("src/lib.rs");
    let edited = std::fs::read_to_string(&source)
        .unwrap()
        .replace("Hello, {}!", "Howdy, {}!");
    std::fs::write(&source, edited).unwrap();
    answer(host.clone(), "Howdy, Ada!").await;
    let _ = dev.kill();
    let _ = dev.wait();
    host.shutdown().await;
    let called = rho(&["call", "greet", "{\"name\":\"Ada\"}", "--plugins"])
        .arg(&out)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&called.stdout);
    assert!(
        called.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&called.stderr)
    );
    assert!(said.contains("Howdy, Ada!"), "{said}");
    // `rho` kept the compiled component in its cache.
    assert_eq!(
        std::fs::read_dir(cache.join("rho/wasm")).unwrap().count(),
        1
    );
    // `rho plugin check` reads a component as it reads a library; a file that is not one is
    // refused in one line.
    let checked = rho(&["plugin", "check", "--json"])
        .arg(out.join("greet.wasm"))
        .output()
        .unwrap();
    assert!(checked.status.success(), "{checked:?}");
    let report: serde_json::Value = serde_json::from_slice(&checked.stdout).unwrap();
    assert_eq!(report["plugin"], "greet");
    assert_eq!(report["interface_version"], 3);
    assert_eq!(report["tools"][0]["name"], "greet", "{report}");
    let bad = place.path().join("bad.wasm");
    std::fs::write(&bad, "not wasm").unwrap();
    let refused = rho(&["plugin", "check"]).arg(&bad).output().unwrap();
    assert_eq!(refused.status.code(), Some(1));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(said.contains("not a usable rho component"), "{said}");
}

/// `rho serve` serves components to the official MCP Python SDK as it serves libraries (the same
/// client script as `serve_edges.rs`'s, over a directory of `faults.wasm` and `echo.wasm`): 50
/// back-to-back updates arrive as 50 progress notifications before each answer, a 12 MB answer
/// is cut, and the session goes on.
#[test]
fn rho_serve_serves_components_to_the_python_sdk() {
    let plugins = tempfile::tempdir().unwrap();
    install_component(plugins.path(), "faults");
    install_component(plugins.path(), "echo");
    let cache = tempfile::tempdir().unwrap();
    for (requirement, name) in [("mcp>=2,<3", "mcp2"), ("mcp>=1.9,<2", "mcp1")] {
        let sdk = rho_tests::python_sdk(requirement, name);
        let mut client = std::process::Command::new("python3");
        client
            .arg(workspace_dir().join("tests/python/progress.py"))
            .arg(rho_tests::rho_bin())
            .arg(plugins.path())
            .env("PYTHONPATH", &sdk)
            .env("XDG_CACHE_HOME", cache.path());
        let report = rho_tests::client_report(client, requirement);
        for run in report["runs"].as_array().unwrap() {
            let progress = run["progress"].as_array().unwrap();
            assert_eq!(progress.len(), 50, "{requirement}: {run}");
            assert_eq!(progress[49], "update 50/50");
            assert_eq!(run["text"], "sent 50 updates");
        }
        assert_eq!(report["big_truncated"], true, "{requirement}");
        assert_eq!(report["after"], "still here", "{requirement}");
    }
}

/// A default compile cache that cannot be used (`~/.cache/rho/wasm` writable by others) is said
/// once, when a component first loads; a host with no component says nothing of it (before: the
/// line came first thing from every command, a second line before a one-line error).
#[test]
fn an_unusable_default_compile_cache_is_said_once_and_only_with_a_component() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let cache = home.path().join(".cache/rho/wasm");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    // Components compile slowly on a loaded machine: `rho tools` waits for them (what is
    // tested is what is said of the cache, not how long a compile takes).
    let config = home.path().join("rho.toml");
    std::fs::write(&config, "[runner]\nload_wait_ms = 120000\n").unwrap();
    let rho = |plugins: &Path| {
        std::process::Command::new(rho_tests::rho_bin())
            .args(["tools", "--plugins"])
            .arg(plugins)
            .arg("--config")
            .arg(&config)
            .env("HOME", home.path())
            .env_remove("XDG_CACHE_HOME")
            .output()
            .unwrap()
    };
    let natives = rho_tests::plugin_dir(&["echo"]);
    let out = rho(natives.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stderr.contains("cache"),
        "no component, no word of its cache: {stderr}"
    );

    let components = tempfile::tempdir().unwrap();
    install_component(components.path(), "files");
    install_component(components.path(), "faults");
    let out = rho(components.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("the compiled-component cache cannot be used"))
        .collect();
    assert_eq!(said.len(), 1, "said once: {stderr}");
    assert!(
        said[0].ends_with("compiled components are kept in memory only"),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("read_passage"));
}
