//! How a worker ends once the plugin process has: it reports the plugin process's wait status to
//! the host, then ends the same way (every platform).

use rho_protocol::frames::{STATUS_FD, STDERR_END_MARK};

/// Tells the host how the plugin process ended: the [`STDERR_END_MARK`] line on stderr (the
/// plugin's last words are all in once the host reads it), then the wait `status` on
/// [`STATUS_FD`].
pub(super) fn report_status(status: i32) {
    let mark = format!("{STDERR_END_MARK}\n");
    let bytes = status.to_ne_bytes();
    // SAFETY: writes of buffers that outlive the calls to this process's own descriptors.
    unsafe {
        libc::write(2, mark.as_ptr().cast(), mark.len());
        libc::write(STATUS_FD, bytes.as_ptr().cast(), bytes.len());
    }
}

/// Ends this process as the wait `status` says the plugin process ended: killed by the same
/// signal (no core dump), or exited with the same code, so the host reads `killed by signal 11
/// (SIGSEGV)` as it would without a sandbox.
pub(super) fn end_as(status: i32) -> ! {
    // SAFETY: system calls on this process's own state; `sigset_t` is plain data.
    unsafe {
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
