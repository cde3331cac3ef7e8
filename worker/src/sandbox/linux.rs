//! Entering the sandbox on Linux: the identity switch, the namespaces, the three processes
//! (worker, init, plugin process) and the init's mounts (see the module doc of
//! [`crate::sandbox`]).

use std::ffi::CString;
use std::io;
use std::path::Path;

use rho_protocol::frames::{CANCEL_FD, CHANNEL_FD, GRANT_FDS, PLUGIN_FD, STATUS_FD, SandboxSpec};
use rho_protocol::grants::GrantPath;
use rho_protocol::{SandboxReport, WorkerLimits};

use crate::sandbox::status::{end_as, report_status};
use crate::sandbox::{Entered, Runs, mounts};

/// Device files every plugin may read and write.
pub(super) const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/urandom",
    "/dev/random",
];

pub(super) fn os_error(what: &str) -> String {
    format!("{what}: {}", io::Error::last_os_error())
}

pub(super) fn write_file(path: &str, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("writing {path}: {e}"))
}

/// Enters the sandbox. Returns only in the process that will load the plugin and serve calls;
/// the worker process and the namespace's init stay in here until the plugin process ends, and
/// then end the same way. `Err` is a setup step that must not be skipped (the identity switch).
pub(crate) fn enter(spec: &SandboxSpec, runs: Runs) -> Result<Entered, String> {
    enter_namespaces(spec).map(|report| Entered {
        report,
        plugin: (runs == Runs::Plugin).then(|| format!("/proc/self/fd/{PLUGIN_FD}").into()),
    })
}

fn enter_namespaces(spec: &SandboxSpec) -> Result<SandboxReport, String> {
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
pub(super) fn close_grants(spec: &SandboxSpec) {
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
        if !rho_protocol::grants::needs_mount(grant, &spec.grant_paths) {
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
fn fail_grant(report: &mut SandboxReport, grant: &GrantPath, why: &str) {
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
    let Some(memory) = limits.memory_bytes.or(limits.data_bytes) else {
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
/// host ([`report_status`]), then ends the same way ([`end_as`]).
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
            report_status(i32::from_ne_bytes(bytes));
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
        end_as(status)
    }
}
