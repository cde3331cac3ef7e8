//! `rho plugin dev` (and `cargo xtask dev NAME`): build a plugin crate, install its library (or
//! its WebAssembly component) into a plugin directory, and again after every change to its
//! sources, until interrupted. A host watching that directory reloads each new version.
//!
//! A crate builds as a native library unless its manifest says otherwise
//! (`[package.metadata.rho] build = "component"`, which `rho plugin new --wasm` writes) or the
//! caller asks for one kind ([`Build`]). A component is built for `wasm32-wasip2` in release
//! (a debug component is many times larger and slower to compile in the host); the target is
//! added with `rustup` when missing.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use notify_debouncer_full::new_debouncer;
use notify_debouncer_full::notify::RecursiveMode;

use crate::DevkitError;

/// What a plugin crate is built as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Build {
    /// A native library (`cdylib`, debug): `libNAME.so` (`.dylib` on macOS).
    Native,
    /// A WebAssembly component (`wasm32-wasip2`, release): `NAME.wasm`.
    Component,
}

/// The component target.
pub const COMPONENT_TARGET: &str = "wasm32-wasip2";

/// What the crate's manifest asks to be built as (`[package.metadata.rho] build`), native by
/// default.
fn declared_build(package: &serde_json::Value) -> Build {
    match package["metadata"]["rho"]["build"].as_str() {
        Some("component") => Build::Component,
        _ => Build::Native,
    }
}

/// Builds the crate in `crate_dir` as `build` (else as its manifest says) and returns the path of
/// what was built.
pub fn build(crate_dir: &Path, build: Option<Build>) -> Result<PathBuf, DevkitError> {
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
    let build = build.unwrap_or_else(|| declared_build(package));
    let mut cargo = crate::cargo();
    cargo
        .args(["build", "--lib", "--manifest-path"])
        .arg(&manifest);
    if build == Build::Component {
        add_component_target()?;
        cargo.args(["--release", "--target", COMPONENT_TARGET]);
    }
    let status = cargo
        .status()
        .map_err(|e| DevkitError::Cargo(format!("cannot run cargo build: {e}")))?;
    if !status.success() {
        return Err(DevkitError::Cargo(format!(
            "plugin `{name}` failed to build; the installed version is untouched"
        )));
    }
    let target = Path::new(meta["target_directory"].as_str().unwrap_or("target"));
    Ok(match build {
        Build::Native => target.join("debug").join(format!(
            "{}{lib}{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        )),
        Build::Component => target
            .join(COMPONENT_TARGET)
            .join("release")
            .join(format!("{lib}.wasm")),
    })
}

/// Adds the component target's standard library with `rustup` when it is missing (nothing when
/// it is there, or when the toolchain is not rustup's: cargo then says what is missing).
fn add_component_target() -> Result<(), DevkitError> {
    let installed = std::process::Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output();
    let Ok(installed) = installed else {
        return Ok(());
    };
    if String::from_utf8_lossy(&installed.stdout)
        .lines()
        .any(|l| l.trim() == COMPONENT_TARGET)
    {
        return Ok(());
    }
    eprintln!("[dev] adding the {COMPONENT_TARGET} target with rustup");
    let added = std::process::Command::new("rustup")
        .args(["target", "add", COMPONENT_TARGET])
        .status()
        .map_err(|e| DevkitError::Cargo(format!("cannot run rustup: {e}")))?;
    if added.success() {
        Ok(())
    } else {
        Err(DevkitError::Cargo(format!(
            "rustup target add {COMPONENT_TARGET} failed"
        )))
    }
}

fn cycle(crate_dir: &Path, out: &Path, kind: Option<Build>) {
    let started = Instant::now();
    match build(crate_dir, kind) {
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

/// Builds (as `kind`, else as its manifest says) and installs the crate in `crate_dir` into
/// `out`, then again after every change to its `src/`, `Cargo.toml` or `build.rs`, until the
/// process is interrupted.
pub fn run(crate_dir: &Path, out: &Path, kind: Option<Build>) -> Result<(), DevkitError> {
    // Nothing to watch is an error now, not a loop that waits for a crate to appear.
    let manifest = crate_dir.join("Cargo.toml");
    if !manifest.is_file() {
        return Err(DevkitError::Io {
            path: manifest,
            reason: "no plugin crate here (no Cargo.toml)".into(),
        });
    }
    eprintln!(
        "[dev] watching {} -> {}",
        crate_dir.display(),
        out.display()
    );
    cycle(crate_dir, out, kind);
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
            Ok(events) if events.iter().any(|e| !e.kind.is_access()) => cycle(crate_dir, out, kind),
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
