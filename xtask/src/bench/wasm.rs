//! Wasm component figures ([7/13]), `echo` built as a component (release, stripped):
//! - `wasm_call`: `echo.wasm` through `Host::call` against the native `echo` in process through
//!   `Host::call` (goal ≤ 1.5);
//! - `wasm_call_vs_isolated`: the same against the native `echo` in an isolated worker through
//!   `Host::call` (goal ≤ 0.1: ten times faster);
//! - `wasm_instance_call`: `WasmPlugin::call` alone (a fresh instance with its grants, epoch
//!   deadline and answer mapping; made ahead, taken down after) against wasmtime's own with a
//!   default pooling engine: a store, an instance of the same pre-instantiated component, a
//!   dynamic call of its `call` export and the store dropped, one after the other;
//! - `wasm_load` / `wasm_load_cached`: loading the component (compile, instantiate, describe,
//!   declare) with an empty cache against wasmtime's `Component::new`, and with the compiled form
//!   on disk (a restart) against `Component::deserialize`;
//! - `wasm_reload` / `wasm_reload_cached`: a changed `echo.wasm` landed in a host's directory ->
//!   the new build serving (its `plugin_reloaded` event) -> a call answered, with content never
//!   seen (compiled) against `Component::new`, and alternating between two contents the host
//!   has compiled before (from its memory cache) against `Component::deserialize`;
//! - `wasm_mem`: resident memory per loaded component against a raw `Component`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use rho_runtime::{CallOptions, DirOptions, Grants, Host, ToolCall, ToolCtx, allow_all};
use rho_runtime_wasm::{WasmEngine, WasmLimits};
use serde_json::json;
use wasmtime::component::{Component, Linker, Val};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::reload::rss_kib;
use super::{Ctx, Figure, per_iter_us};

/// The components the benchmarks use, beside the plugin directory.
pub fn components_dir(plugins: &Path) -> PathBuf {
    plugins.with_file_name("components")
}

/// Builds `echo` as a component (release, stripped, as `rho plugin new --wasm` crates build)
/// into [`components_dir`].
pub fn build(plugins: &Path) -> Result<(), String> {
    let dir = components_dir(plugins);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let target = rho_devkit::dev::COMPONENT_TARGET;
    let status = crate::plugins::cargo()
        .args([
            "build",
            "--quiet",
            "--release",
            "--target",
            target,
            "-p",
            "echo",
        ])
        .args(["--config", "profile.release.strip=true"])
        .args(["--config", "profile.release.debug=false"])
        .status()
        .map_err(|e| format!("cannot run cargo build: {e}"))?;
    if !status.success() {
        return Err("building echo as a component failed".into());
    }
    let built = crate::plugins::target_dir().join(format!("{target}/release/echo.wasm"));
    std::fs::copy(&built, dir.join("echo.wasm"))
        .map_err(|e| format!("{}: {e}", built.display()))?;
    Ok(())
}

/// A host serving a directory holding only `file` (as `name`), with `options` and an engine.
async fn host_of(file: &Path, name: &str, options: DirOptions) -> Result<Host, String> {
    let dir = std::env::temp_dir().join(format!("rho-bench-wasm-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    std::fs::copy(file, dir.join(name)).map_err(|e| e.to_string())?;
    let engine = WasmEngine::new(WasmLimits::default()).map_err(|e| e.to_string())?;
    let (host, reports) = Host::builder()
        .plugin_dir(&dir, options)
        .components(engine)
        .gate(allow_all())
        .build()
        .await
        .map_err(|e| e.to_string())?;
    super::loaded(&reports)?;
    Ok(host)
}

/// Microseconds per `echo` call through `host`, over `n` calls.
async fn per_call(host: &Host, n: usize) -> f64 {
    let call = ToolCall::new("b", "echo", json!({"text": "hi"}));
    let options = CallOptions::default();
    let started = Instant::now();
    for _ in 0..n {
        let r = host.call_with(&call, &options).await;
        debug_assert_eq!(r.outcome, rho_runtime::Outcome::Ok);
    }
    per_iter_us(n, started)
}

/// What a raw wasmtime store needs: WASI with nothing granted.
struct Raw {
    wasi: WasiCtx,
    table: wasmtime::component::ResourceTable,
}

impl WasiView for Raw {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Every figure of this group.
pub async fn figures(ctx: &Ctx) -> Result<Vec<Figure>, String> {
    let component = components_dir(&ctx.plugins).join("echo.wasm");
    let bytes = std::fs::read(&component).map_err(|e| format!("{}: {e}", component.display()))?;
    let mut figures = calls(ctx, &component).await?;
    figures.push(instance_call(ctx, &component, &bytes).await?);
    figures.extend(loads(ctx, &component, &bytes)?);
    figures.extend(reloads(ctx, &bytes).await?);
    figures.push(memory(&component, &bytes)?);
    Ok(figures)
}

async fn calls(ctx: &Ctx, component: &Path) -> Result<Vec<Figure>, String> {
    let wasm = host_of(component, "echo.wasm", DirOptions::in_process()).await?;
    let native = host_of(&ctx.plugin("echo"), "libecho.so", DirOptions::in_process()).await?;
    let isolated = host_of(&ctx.plugin("echo"), "libecho.so", DirOptions::default()).await?;
    let n = if ctx.quick { 300 } else { 1000 };
    let (mut w, mut nat, mut w2, mut iso) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for host in [&wasm, &native, &isolated] {
        per_call(host, n / 4).await;
    }
    for _ in 0..ctx.runs() {
        w.push(per_call(&wasm, n).await);
        nat.push(per_call(&native, n).await);
        w2.push(per_call(&wasm, n).await);
        iso.push(per_call(&isolated, n).await);
    }
    for host in [wasm, native, isolated] {
        host.shutdown().await;
    }
    Ok(vec![
        Figure::paired(
            "wasm_call",
            "us/call",
            "native echo in process, Host::call",
            &mut w,
            &mut nat,
        ),
        Figure::paired(
            "wasm_call_vs_isolated",
            "us/call",
            "native echo isolated, Host::call",
            &mut w2,
            &mut iso,
        ),
    ])
}

async fn instance_call(ctx: &Ctx, file: &Path, bytes: &[u8]) -> Result<Figure, String> {
    let engine = WasmEngine::new(WasmLimits::default()).map_err(|e| e.to_string())?;
    let plugin = engine
        .load(file, bytes, &Grants::default())
        .map_err(|e| e.to_string())?;
    let args = json!({"text": "hi"});
    let quiet: Arc<dyn Fn(&str) + Send + Sync> = Arc::new(|_| {});
    // wasmtime's own: a store with WASI, an instance of the pre-instantiated component (from a
    // pool, as rho's), a dynamic call of the `call` export, on this thread.
    let mut config = wasmtime::Config::new();
    config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(
        wasmtime::PoolingAllocationConfig::default(),
    ));
    let raw_engine = Engine::new(&config).map_err(|e| e.to_string())?;
    let raw_component = Component::new(&raw_engine, bytes).map_err(|e| e.to_string())?;
    let mut linker: Linker<Raw> = Linker::new(&raw_engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| e.to_string())?;
    // The world's host functions, which `echo` never calls.
    let mut host = linker
        .instance("rho:plugin/host@3.0.0")
        .map_err(|e| e.to_string())?;
    for name in ["update", "log", "is-cancelled", "ask"] {
        host.func_new(name, |_, _, _, _| Err(wasmtime::Error::msg("not linked")))
            .map_err(|e| e.to_string())?;
    }
    let pre = linker
        .instantiate_pre(&raw_component)
        .map_err(|e| e.to_string())?;
    let info = Val::Record(vec![
        ("call-id".into(), Val::String("b".into())),
        ("time-left-ms".into(), Val::Option(None)),
        ("traceparent".into(), Val::String(String::new())),
    ]);
    let raw_call = || -> Result<(), String> {
        let mut store = Store::new(
            &raw_engine,
            Raw {
                wasi: WasiCtx::builder().build(),
                table: Default::default(),
            },
        );
        let instance = pre.instantiate(&mut store).map_err(|e| e.to_string())?;
        let tools = instance
            .get_export_index(&mut store, None, "rho:plugin/tools@3.0.0")
            .ok_or("no tools export")?;
        let call = instance
            .get_export_index(&mut store, Some(&tools), "call")
            .and_then(|i| instance.get_func(&mut store, i))
            .ok_or("no call export")?;
        let params = [
            Val::String("echo".into()),
            Val::String(args.to_string()),
            info.clone(),
        ];
        let mut results = [Val::Bool(false)];
        call.call(&mut store, &params, &mut results)
            .map_err(|e| e.to_string())?;
        Ok(())
    };
    let n = if ctx.quick { 200 } else { 1000 };
    let (mut rho, mut raw) = (Vec::new(), Vec::new());
    for run in 0..=ctx.runs() {
        let started = Instant::now();
        for _ in 0..n {
            let ctx = ToolCtx::new("b", quiet.clone());
            let answered = plugin.call("echo", &args, ctx).await;
            answered.map_err(|e| format!("{e:?}"))?;
        }
        let rho_us = per_iter_us(n, started);
        let started = Instant::now();
        for _ in 0..n {
            raw_call()?;
        }
        let raw_us = per_iter_us(n, started);
        // The first run warms up.
        if run > 0 {
            rho.push(rho_us);
            raw.push(raw_us);
        }
    }
    Ok(Figure::paired(
        "wasm_instance_call",
        "us/call",
        "wasmtime: store + instance + dynamic call",
        &mut rho,
        &mut raw,
    ))
}

/// `bytes` (a component) with a custom section `rho-bench` holding `n`: the same code, another
/// content hash.
fn variant(bytes: &[u8], n: u64) -> Vec<u8> {
    let name = b"rho-bench";
    let payload = n.to_le_bytes();
    // A custom section: id 0, its size, then its name's length, its name and its payload (all
    // under 128 bytes: one-byte LEB128 lengths).
    let mut out = bytes.to_vec();
    out.extend([0, (1 + name.len() + payload.len()) as u8, name.len() as u8]);
    out.extend(name);
    out.extend(payload);
    out
}

/// Milliseconds from a new `echo.wasm` landing in a host's directory to its first answer, with
/// new content each time and alternating between two contents seen before, and the raw
/// baselines (compile, deserialize) of the same contents.
async fn reloads(ctx: &Ctx, bytes: &[u8]) -> Result<Vec<Figure>, String> {
    let dir = std::env::temp_dir().join(format!("rho-bench-wasm-reload-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let target = dir.join("echo.wasm");
    std::fs::write(&target, variant(bytes, 0)).map_err(|e| e.to_string())?;
    let bus = rho_runtime::Bus::default();
    let mut events = bus.subscribe();
    let engine = WasmEngine::new(WasmLimits::default()).map_err(|e| e.to_string())?;
    let (host, reports) = Host::builder()
        .plugin_dir(&dir, DirOptions::in_process())
        .components(engine)
        .bus(bus)
        .gate(allow_all())
        .build()
        .await
        .map_err(|e| e.to_string())?;
    super::loaded(&reports)?;
    let call = ToolCall::new("b", "echo", json!({"text": "hi"}));
    let raw_engine = Engine::default();
    let runs = ctx.runs();
    let (mut fresh, mut compile, mut seen, mut deserialize) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // Contents 1 and 2 first (not measured), then new ones (3 and on) and 1 and 2 alternately.
    let mut next_new = 2;
    for run in 0..runs * 2 + 2 {
        let new = run < 2 || run % 2 == 0;
        let n = match run {
            0 | 1 => run as u64 + 1,
            _ if new => {
                next_new += 1;
                next_new
            }
            _ => 1 + (run as u64 / 2) % 2,
        };
        let content = variant(bytes, n);
        let sha256 = rho_runtime::sha256_hex(&content);
        let started = Instant::now();
        super::reload::install(&content, &target);
        let reports = host.reload().await;
        if let Some(error) = reports.iter().flat_map(|r| &r.errors).next() {
            return Err(format!("reload {run}: {error}"));
        }
        loop {
            let item = tokio::time::timeout(std::time::Duration::from_secs(60), events.recv())
                .await
                .map_err(|_| format!("reload {run}: no plugin_reloaded within 60 s"))?
                .ok_or("the bus closed")?;
            if let rho_runtime::BusItem::Event(event) = item
                && matches!(&event.kind, rho_runtime::EventKind::PluginReloaded { new_sha256, .. } if *new_sha256 == sha256)
            {
                break;
            }
        }
        let r = host.call_with(&call, &CallOptions::default()).await;
        if r.outcome != rho_runtime::Outcome::Ok {
            return Err(format!("reload {run}: {}", r.text()));
        }
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let started = Instant::now();
        let component = Component::new(&raw_engine, &content).map_err(|e| e.to_string())?;
        let compile_ms = started.elapsed().as_secs_f64() * 1e3;
        let serialized = component.serialize().map_err(|e| e.to_string())?;
        let started = Instant::now();
        // SAFETY: serialized just above by the same engine.
        unsafe { Component::deserialize(&raw_engine, &serialized) }.map_err(|e| e.to_string())?;
        let deserialize_ms = started.elapsed().as_secs_f64() * 1e3;
        if run >= 2 && new {
            fresh.push(ms);
            compile.push(compile_ms);
        } else if run >= 2 {
            seen.push(ms);
            deserialize.push(deserialize_ms);
        }
    }
    host.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(vec![
        Figure::paired(
            "wasm_reload",
            "ms",
            "Component::new of the new content",
            &mut fresh,
            &mut compile,
        ),
        Figure::paired(
            "wasm_reload_cached",
            "ms",
            "Component::deserialize (in memory)",
            &mut seen,
            &mut deserialize,
        ),
    ])
}

fn loads(ctx: &Ctx, file: &Path, bytes: &[u8]) -> Result<Vec<Figure>, String> {
    let runs = ctx.runs();
    let cache = std::env::temp_dir().join(format!("rho-bench-wasm-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let ms = |started: Instant| started.elapsed().as_secs_f64() * 1e3;
    let (mut load, mut compile, mut cached, mut deserialize) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 0..=runs {
        let engine = WasmEngine::new(WasmLimits::default()).map_err(|e| e.to_string())?;
        let started = Instant::now();
        engine
            .load(file, bytes, &Grants::default())
            .map_err(|e| e.to_string())?;
        let load_ms = ms(started);
        let raw_engine = Engine::default();
        let started = Instant::now();
        let component = Component::new(&raw_engine, bytes).map_err(|e| e.to_string())?;
        let compile_ms = ms(started);
        let serialized = component.serialize().map_err(|e| e.to_string())?;
        // A restart: a new engine over the cache the first run filled.
        let engine = WasmEngine::builder()
            .cache_dir(&cache)
            .build()
            .map_err(|e| e.to_string())?;
        let started = Instant::now();
        engine
            .load(file, bytes, &Grants::default())
            .map_err(|e| e.to_string())?;
        let cached_ms = ms(started);
        let started = Instant::now();
        // SAFETY: the bytes were serialized just above by an engine of the same configuration.
        unsafe { Component::deserialize(&raw_engine, &serialized) }.map_err(|e| e.to_string())?;
        let deserialize_ms = ms(started);
        if run > 0 {
            load.push(load_ms);
            compile.push(compile_ms);
            cached.push(cached_ms);
            deserialize.push(deserialize_ms);
        }
    }
    let _ = std::fs::remove_dir_all(&cache);
    let kib = bytes.len() / 1024;
    Ok(vec![
        Figure::paired(
            "wasm_load",
            "ms",
            format!("Component::new ({kib} KiB component)"),
            &mut load,
            &mut compile,
        ),
        Figure::paired(
            "wasm_load_cached",
            "ms",
            "Component::deserialize (in memory)",
            &mut cached,
            &mut deserialize,
        ),
    ])
}

fn memory(file: &Path, bytes: &[u8]) -> Result<Figure, String> {
    const N: usize = 8;
    let before = rss_kib();
    let mut kept = Vec::new();
    for _ in 0..N {
        let engine = WasmEngine::new(WasmLimits::default()).map_err(|e| e.to_string())?;
        let plugin = engine
            .load(file, bytes, &Grants::default())
            .map_err(|e| e.to_string())?;
        kept.push((engine, plugin));
    }
    let rho = rss_kib().saturating_sub(before) as f64 / N as f64;
    drop(kept);
    let before = rss_kib();
    let mut raw = Vec::new();
    for _ in 0..N {
        let engine = Engine::default();
        let component = Component::new(&engine, bytes).map_err(|e| e.to_string())?;
        raw.push((engine, component));
    }
    let raw_kib = rss_kib().saturating_sub(before) as f64 / N as f64;
    drop(raw);
    Ok(Figure {
        name: "wasm_mem".into(),
        value: rho,
        unit: "KiB".into(),
        baseline: "an engine + Component::new".into(),
        baseline_value: raw_kib,
        runs: N,
        spread: None,
    })
}
