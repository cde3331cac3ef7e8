//! Tools for rho plugin authors, shared by the `rho plugin` commands and `cargo xtask`: make a
//! plugin crate ([`scaffold`]), load a built plugin the way a host would and show what it offers
//! ([`check`]), and rebuild and install a plugin on every save ([`dev`]).
//!
//! ```no_run
//! use std::path::Path;
//! use rho_devkit::dev::Build;
//! use rho_devkit::scaffold::{self, Layout};
//!
//! // A crate of its own in ./greet, depending on the plugin API by version (patched to the copy
//! // this program carries, in rho's data directory, until the API is on crates.io).
//! let api = scaffold::write_api_copy(&scaffold::data_dir()?)?;
//! let layout = Layout::Standalone { api };
//! let dir = scaffold::new_plugin("greet", Path::new("."), &layout, Build::Native)?;
//! rho_devkit::dev::build(&dir, None)?; // target/debug/libgreet.so
//! rho_devkit::dev::build(&dir, Some(Build::Component))?; // target/wasm32-wasip2/release/greet.wasm
//! # Ok::<(), rho_devkit::DevkitError>(())
//! ```
#![warn(missing_docs)]

pub mod check;
pub mod dev;
pub mod scaffold;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Why a devkit task failed. One line for a person.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DevkitError {
    /// The name cannot be a plugin's crate and tool name.
    #[error("{0}")]
    NameRefused(String),
    /// The crate directory exists already; nothing was changed.
    #[error("{} already exists; nothing was changed", .0.display())]
    Exists(PathBuf),
    /// A file or directory could not be read or written.
    #[error("{}: {reason}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's reason.
        reason: String,
    },
    /// A cargo command failed (its own output has the details).
    #[error("{0}")]
    Cargo(String),
    /// Watching the sources failed.
    #[error("cannot watch {}: {reason}", path.display())]
    Watch {
        /// What was to be watched.
        path: PathBuf,
        /// Why not.
        reason: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DevkitError + '_ {
    move |e| DevkitError::Io {
        path: path.to_owned(),
        reason: e.to_string(),
    }
}

/// `cargo metadata` of the manifest `manifest` (its whole graph, or only its workspace's members
/// with `no_deps`), parsed.
pub fn cargo_metadata(manifest: &Path, no_deps: bool) -> Result<serde_json::Value, DevkitError> {
    let mut cmd = cargo();
    cmd.args(["metadata", "--format-version", "1"]);
    if no_deps {
        cmd.arg("--no-deps");
    }
    let out = cmd
        .arg("--manifest-path")
        .arg(manifest)
        .output()
        .map_err(|e| DevkitError::Cargo(format!("cannot run cargo metadata: {e}")))?;
    if !out.status.success() {
        return Err(DevkitError::Cargo(format!(
            "cargo metadata for {} failed: {}",
            manifest.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| DevkitError::Cargo(format!("cargo metadata: {e}")))
}

/// The library name of the `cdylib` target of `package` (an entry of `cargo metadata`'s
/// `packages`), as its file is named (`-` made `_`); `None` when it has none: not a plugin.
pub fn cdylib_name(package: &serde_json::Value) -> Option<String> {
    package["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| {
            t["crate_types"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "cdylib"))
        })
        .and_then(|t| t["name"].as_str())
        .map(|name| name.replace('-', "_"))
}

/// The cargo that runs this program (`$CARGO`), else `cargo` on `PATH`, without the variables
/// cargo sets for the program it runs (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, ...): a build script
/// that watches one of them (ring's does) would see it change and build again, and so would
/// everything above it.
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(set_by_cargo_for_its_program) {
            cmd.env_remove(&key);
        }
    }
    cmd
}

/// Whether `key` is a variable cargo sets for the crate it builds or runs (not one of cargo's
/// own settings, such as `CARGO_HOME` or `CARGO_TARGET_DIR`).
pub fn set_by_cargo_for_its_program(key: &str) -> bool {
    key.starts_with("CARGO_PKG_")
        || matches!(
            key,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
                | "OUT_DIR"
        )
}

/// Installs `lib` into the plugin directory `out` atomically: written to a hidden temporary file
/// in `out`, then renamed into place, so a host watching `out` never sees a partial file.
pub fn install(lib: &Path, out: &Path) -> Result<PathBuf, DevkitError> {
    std::fs::create_dir_all(out).map_err(io(out))?;
    let name = lib.file_name().ok_or_else(|| DevkitError::Io {
        path: lib.to_owned(),
        reason: "no file name".into(),
    })?;
    let dest = out.join(name);
    let tmp = out.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    std::fs::copy(lib, &tmp).map_err(io(lib))?;
    std::fs::rename(&tmp, &dest).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(&dest)(e)
    })?;
    Ok(dest)
}
