//! Opening plugin files once: every check is made on the descriptor that is then read, so what
//! was checked is what is hashed, copied and loaded.
//!
//! - The plugin directory: each ancestor must belong to root or this user and, when others may
//!   write it, be sticky (else whoever can write it could swap the directory for another); the
//!   directory itself is opened `O_NOFOLLOW` and checked on its descriptor.
//! - Each entry is opened relative to that descriptor, `O_NOFOLLOW | O_NONBLOCK` (a FIFO cannot
//!   hang the scan), and checked on its descriptor: a regular file, not empty, not over the size
//!   bound, and, unless the host trusts any writer, owned by this user and writable by no one else.
//!   A symlink is followed only to a file inside the directory, each directory on the way checked
//!   as the plugin directory is.
//! - The file is copied from that descriptor into private storage (a file in the host's private
//!   directory, or a sealed memfd for isolated plugins) and the copy is hashed in chunks: memory
//!   stays bounded whatever the file's size, and the copy is what loads.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::error::LoadError;
use crate::loader::trust::{Trust, plugin_kind};
use crate::walk::{self, fstat, openat};

/// The default largest plugin file loaded: 256 MiB.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 256 << 20;

/// A file's identity as the file system gives it: a rename, a hard link or a write changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

impl Stamp {
    fn of(st: &libc::stat) -> Stamp {
        Stamp {
            dev: crate::walk::dev_ino(st).0,
            ino: crate::walk::dev_ino(st).1,
            size: st.st_size as u64,
            mtime_ns: i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec),
        }
    }
}

/// The plugin directory, opened and checked.
pub struct DirHandle {
    fd: OwnedFd,
    /// The path it was opened by (for messages and the entries' paths).
    path: PathBuf,
    /// The same path without links or `..`, as the walk that opened it resolved it.
    resolved: PathBuf,
}

/// Why a directory could not be listed.
pub enum DirError {
    /// It does not exist (any more).
    Gone(LoadError),
    /// It exists but cannot be used (refused, unreadable).
    Unusable(LoadError),
}

fn me() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Why a file or directory others could write is refused, if it is: it must belong to this
/// host's user or to root, and no one else may write it (sshd's rule for its own files).
fn writable_by_others(what: &Path, st: &libc::stat) -> Option<String> {
    if st.st_uid != me() && st.st_uid != 0 {
        return Some(format!(
            "{} is owned by uid {}, not by this host's uid {} or root",
            what.display(),
            st.st_uid,
            me()
        ));
    }
    if st.st_mode & 0o022 != 0 {
        return Some(format!(
            "{} is writable by {} (mode {:o})",
            what.display(),
            if st.st_mode & 0o002 != 0 {
                "everyone"
            } else {
                "its group"
            },
            st.st_mode & 0o777
        ));
    }
    None
}

/// Opens and checks the plugin directory `dir`: its path is walked as given, component by
/// component (as [`Trust`] says), and the directory itself must not be writable by others.
pub fn open_dir(dir: &Path, trust: Trust) -> Result<DirHandle, DirError> {
    let refused = |reason: String| LoadError::Refused {
        path: dir.to_owned(),
        reason,
    };
    let walked = match trust {
        Trust::OwnerOnly => walk::walk(dir, &mut walk::SafeChain),
        Trust::AnyWriter => walk::walk(dir, &mut walk::FollowAll),
    };
    let walked = match walked {
        Ok(walked) => walked,
        Err(walk::WalkError::NotFound(_)) => {
            return Err(DirError::Gone(refused(
                "the plugin directory does not exist".into(),
            )));
        }
        Err(walk::WalkError::Refused(why)) => {
            return Err(DirError::Unusable(refused(format!(
                "{why}: whoever can write it could swap the plugin directory (fix its \
                 permissions, or opt in with --trust-any-writer)"
            ))));
        }
        Err(walk::WalkError::Io(_, e)) if e.raw_os_error() == Some(libc::ENOTDIR) => {
            return Err(DirError::Unusable(refused(
                "not a directory: pass the directory that holds the plugin files".into(),
            )));
        }
        Err(walk::WalkError::Io(_, e)) => {
            return Err(DirError::Unusable(refused(format!(
                "cannot open the plugin directory: {e}"
            ))));
        }
    };
    if walked.stat.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(DirError::Unusable(refused(
            "not a directory: pass the directory that holds the plugin files".into(),
        )));
    }
    let fd = walk::reopen_dir(&walked).map_err(|e| {
        DirError::Unusable(refused(format!("cannot open the plugin directory: {e}")))
    })?;
    if trust == Trust::OwnerOnly
        && let Some(reason) = writable_by_others(dir, &walked.stat)
    {
        return Err(DirError::Unusable(refused(format!(
            "{reason}; other users could plant code in it (fix its permissions, or opt in with \
             --trust-any-writer)"
        ))));
    }
    Ok(DirHandle {
        fd,
        path: dir.to_owned(),
        resolved: walked.path,
    })
}

impl DirHandle {
    /// The plugin file names in the directory (components too when `components`), sorted.
    pub fn list(&self, components: bool) -> Result<Vec<OsString>, LoadError> {
        let failed = |e: std::io::Error| LoadError::Refused {
            path: self.path.clone(),
            reason: format!("cannot list the plugin directory: {e}"),
        };
        // The listing reads a duplicate: `closedir` closes the descriptor it was given.
        let dup = self.fd.try_clone().map_err(failed)?;
        // SAFETY: fdopendir takes ownership of the duplicate (released from OwnedFd); readdir's
        // entries are read before the next call; closedir ends it.
        let mut names = unsafe {
            let raw = std::os::fd::IntoRawFd::into_raw_fd(dup);
            let dir = libc::fdopendir(raw);
            if dir.is_null() {
                let e = std::io::Error::last_os_error();
                libc::close(raw);
                return Err(failed(e));
            }
            libc::rewinddir(dir);
            let mut names = Vec::new();
            loop {
                let entry = libc::readdir(dir);
                if entry.is_null() {
                    break;
                }
                let name = std::ffi::CStr::from_ptr((*entry).d_name.as_ptr());
                let name = OsStr::from_bytes(name.to_bytes());
                if plugin_kind(&name.to_string_lossy(), components).is_some() {
                    names.push(name.to_owned());
                }
            }
            libc::closedir(dir);
            names
        };
        names.sort();
        Ok(names)
    }

    /// The path of entry `name`.
    pub fn path_of(&self, name: &OsStr) -> PathBuf {
        self.path.join(name)
    }

    /// Opens entry `name` and checks it on its descriptor (see the module doc).
    pub fn open_entry(
        &self,
        name: &OsStr,
        trust: Trust,
        max_size: u64,
    ) -> Result<(File, Stamp), LoadError> {
        let path = self.path_of(name);
        let refused = |reason: String| LoadError::Refused {
            path: path.clone(),
            reason,
        };
        let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOFOLLOW;
        let fd = match openat(self.fd.as_raw_fd(), name.as_bytes(), flags) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                self.follow_link(name, trust, flags).map_err(refused)?
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                return Err(LoadError::Read {
                    path,
                    reason: "it vanished".into(),
                });
            }
            Err(e) => return Err(refused(format!("cannot open: {e}"))),
        };
        let st = fstat(fd.as_raw_fd()).map_err(|e| refused(format!("cannot stat: {e}")))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(refused("not a regular file".into()));
        }
        if trust == Trust::OwnerOnly
            && let Some(reason) = writable_by_others(&path, &st)
        {
            return Err(refused(format!(
                "{reason}; another user could replace its code (fix its permissions, or opt in \
                 with --trust-any-writer)"
            )));
        }
        let size = st.st_size as u64;
        if size == 0 {
            return Err(LoadError::Empty { path });
        }
        if size > max_size {
            return Err(refused(format!(
                "{size} bytes, over the largest plugin file loaded ({max_size} bytes; \
                 DirOptions::max_file_size)"
            )));
        }
        Ok((File::from(fd), Stamp::of(&st)))
    }

    /// Follows the symlink `name` to a file inside the directory, checking each directory on
    /// the way; `Err` is why it is refused.
    fn follow_link(&self, name: &OsStr, trust: Trust, flags: i32) -> Result<OwnedFd, String> {
        let target = walk::readlinkat(self.fd.as_raw_fd(), name.as_bytes())
            .map_err(|e| format!("cannot read the symlink: {e}"))?;
        let outside = || {
            format!(
                "a symlink that leads outside the plugin directory (to {})",
                target.display()
            )
        };
        let inside = if target.is_absolute() {
            target
                .strip_prefix(&self.resolved)
                .map(Path::to_path_buf)
                .map_err(|_| outside())?
        } else {
            target.clone()
        };
        let parts: Vec<&OsStr> = inside
            .components()
            .filter_map(|c| match c {
                Component::Normal(part) => Some(Ok(part)),
                Component::CurDir => None,
                _ => Some(Err(())),
            })
            .collect::<Result<_, ()>>()
            .map_err(|()| outside())?;
        let Some((last, dirs)) = parts.split_last() else {
            return Err(outside());
        };
        let mut at = self.fd.try_clone().map_err(|e| e.to_string())?;
        let mut walked = self.path.clone();
        for part in dirs {
            walked.push(part);
            at = openat(
                at.as_raw_fd(),
                part.as_bytes(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            )
            .map_err(|e| format!("a symlink through {}: {e}", walked.display()))?;
            let st = fstat(at.as_raw_fd()).map_err(|e| e.to_string())?;
            if trust == Trust::OwnerOnly
                && let Some(reason) = writable_by_others(&walked, &st)
            {
                return Err(format!(
                    "a symlink through a directory others may change: {reason}"
                ));
            }
        }
        openat(at.as_raw_fd(), last.as_bytes(), flags).map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                "a chain of symlinks (only one link is followed)".to_owned()
            } else {
                format!("a symlink to {}: {e}", target.display())
            }
        })
    }
}

/// The copy advances this many bytes at a time; the hasher reads each chunk back while the next
/// one is copied.
const COPY_CHUNK: u64 = 1 << 20;

/// The hasher reads the copy back this many bytes at a time: a buffer under glibc's mmap
/// threshold, so the hashing thread's heap never keeps a megabyte after the first few loads (a
/// buffer of `COPY_CHUNK` is first mapped and unmapped, which raises the threshold, and from then
/// on stays resident in that thread's arena).
const READ_CHUNK: usize = 64 << 10;

/// One copy being hashed while it is made, shared by the copier and the hashing thread. Waits
/// are on a mutex and condition variable: std's channels register a thread-local destructor on a
/// thread's first blocking receive, which takes the dynamic loader's lock, and a plugin's
/// load-time code running inside `dlopen` holds that lock for as long as it likes.
struct HashJob {
    copy: File,
    state: std::sync::Mutex<HashState>,
    changed: std::sync::Condvar,
}

#[derive(Default)]
struct HashState {
    /// Bytes in the copy so far.
    copied: u64,
    /// The copier is done (or gave up): nothing more comes.
    finished: bool,
    /// The hash and length, once hashed.
    result: Option<std::io::Result<(String, u64)>>,
}

impl HashJob {
    fn state(&self) -> std::sync::MutexGuard<'_, HashState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The copier: `copied` bytes are in the copy now.
    fn copied(&self, copied: u64) {
        self.state().copied = copied;
        self.changed.notify_all();
    }

    /// The copier: nothing more comes.
    fn finish(&self) {
        self.state().finished = true;
        self.changed.notify_all();
    }

    /// The hasher: waits until more than `hashed` bytes are in, or the copy is finished; the
    /// length in then (`None`: finished at `hashed`).
    fn wait_past(&self, hashed: u64) -> Option<u64> {
        let mut state = self.state();
        while state.copied <= hashed && !state.finished {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        (state.copied > hashed).then_some(state.copied)
    }

    /// The hash of the copy, read back as the copier says it is there.
    fn hash(&self) -> std::io::Result<(String, u64)> {
        use std::os::unix::fs::FileExt;
        let mut hasher = Sha256::new();
        let mut chunk = vec![0u8; READ_CHUNK];
        let mut hashed = 0u64;
        while let Some(len) = self.wait_past(hashed) {
            while hashed < len {
                let want = usize::try_from(len - hashed).map_or(READ_CHUNK, |n| n.min(READ_CHUNK));
                let n = self.copy.read_at(&mut chunk[..want], hashed)?;
                if n == 0 {
                    return Err(std::io::Error::other(
                        "the private copy shrank while it was hashed",
                    ));
                }
                hasher.update(&chunk[..n]);
                hashed += n as u64;
            }
        }
        let hex = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok((hex, hashed))
    }

    /// The hasher: hashes and hands the result over.
    fn run(&self) {
        let result = self.hash();
        self.state().result = Some(result);
        self.changed.notify_all();
    }

    /// The copier: waits for the result.
    fn result(&self) -> std::io::Result<(String, u64)> {
        let mut state = self.state();
        loop {
            if let Some(result) = state.result.take() {
                return result;
            }
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

/// The thread that hashes private copies while they are copied. Started once, at the process's
/// first copy (before it loads any plugin), and never ends: a thread started while a plugin's
/// load-time code runs inside `dlopen` may wait on the dynamic loader's lock. `None` if it
/// could not be started: copies are then hashed after they are made, on the caller's thread.
fn hasher() -> Option<&'static std::sync::mpsc::Sender<Arc<HashJob>>> {
    static HASHER: std::sync::OnceLock<Option<std::sync::mpsc::Sender<Arc<HashJob>>>> =
        std::sync::OnceLock::new();
    HASHER
        .get_or_init(|| {
            let (jobs, rx) = std::sync::mpsc::channel::<Arc<HashJob>>();
            let thread = std::thread::Builder::new()
                .name("rho-hash".into())
                .spawn(move || {
                    for job in rx {
                        job.run();
                    }
                });
            thread.ok().map(|_| jobs)
        })
        .as_ref()
}

/// Copies `source` into `dest` (the kernel copies where it can) and hashes what `dest` holds,
/// reading it back in chunks: what is hashed is the private copy that loads. The hashing thread
/// reads each chunk back while the next one is copied, so a load costs the longer of the two
/// rather than their sum.
pub fn copy_and_hash(
    source: &mut File,
    dest: &mut File,
    max: u64,
) -> std::io::Result<(String, u64)> {
    let job = Arc::new(HashJob {
        copy: dest.try_clone()?,
        state: Default::default(),
        changed: Default::default(),
    });
    // Without the thread the hash is made here, after the copy.
    let handed_over = hasher().is_some_and(|jobs| jobs.send(job.clone()).is_ok());
    let copying = copy_in_chunks(source, dest, max, &job);
    job.finish();
    let hashed = if handed_over {
        job.result()
    } else {
        job.hash()
    };
    copying?;
    hashed
}

/// Copies `source` into `dest` a chunk at a time, telling `job` the length copied after each;
/// refuses to copy past `max` bytes.
fn copy_in_chunks(source: &File, dest: &mut File, max: u64, job: &HashJob) -> std::io::Result<()> {
    let mut copied = 0u64;
    loop {
        // A file that grows past the bound after it was checked is not copied past it.
        let step = COPY_CHUNK.min(max.saturating_add(1) - copied);
        let n = std::io::copy(&mut source.take(step), dest)?;
        if n == 0 {
            return Ok(());
        }
        copied += n;
        if copied > max {
            return Err(std::io::Error::other(format!(
                "it grew past the largest plugin file loaded ({max} bytes) while it was copied"
            )));
        }
        job.copied(copied);
    }
}

/// Runs `check` over the first `len` bytes of `file`, mapped read-only (only the pages it reads
/// are touched). The file must be private to the host: nobody else may truncate it meanwhile.
pub fn with_mapped<R>(file: &File, len: u64, check: impl FnOnce(&[u8]) -> R) -> std::io::Result<R> {
    let len = usize::try_from(len).map_err(std::io::Error::other)?;
    if len == 0 {
        return Ok(check(&[]));
    }
    // SAFETY: a read-only private mapping of a file only the host can change; unmapped below
    // after `check` returns, and the slice does not outlive it.
    unsafe {
        let ptr = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            file.as_raw_fd(),
            0,
        );
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let result = check(std::slice::from_raw_parts(ptr.cast::<u8>(), len));
        libc::munmap(ptr, len);
        Ok(result)
    }
}
