//! Resource limits of the plugin process, applied after the worker's own setup (every platform).

use rho_protocol::WorkerLimits;

/// Lowers this process's limits to `limits` (core dumps always off). A limit is only ever
/// lowered: raising one past the host's own hard limit needs a privilege the worker does not
/// have (and the host's lower limit is tighter anyway). `Err` names the limit that failed.
pub(super) fn apply_limits(limits: &WorkerLimits) -> Result<(), String> {
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
            return Err(format!(
                "the {name} limit: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(())
    };
    set(libc::RLIMIT_CORE, "core dump", Some(0))?;
    set(libc::RLIMIT_AS, "memory", limits.memory_bytes)?;
    set(libc::RLIMIT_DATA, "writable memory", limits.data_bytes)?;
    set(libc::RLIMIT_CPU, "CPU time", limits.cpu_seconds)?;
    set(libc::RLIMIT_NOFILE, "open files", limits.open_files)?;
    set(libc::RLIMIT_FSIZE, "file size", limits.file_bytes)?;
    // POSIX message queues: kernel memory outside the address space.
    #[cfg(target_os = "linux")]
    set(
        libc::RLIMIT_MSGQUEUE,
        "message queue",
        limits.memory_bytes.or(limits.data_bytes),
    )?;
    set(libc::RLIMIT_NPROC, "processes", limits.processes)
}
