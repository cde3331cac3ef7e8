//! `reload`: a new plugin file landed -> the first call served by the new version; and the memory
//! each in-process reload leaves mapped.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rho_runtime::{CallOptions, DirOptions, Host, ToolCall, allow_all};
use rho_worker::loader::{CallInfo, CopyDir, PluginFile, call_module, load_in_process};
use serde_json::json;

use super::{Ctx, Figure, median};

/// Resident memory of this process, in KiB.
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Writes `bytes` beside `dest` and renames it over `dest`: a new file lands at once.
pub fn install(bytes: &[u8], dest: &Path) {
    let tmp = dest.with_file_name(".landing.tmp");
    let _ = std::fs::write(&tmp, bytes);
    let _ = std::fs::rename(&tmp, dest);
}

async fn tag(host: &Host) -> String {
    let call = ToolCall::new("t", "build_tag", json!({}));
    host.call_with(&call, &CallOptions::default())
        .await
        .text()
        .into_owned()
}

/// A host of `dir` (in process, every version kept mapped, allow_all), watching it or not.
async fn host_of(dir: &Path, watch: bool) -> Result<Host, String> {
    let options = DirOptions {
        max_versions: 10_000,
        ..DirOptions::in_process()
    };
    let (host, reports) = Host::builder()
        .plugin_dir(dir, options)
        .watch(watch)
        .gate(allow_all())
        .build()
        .await
        .map_err(|e| e.to_string())?;
    super::loaded(&reports)?;
    Ok(host)
}

/// Figures `reload` (explicit scan: no debounce), `reload_watched` (with the watcher, debounce
/// included) and `reload_mem`.
pub async fn reload(ctx: &Ctx) -> Result<Vec<Figure>, String> {
    let variants = [
        std::fs::read(ctx.variant("default")).map_err(|e| e.to_string())?,
        std::fs::read(ctx.variant("v2")).map_err(|e| e.to_string())?,
    ];
    let tags = ["default", "v2"];
    let dir = std::env::temp_dir().join(format!("rho-bench-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let target = dir.join("libfaults.so");
    std::fs::write(&target, &variants[0]).map_err(|e| e.to_string())?;
    let host = host_of(&dir, false).await?;
    let runs = ctx.runs();

    // Explicit scans: the reload path itself.
    let mut samples = Vec::new();
    let rss_before = rss_kib();
    for i in 1..=runs * 2 {
        let landed = Instant::now();
        install(&variants[i % 2], &target);
        host.reload().await;
        let served = tag(&host).await;
        samples.push(landed.elapsed().as_secs_f64() * 1e3);
        if served != tags[i % 2] {
            return Err(format!("reload {i} served {served:?}"));
        }
    }
    let reloads = (runs * 2) as f64;
    let mem_per_reload = (rss_kib().saturating_sub(rss_before)) as f64 / reloads;
    let rho = median(&mut samples);

    host.shutdown().await;
    drop(host);

    // With the watcher (a watching host of the same directory): landing -> served, debounce
    // included.
    let host = host_of(&dir, true).await?;
    let mut watched = Vec::new();
    for i in 1..=runs {
        let want = tags[i % 2];
        let landed = Instant::now();
        install(&variants[i % 2], &target);
        loop {
            if tag(&host).await == want {
                break;
            }
            if landed.elapsed() > Duration::from_secs(10) {
                return Err("the watcher did not reload within 10 s".into());
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        watched.push(landed.elapsed().as_secs_f64() * 1e3);
    }
    host.shutdown().await;
    drop(host);

    // Raw: copy + dlopen + abi_stable init + describe + one call.
    let copies = CopyDir::new().map_err(|e| e.to_string())?;
    let sources: Vec<PathBuf> = (0..2)
        .map(|v| {
            let source = target.with_extension(format!("v{v}"));
            std::fs::write(&source, &variants[v]).map(|()| source)
        })
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    for i in 1..=runs * 2 {
        let started = Instant::now();
        let file = PluginFile::open(&sources[i % 2], &copies).map_err(|e| e.to_string())?;
        let loaded = load_in_process(&file).map_err(|e| e.to_string())?;
        let cancelled = std::sync::atomic::AtomicBool::new(false);
        let noop = |_: &str| {};
        let _ = call_module(
            loaded.module,
            "build_tag",
            "{}",
            "c",
            &cancelled,
            &noop,
            CallInfo::default(),
        );
        raw.push(started.elapsed().as_secs_f64() * 1e3);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let size_kib = variants[0].len() / 1024;
    Ok(vec![
        Figure {
            name: "reload".into(),
            value: rho,
            unit: "ms".into(),
            baseline: format!("copy + dlopen + init + call ({size_kib} KiB)"),
            baseline_value: median(&mut raw),
            runs: runs * 2,
            spread: None,
        },
        Figure {
            name: "reload_watched".into(),
            value: median(&mut watched),
            unit: "ms".into(),
            baseline: format!(
                "the debounce ({} ms)",
                rho_runtime::DEFAULT_DEBOUNCE.as_millis()
            ),
            baseline_value: rho_runtime::DEFAULT_DEBOUNCE.as_secs_f64() * 1e3,
            runs,
            spread: None,
        },
        Figure {
            name: "reload_mem".into(),
            value: mem_per_reload,
            unit: "KiB/reload".into(),
            baseline: format!("file size ({size_kib} KiB)"),
            baseline_value: size_kib as f64,
            runs: runs * 2,
            spread: None,
        },
    ])
}
