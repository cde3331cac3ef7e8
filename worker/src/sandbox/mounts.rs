//! The sandbox's mounts of granted paths, in the init's own mount namespace, with the kernel's
//! descriptor-based mount calls (`open_tree`, `mount_setattr`, `move_mount`; Linux 5.12): a
//! granted tree is found by walking its resolved path without following any link, checked to be
//! the inode the host opened, copied detached with its flags set (read-only, or read-write for a
//! write grant; never setuid or devices), and attached at its path once the rest of the file
//! system is read-only and the scratch tmpfs is on `/tmp`.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::walk::{self, DevIno, Policy};
use rho_protocol::frames::GRANT_FDS;
use rho_protocol::grants::GrantPath;

/// `MOUNT_ATTR_RDONLY`.
pub(crate) const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;

/// `struct mount_attr`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

fn last_error(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// `mount_setattr(dirfd, path, flags, {set, clear})`.
pub(crate) fn set_attributes(
    dirfd: i32,
    path: &CStr,
    flags: libc::c_int,
    set: u64,
    clear: u64,
) -> Result<(), String> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clear,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: a valid C string and a `mount_attr` of the size passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r != 0 {
        return Err(last_error("mount_setattr"));
    }
    Ok(())
}

/// A walk that follows no link: the host resolved the path without any.
struct NoLinks;

impl Policy for NoLinks {
    fn follows(
        &mut self,
        link: &Path,
        _: &libc::stat,
        _: &libc::stat,
        _: &[DevIno],
    ) -> Result<(), String> {
        Err(format!("{} is a symbolic link now", link.display()))
    }
}

/// A granted tree copied and detached, waiting to be attached at its path.
pub(crate) struct Bind {
    /// The grant's place in the spec's list.
    pub index: usize,
    tree: OwnedFd,
    /// The granted path as this namespace shows it (before the scratch tmpfs hides `/tmp`).
    found: OwnedFd,
    path: PathBuf,
    dir: bool,
}

/// Copies grant `index` (descriptor `GRANT_FDS + index`) detached, with its flags set. `Err` says
/// why it cannot be put in force.
pub(crate) fn detach_grant(index: usize, grant: &GrantPath) -> Result<Bind, String> {
    let host = walk::fstat(GRANT_FDS + index as i32).map_err(|e| e.to_string())?;
    let found = walk::walk(&grant.path, &mut NoLinks).map_err(|e| e.to_string())?;
    if walk::dev_ino(&found.stat) != walk::dev_ino(&host) {
        return Err("its path no longer leads to what the host granted".into());
    }
    let flags = OPEN_TREE_CLONE
        | libc::O_CLOEXEC as libc::c_uint
        | libc::AT_RECURSIVE as libc::c_uint
        | libc::AT_EMPTY_PATH as libc::c_uint;
    // SAFETY: open_tree on a descriptor of ours with an empty path; the result is checked.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            found.fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
        )
    };
    if tree < 0 {
        return Err(last_error("open_tree"));
    }
    // SAFETY: just opened, owned by nothing else.
    let tree = unsafe { OwnedFd::from_raw_fd(tree as i32) };
    let (set, clear) = if grant.write {
        (MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, MOUNT_ATTR_RDONLY)
    } else {
        (MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0)
    };
    set_attributes(
        tree.as_raw_fd(),
        c"",
        libc::AT_EMPTY_PATH | libc::AT_RECURSIVE,
        set,
        clear,
    )
    .map_err(|e| {
        if grant.write {
            format!("{e} (is it on a read-only file system?)")
        } else {
            e
        }
    })?;
    Ok(Bind {
        index,
        tree,
        dir: found.stat.st_mode & libc::S_IFMT == libc::S_IFDIR,
        found: found.fd,
        path: found.path,
    })
}

/// Attaches `bind` at its path: inside the scratch tmpfs for a path under `/tmp` (its
/// directories made there), else over the path itself.
pub(crate) fn attach(bind: &Bind, scratch: bool) -> Result<(), String> {
    let made;
    let target = if scratch && bind.path.starts_with("/tmp") {
        made = mount_point(&bind.path, bind.dir)?;
        &made
    } else {
        &bind.found
    };
    // SAFETY: move_mount between two descriptors of ours, empty paths.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            bind.tree.as_raw_fd(),
            c"".as_ptr(),
            target.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if r != 0 {
        return Err(last_error("move_mount"));
    }
    Ok(())
}

/// Makes `path` (under `/tmp`, in the scratch tmpfs this process just mounted) a directory or an
/// empty file, with the directories above it; returns it opened `O_PATH`.
fn mount_point(path: &Path, dir: bool) -> Result<OwnedFd, String> {
    let fail = |what: &str, e: std::io::Error| format!("making {what} in the scratch: {e}");
    let mut at = walk::openat(
        libc::AT_FDCWD,
        b"/tmp",
        libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
    )
    .map_err(|e| fail("/tmp", e))?;
    let rest = path.strip_prefix("/tmp").map_err(|e| e.to_string())?;
    let names: Vec<&[u8]> = rest
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.as_bytes()),
            _ => None,
        })
        .collect();
    for (i, name) in names.iter().enumerate() {
        let last = i + 1 == names.len();
        let c = std::ffi::CString::new(*name).map_err(|e| e.to_string())?;
        // SAFETY: mkdirat/openat relative to a descriptor of ours with a valid C string.
        let made = unsafe {
            if !last || dir {
                libc::mkdirat(at.as_raw_fd(), c.as_ptr(), 0o755)
            } else {
                let fd = libc::openat(
                    at.as_raw_fd(),
                    c.as_ptr(),
                    libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_WRONLY
                        | libc::O_CLOEXEC
                        | libc::O_NOFOLLOW,
                    0o644,
                );
                if fd >= 0 {
                    libc::close(fd);
                    0
                } else {
                    -1
                }
            }
        };
        let error = std::io::Error::last_os_error();
        if made != 0 && error.raw_os_error() != Some(libc::EEXIST) {
            return Err(fail(&path.display().to_string(), error));
        }
        let flags = if last && !dir {
            libc::O_PATH | libc::O_NOFOLLOW
        } else {
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW
        };
        at = walk::openat(at.as_raw_fd(), name, flags)
            .map_err(|e| fail(&path.display().to_string(), e))?;
    }
    Ok(at)
}
