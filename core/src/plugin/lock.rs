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
    /// An install or removal that would overwrite or take what it should not.
    #[error("{}: {reason}", path.display())]
    Conflict {
        /// The file in the way.
        path: PathBuf,
        /// Why.
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
    /// `plugins.lock`), beside it: `dir` is made absolute and `.` and `..` taken out first, so
    /// `--dir .` run inside `/srv/plugins` names `/srv/plugins.lock`, never a file inside the
    /// directory. The root directory has no place beside it (see [`PluginLock::read`]).
    pub fn path_for(dir: &Path) -> PathBuf {
        let dir = normalized(dir);
        let mut name = dir
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_else(|| "plugins".into());
        name.push(".lock");
        dir.parent().unwrap_or(Path::new("/")).join(name)
    }

    /// Reads `dir`'s lock; an absent lock file is an empty lock.
    pub fn read(dir: &Path) -> Result<PluginLock, LockError> {
        let path = Self::path_for_named(dir)?;
        let io = |e: std::io::Error| LockError::Io {
            path: path.clone(),
            reason: e.to_string(),
        };
        let file = match open_nofollow(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(io(e)),
        };
        // As plugin files are: a lock others can write decides nothing.
        let meta = file.metadata().map_err(io)?;
        {
            use std::os::unix::fs::MetadataExt as _;
            // SAFETY: geteuid has no preconditions.
            let me = unsafe { libc::geteuid() };
            if !meta.is_file() || meta.mode() & 0o022 != 0 || (meta.uid() != me && meta.uid() != 0)
            {
                return Err(LockError::Invalid {
                    path: path.clone(),
                    reason:
                        "not a regular file owned by this user or root and writable by it alone"
                            .into(),
                });
            }
        }
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
        let path = Self::path_for_named(dir)?;
        let io = |e: std::io::Error| LockError::Io {
            path: path.clone(),
            reason: e.to_string(),
        };
        let mut text = serde_json::to_vec_pretty(self).map_err(|e| io(std::io::Error::other(e)))?;
        text.push(b'\n');
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let (temporary, mut file) = temporary_beside(&path, &name).map_err(io)?;
        let written = (|| {
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

    /// [`path_for`](Self::path_for), refusing a directory with nothing beside it (`/`).
    fn path_for_named(dir: &Path) -> Result<PathBuf, LockError> {
        if normalized(dir).file_name().is_none() {
            return Err(LockError::Invalid {
                path: dir.to_owned(),
                reason: "the root directory has no place beside it for a lock file".into(),
            });
        }
        Ok(Self::path_for(dir))
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

    /// Installs `bytes` as `entry.file` in plugin directory `dir` and records `entry`, so that
    /// a watching host takes the file whole and a locked host finds its hash: a hidden temporary
    /// file in `dir` (created new, links not followed), synced; the lock written; the file
    /// renamed in; the directory synced. Another file of the same plugin (another platform's
    /// name) goes once this one is in. Installs and removals of one directory take turns (an
    /// exclusive lock on `<dir>.lock.lck`), so none loses another's entry. Refused: a file in
    /// the way that the lock does not name (not installed from a registry), a file the lock
    /// gives to another plugin, and an unsigned entry where the plugin is installed signed (the
    /// same bytes keep their signer). Returns the entries replaced.
    pub fn install_file(
        dir: &Path,
        mut entry: LockedPlugin,
        bytes: &[u8],
    ) -> Result<Vec<LockedPlugin>, LockError> {
        let _turn = Self::take_turn(dir)?;
        let mut lock = Self::read(dir)?;
        let target = dir.join(&entry.file);
        let conflict = |reason: String| LockError::Conflict {
            path: target.clone(),
            reason,
        };
        // Never a silent downgrade: an unsigned install of what a trusted key vouched for keeps
        // that word (the same digest), and one of other bytes does not replace a signed one.
        if entry.signer.is_none()
            && let Some(signed) = lock
                .plugins
                .iter()
                .find(|p| p.name == entry.name && p.signer.is_some())
        {
            if signed.digest == entry.digest && signed.sha256 == entry.sha256 {
                entry.signer = signed.signer.clone();
            } else {
                return Err(conflict(format!(
                    "plugin {:?} is installed signed by key {}: an unsigned version does not \
                     replace it (remove it first, or install a signed one)",
                    entry.name,
                    signed.signer.as_deref().unwrap_or_default()
                )));
            }
        }
        match lock.get(&entry.file) {
            None if target.symlink_metadata().is_ok() => {
                return Err(conflict(
                    "it exists and was not installed from a registry (remove it first)".into(),
                ));
            }
            Some(other) if other.name != entry.name => {
                return Err(conflict(format!(
                    "the lock gives it to plugin {:?}, not {:?} (remove that one first)",
                    other.name, entry.name
                )));
            }
            _ => {}
        }
        let io = |path: &Path, e: std::io::Error| LockError::Io {
            path: path.to_owned(),
            reason: e.to_string(),
        };
        let (temporary, mut file) =
            temporary_beside(&target, &entry.file).map_err(|e| io(dir, e))?;
        if let Err(e) = file.write_all(bytes).and_then(|()| file.sync_all()) {
            let _ = std::fs::remove_file(&temporary);
            return Err(io(&target, e));
        }
        let before = lock.clone();
        let others: Vec<String> = lock
            .plugins
            .iter()
            .filter(|p| p.name == entry.name && p.file != entry.file)
            .map(|p| p.file.clone())
            .collect();
        let mut replaced: Vec<LockedPlugin> = lock.take(&entry.file).into_iter().collect();
        replaced.extend(others.iter().filter_map(|other| lock.take(other)));
        lock.put(entry);
        if let Err(e) = lock.write(dir) {
            let _ = std::fs::remove_file(&temporary);
            return Err(e);
        }
        if let Err(e) = std::fs::rename(&temporary, &target) {
            let _ = std::fs::remove_file(&temporary);
            let _ = before.write(dir);
            return Err(io(&target, e));
        }
        sync_parent(&target);
        for other in others {
            let _ = std::fs::remove_file(dir.join(other));
        }
        Ok(replaced)
    }

    /// Removes the plugin named `what` (its name or file) from `dir`: its entry, then its file
    /// (in turn with installs, as [`install_file`](Self::install_file)). `Ok(None)` when the
    /// lock names no such plugin.
    pub fn remove_file(dir: &Path, what: &str) -> Result<Option<LockedPlugin>, LockError> {
        let _turn = Self::take_turn(dir)?;
        let mut lock = Self::read(dir)?;
        let Some(file) = lock
            .plugins
            .iter()
            .find(|p| p.name == what || p.file == what)
            .map(|p| p.file.clone())
        else {
            return Ok(None);
        };
        let entry = lock.take(&file);
        lock.write(dir)?;
        let path = dir.join(&file);
        match std::fs::remove_file(&path) {
            Ok(()) => sync_parent(&path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(LockError::Io {
                    path,
                    reason: e.to_string(),
                });
            }
        }
        Ok(entry)
    }

    /// This process's turn at changing `dir` and its lock: an exclusive lock on
    /// `<dir>.lock.lck`, held until the returned file drops.
    fn take_turn(dir: &Path) -> Result<std::fs::File, LockError> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut path = Self::path_for_named(dir)?.into_os_string();
        path.push(".lck");
        let path = PathBuf::from(path);
        let io = |e: std::io::Error| LockError::Io {
            path: path.clone(),
            reason: e.to_string(),
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(io)?;
        file.lock().map_err(io)?;
        Ok(file)
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

/// `path` absolute, with `.` and `..` taken out lexically (links are not followed).
fn normalized(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut out = PathBuf::new();
    for part in absolute.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Opens `path` for reading without following a final symlink.
fn open_nofollow(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// A new file beside `path` (`.NAME.tmp.PID.N`, created, never an existing name or a link
/// followed), mode 0644, for writing and renaming over `path`.
fn temporary_beside(path: &Path, name: &str) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::os::unix::fs::OpenOptionsExt as _;
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let parent = path.parent().unwrap_or(Path::new("."));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut last = None;
    for _ in 0..16 {
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let temporary = parent.join(format!(".{name}.tmp.{}.{nanos:x}{n}", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temporary)
        {
            Ok(file) => return Ok((temporary, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free temporary name")))
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
fn sync_parent(path: &Path) {
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
        let here = std::env::current_dir().unwrap();
        assert_eq!(
            PluginLock::path_for(Path::new("plugins")),
            here.join("plugins.lock")
        );
        // Never inside the directory, however it is named.
        assert_eq!(
            PluginLock::path_for(Path::new("/srv/plugins/.")),
            Path::new("/srv/plugins.lock")
        );
        assert_eq!(
            PluginLock::path_for(Path::new("/srv/plugins/x/..")),
            Path::new("/srv/plugins.lock")
        );
        let beside = format!("{}.lock", here.file_name().unwrap().to_string_lossy());
        assert_eq!(
            PluginLock::path_for(Path::new(".")),
            here.parent().unwrap().join(beside)
        );
        assert!(PluginLock::read(Path::new("/")).is_err());
        assert_eq!(
            PluginLock::path_for(Path::new("/srv/plugins/")),
            Path::new("/srv/plugins.lock")
        );
    }

    #[test]
    fn a_lock_naming_a_path_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().join("p");
        let lock = PluginLock::default();
        lock.write(&plugins).unwrap();
        assert_eq!(PluginLock::read(&plugins).unwrap(), lock);
        // A link in the lock's place is not followed.
        std::fs::remove_file(PluginLock::path_for(&plugins)).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", PluginLock::path_for(&plugins)).unwrap();
        assert!(PluginLock::read(&plugins).is_err());
        std::fs::remove_file(PluginLock::path_for(&plugins)).unwrap();
        std::fs::write(
            PluginLock::path_for(&plugins),
            r#"{"lock_version":1,"plugins":[{"file":"../x.so","name":"x","version":"1","sha256":"","digest":"","source":"","signer":null}]}"#,
        )
        .unwrap();
        let err = PluginLock::read(&plugins).unwrap_err().to_string();
        assert!(err.contains("not a file name"), "{err}");
    }

    fn entry(file: &str, name: &str) -> LockedPlugin {
        LockedPlugin {
            file: file.into(),
            name: name.into(),
            version: "1.0.0".into(),
            sha256: String::new(),
            digest: String::new(),
            source: String::new(),
            signer: None,
            capabilities: Capabilities::default(),
        }
    }

    /// An unsigned install never downgrades a signed one: of the same bytes it keeps their
    /// signer; of other bytes it is refused, the signed file untouched.
    #[test]
    fn an_unsigned_install_keeps_or_refuses_what_a_key_signed() {
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().join("plugins");
        std::fs::create_dir(&plugins).unwrap();
        let signed = LockedPlugin {
            signer: Some("0123456789abcdef".into()),
            digest: "sha256:aa".into(),
            sha256: "11".into(),
            ..entry("libp.so", "p")
        };
        PluginLock::install_file(&plugins, signed.clone(), b"signed").unwrap();
        let same = LockedPlugin {
            signer: None,
            ..signed.clone()
        };
        PluginLock::install_file(&plugins, same, b"signed").unwrap();
        let lock = PluginLock::read(&plugins).unwrap();
        assert_eq!(lock.get("libp.so").unwrap().signer, signed.signer);
        let other = LockedPlugin {
            signer: None,
            digest: "sha256:bb".into(),
            sha256: "22".into(),
            ..entry("libp.so", "p")
        };
        let err = PluginLock::install_file(&plugins, other, b"other")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("installed signed by key 0123456789abcdef"),
            "{err}"
        );
        assert_eq!(std::fs::read(plugins.join("libp.so")).unwrap(), b"signed");
    }

    #[test]
    fn installs_take_turns_and_never_take_what_is_not_theirs() {
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().join("plugins");
        std::fs::create_dir(&plugins).unwrap();
        // Sixteen installs at once, each of its own plugin: every one is in the lock.
        std::thread::scope(|scope| {
            for i in 0..16 {
                let plugins = &plugins;
                scope.spawn(move || {
                    let name = format!("p{i}");
                    PluginLock::install_file(plugins, entry(&format!("lib{name}.so"), &name), b"x")
                        .unwrap();
                });
            }
        });
        let lock = PluginLock::read(&plugins).unwrap();
        assert_eq!(lock.plugins.len(), 16);
        let hidden: Vec<_> = std::fs::read_dir(&plugins)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with('.')
            })
            .collect();
        assert!(hidden.is_empty(), "no temporary file left: {hidden:?}");
        // A file the lock gives another plugin, and one copied in by hand: refused, untouched.
        let err = PluginLock::install_file(&plugins, entry("libp1.so", "other"), b"y")
            .unwrap_err()
            .to_string();
        assert!(err.contains("gives it to plugin \"p1\""), "{err}");
        std::fs::write(plugins.join("libhand.so"), b"hand").unwrap();
        let err = PluginLock::install_file(&plugins, entry("libhand.so", "hand"), b"y")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not installed from a registry"), "{err}");
        assert_eq!(std::fs::read(plugins.join("libhand.so")).unwrap(), b"hand");
        // The same plugin under another name replaces its old file.
        let replaced = PluginLock::install_file(&plugins, entry("p2.wasm", "p2"), b"z").unwrap();
        assert_eq!(replaced.len(), 1);
        assert!(!plugins.join("libp2.so").exists());
        assert_eq!(
            PluginLock::remove_file(&plugins, "p2")
                .unwrap()
                .unwrap()
                .file,
            "p2.wasm"
        );
        assert!(PluginLock::remove_file(&plugins, "p2").unwrap().is_none());
    }
}
