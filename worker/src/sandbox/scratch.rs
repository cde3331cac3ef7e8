//! A bounded scratch directory for code the host runs itself (wasm components): a tmpfs of a
//! fixed size that no path reaches, only a descriptor.
//!
//! tmpfs may be mounted without privilege inside a user namespace, and the new mount API
//! (`fsopen`, `fsconfig`, `fsmount`) makes one without a mount point. A short-lived child
//! enters user and mount namespaces of its own, makes the tmpfs, and hands the host a
//! descriptor of its root over a socket; the namespaces end with the child, the mount lives on
//! through the descriptor and its memory is freed when the last descriptor into it is closed.
//! The kernel enforces the size: a write past it fails with `ENOSPC` (and file creation past
//! the inode bound too).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

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
    // Everything the child needs is made before the fork: it must not allocate (another
    // thread of this process may have held the allocator's lock at the fork).
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
    let mut pair = [0; 2];
    // SAFETY: a valid array of two descriptors; the result is checked.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            pair.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made and are owned by nothing else.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
    let child = Child {
        socket: theirs.as_raw_fd(),
        uid_map: &uid_map,
        gid_map: &gid_map,
        size: &size,
        inodes: &inodes,
    };
    // SAFETY: the child runs only `Child::run`, which makes system calls on memory made before
    // the fork and ends with `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: in the child of the fork, as `run` requires.
        unsafe { child.run() }
    }
    drop(theirs);
    let received = receive(&ours);
    let mut status = 0;
    // SAFETY: our own child; waited for once.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break;
        }
    }
    received
}

/// What the child needs, made before the fork.
struct Child<'a> {
    socket: libc::c_int,
    uid_map: &'a CString,
    gid_map: &'a CString,
    size: &'a CString,
    inodes: &'a CString,
}

impl Child<'_> {
    /// Makes the tmpfs and sends its root's descriptor, or the step that failed (a byte) and
    /// `errno`, then exits.
    ///
    /// # Safety
    ///
    /// Only in the child of a `fork`: it ends the process.
    unsafe fn run(&self) -> ! {
        let step = unsafe { self.make() };
        let (step, errno, fd) = match step {
            Ok(fd) => (0u8, 0, fd),
            Err(step) => (
                step,
                io::Error::last_os_error().raw_os_error().unwrap_or(0),
                -1,
            ),
        };
        let mut message = [0u8; 5];
        message[0] = step;
        message[1..].copy_from_slice(&errno.to_ne_bytes());
        // SAFETY: stack memory only; a control message of one descriptor when there is one.
        unsafe {
            let mut iov = libc::iovec {
                iov_base: message.as_mut_ptr().cast(),
                iov_len: message.len(),
            };
            let mut control = [0u64; 4];
            let mut header: libc::msghdr = std::mem::zeroed();
            header.msg_iov = &mut iov;
            header.msg_iovlen = 1;
            if fd >= 0 {
                header.msg_control = control.as_mut_ptr().cast();
                header.msg_controllen = libc::CMSG_SPACE(4) as usize;
                let cmsg = libc::CMSG_FIRSTHDR(&header);
                (*cmsg).cmsg_level = libc::SOL_SOCKET;
                (*cmsg).cmsg_type = libc::SCM_RIGHTS;
                (*cmsg).cmsg_len = libc::CMSG_LEN(4) as usize;
                std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), fd);
            }
            libc::sendmsg(self.socket, &header, 0);
            libc::_exit(0)
        }
    }

    /// The steps, each numbered for the parent's message; `Err(step)` with `errno` set.
    ///
    /// # Safety
    ///
    /// Only in the child of a `fork` (it changes the process's namespaces).
    unsafe fn make(&self) -> Result<libc::c_int, u8> {
        unsafe {
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
                return Err(1);
            }
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

/// The child's answer: the root's descriptor, or an error naming the step that failed.
fn receive(socket: &OwnedFd) -> io::Result<OwnedFd> {
    let mut message = [0u8; 5];
    let mut control = [0u64; 4];
    // SAFETY: buffers on the stack, as long as the header says; the result is checked.
    let (received, header) = unsafe {
        let mut iov = libc::iovec {
            iov_base: message.as_mut_ptr().cast(),
            iov_len: message.len(),
        };
        let mut header: libc::msghdr = std::mem::zeroed();
        header.msg_iov = &mut iov;
        header.msg_iovlen = 1;
        header.msg_control = control.as_mut_ptr().cast();
        header.msg_controllen = std::mem::size_of_val(&control);
        let received = loop {
            let n = libc::recvmsg(socket.as_raw_fd(), &mut header, libc::MSG_CMSG_CLOEXEC);
            if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break n;
            }
        };
        (received, header)
    };
    if received < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the header describes `control`, filled by the kernel.
    let fd = unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&header);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            None
        } else {
            let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>());
            Some(OwnedFd::from_raw_fd(fd))
        }
    };
    if let (Some(fd), 0) = (fd, message[0]) {
        return Ok(fd);
    }
    if received < message.len() as isize {
        return Err(io::Error::other(
            "the process making a scratch directory ended without a word",
        ));
    }
    let errno = i32::from_ne_bytes([message[1], message[2], message[3], message[4]]);
    let step = match message[0] {
        1 => "a user and mount namespace (unshare)",
        2 => "the namespace's user and group maps",
        3 => "fsopen of tmpfs",
        4 => "the tmpfs's size",
        5 => "creating the tmpfs",
        6 => "fsmount",
        _ => "opening its root",
    };
    let cause = io::Error::from_raw_os_error(errno);
    Err(io::Error::new(
        cause.kind(),
        format!("a scratch directory: {step}: {cause}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

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
