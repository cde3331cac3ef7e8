//! Finding, building and installing the workspace's plugin crates.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

static WORKSPACE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Points the tasks at another workspace (`--workspace DIR`); call once, before any task.
pub fn set_workspace_root(dir: PathBuf) {
    let _ = WORKSPACE.set(dir);
}

/// The workspace root: `--workspace DIR`, else this repository (the parent of this crate).
pub fn workspace_root() -> PathBuf {
    WORKSPACE.get().cloned().unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .map(Path::to_owned)
            .unwrap_or_else(|| PathBuf::from("."))
    })
}

/// The cargo that runs this task, in the workspace, without the variables cargo set for this
/// task (see [`rho_devkit::cargo`]).
pub fn cargo() -> Command {
    let mut cmd = rho_devkit::cargo();
    cmd.current_dir(workspace_root());
    cmd
}

/// The target directory cargo builds into.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// The default plugin directory: `target/plugins`.
pub fn default_out() -> PathBuf {
    target_dir().join("plugins")
}

/// A plugin crate of the workspace.
#[derive(Debug, Clone)]
pub struct PluginCrate {
    /// The package name.
    pub name: String,
    /// The library target's name (what the file is called after).
    pub lib_name: String,
    /// The crate's directory.
    pub dir: PathBuf,
    /// A test fixture (`[package.metadata.rho] fixture = true`): fault injectors and hostile
    /// plugins, never installed by `build-plugins`.
    pub fixture: bool,
}

impl PluginCrate {
    /// The file name of its library: `lib<name>.so` on Linux.
    pub fn file_name(&self) -> String {
        format!(
            "{}{}{}",
            std::env::consts::DLL_PREFIX,
            self.lib_name,
            std::env::consts::DLL_SUFFIX
        )
    }
}

/// The workspace's plugin crates: `cdylib` crates that depend on `rho-plugin-api`, test fixtures
/// included (see [`examples`]).
pub fn discover() -> Result<Vec<PluginCrate>, String> {
    let meta = rho_devkit::cargo_metadata(&workspace_root().join("Cargo.toml"), true)
        .map_err(|e| e.to_string())?;
    let mut plugins = Vec::new();
    for package in meta["packages"].as_array().into_iter().flatten() {
        let uses_api = package["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|d| d["name"] == "rho-plugin-api");
        let fixture = package["metadata"]["rho"]["fixture"] == true;
        let lib_name = rho_devkit::cdylib_name(package);
        if let (true, Some(lib_name), Some(name)) = (uses_api, lib_name, package["name"].as_str()) {
            let manifest = PathBuf::from(package["manifest_path"].as_str().unwrap_or_default());
            plugins.push(PluginCrate {
                name: name.to_owned(),
                lib_name,
                dir: manifest.parent().map(Path::to_owned).unwrap_or_default(),
                fixture,
            });
        }
    }
    plugins.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(plugins)
}

/// The example plugins: every plugin crate but the test fixtures.
pub fn examples() -> Result<Vec<PluginCrate>, String> {
    Ok(discover()?.into_iter().filter(|p| !p.fixture).collect())
}

/// The example plugins and the named fixtures (the demo's and the benchmarks' fault injectors).
pub fn examples_and(fixtures: &[&str]) -> Result<Vec<PluginCrate>, String> {
    Ok(discover()?
        .into_iter()
        .filter(|p| !p.fixture || fixtures.contains(&p.name.as_str()))
        .collect())
}

/// Builds `plugins` and the packages `also` in one cargo invocation (so every dependency is
/// resolved and built once), showing cargo's progress; returns each plugin's library path.
pub fn build(
    plugins: &[PluginCrate],
    also: &[&str],
    release: bool,
) -> Result<Vec<PathBuf>, String> {
    let mut cmd = cargo();
    cmd.arg("build");
    for name in plugins
        .iter()
        .map(|p| p.name.as_str())
        .chain(also.iter().copied())
    {
        cmd.args(["-p", name]);
    }
    if release {
        cmd.arg("--release");
    }
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run cargo build: {e}"))?;
    if !status.success() {
        let names: Vec<&str> = plugins.iter().map(|p| p.name.as_str()).collect();
        return Err(format!(
            "the build of {} failed; the installed versions are untouched",
            names.join(", ")
        ));
    }
    let profile = if release { "release" } else { "debug" };
    Ok(plugins
        .iter()
        .map(|p| target_dir().join(profile).join(p.file_name()))
        .collect())
}

/// Builds `plugins` (and the packages `also`) in one invocation and installs each library into
/// `out`; returns the installed paths. Stops at the first failure (the ones installed before stay).
pub fn build_and_install(
    plugins: &[PluginCrate],
    also: &[&str],
    release: bool,
    out: &Path,
) -> Result<Vec<PathBuf>, String> {
    let started = Instant::now();
    let libs = build(plugins, also, release)?;
    let mut installed = Vec::new();
    for lib in libs {
        installed.push(rho_devkit::install(&lib, out).map_err(|e| e.to_string())?);
    }
    eprintln!(
        "installed {} plugin(s) into {} ({:.1} s)",
        installed.len(),
        out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(installed)
}
