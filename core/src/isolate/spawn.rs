//! Starting a worker process: stdin is its end of the channel, stdout and stderr are piped to
//! the host's logs, the environment is cleared, and its other descriptors (the cancel channel, the
//! plugin, the status pipe) wait for it on the channel ([`HANDED_OVER`](rho_protocol::frames::HANDED_OVER)). The worker itself moves
//! them to their numbers, closes everything else it inherited, makes its own session and arms its
//! parent-death signal, before it reads a frame (see [`crate::isolate::worker`]). Its first
//! frame tells it the sandbox to enter (see [`crate::isolate::sandbox`]).
//!
//! Nothing of the host's runs in the child before `exec`, so the spawn is a `posix_spawn` (a
//! vfork): a fork would copy the host's page tables and leave every page the host writes next
//! to fault, which grows with the host's memory (a 200 MB host: 9.5 ms per fork+exec of `true`
//! against 1.1 ms spawned; python, this machine).
//!
//! Processes are spawned from one long-lived thread: `PR_SET_PDEATHSIG` fires when the thread
//! that created the child ends, and tokio's blocking threads come and go.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use tokio::io::{AsyncBufRead, AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::isolate::WorkerOptions;
use crate::isolate::channel::Channel;
use rho_protocol::frames::{HANDED_CONTROL_WORDS, STDERR_END_MARK, SandboxSpec, ToWorker, encode};
use rho_worker::grants::ResolvedGrants;

/// A started worker process and the host's ends of its channels.
pub(crate) struct Process {
    pub child: Child,
    /// Its pid, which is also its process group id.
    pub pid: i32,
    /// The channel (the worker's fd 3), read through a buffer: a small frame takes one read.
    pub stream: BufReader<Channel>,
    /// The cancel channel.
    pub cancel: Channel,
    /// The last line the worker wrote on stderr, and the task that reads it (done at EOF).
    pub last_stderr: Arc<Mutex<Option<String>>>,
    pub stderr_reader: Option<tokio::task::JoinHandle<()>>,
    /// Counts the [`STDERR_END_MARK`] lines the stderr reader has read.
    pub stderr_marks: tokio::sync::watch::Receiver<u64>,
    /// Where a sandboxed worker reports its plugin process's wait status ([`STATUS_FD`]).
    pub status: Option<tokio::net::unix::pipe::Receiver>,
}

/// A worker's last stderr line once its stderr is closed, or once the reader has read a
/// [`STDERR_END_MARK`] beyond `marks_before` (waiting up to `wait` for either): after a crash it
/// often says why (`memory allocation of N bytes failed`).
pub(crate) async fn last_words(
    last_stderr: &Mutex<Option<String>>,
    reader: &mut Option<tokio::task::JoinHandle<()>>,
    marks: &mut tokio::sync::watch::Receiver<u64>,
    marks_before: u64,
    wait: std::time::Duration,
) -> Option<String> {
    if let Some(running) = reader.as_mut() {
        let ended = tokio::time::timeout(wait, async {
            tokio::select! {
                _ = running => true,
                _ = marks.wait_for(|&n| n > marks_before) => false,
            }
        })
        .await;
        if ended == Ok(true) {
            *reader = None;
        }
    }
    last_stderr
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
}

type Job = Box<dyn FnOnce() + Send>;

fn spawner() -> &'static Mutex<mpsc::Sender<Job>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        let started = std::thread::Builder::new()
            .name("rho-spawner".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    job();
                }
            });
        if let Err(e) = started {
            tracing::error!(error = %e, "cannot start the worker spawner thread");
        }
        Mutex::new(tx)
    })
}

/// The plugin a worker loads and the sandbox it enters: shared by every worker of one plugin
/// version.
pub(crate) struct Payload {
    /// The sealed memfd holding the plugin's bytes (the worker's fd 5).
    pub plugin: std::sync::Arc<OwnedFd>,
    /// The granted paths' descriptors (the worker's fds from [`GRANT_FDS`] on).
    pub grants: std::sync::Arc<ResolvedGrants>,
    /// The sandbox, as sent in the worker's first frame.
    pub sandbox: SandboxSpec,
}

/// Starts a worker for `payload`; `shown` is the plugin's own path (for messages), `label` names
/// the worker in logs.
pub(crate) async fn start(
    options: &WorkerOptions,
    payload: &Payload,
    shown: &Path,
    label: &str,
) -> io::Result<Process> {
    let (host_cancel, worker_cancel) = StdUnixStream::pair()?;
    let (status_read, status_write) = status_pipe()?;
    let mut env = inherited_env(&options.grants.env);
    // Inside the sandbox /tmp is the worker's own tmpfs.
    env.push(("TMPDIR".into(), "/tmp".into()));
    env.push(("HOME".into(), "/tmp".into()));
    let handed = [
        worker_cancel.as_fd(),
        payload.plugin.as_fd(),
        status_write.as_fd(),
    ];
    let (mut child, host_end) = spawn_worker(
        options,
        handed,
        &payload.grants,
        shown.as_os_str(),
        env,
        Stdio::piped(),
    )
    .await?;
    drop((worker_cancel, status_write));
    let pid = child.id().map(|p| p as i32).unwrap_or(0);
    let last_stderr = Arc::new(Mutex::new(None));
    let (marks, stderr_marks) = tokio::sync::watch::channel(0);
    let stderr_reader = forward_output(&mut child, label, pid, &last_stderr, marks);
    let stream = Channel::new(host_end)?;
    let first = encode(
        &ToWorker::Start {
            protocol: rho_protocol::PROTOCOL_VERSION,
            sandbox: payload.sandbox.clone(),
        },
        &[],
    );
    stream.write_all(&[&first]).await?;
    let stream = BufReader::new(stream);
    let cancel = Channel::new(host_cancel)?;
    Ok(Process {
        child,
        pid,
        stream,
        cancel,
        last_stderr,
        stderr_reader,
        stderr_marks,
        status: tokio::net::unix::pipe::Receiver::from_owned_fd(status_read).ok(),
    })
}

/// The host's values of the environment `keys` that are set (every other variable is cleared).
pub(crate) fn inherited_env(keys: &[String]) -> Vec<(OsString, OsString)> {
    keys.iter()
        .filter_map(|key| Some((key.into(), std::env::var_os(key)?)))
        .collect()
}

/// Starts a worker process from the spawner thread: the worker's end of a new channel on its
/// stdin, carrying `handed` (in [`HANDED_OVER`](rho_protocol::frames::HANDED_OVER) order) and
/// the grants' descriptors; `env` its whole environment; stderr piped. Returns it and the host's
/// end of the channel, on which nothing has been sent yet but the descriptors.
pub(crate) async fn spawn_worker(
    options: &WorkerOptions,
    handed: [BorrowedFd<'_>; 3],
    grants: &ResolvedGrants,
    shown: &OsStr,
    env: Vec<(OsString, OsString)>,
    stdout: Stdio,
) -> io::Result<(Child, StdUnixStream)> {
    let (host_end, worker_end) = StdUnixStream::pair()?;
    // The worker's other descriptors wait for it on its channel, ahead of any frame: it takes
    // them before it reads anything else (see `HANDED_OVER`).
    let handed: Vec<BorrowedFd<'_>> = handed
        .into_iter()
        .chain(grants.fds.iter().map(|fd| fd.as_fd()))
        .collect();
    hand_over(&host_end, &handed)?;
    // Nothing runs between fork and exec (no `pre_exec`), so std spawns with `posix_spawn`, a
    // vfork: the host's memory is not copied on write, and a large host starts workers as fast
    // as a small one. The worker makes its own session and arms its parent-death signal.
    let mut cmd = Command::new(options.worker_executable());
    cmd.arg(rho_worker::WORKER_ARG)
        .arg(rho_protocol::PROTOCOL_VERSION.to_string())
        .arg(shown)
        .env_clear()
        .envs(env)
        .stdin(Stdio::from(OwnedFd::from(worker_end)))
        .stdout(stdout)
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let handle = tokio::runtime::Handle::current();
    let job: Job = Box::new(move || {
        let _runtime = handle.enter();
        let spawned = cmd.spawn();
        // The host's copy of the worker's end of the channel.
        drop(cmd);
        let _ = tx.send(spawned);
    });
    spawner()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .send(job)
        .map_err(|_| io::Error::other("the worker spawner thread is gone"))?;
    let child = rx
        .await
        .map_err(|_| io::Error::other("the worker spawner thread dropped the request"))??;
    Ok((child, host_end))
}

/// A pipe for [`STATUS_FD`]: the host's reading end (non-blocking, for the runtime) and the end
/// the worker gets.
pub(crate) fn status_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe(2) writes two descriptors into `fds`, owned below; fcntl on them.
    unsafe {
        #[cfg(target_os = "linux")]
        let made = libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK);
        // macOS has no pipe2: close-on-exec right after (a program another thread starts in
        // between could inherit them).
        #[cfg(not(target_os = "linux"))]
        let made = libc::pipe(fds.as_mut_ptr());
        if made != 0 {
            return Err(io::Error::last_os_error());
        }
        let (read, write) = (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]));
        #[cfg(not(target_os = "linux"))]
        for fd in fds {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
        let flags = libc::fcntl(read.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(read.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
        // The worker's end blocks as pipes do (the worker writes 4 bytes into an empty pipe).
        let flags = libc::fcntl(write.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(write.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
        Ok((read, write))
    }
}

/// Sends `fds` on `channel` (one byte carrying them, `SCM_RIGHTS`), in [`HANDED_OVER`](rho_protocol::frames::HANDED_OVER) order
/// and then the grants'. The socket is new and empty: the send does not block.
fn hand_over(channel: &StdUnixStream, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let raw: Vec<i32> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
    let mut control = [0u64; HANDED_CONTROL_WORDS];
    let mut byte = [0u8];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: byte.len(),
    };
    // SAFETY: the message points at `iov` and `control`, which outlive the call; the header and
    // the descriptors are written inside `control` (its size checked against CMSG_SPACE).
    unsafe {
        let data_len = std::mem::size_of_val(raw.as_slice()) as u32;
        let space = libc::CMSG_SPACE(data_len) as usize;
        if space > std::mem::size_of_val(&control) {
            return Err(io::Error::other("descriptor message too large"));
        }
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = &mut iov;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = space as _;
        let header = libc::CMSG_FIRSTHDR(&message);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(data_len) as _;
        std::ptr::copy_nonoverlapping(
            raw.as_ptr().cast::<u8>(),
            libc::CMSG_DATA(header),
            data_len as usize,
        );
        if libc::sendmsg(channel.as_raw_fd(), &message, libc::MSG_NOSIGNAL) != 1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Sends the worker's stdout and stderr (the plugin's prints) to the host's logs, line by line,
/// keeping the last stderr line; returns the stderr reader.
fn forward_output(
    child: &mut Child,
    label: &str,
    pid: i32,
    last_stderr: &Arc<Mutex<Option<String>>>,
    marks: tokio::sync::watch::Sender<u64>,
) -> Option<tokio::task::JoinHandle<()>> {
    if let Some(out) = child.stdout.take() {
        let label = label.to_owned();
        tokio::spawn(async move {
            let mut out = BufReader::new(out);
            while let Ok(Some(line)) = capped_line(&mut out).await {
                tracing::info!(target: "rho::plugin", plugin = %label, pid, stream = "stdout", "{line}");
            }
        });
    }
    let err = child.stderr.take()?;
    let label = label.to_owned();
    let last = last_stderr.clone();
    Some(tokio::spawn(async move {
        let mut err = BufReader::new(err);
        while let Ok(Some(mut line)) = capped_line(&mut err).await {
            // The worker's mark (after a last line the plugin left unfinished, if any) is counted,
            // not logged.
            let marked = line.ends_with(STDERR_END_MARK);
            if marked {
                line.truncate(line.len() - STDERR_END_MARK.len());
            }
            if !(marked && line.is_empty()) {
                tracing::info!(target: "rho::plugin", plugin = %label, pid, stream = "stderr", "{line}");
                if says_why(&line) {
                    *last.lock().unwrap_or_else(PoisonError::into_inner) = Some(line);
                }
            }
            if marked {
                marks.send_modify(|n| *n += 1);
            }
        }
    }))
}

/// The longest line of a plugin's output kept for the logs; the rest of a longer line is skipped,
/// so a plugin that prints without newlines cannot grow the host's memory.
const MAX_LINE: usize = 16 << 10;

/// The next line of `reader` (lossy UTF-8), cut at [`MAX_LINE`] bytes with a `...` marker;
/// `None` at the end.
pub(crate) async fn capped_line(
    reader: &mut (impl AsyncBufRead + Unpin),
) -> io::Result<Option<String>> {
    let mut line = Vec::new();
    let mut cut = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            if line.is_empty() && !cut {
                return Ok(None);
            }
            break;
        }
        let (part, used, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], i + 1, true),
            None => (buf, buf.len(), false),
        };
        let room = MAX_LINE - line.len();
        cut |= part.len() > room;
        line.extend_from_slice(&part[..part.len().min(room)]);
        reader.consume(used);
        if done {
            break;
        }
    }
    let mut text = String::from_utf8_lossy(&line).into_owned();
    if cut {
        text.push_str("...");
    }
    Ok(Some(text))
}

/// Whether a stderr line may say why a worker died: not blank, not a backtrace frame, not std's
/// `note:` hints about backtraces.
fn says_why(line: &str) -> bool {
    !line.trim().is_empty()
        && !line.starts_with(char::is_whitespace)
        && !line.starts_with("note:")
        && !line.starts_with("stack backtrace:")
}

/// Kills a worker's whole process group (the plugin may have started children).
pub(crate) fn kill_group(pid: i32) {
    if pid > 0 {
        // SAFETY: kill has no memory effects; a stale group id fails with ESRCH.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn long_lines_are_cut_and_the_next_line_is_whole() {
        let mut input = vec![b'x'; MAX_LINE * 3];
        input.extend_from_slice(b"\nnext\nlast");
        let mut reader = BufReader::with_capacity(1000, &input[..]);
        let first = capped_line(&mut reader).await.unwrap().unwrap();
        assert_eq!(first.len(), MAX_LINE + 3);
        assert!(first.ends_with("..."));
        assert_eq!(capped_line(&mut reader).await.unwrap().unwrap(), "next");
        assert_eq!(capped_line(&mut reader).await.unwrap().unwrap(), "last");
        assert_eq!(capped_line(&mut reader).await.unwrap(), None);
    }
}
