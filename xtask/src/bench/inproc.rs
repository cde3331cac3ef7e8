//! In-process figures: loading a plugin, and the runner's overhead per call.

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use rho_runtime::plugin_api::ffi::{PluginModRef, ROOT_SYMBOL};
use rho_runtime::{CallOptions, DirOptions, Host, ToolCall, allow_all};
use rho_worker::loader::{
    CallInfo, CopyDir, PluginFile, call_module, load_in_process, parse_outcome,
};
use serde_json::json;

use super::{Ctx, Figure, median_of, per_iter_us};

/// `plugin_load`: read + hash + private copy + dlopen + checks + describe of `echo`, against a raw
/// copy + dlopen + symbol lookup.
pub fn load(ctx: &Ctx) -> Result<Vec<Figure>, String> {
    let path = ctx.plugin("echo");
    let copies = CopyDir::new().map_err(|e| e.to_string())?;
    let runs = ctx.runs() * 2;
    let rho = median_of(runs, || {
        let started = Instant::now();
        let file = PluginFile::open(&path, &copies).map_err(|e| e.to_string());
        let loaded = file.and_then(|f| load_in_process(&f).map_err(|e| e.to_string()));
        assert!(loaded.is_ok(), "{:?}", loaded.err());
        started.elapsed().as_secs_f64() * 1e3
    });
    let raw_dir = tempfile_dir()?;
    let mut n = 0;
    let raw = median_of(runs, || {
        n += 1;
        let copy = raw_dir.join(format!("raw-{n}.so"));
        let started = Instant::now();
        let _ = std::fs::copy(&path, &copy);
        // SAFETY: the bench loads rho's own echo plugin, whose initializers are benign.
        let lib = unsafe { libloading::Library::new(&copy) };
        if let Ok(lib) = &lib {
            // SAFETY: only the symbol's address is taken.
            let symbol = format!("{ROOT_SYMBOL}\0");
            let _ = unsafe { lib.get::<*const u8>(symbol.as_bytes()) };
        }
        let elapsed = started.elapsed().as_secs_f64() * 1e3;
        std::mem::forget(lib);
        elapsed
    });
    let _ = std::fs::remove_dir_all(&raw_dir);
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    Ok(vec![Figure {
        name: "plugin_load".into(),
        value: rho,
        unit: "ms".into(),
        baseline: format!("copy + dlopen + dlsym ({} KiB .so)", size / 1024),
        baseline_value: raw,
        runs,
        spread: None,
    }])
}

pub(super) fn tempfile_dir() -> Result<std::path::PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("rho-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// `inproc_call`: the host's cost per `echo` call (allow_all gate, events on, one subscriber)
/// against spawn_blocking + a direct call of the plugin's entry point; and calls/s at 1 and 64
/// concurrent calls, both ways.
pub async fn calls(ctx: &Ctx) -> Result<Vec<Figure>, String> {
    let dir = tempfile_dir()?.join("plugins");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    std::fs::copy(ctx.plugin("echo"), dir.join("libecho.so")).map_err(|e| e.to_string())?;
    let (host, reports) = Host::builder()
        .plugin_dir(&dir, DirOptions::in_process())
        .gate(allow_all())
        .build()
        .await
        .map_err(|e| e.to_string())?;
    super::loaded(&reports)?;
    let mut sub = host.subscribe();
    let drain = tokio::spawn(async move { while sub.recv().await.is_some() {} });
    let copies = CopyDir::new().map_err(|e| e.to_string())?;
    let file = PluginFile::open(&dir.join("libecho.so"), &copies).map_err(|e| e.to_string())?;
    let module = load_in_process(&file).map_err(|e| e.to_string())?.module;
    let n = if ctx.quick { 2_000 } else { 10_000 };
    let runs = ctx.runs();
    let call = ToolCall::new("c", "echo", json!({"text": "hello"}));

    let mut rho_samples = Vec::new();
    let mut raw_samples = Vec::new();
    // Each loop runs in a spawned task, as a host's loop does (not in `block_on`, whose wake-ups
    // go through a thread park).
    for _ in 0..=runs {
        let (h, c) = (host.clone(), call.clone());
        let rho = tokio::spawn(async move {
            let started = Instant::now();
            for _ in 0..n {
                h.call_with(&c, &CallOptions::default()).await;
            }
            per_iter_us(n, started)
        });
        rho_samples.push(rho.await.map_err(|e| e.to_string())?);
        let raw = tokio::spawn(async move {
            let started = Instant::now();
            for _ in 0..n {
                direct(module).await;
            }
            per_iter_us(n, started)
        });
        raw_samples.push(raw.await.map_err(|e| e.to_string())?);
    }
    // Drop the warm-up run.
    let rho = super::median(&mut rho_samples[1..]);
    let raw = super::median(&mut raw_samples[1..]);
    let mut figures = vec![Figure {
        name: "inproc_call".into(),
        value: rho,
        unit: "us/call".into(),
        baseline: "spawn_blocking + direct entry-point call".into(),
        baseline_value: raw,
        runs,
        spread: None,
    }];
    for concurrency in [1usize, 64] {
        let total = n * 2;
        let runs = runs.min(7);
        let mut rho = Vec::new();
        let mut raw = Vec::new();
        for _ in 0..=runs {
            rho.push(throughput(&host, concurrency, total).await);
            raw.push(raw_throughput(module, concurrency, total).await);
        }
        figures.push(Figure::paired(
            format!("inproc_calls_per_s_{concurrency}"),
            "calls/s",
            format!("spawn_blocking + direct call, {concurrency} at once"),
            &mut rho[1..],
            &mut raw[1..],
        ));
    }
    drain.abort();
    host.shutdown().await;
    let _ = std::fs::remove_dir_all(dir.parent().unwrap_or(&dir));
    Ok(figures)
}

/// One raw call of `echo`: spawn_blocking and a direct call of the plugin's entry point.
pub(super) async fn direct(module: PluginModRef) {
    let _ = tokio::task::spawn_blocking(move || {
        let cancelled = AtomicBool::new(false);
        let noop = |_: &str| {};
        // Parsed as the host's in-process path parses it.
        let raw = call_module(
            module,
            "echo",
            r#"{"text":"hello"}"#,
            "c",
            &cancelled,
            &noop,
            CallInfo::default(),
        );
        parse_outcome("echo", raw)
    })
    .await;
}

async fn throughput(host: &Host, concurrency: usize, total: usize) -> f64 {
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|w| {
            let host = host.clone();
            tokio::spawn(async move {
                let call = ToolCall::new(format!("c{w}"), "echo", json!({"text": "hello"}));
                for _ in 0..total / concurrency {
                    host.call_with(&call, &CallOptions::default()).await;
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    total as f64 / started.elapsed().as_secs_f64()
}

async fn raw_throughput(module: PluginModRef, concurrency: usize, total: usize) -> f64 {
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            tokio::spawn(async move {
                for _ in 0..total / concurrency {
                    direct(module).await;
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    total as f64 / started.elapsed().as_secs_f64()
}

/// Loads for `mem_plugin`, each side the same way.
const LOADS: usize = 10;

/// KiB of RSS each of `LOADS` loads (numbered from 0) adds, after one load (number `LOADS`) that
/// pays the one-off costs.
fn per_load(mut load: impl FnMut(usize) -> Result<(), String>) -> Result<f64, String> {
    load(LOADS)?;
    let before = crate::bench::reload::rss_kib();
    for n in 0..LOADS {
        load(n)?;
    }
    Ok(crate::bench::reload::rss_kib().saturating_sub(before) as f64 / LOADS as f64)
}

/// `mem_plugin`: resident memory each in-process load of `echo` adds (read, check, copy, dlopen,
/// abi_stable's layout check, describe), against a raw copy + dlopen of the same file. Each side
/// loads once before it is measured: what the first load alone costs (the host's own loading
/// code paged in, the hashing thread and its arena) is not a cost per plugin.
pub fn memory(ctx: &Ctx) -> Result<Vec<Figure>, String> {
    let path = ctx.plugin("echo");
    let copies = CopyDir::new().map_err(|e| e.to_string())?;
    let rho = per_load(|_| {
        let file = PluginFile::open(&path, &copies).map_err(|e| e.to_string())?;
        load_in_process(&file).map_err(|e| e.to_string())?;
        Ok(())
    })?;
    let dir = tempfile_dir()?;
    let raw = per_load(|n| {
        let copy = dir.join(format!("mem-{n}.so"));
        std::fs::copy(&path, &copy).map_err(|e| e.to_string())?;
        // SAFETY: rho's own echo plugin; its initializers are benign.
        let lib = unsafe { libloading::Library::new(&copy) }.map_err(|e| e.to_string())?;
        std::mem::forget(lib);
        Ok(())
    })?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(vec![Figure {
        name: "mem_plugin".into(),
        value: rho,
        unit: "KiB RSS".into(),
        baseline: "copy + dlopen of the same file".into(),
        baseline_value: raw,
        runs: LOADS,
        spread: None,
    }])
}
