//! Private copies of plugin files: what loads is a copy at a unique path (in process: a file in
//! the host's private directory, removed once mapped; isolated: a sealed memfd handed to each
//! worker), hashed as it is made.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

use crate::error::LoadError;

/// A plugin file opened once and copied into storage private to the host: what loads is the
/// copy, and the hash is the copy's. Dropping it removes a copy
/// that was not loaded.
#[derive(Debug)]
pub struct PluginFile {
    /// The file it was read from.
    pub path: PathBuf,
    /// SHA-256 of the content, lowercase hex.
    pub sha256: String,
    /// Its length in bytes.
    pub len: u64,
    /// The private copy that loads.
    pub copy: PrivateCopy,
}

/// Where a plugin file's private copy lives.
#[derive(Debug)]
pub enum PrivateCopy {
    /// A file in the host's private directory (in-process loads; removed right after `dlopen`).
    File(PathBuf),
    /// A sealed memfd (isolated plugins: handed to each worker).
    Memfd(std::sync::Arc<std::os::fd::OwnedFd>),
}

impl Drop for PluginFile {
    fn drop(&mut self) {
        if let PrivateCopy::File(copy) = &self.copy {
            let _ = std::fs::remove_file(copy);
        }
    }
}

impl PluginFile {
    /// Opens `path` (a regular file of at most
    /// 256 MiB) and copies it into `copies`, for tools that load one file (`check-plugin`,
    /// benchmarks). Plugin directories of a host add the trust checks (owner,
    /// mode, symlinks, every directory on the way).
    pub fn open(path: &Path, copies: &CopyDir) -> Result<PluginFile, LoadError> {
        use std::os::unix::fs::OpenOptionsExt;
        let read_error = |e: std::io::Error| LoadError::Read {
            path: path.to_owned(),
            reason: e.to_string(),
        };
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(read_error)?;
        let meta = file.metadata().map_err(read_error)?;
        if !meta.is_file() {
            return Err(LoadError::Refused {
                path: path.to_owned(),
                reason: "not a regular file".into(),
            });
        }
        if meta.len() == 0 {
            return Err(LoadError::Empty {
                path: path.to_owned(),
            });
        }
        if meta.len() > crate::loader::open::DEFAULT_MAX_FILE_SIZE {
            return Err(LoadError::Refused {
                path: path.to_owned(),
                reason: format!("{} bytes, over the largest plugin file loaded", meta.len()),
            });
        }
        copies.copy_from(&mut file, path, crate::loader::open::DEFAULT_MAX_FILE_SIZE)
    }
}

/// SHA-256 of `bytes`, lowercase hex (how rho names plugin versions and image contents).
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A private directory (mode 0700) for the copies the host loads plugins from. glibc hands back an
/// already-loaded image for a path or inode it has seen, so every load is from a new copy.
#[derive(Debug)]
pub struct CopyDir {
    dir: PathBuf,
    counter: AtomicU64,
}

impl CopyDir {
    /// Creates a fresh private directory under a safe temporary directory
    /// (a `$TMPDIR` others could tamper with is avoided). The directory must not exist yet
    /// (`create_dir`, not `create_dir_all`): another user cannot hand the host a directory of
    /// theirs to load from; a taken name moves on to the next one.
    pub fn new() -> Result<Self, LoadError> {
        use std::os::unix::fs::DirBuilderExt;
        static INSTANCE: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let base = crate::sandbox::host::secure_temp_dir().map_err(|e| LoadError::Copy {
            path: std::env::temp_dir(),
            reason: e.to_string(),
        })?;
        static SWEEP: std::sync::Once = std::sync::Once::new();
        SWEEP.call_once(|| sweep_stale(&base, COPY_PREFIX));
        let me = std::process::id();
        let started = process_start(me).unwrap_or(0);
        let mut last_error = String::new();
        for _ in 0..64 {
            let n = INSTANCE.fetch_add(1, Ordering::Relaxed);
            let dir = base.join(format!("{COPY_PREFIX}{me}.{started}-{nanos:08x}-{n}"));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {
                    return Ok(CopyDir {
                        dir,
                        counter: AtomicU64::new(0),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    last_error = e.to_string()
                }
                Err(e) => {
                    return Err(LoadError::Copy {
                        path: dir,
                        reason: e.to_string(),
                    });
                }
            }
        }
        Err(LoadError::Copy {
            path: base,
            reason: format!("no fresh private directory could be made: {last_error}"),
        })
    }

    /// Copies `source` (opened and checked once by the caller) into a new file of this directory
    /// (`O_EXCL`, mode 0600), hashes the copy and checks its structure ([`check_library_of`]): the copy is what loads.
    pub fn copy_from(
        &self,
        source: &mut std::fs::File,
        path: &Path,
        max: u64,
    ) -> Result<PluginFile, LoadError> {
        use std::os::unix::fs::OpenOptionsExt;
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "plugin".into());
        let stem: String = stem.chars().filter(|c| !c.is_control()).take(64).collect();
        let copy = self
            .dir
            .join(format!("{stem}-{n}{}", std::env::consts::DLL_SUFFIX));
        let copy_error = |e: std::io::Error| LoadError::Copy {
            path: path.to_owned(),
            reason: e.to_string(),
        };
        let mut dest = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&copy)
            .map_err(copy_error)?;
        // From here on the copy is removed with the `PluginFile`, also on an error.
        let mut file = PluginFile {
            path: path.to_owned(),
            sha256: String::new(),
            len: 0,
            copy: PrivateCopy::File(copy),
        };
        let (sha256, len) =
            crate::loader::open::copy_and_hash(source, &mut dest, max).map_err(copy_error)?;
        check_library_of(path, &dest, len)?;
        file.sha256 = sha256;
        file.len = len;
        Ok(file)
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

/// The name every private copy directory starts with: then `PID.START-` (the owner's pid and its
/// start time, so a directory outlives neither its process nor a reuse of its pid unnoticed).
const COPY_PREFIX: &str = "rho-plugins-";

/// When process `pid` started (clock ticks since boot, `/proc/PID/stat`), if it runs.
#[cfg(target_os = "linux")]
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.get(stat.rfind(')')? + 2..)?;
    after.split_whitespace().nth(19)?.parse().ok()
}

/// When process `pid` started (microseconds since the epoch, `proc_pidinfo`), if it runs.
#[cfg(target_os = "macos")]
fn process_start(pid: u32) -> Option<u64> {
    // SAFETY: `proc_bsdinfo` is plain data; proc_pidinfo writes at most its size into it.
    unsafe {
        let mut info: libc::proc_bsdinfo = std::mem::zeroed();
        let size = std::mem::size_of::<libc::proc_bsdinfo>() as libc::c_int;
        let got = libc::proc_pidinfo(
            i32::try_from(pid).ok()?,
            libc::PROC_PIDTBSDINFO,
            0,
            (&raw mut info).cast(),
            size,
        );
        (got == size).then(|| info.pbi_start_tvsec * 1_000_000 + info.pbi_start_tvusec)
    }
}

/// Removes the directories in `base` named `PREFIX PID[.START]-...` whose process is gone (a
/// process killed by SIGKILL cannot remove its own): private copy directories of hosts, and on
/// macOS workers' private directories. Ours by owner and name, their process not running, or
/// another process now bearing their pid.
pub(crate) fn sweep_stale(base: &Path, prefix: &str) {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
            continue;
        };
        let owner = rest.split('-').next().unwrap_or_default();
        let (pid, start) = match owner.split_once('.') {
            Some((pid, start)) => (pid.parse::<u32>().ok(), start.parse::<u64>().ok()),
            None => (owner.parse::<u32>().ok(), None),
        };
        let Some(pid) = pid else { continue };
        let alive = match start {
            Some(start) => process_start(pid) == Some(start),
            None => process_start(pid).is_some(),
        };
        let ours = entry
            .metadata()
            .is_ok_and(|m| m.is_dir() && m.uid() == me && !m.file_type().is_symlink());
        if !alive && ours {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Removes every private copy directory this process made (what a process that exits before its
/// hosts were dropped, a start-up stopped by a signal, would otherwise leave; a later host would
/// sweep them). Libraries mapped from them stay valid; copies made after this fail.
pub fn remove_this_process_copies() {
    let Ok(base) = crate::sandbox::host::secure_temp_dir() else {
        return;
    };
    let me = std::process::id();
    let started = process_start(me).unwrap_or(0);
    let ours = format!("{COPY_PREFIX}{me}.{started}-");
    let Ok(entries) = std::fs::read_dir(&base) else {
        return;
    };
    for entry in entries.flatten() {
        let named_ours = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(&ours));
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if named_ours && is_dir {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl CopyDir {
    /// Removes the directory and whatever is in it (the host is stopping); later copies fail.
    pub fn remove(&self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for CopyDir {
    fn drop(&mut self) {
        // Mapped libraries stay valid after their file is removed.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Copies `source` into a sealed memfd (an isolated plugin's private copy), hashes it and checks
/// its structure ([`check_library_of`]).
pub fn memfd_copy(
    source: &mut std::fs::File,
    path: &Path,
    max: u64,
) -> Result<PluginFile, LoadError> {
    sealed_copy(source, path, max, check_library_of)
}

/// Copies `source` into a sealed memfd (a component's private copy: the engine compiles from
/// it), hashes it and checks that it is a WebAssembly component (its header).
pub fn component_copy(
    source: &mut std::fs::File,
    path: &Path,
    max: u64,
) -> Result<PluginFile, LoadError> {
    sealed_copy(source, path, max, check_component_of)
}

/// A component's header: the wasm magic, then the component layer's version (a core module has
/// `01 00 00 00` there).
const COMPONENT_HEADER: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

fn check_component_of(path: &Path, copy: &std::fs::File, len: u64) -> Result<(), LoadError> {
    let mut header = [0u8; 8];
    let read = if len >= 8 {
        std::os::unix::fs::FileExt::read_exact_at(copy, &mut header, 0).is_ok()
    } else {
        false
    };
    if read && header == COMPONENT_HEADER {
        return Ok(());
    }
    let reason = if read && header[..4] == COMPONENT_HEADER[..4] {
        "a core WebAssembly module, not a component (build it for wasm32-wasip2)"
    } else {
        "not a WebAssembly component (no `\\0asm` header)"
    };
    Err(LoadError::Open {
        path: path.to_owned(),
        reason: reason.into(),
    })
}

/// Copies `source` into a sealed memfd, hashes it and checks it with `check`.
fn sealed_copy(
    source: &mut std::fs::File,
    path: &Path,
    max: u64,
    check: fn(&Path, &std::fs::File, u64) -> Result<(), LoadError>,
) -> Result<PluginFile, LoadError> {
    use crate::sandbox::host::{plugin_memfd, seal};
    let copy_error = |e: std::io::Error| LoadError::Copy {
        path: path.to_owned(),
        reason: e.to_string(),
    };
    let name: String = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    let mut dest = plugin_memfd(&name).map_err(copy_error)?;
    let (sha256, len) =
        crate::loader::open::copy_and_hash(source, &mut dest, max).map_err(copy_error)?;
    check(path, &dest, len)?;
    seal(&dest).map_err(copy_error)?;
    Ok(PluginFile {
        path: path.to_owned(),
        sha256,
        len,
        copy: PrivateCopy::Memfd(std::sync::Arc::new(std::os::fd::OwnedFd::from(dest))),
    })
}

/// Checks a private copy's structure before anything maps it (a truncated file would SIGBUS):
/// an ELF shared object on Linux, a Mach-O library on macOS.
pub fn check_library_of(path: &Path, copy: &std::fs::File, len: u64) -> Result<(), LoadError> {
    let open_error = |reason: String| LoadError::Open {
        path: path.to_owned(),
        reason,
    };
    #[cfg(target_os = "macos")]
    let check = |bytes: &[u8]| crate::loader::macho::check(bytes, crate::loader::macho::HOST_CPU);
    #[cfg(not(target_os = "macos"))]
    let check = crate::loader::elf::check;
    crate::loader::open::with_mapped(copy, len, check)
        .map_err(|e| open_error(e.to_string()))?
        .map_err(open_error)
}
