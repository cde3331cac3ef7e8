//! The sandbox on macOS: a private directory with an owner-only copy of the plugin and the
//! scratch directory, two processes (the worker watching, the plugin process serving), resource
//! limits and a Seatbelt profile generated from the grants (see the module doc of
//! [`crate::sandbox`], "The platform seam").
//!
//! Compile-checked and unit-tested on Linux (the profile generator), not run: the project has no
//! Mac in its CI. The README's platform table says what is and is not enforced here.

use std::ffi::{CStr, CString, c_char, c_int};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rho_protocol::frames::{CANCEL_FD, CHANNEL_FD, GRANT_FDS, PLUGIN_FD, STATUS_FD, SandboxSpec};
use rho_protocol::{Grants, SandboxReport};

use crate::sandbox::limits::apply_limits;
use crate::sandbox::seatbelt;
use crate::sandbox::status::{end_as, report_status};
use crate::sandbox::{Entered, Runs, STRAY_DEADLINE, left_damaged};

/// The name every worker's private directory starts with; then `PID-` and six random characters.
const DIR_PREFIX: &str = "rho-worker-";

/// The plugin's copy and the scratch directory, in the private directory.
const PLUGIN_COPY: &str = "plugin.dylib";
const SCRATCH: &str = "scratch";

fn os_error(what: &str) -> String {
    format!("{what}: {}", io::Error::last_os_error())
}

/// Enters the sandbox. Returns only in the plugin process; the worker stays in here, watching,
/// until the plugin process or the host ends, and then ends the same way as the plugin process
/// (or kills its process group with the host).
pub(crate) fn enter(spec: &SandboxSpec, runs: Runs) -> Result<Entered, String> {
    let mut report = SandboxReport::default();
    // SAFETY: credential calls on this single-threaded process's own state.
    unsafe {
        if let Some((uid, gid)) = spec.identity
            && libc::geteuid() == 0
            && (libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0)
        {
            return Err(os_error(&format!("switching to uid {uid}, gid {gid}")));
        }
        report.uid = libc::geteuid();
        report.gid = libc::getegid();
    }
    report.grants = spec.grant_paths.iter().map(|g| g.shown()).collect();
    let base = workers_dir(report.uid)?;
    // A worker killed with its process group at a timeout cannot remove its own.
    crate::loader::copy::sweep_stale(&base, DIR_PREFIX);
    let dir = private_dir(&base)?;
    let plugin = (runs == Runs::Plugin).then(|| dir.join(PLUGIN_COPY));
    let scratch = dir.join(SCRATCH);
    let made = plugin
        .as_deref()
        .map_or(Ok(()), copy_plugin)
        .and_then(|()| {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&scratch)
                .map_err(|e| format!("the scratch directory {}: {e}", scratch.display()))
        });
    if let Err(e) = made {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e);
    }
    report.scratch = true;
    // SAFETY: the worker is single-threaded here (it starts no thread before this), so `fork` is
    // sound; the child only makes system calls and returns.
    match unsafe { libc::fork() } {
        -1 => {
            let error = os_error("starting the plugin process");
            let _ = std::fs::remove_dir_all(&dir);
            Err(error)
        }
        0 => {
            // SAFETY: closing the status descriptor, which only the worker may write, and the
            // host's copy of the plugin; setting the environment and the working directory of
            // this process, single-threaded until the watch below.
            unsafe {
                libc::close(STATUS_FD);
                // The plugin loads from its own copy: the host's file is out of its reach.
                if runs == Runs::Plugin {
                    libc::close(PLUGIN_FD);
                }
                std::env::set_var("TMPDIR", &scratch);
                std::env::set_var("HOME", &scratch);
            }
            if let Err(e) = watch_worker() {
                report.missing.push(e);
            }
            if std::env::set_current_dir(&scratch).is_err() {
                report
                    .missing
                    .push(os_error("leaving the host's working directory"));
            }
            Ok(Entered { report, plugin })
        }
        child => {
            // (A program's stdin and stdout, in a program's sandbox.)
            for fd in [CHANNEL_FD, CANCEL_FD, PLUGIN_FD] {
                // SAFETY: closing descriptors only the plugin process uses.
                unsafe { libc::close(fd) };
            }
            close_grants(spec);
            watch(spec.host_pid, child, &dir)
        }
    }
}

/// Closes the granted paths' descriptors: Seatbelt matches paths, the plugin keeps no handle.
fn close_grants(spec: &SandboxSpec) {
    for i in 0..spec.grant_paths.len() {
        // SAFETY: closing a descriptor of this process's own.
        unsafe { libc::close(GRANT_FDS + i as i32) };
    }
}

/// The directory of every worker's private directory for user `uid`: `rho-workers-UID` in a safe
/// temporary directory, made `0700` when missing, refused unless it is a directory of this user's
/// that no one else may enter. Each worker's profile fences it off but for its own files.
fn workers_dir(uid: u32) -> Result<PathBuf, String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let base = crate::sandbox::host::secure_temp_dir()
        .map_err(|e| format!("a private directory: {e}"))?
        .join(format!("rho-workers-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&base) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("{}: {e}", base.display())),
    }
    let meta = std::fs::symlink_metadata(&base).map_err(|e| format!("{}: {e}", base.display()))?;
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "{} is not a directory of user {uid} that only it may enter",
            base.display()
        ));
    }
    Ok(base)
}

/// In the plugin process: a thread that kills it (and its process group) when its worker ends.
/// The host kills a worker's process group at a timeout; a plugin process that left the group
/// (`setsid`) would outlive that kill, and this watch ends it then.
fn watch_worker() -> Result<(), String> {
    // SAFETY: getppid has no preconditions; the queue is this thread's from here on.
    let (worker, queue) = unsafe { (libc::getppid(), libc::kqueue()) };
    let change = exit_of(worker);
    // SAFETY: kevent with one change that outlives the call.
    let watched = queue >= 0
        && unsafe { libc::kevent(queue, &change, 1, std::ptr::null_mut(), 0, std::ptr::null()) }
            == 0;
    if !watched {
        return Err(os_error("watching the worker (kqueue)"));
    }
    std::thread::Builder::new()
        .name("rho-worker-watch".into())
        .spawn(move || {
            // SAFETY: waits on this thread's queue, then kills this process's group and itself.
            unsafe {
                let mut event: libc::kevent = std::mem::zeroed();
                while libc::kevent(queue, std::ptr::null(), 0, &mut event, 1, std::ptr::null()) != 1
                {
                }
                libc::kill(0, libc::SIGKILL);
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        })
        .map(drop)
        .map_err(|e| format!("watching the worker: {e}"))
}

/// A new directory `DIR_PREFIX PID-XXXXXX` under `base`, mode `0700`.
fn private_dir(base: &Path) -> Result<PathBuf, String> {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let template = base.join(format!("{DIR_PREFIX}{pid}-XXXXXX"));
    let template = CString::new(template.as_os_str().as_bytes())
        .map_err(|_| format!("{} holds a NUL byte", base.display()))?;
    let mut bytes = template.into_bytes_with_nul();
    // SAFETY: mkdtemp rewrites the template's X's in place, within the NUL-terminated buffer.
    if unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast::<c_char>()) }.is_null() {
        return Err(os_error(&format!(
            "a private directory in {}",
            base.display()
        )));
    }
    let made = CStr::from_bytes_with_nul(&bytes).map_err(|e| e.to_string())?;
    Ok(PathBuf::from(std::ffi::OsStr::from_bytes(made.to_bytes())))
}

/// Copies the plugin from the host's descriptor (fd 5, read with `pread`: other workers read the
/// same open file) into `to`, owner-only (`0500`), created anew (never through a link).
fn copy_plugin(to: &Path) -> Result<(), String> {
    use std::os::fd::FromRawFd;
    let copy_error = |e: io::Error| format!("copying the plugin to {}: {e}", to.display());
    // SAFETY: the host handed fd 5 over for this; `ManuallyDrop` leaves closing it to the worker.
    let source = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(PLUGIN_FD) });
    let dest = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o500)
        .custom_flags(libc::O_NOFOLLOW)
        .open(to)
        .map_err(copy_error)?;
    let mut buf = vec![0u8; 1 << 16];
    let mut at = 0u64;
    loop {
        let n = source.read_at(&mut buf, at).map_err(copy_error)?;
        if n == 0 {
            break;
        }
        dest.write_all_at(&buf[..n], at).map_err(copy_error)?;
        at += n as u64;
    }
    dest.sync_all().map_err(copy_error)
}

/// A kqueue change that reports when process `pid` exits.
fn exit_of(pid: libc::pid_t) -> libc::kevent {
    libc::kevent {
        ident: pid as usize,
        filter: libc::EVFILT_PROC,
        flags: libc::EV_ADD | libc::EV_ONESHOT,
        fflags: libc::NOTE_EXIT,
        data: 0,
        udata: std::ptr::null_mut(),
    }
}

/// The worker: waits until the plugin process or the host ends. The host gone (there is no
/// parent-death signal on macOS), it removes the private directory and kills its process group,
/// the plugin process and what it started with it. The plugin process gone, it removes the
/// directory, reports its status to the host and ends the same way.
fn watch(host: libc::pid_t, child: libc::pid_t, dir: &Path) -> ! {
    let host_gone = || -> ! {
        // SAFETY: kills the plugin process (wherever its group is now), then this process's own
        // group, this process included.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            let _ = std::fs::remove_dir_all(dir);
            libc::kill(0, libc::SIGKILL);
            libc::_exit(1)
        }
    };
    // SAFETY: kqueue and kevent with changes and events that outlive the calls.
    unsafe {
        let queue = libc::kqueue();
        let watched = |pid| {
            let change = exit_of(pid);
            queue >= 0
                && libc::kevent(queue, &change, 1, std::ptr::null_mut(), 0, std::ptr::null()) == 0
        };
        // The plugin process already gone (its watch refused): straight to its status.
        if watched(child) {
            // The host already gone (its watch refused, or this worker re-parented).
            if !watched(host) || libc::getppid() != host {
                host_gone();
            }
            loop {
                let mut event: libc::kevent = std::mem::zeroed();
                let n = libc::kevent(queue, std::ptr::null(), 0, &mut event, 1, std::ptr::null());
                if n == 1 && event.ident == host as usize {
                    host_gone();
                }
                if n == 1 && event.ident == child as usize {
                    break;
                }
                if n < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                    break;
                }
            }
        }
        let mut status = 0;
        while libc::waitpid(child, &mut status, 0) < 0
            && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
        {}
        let _ = std::fs::remove_dir_all(dir);
        report_status(status);
        end_as(status)
    }
}

unsafe extern "C" {
    /// libSystem's `sandbox_init(3)`: enters the SBPL profile `profile` (flags 0) for good.
    fn sandbox_init(profile: *const c_char, flags: u64, errorbuf: *mut *mut c_char) -> c_int;
    /// Frees the error `sandbox_init` wrote.
    fn sandbox_free_error(errorbuf: *mut c_char);
}

/// Enters the Seatbelt profile `profile` (irreversible, for this process and what it starts).
fn enter_profile(profile: &str) -> Result<(), String> {
    let text = CString::new(profile).map_err(|_| "the profile holds a NUL byte".to_owned())?;
    let mut error: *mut c_char = std::ptr::null_mut();
    // SAFETY: a NUL-terminated profile; `error` is written by the call and freed by its pair.
    unsafe {
        if sandbox_init(text.as_ptr(), 0, &mut error) == 0 {
            return Ok(());
        }
        let why = if error.is_null() {
            "refused".to_owned()
        } else {
            let why = CStr::from_ptr(error).to_string_lossy().into_owned();
            sandbox_free_error(error);
            why
        };
        Err(why)
    }
}

/// Confines the plugin process: resource limits, then the Seatbelt profile of its grants.
///
/// Not bounded here: memory (macOS enforces neither `RLIMIT_AS` nor `RLIMIT_DATA` for `mmap`)
/// and processes (`RLIMIT_NPROC` counts every process of the user, the host's included).
pub(crate) fn confine(spec: &SandboxSpec, entered: &mut Entered) {
    let report = &mut entered.report;
    let mut limits = spec.limits.clone();
    limits.memory_bytes = None;
    limits.data_bytes = None;
    limits.processes = None;
    if let Err(e) = apply_limits(&limits) {
        report.missing.push(e);
    }
    close_grants(spec);
    if !spec.enabled {
        report
            .missing
            .push("the sandbox is turned off (WorkerOptions::sandbox = false)".into());
        return;
    }
    let (write, read): (Vec<_>, Vec<_>) = spec.grant_paths.iter().partition(|g| g.write);
    let grants = Grants {
        read: read.into_iter().map(|g| g.path.clone()).collect(),
        write: write.into_iter().map(|g| g.path.clone()).collect(),
        network: spec.grants.network,
        processes: spec.grants.processes,
        env: Vec::new(),
    };
    // `enter` made them: WORKERS/rho-worker-PID-XXXXXX/scratch, in TMPDIR.
    let scratch = std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_default();
    let workers = scratch
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let code = match &entered.plugin {
        Some(plugin) => seatbelt::Code::Plugin(plugin),
        None => seatbelt::Code::Program,
    };
    let entered_profile = seatbelt::profile(&grants, &workers, &scratch, code)
        .map_err(|e| e.to_string())
        .and_then(|profile| enter_profile(&profile));
    match entered_profile {
        Ok(()) => report.seatbelt = true,
        Err(e) => report.missing.push(format!("Seatbelt: {e}")),
    }
}

/// Counts this process's threads (`proc_pidinfo`, `PROC_PIDTASKINFO`).
pub(crate) struct ThreadCounter;

impl ThreadCounter {
    /// A counter, if this process's task information can be read.
    pub(crate) fn open() -> Option<ThreadCounter> {
        ThreadCounter.count().map(|_| ThreadCounter)
    }

    /// The threads of this process now.
    pub(crate) fn count(&self) -> Option<usize> {
        // SAFETY: `proc_taskinfo` is plain data; proc_pidinfo writes at most its size into it.
        unsafe {
            let mut info: libc::proc_taskinfo = std::mem::zeroed();
            let size = std::mem::size_of::<libc::proc_taskinfo>() as c_int;
            let got = libc::proc_pidinfo(
                libc::getpid(),
                libc::PROC_PIDTASKINFO,
                0,
                (&raw mut info).cast(),
                size,
            );
            (got == size).then(|| usize::try_from(info.pti_threadnum).ok())?
        }
    }
}

/// `proc_listpids`'s selector for the processes of one group (`sys/proc_info.h`).
const PROC_PGRP_ONLY: u32 = 2;

/// The processes of process group `group` (at most 4096).
fn group_members(group: libc::pid_t) -> Vec<libc::pid_t> {
    let mut pids = vec![0 as libc::pid_t; 4096];
    let bytes = (pids.len() * std::mem::size_of::<libc::pid_t>()) as c_int;
    // SAFETY: proc_listpids writes at most `bytes` into the buffer.
    let got = unsafe {
        libc::proc_listpids(
            PROC_PGRP_ONLY,
            group as u32,
            pids.as_mut_ptr().cast(),
            bytes,
        )
    };
    // It answers in bytes (some versions' wrappers in entries): the unused rest stays zero.
    pids.truncate(usize::try_from(got).unwrap_or(0).min(pids.len()));
    pids.retain(|pid| *pid > 0);
    pids
}

/// After a call, in the plugin process: kills what the plugin started and left running (every
/// process of the worker's group but the worker and this one; a process that left the group with
/// `setsid` is out of reach), reaps its own children, and says whether the call left the
/// process damaged (a process outlived [`STRAY_DEADLINE`], no descriptor can be opened, or
/// threads it started still run).
pub(crate) fn after_call(report: &SandboxReport, threads: Option<(usize, &ThreadCounter)>) -> bool {
    // SAFETY: getpid, getppid, getpgrp, kill, waitpid, fcntl and close on this process's own
    // group and descriptors.
    unsafe {
        if report.seatbelt {
            let me = libc::getpid();
            let worker = libc::getppid();
            let group = libc::getpgrp();
            let deadline = std::time::Instant::now() + STRAY_DEADLINE;
            loop {
                let members = group_members(group);
                // Not even itself listed: the strays cannot be known, so not left behind.
                if !members.contains(&me) {
                    return true;
                }
                let strays: Vec<_> = members
                    .into_iter()
                    .filter(|pid| *pid != me && *pid != worker)
                    .collect();
                let mut status = 0;
                while libc::waitpid(-1, &mut status, libc::WNOHANG) > 0 {}
                if strays.is_empty() {
                    break;
                }
                for pid in strays {
                    libc::kill(pid, libc::SIGKILL);
                }
                if std::time::Instant::now() >= deadline {
                    return true;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }
    left_damaged(threads)
}
