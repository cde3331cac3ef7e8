//! `mcp_source_call`, `mcp_source_start`, `mcp_source_restart`: the reference MCP server
//! `@modelcontextprotocol/server-everything` (pinned in `tests/mcp-servers`, installed with
//! `npm ci` into `target/bench/mcp-servers`) as a tool source of a host in this process, in its
//! sandbox, against an rmcp client talking to the same server directly (unconfined).
//!
//! - `mcp_source_call`: `echo` through `Host::call` against the direct client's `tools/call`,
//!   in pairs of runs (both servers up side by side).
//! - `mcp_source_start`: from adding the source to its tools listed, against spawning the server,
//!   initializing and listing its tools directly.
//! - `mcp_source_restart`: from the server's process killed to the next `echo` answered (the
//!   first backoff, 0.5 s, included), against the direct start.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rho_runtime::{BusItem, EventKind, Host, Outcome, SourceState};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::json;
use tokio_stream::StreamExt;

use super::{Ctx, Figure, median};
use crate::plugins::{target_dir, workspace_root};

/// server-everything installed from the pinned lock file (again only when the lock changed).
fn installed() -> Result<PathBuf, String> {
    let pinned = workspace_root().join("tests").join("mcp-servers");
    let dir = target_dir().join("bench").join("mcp-servers");
    let lock = std::fs::read(pinned.join("package-lock.json")).map_err(|e| e.to_string())?;
    let current = std::fs::read(dir.join("package-lock.json")).ok();
    if current.as_deref() != Some(&lock[..]) || !dir.join("node_modules").exists() {
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        for file in ["package.json", "package-lock.json"] {
            std::fs::copy(pinned.join(file), dir.join(file)).map_err(|e| e.to_string())?;
        }
        let status = std::process::Command::new("npm")
            .args(["ci", "--silent", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .status()
            .map_err(|e| format!("cannot run npm: {e}"))?;
        if !status.success() {
            return Err("npm ci of tests/mcp-servers failed".into());
        }
    }
    Ok(dir)
}

/// The server's program, as both sides start it.
fn program(servers: &Path) -> PathBuf {
    servers.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

type Direct = rmcp::service::RunningService<rmcp::RoleClient, ()>;

/// The server started and initialized by an rmcp client, its tools listed: the client and how
/// long that took, ms.
async fn direct(servers: &Path) -> Result<(Direct, f64), String> {
    let started = Instant::now();
    let mut command = tokio::process::Command::new("node");
    command.arg(program(servers)).arg("stdio");
    let transport = TokioChildProcess::new(command).map_err(|e| e.to_string())?;
    let client = ().serve(transport).await.map_err(|e| e.to_string())?;
    client.list_all_tools().await.map_err(|e| e.to_string())?;
    Ok((client, started.elapsed().as_secs_f64() * 1e3))
}

/// A host over the server as a source, its `echo` listed: the host and how long that took, ms.
async fn through_rho(servers: &Path) -> Result<(Host, f64), String> {
    let started = Instant::now();
    let mut server = rho_mcp::McpServer::command(
        "everything",
        "node",
        [program(servers).display().to_string(), "stdio".into()],
    );
    server.grants.read.push(servers.to_owned());
    let (host, _) = Host::builder()
        .source("mcp:everything", rho_mcp::McpSource::new(server))
        .build()
        .await
        .map_err(|e| e.to_string())?;
    until_listed(&host).await?;
    Ok((host, started.elapsed().as_secs_f64() * 1e3))
}

async fn until_listed(host: &Host) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !host.tools().iter().any(|t| t.name == "echo") {
        if Instant::now() > deadline {
            return Err("server-everything's tools never came".into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

/// One run of `calls` echoes through each side: µs per call, rho's and the direct client's.
async fn call_run(host: &Host, client: &Direct, calls: usize) -> Result<(f64, f64), String> {
    let args = json!({"message": "hello"});
    let started = Instant::now();
    for _ in 0..calls {
        let r = host.call("echo", args.clone()).await;
        if r.outcome != Outcome::Ok {
            return Err(format!("echo through rho: {}: {}", r.outcome, r.text()));
        }
    }
    let rho = started.elapsed().as_secs_f64() * 1e6 / calls as f64;
    let params = CallToolRequestParams::new("echo")
        .with_arguments(args.as_object().cloned().unwrap_or_default());
    let started = Instant::now();
    for _ in 0..calls {
        let r = client
            .call_tool(params.clone())
            .await
            .map_err(|e| e.to_string())?;
        if r.is_error == Some(true) {
            return Err(format!("echo direct: {:?}", r.content));
        }
    }
    let raw = started.elapsed().as_secs_f64() * 1e6 / calls as f64;
    Ok((rho, raw))
}

/// Kills the sandboxed server's `node` process, found by its program's path in `/proc` (the
/// direct client's server is gone by then).
fn kill_sandboxed(servers: &Path) -> Result<(), String> {
    let needle = program(servers).display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc")
        .map_err(|e| e.to_string())?
        .flatten()
    {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline"))
            && String::from_utf8_lossy(&cmdline).contains(&needle)
        {
            found.push(pid);
        }
    }
    let [pid] = found[..] else {
        return Err(format!("not one sandboxed server process: {found:?}"));
    };
    // SAFETY: a signal to a process of this benchmark's own host.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    Ok(())
}

/// The three figures (see the module doc).
pub async fn figures(ctx: &Ctx) -> Result<Vec<Figure>, String> {
    let servers = installed()?;
    let runs = ctx.runs().min(9);
    let calls = if ctx.quick { 200 } else { 1000 };
    let (mut starts_rho, mut starts_raw) = (Vec::new(), Vec::new());
    for _ in 0..runs.min(5) {
        let (client, raw_ms) = direct(&servers).await?;
        let _ = client.cancel().await;
        let (host, rho_ms) = through_rho(&servers).await?;
        host.shutdown().await;
        starts_raw.push(raw_ms);
        starts_rho.push(rho_ms);
    }
    let (client, _) = direct(&servers).await?;
    let (host, _) = through_rho(&servers).await?;
    call_run(&host, &client, calls / 10).await?;
    let (mut rho, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (r, d) = call_run(&host, &client, calls).await?;
        rho.push(r);
        raw.push(d);
    }
    let _ = client.cancel().await;
    host.shutdown().await;
    // Each restart on a fresh host: the first backoff (0.5 s), not a grown one.
    let mut restarts = Vec::new();
    for _ in 0..runs.min(3) {
        let (host, _) = through_rho(&servers).await?;
        // The server's own stdout and stderr wait a moment: a node just started is mid-way.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut events = host.subscribe();
        let killed = Instant::now();
        kill_sandboxed(&servers)?;
        // Its exit seen first (a call racing it would end `crashed`), then calls until one is
        // answered.
        loop {
            let next = tokio::time::timeout(Duration::from_secs(30), events.next()).await;
            match next {
                Ok(Some(BusItem::Event(event)))
                    if matches!(
                        event.kind,
                        EventKind::SourceStateChanged {
                            state: SourceState::Restarting,
                            ..
                        }
                    ) =>
                {
                    break;
                }
                Ok(Some(_)) => {}
                _ => return Err("the server's exit was not seen".into()),
            }
        }
        let deadline = killed + Duration::from_secs(60);
        loop {
            let r = host.call("echo", json!({"message": "back?"})).await;
            if r.outcome == Outcome::Ok {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("the server never came back: {}", r.text()));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        restarts.push(killed.elapsed().as_secs_f64() * 1e3);
        host.shutdown().await;
    }
    let direct_start = median(&mut starts_raw.clone());
    Ok(vec![
        Figure::paired(
            "mcp_source_call",
            "us/call",
            "the same call from an rmcp client straight to the same server (unconfined)",
            &mut rho,
            &mut raw,
        ),
        Figure::paired(
            "mcp_source_start",
            "ms",
            "spawning the server directly, initializing it and listing its tools",
            &mut starts_rho,
            &mut starts_raw,
        ),
        Figure {
            name: "mcp_source_restart".into(),
            value: median(&mut restarts),
            unit: "ms".into(),
            baseline: "the direct start (the restart waits the first backoff, 500 ms)".into(),
            baseline_value: direct_start,
            runs: restarts.len(),
            spread: None,
        },
    ])
}
