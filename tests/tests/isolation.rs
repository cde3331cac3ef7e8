//! [5/8]: untrusted plugins out of process: every fault ends its call with the right outcome and
//! text, the host lives, the counters move, the next call answers; no worker outlives its use.

#![allow(clippy::unwrap_used)] // test helpers fail loudly

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rho_runtime::{
    BusItem, CallOptions, DirOptions, EventKind, Gate, GateCtx, Host, HostBuilder, Isolation,
    Outcome, ToolCall, Verdict, WorkerOptions,
};
use rho_tests::{call, gated, host_with, plugin_dir, timeout};
use serde_json::{Value, json};
use tokio_stream::StreamExt;

/// The tests of this file look at the process table and this process's memory: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn isolated(options: WorkerOptions) -> DirOptions {
    DirOptions {
        isolation: Isolation::Process(options),
        ..DirOptions::in_process()
    }
}

fn small_frames() -> WorkerOptions {
    WorkerOptions {
        max_frame: 1 << 20,
        ..WorkerOptions::default()
    }
}

/// A host serving isolated copies of `echo`, `faults` and `picture`, and the directory it serves
/// them from (removed when this is dropped).
struct Served {
    host: Host,
    dir: tempfile::TempDir,
}

/// Serves the three plugins isolated with `options`, on a host set up by `configure`.
async fn serve(
    options: WorkerOptions,
    configure: impl FnOnce(HostBuilder) -> HostBuilder,
) -> Served {
    let dir = plugin_dir(&["echo", "faults", "picture"]);
    let (host, report) = host_with(dir.path(), isolated(options), configure).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    Served { host, dir }
}

async fn run(host: &Host, id: &str, tool: &str, args: Value) -> rho_runtime::ToolResult {
    host.call_with(&call(id, tool, args), &CallOptions::default())
        .await
}

/// The live (not zombie) `rho-worker` children of this process.
fn live_workers() -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let comm = &stat[stat.find('(').unwrap() + 1..close];
        let rest: Vec<&str> = stat[close + 2..].split(' ').collect();
        let (state, ppid) = (rest[0], rest[1].parse::<i32>().unwrap_or(0));
        if ppid == me && comm.starts_with("rho-worker") && state != "Z" {
            found.push(pid);
        }
    }
    found
}

async fn no_workers_within(limit: Duration) -> Vec<i32> {
    let deadline = Instant::now() + limit;
    loop {
        let left = live_workers();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_ends_its_call_and_the_next_call_answers() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Served { host, dir: _dir } = serve(small_frames(), |b| b.runner(timeout(500))).await;
    let mut events = host.subscribe();
    let cases: Vec<(&str, Value, Outcome, &str)> = vec![
        (
            "panic",
            json!({"message": "boom"}),
            Outcome::Crashed,
            "tool `panic` panicked at plugins/faults/src/lib.rs:",
        ),
        (
            "abort",
            json!({}),
            Outcome::Crashed,
            "the plugin's worker process died: killed by signal 6 (SIGABRT) during the call",
        ),
        (
            "segfault",
            json!({}),
            Outcome::Crashed,
            "the plugin's worker process died: killed by signal 11 (SIGSEGV) during the call",
        ),
        (
            "exit_process",
            json!({"code": 0}),
            Outcome::Crashed,
            "the plugin's worker process died: exited with status 0 during the call",
        ),
        (
            "exit_process",
            json!({"code": 7}),
            Outcome::Crashed,
            "the plugin's worker process died: exited with status 7 during the call",
        ),
        (
            "spin",
            json!({}),
            Outcome::TimedOut,
            "tool `spin` timed out after 500 ms",
        ),
        (
            "big_output",
            json!({"bytes": 2 << 20}),
            Outcome::Crashed,
            "the plugin's worker broke the protocol: a frame of ",
        ),
        (
            "alloc",
            json!({"mib": 4096}),
            Outcome::Crashed,
            "the plugin's worker process died: killed by signal 6 (SIGABRT) during the call (its last words on stderr: memory allocation of",
        ),
        (
            "print",
            json!({"text": "{\"t\":\"answer\"} noise on stdout"}),
            Outcome::Ok,
            "printed 30 bytes",
        ),
        (
            "updates",
            json!({"count": 3, "interval_ms": 5}),
            Outcome::Ok,
            "sent 3 updates",
        ),
        ("fail", json!({"message": "no"}), Outcome::Error, "no"),
        (
            "nope",
            json!({}),
            Outcome::UnknownTool,
            "unknown tool `nope`",
        ),
    ];
    for (i, (tool, args, outcome, text)) in cases.iter().enumerate() {
        let id = format!("{tool}-{i}");
        let r = run(&host, &id, tool, args.clone()).await;
        assert_eq!(r.outcome, *outcome, "{tool}: {}", &*r.text());
        assert!(r.text().starts_with(text), "{tool}: {}", &*r.text());
        // The host lives and the plugin answers the next call.
        let next = run(&host, &format!("next-{i}"), "build_tag", json!({})).await;
        assert_eq!(
            (next.outcome, &*next.text()),
            (Outcome::Ok, "default"),
            "after {tool}"
        );
    }
    let r = run(&host, "frame", "big_output", json!({"bytes": 2 << 20})).await;
    assert!(
        r.text().ends_with("exceeds the limit of 1048576 bytes"),
        "{}",
        &*r.text()
    );
    // Partial updates crossed the channel as events.
    let mut updates = Vec::new();
    while let Ok(Some(BusItem::Event(e))) =
        tokio::time::timeout(Duration::from_millis(50), events.next()).await
    {
        if let EventKind::ToolExecutionUpdate { partial, .. } = &e.kind {
            updates.push(partial.clone());
        }
    }
    assert_eq!(updates, ["update 1/3", "update 2/3", "update 3/3"]);
    // The counters moved, against the plugin's tools.
    let stats: HashMap<String, rho_runtime::ToolStats> = host
        .stats()
        .into_iter()
        .map(|s| (s.tool.clone(), s))
        .collect();
    assert_eq!(stats["exit_process"].crashed, 2);
    assert_eq!(stats["spin"].timed_out, 1);
    assert_eq!(stats["segfault"].crashed, 1);
    assert_eq!(stats["big_output"].crashed, 2);
    assert_eq!(stats["spin"].origin.release(), "faults@0.1.0");
    assert!(stats["spin"].origin.is_plugin("faults"));
    host.shutdown().await;
    let left = no_workers_within(Duration::from_secs(3)).await;
    assert!(left.is_empty(), "workers left behind: {left:?}");
}

/// Waits `delay` in the gate.
struct SlowGate(Duration);

#[async_trait::async_trait]
impl Gate for SlowGate {
    async fn check(&self, _call: &ToolCall, _ctx: &GateCtx) -> Verdict {
        tokio::time::sleep(self.0).await;
        Verdict::Allow
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_and_timeout_clock_behave_as_in_process() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Served { host, dir: _dir } =
        serve(WorkerOptions::default(), |b| b.runner(timeout(250))).await;
    let gate: Arc<dyn Gate> = Arc::new(SlowGate(Duration::from_millis(300)));
    let r = host
        .call_with(&call("1", "sleep", json!({"ms": 200})), &gated(gate))
        .await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
    // Cancellation crosses the channel: the tool sees its flag and the call still ends at the timeout.
    let started = Instant::now();
    let r = run(&host, "2", "spin_cancellable", json!({})).await;
    assert_eq!(r.outcome, Outcome::TimedOut);
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "{:?}",
        started.elapsed()
    );
    let r = run(&host, "3", "echo", json!({"text": "after"})).await;
    assert_eq!(&*r.text(), "after");
    // An image crosses as raw bytes.
    let r = run(&host, "4", "checkerboard", json!({"size": 32})).await;
    assert_eq!(r.output.images()[0].mime_type, "image/png");
    assert_eq!(&r.output.images()[0].bytes[..4], b"\x89PNG");
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_get_a_clean_environment_and_only_their_channel() {
    let _one = ONE_AT_A_TIME.lock().await;
    // SAFETY: set before any worker starts; read by the workers only.
    unsafe { std::env::set_var("RHO_TEST_SECRET", "do-not-leak") };
    // A descriptor the host leaks to children (no close-on-exec): workers must not get it.
    // SAFETY: duplicating stdin to a number >= 20 has no memory effects.
    let leaked = unsafe { libc::fcntl(0, libc::F_DUPFD, 20) };
    assert!(leaked >= 20);
    let Served { host, dir: _dir } =
        serve(WorkerOptions::default(), |b| b.runner(timeout(5_000))).await;
    let r = run(&host, "1", "getenv", json!({"name": "RHO_TEST_SECRET"})).await;
    assert_eq!(&*r.text(), "(unset)");
    let path = run(&host, "2", "getenv", json!({"name": "PATH"})).await;
    assert_ne!(&*path.text(), "(unset)", "PATH is on the allow-list");
    let fds = run(&host, "3", "fds", json!({})).await;
    // 0-2, the channel (3), the cancel channel (4), the worker's clone of the channel for writing
    // (5), its /proc/self/stat for counting threads after each call (6), and the handle reading
    // /proc/self/fd (7).
    let fds: Vec<i32> = fds.text().split(',').map(|f| f.parse().unwrap()).collect();
    assert_eq!(fds, [0, 1, 2, 3, 4, 5, 6, 7], "the host leaked fd {leaked}");
    // SAFETY: closes the descriptor dup'ed above.
    unsafe { libc::close(leaked) };
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_mixed_faults_eight_at_a_time() {
    let _one = ONE_AT_A_TIME.lock().await;
    let options = WorkerOptions {
        spares: 2,
        cancel_grace: Duration::from_millis(50),
        ..small_frames()
    };
    // Quarantine would turn repeated crashes into `quarantined`: keep it out of this test.
    let Served { host, dir: _dir } = serve(options, |b| {
        b.runner(timeout(300))
            .quarantine(rho_runtime::QuarantinePolicy {
                max_failures: 0,
                ..Default::default()
            })
    })
    .await;
    let mut events = host.subscribe();
    let menu: [(&str, Value, Outcome); 8] = [
        ("echo", json!({"text": "x"}), Outcome::Ok),
        ("echo", json!({"text": "y"}), Outcome::Ok),
        ("panic", json!({"message": "p"}), Outcome::Crashed),
        ("segfault", json!({}), Outcome::Crashed),
        ("abort", json!({}), Outcome::Crashed),
        ("exit_process", json!({"code": 0}), Outcome::Crashed),
        ("sleep", json!({"ms": 5}), Outcome::Ok),
        ("big_output", json!({"bytes": 2 << 20}), Outcome::Crashed),
    ];
    let mut rss_at_200 = 0;
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut expected = HashMap::new();
    for batch in 0..125 {
        let calls: Vec<(ToolCall, Outcome)> = (0..8)
            .map(|i| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let (tool, args, outcome) = &menu[(seed % 8) as usize];
                (call(&format!("{batch}-{i}"), tool, args.clone()), *outcome)
            })
            .collect();
        let opts = CallOptions::default();
        let runs = calls.iter().map(|(c, _)| host.call_with(c, &opts));
        let results = futures_util::future::join_all(runs).await;
        for ((c, outcome), r) in calls.iter().zip(results) {
            assert_eq!(r.outcome, *outcome, "{} {}: {}", c.id, c.name, &*r.text());
            expected.insert(c.id.clone(), 0u32);
        }
        if batch == 25 {
            rss_at_200 = rss_kib();
        }
    }
    let rss_at_1000 = rss_kib();
    // Every call ended exactly once.
    let deadline = Instant::now() + Duration::from_secs(2);
    while let Ok(Some(item)) = tokio::time::timeout(
        deadline.saturating_duration_since(Instant::now()),
        events.next(),
    )
    .await
    {
        match item {
            BusItem::Event(e) => {
                if let EventKind::ToolExecutionEnd { call_id, .. } = &e.kind {
                    *expected.get_mut(call_id).unwrap() += 1;
                }
            }
            BusItem::Lagged { missed, .. } => panic!("lagged by {missed}"),
        }
        if expected.values().all(|n| *n == 1) {
            break;
        }
    }
    assert_eq!(expected.len(), 1000);
    assert!(
        expected.values().all(|n| *n == 1),
        "calls without exactly one end"
    );
    // The host's memory stays flat.
    let growth = rss_at_1000.saturating_sub(rss_at_200);
    eprintln!("host RSS at call 200: {rss_at_200} KiB, at call 1000: {rss_at_1000} KiB");
    assert!(
        growth < 16 * 1024,
        "RSS grew {growth} KiB from call 200 to call 1000"
    );
    host.shutdown().await;
    drop(host);
    let left = no_workers_within(Duration::from_secs(3)).await;
    assert!(left.is_empty(), "workers left behind: {left:?}");
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_moves_new_calls_to_new_workers_and_the_old_ones_exit() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (default, v2) = rho_tests::faults_variants();
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("libfaults.so");
    std::fs::copy(default, &target).unwrap();
    let options = WorkerOptions {
        spares: 1,
        ..WorkerOptions::default()
    };
    let (host, _) = host_with(dir.path(), isolated(options), |b| b.runner(timeout(5_000))).await;
    let slow_host = host.clone();
    let slow = tokio::spawn(async move {
        slow_host
            .call_with(
                &call("slow", "sleep", json!({"ms": 500})),
                &CallOptions::default(),
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = live_workers();
    rho_tests::install_bytes(&target, &std::fs::read(v2).unwrap());
    let report = host.reload().await.remove(0);
    assert_eq!(report.reloaded, ["faults@0.1.0"]);
    let r = run(&host, "t", "build_tag", json!({})).await;
    assert_eq!(&*r.text(), "v2");
    let slow = slow.await.unwrap();
    assert_eq!(
        (slow.outcome, &*slow.text()),
        (Outcome::Ok, "slept 500 ms"),
        "the running call finished on the old worker"
    );
    // The old version's workers are gone; only the new pool's remain.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = live_workers();
    assert!(
        before.iter().all(|p| !after.contains(p)),
        "old workers {before:?} still alive in {after:?}"
    );
    host.shutdown().await;
    assert!(no_workers_within(Duration::from_secs(3)).await.is_empty());
}

#[test]
fn workers_die_with_their_host() {
    let dir = plugin_dir(&["faults"]);
    let mut host = std::process::Command::new(rho_tests::rho_bin())
        .args([
            "call",
            "sleep",
            r#"{"ms": 30000}"#,
            "--isolate",
            "--plugins",
        ])
        .arg(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let host_pid = host.id() as i32;
    let workers_of = |parent: i32| -> Vec<i32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                    let close = s.rfind(')').unwrap_or(0);
                    s.contains("(rho-worker")
                        && s[close + 2..]
                            .split(' ')
                            .nth(1)
                            .and_then(|p| p.parse::<i32>().ok())
                            == Some(parent)
                })
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut workers = Vec::new();
    while workers.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        workers = workers_of(host_pid);
    }
    assert!(!workers.is_empty(), "the host started no worker");
    host.kill().unwrap();
    host.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    let alive = |pid: &i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rfind(')').is_some_and(|c| !s[c + 2..].starts_with('Z')))
    };
    while workers.iter().any(alive) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !workers.iter().any(alive),
        "workers {workers:?} outlived their host"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_workers_bounds_the_processes_and_calls_wait_their_turn() {
    let _one = ONE_AT_A_TIME.lock().await;
    let options = WorkerOptions {
        max_workers: 1,
        spares: 0,
        ..WorkerOptions::default()
    };
    let Served { host, dir: _dir } = serve(options, |b| b.runner(timeout(5_000))).await;
    let started = Instant::now();
    let calls: Vec<_> = (0..3)
        .map(|i| {
            let host = host.clone();
            tokio::spawn(
                async move { run(&host, &i.to_string(), "sleep", json!({"ms": 200})).await },
            )
        })
        .collect();
    let mut peak = 0;
    while calls.iter().any(|c| !c.is_finished()) {
        peak = peak.max(live_workers().len());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for call in calls {
        assert_eq!(call.await.unwrap().outcome, Outcome::Ok);
    }
    // echo, faults and picture each have a pool; only faults runs calls here.
    assert!(peak <= 3, "{peak} workers alive at once");
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "the calls did not wait for the one worker: {:?}",
        started.elapsed()
    );
    host.shutdown().await;
}

/// Without the sandbox the worker is the plugin process: it closes the status pipe at once, and
/// the host reads how it ended from `waitpid` and the end of its stderr, as it did before the
/// sandboxed worker reported the status itself. The texts are the sandboxed ones (see
/// `every_fault_ends_its_call_and_the_next_call_answers`), and the plugin holds no descriptor
/// beyond those of the sandboxed plugin process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsandboxed_worker_ends_calls_with_the_same_texts() {
    let _one = ONE_AT_A_TIME.lock().await;
    let options = WorkerOptions {
        sandbox: false,
        ..WorkerOptions::default()
    };
    let Served { host, dir: _dir } = serve(options, |b| b.runner(timeout(5_000))).await;
    let cases = [
        (
            "segfault",
            json!({}),
            "the plugin's worker process died: killed by signal 11 (SIGSEGV) during the call",
        ),
        (
            "exit_process",
            json!({"code": 7}),
            "the plugin's worker process died: exited with status 7 during the call",
        ),
        (
            "alloc",
            json!({"mib": 4096}),
            "the plugin's worker process died: killed by signal 6 (SIGABRT) during the call (its last words on stderr: memory allocation of",
        ),
    ];
    for (i, (tool, args, text)) in cases.into_iter().enumerate() {
        let r = run(&host, &format!("{tool}-{i}"), tool, args).await;
        assert_eq!(r.outcome, Outcome::Crashed, "{tool}: {}", &*r.text());
        assert!(r.text().starts_with(text), "{tool}: {}", &*r.text());
    }
    let fds = run(&host, "fds", "fds", json!({})).await;
    let fds: Vec<i32> = fds.text().split(',').map(|f| f.parse().unwrap()).collect();
    assert_eq!(fds, [0, 1, 2, 3, 4, 5, 6, 7]);
    host.shutdown().await;
}

/// A worker start leaves the host's memory alone: a fork would write-protect every page the host
/// has, so that each page it writes next faults to be copied (a cost that grows with the host);
/// the worker is spawned without one. Counted in this process's minor page faults over one write
/// to each page of 64 MiB made before the start. (Linux: it counts small pages.)
#[cfg(target_os = "linux")]
#[tokio::test]
async fn starting_a_worker_does_not_fork_the_host() {
    let _one = ONE_AT_A_TIME.lock().await;
    const PAGE: usize = 4096;
    const PAGES: usize = 16 << 10;
    let mut memory: Vec<u8> = Vec::with_capacity(PAGE * PAGES);
    // SAFETY: advice on this vector's own allocation (small pages, so each write below is one
    // page), then every byte of it written before it is counted in.
    unsafe {
        libc::madvise(
            memory.as_mut_ptr().cast(),
            memory.capacity(),
            libc::MADV_NOHUGEPAGE,
        );
        memory.as_mut_ptr().write_bytes(1, PAGE * PAGES);
        memory.set_len(PAGE * PAGES);
    }
    let minor_faults = || {
        // SAFETY: getrusage fills the struct it is given.
        unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_SELF, &mut usage);
            usage.ru_minflt as usize
        }
    };
    // No spares: the one worker the host starts is started (and has answered) below.
    let served = serve(
        WorkerOptions {
            spares: 0,
            ..WorkerOptions::default()
        },
        |b| b,
    )
    .await;
    let r = run(&served.host, "c1", "echo", json!({"text": "hi"})).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
    let before = minor_faults();
    for page in memory.chunks_mut(PAGE) {
        page[0] = page[0].wrapping_add(1);
    }
    let faults = minor_faults() - before;
    assert!(
        faults < PAGES / 4,
        "{faults} page faults writing {PAGES} pages after a worker start"
    );
    std::hint::black_box(&memory);
    served.host.shutdown().await;
}

/// The workers alive once no worker has started or ended for 300 ms (within 10 s).
async fn settled_workers() -> Vec<i32> {
    let mut seen = live_workers();
    let mut still = 0;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = live_workers();
        still = if now == seen { still + 1 } else { 0 };
        seen = now;
        if still >= 6 {
            break;
        }
    }
    seen
}

/// A call that takes a spare while another stays idle starts no worker while it runs (a start
/// would compete for the CPU with the call, and with a crash's report above all): the pool tops
/// its spares up when the call ends. A crashed worker is replaced once its end is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spares_are_topped_up_when_a_call_ends_not_while_it_runs() {
    let _one = ONE_AT_A_TIME.lock().await;
    let options = WorkerOptions {
        spares: 2,
        ..WorkerOptions::default()
    };
    let Served { host, dir: _dir } = serve(options, |b| b.runner(timeout(5_000))).await;
    // Two spares of each of the three plugins (and whatever another test left, going).
    let before = settled_workers().await;
    assert!(before.len() >= 6, "{before:?}");
    let sleeping = {
        let host = host.clone();
        tokio::spawn(async move { run(&host, "s", "sleep", json!({"ms": 600})).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let during = live_workers();
    let started: Vec<_> = during.iter().filter(|p| !before.contains(p)).collect();
    assert!(
        started.is_empty(),
        "workers {started:?} started while the call ran"
    );
    let r = sleeping.await.unwrap();
    assert_eq!(r.outcome, Outcome::Ok, "{}", &*r.text());
    let r = run(&host, "c", "segfault", json!({})).await;
    assert_eq!(r.outcome, Outcome::Crashed, "{}", &*r.text());
    // The crashed worker's replacement.
    let mut replaced = false;
    for _ in 0..200 {
        if live_workers().iter().any(|p| !before.contains(p)) {
            replaced = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        replaced,
        "no worker replaced the crashed one: {:?}",
        live_workers()
    );
    host.shutdown().await;
}

/// A worker that floods the host with partial updates keeps its channel readable all the time:
/// the call's work, driven inside the call's task, then spends the task's whole cooperative
/// budget on every poll. Its timeout still fires (at 300 ms, well within 3 s) and ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_updates_does_not_hold_back_the_timeout() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Served { host, dir: _dir } = serve(small_frames(), |b| b.runner(timeout(300))).await;
    let started = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        run(
            &host,
            "flood",
            "updates",
            json!({"count": 4_000_000_000u32, "interval_ms": 0}),
        ),
    )
    .await
    .expect("the call never ended");
    let took = started.elapsed();
    assert_eq!(r.outcome, Outcome::TimedOut, "{}", &*r.text());
    assert!(took < Duration::from_secs(3), "ended after {took:?}");
    host.shutdown().await;
}
