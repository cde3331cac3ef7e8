//! A plugin directory's lock file ([`PluginLock`]): what `rho plugin install` put in the
//! directory, each file with the SHA-256 of its bytes, the registry digest it came from and who
//! signed it. It lives beside the directory as `<dir>.lock` ([`PluginLock::path_for`]), outside
//! it, so a plugin that may write its own directory still cannot rewrite it through a grant on
//! that directory alone.
//!
//! The file is JSON, one object:
//!
//! ```json
//! { "lock_version": 1,
//!   "plugins": [ { "file": "libecho.so", "name": "echo", "version": "0.1.0",
//!                  "sha256": "9f86d0…", "digest": "sha256:4e1a…",
//!                  "source": "oci://127.0.0.1:5000/tools/echo:0.1.0",
//!                  "signer": "E2C8AD6C1A10B1F3", "capabilities": { "network": false } } ] }
//! ```
//!
//! A directory loaded with [`DirOptions::locked`](crate::DirOptions::locked) loads only files
//! the lock names with the SHA-256 of their bytes: the private copy's hash is compared before
//! anything of the file is mapped or run, and a file that is not in the lock or differs is
//! refused with one line. The lock is read again at every load, so an install (which writes the
//! lock before it renames the file in) is taken whole by hot reload.
//!
//! ```
//! use rho_runtime::{LockedPlugin, PluginLock};
//! let dir = tempfile::tempdir().unwrap();
//! let plugins = dir.path().join("plugins");
//! let mut lock = PluginLock::default();
//! lock.put(LockedPlugin {
//!     file: "libecho.so".into(),
//!     name: "echo".into(),
//!     version: "0.1.0".into(),
//!     sha256: "00".repeat(32),
//!     digest: format!("sha256:{}", "11".repeat(32)),
//!     source: "oci://127.0.0.1:5000/tools/echo:0.1.0".into(),
//!     signer: None,
//!     capabilities: Default::default(),
//! });
//! lock.write(&plugins).unwrap();
//! assert_eq!(PluginLock::read(&plugins).unwrap().get("libecho.so").unwrap().name, "echo");
//! ```

use std::io::Write as _;
use std::path::{Path, PathBuf};

use rho_plugin_api::Capabilities;
use serde::{Deserialize, Serialize};

/// The lock file format this version reads and writes.
pub const LOCK_VERSION: u32 = 1;

/// The largest lock file read, bytes (a few thousand plugins).
const MAX_LOCK_BYTES: u64 = 16 << 20;

/// What a plugin directory holds by installation: one [`LockedPlugin`] per file, sorted by file
/// name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginLock {
    /// The format's version ([`LOCK_VERSION`]).
    pub lock_version: u32,
    /// The installed files, sorted by name, each once.
    pub plugins: Vec<LockedPlugin>,
}

impl Default for PluginLock {
    /// An empty lock of the current version.
    fn default() -> Self {
        PluginLock {
            lock_version: LOCK_VERSION,
            plugins: Vec::new(),
        }
    }
}

/// One installed plugin file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedPlugin {
    /// The file's name in the directory (no path: `libecho.so`, `echo.wasm`).
    pub file: String,
    /// The plugin's name, as it declares it.
    pub name: String,
    /// The plugin's version, as it declares it.
    pub version: String,
    /// SHA-256 of the file's bytes, lowercase hex (what a locked directory checks).
    pub sha256: String,
    /// The registry manifest's digest it was installed from (`sha256:…`).
    pub digest: String,
    /// Where it came from (`oci://REGISTRY/REPO:TAG`, as the install named it).
    pub source: String,
    /// The minisign key id (16 hex digits) of the key whose signature was verified; `None` for
    /// an unsigned artifact installed on explicit request.
    pub signer: Option<String>,
    /// What the plugin declares it needs, as shown when it was installed.
    #[serde(default)]
    pub capabilities: Capabilities,
}

/// Why a lock file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Reading or writing it failed.
    #[error("{}: {reason}", path.display())]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The operating system's reason.
        reason: String,
    },
    /// It is not a lock file of this version.
    #[error("{}: not a plugin lock file: {reason}", path.display())]
    Invalid {
        /// The lock file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

impl PluginLock {
    /// The lock file of plugin directory `dir`: `dir` with `.lock` appended (`plugins` ->
    /// `plugins.lock`), beside it.
    pub fn path_for(dir: &Path) -> PathBuf {
        let mut name = dir
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_else(|| "plugins".into());
        name.push(".lock");
        let parent = dir
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        parent.join(name)
    }

    /// Reads `dir`'s lock; an absent lock file is an empty lock.
    pub fn read(dir: &Path) -> Result<PluginLock, LockError> {
        let path = Self::path_for(dir);
        let io = |e: std::io::Error| LockError::Io {
            path: path.clone(),
            reason: e.to_string(),
        };
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(io(e)),
        };
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX_LOCK_BYTES), &mut text)
            .map_err(io)?;
        let invalid = |reason: String| LockError::Invalid {
            path: path.clone(),
            reason,
        };
        let lock: PluginLock = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        if lock.lock_version != LOCK_VERSION {
            return Err(invalid(format!(
                "lock_version {} (this rho reads {LOCK_VERSION})",
                lock.lock_version
            )));
        }
        if let Some(bad) = lock.plugins.iter().find(|p| !plain_name(&p.file)) {
            return Err(invalid(format!("{:?} is not a file name", bad.file)));
        }
        Ok(lock)
    }

    /// Writes the lock beside `dir` atomically: a temporary file beside it, synced, then renamed
    /// over the old one (a reader sees the old lock or the new one, never a part).
    pub fn write(&self, dir: &Path) -> Result<(), LockError> {
        let path = Self::path_for(dir);
        let io = |e: std::io::Error| LockError::Io {
            path: path.clone(),
            reason: e.to_string(),
        };
        let mut text = serde_json::to_vec_pretty(self).map_err(|e| io(std::io::Error::other(e)))?;
        text.push(b'\n');
        let mut temporary = path.clone().into_os_string();
        temporary.push(format!(".tmp.{}", std::process::id()));
        let temporary = PathBuf::from(temporary);
        let written = (|| {
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(&text)?;
            file.sync_all()?;
            std::fs::rename(&temporary, &path)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        written.map_err(io)?;
        sync_parent(&path);
        Ok(())
    }

    /// The entry for file `file`.
    pub fn get(&self, file: &str) -> Option<&LockedPlugin> {
        self.plugins.iter().find(|p| p.file == file)
    }

    /// Adds `plugin`, replacing the entry of the same file; the entries stay sorted.
    pub fn put(&mut self, plugin: LockedPlugin) {
        self.plugins.retain(|p| p.file != plugin.file);
        self.plugins.push(plugin);
        self.plugins.sort_by(|a, b| a.file.cmp(&b.file));
    }

    /// Removes and returns the entry for `file`.
    pub fn take(&mut self, file: &str) -> Option<LockedPlugin> {
        let at = self.plugins.iter().position(|p| p.file == file)?;
        Some(self.plugins.remove(at))
    }

    /// Whether a file named `file` whose bytes hash to `sha256` may load in a locked directory:
    /// `Err` is the one line that says why not.
    pub fn admits(&self, file: &str, sha256: &str) -> Result<(), String> {
        match self.get(file) {
            None => Err(
                "not in the directory's lock file: a locked directory loads only installed plugins"
                    .into(),
            ),
            Some(entry) if entry.sha256 != sha256 => Err(format!(
                "its content (sha256 {}) is not what was installed (sha256 {} of {} {})",
                short(sha256),
                short(&entry.sha256),
                entry.name,
                entry.version
            )),
            Some(_) => Ok(()),
        }
    }
}

/// In a locked directory: whether `path`, whose private copy hashes to `sha256`, is what the
/// directory's lock file says was installed (read at each load: an install writes the lock
/// before it renames the file in).
pub(crate) fn admit(dir: &Path, path: &Path, sha256: &str) -> Result<(), rho_worker::LoadError> {
    let refused = |reason: String| rho_worker::LoadError::Refused {
        path: path.to_owned(),
        reason,
    };
    let lock = PluginLock::read(dir).map_err(|e| refused(e.to_string()))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    lock.admits(&name, sha256).map_err(refused)
}

/// A file name with no path in it.
fn plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/') && !name.contains('\0')
}

/// The first 12 hex digits of a hash, as rho shows builds.
fn short(sha256: &str) -> &str {
    sha256.get(..12).unwrap_or(sha256)
}

/// Syncs the directory holding `path`, so a rename in it survives a crash (best effort).
pub(crate) fn sync_parent(path: &Path) {
    if let Some(parent) = path.parent()
        && let Ok(dir) = std::fs::File::open(if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        })
    {
        let _ = dir.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_sits_beside_its_directory() {
        assert_eq!(
            PluginLock::path_for(Path::new("/srv/plugins")),
            Path::new("/srv/plugins.lock")
        );
        assert_eq!(
            PluginLock::path_for(Path::new("plugins")),
            Path::new("./plugins.lock")
        );
        assert_eq!(
            PluginLock::path_for(Path::new("/srv/plugins/")),
            Path::new("/srv/plugins.lock")
        );
    }

    #[test]
    fn a_lock_naming_a_path_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().join("p");
        std::fs::write(
            PluginLock::path_for(&plugins),
            r#"{"lock_version":1,"plugins":[{"file":"../x.so","name":"x","version":"1","sha256":"","digest":"","source":"","signer":null}]}"#,
        )
        .unwrap();
        let err = PluginLock::read(&plugins).unwrap_err().to_string();
        assert!(err.contains("not a file name"), "{err}");
    }
}
