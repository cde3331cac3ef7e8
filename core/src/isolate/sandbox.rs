//! The sandbox an isolated plugin runs in, set up by the worker before the plugin's first byte of
//! code runs (load-time constructors included).
//!
//! # What a worker is made of
//!
//! The host starts `rho-worker` (a new session, a parent-death signal, a cleared environment, the
//! channels on fds 3 and 4, the plugin as a sealed memfd on fd 5, the status pipe on fd 6, the granted paths from fd 7 on).
//! The worker reads its [`SandboxSpec`] from the channel, then:
//!
//! 1. **identity**: a worker started as root switches to the spec's user and group (by default
//!    `nobody`, 65534:65534) and re-arms its parent-death signal (a credential change clears it);
//! 2. **namespaces**: `unshare` of a user, PID, mount, IPC and UTS namespace, and a network
//!    namespace unless the network is granted; in the user namespace root is the worker's own
//!    ids (the worker and the init own the sandbox's namespaces and set them up);
//! 3. **three processes**: the worker (the host's child) forks the namespace's init (pid 1), which
//!    makes the mounts (below) and bounds System V IPC in the sandbox's IPC namespace by the
//!    memory limit, then forks the process that loads the plugin and serves calls. The init reaps
//!    orphans and hands the plugin process's wait status to the worker, which reports it to the
//!    host on fd 6 ([`STATUS_FD`], after a [`STDERR_END_MARK`] line on stderr) and ends the same
//!    way (`killed by signal 11 (SIGSEGV)` reads as before). The init closes fd 6 before it forks
//!    the plugin process: only the worker, which runs no plugin code, can report. When the init dies the kernel kills every
//!    process in the namespace, `setsid` or not; each of the three has a parent-death signal, so
//!    the chain falls with the host;
//! 4. **mounts** (in the init): the whole file system is made read-only (`mount_setattr`,
//!    recursive), so nothing outside the grants changes, metadata included, which Landlock does
//!    not govern; a fresh `/proc` (only the sandbox's processes), an empty `/run`, the scratch
//!    tmpfs on `/tmp`; granted paths that need it mounted at their own paths ([`crate::isolate::mounts`]:
//!    writable grants read-write, grants under `/tmp` inside the scratch), each checked to be the
//!    inode the host resolved ([`crate::isolate::grants`]);
//! 5. **confinement** of the plugin process: a user namespace of its own nested in the sandbox's
//!    (it has the worker's ids there, and none of the sandbox's namespaces belong to it), all
//!    capabilities dropped, resource limits (memory, POSIX message queues, CPU, open files,
//!    processes, no core dumps) applied only now, so they never cap the worker's own setup;
//!    Landlock (reads under system paths and the granted ones, writes under the scratch
//!    directory and the granted ones, by the descriptors the host opened; no TCP unless the
//!    network is granted, no signals or abstract sockets out of the sandbox, no ptrace of
//!    anything outside it); `no_new_privs`; a seccomp filter refusing with `EPERM` what no tool
//!    needs (ptrace, mounts, namespaces, kernel modules, BPF, io_uring, pipe buffers past their
//!    default, ...) and, unless child processes are granted, `fork`, `execve` and `clone`
//!    without `CLONE_THREAD`;
//! 6. the plugin is loaded from `/proc/self/fd/5`; the worker reports what is in force
//!    ([`SandboxReport`]) with its tools.
//!
//! After each call the plugin process kills every other process in its namespace (what the
//! plugin started and left running) before it answers, and tells the host when the call left it
//! damaged (its descriptors exhausted): the host stops such a worker rather than reuse it.
//!
//! Each mechanism is best effort: where the kernel lacks one, the others still apply and the
//! report says what is missing (the host logs it as a warning).

use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::isolate::WorkerLimits;
use crate::isolate::grants::Grants;
use crate::isolate::mounts;
use crate::isolate::protocol::{
    CANCEL_FD, CHANNEL_FD, GRANT_FDS, PLUGIN_FD, STATUS_FD, STDERR_END_MARK, SandboxSpec,
};

/// Who an isolated plugin runs as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Identity {
    /// `nobody` (65534:65534) when the host runs as root, the host's own ids otherwise.
    #[default]
    Auto,
    /// The host's own ids.
    Host,
    /// These ids (the host must run as root to switch to them).
    User {
        /// User id.
        uid: u32,
        /// Group id.
        gid: u32,
    },
}

impl Identity {
    /// The ids a worker switches to, if any.
    pub(crate) fn resolve(self) -> Option<(u32, u32)> {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        match self {
            Identity::Auto if root => Some((NOBODY, NOBODY)),
            Identity::Auto | Identity::Host => None,
            Identity::User { uid, gid } => Some((uid, gid)),
        }
    }
}

const NOBODY: u32 = 65534;

/// What of the sandbox is in force in a worker, as it reported after loading its plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SandboxReport {
    /// The user id the plugin runs as (outside its user namespace).
    pub uid: u32,
    /// The group id.
    pub gid: u32,
    /// A user namespace of its own.
    pub user_ns: bool,
    /// A PID namespace of its own (it sees and signals only its own processes; they all die
    /// with the worker).
    pub pid_ns: bool,
    /// A mount namespace with a fresh `/proc`.
    pub fresh_proc: bool,
    /// A private tmpfs is mounted at `/tmp` (the plugin's scratch space).
    pub scratch: bool,
    /// A network namespace of its own (no network).
    pub net_ns: bool,
    /// The Landlock ABI enforced (0: none).
    pub landlock_abi: u8,
    /// Whether every Landlock restriction asked for is enforced.
    pub landlock_full: bool,
    /// The seccomp filter is installed.
    pub seccomp: bool,
    /// `no_new_privs` is set.
    pub no_new_privs: bool,
    /// Capabilities were dropped.
    pub caps_dropped: bool,
    /// The file system is read-only but for the scratch directory and the write grants, so
    /// nothing outside them changes, metadata included (modes, owners, times, extended
    /// attributes: Landlock does not govern those).
    #[serde(default)]
    pub read_only: bool,
    /// The plugin runs in a user namespace nested in the sandbox's, which owns none of the
    /// sandbox's namespaces (no capability it could regain reaches them).
    #[serde(default)]
    pub nested_user_ns: bool,
    /// System V shared memory and message queues are bounded in the sandbox's own IPC namespace,
    /// and POSIX message queues by `RLIMIT_MSGQUEUE` (see [`WorkerLimits::memory_bytes`]).
    #[serde(default)]
    pub ipc_limits: bool,
    /// The granted paths in force, as `read PATH` or `write PATH` (resolved paths): the same as
    /// the host granted, or the plugin is refused.
    #[serde(default)]
    pub grants: Vec<String>,
    /// What could not be set up, one line each.
    pub missing: Vec<String>,
}

impl SandboxReport {
    /// Whether every mechanism is in force.
    pub fn complete(&self) -> bool {
        self.missing.is_empty()
    }
}

impl fmt::Display for SandboxReport {
    /// One line: `uid 65534, user+pid+mount+net namespaces, fresh /proc, Landlock ABI 7, seccomp,
    /// no_new_privs, no capabilities`, then what is missing.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = vec![format!("uid {}", self.uid)];
        let ns: Vec<&str> = [
            (self.user_ns, "user"),
            (self.pid_ns, "pid"),
            (self.fresh_proc, "mount"),
            (self.net_ns, "net"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| *name)
        .collect();
        if !ns.is_empty() {
            parts.push(format!("{} namespaces", ns.join("+")));
        }
        if self.fresh_proc {
            parts.push("fresh /proc".into());
        }
        if self.read_only {
            parts.push("read-only file system".into());
        }
        if self.ipc_limits {
            parts.push("IPC bounded".into());
        }
        if self.landlock_abi > 0 {
            parts.push(format!(
                "Landlock ABI {}{}",
                self.landlock_abi,
                if self.landlock_full { "" } else { " (partly)" }
            ));
        }
        for (on, name) in [
            (self.seccomp, "seccomp"),
            (self.no_new_privs, "no_new_privs"),
            (self.caps_dropped, "no capabilities"),
        ] {
            if on {
                parts.push(name.into());
            }
        }
        write!(f, "{}", parts.join(", "))?;
        if !self.missing.is_empty() {
            write!(f, "; missing: {}", self.missing.join("; "))?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Host side.

/// A new memfd for a plugin's bytes (`rho-plugin:NAME`, close-on-exec, sealable): the worker
/// loads the plugin from it (`/proc/self/fd/5`). No path exists that anyone could swap, and it is
/// gone with the last process holding it. [`seal`] it once written.
pub(crate) fn plugin_memfd(name: &str) -> io::Result<std::fs::File> {
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
pub(crate) fn seal(file: &std::fs::File) -> io::Result<()> {
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
pub(crate) fn safe_dir_chain(dir: &Path) -> Result<PathBuf, String> {
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

// ---------------------------------------------------------------------------------------------
// Worker side.

/// System paths every plugin may read (and execute from, where child processes are granted).
pub(crate) const SYSTEM_READ: &[&str] = &[
    "/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/opt", "/proc",
];

/// Device files every plugin may read and write.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/urandom",
    "/dev/random",
];

fn os_error(what: &str) -> String {
    format!("{what}: {}", io::Error::last_os_error())
}

fn write_file(path: &str, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("writing {path}: {e}"))
}

/// Enters the sandbox. Returns only in the process that will load the plugin and serve calls;
/// the worker process and the namespace's init stay in here until the plugin process ends, and
/// then end the same way. `Err` is a setup step that must not be skipped (the identity switch).
pub(crate) fn enter(spec: &SandboxSpec) -> Result<SandboxReport, String> {
    let mut report = SandboxReport::default();
    if !spec.enabled {
        // SAFETY: geteuid and getegid have no preconditions; closing the status descriptor,
        // which this process (the plugin process from here on) must not hold.
        (report.uid, report.gid) = unsafe {
            libc::close(STATUS_FD);
            (libc::geteuid(), libc::getegid())
        };
        report
            .missing
            .push("the sandbox is turned off (WorkerOptions::sandbox = false)".into());
        return Ok(report);
    }
    // SAFETY (this function): plain system calls on this process's own state; the process is
    // single-threaded here (the worker starts no thread before this), so `fork` is sound.
    unsafe {
        if let Some((uid, gid)) = spec.identity
            && libc::geteuid() == 0
        {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setresgid(gid, gid, gid) != 0
                || libc::setresuid(uid, uid, uid) != 0
            {
                return Err(os_error(&format!("switching to uid {uid}, gid {gid}")));
            }
            // A credential change clears the parent-death signal.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
                || libc::getppid() != spec.host_pid
            {
                libc::_exit(1);
            }
        }
        report.uid = libc::geteuid();
        report.gid = libc::getegid();

        let mut flags = libc::CLONE_NEWUSER
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWNS
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWUTS
            | libc::CLONE_NEWCGROUP;
        if !spec.grants.network {
            flags |= libc::CLONE_NEWNET;
        }
        if libc::unshare(flags) == 0 {
            // A credential change left the process undumpable, which makes its /proc files
            // root's: the maps could not be written.
            libc::prctl(libc::PR_SET_DUMPABLE, 1);
            // Root inside is the worker's own ids outside: the worker and the init own the
            // sandbox's namespaces (they set its limits); the plugin process nests a user
            // namespace of its own in which it has the worker's ids again (see `nest_user_ns`).
            let maps = write_file("/proc/self/setgroups", "deny")
                .and_then(|()| write_file("/proc/self/uid_map", &format!("0 {} 1", report.uid)))
                .and_then(|()| write_file("/proc/self/gid_map", &format!("0 {} 1", report.gid)));
            if let Err(e) = maps {
                report.missing.push(e);
            }
            report.user_ns = true;
            report.pid_ns = true;
            report.net_ns = !spec.grants.network;
        } else {
            report
                .missing
                .push(os_error("namespaces (user, pid, mount, net)"));
        }

        report.grants = spec.grant_paths.iter().map(|g| g.shown()).collect();

        let mut status_pipe = [0; 2];
        if libc::pipe2(status_pipe.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(os_error("a pipe"));
        }
        let [status_read, status_write] = status_pipe;
        match libc::fork() {
            -1 => Err(os_error("starting the sandbox's init")),
            0 => {
                libc::close(status_read);
                be_init(spec, status_write, report)
            }
            init => {
                libc::close(status_write);
                for fd in [CHANNEL_FD, CANCEL_FD, PLUGIN_FD] {
                    libc::close(fd);
                }
                close_grants(spec);
                mirror(init, status_read)
            }
        }
    }
}

/// The namespace's init: mounts, then forks the plugin process and reaps until it ends.
unsafe fn be_init(
    spec: &SandboxSpec,
    status_write: i32,
    mut report: SandboxReport,
) -> Result<SandboxReport, String> {
    // SAFETY: as in `enter`: system calls on this single-threaded process's own state.
    unsafe {
        // Neither the init nor the plugin process it forks may report to the host: only the
        // worker, which runs no plugin code, writes the status the host trusts.
        libc::close(STATUS_FD);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        // The worker died before the signal was armed: its end of the pipe is gone.
        let mut poll = libc::pollfd {
            fd: status_write,
            events: 0,
            revents: 0,
        };
        if libc::poll(&mut poll, 1, 0) > 0 && poll.revents & libc::POLLERR != 0 {
            libc::_exit(1);
        }
        if report.pid_ns {
            mount_private(spec, &mut report);
        }
        match libc::fork() {
            -1 => {
                eprintln!("rho-worker: {}", os_error("starting the plugin process"));
                libc::_exit(1);
            }
            0 => {
                libc::close(status_write);
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(report)
            }
            plugin => {
                for fd in [CHANNEL_FD, CANCEL_FD, PLUGIN_FD] {
                    libc::close(fd);
                }
                close_grants(spec);
                loop {
                    let mut status = 0;
                    let pid = libc::waitpid(-1, &mut status, 0);
                    if pid == plugin {
                        let bytes = status.to_ne_bytes();
                        libc::write(status_write, bytes.as_ptr().cast(), bytes.len());
                        libc::_exit(0);
                    }
                    if pid < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                        libc::_exit(1);
                    }
                }
            }
        }
    }
}

/// Closes the granted paths' descriptors (every process of the sandbox but the plugin process,
/// which closes them once its Landlock rules hold).
fn close_grants(spec: &SandboxSpec) {
    for i in 0..spec.grant_paths.len() {
        // SAFETY: closing a descriptor of this process's own.
        unsafe { libc::close(GRANT_FDS + i as i32) };
    }
}

/// In the init, in its own mount namespace: nothing propagates back to the host; the whole file
/// system is made read-only; a fresh `/proc` shows only the sandbox's processes, an empty `/run`
/// hides the host's sockets, the scratch directory is mounted at `/tmp`; the granted paths that
/// need it are mounted at their paths (writable ones read-write, those under `/tmp` inside the
/// scratch directory); System V IPC is bounded.
unsafe fn mount_private(spec: &SandboxSpec, report: &mut SandboxReport) {
    let none = std::ptr::null::<libc::c_char>();
    // SAFETY: mount(2) with valid C strings or nulls.
    unsafe {
        if libc::mount(
            none,
            c"/".as_ptr(),
            none,
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            report.missing.push(os_error("a private mount namespace"));
            return;
        }
    }
    // Taken before anything is mounted over their paths (the scratch tmpfs hides the host's
    // /tmp): a copy of each granted tree, detached, with its flags.
    let mut binds = Vec::new();
    for (index, grant) in spec.grant_paths.iter().enumerate() {
        if !crate::isolate::grants::needs_mount(grant, &spec.grant_paths) {
            continue;
        }
        match mounts::detach_grant(index, grant) {
            Ok(bind) => binds.push(bind),
            Err(e) => fail_grant(report, grant, &e),
        }
    }
    match mounts::set_attributes(
        libc::AT_FDCWD,
        c"/",
        libc::AT_RECURSIVE,
        mounts::MOUNT_ATTR_RDONLY,
        0,
    ) {
        Ok(()) => report.read_only = true,
        Err(e) => report
            .missing
            .push(format!("a read-only view of the file system: {e}")),
    }
    // SAFETY: mount(2) with valid C strings or nulls.
    unsafe {
        if libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        ) == 0
        {
            report.fresh_proc = true;
        } else {
            report.missing.push(os_error("a fresh /proc"));
        }
        // Sockets named in /run (the session bus, container engines) are out of reach unless a
        // grant names a path there.
        let granted_run = spec
            .grant_paths
            .iter()
            .any(|g| g.path.starts_with("/run") || g.path.starts_with("/var/run"));
        if !granted_run
            && Path::new("/run").is_dir()
            && libc::mount(
                c"tmpfs".as_ptr(),
                c"/run".as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                c"size=64k,mode=755".as_ptr().cast(),
            ) != 0
        {
            report.missing.push(os_error("an empty /run"));
        }
        // The plugin's scratch: a tmpfs of its own, bounded, gone with the namespace, owned by
        // the worker's ids (root of this user namespace). Nothing of the host's /tmp is
        // reachable under it.
        let options = CString::new(format!(
            "size={},nr_inodes=16384,mode=0700,uid=0,gid=0",
            spec.scratch_bytes.max(4096),
        ))
        .unwrap_or_default();
        if libc::mount(
            c"tmpfs".as_ptr(),
            c"/tmp".as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            options.as_ptr().cast(),
        ) == 0
        {
            report.scratch = true;
        } else {
            report.missing.push(os_error("a scratch tmpfs on /tmp"));
        }
    }
    for bind in binds {
        if let Err(e) = mounts::attach(&bind, report.scratch) {
            fail_grant(report, &spec.grant_paths[bind.index], &e);
        }
    }
    match bound_ipc(&spec.limits) {
        Ok(bounded) => report.ipc_limits = bounded,
        Err(e) => report.missing.push(e),
    }
    // One user namespace below this one: the plugin process's own (`nest_user_ns`); seccomp
    // refuses the calls that would make more.
    let _ = std::fs::write("/proc/sys/user/max_user_namespaces", "1");
}

/// Records that `grant` could not be put in force in this sandbox.
fn fail_grant(report: &mut SandboxReport, grant: &crate::isolate::grants::GrantPath, why: &str) {
    let shown = grant.shown();
    report.grants.retain(|g| *g != shown);
    report
        .missing
        .push(format!("the grant of {}: {why}", grant.path.display()));
}

/// Bounds System V IPC in the sandbox's own IPC namespace by the memory limit (its sysctls are
/// the namespace's own, and its root's to set): one shared memory segment of at most the limit
/// and all of them together no more (`shmmax`, `shmall`, 64 segments); message queues holding
/// the limit together (16 queues of a sixteenth each); semaphores at the kernel's old defaults.
/// `Ok(false)` without a memory limit.
fn bound_ipc(limits: &WorkerLimits) -> Result<bool, String> {
    let Some(memory) = limits.memory_bytes else {
        return Ok(false);
    };
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let per_queue = (memory / 16).clamp(16 << 10, i32::MAX as u64);
    for (name, value) in [
        ("shmmax", memory.to_string()),
        ("shmall", (memory / page.max(1)).to_string()),
        ("shmmni", "64".to_owned()),
        ("msgmni", "16".to_owned()),
        ("msgmnb", per_queue.to_string()),
        ("sem", "250 32000 32 128".to_owned()),
    ] {
        write_file(&format!("/proc/sys/kernel/{name}"), &value)
            .map_err(|e| format!("bounded System V IPC: {e}"))?;
    }
    Ok(true)
}

/// The worker: waits for the init to hand over the plugin process's status, reports it to the
/// host on [`STATUS_FD`] (after the [`STDERR_END_MARK`] line on stderr), then ends the same way
/// (so the host reads `killed by signal 11 (SIGSEGV)` as it would without a sandbox).
unsafe fn mirror(init: libc::pid_t, status_read: i32) -> ! {
    // SAFETY: system calls on this process's own state.
    unsafe {
        let mut bytes = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            let n = libc::read(status_read, bytes[got..].as_mut_ptr().cast(), 4 - got);
            if n > 0 {
                got += n as usize;
            } else if n == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break;
            }
        }
        if got == 4 {
            // The host: the plugin's last words are in once it reads the mark; then the status.
            let mark = format!("{STDERR_END_MARK}\n");
            libc::write(2, mark.as_ptr().cast(), mark.len());
            libc::write(STATUS_FD, bytes.as_ptr().cast(), bytes.len());
        }
        let mut init_status = 0;
        while libc::waitpid(init, &mut init_status, 0) < 0
            && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
        {}
        let status = if got == 4 {
            i32::from_ne_bytes(bytes)
        } else {
            init_status
        };
        if libc::WIFSIGNALED(status) {
            let signal = libc::WTERMSIG(status);
            let no_core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            libc::signal(signal, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, signal);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::raise(signal);
            libc::_exit(128 + signal);
        }
        libc::_exit(libc::WEXITSTATUS(status))
    }
}

/// Confines the plugin process: capabilities, limits, Landlock, `no_new_privs`, seccomp, in that
/// order (each later step may forbid what an earlier one needs).
pub(crate) fn confine(spec: &SandboxSpec, report: &mut SandboxReport) {
    if !spec.enabled {
        close_grants(spec);
        if let Err(e) = apply_limits(&spec.limits) {
            report.missing.push(e);
        }
        return;
    }
    if report.user_ns {
        match nest_user_ns(report.uid, report.gid) {
            Ok(()) => report.nested_user_ns = true,
            Err(e) => report.missing.push(e),
        }
        match drop_capabilities() {
            Ok(()) => report.caps_dropped = true,
            Err(e) => report.missing.push(e),
        }
    }
    // The process count is per sandbox only in a user namespace of its own; outside one it
    // would count every process of the user, the host's included.
    let mut limits = spec.limits.clone();
    if !report.user_ns {
        limits.processes = None;
    }
    if let Err(e) = apply_limits(&limits) {
        report.missing.push(e);
    }
    // The host's working directory would be a handle into its view of the file system.
    let home = if report.scratch { c"/tmp" } else { c"/" };
    // SAFETY: chdir with a valid C string.
    if unsafe { libc::chdir(home.as_ptr()) } != 0 {
        report
            .missing
            .push(os_error("leaving the host's working directory"));
    }
    landlock(spec, report);
    // The rules hold on the inodes: the plugin keeps no handle into the host's file system.
    close_grants(spec);
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } == 0 {
        report.no_new_privs = true;
    } else {
        report.missing.push(os_error("no_new_privs"));
    }
    match seccomp(&spec.grants) {
        Ok(()) => report.seccomp = true,
        Err(e) => report.missing.push(format!("seccomp: {e}")),
    }
}

/// In the plugin process: a user namespace nested in the sandbox's, where the plugin has the
/// worker's ids (`uid` and `gid` outside) again; the sandbox's namespaces belong to the one
/// above, so nothing this process could do with capabilities of its own reaches them.
fn nest_user_ns(uid: u32, gid: u32) -> Result<(), String> {
    // SAFETY: unshare and prctl with integer arguments, on this process's own state.
    unsafe {
        if libc::unshare(libc::CLONE_NEWUSER) != 0 {
            return Err(os_error("a user namespace of the plugin's own"));
        }
        libc::prctl(libc::PR_SET_DUMPABLE, 1);
    }
    write_file("/proc/self/setgroups", "deny")
        .and_then(|()| write_file("/proc/self/uid_map", &format!("{uid} 0 1")))
        .and_then(|()| write_file("/proc/self/gid_map", &format!("{gid} 0 1")))
        .map_err(|e| format!("the plugin's user namespace: {e}"))?;
    // SAFETY: prctl with integer arguments; getppid has no preconditions.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 || libc::getppid() != 1 {
            libc::_exit(1);
        }
    }
    Ok(())
}

fn drop_capabilities() -> Result<(), String> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    // SAFETY: prctl with integer arguments; capset with a valid header and two data entries.
    unsafe {
        for cap in 0..64 {
            // Capabilities this kernel does not know fail with EINVAL: nothing to drop.
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        let mut header = Header {
            version: VERSION_3,
            pid: 0,
        };
        let data = [Data::default(); 2];
        if libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) != 0 {
            return Err(os_error("dropping capabilities"));
        }
    }
    Ok(())
}

fn apply_limits(limits: &WorkerLimits) -> Result<(), String> {
    // A limit is only ever lowered: raising one past the host's own hard limit needs a privilege
    // the worker does not have (and the host's lower limit is tighter anyway).
    let set = |resource, name: &str, value: Option<u64>| -> Result<(), String> {
        let Some(mut v) = value else { return Ok(()) };
        let mut now = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given.
        if unsafe { libc::getrlimit(resource, &mut now) } == 0 {
            v = v.min(now.rlim_max);
        }
        let rl = libc::rlimit {
            rlim_cur: v,
            rlim_max: v,
        };
        // SAFETY: setrlimit with a valid struct.
        if unsafe { libc::setrlimit(resource, &rl) } != 0 {
            return Err(os_error(&format!("the {name} limit")));
        }
        Ok(())
    };
    set(libc::RLIMIT_CORE, "core dump", Some(0))?;
    set(libc::RLIMIT_AS, "memory", limits.memory_bytes)?;
    set(libc::RLIMIT_CPU, "CPU time", limits.cpu_seconds)?;
    set(libc::RLIMIT_NOFILE, "open files", limits.open_files)?;
    set(libc::RLIMIT_FSIZE, "file size", limits.file_bytes)?;
    // POSIX message queues: kernel memory outside the address space.
    set(libc::RLIMIT_MSGQUEUE, "message queue", limits.memory_bytes)?;
    set(libc::RLIMIT_NPROC, "processes", limits.processes)
}

fn landlock(spec: &SandboxSpec, report: &mut SandboxReport) {
    let (net_ns, scratch) = (report.net_ns, report.scratch);
    use landlock::{
        ABI, Access, AccessFs, AccessNet, PathBeneath, PathFd, Ruleset, RulesetAttr,
        RulesetCreatedAttr, RulesetStatus, Scope,
    };
    let abi = ABI::V7;
    let read = AccessFs::from_read(abi);
    let all = AccessFs::from_all(abi);
    let file_rw = AccessFs::ReadFile | AccessFs::WriteFile;
    let built = (|| -> Result<_, landlock::RulesetError> {
        let mut ruleset = Ruleset::default().handle_access(all)?;
        // Without a network namespace of its own, Landlock keeps TCP from the plugin.
        if !spec.grants.network && !net_ns {
            ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
        }
        let mut created = ruleset.scope(Scope::from_all(abi))?.create()?;
        for path in SYSTEM_READ {
            if let Ok(fd) = PathFd::new(path) {
                created = created.add_rule(PathBeneath::new(fd, read))?;
            }
        }
        for device in DEVICES {
            if let Ok(fd) = PathFd::new(device) {
                created = created.add_rule(PathBeneath::new(fd, file_rw))?;
            }
        }
        // The granted paths as the host opened them: the rules hold on those inodes, wherever
        // a plugin may have moved them since.
        for (i, grant) in spec.grant_paths.iter().enumerate() {
            // SAFETY: the host handed this descriptor over, and it stays open until
            // `close_grants`, after the ruleset is enforced.
            let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(GRANT_FDS + i as i32) };
            let access = if grant.write { all } else { read };
            created = created.add_rule(PathBeneath::new(fd, access))?;
        }
        if scratch && let Ok(fd) = PathFd::new("/tmp") {
            created = created.add_rule(PathBeneath::new(fd, all))?;
        }
        created.restrict_self()
    })();
    match built {
        Ok(status) => {
            report.no_new_privs |= status.no_new_privs;
            match status.ruleset {
                RulesetStatus::FullyEnforced => {
                    report.landlock_abi = abi as u8;
                    report.landlock_full = true;
                }
                RulesetStatus::PartiallyEnforced => {
                    report.landlock_abi = kernel_landlock_abi();
                    report.missing.push(format!(
                        "Landlock only partly (kernel ABI {})",
                        report.landlock_abi
                    ));
                }
                RulesetStatus::NotEnforced => report.missing.push("Landlock".into()),
            }
        }
        Err(e) => report.missing.push(format!("Landlock: {e}")),
    }
}

fn kernel_landlock_abi() -> u8 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: the version query takes no ruleset.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u8::try_from(v).unwrap_or(0)
}

/// System calls no tool needs: each fails with `EPERM`.
const DENIED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
    libc::SYS_kcmp,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_acct,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_quotactl,
    libc::SYS_syslog,
    libc::SYS_vhangup,
    libc::SYS_sethostname,
    libc::SYS_setdomainname,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    // Memory outside the address-space limit.
    libc::SYS_memfd_create,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
];

/// Starting processes, denied unless granted.
const PROCESS_CALLS: &[libc::c_long] = &[
    #[cfg(target_arch = "x86_64")]
    libc::SYS_fork,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_vfork,
    libc::SYS_execve,
    libc::SYS_execveat,
];

fn seccomp(grants: &Grants) -> Result<(), String> {
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    use std::collections::BTreeMap;
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
    let e = |e: seccompiler::BackendError| e.to_string();
    let rule = |conditions: Vec<SeccompCondition>| SeccompRule::new(conditions).map_err(e);
    let masked = |arg: u8, mask: u64, value: u64| {
        SeccompCondition::new(
            arg,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(mask),
            value,
        )
        .map_err(e)
    };
    let not = |arg: u8, len: SeccompCmpArgLen, value: u64| {
        SeccompCondition::new(arg, len, SeccompCmpOp::Ne, value).map_err(e)
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&call| (call, Vec::new())).collect();
    // `clone` making namespaces, always; without CLONE_THREAD (a process), unless granted.
    let mut clone = Vec::new();
    for flag in [
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWNS,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWCGROUP,
    ] {
        clone.push(rule(vec![masked(0, flag as u64, flag as u64)?])?);
    }
    if !grants.processes {
        rules.extend(PROCESS_CALLS.iter().map(|&call| (call, Vec::new())));
        clone.push(rule(vec![masked(0, libc::CLONE_THREAD as u64, 0)?])?);
    }
    rules.insert(libc::SYS_clone, clone);
    // Sockets of the families a tool's network needs (inside its own network namespace unless
    // granted); unix sockets, which reach the host's services by path, only with the network.
    let mut families = vec![
        not(0, SeccompCmpArgLen::Dword, libc::AF_INET as u64)?,
        not(0, SeccompCmpArgLen::Dword, libc::AF_INET6 as u64)?,
        not(0, SeccompCmpArgLen::Dword, libc::AF_NETLINK as u64)?,
    ];
    if grants.network {
        families.push(not(0, SeccompCmpArgLen::Dword, libc::AF_UNIX as u64)?);
    }
    rules.insert(libc::SYS_socket, vec![rule(families)?]);
    // Pipe buffers past the default 64 KiB: kernel memory outside the address space (up to
    // 1 MiB per pipe, per open-file slot).
    rules.insert(
        libc::SYS_fcntl,
        vec![rule(vec![
            SeccompCondition::new(
                1,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                libc::F_SETPIPE_SZ as u64,
            )
            .map_err(e)?,
        ])?],
    );
    // Limits of other processes (the sandbox's init).
    rules.insert(
        libc::SYS_prlimit64,
        vec![rule(vec![not(0, SeccompCmpArgLen::Dword, 0)?])?],
    );
    // x32 numbers of the same calls, and the calls x32 numbers apart (execve, ptrace, ...):
    // refused alike where the kernel has that ABI.
    #[cfg(target_arch = "x86_64")]
    {
        const X32: i64 = 0x4000_0000;
        let mut x32: Vec<(i64, Vec<SeccompRule>)> = rules
            .iter()
            .map(|(call, rules)| (call | X32, rules.clone()))
            .collect();
        // x32's own numbers: execve, ptrace, kexec_load, process_vm_readv/writev, execveat.
        for own in [520, 521, 528, 539, 540, 545] {
            x32.push((X32 | own, Vec::new()));
        }
        rules.extend(x32);
    }
    let denied = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(e)?;
    // clone3 passes its flags in memory, out of a filter's reach: ENOSYS makes the C library fall
    // back to `clone`, which the filter above can read.
    let clone3 = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    for filter in [denied, clone3] {
        let program: BpfProgram = filter
            .try_into()
            .map_err(|e: seccompiler::BackendError| e.to_string())?;
        seccompiler::apply_filter(&program).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// How long [`after_call`] waits for the processes a call left to be gone before it gives the
/// worker up (it is then replaced, and its namespace dies with it).
const STRAY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);

/// Counts this process's threads: `/proc/self/stat`, opened once and read again from its start
/// for each count (one `pread`; the kernel writes `stat` more cheaply than `status`).
pub(crate) struct ThreadCounter {
    stat: std::fs::File,
}

impl ThreadCounter {
    /// `None` if `/proc/self/stat` cannot be opened.
    pub(crate) fn open() -> Option<ThreadCounter> {
        std::fs::File::open("/proc/self/stat")
            .ok()
            .map(|stat| ThreadCounter { stat })
    }

    /// The threads of this process now, if `stat` can be read: its 20th field, counted after the
    /// command name's closing parenthesis (the name itself may hold spaces and parentheses).
    pub(crate) fn count(&self) -> Option<usize> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 1024];
        let n = self.stat.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        let after_name = &text[text.rfind(')')? + 1..];
        // Fields from the 3rd (state) on; `num_threads` is the 20th.
        after_name.split_whitespace().nth(17)?.parse().ok()
    }
}

/// After a call, in the plugin process: kills whatever the plugin started and left running (in
/// its own PID namespace `kill(-1)` reaches only those), waits until every one of them is gone
/// (its own children reaped here, orphans by the namespace's init), and says whether the call
/// left the process damaged: a process outlived [`STRAY_DEADLINE`], no descriptor can be opened,
/// or threads it started still run (plugin code must not run between calls; threads started at
/// load time are the `threads` baseline).
pub(crate) fn after_call(report: &SandboxReport, threads: Option<(usize, &ThreadCounter)>) -> bool {
    // SAFETY: kill, waitpid, fcntl and close on this process's own namespace and descriptors.
    unsafe {
        if report.pid_ns {
            // `kill(-1)` succeeds while any other process of the namespace but init exists,
            // zombies included, so this ends only when all of them are reaped: a grandchild
            // still exiting is not left for the host to see after the answer.
            let deadline = std::time::Instant::now() + STRAY_DEADLINE;
            while libc::kill(-1, libc::SIGKILL) == 0 {
                let mut status = 0;
                while libc::waitpid(-1, &mut status, libc::WNOHANG) > 0 {}
                if std::time::Instant::now() >= deadline {
                    return true;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        let probe = libc::fcntl(CHANNEL_FD, libc::F_DUPFD_CLOEXEC, 0);
        if probe < 0 {
            return true;
        }
        libc::close(probe);
    }
    threads.is_some_and(|(baseline, counter)| counter.count().is_some_and(|now| now > baseline))
}

/// A note naming the capability the sandbox denies, for a failure text that shows the OS
/// refused something: `[sandbox: no network is granted to this plugin]`.
pub(crate) fn denial_note(text: &str, grants: &Grants) -> Option<String> {
    let has = |codes: &[&str]| codes.iter().any(|c| text.contains(c));
    if !grants.network
        && has(&[
            "os error 101)",
            "os error 97)",
            "Network is unreachable",
            "Address family not supported",
        ])
    {
        return Some("[sandbox: no network is granted to this plugin]".into());
    }
    if has(&["os error 13)", "os error 30)", "Permission denied"]) {
        let list = |paths: &[PathBuf]| {
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut writes = String::from("/tmp (its scratch directory)");
        if !grants.write.is_empty() {
            writes.push_str(", ");
            writes.push_str(&list(&grants.write));
        }
        let extra_reads = if grants.read.is_empty() {
            String::new()
        } else {
            format!(" and {}", list(&grants.read))
        };
        return Some(format!(
            "[sandbox: this plugin may write only under {writes}, read system paths{extra_reads}]"
        ));
    }
    if has(&["os error 1)", "Operation not permitted"]) {
        let processes = if grants.processes {
            ""
        } else {
            "start processes (not granted), "
        };
        return Some(format!(
            "[sandbox: plugins may not {processes}signal or trace processes outside the \
             sandbox, mount or make namespaces]"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_name_the_denied_capability() {
        let g = Grants::default();
        assert_eq!(
            denial_note("denied: Network is unreachable (os error 101)", &g).as_deref(),
            Some("[sandbox: no network is granted to this plugin]")
        );
        assert!(
            denial_note("Permission denied (os error 13)", &g)
                .is_some_and(|n| n.contains("/tmp (its scratch directory)"))
        );
        assert!(
            denial_note("Operation not permitted (os error 1)", &g)
                .is_some_and(|n| n.contains("start processes (not granted)"))
        );
        assert_eq!(denial_note("no such tool", &g), None);
    }

    #[test]
    fn report_reads_as_one_line() {
        let r = SandboxReport {
            uid: 65534,
            user_ns: true,
            pid_ns: true,
            fresh_proc: true,
            net_ns: true,
            landlock_abi: 7,
            landlock_full: true,
            seccomp: true,
            no_new_privs: true,
            caps_dropped: true,
            ..SandboxReport::default()
        };
        assert_eq!(
            r.to_string(),
            "uid 65534, user+pid+mount+net namespaces, fresh /proc, Landlock ABI 7, seccomp, \
             no_new_privs, no capabilities"
        );
    }

    /// The counter reads what `/proc/self/status` says, with a thread of this test running and
    /// after it ended (other tests' threads come and go meanwhile: a reading may be retried).
    #[test]
    fn the_thread_counter_counts_this_process_threads() {
        let status = || {
            std::fs::read_to_string("/proc/self/status")
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .unwrap()
                .trim()
                .parse::<usize>()
                .unwrap()
        };
        let counter = ThreadCounter::open().unwrap();
        let agrees = || (0..100).any(|_| counter.count() == Some(status()));
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || stopped.recv());
        assert!(agrees(), "with a thread running");
        stop.send(()).unwrap();
        thread.join().unwrap().unwrap();
        assert!(agrees(), "after it ended");
    }
}
