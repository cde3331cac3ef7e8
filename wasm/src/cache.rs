//! Compiled components by the SHA-256 of their file: the last few in memory (a file copied under
//! another name, or a version that comes back, is not compiled again), and optionally on disk
//! (a restart does not compile again).
//!
//! A compiled component is machine code that wasmtime maps and runs without checking it again
//! (`Component::deserialize` is `unsafe` for that reason). Whoever can write the cache can run
//! code in the host, so the directory is held to a plugin directory's rules: its path walked
//! component by component, neither it nor any directory on the way writable by others, and each
//! file opened without following links, a regular file nobody else can write. A file wasmtime
//! does not accept (another engine build or configuration, a torn write) is compiled again and
//! replaced; new files are written beside under a temporary name and renamed into place.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock, PoisonError};

use rho_runtime::Trust;
use rho_worker::loader::open::{DEFAULT_MAX_FILE_SIZE, DirError, DirHandle, open_dir};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::error::WasmError;

/// How many compiled components are kept in memory beyond those in use.
const KEPT: usize = 16;

pub(crate) struct CompileCache {
    memory: Mutex<Memory>,
    disk: Option<Disk>,
}

#[derive(Default)]
struct Memory {
    by_sha: HashMap<String, Component>,
    order: VecDeque<String>,
}

struct Disk {
    dir: PathBuf,
    /// What the engine's build and configuration are: a file compiled by another is not read.
    engine_id: String,
    /// The directory made and checked, once: `Err` why it is not used.
    ready: OnceLock<Result<(), WasmError>>,
}

/// When a cache directory is made and checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CacheCheck {
    /// When the engine is built: a directory that cannot be used fails the build.
    AtBuild,
    /// When the first component is compiled: one that cannot be used is left out, said once.
    WhenFirstUsed,
}

impl CompileCache {
    /// A cache for `engine`, on disk in `dir` too (made 0700 if missing, then checked when
    /// `CacheCheck` says).
    pub(crate) fn new(
        engine: &Engine,
        dir: Option<(PathBuf, CacheCheck)>,
    ) -> Result<CompileCache, WasmError> {
        let disk = dir.map(|(dir, check)| {
            let mut hasher = std::hash::DefaultHasher::new();
            engine.precompile_compatibility_hash().hash(&mut hasher);
            let disk = Disk {
                dir,
                engine_id: format!("{:016x}", hasher.finish()),
                ready: OnceLock::new(),
            };
            (disk, check)
        });
        let disk = match disk {
            Some((disk, CacheCheck::AtBuild)) => {
                if let Err(e) = disk.usable() {
                    return Err(e.clone());
                }
                Some(disk)
            }
            Some((disk, CacheCheck::WhenFirstUsed)) => Some(disk),
            None => None,
        };
        Ok(CompileCache {
            memory: Mutex::default(),
            disk,
        })
    }

    /// Why the disk cache is not used, once that was found out.
    pub(crate) fn problem(&self) -> Option<WasmError> {
        match self.disk.as_ref()?.ready.get()? {
            Err(e) => Some(e.clone()),
            Ok(()) => None,
        }
    }

    /// The component of content `sha256` (`bytes`): kept in memory, read from disk, or compiled
    /// (and then kept).
    pub(crate) fn component(
        &self,
        engine: &Engine,
        sha256: &str,
        bytes: &[u8],
    ) -> wasmtime::Result<Component> {
        if let Some(component) = self.memory().by_sha.get(sha256) {
            return Ok(component.clone());
        }
        let disk = self.disk.as_ref().filter(|disk| disk.usable().is_ok());
        let component = match disk.and_then(|d| d.read(engine, sha256)) {
            Some(component) => component,
            None => {
                let component = Component::new(engine, bytes)?;
                if let Some(disk) = disk {
                    disk.write(sha256, &component);
                }
                component
            }
        };
        let mut memory = self.memory();
        if memory
            .by_sha
            .insert(sha256.to_owned(), component.clone())
            .is_none()
        {
            memory.order.push_back(sha256.to_owned());
        }
        while memory.order.len() > KEPT {
            if let Some(old) = memory.order.pop_front() {
                memory.by_sha.remove(&old);
            }
        }
        Ok(component)
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Disk {
    /// The directory made (0700) if missing and checked, the first time only.
    fn usable(&self) -> &Result<(), WasmError> {
        self.ready.get_or_init(|| {
            let refused = |reason: String| WasmError::Cache {
                dir: self.dir.display().to_string(),
                reason,
            };
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.dir)
                .map_err(|e| refused(e.to_string()))?;
            match open_dir(&self.dir, Trust::OwnerOnly) {
                Ok(_) => Ok(()),
                Err(DirError::Gone(e) | DirError::Unusable(e)) => {
                    let e = refused(e.to_string());
                    tracing::warn!("{e}; compiled components are kept in memory only");
                    Err(e)
                }
            }
        })
    }

    fn name(&self, sha256: &str) -> OsString {
        format!("{sha256}-{}.cwasm", self.engine_id).into()
    }

    /// The directory, checked again (its permissions may have changed since).
    fn open(&self) -> Option<DirHandle> {
        match open_dir(&self.dir, Trust::OwnerOnly) {
            Ok(handle) => Some(handle),
            Err(DirError::Gone(e) | DirError::Unusable(e)) => {
                tracing::warn!("the compiled-component cache is not used: {e}");
                None
            }
        }
    }

    fn read(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        let handle = self.open()?;
        let (mut file, _) = handle
            .open_entry(&self.name(sha256), Trust::OwnerOnly, DEFAULT_MAX_FILE_SIZE)
            .ok()?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).ok()?;
        // SAFETY: the file is in a directory only the host's user (or root) can write, reached
        // without a link others could have placed, itself a regular file nobody else can write
        // (the checks above); wasmtime checks it was compiled by this engine's build and
        // configuration, and refuses it otherwise.
        match unsafe { Component::deserialize(engine, &bytes) } {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::debug!(sha256, "a cached compiled component is not used: {e:#}");
                None
            }
        }
    }

    fn write(&self, sha256: &str, component: &Component) {
        let Some(_checked) = self.open() else { return };
        let bytes = match component.serialize() {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::warn!("a compiled component cannot be serialized: {e:#}");
                return;
            }
        };
        let written = (|| -> std::io::Result<()> {
            let mut file = tempfile::Builder::new()
                .prefix(".")
                .suffix(".tmp")
                .tempfile_in(&self.dir)?;
            file.write_all(&bytes)?;
            file.persist(self.dir.join(self.name(sha256)))?;
            Ok(())
        })();
        if let Err(e) = written {
            tracing::warn!(dir = %self.dir.display(), "a compiled component is not cached: {e}");
        }
    }
}
