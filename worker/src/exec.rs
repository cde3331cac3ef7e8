//! A worker that runs a program instead of loading a plugin ([`ToWorker::Exec`]): an MCP server,
//! say. It enters and confines itself exactly as for a plugin (see [`crate::sandbox`]), says
//! `Confined` with what is in force, then replaces the plugin process with the program: its stdin
//! and stdout are the pipes the host handed over ([`EXEC_STDIN_FD`], [`EXEC_STDOUT_FD`]), its
//! stderr the worker's. The worker and the sandbox's init stay, as for a plugin, and report the
//! program's wait status; when the program ends, the init ends and the kernel kills every process
//! left in the sandbox's PID namespace, `setsid` or not.
//!
//! What differs from a plugin's worker is only what a long-lived program needs: nothing is
//! killed between calls (there are no calls here), and the host grants it child processes (the
//! `exec` itself needs them).
//!
//! [`ToWorker::Exec`]: rho_protocol::frames::ToWorker::Exec

use std::ffi::CString;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use rho_protocol::PROTOCOL_VERSION;
use rho_protocol::frames::{EXEC_STDIN_FD, EXEC_STDOUT_FD, FromWorker, SandboxSpec, write_frame};

use crate::sandbox;

/// The program of an `Exec` frame.
pub(crate) struct Program {
    pub program: String,
    pub args: Vec<String>,
    pub cwd: PathBuf,
}

/// Enters the sandbox and runs `program` in it; returns only when that failed (the exit status of
/// the process that would have been the program). The worker process and the init stay inside
/// [`sandbox::enter`] and end as the program does.
pub(crate) fn run(stream: &UnixStream, spec: &SandboxSpec, program: &Program) -> u8 {
    let failed = |error: String| {
        let _ = write_frame(&mut &*stream, &FromWorker::LoadFailed { error }, &[]);
        127
    };
    let mut entered = match sandbox::enter(spec, sandbox::Runs::Program) {
        Ok(entered) => entered,
        Err(e) => return failed(format!("setting up the sandbox: {e}")),
    };
    sandbox::confine(spec, &mut entered);
    let confined = FromWorker::Confined {
        protocol: PROTOCOL_VERSION,
        sandbox: entered.report,
    };
    if write_frame(&mut &*stream, &confined, &[]).is_err() {
        return 1;
    }
    let (Ok(name), Ok(args), Ok(cwd)) = (
        CString::new(program.program.as_bytes()),
        std::iter::once(&program.program)
            .chain(&program.args)
            .map(|arg| CString::new(arg.as_bytes()))
            .collect::<Result<Vec<_>, _>>(),
        CString::new(program.cwd.as_os_str().as_encoded_bytes()),
    ) else {
        return failed("the program, an argument or the directory holds a NUL byte".into());
    };
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    // SAFETY: dup2, close and chdir on this process's own descriptors and state; execvp with
    // NUL-terminated strings and a null-terminated argument vector that outlive the call (it
    // returns only when it failed). The channel is close-on-exec: it closes at the exec, which
    // the host reads as the program started.
    unsafe {
        if libc::dup2(EXEC_STDIN_FD, 0) != 0 || libc::dup2(EXEC_STDOUT_FD, 1) != 1 {
            return failed(format!(
                "its standard streams: {}",
                std::io::Error::last_os_error()
            ));
        }
        libc::close(EXEC_STDIN_FD);
        libc::close(EXEC_STDOUT_FD);
        if libc::chdir(cwd.as_ptr()) != 0 {
            return failed(format!(
                "entering {} in the sandbox: {} (grant it to read)",
                program.cwd.display(),
                std::io::Error::last_os_error()
            ));
        }
        libc::execvp(name.as_ptr(), argv.as_ptr());
    }
    let error = std::io::Error::last_os_error();
    let hint = match error.raw_os_error() {
        Some(libc::ENOENT) => " (not found on the PATH it was given)",
        Some(libc::EACCES) => " (the sandbox may not read or execute it: grant its directory)",
        _ => "",
    };
    failed(format!(
        "`{}` could not be run: {error}{hint}",
        program.program
    ))
}
