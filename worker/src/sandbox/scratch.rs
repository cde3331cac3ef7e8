//! A bounded scratch directory for code the host runs itself (wasm components): a tmpfs of a
//! fixed size that no path reaches, only a descriptor.
//!
//! tmpfs may be mounted without privilege inside a user namespace, and the new mount API
//! (`fsopen`, `fsconfig`, `fsmount`) makes one without a mount point. A short-lived child,
//! made in user and mount namespaces of its own and sharing the host's memory and descriptor
//! table while the host waits (as `vfork`), makes the tmpfs and leaves a descriptor of its root
//! in the host's table; the namespaces end with the child, the mount lives on through the
//! descriptor and its memory is freed when the last descriptor into it is closed.
//! The kernel enforces the size: a write past it fails with `ENOSPC` (and file creation past
//! the inode bound too).

use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

// The new mount API's constants (linux/mount.h), which the libc crate does not define.
const FSOPEN_CLOEXEC: libc::c_uint = 0x1;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const FSMOUNT_CLOEXEC: libc::c_uint = 0x1;
const MOUNT_ATTR_NOSUID: libc::c_uint = 0x2;
const MOUNT_ATTR_NODEV: libc::c_uint = 0x4;
const MOUNT_ATTR_NOEXEC: libc::c_uint = 0x8;

/// The most files and directories a scratch directory may hold.
pub const SCRATCH_INODES: u64 = 16_384;

/// A new tmpfs of at most `bytes` (rounded up to whole pages by the kernel) and
/// [`SCRATCH_INODES`] entries, mode 0700, owned by this process's user, mounted nowhere: the
/// returned descriptor (of its root directory, close-on-exec) is the only way in, and its memory
/// is freed when the last descriptor into it is closed. Files in it cannot be executed, and
/// neither set-id bits nor device files take effect.
///
/// Fails where the kernel refuses unprivileged user namespaces or lacks the new mount API
/// (Linux before 5.2), with the step that failed and the system's reason.
///
/// # Example
///
/// ```no_run
/// use std::os::fd::AsRawFd;
///
/// let root = rho_worker::sandbox::scratch::bounded_tmpfs(1 << 20)?;
/// std::fs::write(format!("/proc/self/fd/{}/note", root.as_raw_fd()), "hi")?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn bounded_tmpfs(bytes: u64) -> io::Result<OwnedFd> {
    let (uid, gid) = (
        // SAFETY: getuid and getgid have no preconditions.
        unsafe { libc::getuid() },
        unsafe { libc::getgid() },
    );
    let text = |s: String| CString::new(s).map_err(|e| io::Error::other(e.to_string()));
    let uid_map = text(format!("{uid} {uid} 1"))?;
    let gid_map = text(format!("{gid} {gid} 1"))?;
    let size = text(bytes.max(4096).to_string())?;
    let inodes = text(SCRATCH_INODES.to_string())?;
    let mut child = Child {
        uid_map: &uid_map,
        gid_map: &gid_map,
        size: &size,
        inodes: &inodes,
        failed_step: 0,
        errno: 0,
        root: -1,
    };
    // The child shares this process's memory and descriptor table and runs while this thread
    // waits (`CLONE_VFORK`): no copy of a large host's page tables, as a fork would make. It
    // enters user and mount namespaces of its own as it is made, leaves the root's descriptor
    // in the shared table and its number in `child`, and exits.
    let mut stack = vec![0u8; 64 << 10];
    // SAFETY: the stack's end, aligned down to 16 bytes as the ABI wants (it grows down).
    let top = unsafe { stack.as_mut_ptr().add(stack.len()) };
    let top = top.wrapping_sub(top as usize % 16);
    let flags = libc::CLONE_VM
        | libc::CLONE_VFORK
        | libc::CLONE_FILES
        | libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::SIGCHLD;
    // SAFETY: `run` touches only `child` (alive until the child has exited: vfork waits) and
    // makes system calls; the stack is ours and outlives the child.
    let pid = unsafe {
        libc::clone(
            run,
            top.cast(),
            flags,
            (&raw mut child).cast::<libc::c_void>(),
        )
    };
    if pid < 0 {
        let cause = io::Error::last_os_error();
        return Err(io::Error::new(
            cause.kind(),
            format!("a scratch directory: a user and mount namespace (clone): {cause}"),
        ));
    }
    let mut status = 0;
    // SAFETY: our own child; waited for once.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break;
        }
    }
    drop(stack);
    if child.root >= 0 {
        // SAFETY: a descriptor the child opened in our table, owned by nothing else.
        return Ok(unsafe { OwnedFd::from_raw_fd(child.root) });
    }
    let step = match child.failed_step {
        2 => "the namespace's user and group maps",
        3 => "fsopen of tmpfs",
        4 => "the tmpfs's size",
        5 => "creating the tmpfs",
        6 => "fsmount",
        7 => "opening its root",
        _ => "the process making it, which ended without a word",
    };
    let cause = io::Error::from_raw_os_error(child.errno);
    Err(io::Error::new(
        cause.kind(),
        format!("a scratch directory: {step}: {cause}"),
    ))
}

/// What the child needs (made before it starts) and what it leaves.
struct Child<'a> {
    uid_map: &'a CString,
    gid_map: &'a CString,
    size: &'a CString,
    inodes: &'a CString,
    /// The step that failed (numbered as in `make`), 0 when none did.
    failed_step: u8,
    errno: i32,
    /// The tmpfs root's descriptor, -1 until made.
    root: libc::c_int,
}

/// The child's entry: makes the tmpfs and records the outcome in the `Child` at `arg`.
extern "C" fn run(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `Child`, alive while the parent waits for this process.
    let child = unsafe { &mut *arg.cast::<Child<'_>>() };
    // SAFETY: in the child, in its own namespaces.
    match unsafe { child.make() } {
        Ok(root) => child.root = root,
        Err(step) => {
            child.failed_step = step;
            child.errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
        }
    }
    0
}

impl Child<'_> {
    /// The steps, each numbered for the parent's message; `Err(step)` with `errno` set. The
    /// descriptors it opens on the way are closed (the table is the parent's).
    ///
    /// # Safety
    ///
    /// Only in the child made by `bounded_tmpfs`, in its new namespaces.
    unsafe fn make(&self) -> Result<libc::c_int, u8> {
        unsafe {
            if !write(c"/proc/self/setgroups", c"deny")
                || !write(c"/proc/self/uid_map", self.uid_map)
                || !write(c"/proc/self/gid_map", self.gid_map)
            {
                return Err(2);
            }
            let fs = libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), FSOPEN_CLOEXEC) as i32;
            if fs < 0 {
                return Err(3);
            }
            let made = self.configure_and_mount(fs);
            let errno = *libc::__errno_location();
            libc::close(fs);
            *libc::__errno_location() = errno;
            made
        }
    }

    /// Sets the size, the inode bound and the mode of the file system context `fs`, creates
    /// it, mounts it nowhere and opens its root.
    ///
    /// # Safety
    ///
    /// As [`Child::make`].
    unsafe fn configure_and_mount(&self, fs: libc::c_int) -> Result<libc::c_int, u8> {
        unsafe {
            for (key, value) in [
                (c"size", self.size.as_c_str()),
                (c"nr_inodes", self.inodes.as_c_str()),
                (c"mode", c"0700"),
            ] {
                let set = libc::syscall(
                    libc::SYS_fsconfig,
                    fs,
                    FSCONFIG_SET_STRING,
                    key.as_ptr(),
                    value.as_ptr(),
                    0,
                );
                if set != 0 {
                    return Err(4);
                }
            }
            let null = std::ptr::null::<libc::c_char>();
            if libc::syscall(libc::SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, null, null, 0) != 0 {
                return Err(5);
            }
            let attributes = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
            let mount = libc::syscall(libc::SYS_fsmount, fs, FSMOUNT_CLOEXEC, attributes) as i32;
            if mount < 0 {
                return Err(6);
            }
            // The mount's own descriptor is a path only; the host needs a directory it can
            // read and reopen.
            let root = libc::openat(
                mount,
                c".".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            );
            let errno = *libc::__errno_location();
            libc::close(mount);
            *libc::__errno_location() = errno;
            if root < 0 {
                return Err(7);
            }
            Ok(root)
        }
    }
}

/// Writes `text` to the file at `path` with plain system calls (no allocation).
///
/// # Safety
///
/// Safe to call after a fork: it only makes system calls.
unsafe fn write(path: &std::ffi::CStr, text: &std::ffi::CStr) -> bool {
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let bytes = text.to_bytes();
        let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        libc::close(fd);
        written == bytes.len() as isize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_scratch_directory_holds_files_up_to_its_bound_and_no_further() {
        let root = bounded_tmpfs(256 << 10).unwrap();
        let dir = format!("/proc/self/fd/{}", root.as_raw_fd());
        std::fs::write(format!("{dir}/small"), vec![1u8; 100 << 10]).unwrap();
        assert_eq!(
            std::fs::read(format!("{dir}/small")).unwrap().len(),
            100 << 10
        );
        let full = std::fs::write(format!("{dir}/big"), vec![1u8; 512 << 10]).unwrap_err();
        assert_eq!(full.raw_os_error(), Some(libc::ENOSPC), "{full}");
        // Reopened by its path, as a preopen does.
        let again = std::fs::File::open(&dir).unwrap();
        assert!(again.metadata().unwrap().is_dir());
    }
}
