//! `[wasm]`: the engine that runs the components (`.wasm` files) of plugin directories. Read in
//! every build; the engine exists only with the `wasm` feature (on by default): without it,
//! `.wasm` files are not plugins.
//!
//! ```toml
//! [wasm]
//! memory_mb = 256                  # linear memory of one instance
//! scratch_mb = 64                  # each component's /tmp (in memory; 0: none)
//! fuel = 1000000000                # per call; unset: not counted
//! cache_dir = "/var/cache/rho/wasm" # default: $XDG_CACHE_HOME/rho/wasm or ~/.cache/rho/wasm
//! ```

use std::path::{Path, PathBuf};

use rho_runtime::{ConfigError, resolve_path};
use serde::{Deserialize, Serialize};

/// `[wasm]`: the limits of each component instance and where compiled components are kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WasmConfig {
    /// The linear memory of one instance, MiB (1 to 65536; default 256).
    pub memory_mb: u64,
    /// Each loaded component's scratch directory (`/tmp` as it sees it, in memory), MiB (0 to
    /// 65536; 0: none; default 64).
    pub scratch_mb: u64,
    /// The fuel of one call (about one unit per wasm instruction); unset: not counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fuel: Option<u64>,
    /// Where compiled components are kept across restarts (made 0700; refused when others can
    /// write it). Default: `$XDG_CACHE_HOME/rho/wasm`, else `~/.cache/rho/wasm`, else none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_dir: Option<PathBuf>,
}

impl Default for WasmConfig {
    /// 256 MiB per instance, 64 MiB of scratch, fuel not counted, the default cache directory.
    fn default() -> Self {
        WasmConfig {
            memory_mb: 256,
            scratch_mb: 64,
            fuel: None,
            cache_dir: None,
        }
    }
}

impl WasmConfig {
    /// Checks the ranges.
    pub fn check(&self) -> Result<(), ConfigError> {
        ConfigError::check_range("wasm.memory_mb", self.memory_mb, 1, 65_536)?;
        ConfigError::check_range("wasm.scratch_mb", self.scratch_mb, 0, 65_536)?;
        if let Some(fuel) = self.fuel {
            ConfigError::check_range("wasm.fuel", fuel, 1, u64::MAX)?;
        }
        Ok(())
    }

    /// Makes a relative `cache_dir` relative to `base`.
    pub fn resolve_paths(&mut self, base: &Path) {
        if let Some(dir) = &mut self.cache_dir {
            resolve_path(base, dir);
        }
    }

    /// The cache directory: the configured one, else the user's cache directory's `rho/wasm`.
    #[cfg(feature = "wasm")]
    pub fn cache_dir(&self) -> Option<PathBuf> {
        let home_cache = || std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache"));
        self.cache_dir.clone().or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .or_else(home_cache)
                .map(|cache| cache.join("rho/wasm"))
        })
    }

    /// The engine these settings describe; `Err` is one line. A configured cache directory
    /// that cannot be used is an error; the default one is checked when the first component
    /// loads, and one that cannot be used is said then, once (a host with no component says
    /// nothing of it).
    #[cfg(feature = "wasm")]
    pub fn engine(&self) -> Result<Engine, String> {
        use rho_runtime_wasm::{WasmEngine, WasmLimits};
        let limits = WasmLimits {
            memory_bytes: usize::try_from(self.memory_mb << 20).unwrap_or(usize::MAX),
            fuel: self.fuel,
            scratch_bytes: self.scratch_mb << 20,
        };
        let builder = WasmEngine::builder().limits(limits);
        let builder = match (&self.cache_dir, self.cache_dir()) {
            (Some(configured), _) => builder.cache_dir(configured),
            (None, Some(default)) => builder.cache_dir_if_usable(default),
            (None, None) => builder,
        };
        let engine = builder.build().map_err(|e| e.to_string())?;
        Ok(Engine {
            engine,
            said: std::sync::atomic::AtomicBool::new(false),
        })
    }
}

/// The CLI's component engine: rho-runtime-wasm's, and the line saying its default cache is
/// not used, once, when a component first finds out.
#[cfg(feature = "wasm")]
pub struct Engine {
    engine: rho_runtime_wasm::WasmEngine,
    said: std::sync::atomic::AtomicBool,
}

#[cfg(feature = "wasm")]
impl rho_runtime::ComponentEngine for Engine {
    fn load(
        &self,
        path: &Path,
        bytes: &[u8],
        sha256: &str,
        grants: &rho_runtime::Grants,
    ) -> Result<rho_runtime::LoadedComponent, rho_runtime::LoadError> {
        let loaded = rho_runtime::ComponentEngine::load(&self.engine, path, bytes, sha256, grants);
        if let Some(problem) = self.engine.cache_problem()
            && !self.said.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            eprintln!(
                "rho: {}; compiled components are kept in memory only",
                crate::render::terminal_safe(&problem.to_string())
            );
        }
        loaded
    }
}
