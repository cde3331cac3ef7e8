//! The host's side of a sandbox: the plugin's bytes in a sealed memfd a worker loads from, and
//! temporary directories no other user can tamper with.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// A new memfd for a plugin's bytes (`rho-plugin:NAME`, close-on-exec, sealable): the worker
/// loads the plugin from it (`/proc/self/fd/5`). No path exists that anyone could swap, and it is
/// gone with the last process holding it. [`seal`] it once written.
pub fn plugin_memfd(name: &str) -> io::Result<std::fs::File> {
    let label = CString::new(format!("rho-plugin:{name}").replace('\0', "?"))
        .map_err(|e| io::Error::other(e.to_string()))?;
    const MFD_EXEC: libc::c_uint = 0x10;
    let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // SAFETY: a valid C string; the result is checked.
    let mut fd = unsafe { libc::memfd_create(label.as_ptr(), flags | MFD_EXEC) };
    if fd < 0 {
        // Kernels before 6.3 do not know MFD_EXEC (and map memfds executable anyway).
        // SAFETY: as above.
        fd = unsafe { libc::memfd_create(label.as_ptr(), flags) };
    }
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just created and owned by nothing else.
    Ok(std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Seals a plugin's memfd: no process can write, grow or shrink it from now on.
pub fn seal(file: &std::fs::File) -> io::Result<()> {
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fcntl on our own descriptor.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A temporary directory no other user can tamper with: `$TMPDIR` when it and each of its
/// ancestors is owned by root or this user and, when others may write it, sticky; else the
/// first such of `/tmp`, `/var/tmp`, `/dev/shm`. A `$TMPDIR` that fails is avoided (and logged).
pub fn secure_temp_dir() -> io::Result<PathBuf> {
    let from_env = std::env::var_os("TMPDIR").map(PathBuf::from);
    let candidates = from_env
        .iter()
        .cloned()
        .chain(["/tmp", "/var/tmp", "/dev/shm"].map(PathBuf::from));
    let mut refused = Vec::new();
    for dir in candidates {
        match safe_dir_chain(&dir) {
            Ok(canonical) => {
                if !refused.is_empty() {
                    tracing::warn!(
                        avoided = %refused.join("; "),
                        using = %canonical.display(),
                        "an unsafe temporary directory was avoided"
                    );
                }
                return Ok(canonical);
            }
            Err(why) => refused.push(format!("{}: {why}", dir.display())),
        }
    }
    Err(io::Error::other(format!(
        "no safe temporary directory: {}",
        refused.join("; ")
    )))
}

/// Checks `dir` as given, component by component ([`SafeChain`](crate::walk::SafeChain)): every
/// directory on the way and `dir` itself belong to root or this user and, when others may write
/// them, are sticky. Returns its path without links.
pub fn safe_dir_chain(dir: &Path) -> Result<PathBuf, String> {
    use crate::walk::{Policy, SafeChain, WalkError, walk};
    let walked = walk(dir, &mut SafeChain).map_err(|e| match e {
        WalkError::NotFound(at) => format!("{} does not exist", at.display()),
        other => other.to_string(),
    })?;
    if walked.stat.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(format!("{} is not a directory", walked.path.display()));
    }
    SafeChain.passes(&walked.path, &walked.stat)?;
    Ok(walked.path)
}
