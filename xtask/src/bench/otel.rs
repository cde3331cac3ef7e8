//! `otel_calls_per_s`: calls per second of `echo` in process, 4 callers at once for a fixed
//! number of calls, with the OpenTelemetry export on (OTLP/HTTP to a receiver on loopback that
//! answers every export at once) against the same host's calls with no export: the runs
//! alternate between two hosts of the same plugin, one exporting (goal: ≥ 0.95).
//! `otel_events_calls_per_s`: the same calls with a sink that drops every event against none,
//! the share of the gap that is building and publishing the calls' events, not exporting them.

use std::time::Instant;

use rho_runtime::{CallOptions, DirOptions, Host, ToolCall};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Ctx, Figure};

/// Callers at once.
const CALLERS: usize = 4;

/// A receiver that reads each HTTP request whole and answers `200` with an empty body (an empty
/// OTLP response): what the exporter waits for, at no cost to measure. Its address.
async fn receiver() -> Result<std::net::SocketAddr, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = Vec::new();
                let mut chunk = [0u8; 16 << 10];
                loop {
                    // The head, then as many body bytes as it announces.
                    let head_end = buffer.windows(4).position(|w| w == b"\r\n\r\n");
                    if let Some(end) = head_end {
                        let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
                        let length: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        if buffer.len() >= end + 4 + length {
                            buffer.drain(..end + 4 + length);
                            let answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                            if stream.write_all(answer).await.is_err() {
                                return;
                            }
                            continue;
                        }
                    }
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    Ok(addr)
}

/// A host of `echo` in process.
async fn host(dir: &std::path::Path) -> Result<Host, String> {
    let (host, reports) = Host::builder()
        .plugin_dir(dir, DirOptions::in_process())
        .gate(rho_runtime::allow_all())
        .build()
        .await
        .map_err(|e| e.to_string())?;
    super::loaded(&reports)?;
    Ok(host)
}

/// Calls per second of `n` calls by [`CALLERS`] callers at once.
async fn round(host: &Host, n: usize) -> Result<f64, String> {
    let started = Instant::now();
    let callers: Vec<_> = (0..CALLERS)
        .map(|c| {
            let host = host.clone();
            tokio::spawn(async move {
                let call = ToolCall::new(format!("c{c}"), "echo", json!({"text": "hello"}));
                for _ in 0..n / CALLERS {
                    host.call_with(&call, &CallOptions::default()).await;
                }
            })
        })
        .collect();
    for caller in callers {
        caller.await.map_err(|e| e.to_string())?;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

pub(super) async fn figures(ctx: &Ctx) -> Result<Vec<Figure>, String> {
    let dir = super::inproc::tempfile_dir()?.join("otel-plugins");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    std::fs::copy(ctx.plugin("echo"), dir.join("libecho.so")).map_err(|e| e.to_string())?;
    let plain = host(&dir).await?;
    let traced = host(&dir).await?;
    let addr = receiver().await?;
    let config = rho_otel::OtelConfig {
        endpoint: Some(format!("http://{addr}")),
        metric_interval_ms: 1000,
        ..rho_otel::OtelConfig::default()
    };
    let export = rho_otel::OtelExport::start(&traced, &config).map_err(|e| e.to_string())?;
    // A host whose events go to a sink that does nothing with them: what building and
    // publishing each call's events costs, apart from the export.
    let listened = host(&dir).await?;
    listened.bus().add_sink(std::sync::Arc::new(Discard));
    // Rounds of about half a second; after each, a pause in which the exporter finishes with
    // the round's events (it takes them in 20 ms bursts), so no round pays for another's.
    let n = if ctx.quick { 40_000 } else { 100_000 };
    let settle = std::time::Duration::from_millis(100);
    let (mut on, mut off, mut sink, mut off_sink) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // The first round of each warms up.
    for run in 0..=ctx.runs() {
        let traced_rate = round(&traced, n).await?;
        tokio::time::sleep(settle).await;
        let plain_rate = round(&plain, n).await?;
        tokio::time::sleep(settle).await;
        let listened_rate = round(&listened, n).await?;
        tokio::time::sleep(settle).await;
        if run > 0 {
            on.push(traced_rate);
            off.push(plain_rate);
            sink.push(listened_rate);
            off_sink.push(plain_rate);
        }
    }
    let dropped = export.dropped();
    export.shutdown().await;
    if dropped > 0 {
        eprintln!("otel_calls_per_s: {dropped} events dropped (the queue was full)");
    }
    Ok(vec![
        Figure::paired(
            "otel_calls_per_s",
            "calls/s",
            format!("the same calls, no export ({CALLERS} callers)"),
            &mut on,
            &mut off,
        ),
        Figure::paired(
            "otel_events_calls_per_s",
            "calls/s",
            format!(
                "the same calls, no listener ({CALLERS} callers; rho: a sink that drops every event)"
            ),
            &mut sink,
            &mut off_sink,
        ),
    ])
}

/// A sink that takes every event and does nothing with it.
struct Discard;

impl rho_runtime::Sink for Discard {
    fn accept(&self, _event: &std::sync::Arc<rho_runtime::Event>) {}
}
