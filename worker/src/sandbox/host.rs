//! The host's side of a sandbox: the plugin's bytes in a sealed memfd a worker loads from, and
//! temporary directories no other user can tamper with.

use std::ffi::CString;
use std::io;
#[cfg(target_os = "linux")]
use std::os::fd::AsRawFd;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// A new memfd for a plugin's bytes (`rho-plugin:NAME`, close-on-exec, sealable): the worker
/// loads the plugin from it (`/proc/self/fd/5`). No path exists that anyone could swap, and it is
/// gone with the last process holding it. [`seal`] it once written.
#[cfg(target_os = "linux")]
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
///
/// The kernel refuses `F_SEAL_WRITE` (`EBUSY`) while any of the memfd's pages holds a reference
/// besides the page cache's, and waits only about 150 ms for such references to go. Nothing of
/// the host's holds one (the copy is unmapped and no longer read), but the kernel itself may for
/// a moment (page reclaim or compaction isolating a page, on a loaded machine): the seal is tried
/// again a few times, about a second in all, before the load fails.
#[cfg(target_os = "linux")]
pub fn seal(file: &std::fs::File) -> io::Result<()> {
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    const TRIES: u64 = 6;
    for attempt in 1..=TRIES {
        // SAFETY: fcntl on our own descriptor.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EBUSY) || attempt == TRIES {
            return Err(error);
        }
        tracing::debug!(
            attempt,
            "sealing a plugin's memfd: pages still referenced, trying again"
        );
        std::thread::sleep(std::time::Duration::from_millis(25 * attempt));
    }
    Err(io::Error::from_raw_os_error(libc::EBUSY))
}

/// macOS has no memfd: a plugin's bytes go into an owner-only file (`0600`, created anew in
/// [`secure_temp_dir`]) that is unlinked at once, so no path exists that anyone could swap and
/// it is gone with the last descriptor. Workers read it from their fd 5 into a copy of their
/// own and close it before the plugin's code runs.
#[cfg(target_os = "macos")]
pub fn plugin_memfd(name: &str) -> io::Result<std::fs::File> {
    use std::os::unix::ffi::OsStrExt;
    let name: String = name.chars().filter(char::is_ascii_alphanumeric).collect();
    let template = secure_temp_dir()?.join(format!("rho-plugin-{name}-XXXXXX"));
    let mut template = CString::new(template.as_os_str().as_bytes())
        .map_err(|e| io::Error::other(e.to_string()))?
        .into_bytes_with_nul();
    // SAFETY: mkstemp rewrites the template's X's in place, within the NUL-terminated buffer,
    // and creates the file `0600` with `O_EXCL`; the descriptor is owned by nothing else.
    let file = unsafe {
        let fd = libc::mkstemp(template.as_mut_ptr().cast());
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let file = std::fs::File::from(OwnedFd::from_raw_fd(fd));
        let unlinked = libc::unlink(template.as_ptr().cast());
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        if unlinked != 0 {
            return Err(io::Error::last_os_error());
        }
        file
    };
    Ok(file)
}

/// macOS has no seals: the copy stays writable through its descriptor, which only the host and
/// each worker's setup (before the plugin's code runs) hold. Nothing to do.
#[cfg(target_os = "macos")]
pub fn seal(_file: &std::fs::File) -> io::Result<()> {
    Ok(())
}

/// Whether process `pid` (as this host sees it) runs outside every sandbox: an isolated plugin
/// may have the uid of the host (when the host is not root) and, with the network granted, unix
/// sockets; what is offered only to the host's own user (a control socket) must refuse it.
///
/// Linux: it shares this process's user and PID namespaces (a worker's sandbox has its own).
#[cfg(target_os = "linux")]
pub fn outside_sandboxes(pid: i32) -> bool {
    pid > 0
        && ["user", "pid"].iter().all(|ns| {
            let theirs = std::fs::read_link(format!("/proc/{pid}/ns/{ns}"));
            let ours = std::fs::read_link(format!("/proc/self/ns/{ns}"));
            matches!((theirs, ours), (Ok(a), Ok(b)) if a == b)
        })
}

/// Whether process `pid` runs outside every sandbox (see the Linux version).
///
/// macOS: no Seatbelt profile applies to it (`sandbox_check`; a worker's plugin process has one).
#[cfg(target_os = "macos")]
pub fn outside_sandboxes(pid: i32) -> bool {
    unsafe extern "C" {
        /// libSystem's `sandbox_check`: non-zero when `pid` is sandboxed (no operation named,
        /// `SANDBOX_FILTER_NONE`).
        fn sandbox_check(
            pid: libc::pid_t,
            operation: *const libc::c_char,
            kind: libc::c_int,
            ...
        ) -> libc::c_int;
    }
    // SAFETY: a query about another process; no operation, so no further arguments.
    pid > 0 && unsafe { sandbox_check(pid, std::ptr::null(), 0) } == 0
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::io::Write;
    use std::os::fd::AsRawFd;

    /// A reference to the memfd's pages that goes away within the retries (here a writable
    /// shared mapping, unmapped 150 ms later) does not fail the seal; before, the first `EBUSY`
    /// failed the plugin's load ("cannot make a private copy to load: Device or resource busy").
    #[test]
    fn a_seal_waits_out_a_passing_reference() {
        let mut file = super::plugin_memfd("seal-test").unwrap();
        file.write_all(&[7u8; 8192]).unwrap();
        // SAFETY: a fresh shared mapping of our own memfd, unmapped by the thread below only.
        let mapped = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(mapped, libc::MAP_FAILED);
        let address = mapped as usize;
        let unmapper = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(150));
            // SAFETY: the mapping made above, used by nothing else.
            unsafe { libc::munmap(address as *mut libc::c_void, 8192) };
        });
        super::seal(&file).unwrap();
        unmapper.join().unwrap();
        // Sealed: a write is refused.
        assert!(file.write_all(b"x").is_err());
    }
}
