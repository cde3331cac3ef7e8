//! `instr_*`: instructions per call (or per event delivered), counted by `valgrind --tool=callgrind`
//! (stable whatever else the machine does), for the in-process and isolated call paths and the
//! bus against their raw baselines.
//! Each figure runs a loop of calls (`xtask bench-loop`) under callgrind twice, with a short and
//! a long count, and divides the difference: start-up and warm-up cancel out. Isolated figures
//! count the host's side only (callgrind does not follow the worker processes). Without valgrind
//! on `PATH` the figures are left out, saying so.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use rho_runtime::{CallOptions, DirOptions, Host, Isolation, ToolCall, WorkerOptions, allow_all};
use rho_worker::loader::{CopyDir, PluginFile, load_in_process};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::{Ctx, Figure};

/// The loops `xtask bench-loop` runs: rho's and the raw baseline of each path.
pub const LOOPS: [&str; 9] = [
    "inproc",
    "inproc_raw",
    "inproc_in_task",
    "inproc_raw_in_task",
    "isolated",
    "isolated_64k",
    "isolated_raw",
    "bus",
    "bus_raw",
];

/// Calls of the short and the long run.
const SHORT: usize = 200;
const LONG: usize = 1_200;

/// `xtask bench-loop`: `calls` calls of `echo` the way `what` says, after a warm-up of 50.
/// `*_in_task`: the same loop run inside a task of the runtime (as `rho serve`'s handlers and an
/// agent loop call), not on the thread that blocks on the runtime.
pub fn run_loop(plugins: &Path, what: &str, calls: usize) -> Result<(), String> {
    let runtime = super::runtime()?;
    match what.strip_suffix("_in_task") {
        Some(inner) => {
            let (plugins, inner) = (plugins.to_owned(), inner.to_owned());
            runtime.block_on(async move {
                tokio::spawn(async move { calls_of(&plugins, &inner, calls).await })
                    .await
                    .map_err(|e| e.to_string())?
            })
        }
        None => runtime.block_on(calls_of(plugins, what, calls)),
    }
}

/// The loops' calls, on the runtime.
async fn calls_of(plugins: &Path, what: &str, calls: usize) -> Result<(), String> {
    {
        let echo = plugins.join("libecho.so");
        match what {
            "inproc" | "isolated" | "isolated_64k" => {
                let dir =
                    std::env::temp_dir().join(format!("rho-bench-loop-{}", std::process::id()));
                std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                std::fs::copy(&echo, dir.join("libecho.so")).map_err(|e| e.to_string())?;
                let options = if what == "inproc" {
                    DirOptions::in_process()
                } else {
                    DirOptions {
                        isolation: Isolation::Process(WorkerOptions {
                            executable: Some(
                                super::plugins_target().join("release").join("rho-worker"),
                            ),
                            ..WorkerOptions::default()
                        }),
                        ..DirOptions::default()
                    }
                };
                let (host, reports) = Host::builder()
                    .plugin_dir(&dir, options)
                    .gate(allow_all())
                    .build()
                    .await
                    .map_err(|e| e.to_string())?;
                super::loaded(&reports)?;
                let text = match what {
                    "isolated_64k" => "x".repeat(64 << 10),
                    _ => "hello".to_owned(),
                };
                let call = ToolCall::new("c", "echo", json!({ "text": text }));
                for _ in 0..50 + calls {
                    host.call_with(&call, &CallOptions::default()).await;
                }
                host.shutdown().await;
                let _ = std::fs::remove_dir_all(&dir);
            }
            "inproc_raw" => {
                let copies = CopyDir::new().map_err(|e| e.to_string())?;
                let file = PluginFile::open(&echo, &copies).map_err(|e| e.to_string())?;
                let module = load_in_process(&file).map_err(|e| e.to_string())?.module;
                for _ in 0..50 + calls {
                    super::inproc::direct(module).await;
                }
            }
            "isolated_raw" => {
                let mut child = tokio::process::Command::new("cat")
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .kill_on_drop(true)
                    .spawn()
                    .map_err(|e| e.to_string())?;
                let mut stdin = child.stdin.take().ok_or("no stdin")?;
                let mut stdout = tokio::io::BufReader::new(child.stdout.take().ok_or("no stdout")?);
                let line = Arc::new(b"{\"text\":\"hello\"}\n".to_vec());
                let mut back = Vec::new();
                for _ in 0..50 + calls {
                    back.clear();
                    stdin.write_all(&line).await.map_err(|e| e.to_string())?;
                    stdout
                        .read_until(b'\n', &mut back)
                        .await
                        .map_err(|e| e.to_string())?;
                }
            }
            // `calls` events published to one subscriber, which reads them all.
            "bus" => {
                super::bus::rho_round(1, calls as u64).await;
            }
            "bus_raw" => {
                super::bus::raw_round(1, calls as u64).await;
            }
            other => return Err(format!("no loop `{other}`")),
        }
        Ok(())
    }
}

/// Instructions of one `bench-loop` run under callgrind.
fn counted(exe: &Path, plugins: &Path, what: &str, calls: usize) -> Result<u64, String> {
    let out = std::env::temp_dir().join(format!(
        "rho-callgrind-{}-{what}-{calls}.out",
        std::process::id()
    ));
    let status = Command::new("valgrind")
        .args(["--tool=callgrind", "--trace-children=no", "-q"])
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(exe)
        .arg("bench-loop")
        .arg("--plugins")
        .arg(plugins)
        .arg(what)
        .arg(calls.to_string())
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("cannot run valgrind: {e}"))?;
    if !status.success() {
        return Err(format!("callgrind of `{what}` ended with {status}"));
    }
    let text = std::fs::read_to_string(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let _ = std::fs::remove_file(&out);
    text.lines()
        .find_map(|l| l.strip_prefix("summary: ").or(l.strip_prefix("totals: ")))
        .and_then(|n| n.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("no instruction total in callgrind's output for `{what}`"))
}

/// Instructions per call of a loop: the long run less the short one, per extra call.
fn per_call(exe: &Path, plugins: &Path, what: &str) -> Result<f64, String> {
    let short = counted(exe, plugins, what, SHORT)?;
    let long = counted(exe, plugins, what, LONG)?;
    Ok(long.saturating_sub(short) as f64 / (LONG - SHORT) as f64)
}

/// The instruction figures (none without valgrind).
pub fn figures(ctx: &Ctx) -> Result<Vec<Figure>, String> {
    let found = Command::new("valgrind")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        eprintln!("instr_*: valgrind is not on PATH; instruction counts left out");
        return Ok(Vec::new());
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut figures = Vec::new();
    for (name, unit, rho, raw, baseline) in [
        (
            "instr_inproc_call",
            "instr/call",
            "inproc",
            "inproc_raw",
            "spawn_blocking + direct entry-point call",
        ),
        (
            "instr_inproc_call_in_task",
            "instr/call",
            "inproc_in_task",
            "inproc_raw_in_task",
            "the same, both called from a task (as rho serve and an agent loop call)",
        ),
        (
            "instr_isolated_call",
            "instr/call",
            "isolated",
            "isolated_raw",
            "a round trip to `cat` over pipes (host side)",
        ),
        (
            "instr_bus_event",
            "instr/event",
            "bus",
            "bus_raw",
            "raw tokio broadcast, 1 receiver",
        ),
    ] {
        figures.push(Figure {
            name: name.into(),
            value: per_call(&exe, &ctx.plugins, rho)?,
            unit: unit.into(),
            baseline: baseline.into(),
            baseline_value: per_call(&exe, &ctx.plugins, raw)?,
            runs: 1,
            spread: None,
        });
    }
    Ok(figures)
}
