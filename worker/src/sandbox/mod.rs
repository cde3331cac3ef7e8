//! The sandbox an isolated plugin runs in, set up by the worker before the plugin's first byte of
//! code runs (load-time constructors included).
//!
//! # What a worker is made of
//!
//! The host starts `rho-worker` (a new session, a parent-death signal, a cleared environment, the
//! channels on fds 3 and 4, the plugin as a sealed memfd on fd 5, the status pipe on fd 6, the granted paths from fd 7 on).
//! The worker reads its [`SandboxSpec`](rho_protocol::frames::SandboxSpec) from the channel, then:
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
//!    host on fd 6 ([`STATUS_FD`](rho_protocol::frames::STATUS_FD), after a
//!    [`STDERR_END_MARK`](rho_protocol::frames::STDERR_END_MARK) line on stderr) and ends the same
//!    way (`killed by signal 11 (SIGSEGV)` reads as before). The init closes fd 6 before it forks
//!    the plugin process: only the worker, which runs no plugin code, can report. When the init dies the kernel kills every
//!    process in the namespace, `setsid` or not; each of the three has a parent-death signal, so
//!    the chain falls with the host;
//! 4. **mounts** (in the init): the whole file system is made read-only (`mount_setattr`,
//!    recursive), so nothing outside the grants changes, metadata included, which Landlock does
//!    not govern; a fresh `/proc` (only the sandbox's processes), an empty `/run`, the scratch
//!    tmpfs on `/tmp`; granted paths that need it mounted at their own paths (`sandbox/mounts.rs`:
//!    writable grants read-write, grants under `/tmp` inside the scratch), each checked to be the
//!    inode the host resolved ([`crate::grants`]);
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
//!    ([`SandboxReport`](rho_protocol::SandboxReport)) with its tools.
//!
//! After each call the plugin process kills every other process in its namespace (what the
//! plugin started and left running) before it answers, and tells the host when the call left it
//! damaged (its descriptors exhausted): the host stops such a worker rather than reuse it.
//!
//! Each mechanism is best effort: where the kernel lacks one, the others still apply and the
//! report says what is missing (the host logs it as a warning).
//!
//! # The platform seam
//!
//! The sandbox sits behind this module's seam: `enter` (returns in the process that loads the
//! plugin, with an [`Entered`]), `confine` (before the plugin's first code) and `after_call`.
//! Linux's are above (`linux`: identity, namespaces and mounts; `confine`: capabilities,
//! limits, Landlock, seccomp). macOS's (`macos`) are a two-process sandbox: the worker (in its
//! own session and process group, see `take_handed`) makes a private directory (`0700`, in a
//! safe temporary directory) holding an owner-only copy of the plugin (read from the host's
//! descriptor on fd 5) and the scratch directory (`TMPDIR`), forks the plugin process, watches
//! its host and the plugin process with kqueue (`NOTE_EXIT`: there is no parent-death signal;
//! the host's end kills the whole process group), removes the directory when the plugin
//! process ends and reports its status as on Linux. The plugin process lowers its resource
//! limits and enters a Seatbelt profile generated from the grants ([`seatbelt`]), with the
//! plugin's copy as the one file it may map code from besides the system's. The README's platform table says mechanism
//! by mechanism what holds where.

#[cfg(target_os = "linux")]
mod confine;
pub mod host;
mod limits;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "macos")]
mod macos;
#[cfg(target_os = "linux")]
mod mounts;
mod notes;
#[cfg(target_os = "linux")]
pub mod scratch;
pub mod seatbelt;
mod status;

#[cfg(target_os = "linux")]
pub(crate) use confine::{ThreadCounter, after_call};
#[cfg(target_os = "linux")]
pub(crate) use linux::enter;
#[cfg(target_os = "macos")]
pub(crate) use macos::{ThreadCounter, after_call, confine, enter};
pub(crate) use notes::denial_note;

/// What runs in a sandbox: a plugin (from fd 5) or a program (`exec`, fd 5 its stdout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Runs {
    /// A plugin library, handed over on fd 5.
    Plugin,
    /// A program the worker `exec`s.
    Program,
}

/// What entering the sandbox leaves the process that runs the plugin or program: what is in
/// force so far, and the file to load a plugin from (Linux: the host's sealed memfd,
/// `/proc/self/fd/5`; macOS: the worker's owner-only copy of it).
pub(crate) struct Entered {
    /// What is in force, and what is missing.
    pub(crate) report: rho_protocol::SandboxReport,
    /// The plugin's file (`None` for a program).
    pub(crate) plugin: Option<std::path::PathBuf>,
}

/// How long `after_call` waits for the processes a call left to be gone before it gives the
/// worker up (it is then replaced, and what it started dies with it).
pub(crate) const STRAY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether a call left the plugin process damaged, beyond strays: no descriptor can be opened
/// (it exhausted them), or threads it started still run (`threads`: the count once loaded, the
/// counter that counts them again; plugin code must not run between calls).
pub(crate) fn left_damaged(threads: Option<(usize, &ThreadCounter)>) -> bool {
    use rho_protocol::frames::CHANNEL_FD;
    // SAFETY: fcntl and close on this process's own descriptors.
    unsafe {
        let probe = libc::fcntl(CHANNEL_FD, libc::F_DUPFD_CLOEXEC, 0);
        if probe < 0 {
            return true;
        }
        libc::close(probe);
    }
    threads.is_some_and(|(baseline, counter)| counter.count().is_some_and(|now| now > baseline))
}

/// Confines the plugin process (Linux: capabilities, limits, Landlock, `no_new_privs`, seccomp).
#[cfg(target_os = "linux")]
pub(crate) fn confine(spec: &rho_protocol::frames::SandboxSpec, entered: &mut Entered) {
    confine::confine(spec, &mut entered.report);
}
