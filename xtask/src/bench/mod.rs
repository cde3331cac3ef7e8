//! `cargo xtask bench`: every performance figure of rho beside its raw baseline, measured in the
//! same run, in release builds. Figures are printed and written to `target/bench/report.json`;
//! they never fail the build.

mod bus;
mod inproc;
pub mod instructions;
mod isolated;
pub mod mcp;
mod mcp_source;
mod nats;
mod otel;
mod policy;
mod reload;
mod wasm;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::plugins::{self, cargo, target_dir};

/// One figure of the report.
#[derive(Debug, Clone)]
pub struct Figure {
    /// e.g. `inproc_call`.
    pub name: String,
    /// rho's figure.
    pub value: f64,
    /// Its unit (`us/call`, `events/s`...).
    pub unit: String,
    /// What the baseline is.
    pub baseline: String,
    /// The baseline's figure, in the same unit.
    pub baseline_value: f64,
    /// How many measured runs the medians are of.
    pub runs: usize,
    /// The lowest and highest ratio of one run's figure to the same run's baseline, where rho
    /// and its baseline were measured in pairs.
    pub spread: Option<(f64, f64)>,
}

impl Figure {
    /// A figure of paired runs (`rho[i]` and `raw[i]` measured one after the other): the median
    /// of each side and the spread of the per-run ratios.
    pub fn paired(
        name: impl Into<String>,
        unit: &str,
        baseline: impl Into<String>,
        rho: &mut [f64],
        raw: &mut [f64],
    ) -> Figure {
        let ratios = rho
            .iter()
            .zip(raw.iter())
            .filter(|(_, raw)| **raw != 0.0)
            .map(|(rho, raw)| rho / raw);
        let spread = ratios.fold(None, |acc: Option<(f64, f64)>, r| match acc {
            None => Some((r, r)),
            Some((low, high)) => Some((low.min(r), high.max(r))),
        });
        Figure {
            name: name.into(),
            value: median(rho),
            unit: unit.into(),
            baseline: baseline.into(),
            baseline_value: median(raw),
            runs: rho.len(),
            spread,
        }
    }

    /// value / baseline_value.
    pub fn ratio(&self) -> f64 {
        if self.baseline_value == 0.0 {
            0.0
        } else {
            self.value / self.baseline_value
        }
    }
}

/// What a benchmark gets.
pub struct Ctx {
    /// The release plugin directory.
    pub plugins: PathBuf,
    /// Fewer runs, for a quick look.
    pub quick: bool,
}

impl Ctx {
    /// Measured runs per figure.
    pub fn runs(&self) -> usize {
        if self.quick { 5 } else { 15 }
    }

    /// A kept build of the `faults` plugin: `default` or `v2` (built with `RHO_FAULTS_TAG=v2`).
    pub fn variant(&self, tag: &str) -> PathBuf {
        self.plugins
            .with_file_name("variants")
            .join(format!("libfaults-{tag}.so"))
    }

    /// A library of the release plugin directory.
    pub fn plugin(&self, name: &str) -> PathBuf {
        self.plugins.join(format!(
            "{}{name}{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        ))
    }
}

/// `Err` with the load errors of a host's scan reports (a directory it cannot use, a plugin
/// that failed to load), if any.
pub fn loaded(reports: &[rho_runtime::ScanReport]) -> Result<(), String> {
    let errors: Vec<&str> = reports
        .iter()
        .flat_map(|r| &r.errors)
        .map(String::as_str)
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// The target directory (where the release `rho-worker` is).
pub fn plugins_target() -> PathBuf {
    target_dir()
}

/// The median of `values` (0 for none).
pub fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    }
}

/// Runs `f` once to warm up, then `runs` times, and returns the median of what it returns.
pub fn median_of(runs: usize, mut f: impl FnMut() -> f64) -> f64 {
    f();
    let mut values: Vec<f64> = (0..runs).map(|_| f()).collect();
    median(&mut values)
}

/// Microseconds per iteration of `f` over `n` iterations.
pub fn per_iter_us(n: usize, started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1e6 / n as f64
}

/// The runtime benchmarks run on: two worker threads, as on this 2-core machine.
pub fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))
}

/// The figures of a report written by an earlier run.
pub fn read_report(path: &Path) -> Result<Vec<Figure>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    figures_from_json(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Prints each figure of `now` beside the same figure of `base`: both values, the value's change
/// and both ratios to their baselines (the ratio is what to read on a noisy machine). Figures
/// only one side has are listed as such.
pub fn print_comparison(base: &[Figure], now: &[Figure]) {
    println!(
        "\n{:<28} {:>14} {:>14} {:>9}  {:>8} {:>8} {:<10}",
        "figure", "base", "now", "change", "ratio", "was", "unit"
    );
    for figure in now {
        match base.iter().find(|b| b.name == figure.name) {
            Some(before) => {
                let change = if before.value == 0.0 {
                    0.0
                } else {
                    (figure.value / before.value - 1.0) * 100.0
                };
                println!(
                    "{:<28} {:>14.3} {:>14.3} {:>+8.1}%  {:>8.2} {:>8.2} {:<10}",
                    figure.name,
                    before.value,
                    figure.value,
                    change,
                    figure.ratio(),
                    before.ratio(),
                    figure.unit
                );
            }
            None => println!(
                "{:<28} {:>14} {:>14.3}   (new)",
                figure.name, "-", figure.value
            ),
        }
    }
    for before in base
        .iter()
        .filter(|b| !now.iter().any(|f| f.name == b.name))
    {
        println!(
            "{:<28} {:>14.3} {:>14}   (not measured now)",
            before.name, before.value, "-"
        );
    }
}

/// `cargo xtask bench`: builds everything in release and runs the benchmarks in a release build
/// of this task.
pub fn run(quick: bool, only: &[String], compare: Option<&Path>) -> Result<(), String> {
    // Read first: a bad path is known before minutes of measuring.
    let base = compare.map(read_report).transpose()?;
    let plugins_dir = target_dir().join("bench").join("plugins");
    eprintln!("building release plugins into {}", plugins_dir.display());
    plugins::build_and_install(
        &plugins::examples_and(&["faults"])?,
        &["rho-runtime-cli", "xtask"],
        true,
        &plugins_dir,
    )?;
    build_variants(&plugins_dir)?;
    wasm::build(&plugins_dir)?;
    let exe = target_dir().join("release").join("xtask");
    let started = Instant::now();
    let mut figures = Vec::new();
    // One process per group: a group's leftovers (mapped plugin versions, idle threads, workers)
    // must not weigh on the next group's figures.
    for group in GROUPS {
        let selected: Vec<&String> = only
            .iter()
            .filter(|o| {
                group
                    .iter()
                    .any(|g| g.starts_with(o.as_str()) || o.starts_with(g))
            })
            .collect();
        if !only.is_empty() && selected.is_empty() {
            continue;
        }
        let out = target_dir()
            .join("bench")
            .join(format!("{}.json", group[0]));
        let mut cmd = std::process::Command::new(&exe);
        cmd.arg("bench-exec")
            .arg("--plugins")
            .arg(&plugins_dir)
            .arg("--out")
            .arg(&out);
        if quick {
            cmd.arg("--quick");
        }
        if only.is_empty() {
            cmd.args(group.iter());
        } else {
            cmd.args(selected);
        }
        eprintln!("measuring {} ...", group.join(", "));
        let status = cmd
            .status()
            .map_err(|e| format!("cannot run the release bench: {e}"))?;
        if !status.success() {
            return Err(format!(
                "the benchmarks of {} ended with {status}",
                group[0]
            ));
        }
        let text = std::fs::read_to_string(&out).map_err(|e| format!("{}: {e}", out.display()))?;
        figures.extend(figures_from_json(&text)?);
    }
    print_table(&figures);
    let path = write_report(&figures)?;
    eprintln!(
        "\nreport: {} ({:.0} s of measuring)",
        path.display(),
        started.elapsed().as_secs_f64()
    );
    if let Some(base) = base {
        print_comparison(&base, &figures);
    }
    Ok(())
}

/// The groups of figures, each measured in a process of its own.
const GROUPS: &[&[&str]] = &[
    &["plugin_load"],
    &["inproc_call"],
    &["reload"],
    &["isolated", "crash_detect", "timeout_kill", "mem_worker"],
    &["sandbox"],
    &["self_exec"],
    &["mcp_call"],
    &["mcp_source"],
    &["wasm"],
    &["mem_plugin"],
    &["bus"],
    &["nats"],
    &["otel"],
    &["instr"],
];

fn figures_from_json(text: &str) -> Result<Vec<Figure>, String> {
    let values: Vec<serde_json::Value> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    Ok(values
        .iter()
        .map(|v| Figure {
            name: v["name"].as_str().unwrap_or_default().to_owned(),
            value: v["value"].as_f64().unwrap_or_default(),
            unit: v["unit"].as_str().unwrap_or_default().to_owned(),
            baseline: v["baseline"].as_str().unwrap_or_default().to_owned(),
            baseline_value: v["baseline_value"].as_f64().unwrap_or_default(),
            runs: v["runs"].as_u64().unwrap_or_default() as usize,
            spread: v["ratio_min"].as_f64().zip(v["ratio_max"].as_f64()),
        })
        .collect())
}

/// Two release builds of `faults` that answer `build_tag` differently, kept beside the plugin
/// directory for the reload figures; the default build is restored last.
fn build_variants(plugins_dir: &Path) -> Result<(), String> {
    let keep = plugins_dir.with_file_name("variants");
    std::fs::create_dir_all(&keep).map_err(|e| format!("{}: {e}", keep.display()))?;
    for tag in ["v2", "default"] {
        let mut cmd = cargo();
        cmd.args(["build", "--quiet", "--release", "-p", "faults"]);
        if tag == "default" {
            cmd.env_remove("RHO_FAULTS_TAG");
        } else {
            cmd.env("RHO_FAULTS_TAG", tag);
        }
        let status = cmd
            .status()
            .map_err(|e| format!("cannot run cargo build: {e}"))?;
        if !status.success() {
            return Err(format!("building the `{tag}` variant of faults failed"));
        }
        let built = target_dir().join("release").join("libfaults.so");
        std::fs::copy(&built, keep.join(format!("libfaults-{tag}.so")))
            .map_err(|e| format!("{}: {e}", built.display()))?;
    }
    Ok(())
}

/// The benchmarks themselves (in the release build).
pub fn exec(
    plugins: &Path,
    quick: bool,
    only: &[String],
    out: Option<&Path>,
) -> Result<(), String> {
    let ctx = Ctx {
        plugins: plugins.to_owned(),
        quick,
    };
    if cfg!(debug_assertions) {
        eprintln!("warning: benchmarks built without optimizations; use `cargo xtask bench`");
    }
    let runtime = runtime()?;
    let wanted = |name: &str| {
        only.is_empty()
            || only
                .iter()
                .any(|o| name.starts_with(o.as_str()) || o.starts_with(name))
    };
    let started = Instant::now();
    let mut figures = Vec::new();
    if wanted("plugin_load") {
        figures.extend(inproc::load(&ctx)?);
    }
    if wanted("inproc_call") {
        figures.extend(runtime.block_on(inproc::calls(&ctx))?);
        figures.extend(runtime.block_on(policy::figures(&ctx))?);
    }
    if wanted("reload") {
        figures.extend(runtime.block_on(reload::reload(&ctx))?);
    }
    if ["isolated", "crash_detect", "timeout_kill", "mem_worker"]
        .iter()
        .any(|n| wanted(n))
    {
        figures.extend(runtime.block_on(isolated::figures(&ctx, &wanted))?);
    }
    if wanted("sandbox") {
        figures.extend(runtime.block_on(isolated::sandbox_cost(&ctx))?);
    }
    // Only by its group's name: `mem_worker` (a prefix of `mem_worker_self`) means the other group.
    if wanted("self_exec") {
        figures.extend(runtime.block_on(isolated::self_exec_cost(&ctx))?);
    }
    let only_sources = !only.is_empty() && only.iter().all(|o| o.starts_with("mcp_source"));
    if wanted("mcp") && !only_sources {
        figures.extend(runtime.block_on(mcp::figures(&ctx))?);
    }
    if wanted("mcp_source") {
        figures.extend(runtime.block_on(mcp_source::figures(&ctx))?);
    }
    if wanted("wasm") {
        figures.extend(runtime.block_on(wasm::figures(&ctx))?);
    }
    if wanted("mem_plugin") {
        figures.extend(inproc::memory(&ctx)?);
    }
    if wanted("bus") {
        figures.extend(runtime.block_on(bus::fanout(&ctx))?);
    }
    if wanted("nats") {
        figures.extend(runtime.block_on(nats::figures(&ctx))?);
    }
    if wanted("otel") {
        figures.extend(runtime.block_on(otel::figures(&ctx))?);
    }
    if wanted("instr") {
        figures.extend(instructions::figures(&ctx)?);
    }
    runtime.shutdown_timeout(Duration::from_secs(1));
    if let Some(out) = out {
        let text = serde_json::to_string(&report_values(&figures)).map_err(|e| e.to_string())?;
        return std::fs::write(out, text).map_err(|e| format!("{}: {e}", out.display()));
    }
    print_table(&figures);
    let path = write_report(&figures)?;
    eprintln!(
        "\nreport: {} ({:.0} s)",
        path.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn print_table(figures: &[Figure]) {
    println!(
        "\n{:<28} {:>14} {:<10} {:>14}  {:<40} {:>8} {:>13}",
        "figure", "rho", "unit", "baseline", "baseline is", "ratio", "runs min-max"
    );
    for f in figures {
        let spread = f
            .spread
            .map(|(low, high)| format!("{low:.2}-{high:.2}"))
            .unwrap_or_default();
        println!(
            "{:<28} {:>14.3} {:<10} {:>14.3}  {:<40} {:>8.2} {:>13}",
            f.name,
            f.value,
            f.unit,
            f.baseline_value,
            f.baseline,
            f.ratio(),
            spread
        );
    }
}

fn write_report(figures: &[Figure]) -> Result<PathBuf, String> {
    let dir = target_dir().join("bench");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let report = report_values(figures);
    let path = dir.join("report.json");
    let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// The figures as report.json holds them.
fn report_values(figures: &[Figure]) -> Vec<serde_json::Value> {
    figures
        .iter()
        .map(|f| {
            json!({
                "name": f.name,
                "value": f.value,
                "unit": f.unit,
                "baseline": f.baseline,
                "baseline_value": f.baseline_value,
                "ratio": f.ratio(),
                "ratio_min": f.spread.map(|s| s.0),
                "ratio_max": f.spread.map(|s| s.1),
                "runs": f.runs,
            })
        })
        .collect()
}
