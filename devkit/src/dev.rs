//! `rho plugin dev` (and `cargo xtask dev NAME`): build a plugin crate, install its library into a
//! plugin directory, and again after every change to its sources, until interrupted. A host
//! watching that directory reloads each new version.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use notify_debouncer_full::new_debouncer;
use notify_debouncer_full::notify::RecursiveMode;

use crate::DevkitError;

/// Builds the library of the crate in `crate_dir` (debug) and returns its path.
pub fn build(crate_dir: &Path) -> Result<PathBuf, DevkitError> {
    let manifest = crate_dir.join("Cargo.toml");
    let meta = crate::cargo_metadata(&manifest, true)?;
    let wanted = std::path::absolute(&manifest).unwrap_or(manifest.clone());
    let package = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["manifest_path"].as_str().map(Path::new) == Some(wanted.as_path()))
        .ok_or_else(|| DevkitError::Cargo(format!("{}: no package", manifest.display())))?;
    let lib = crate::cdylib_name(package).ok_or_else(|| {
        DevkitError::Cargo(format!(
            "{}: no cdylib target (a plugin needs crate-type = [\"cdylib\"])",
            manifest.display()
        ))
    })?;
    let name = package["name"].as_str().unwrap_or_default();
    let status = crate::cargo()
        .args(["build", "--lib", "--manifest-path"])
        .arg(&manifest)
        .status()
        .map_err(|e| DevkitError::Cargo(format!("cannot run cargo build: {e}")))?;
    if !status.success() {
        return Err(DevkitError::Cargo(format!(
            "plugin `{name}` failed to build; the installed version is untouched"
        )));
    }
    let target = meta["target_directory"].as_str().unwrap_or("target");
    Ok(Path::new(target).join("debug").join(format!(
        "{}{lib}{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    )))
}

fn cycle(crate_dir: &Path, out: &Path) {
    let started = Instant::now();
    match build(crate_dir) {
        Ok(lib) => {
            let built = started.elapsed();
            let installing = Instant::now();
            match crate::install(&lib, out) {
                Ok(path) => eprintln!(
                    "[dev] built in {:.2} s, installed in {:.1} ms -> {}",
                    built.as_secs_f64(),
                    installing.elapsed().as_secs_f64() * 1e3,
                    path.display()
                ),
                Err(e) => eprintln!("[dev] install failed: {e}"),
            }
        }
        Err(e) => eprintln!("[dev] {e} (after {:.2} s)", started.elapsed().as_secs_f64()),
    }
}

/// Builds and installs the crate in `crate_dir` into `out`, then again after every change to
/// its `src/`, `Cargo.toml` or `build.rs`, until the process is interrupted.
pub fn run(crate_dir: &Path, out: &Path) -> Result<(), DevkitError> {
    eprintln!(
        "[dev] watching {} -> {}",
        crate_dir.display(),
        out.display()
    );
    cycle(crate_dir, out);
    let (tx, rx) = mpsc::channel();
    let mut debouncer = new_debouncer(Duration::from_millis(100), None, move |result| {
        let _ = tx.send(result);
    })
    .map_err(|e| DevkitError::Watch {
        path: crate_dir.to_owned(),
        reason: e.to_string(),
    })?;
    for watched in ["src", "Cargo.toml", "build.rs"] {
        let path = crate_dir.join(watched);
        if path.exists() {
            let mode = if path.is_dir() {
                RecursiveMode::Recursive
            } else {
                RecursiveMode::NonRecursive
            };
            debouncer
                .watch(&path, mode)
                .map_err(|e| DevkitError::Watch {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
        }
    }
    while let Ok(result) = rx.recv() {
        match result {
            Ok(events) if events.iter().any(|e| !e.kind.is_access()) => cycle(crate_dir, out),
            Ok(_) => {}
            Err(errors) => {
                for e in errors {
                    eprintln!("[dev] watch error: {e}");
                }
            }
        }
    }
    Ok(())
}
