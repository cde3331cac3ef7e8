//! A program run inside the sandbox of isolated plugins: [`SandboxedCommand`] starts it,
//! [`SandboxedChild`] is it running.
//!
//! The program gets the same confinement as a plugin's worker (see ARCHITECTURE.md's threat
//! model and `rho_worker::sandbox`): user, PID, mount, IPC and UTS namespaces (and a network
//! namespace unless the network is granted), a read-only view of the file system, Landlock over
//! the grants, no capabilities, `no_new_privs`, seccomp, resource limits. What differs is what a
//! long-lived program needs: child processes are always granted (the program is started by an
//! `exec` in the sandbox, and `node`, `npx` or `uvx` start more), and nothing kills its processes
//! between its requests. Its whole process tree lives in the sandbox's PID namespace: when the
//! program ends, or the host kills it, or the host dies (each process of the chain has a
//! parent-death signal), the kernel kills every process left in it, `setsid` or not.
//!
//! ```no_run
//! # async fn demo() -> Result<(), rho_runtime::SpawnError> {
//! use rho_runtime::SandboxedCommand;
//! let mut child = SandboxedCommand::new("cat").spawn().await?;
//! println!("in force: {}", child.report());
//! child.kill();
//! let status = child.wait().await;
//! # Ok(()) }
//! ```

use std::ffi::OsString;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use rho_protocol::frames::{FromWorker, STDERR_END_MARK, SandboxSpec, ToWorker, encode};
use rho_protocol::{PROTOCOL_VERSION, SandboxReport, WorkerLimits};
use tokio::net::unix::pipe;
use tokio::process::Child;
use tokio::sync::mpsc;

use crate::isolate::WorkerOptions;
use crate::isolate::channel::{Channel, read_frame_async};
use crate::isolate::spawn::{capped_line, inherited_env, kill_group, spawn_worker, status_pipe};

/// Why a sandboxed program could not be started. Displayed as one line.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// A granted path (or the program's directory or home) cannot be put in force.
    #[error("its grants cannot be put in force: {0}")]
    Grants(String),
    /// The worker process could not be started or talked to.
    #[error("its sandbox could not be started: {0}")]
    Io(#[from] io::Error),
    /// The sandbox or the program refused to start (not found, not executable, not readable in
    /// the sandbox, a sandbox step that must not be skipped).
    #[error("{0}")]
    Refused(String),
    /// The sandbox did not say it was ready within the start bound.
    #[error("its sandbox was not ready within {} ms", .0.as_millis())]
    Timeout(Duration),
}

/// A program to run in the sandbox, and how: a builder, then [`spawn`](Self::spawn).
///
/// Its environment is cleared but for the keys of its grants' `env` (the host's values), the
/// variables set with [`env`](Self::env), `HOME` (see [`home`](Self::home)) and `TMPDIR=/tmp`
/// (the sandbox's private scratch tmpfs). It starts in [`cwd`](Self::cwd), else its home, else
/// `/tmp`.
#[derive(Debug, Clone)]
pub struct SandboxedCommand {
    program: String,
    args: Vec<String>,
    env: Vec<(OsString, OsString)>,
    cwd: Option<PathBuf>,
    home: Option<PathBuf>,
    options: WorkerOptions,
}

impl SandboxedCommand {
    /// `program` (a path, or a name found on the `PATH` its environment passes) with the default
    /// [`WorkerOptions`] but the limits of [`SandboxedCommand::default_limits`].
    pub fn new(program: impl Into<String>) -> SandboxedCommand {
        SandboxedCommand {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            home: None,
            options: WorkerOptions {
                limits: SandboxedCommand::default_limits(),
                ..WorkerOptions::default()
            },
        }
    }

    /// The limits of a long-lived program: no address-space or CPU limit, 4 GiB of writable
    /// memory per process (`RLIMIT_DATA`, see [`WorkerLimits::data_bytes`]), 1024 open files,
    /// 512 processes and threads, files of at most 1 GiB, a 64 MiB scratch tmpfs.
    pub fn default_limits() -> WorkerLimits {
        WorkerLimits {
            memory_bytes: None,
            data_bytes: Some(4 << 30),
            cpu_seconds: None,
            open_files: Some(1024),
            processes: Some(512),
            ..WorkerLimits::default()
        }
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> SandboxedCommand
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable of the program (beside the grants' keys).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> SandboxedCommand {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The directory the program starts in; it is granted to read.
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> SandboxedCommand {
        self.cwd = Some(dir.into());
        self
    }

    /// A directory of the program's own, its `HOME`: granted to write, and handed to the user
    /// the sandbox runs as (`nobody` under a root host) when it is not theirs. Give one no
    /// other user can rename or replace (as under a private temporary directory): its parents
    /// are taken as they are.
    pub fn home(mut self, dir: impl Into<PathBuf>) -> SandboxedCommand {
        self.home = Some(dir.into());
        self
    }

    /// The sandbox's options: grants (child processes are granted whatever they say), limits,
    /// identity, the worker executable, `sandbox = false` (only the limits), the start bound.
    pub fn options(mut self, options: WorkerOptions) -> SandboxedCommand {
        self.options = options;
        self
    }

    /// Starts the program in its sandbox, once the sandbox is in force and the program is
    /// running (its `exec` done).
    pub async fn spawn(&self) -> Result<SandboxedChild, SpawnError> {
        let identity = self
            .options
            .identity
            // SAFETY: geteuid has no preconditions.
            .resolve(unsafe { libc::geteuid() });
        let mut grants = self.options.grants.clone();
        grants.processes = true;
        grants.read.extend(self.cwd.iter().cloned());
        if let Some(home) = &self.home {
            if let Some((uid, gid)) = identity {
                hand_to(home, uid, gid)
                    .map_err(|e| SpawnError::Grants(format!("its home {}: {e}", home.display())))?;
            }
            grants.write.push(home.clone());
        }
        let resolved =
            rho_worker::grants::resolve_for(&grants, identity).map_err(SpawnError::Grants)?;
        let sandbox = SandboxSpec {
            enabled: self.options.sandbox,
            grants: grants.clone(),
            limits: self.options.limits.clone(),
            identity,
            // SAFETY: getpid has no preconditions.
            host_pid: unsafe { libc::getpid() },
            scratch_bytes: self.options.limits.scratch_bytes,
            grant_paths: resolved.paths.clone(),
        };
        let (stdin_read, stdin_write) = io::pipe()?;
        let (stdout_read, stdout_write) = io::pipe()?;
        let (status_read, status_write) = status_pipe()?;
        let mut env = inherited_env(&grants.env);
        env.extend(self.env.iter().cloned());
        env.push(("TMPDIR".into(), "/tmp".into()));
        let home = self.home.as_deref().unwrap_or(Path::new("/tmp"));
        env.push(("HOME".into(), home.into()));
        let (mut child, host_end) = spawn_worker(
            &self.options,
            [
                stdin_read.as_fd(),
                stdout_write.as_fd(),
                status_write.as_fd(),
            ],
            &resolved,
            self.program.as_ref(),
            env,
            Stdio::null(),
        )
        .await?;
        drop((stdin_read, stdout_write, status_write, resolved));
        // The sandboxed child from here on: dropped on an error below, it is killed.
        let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
        let stderr = child.stderr.take();
        let mut sandboxed = SandboxedChild {
            stdin: None,
            stdout: None,
            stderr: None,
            report: SandboxReport::default(),
            child,
            pid,
            status: pipe::Receiver::from_owned_fd(status_read).ok(),
            reported: None,
        };
        let channel = Channel::new(host_end)?;
        let exec = ToWorker::Exec {
            protocol: PROTOCOL_VERSION,
            sandbox,
            program: self.program.clone(),
            args: self.args.clone(),
            cwd: self.cwd.clone().unwrap_or_else(|| home.to_owned()),
        };
        channel.write_all(&[&encode(&exec, &[])]).await?;
        let bound = self.options.start_timeout;
        let mut channel = tokio::io::BufReader::new(channel);
        let started = tokio::time::timeout(bound, async {
            let mut confined = false;
            loop {
                match read_frame_async::<FromWorker>(&mut channel, 1 << 20).await {
                    Ok(frame) => match frame.message {
                        FromWorker::Confined { sandbox, .. } => {
                            sandboxed.report = sandbox;
                            confined = true;
                        }
                        FromWorker::LoadFailed { error } => {
                            return Err(SpawnError::Refused(error));
                        }
                        _ => {
                            return Err(SpawnError::Refused(
                                "its worker sent something else than Confined".into(),
                            ));
                        }
                    },
                    // The channel closes at the `exec`, after `Confined`; before it, the
                    // sandbox's setup died.
                    Err(rho_protocol::frames::FrameError::Closed) if confined => return Ok(()),
                    Err(rho_protocol::frames::FrameError::Closed) => {
                        return Err(SpawnError::Refused(
                            "its sandbox ended before it was in force".into(),
                        ));
                    }
                    Err(e) => return Err(SpawnError::Refused(e.to_string())),
                }
            }
        })
        .await
        .map_err(|_| SpawnError::Timeout(bound))?;
        started?;
        sandboxed.stdin = Some(pipe::Sender::from_owned_fd(stdin_write.into())?);
        sandboxed.stdout = Some(pipe::Receiver::from_owned_fd(stdout_read.into())?);
        sandboxed.stderr = stderr.map(stderr_lines);
        Ok(sandboxed)
    }
}

/// Makes `dir` belong to `uid`:`gid` if it does not already, through a descriptor of the
/// directory opened without following a link in its last component (`O_NOFOLLOW`): what is
/// checked is what is changed.
fn hand_to(dir: &Path, uid: u32, gid: u32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)?;
    let meta = opened.metadata()?;
    if (meta.uid(), meta.gid()) != (uid, gid) {
        // SAFETY: fchown on a descriptor this function owns.
        if unsafe { libc::fchown(opened.as_raw_fd(), uid, gid) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// How many of a program's stderr lines wait for their reader before the program's writes do.
const STDERR_QUEUE: usize = 64;

/// The lines of a sandboxed program's stderr, each cut at 16 KiB, the worker's own end mark left
/// out.
fn stderr_lines(stderr: tokio::process::ChildStderr) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(STDERR_QUEUE);
    tokio::spawn(async move {
        let mut reader = tokio::io::BufReader::new(stderr);
        while let Ok(Some(mut line)) = capped_line(&mut reader).await {
            if line.ends_with(STDERR_END_MARK) {
                line.truncate(line.len() - STDERR_END_MARK.len());
                if line.is_empty() {
                    continue;
                }
            }
            if tx.send(line).await.is_err() {
                return;
            }
        }
    });
    rx
}

/// A program running in its sandbox ([`SandboxedCommand::spawn`]). Dropped, it is killed with
/// every process of its sandbox.
#[derive(Debug)]
pub struct SandboxedChild {
    /// The program's stdin, until taken.
    pub stdin: Option<pipe::Sender>,
    /// The program's stdout, until taken.
    pub stdout: Option<pipe::Receiver>,
    /// The lines the program writes on stderr (each cut at 16 KiB), until taken. Read them: the
    /// program blocks on its stderr once 64 wait.
    pub stderr: Option<mpsc::Receiver<String>>,
    report: SandboxReport,
    child: Child,
    pid: i32,
    status: Option<pipe::Receiver>,
    reported: Option<ExitStatus>,
}

impl SandboxedChild {
    /// What of the sandbox is in force (what the kernel lacked is in its `missing`).
    pub fn report(&self) -> &SandboxReport {
        &self.report
    }

    /// The process id of the sandbox's worker on the host (also its process group's id).
    pub fn id(&self) -> i32 {
        self.pid
    }

    /// Kills the sandbox: the worker, its init and with it every process in the sandbox's PID
    /// namespace (without the sandbox, the program's process group).
    pub fn kill(&self) {
        kill_group(self.pid);
    }

    /// Waits for the program to end: its own wait status, as the sandbox's worker reports it,
    /// else the worker's (which ends as the program did). Cancel-safe: a wait dropped midway
    /// loses nothing.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(pipe) = &mut self.status {
            // The worker writes the 4 bytes at once into an empty pipe: one read takes them.
            let mut raw = [0u8; 4];
            use tokio::io::AsyncReadExt;
            let read = pipe.read(&mut raw).await;
            self.status = None;
            if let Ok(4) = read {
                use std::os::unix::process::ExitStatusExt;
                self.reported = Some(ExitStatus::from_raw(i32::from_ne_bytes(raw)));
            }
        }
        let worker = self.child.wait().await?;
        Ok(self.reported.unwrap_or(worker))
    }
}

impl Drop for SandboxedChild {
    fn drop(&mut self) {
        self.kill();
    }
}
