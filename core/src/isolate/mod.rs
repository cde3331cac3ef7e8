//! Process isolation: plugins the host does not trust run in worker processes (`rho-worker`), one
//! call at a time per worker, killed on timeout, their crashes survived, each in a sandbox
//! (`rho_worker::sandbox`) set up before the plugin's first instruction runs.
//!
//! The host talks to each worker over private sockets (the worker's fds 3 and 4, see `rho_protocol::frames`); the
//! plugin's own stdout and stderr go to the host's logs (`tracing`, target `rho::plugin`). Each
//! plugin version has a [`pool`] of workers with warm spares; a reload starts a new pool and
//! retires the old one, whose busy workers finish their call and exit.

pub(crate) mod channel;
pub(crate) mod command;
pub(crate) mod invoke;
pub(crate) mod pool;
pub(crate) mod spawn;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use rho_protocol::{Grants, Identity, WorkerLimits};

/// How isolated plugins run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerOptions {
    /// The worker executable; default: `$RHO_WORKER`, else the host's own executable when it
    /// called [`rho_worker::run_if_worker`] first thing in `main` (one binary for host and
    /// workers), else `rho-worker` beside the host's executable (or one directory up, for test
    /// binaries in `target/*/deps`), else the first `rho-worker` on `PATH`
    /// (`cargo install --path cli` puts one there).
    pub executable: Option<PathBuf>,
    /// Idle workers kept started ahead of calls, per plugin version.
    pub spares: usize,
    /// Worker processes per plugin version at most (busy, idle and starting); a call that finds
    /// none free waits for one, within its timeout.
    pub max_workers: usize,
    /// An idle worker beyond the spares is stopped after this long.
    #[serde(with = "crate::millis", rename = "idle_timeout_ms")]
    pub idle_timeout: Duration,
    /// After a timeout, how long a worker gets to stop on the cancel message before SIGKILL.
    #[serde(with = "crate::millis", rename = "cancel_grace_ms")]
    pub cancel_grace: Duration,
    /// How long a new worker may take to load its plugin.
    #[serde(with = "crate::millis", rename = "start_timeout_ms")]
    pub start_timeout: Duration,
    /// The largest frame accepted from a worker, bytes.
    pub max_frame: usize,
    /// Resource limits per worker, applied inside the sandbox after the worker's own setup.
    pub limits: WorkerLimits,
    /// What the plugins may do beyond the sandbox's defaults (files, network, processes,
    /// environment keys).
    pub grants: Grants,
    /// Who the plugins run as.
    pub identity: Identity,
    /// The sandbox (see [`Grants`] and ARCHITECTURE.md's threat model); `false` leaves plugins the worker's own rights (only the
    /// resource limits apply): for measuring its cost, never for untrusted plugins.
    pub sandbox: bool,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            executable: None,
            spares: 1,
            max_workers: 16,
            idle_timeout: Duration::from_secs(60),
            cancel_grace: Duration::from_millis(100),
            start_timeout: Duration::from_secs(10),
            max_frame: rho_protocol::frames::DEFAULT_MAX_FRAME,
            limits: WorkerLimits::default(),
            grants: Grants::default(),
            identity: Identity::default(),
            sandbox: true,
        }
    }
}

impl WorkerOptions {
    /// The worker executable these options name, or the default one.
    pub fn worker_executable(&self) -> PathBuf {
        if let Some(exe) = &self.executable {
            return exe.clone();
        }
        if let Some(exe) = std::env::var_os("RHO_WORKER") {
            return PathBuf::from(exe);
        }
        if rho_worker::self_worker()
            && let Ok(exe) = std::env::current_exe()
        {
            return exe;
        }
        let name = format!("rho-worker{}", std::env::consts::EXE_SUFFIX);
        let here = std::env::current_exe().ok();
        let beside: Vec<PathBuf> = here
            .iter()
            .flat_map(|exe| exe.ancestors().skip(1).take(2))
            .map(|d| d.join(&name))
            .collect();
        let on_path = std::env::var_os("PATH")
            .map(|path| {
                std::env::split_paths(&path)
                    .filter(|d| d.is_absolute())
                    .map(|d| d.join(&name))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        beside
            .iter()
            .chain(&on_path)
            .find(|p| p.is_file())
            .or(beside.first())
            .cloned()
            .unwrap_or_else(|| PathBuf::from(name))
    }
}

/// Words for how a worker process ended: `killed by signal 11 (SIGSEGV)`, `exited with status 0`.
pub fn exit_text(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(signal) = status.signal() {
        let name = match signal {
            libc::SIGSEGV => "SIGSEGV",
            libc::SIGABRT => "SIGABRT",
            libc::SIGKILL => "SIGKILL",
            libc::SIGBUS => "SIGBUS",
            libc::SIGILL => "SIGILL",
            libc::SIGFPE => "SIGFPE",
            libc::SIGTERM => "SIGTERM",
            libc::SIGXCPU => "SIGXCPU: CPU time limit",
            libc::SIGPIPE => "SIGPIPE",
            _ => "",
        };
        if name.is_empty() {
            format!("killed by signal {signal}")
        } else {
            format!("killed by signal {signal} ({name})")
        }
    } else {
        format!("exited with status {}", status.code().unwrap_or(-1))
    }
}
