//! Confining the plugin process on Linux: its own user namespace, no capabilities, resource
//! limits, Landlock, `no_new_privs`, seccomp; and what runs after each call.

use rho_protocol::frames::{GRANT_FDS, SandboxSpec};
use rho_protocol::grants::SYSTEM_READ;
use rho_protocol::{Grants, SandboxReport, WorkerLimits};

use crate::sandbox::limits::apply_limits;
use crate::sandbox::linux::{DEVICES, close_grants, os_error, write_file};
use crate::sandbox::{STRAY_DEADLINE, left_damaged};

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
    match seccomp(&spec.grants, &spec.limits) {
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
            // Without an address-space limit, a writable shared mapping of /dev/zero would be
            // memory `RLIMIT_DATA` does not count: read-only then.
            let access = if *device == "/dev/zero" && spec.limits.memory_bytes.is_none() {
                AccessFs::ReadFile.into()
            } else {
                file_rw
            };
            if let Ok(fd) = PathFd::new(device) {
                created = created.add_rule(PathBeneath::new(fd, access))?;
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

fn seccomp(grants: &Grants, limits: &WorkerLimits) -> Result<(), String> {
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
    // Without an address-space limit (a long-lived program bounded by `RLIMIT_DATA`), shared
    // anonymous memory is memory that limit does not count: refused.
    if limits.memory_bytes.is_none() {
        let shared_anonymous = (libc::MAP_SHARED | libc::MAP_ANONYMOUS) as u64;
        rules.insert(
            libc::SYS_mmap,
            vec![rule(vec![masked(3, shared_anonymous, shared_anonymous)?])?],
        );
    }
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
    }
    left_damaged(threads)
}
