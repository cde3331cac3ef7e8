//! [1/9]: an isolated plugin cannot kill, freeze, spy on, rewrite or outlive its host. Each test
//! runs the `attacks` fixture plugin (a plugin that tries what it must not) in worker processes
//! and checks from the host's side that the attempt failed and the host is whole.

//!
//! Linux only: the attacks are on Linux's sandbox (the `attacks` fixture is empty elsewhere).

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rho_runtime::{
    CallOptions, DirOptions, Grants, Host, HostBuilder, Isolation, Outcome, WorkerOptions,
};
use rho_tests::{call, host_with, install, plugin_lib, rho_bin, timeout};
use serde_json::{Value, json};

/// Where the plugin directories of these tests are made (workers name their plugin's path).
/// (With this process's pid: two test runs at once count only their own sandboxes.)
fn test_dirs() -> String {
    format!("rho-sandbox-tests-{}", std::process::id())
}

/// These tests count processes: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A plugin directory outside `/tmp` (inside the sandbox `/tmp` is the plugin's scratch
/// directory, so a plugin directory under `/tmp` would not even be visible), readable by the
/// plugins' identity.
fn plugin_dir(names: &[&str]) -> tempfile::TempDir {
    let base = rho_tests::host_dir(&test_dirs());
    let dir = tempfile::tempdir_in(&base).unwrap();
    for name in names {
        install(dir.path(), name);
    }
    dir
}

/// A host serving isolated copies of some plugins, with the directory it serves them from.
struct Sandbox {
    host: Host,
    dir: tempfile::TempDir,
}

impl Sandbox {
    /// The `attacks` plugin alone (so the processes counted are its workers' only).
    async fn new(options: WorkerOptions, timeout_ms: u64) -> Sandbox {
        Sandbox::with(&["attacks"], options, timeout_ms).await
    }

    async fn with(names: &[&str], options: WorkerOptions, timeout_ms: u64) -> Sandbox {
        Sandbox::build(names, options, |b| b.runner(timeout(timeout_ms))).await
    }

    /// The plugins `names`, isolated with `options`, on a host set up by `configure`.
    async fn build(
        names: &[&str],
        options: WorkerOptions,
        configure: impl FnOnce(HostBuilder) -> HostBuilder,
    ) -> Sandbox {
        let dir = plugin_dir(names);
        let (host, report) = host_with(
            dir.path(),
            DirOptions {
                isolation: Isolation::Process(options),
                ..DirOptions::in_process()
            },
            configure,
        )
        .await;
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        Sandbox { host, dir }
    }

    async fn run(&self, tool: &str, args: Value) -> rho_runtime::ToolResult {
        self.host
            .call_with(&call("c", tool, args), &CallOptions::default())
            .await
    }

    /// Stops the host: its workers stop, its private copies go.
    async fn shutdown(&self) {
        self.host.shutdown().await;
    }
}

fn options(grants: Grants) -> WorkerOptions {
    WorkerOptions {
        grants,
        spares: 0,
        ..WorkerOptions::default()
    }
}

fn processes_granted() -> WorkerOptions {
    options(Grants {
        processes: true,
        ..Grants::default()
    })
}

/// Live processes in the sandboxes of these tests: processes in a PID namespace below this
/// machine's that holds a worker of a plugin directory made by these tests (other hosts on the
/// machine, with their own sandboxes, are not counted), with their names. A process a plugin left
/// behind stays in its sandbox's namespace, so it is counted wherever it was reparented.
fn sandboxed_processes() -> Vec<(i32, String)> {
    struct Seen {
        pid: i32,
        name: String,
        ns: String,
        ours: bool,
    }
    let mut seen = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_owned())
                .unwrap_or_default()
        };
        if field("NSpid:").split_whitespace().count() < 2 || field("State:").starts_with('Z') {
            continue;
        }
        let Ok(ns) = std::fs::read_link(format!("/proc/{pid}/ns/pid")) else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        seen.push(Seen {
            pid,
            name: field("Name:"),
            ns: ns.to_string_lossy().into_owned(),
            ours: String::from_utf8_lossy(&cmdline).contains(&test_dirs()),
        });
    }
    let ours: Vec<String> = seen
        .iter()
        .filter(|s| s.ours)
        .map(|s| s.ns.clone())
        .collect();
    seen.into_iter()
        .filter(|s| ours.contains(&s.ns))
        .map(|s| (s.pid, s.name))
        .collect()
}

/// What a failure needs to say of processes left: each one's state, parent, ids in its
/// namespaces, parent-death signal's holder and command line (it failed once in CI and once in
/// five runs elsewhere, never in 13 runs here, 8 of them with both cores saturated).
fn described(left: &[(i32, String)]) -> String {
    left.iter()
        .map(|(pid, name)| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let field = |key: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(key))
                    .map(|v| v.trim().to_owned())
                    .unwrap_or_default()
            };
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                .unwrap_or_default();
            format!(
                "\n  {pid} {name}: state {}, ppid {}, nspid {}, sigcgt {}: {cmdline}",
                field("State:"),
                field("PPid:"),
                field("NSpid:"),
                field("SigCgt:")
            )
        })
        .collect()
}

/// Waits up to `within` for the sandboxed processes to be `want` in number; returns the last
/// count seen.
async fn settle(want: usize, within: Duration) -> Vec<(i32, String)> {
    let deadline = Instant::now() + within;
    loop {
        let now = sandboxed_processes();
        if now.len() == want || Instant::now() >= deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const MODES: [&str; 5] = ["child", "setsid", "fork", "double_fork", "exec"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_cannot_signal_or_freeze_the_host_or_any_other_process() {
    let _one = ONE_AT_A_TIME.lock().await;
    let host = Sandbox::with(&["attacks", "echo"], options(Grants::default()), 5_000).await;
    let me = std::process::id();
    for signal in ["TERM", "KILL", "STOP"] {
        let r = host.run("signal_parent", json!({"signal": signal})).await;
        assert_eq!(r.outcome, Outcome::Error, "{signal}: {}", &*r.text());
        assert!(r.text().starts_with("denied: "), "{}", &*r.text());
        let r = host
            .run("signal_pid", json!({"pid": me, "signal": signal}))
            .await;
        assert_eq!(r.outcome, Outcome::Error, "{signal}: {}", &*r.text());
        // The host is not even visible to the plugin.
        assert!(
            r.text().contains("No such process") || r.text().contains("not permitted"),
            "{}",
            &*r.text()
        );
    }
    // The host is alive, not stopped, and its workers serve.
    let state = std::fs::read_to_string(format!("/proc/{me}/stat")).unwrap();
    let after = &state[state.rfind(')').unwrap() + 2..];
    assert!(after.starts_with('R') || after.starts_with('S'), "{after}");
    let r = host.run("echo", json!({"text": "still here"})).await;
    assert_eq!((r.outcome, &*r.text()), (Outcome::Ok, "still here"));
    host.shutdown().await;
}

#[test]
fn signals_do_not_end_or_stop_rho_call() {
    let _one = ONE_AT_A_TIME.blocking_lock();
    let dir = plugin_dir(&["attacks"]);
    let plugins = dir.path().to_str().unwrap();
    for signal in ["TERM", "KILL", "STOP"] {
        let mut child = Command::new(rho_bin())
            .args(["call", "signal_parent", "--isolate", "--plugins", plugins])
            .arg(json!({ "signal": signal }).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "rho call hangs after {signal}");
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        // An error result (exit 1), not death by the signal (143, 137) or a stop.
        assert_eq!(status.code(), Some(1), "{signal}: {stderr}");
        assert!(stderr.contains("denied: "), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosts_environment_descriptors_and_processes_stay_hidden() {
    let _one = ONE_AT_A_TIME.lock().await;
    // SAFETY: set before any worker starts; read by the workers only.
    unsafe { std::env::set_var("RHO_SANDBOX_SECRET", "do-not-leak") };
    let host = Sandbox::new(options(Grants::default()), 5_000).await;
    let me = std::process::id();
    for (tool, path) in [
        ("read_file", format!("/proc/{me}/environ")),
        ("list_dir", format!("/proc/{me}/fd")),
        ("read_file", format!("/proc/{me}/cmdline")),
        ("read_file", "/proc/1/environ".to_owned()),
    ] {
        let r = host.run(tool, json!({ "path": path })).await;
        assert_eq!(r.outcome, Outcome::Error, "{path}: {}", &*r.text());
        assert!(!r.text().contains("do-not-leak"), "{}", &*r.text());
    }
    let r = host
        .run("env_var", json!({"name": "RHO_SANDBOX_SECRET"}))
        .await;
    assert_eq!(&*r.text(), "ok: (unset)");
    // Its own fresh /proc: the sandbox's init and the plugin process, nothing of the host.
    let r = host.run("count_processes", json!({})).await;
    assert_eq!(&*r.text(), "ok: 2");
    let r = host.run("ids", json!({})).await;
    assert!(r.text().contains("pid=2 ppid=1"), "{}", &*r.text());
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert!(r.text().starts_with("ok: uid=65534 "), "{}", &*r.text());
    }
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_directories_are_read_only_and_grants_open_exactly_their_paths() {
    let _one = ONE_AT_A_TIME.lock().await;
    let base = rho_tests::host_dir(&test_dirs());
    let granted = tempfile::tempdir_in(&base).unwrap();
    let other = tempfile::tempdir_in(&base).unwrap();
    let readable = tempfile::tempdir_in(&base).unwrap();
    std::fs::write(readable.path().join("data.txt"), "granted data").unwrap();
    std::fs::write(other.path().join("data.txt"), "not granted").unwrap();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        // The plugins run as nobody: a grant opens the sandbox, the file modes still apply.
        for dir in [granted.path(), other.path(), readable.path()] {
            std::os::unix::fs::chown(dir, Some(65534), Some(65534)).unwrap();
        }
        std::os::unix::fs::chown(readable.path().join("data.txt"), Some(65534), None).unwrap();
        std::os::unix::fs::chown(other.path().join("data.txt"), Some(65534), None).unwrap();
    }
    let host = Sandbox::new(
        options(Grants {
            write: vec![granted.path().to_owned()],
            read: vec![readable.path().to_owned()],
            ..Grants::default()
        }),
        5_000,
    )
    .await;
    let plugin = host.dir.path().join("libattacks.so");
    let before = std::fs::read(&plugin).unwrap();
    for target in [
        plugin.clone(),
        host.dir.path().join("libplanted.so"),
        other.path().join("x.txt"),
        plugin_lib("echo"),
    ] {
        let r = host
            .run(
                "write_file",
                json!({"path": target.to_str().unwrap(), "text": "planted"}),
            )
            .await;
        assert_eq!(
            r.outcome,
            Outcome::Error,
            "{}: {}",
            target.display(),
            &*r.text()
        );
        // Under /tmp (a checkout there) the host's path is not even visible in the sandbox.
        let hidden = target.starts_with("/tmp") && r.text().contains("No such file");
        assert!(hidden || r.text().contains("[sandbox: "), "{}", &*r.text());
    }
    assert_eq!(
        std::fs::read(&plugin).unwrap(),
        before,
        "the plugin file changed"
    );
    assert!(!host.dir.path().join("libplanted.so").exists());
    let r = host
        .run(
            "write_file",
            json!({"path": granted.path().join("out.txt").to_str().unwrap(), "text": "hello"}),
        )
        .await;
    assert_eq!((r.outcome, &*r.text()), (Outcome::Ok, "ok: wrote 5 bytes"));
    assert_eq!(
        std::fs::read_to_string(granted.path().join("out.txt")).unwrap(),
        "hello"
    );
    let r = host
        .run(
            "read_file",
            json!({"path": readable.path().join("data.txt").to_str().unwrap()}),
        )
        .await;
    assert_eq!(&*r.text(), "ok: 12 bytes: granted data");
    let r = host
        .run(
            "read_file",
            json!({"path": other.path().join("data.txt").to_str().unwrap()}),
        )
        .await;
    assert_eq!(r.outcome, Outcome::Error, "{}", &*r.text());
    // The scratch directory is the plugin's own /tmp.
    let r = host
        .run(
            "write_file",
            json!({"path": "/tmp/scratch.txt", "text": "mine"}),
        )
        .await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_is_denied_unless_granted() {
    let _one = ONE_AT_A_TIME.lock().await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let denied = Sandbox::new(options(Grants::default()), 5_000).await;
    let r = denied.run("connect", json!({ "addr": addr })).await;
    assert_eq!(r.outcome, Outcome::Error, "{}", &*r.text());
    assert!(
        r.text()
            .ends_with("[sandbox: no network is granted to this plugin]"),
        "{}",
        &*r.text()
    );
    denied.shutdown().await;
    let granted = Sandbox::new(
        options(Grants {
            network: true,
            ..Grants::default()
        }),
        5_000,
    )
    .await;
    let r = granted.run("connect", json!({ "addr": addr })).await;
    assert_eq!((r.outcome, &*r.text()), (Outcome::Ok, "ok: connected"));
    granted.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_need_a_grant_and_die_at_the_end_of_each_call() {
    let _one = ONE_AT_A_TIME.lock().await;
    let denied = Sandbox::new(options(Grants::default()), 5_000).await;
    for mode in MODES {
        let r = denied.run("spawn", json!({ "mode": mode })).await;
        assert_eq!(r.outcome, Outcome::Error, "{mode}: {}", &*r.text());
        assert!(
            r.text().contains("start processes (not granted)"),
            "{}",
            &*r.text()
        );
    }
    denied.shutdown().await;
    assert_eq!(settle(0, Duration::from_secs(5)).await, []);

    let host = Sandbox::new(processes_granted(), 5_000).await;
    for run in 0..20 {
        let mode = MODES[run % MODES.len()];
        let r = host.run("spawn", json!({ "mode": mode })).await;
        assert_eq!(r.outcome, Outcome::Ok, "{mode}: {}", &*r.text());
        // One worker: its init and its plugin process, and nothing the call started.
        let left = sandboxed_processes();
        assert_eq!(left.len(), 2, "run {run} ({mode}) left {left:?}");
    }
    host.shutdown().await;
    assert_eq!(settle(0, Duration::from_secs(5)).await, []);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_die_with_a_worker_killed_at_its_timeout() {
    let _one = ONE_AT_A_TIME.lock().await;
    let options = WorkerOptions {
        cancel_grace: Duration::from_millis(50),
        ..processes_granted()
    };
    // Twenty timeouts in a row would quarantine the tool.
    let host = Sandbox::build(&["attacks"], options, |b| {
        b.runner(timeout(200))
            .quarantine(rho_runtime::QuarantinePolicy {
                max_failures: 0,
                window: Duration::from_secs(1),
                ..Default::default()
            })
    })
    .await;
    for run in 0..20 {
        let mode = MODES[run % MODES.len()];
        let r = host.run("spawn_then_hang", json!({ "mode": mode })).await;
        assert_eq!(r.outcome, Outcome::TimedOut, "{mode}: {}", &*r.text());
        let left = settle(0, Duration::from_secs(5)).await;
        assert_eq!(left, [], "run {run} ({mode})");
    }
    host.shutdown().await;
}

/// Starts `rho call TOOL ARGS --isolate --grant-processes` on a fresh copy of the attacks plugin,
/// its stdout and stderr to `log` (what a failed assertion shows).
fn rho_call(dir: &Path, tool: &str, args: Value, log: &Path) -> std::process::Child {
    let out = std::fs::File::create(log).unwrap();
    Command::new(rho_bin())
        .args(["call", tool, "--isolate", "--grant-processes"])
        .arg(args.to_string())
        .args(["--timeout-ms", "60000", "--plugins"])
        .arg(dir)
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_die_with_their_host_whether_it_exits_or_is_killed() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = plugin_dir(&["attacks"]);
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("rho-call.log");
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    for run in 0..20 {
        let mode = MODES[run % MODES.len()];
        // A clean exit right after the call.
        let status = rho_call(dir.path(), "spawn", json!({ "mode": mode }), &log)
            .wait()
            .unwrap();
        assert!(status.success(), "{mode}: {status}: {}", said());
        let left = settle(0, Duration::from_secs(5)).await;
        assert!(
            left.is_empty(),
            "exit, run {run} ({mode}): left {}\nrho call said: {}",
            described(&left),
            said()
        );
        // SIGKILL of the host while the call runs, once the processes are up.
        let mut child = rho_call(dir.path(), "spawn_then_hang", json!({ "mode": mode }), &log);
        let deadline = Instant::now() + Duration::from_secs(10);
        while sandboxed_processes().len() < 3 {
            assert!(
                Instant::now() < deadline,
                "the call never spawned ({mode}): {:?} {}",
                sandboxed_processes(),
                said()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let left = settle(0, Duration::from_secs(5)).await;
        assert!(
            left.is_empty(),
            "kill, run {run} ({mode}): left {}\nrho call said: {}",
            described(&left),
            said()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_fork_is_seen_at_once() {
    let _one = ONE_AT_A_TIME.lock().await;
    let host = Sandbox::new(processes_granted(), 30_000).await;
    let started = Instant::now();
    let r = host.run("fork_then_crash", json!({})).await;
    let took = started.elapsed();
    assert_eq!(r.outcome, Outcome::Crashed, "{}", &*r.text());
    assert!(r.text().contains("SIGSEGV"), "{}", &*r.text());
    // The forked child held the channel; still the crash ends the call long before the timeout.
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert_eq!(settle(0, Duration::from_secs(5)).await, []);
    let r = host.run("ids", json!({})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_left_without_descriptors_is_replaced() {
    let _one = ONE_AT_A_TIME.lock().await;
    let options = WorkerOptions {
        max_workers: 1,
        ..options(Grants::default())
    };
    let host = Sandbox::new(options, 5_000).await;
    let r = host.run("exhaust_fds", json!({})).await;
    assert!(r.text().contains("Too many open files"), "{}", &*r.text());
    // Another tool of the same plugin needs a descriptor: a fresh worker serves it.
    let r = host
        .run("read_file", json!({"path": "/etc/hostname"}))
        .await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_workers_start_while_the_host_holds_300_descriptors() {
    let _one = ONE_AT_A_TIME.lock().await;
    let held: Vec<std::fs::File> = (0..300)
        .map(|_| std::fs::File::open("/dev/null").unwrap())
        .collect();
    let options = WorkerOptions {
        max_workers: 64,
        ..options(Grants::default())
    };
    let host = Sandbox::with(&["faults"], options, 60_000).await;
    let calls = (0..64).map(|i| {
        let host = host.host.clone();
        async move {
            host.call_with(
                &call(&format!("c{i}"), "sleep", json!({"ms": 1500})),
                &CallOptions::default(),
            )
            .await
        }
    });
    let results = futures_util::future::join_all(calls).await;
    let failed: Vec<String> = results
        .iter()
        .filter(|r| r.outcome != Outcome::Ok)
        .map(|r| r.text().into_owned())
        .collect();
    assert!(
        failed.is_empty(),
        "{} failed: {:?}",
        failed.len(),
        failed.first()
    );
    drop(held);
    host.shutdown().await;
}

#[test]
fn an_unsafe_tmpdir_is_avoided() {
    let _one = ONE_AT_A_TIME.blocking_lock();
    let base = rho_tests::host_dir(&test_dirs());
    let unsafe_tmp = tempfile::tempdir_in(&base).unwrap();
    // World-writable and not sticky: anyone could swap what the host puts there.
    std::fs::set_permissions(unsafe_tmp.path(), PermissionsExt::from_mode(0o777)).unwrap();
    let dir = plugin_dir(&["attacks", "echo"]);
    for isolate in [true, false] {
        let mut cmd = Command::new(rho_bin());
        cmd.args(["call", "echo", r#"{"text":"safe"}"#, "--plugins"])
            .arg(dir.path())
            .env("TMPDIR", unsafe_tmp.path())
            .env("RUST_LOG", "warn");
        if !isolate {
            cmd.arg("--in-process");
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "safe");
        assert!(
            stderr.contains("an unsafe temporary directory was avoided"),
            "{stderr}"
        );
        let left: Vec<PathBuf> = std::fs::read_dir(unsafe_tmp.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        assert_eq!(left, Vec::<PathBuf>::new());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosts_tmp_sockets_and_other_families_are_out_of_reach() {
    let _one = ONE_AT_A_TIME.lock().await;
    // A unix socket of a host service, open to everyone, outside /tmp and /run.
    let base = rho_tests::host_dir(&test_dirs());
    let service = tempfile::tempdir_in(&base).unwrap();
    std::fs::set_permissions(service.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let socket = service.path().join("service.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    std::fs::set_permissions(&socket, PermissionsExt::from_mode(0o777)).unwrap();
    // A file in the host's /tmp.
    let marker = tempfile::NamedTempFile::new().unwrap();
    std::fs::set_permissions(marker.path(), PermissionsExt::from_mode(0o644)).unwrap();
    let host = Sandbox::new(processes_granted(), 5_000).await;
    let r = host
        .run("connect_unix", json!({"path": socket.to_str().unwrap()}))
        .await;
    assert_eq!(r.outcome, Outcome::Error, "{}", &*r.text());
    let r = host
        .run(
            "read_file",
            json!({"path": marker.path().to_str().unwrap()}),
        )
        .await;
    assert!(r.text().contains("No such file"), "{}", &*r.text());
    let r = host.run("list_dir", json!({"path": "/tmp"})).await;
    assert_eq!(&*r.text(), "ok: ", "the plugin's /tmp is its own and empty");
    let r = host.run("cwd", json!({})).await;
    assert_eq!(&*r.text(), "ok: /tmp");
    // vsock (the hypervisor) and raw packets: refused; plain IP sockets stay (no route anyway).
    for family in [libc::AF_VSOCK, libc::AF_PACKET, libc::AF_UNIX] {
        let r = host.run("socket_family", json!({ "family": family })).await;
        assert_eq!(r.outcome, Outcome::Error, "family {family}: {}", &*r.text());
    }
    let r = host
        .run("socket_family", json!({ "family": libc::AF_INET }))
        .await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
    // Namespaces of its own, memfds, other processes' limits: refused even with processes
    // granted.
    for (tool, args) in [
        ("clone_ns", json!({})),
        ("memfd", json!({"mib": 8})),
        ("prlimit_init", json!({})),
    ] {
        let r = host.run(tool, args).await;
        assert_eq!(r.outcome, Outcome::Error, "{tool}: {}", &*r.text());
        assert!(
            r.text().contains("Operation not permitted"),
            "{tool}: {}",
            &*r.text()
        );
    }
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scratch_space_is_bounded_and_threads_left_running_cost_the_worker() {
    let _one = ONE_AT_A_TIME.lock().await;
    let options = WorkerOptions {
        max_workers: 1,
        limits: rho_runtime::WorkerLimits {
            scratch_bytes: 8 << 20,
            ..rho_runtime::WorkerLimits::default()
        },
        ..options(Grants::default())
    };
    let host = Sandbox::new(options, 10_000).await;
    let r = host.run("fill_tmp", json!({"mib": 64})).await;
    assert_eq!(r.outcome, Outcome::Error, "{}", &*r.text());
    assert!(
        r.text().contains("No space left on device"),
        "{}",
        &*r.text()
    );
    assert_eq!(host.run("call_counter", json!({})).await.text(), "ok: 1");
    assert_eq!(host.run("call_counter", json!({})).await.text(), "ok: 2");
    // A thread left running: the worker is not given another call.
    let r = host.run("background_thread", json!({})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
    assert_eq!(host.run("call_counter", json!({})).await.text(), "ok: 1");
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_worker_announces_is_checked_by_the_host() {
    let _one = ONE_AT_A_TIME.lock().await;
    let forging = rho_tests::attacks_forging();
    let dir = plugin_dir(&["echo"]);
    std::fs::copy(&forging, dir.path().join("libattacks.so")).unwrap();
    let (host, report) = host_with(
        dir.path(),
        DirOptions {
            isolation: Isolation::Process(options(Grants::default())),
            ..DirOptions::in_process()
        },
        |b| b,
    )
    .await;
    let errors = report.errors.join("\n");
    assert!(!errors.contains('\u{1b}'), "{errors:?}");
    for refusal in [
        "tool \"bad name/../with spaces\" refused: a tool name must match",
        "tool `dup` refused: the plugin lists it twice",
        "tool `listy` refused: its parameters are not a JSON Schema object",
        "\\u{1b}[2Jplanted line",
    ] {
        assert!(errors.contains(refusal), "{refusal}: {errors}");
    }
    for tool in host.tools() {
        assert!(
            rho_runtime::plugin_api::is_valid_tool_name(&tool.name),
            "{:?}",
            tool.name
        );
        assert!(
            tool.plugin
                .as_deref()
                .is_some_and(|p| !p.contains('\u{1b}'))
        );
    }
    assert!(host.tools().iter().any(|t| t.name == "echo"));
    host.shutdown().await;
}

#[test]
fn rho_call_shows_no_escape_sequence_of_a_plugin() {
    let _one = ONE_AT_A_TIME.blocking_lock();
    let dir = plugin_dir(&["attacks"]);
    let out = Command::new(rho_bin())
        .args(["call", "ansi", "{}", "--isolate", "--plugins"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        !stdout.contains('\u{1b}') && !stdout.contains('\u{9b}'),
        "{stdout:?}"
    );
    assert!(stdout.contains("\\u{1b}]0;PWNED"), "{stdout:?}");
    assert!(stdout.contains("after\nline two"), "{stdout:?}");
}
