//! Out-of-process figures: call round trips against a raw request/response to a child over pipes,
//! crash detection against a raw child death, the timeout's overshoot, and a worker's memory.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rho_runtime::{
    CallOptions, DirOptions, Host, Isolation, QuarantinePolicy, RunnerConfig, ToolCall,
    WorkerOptions, allow_all,
};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::{Ctx, Figure, median};
use crate::bench::reload::rss_kib;

/// A host of `echo` and `faults` in worker processes, and its plugin directory.
struct Isolated {
    host: Host,
    dir: std::path::PathBuf,
}

impl Isolated {
    /// Shuts the host down (calls ended, workers stopped, copies removed) and removes its
    /// directory.
    async fn close(self) {
        self.host.shutdown().await;
        drop(self.host);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The release `rho-worker`.
fn rho_worker() -> PathBuf {
    super::plugins_target().join("release").join("rho-worker")
}

/// A host of `echo` and `faults` in worker processes (with or without the sandbox, `spares` warm
/// workers), quarantine off, allow_all.
async fn host_with(
    ctx: &Ctx,
    timeout: Duration,
    sandbox: bool,
    spares: usize,
) -> Result<Isolated, String> {
    host_running(ctx, timeout, sandbox, spares, rho_worker()).await
}

/// [`host_with`], its workers run from `worker` (`rho-worker`, or a host binary that is its own
/// worker).
async fn host_running(
    ctx: &Ctx,
    timeout: Duration,
    sandbox: bool,
    spares: usize,
    worker: PathBuf,
) -> Result<Isolated, String> {
    let dir = std::env::temp_dir().join(format!(
        "rho-bench-iso-{}-{sandbox}-{}",
        std::process::id(),
        worker.file_name().unwrap_or_default().to_string_lossy()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    for name in ["echo", "faults"] {
        std::fs::copy(ctx.plugin(name), dir.join(format!("lib{name}.so")))
            .map_err(|e| e.to_string())?;
    }
    let workers = WorkerOptions {
        executable: Some(worker),
        spares,
        sandbox,
        ..WorkerOptions::default()
    };
    let options = DirOptions {
        isolation: Isolation::Process(workers),
        ..DirOptions::default()
    };
    let config = RunnerConfig {
        default_timeout: timeout,
        ..RunnerConfig::default()
    };
    let (host, reports) = Host::builder()
        .plugin_dir(&dir, options)
        .quarantine(QuarantinePolicy {
            max_failures: 0,
            ..Default::default()
        })
        .runner(config)
        .gate(allow_all())
        .build()
        .await
        .map_err(|e| e.to_string())?;
    super::loaded(&reports)?;
    Ok(Isolated { host, dir })
}

async fn timed(host: &Host, tool: &str, args: &Value) -> (f64, rho_runtime::ToolResult) {
    let call = ToolCall::new("c", tool, args.clone());
    let started = Instant::now();
    let result = host.call_with(&call, &CallOptions::default()).await;
    (started.elapsed().as_secs_f64() * 1e6, result)
}

/// A raw request/response child: `cat`, one line out and back, over pipes.
struct Cat {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: BufReader<tokio::process::ChildStdout>,
}

impl Cat {
    fn start() -> Result<Cat, String> {
        let mut child = tokio::process::Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start cat: {e}"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        Ok(Cat {
            child,
            stdin,
            stdout,
        })
    }

    async fn round_trip(&mut self, line: &[u8]) -> f64 {
        let mut back = Vec::with_capacity(line.len());
        let started = Instant::now();
        // Written and read at once: a line larger than the pipes' buffers would deadlock otherwise.
        let _ = tokio::join!(
            self.stdin.write_all(line),
            self.stdout.read_until(b'\n', &mut back)
        );
        started.elapsed().as_secs_f64() * 1e6
    }
}

fn line_of(bytes: usize) -> Vec<u8> {
    let mut line =
        format!("{{\"text\":\"{}\"}}", "x".repeat(bytes.saturating_sub(12))).into_bytes();
    line.push(b'\n');
    line
}

/// `isolated_call*`, `isolated_calls_per_s_8`, `crash_detect`, `timeout_kill`, `mem_worker`.
pub async fn figures(ctx: &Ctx, wanted: &dyn Fn(&str) -> bool) -> Result<Vec<Figure>, String> {
    // `RHO_BENCH_NO_SANDBOX=1`: the same figures without the sandbox, to see its share.
    let sandbox = std::env::var_os("RHO_BENCH_NO_SANDBOX").is_none();
    let isolated = host_with(ctx, Duration::from_millis(200), sandbox, 2).await?;
    let host = &isolated.host;
    let n = if ctx.quick { 300 } else { 2000 };
    let runs = ctx.runs();
    let mut cat = Cat::start()?;
    let mut figures = Vec::new();
    let cases: [(&str, &str, Value, usize); 3] = [
        ("isolated_call", "echo", json!({"text": "hello"}), 17),
        (
            "isolated_call_64k",
            "echo",
            json!({"text": "x".repeat(64 << 10)}),
            64 << 10,
        ),
        (
            "isolated_image_1m",
            "raw_image",
            json!({"bytes": 1 << 20}),
            1 << 20,
        ),
    ];
    for (name, tool, args, bytes) in cases {
        if !wanted(name) {
            continue;
        }
        let per_run = if bytes > 100_000 { n / 10 } else { n };
        let line = line_of(bytes);
        let mut rho = Vec::new();
        let mut raw = Vec::new();
        for _ in 0..=runs {
            let mut samples = Vec::new();
            for _ in 0..per_run {
                let (us, r) = timed(host, tool, &args).await;
                if r.is_error() {
                    return Err(format!("{name}: {}", r.text()));
                }
                samples.push(us);
            }
            rho.push(median(&mut samples));
            let mut samples = Vec::new();
            for _ in 0..per_run {
                samples.push(cat.round_trip(&line).await);
            }
            raw.push(median(&mut samples));
        }
        figures.push(Figure::paired(
            name,
            "us/call",
            format!("raw round trip to `cat` over pipes ({bytes} B)"),
            &mut rho[1..],
            &mut raw[1..],
        ));
    }

    if wanted("isolated_calls_per_s_8") {
        // Throughput, 8 calls at once (8 workers) against 8 cats. A warm-up round first starts
        // the 8 workers, as the 8 cats are started before their clock starts.
        let total = n * 4;
        let round = |calls: usize| {
            let tasks: Vec<_> = (0..8)
                .map(|_| {
                    let host = host.clone();
                    tokio::spawn(async move {
                        for _ in 0..calls {
                            timed(&host, "echo", &json!({"text": "hello"})).await;
                        }
                    })
                })
                .collect();
            async move {
                for t in tasks {
                    let _ = t.await;
                }
            }
        };
        round(4).await;
        let started = Instant::now();
        round(total / 8).await;
        let rho_rate = total as f64 / started.elapsed().as_secs_f64();
        let mut cats: Vec<Cat> = (0..8).map(|_| Cat::start()).collect::<Result<_, _>>()?;
        let started = Instant::now();
        let tasks: Vec<_> = cats
            .drain(..)
            .map(|mut cat| {
                tokio::spawn(async move {
                    let line = line_of(17);
                    for _ in 0..total / 8 {
                        cat.round_trip(&line).await;
                    }
                })
            })
            .collect();
        for t in tasks {
            let _ = t.await;
        }
        let raw_rate = total as f64 / started.elapsed().as_secs_f64();
        figures.push(Figure {
            name: "isolated_calls_per_s_8".into(),
            value: rho_rate,
            unit: "calls/s".into(),
            baseline: "8 `cat` children, round trips over pipes".into(),
            baseline_value: raw_rate,
            runs: 1,
            spread: None,
        });
    }
    if wanted("crash_detect") {
        // From a crash to its result: a segfaulting call's time minus a normal call's (the round
        // trip both share), against a raw child's death (SIGSEGV sent to a sleeping child) -> wait.
        let mut crash = Vec::new();
        let mut normal = Vec::new();
        let mut raw = Vec::new();
        for _ in 0..=runs {
            // Let the pool's spares come back, so the figure is the crash, not a worker start.
            tokio::time::sleep(Duration::from_millis(150)).await;
            let (us, r) = timed(host, "segfault", &json!({})).await;
            if r.outcome != rho_runtime::Outcome::Crashed {
                return Err(format!("segfault ended {}", r.outcome));
            }
            crash.push(us);
            tokio::time::sleep(Duration::from_millis(150)).await;
            normal.push(timed(host, "echo", &json!({"text": "x"})).await.0);
            let mut child = tokio::process::Command::new("sleep")
                .arg("10")
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| e.to_string())?;
            tokio::time::sleep(Duration::from_millis(5)).await;
            let pid = child.id().unwrap_or(0) as i32;
            let started = Instant::now();
            // SAFETY: signals our own child.
            unsafe { libc::kill(pid, libc::SIGSEGV) };
            let _ = child.wait().await;
            raw.push(started.elapsed().as_secs_f64() * 1e6);
        }
        let crash = median(&mut crash[1..]);
        let normal = median(&mut normal[1..]);
        figures.push(Figure {
            name: "crash_detect".into(),
            value: (crash - normal).max(0.0),
            unit: "us".into(),
            baseline: "SIGSEGV to a sleeping child -> wait".into(),
            baseline_value: median(&mut raw[1..]),
            runs,
            spread: None,
        });
    }
    if wanted("timeout_kill") {
        // The timeout's overshoot: a spinning isolated tool under 200 ms, against a plain 200 ms sleep.
        let mut rho = Vec::new();
        let mut raw = Vec::new();
        for _ in 0..=runs.min(7) {
            let (us, _) = timed(host, "spin", &json!({})).await;
            rho.push(us - 200_000.0);
            let started = Instant::now();
            tokio::time::sleep(Duration::from_millis(200)).await;
            raw.push(started.elapsed().as_secs_f64() * 1e6 - 200_000.0);
        }
        figures.push(Figure::paired(
            "timeout_kill",
            "us over",
            "tokio sleep(200 ms) overshoot",
            &mut rho[1..],
            &mut raw[1..],
        ));
    }
    if wanted("mem_worker") {
        // Memory of an idle worker (its processes together) against a bare child (`cat`).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let workers = children_named("rho-worker");
        let worker_kib: Vec<f64> = workers.iter().map(|p| tree_rss_kib(*p) as f64).collect();
        let cat_kib = cat
            .child
            .id()
            .and_then(|p| process_rss_kib(p as i32))
            .unwrap_or(0) as f64;
        let mut worker_kib = worker_kib;
        figures.push(Figure {
            name: "mem_worker".into(),
            value: median(&mut worker_kib),
            unit: "KiB RSS".into(),
            baseline: "a bare `cat` child".into(),
            baseline_value: cat_kib,
            runs: workers.len(),
            spread: None,
        });
    }
    isolated.close().await;
    let _ = rss_kib();
    Ok(figures)
}

/// `worker_start`, `worker_start_unsandboxed`, `mem_worker_sandbox`, `isolated_call_sandbox`:
/// what the sandbox costs, each against the same worker without it (`WorkerOptions::sandbox =
/// false`), measured in the same run.
pub async fn sandbox_cost(ctx: &Ctx) -> Result<Vec<Figure>, String> {
    let runs = ctx.runs();
    let n = if ctx.quick { 300 } else { 2000 };
    let mut start = [Vec::new(), Vec::new()];
    let mut call = [Vec::new(), Vec::new()];
    let mut mem = [0.0, 0.0];
    let mut bare = Vec::new();
    for (i, sandbox) in [true, false].into_iter().enumerate() {
        let isolated = host_with(ctx, Duration::from_secs(10), sandbox, 0).await?;
        let host = &isolated.host;
        start[i] = worker_starts(host, runs).await?;
        for _ in 0..=runs {
            let mut samples = Vec::new();
            for _ in 0..n {
                samples.push(timed(host, "echo", &json!({"text": "hello"})).await.0);
            }
            call[i].push(median(&mut samples));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut trees: Vec<f64> = children_named("rho-worker")
            .iter()
            .map(|p| tree_rss_kib(*p) as f64)
            .collect();
        mem[i] = median(&mut trees);
        isolated.close().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for _ in 0..=runs {
        let started = Instant::now();
        let status = tokio::process::Command::new("true")
            .status()
            .await
            .map_err(|e| e.to_string())?;
        if !status.success() {
            return Err("`true` failed".into());
        }
        bare.push(started.elapsed().as_secs_f64() * 1e6);
    }
    let [mut start_on, mut start_off] = start;
    let [mut call_on, mut call_off] = call;
    let start_off = median(&mut start_off[1..]);
    Ok(vec![
        Figure {
            name: "worker_start".into(),
            value: median(&mut start_on[1..]),
            unit: "us".into(),
            baseline: "the same worker without the sandbox".into(),
            baseline_value: start_off,
            runs,
            spread: None,
        },
        Figure {
            name: "worker_start_unsandboxed".into(),
            value: start_off,
            unit: "us".into(),
            baseline: "spawn + wait of `true`".into(),
            baseline_value: median(&mut bare[1..]),
            runs,
            spread: None,
        },
        Figure {
            name: "mem_worker_sandbox".into(),
            value: mem[0],
            unit: "KiB RSS".into(),
            baseline: "an idle worker without the sandbox".into(),
            baseline_value: mem[1],
            runs: 1,
            spread: None,
        },
        Figure::paired(
            "isolated_call_sandbox",
            "us/call",
            "the same `echo` call without the sandbox",
            &mut call_on[1..],
            &mut call_off[1..],
        ),
    ])
}

/// `runs + 1` worker starts on `host`: each a call after the only worker crashed, minus a call
/// on a warm one, microseconds.
async fn worker_starts(host: &Host, runs: usize) -> Result<Vec<f64>, String> {
    let mut starts = Vec::new();
    for _ in 0..=runs {
        let (_, r) = timed(host, "segfault", &json!({})).await;
        if r.outcome != rho_runtime::Outcome::Crashed {
            return Err(format!("segfault ended {}", r.outcome));
        }
        let (cold, r) = timed(host, "build_tag", &json!({})).await;
        if r.is_error() {
            return Err(format!("worker_start: {}", r.text()));
        }
        let (warm, _) = timed(host, "build_tag", &json!({})).await;
        starts.push(cold - warm);
    }
    Ok(starts)
}

/// `worker_start_self`, `mem_worker_self`: what a host binary that is its own worker
/// ([`rho_runtime::run_if_worker`], this benchmark's binary, with everything `cargo xtask`
/// links) costs against the separate `rho-worker`, both sandboxed, measured in the same run.
pub async fn self_exec_cost(ctx: &Ctx) -> Result<Vec<Figure>, String> {
    let runs = ctx.runs();
    let own = std::env::current_exe().map_err(|e| format!("this executable: {e}"))?;
    let mut start = [Vec::new(), Vec::new()];
    let mut mem = [0.0, 0.0];
    for (i, worker) in [own, rho_worker()].into_iter().enumerate() {
        let name: String = worker
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .chars()
            .take(15)
            .collect();
        let isolated = host_running(ctx, Duration::from_secs(10), true, 0, worker).await?;
        start[i] = worker_starts(&isolated.host, runs).await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut trees: Vec<f64> = children_named(&name)
            .iter()
            .map(|p| tree_rss_kib(*p) as f64)
            .collect();
        if trees.is_empty() {
            return Err(format!("no worker process named {name} below this one"));
        }
        mem[i] = median(&mut trees);
        isolated.close().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let [mut start_self, mut start_worker] = start;
    Ok(vec![
        Figure {
            name: "worker_start_self".into(),
            value: median(&mut start_self[1..]),
            unit: "us".into(),
            baseline: "a worker start of the separate rho-worker".into(),
            baseline_value: median(&mut start_worker[1..]),
            runs,
            spread: None,
        },
        Figure {
            name: "mem_worker_self".into(),
            value: mem[0],
            unit: "KiB RSS".into(),
            baseline: "an idle rho-worker".into(),
            baseline_value: mem[1],
            runs: 1,
            spread: None,
        },
    ])
}

/// The RSS of `pid` and every process below it (a worker, its sandbox's init, its plugin
/// process), KiB; shared pages count once per process.
fn tree_rss_kib(pid: i32) -> u64 {
    let parent_of = |p: i32| -> Option<i32> {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        let close = stat.rfind(')')?;
        stat.get(close + 2..)?.split(' ').nth(1)?.parse().ok()
    };
    let all: Vec<i32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .collect();
    let mut tree = vec![pid];
    let mut grew = true;
    while grew {
        grew = false;
        for &p in &all {
            if !tree.contains(&p) && parent_of(p).is_some_and(|pp| tree.contains(&pp)) {
                tree.push(p);
                grew = true;
            }
        }
    }
    tree.iter().filter_map(|p| process_rss_kib(*p)).sum()
}

fn children_named(prefix: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                let close = s.rfind(')').unwrap_or(0);
                s.contains(&format!("({prefix}"))
                    && s.get(close + 2..)
                        .and_then(|r| r.split(' ').nth(1))
                        .and_then(|p| p.parse::<i32>().ok())
                        == Some(me)
            })
        })
        .collect()
}

fn process_rss_kib(pid: i32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
