//! Resolving a path one component at a time, on descriptors: each directory is opened relative to
//! the one before it (`O_PATH | O_NOFOLLOW`), so what is checked is what is used, and each
//! symbolic link met on the way is shown to a [`Policy`] before it is followed. Used where a
//! path's meaning must not depend on a link someone else could have put there: the plugin
//! directory as the user gave it, and the sandbox's grants.

use std::collections::VecDeque;
use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

/// A file's identity: device and inode.
pub type DevIno = (u64, u64);

/// The identity of what `st` describes.
#[allow(clippy::unnecessary_cast)] // `st_dev` is signed on macOS
pub fn dev_ino(st: &libc::stat) -> DevIno {
    (st.st_dev as u64, st.st_ino as u64)
}

/// Open flags for a descriptor that names a file without following a link in its last
/// component: Linux's `O_PATH | O_NOFOLLOW` (no permission needed; a link opens as itself). macOS
/// has no `O_PATH`: a read-only open that takes a link as itself (`O_SYMLINK`) and never waits on
/// a FIFO, so there a directory its owner cannot read cannot be walked through.
#[cfg(target_os = "linux")]
pub(crate) const NAME_ONLY: libc::c_int = libc::O_PATH | libc::O_NOFOLLOW;
#[cfg(target_os = "macos")]
pub(crate) const NAME_ONLY: libc::c_int = libc::O_RDONLY | libc::O_SYMLINK | libc::O_NONBLOCK;

/// How many links one walk follows at most (the kernel's own bound).
const MAX_LINKS: usize = 40;

/// What a walk decides at each step; `Err` is why the path is refused (the rest of a sentence).
pub trait Policy {
    /// A directory the walk passes through (every one from `/`, but the last component).
    fn passes(&mut self, _path: &Path, _st: &libc::stat) -> Result<(), String> {
        Ok(())
    }

    /// A symbolic link at `link`, in the directory described by `dir` (the last of `chain`, the
    /// directories from `/` that hold it); `Ok` follows it.
    fn follows(
        &mut self,
        _link: &Path,
        _link_st: &libc::stat,
        _dir: &libc::stat,
        _chain: &[DevIno],
    ) -> Result<(), String> {
        Ok(())
    }
}

/// This process's effective user id.
fn me() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Follows every link.
pub struct FollowAll;

impl Policy for FollowAll {}

/// A path others cannot redirect: every directory on the way belongs to root
/// or this user and, when others may write it, is sticky (else whoever can write it could swap
/// what follows for a directory of theirs); a link in a directory others may write is followed
/// only when it belongs to root, this user or the directory's owner (as the kernel's
/// `protected_symlinks` does).
pub struct SafeChain;

impl Policy for SafeChain {
    fn passes(&mut self, path: &Path, st: &libc::stat) -> Result<(), String> {
        if st.st_uid != 0 && st.st_uid != me() {
            return Err(format!("{} belongs to user {}", path.display(), st.st_uid));
        }
        let sticky = st.st_mode & libc::S_ISVTX != 0;
        if st.st_mode & 0o022 != 0 && !sticky {
            return Err(format!(
                "{} is writable by others and not sticky (mode {:o})",
                path.display(),
                st.st_mode & 0o7777
            ));
        }
        Ok(())
    }

    fn follows(
        &mut self,
        link: &Path,
        link_st: &libc::stat,
        dir: &libc::stat,
        _chain: &[DevIno],
    ) -> Result<(), String> {
        let others_write = dir.st_mode & 0o022 != 0;
        let owner = link_st.st_uid;
        if others_write && owner != 0 && owner != me() && owner != dir.st_uid {
            return Err(format!(
                "{} is a symlink of user {owner} in a directory others may write",
                link.display()
            ));
        }
        Ok(())
    }
}

/// Why a walk stopped.
#[derive(Debug)]
pub enum WalkError {
    /// A component does not exist.
    NotFound(PathBuf),
    /// The policy refused a step: why.
    Refused(String),
    /// The file system refused: at which path, and the error.
    Io(PathBuf, std::io::Error),
}

impl std::fmt::Display for WalkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WalkError::NotFound(at) => write!(f, "{} does not exist", at.display()),
            WalkError::Refused(why) => f.write_str(why),
            WalkError::Io(at, e) => write!(f, "{}: {e}", at.display()),
        }
    }
}

/// Where a walk ended: an `O_PATH` descriptor of the file, its path without links or `..`, and
/// its `stat`.
pub struct Walked {
    /// The file, opened `O_PATH`.
    pub fd: OwnedFd,
    /// Its path without links or `..`.
    pub path: PathBuf,
    /// Its `stat`.
    pub stat: libc::stat,
}

/// `fstat(fd)`.
pub fn fstat(fd: i32) -> std::io::Result<libc::stat> {
    // SAFETY: `st` is written by fstat before it is read; a bad fd just fails.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(st)
    }
}

/// `openat(dir, name, flags | O_CLOEXEC | O_NOCTTY)`.
pub fn openat(dir: i32, name: &[u8], flags: i32) -> std::io::Result<OwnedFd> {
    let name = CString::new(name).map_err(|_| std::io::Error::other("a path with a NUL byte"))?;
    // SAFETY: a valid C string; the result is checked and owned below.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC | libc::O_NOCTTY) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just opened, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The target of the link `name` in directory `dir`.
pub fn readlinkat(dir: i32, name: &[u8]) -> std::io::Result<PathBuf> {
    let name = CString::new(name).map_err(|_| std::io::Error::other("a path with a NUL byte"))?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: `buf` is writable for its length; the result is checked.
    let n = unsafe { libc::readlinkat(dir, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(PathBuf::from(OsString::from_vec(buf)))
}

/// The parts of `path` to walk: normal names and `..` (`.` and the root dropped).
fn parts(path: &Path) -> impl Iterator<Item = OsString> + '_ {
    path.components().filter_map(|c| match c {
        Component::Normal(name) => Some(name.to_owned()),
        Component::ParentDir => Some(OsString::from("..")),
        Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
    })
}

/// Resolves `path` (relative paths from the working directory) from `/`, one component at a
/// time, asking `policy` at each directory and each link.
pub fn walk(path: &Path, policy: &mut dyn Policy) -> Result<Walked, WalkError> {
    let absolute = std::path::absolute(path).map_err(|e| WalkError::Io(path.to_owned(), e))?;
    let root = PathBuf::from("/");
    let open_root = openat(libc::AT_FDCWD, b"/", NAME_ONLY | libc::O_DIRECTORY)
        .map_err(|e| WalkError::Io(root.clone(), e))?;
    let root_st = fstat(open_root.as_raw_fd()).map_err(|e| WalkError::Io(root.clone(), e))?;
    // The directories from `/` to where the walk is, each with its path and stat.
    let mut stack: Vec<(OwnedFd, PathBuf, libc::stat)> = vec![(open_root, root, root_st)];
    let mut pending: VecDeque<OsString> = parts(&absolute).collect();
    let mut links = 0;
    while let Some(part) = pending.pop_front() {
        if part == ".." {
            if stack.len() > 1 {
                stack.pop();
            }
            continue;
        }
        let Some((dir_fd, dir_path, dir_st)) = stack.last() else {
            return Err(WalkError::Refused("an empty walk".into()));
        };
        policy
            .passes(dir_path, dir_st)
            .map_err(WalkError::Refused)?;
        let here = dir_path.join(&part);
        let fd = match openat(dir_fd.as_raw_fd(), part.as_bytes(), NAME_ONLY) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                return Err(WalkError::NotFound(here));
            }
            Err(e) => return Err(WalkError::Io(here, e)),
        };
        let st = fstat(fd.as_raw_fd()).map_err(|e| WalkError::Io(here.clone(), e))?;
        match st.st_mode & libc::S_IFMT {
            libc::S_IFLNK => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(WalkError::Refused(format!(
                        "{}: more than {MAX_LINKS} symbolic links",
                        path.display()
                    )));
                }
                let chain: Vec<DevIno> = stack.iter().map(|(_, _, st)| dev_ino(st)).collect();
                policy
                    .follows(&here, &st, dir_st, &chain)
                    .map_err(WalkError::Refused)?;
                let target = readlinkat(dir_fd.as_raw_fd(), part.as_bytes())
                    .map_err(|e| WalkError::Io(here.clone(), e))?;
                if target.is_absolute() {
                    stack.truncate(1);
                }
                for (i, name) in parts(&target).enumerate() {
                    pending.insert(i, name);
                }
            }
            libc::S_IFDIR => stack.push((fd, here, st)),
            _ if pending.is_empty() => stack.push((fd, here, st)),
            _ => {
                return Err(WalkError::Io(
                    here,
                    std::io::Error::from_raw_os_error(libc::ENOTDIR),
                ));
            }
        }
    }
    let Some((fd, path, stat)) = stack.pop() else {
        return Err(WalkError::Refused("an empty walk".into()));
    };
    Ok(Walked { fd, path, stat })
}

/// Reopens an `O_PATH` descriptor of a directory for reading (listing it).
pub fn reopen_dir(walked: &Walked) -> std::io::Result<OwnedFd> {
    let fd = openat(
        walked.fd.as_raw_fd(),
        b".",
        libc::O_RDONLY | libc::O_DIRECTORY,
    )?;
    let st = fstat(fd.as_raw_fd())?;
    if dev_ino(&st) != dev_ino(&walked.stat) {
        return Err(std::io::Error::other(
            "the directory changed while it was opened",
        ));
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_and_dots_resolve_as_the_kernel_does() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        std::fs::create_dir_all(base.join("a/b")).unwrap();
        std::os::unix::fs::symlink("a/b", base.join("l")).unwrap();
        std::os::unix::fs::symlink(base.join("a"), base.join("abs")).unwrap();
        std::os::unix::fs::symlink("loop", base.join("loop")).unwrap();
        for (given, expected) in [
            ("l", "a/b"),
            ("l/..", "a"),
            ("abs/b/../b", "a/b"),
            ("a/./b", "a/b"),
        ] {
            let walked = walk(&base.join(given), &mut FollowAll).unwrap();
            assert_eq!(walked.path, base.join(expected), "{given}");
            assert_eq!(walked.path, base.join(given).canonicalize().unwrap());
        }
        assert!(matches!(
            walk(&base.join("missing/x"), &mut FollowAll),
            Err(WalkError::NotFound(p)) if p == base.join("missing")
        ));
        assert!(matches!(
            walk(&base.join("loop"), &mut FollowAll),
            Err(WalkError::Refused(_))
        ));
    }

    #[test]
    fn a_policy_sees_each_link_with_the_directories_that_hold_it() {
        struct NoLinksUnder(DevIno);
        impl Policy for NoLinksUnder {
            fn follows(
                &mut self,
                link: &Path,
                _: &libc::stat,
                _: &libc::stat,
                chain: &[DevIno],
            ) -> Result<(), String> {
                if chain.contains(&self.0) {
                    return Err(format!(
                        "{} lies under the guarded directory",
                        link.display()
                    ));
                }
                Ok(())
            }
        }
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        std::fs::create_dir_all(base.join("w/deep")).unwrap();
        std::fs::create_dir_all(base.join("secret")).unwrap();
        std::os::unix::fs::symlink(base.join("secret"), base.join("w/deep/sub")).unwrap();
        std::os::unix::fs::symlink(base.join("secret"), base.join("outside")).unwrap();
        let w = openat(
            libc::AT_FDCWD,
            base.join("w").as_os_str().as_bytes(),
            NAME_ONLY,
        )
        .unwrap();
        let guarded = dev_ino(&fstat(w.as_raw_fd()).unwrap());
        let mut policy = NoLinksUnder(guarded);
        assert!(walk(&base.join("outside"), &mut policy).is_ok());
        let refused = walk(&base.join("w/deep/sub"), &mut policy).err().unwrap();
        assert!(
            refused.to_string().contains("under the guarded directory"),
            "{refused}"
        );
    }
}
