//! [`McpSource`]: one MCP server over stdio as a supervised tool source.
//!
//! The source starts the server in the sandbox of isolated plugins
//! ([`SandboxedCommand`]: its whole process tree in a PID namespace of its own, a cleared
//! environment but for the keys its grants list, `HOME` its own `/tmp`, an in-memory file system
//! of [`McpServer::home_mb`], its stderr kept, bounded), initializes it within
//! [`McpServer::start_timeout_ms`], lists its tools and offers them to the host's registry. It then
//! watches the process: an exit (or a broken connection) takes the server down, its calls in
//! flight end `crashed` naming the server and how it ended, and calls made while it is down end
//! at once `unavailable`, saying when it comes back; it is restarted after a backoff that doubles
//! from 0.5 s to 30 s and starts over only once a server has stayed up for a minute. Its tools
//! stay listed while it is down (their calls fail fast), and its `tools/list_changed` makes the
//! source list them again.
//!
//! A call whose timeout passed (or that was cancelled) sends the server `notifications/cancelled`
//! (the call's request future is dropped); a second later the source pings the server with a
//! 5 s deadline: a server that does not answer is hung, and is killed and restarted, its other
//! calls ending `crashed` with a text naming the tool it was stuck in. A server busy with a long
//! call that still answers pings is not declared hung (a server whose tools block its only
//! thread answers none). The tool it was stuck in is the one of the oldest call in flight (a
//! stuck server takes its calls in order); the other calls in flight are charged to it
//! ([`Failure::crashed_by`]), not to their own tools.
//!
//! With [`McpServer::stateless`] each call starts a server process of its own (`call`),
//! ended with the call: a crash or a hang touches that call alone, and needs no restart. The
//! process the source keeps lists the tools.

mod call;
mod config;
mod connect;
mod handler;
mod shared;
mod stdout;

pub use config::{McpServer, ToolOverride};

use std::future::Future;
use std::os::unix::fs::DirBuilderExt;
use std::pin::Pin;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use rho_runtime::{
    Failure, RemoteSource, RemoteToolEntry, SandboxedChild, SandboxedCommand, SourceState,
    ToolSource, WorkerOptions,
};
use rmcp::model::{ClientRequest, PingRequest};
use rmcp::service::RunningService;
use rmcp::{Peer, RoleClient, ServiceExt};
use tokio::sync::{mpsc, oneshot, watch};

use crate::convert;
use handler::Handler;
use shared::{CallProcess, Down, GivenUp, PerCall, Process, Shared};
use stdout::Notice;

/// The first wait before a restart; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The longest wait before a restart.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long a server must stay up for the backoff to start over.
const SUSTAINED: Duration = Duration::from_secs(60);
/// How long after a call was given up the server is pinged, and how long it has to answer.
const PING_AFTER: Duration = Duration::from_secs(1);
const PING_DEADLINE: Duration = Duration::from_secs(5);
/// How often a remote (HTTP) server is pinged while it serves.
const HEALTH_EVERY: Duration = Duration::from_secs(5);
/// How long a server that closed its connection gets to exit on its own before it is killed.
const EXIT_GRACE: Duration = Duration::from_millis(500);
/// How many of the server's last stderr lines are kept, and how long each may be.
const STDERR_LINES: usize = 64;
const STDERR_LINE_BYTES: usize = 1024;

/// An MCP server as a tool source of a host: `HostBuilder::source(name, McpSource::new(server))`.
pub struct McpSource {
    server: McpServer,
    workers: WorkerOptions,
}

impl McpSource {
    /// The source of `server`, its sandbox started by the default worker executable.
    pub fn new(server: McpServer) -> McpSource {
        McpSource {
            server,
            workers: WorkerOptions::default(),
        }
    }

    /// The host's worker options the server's sandbox takes its worker executable and identity
    /// from (its grants, limits and start bound are the server entry's).
    pub fn workers(mut self, workers: WorkerOptions) -> McpSource {
        self.workers = workers;
        self
    }
}

impl ToolSource for McpSource {
    fn run(self: Box<Self>, source: RemoteSource) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(supervise(self.server, self.workers, source))
    }
}

/// Starts, watches and restarts `server`, offering its tools through `source`, until the host
/// drops this future.
async fn supervise(server: McpServer, workers: WorkerOptions, source: RemoteSource) {
    let (abandoned, mut given_up) = mpsc::unbounded_channel();
    // In the sandbox, the server's HOME is its own /tmp, a bounded tmpfs (`home_mb`). Without
    // it, a private directory of the host's, kept across its restarts and removed with the
    // source; homes of hosts that died without removing theirs go first.
    let home = match (server.sandbox, server.url.is_some()) {
        (false, false) => match PrivateHome::new(&server.name) {
            Ok(home) => Some(home),
            Err(e) => {
                let why = format!("mcp server `{}`: no private home for it: {e}", server.name);
                tracing::error!(server = %server.name, "{why}");
                source.set_state("mcp", SourceState::Down, None, why);
                return;
            }
        },
        _ => None,
    };
    let home_path = home.as_ref().map(|home| home.path().to_owned());
    let per_call = server.stateless.then(|| -> Arc<dyn PerCall> {
        Arc::new(ProcessPerCall {
            server: server.clone(),
            workers: workers.clone(),
            home: home_path.clone(),
        })
    });
    let shared = Shared::new(&server.name, abandoned, per_call, server.url.is_some());
    let kind = if server.url.is_some() {
        "mcp http"
    } else {
        "mcp stdio"
    };
    let mut backoff = FIRST_BACKOFF;
    loop {
        let started = Instant::now();
        source.set_state(kind, SourceState::Starting, None, "");
        let link = match &server.url {
            Some(url) => connect::connect(&server, url, &shared)
                .await
                .map(|running| (running, None, watch::channel(None).0)),
            None => start(&server, &workers, home_path.as_deref(), &shared)
                .await
                .map(|(running, child, exited)| (running, Some(child), exited)),
        };
        let why = match link {
            Ok((running, mut child, exited)) => {
                if let Some(child) = &child {
                    say_sandbox(&server, child, &source);
                }
                let peer = running.peer().clone();
                let process = Arc::new(Process {
                    peer: peer.clone(),
                    ended: exited.subscribe(),
                });
                // Up before its tools are offered: a caller that saw them can call them.
                shared.set_up(Ok(process));
                // Calls given up on an earlier process are not this one's to check.
                while given_up.try_recv().is_ok() {}
                let why = match offer(&peer, &shared, &source, &server).await {
                    Err(why) => Down::because(why),
                    Ok(()) => {
                        source.set_state(kind, SourceState::Serving, None, "");
                        serve(
                            &running,
                            &mut child,
                            &shared,
                            &source,
                            &server,
                            &mut given_up,
                        )
                        .await
                    }
                };
                // Down first: calls from now on fail fast; then the sandbox goes.
                shared.set_up(Err(why.why.clone()));
                if let Some(child) = &mut child {
                    child.kill();
                    let _ = child.wait().await;
                }
                let said = why.why.clone();
                let _ = exited.send(Some(Down {
                    why: format!("{said}{}", shared.last_words()),
                    hung: why.hung,
                }));
                drop(running);
                said
            }
            Err(why) => why,
        };
        if started.elapsed() >= SUSTAINED {
            backoff = FIRST_BACKOFF;
        }
        let down = format!("mcp server `{}` is down ({why})", server.name);
        tracing::warn!(server = %server.name, "{down}; restarting in {} ms", backoff.as_millis());
        source.set_state(kind, SourceState::Restarting, Some(backoff), &down);
        shared.set_up(Err(format!(
            "{down}; restarting in {} ms",
            backoff.as_millis()
        )));
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// The start of a private home's name: `rho-mcp-<host pid>-<server>-<random>`, beside its lock
/// file (the same name and `.lock`), which the source holds locked (`flock`) while it runs.
const HOME_PREFIX: &str = "rho-mcp-";

/// A server's private home and its lock, in the secure temporary directory; both removed when
/// dropped. The lock file is made and locked before the home: a home without a held lock is
/// never one in the making.
struct PrivateHome {
    dir: std::path::PathBuf,
    lock: std::path::PathBuf,
    /// Holds the `flock` for as long as the home is in use.
    _held: std::fs::File,
}

impl PrivateHome {
    fn new(server: &str) -> std::io::Result<PrivateHome> {
        let temp = rho_runtime::secure_temp_dir()?;
        sweep_stale_homes(&temp);
        let (held, lock) = tempfile::Builder::new()
            .prefix(&format!("{HOME_PREFIX}{}-{server}-", std::process::id()))
            .suffix(".lock")
            .tempfile_in(&temp)?
            .keep()
            .map_err(|e| e.error)?;
        if !try_lock(&held) {
            return Err(std::io::Error::other("its lock is held by another process"));
        }
        let dir = home_of(&lock);
        let made = std::fs::DirBuilder::new().mode(0o700).create(&dir);
        if let Err(e) = made {
            let _ = std::fs::remove_file(&lock);
            return Err(e);
        }
        Ok(PrivateHome {
            dir,
            lock,
            _held: held,
        })
    }

    fn path(&self) -> &std::path::Path {
        &self.dir
    }
}

impl Drop for PrivateHome {
    /// The home, then its lock file; the lock itself is let go last.
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!(home = %self.dir.display(), "removing a server's home: {e}");
        }
        let _ = std::fs::remove_file(&self.lock);
    }
}

/// The home a lock file (`NAME.lock`) stands for (`NAME`).
fn home_of(lock: &std::path::Path) -> std::path::PathBuf {
    lock.with_extension("")
}

/// Takes the exclusive `flock` of `file` without waiting; whether it was free.
fn try_lock(file: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor the caller owns.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Removes the private homes in `dir` no source holds any more: their lock file's `flock` is
/// free (its host died, or ended before its sources were dropped: any PID namespace sharing
/// `dir`), or they have no lock file at all.
fn sweep_stale_homes(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !name.starts_with(HOME_PREFIX) || !name.ends_with(".lock") {
            continue;
        }
        let Ok(file) = std::fs::OpenOptions::new().read(true).open(&path) else {
            continue;
        };
        if !try_lock(&file) {
            continue;
        }
        let home = home_of(&path);
        if std::fs::symlink_metadata(&home).is_ok_and(|m| m.is_dir()) {
            match std::fs::remove_dir_all(&home) {
                Ok(()) => tracing::debug!(home = %home.display(), "removed a stale server home"),
                Err(e) => tracing::warn!(home = %home.display(), "a stale server home: {e}"),
            }
        }
        let _ = std::fs::remove_file(&path);
    }
}

/// Starts the server and initializes it within the entry's bound: the running client, the
/// process, and where to say how it ended.
async fn start(
    server: &McpServer,
    workers: &WorkerOptions,
    home: Option<&std::path::Path>,
    shared: &Arc<Shared>,
) -> Result<
    (
        RunningService<RoleClient, Handler>,
        SandboxedChild,
        watch::Sender<Option<Down>>,
    ),
    String,
> {
    let mut command = SandboxedCommand::new(&server.command)
        .args(server.args.iter().cloned())
        .options(server.sandbox_options(workers));
    if let Some(home) = home {
        command = command.home(home);
    }
    if let Some(cwd) = &server.cwd {
        command = command.cwd(cwd);
    }
    let mut child = command
        .spawn()
        .await
        .map_err(|e| format!("`{}` could not be started: {e}", server.command))?;
    let (Some(stdout), Some(stdin), Some(stderr)) =
        (child.stdout.take(), child.stdin.take(), child.stderr.take())
    else {
        return Err("its standard streams could not be opened".into());
    };
    keep_stderr(stderr, shared.clone());
    *shared.broke.lock().unwrap_or_else(PoisonError::into_inner) = None;
    let notices = shared.clone();
    let stdout = stdout::checked(stdout, shared.broke.clone(), move |notice| match notice {
        Notice::Progress(params) => notices.progress(&params),
        Notice::Log(level, text) => notices.log(level, &text),
    });
    let handler = Handler {
        shared: shared.clone(),
    };
    let (exited, _) = watch::channel(None);
    let serving = tokio::time::timeout(server.start_timeout(), handler.serve((stdout, stdin)));
    match serving.await {
        Ok(Ok(running)) => Ok((running, child, exited)),
        Ok(Err(e)) => {
            // A server that closed its side is ending: its own status says how, if it comes soon.
            let status = match tokio::time::timeout(EXIT_GRACE, child.wait()).await {
                Ok(status) => status,
                Err(_) => {
                    child.kill();
                    child.wait().await
                }
            };
            let status = status.map(|s| s.to_string()).unwrap_or_default();
            Err(format!(
                "it did not initialize ({e}; {status}){}",
                shared.last_words()
            ))
        }
        Err(_) => {
            child.kill();
            Err(format!(
                "it did not initialize within {} ms",
                server.start_timeout_ms
            ))
        }
    }
}

/// Logs what of the server's sandbox is in force, and warns (an event) of what is missing.
fn say_sandbox(server: &McpServer, child: &SandboxedChild, source: &RemoteSource) {
    let report = child.report();
    tracing::info!(server = %server.name, "sandbox: {report}");
    if server.sandbox && !report.missing.is_empty() {
        source.bus().publish(
            None,
            rho_runtime::EventKind::Warning {
                subject: format!("mcp:{}", server.name),
                message: format!(
                    "mcp server `{}` runs with part of its sandbox missing: {}",
                    server.name,
                    report.missing.join("; ")
                ),
            },
        );
    }
}

/// Reads the server's stderr into the last [`STDERR_LINES`] lines, each cut at
/// [`STDERR_LINE_BYTES`]; a flood costs that much and no more.
fn keep_stderr(mut stderr: mpsc::Receiver<String>, shared: Arc<Shared>) {
    tokio::spawn(async move {
        while let Some(mut line) = stderr.recv().await {
            if line.len() > STDERR_LINE_BYTES {
                let mut cut = STDERR_LINE_BYTES;
                while !line.is_char_boundary(cut) {
                    cut -= 1;
                }
                line.truncate(cut);
            }
            tracing::debug!(server = %shared.name, "stderr: {line}");
            let mut kept = shared.stderr.lock().unwrap_or_else(PoisonError::into_inner);
            if kept.len() == STDERR_LINES {
                kept.pop_front();
            }
            kept.push_back(line);
        }
    });
}

/// Lists the server's tools and offers them.
async fn offer(
    peer: &Peer<RoleClient>,
    shared: &Arc<Shared>,
    source: &RemoteSource,
    server: &McpServer,
) -> Result<(), String> {
    // Bounded as its start is: a server that never answers (or pages its list without end)
    // must not hold the supervisor, which watches its exit and its hangs.
    let listed = tokio::time::timeout(server.start_timeout(), peer.list_all_tools()).await;
    let tools = match listed {
        Ok(Ok(tools)) => tools,
        Ok(Err(e)) => {
            tracing::warn!(server = %server.name, "listing its tools failed: {e}");
            return Ok(());
        }
        Err(_) => {
            return Err(format!(
                "hung: it did not list its tools within {} ms; killed and restarted",
                server.start_timeout_ms
            ));
        }
    };
    let entries = tools
        .iter()
        .map(|tool| RemoteToolEntry {
            spec: convert::tool_spec(&server.name, tool, server.tools.get(tool.name.as_ref())),
            origin: format!("mcp:{}", server.name),
            tool: Arc::new(call::McpTool {
                shared: shared.clone(),
                name: tool.name.to_string(),
            }),
        })
        .collect();
    for refused in source.set_tools(entries) {
        tracing::warn!(server = %server.name, "{refused}");
        source.bus().publish(
            None,
            rho_runtime::EventKind::Warning {
                subject: format!("mcp:{}", server.name),
                message: refused,
            },
        );
    }
    Ok(())
}

/// Serves until the server goes: its exit, its connection closing, or a hang found after a
/// call was given up. Returns why.
async fn serve(
    running: &RunningService<RoleClient, Handler>,
    child: &mut Option<SandboxedChild>,
    shared: &Arc<Shared>,
    source: &RemoteSource,
    server: &McpServer,
    given_up: &mut mpsc::UnboundedReceiver<GivenUp>,
) -> Down {
    let peer = running.peer().clone();
    let mut health = tokio::time::interval(HEALTH_EVERY);
    health.tick().await;
    loop {
        tokio::select! {
            status = wait_for(child) => {
                // A server whose stdout broke the protocol exits once its input is closed: the
                // broken line is why it went.
                return Down::because(exit_why(shared, status));
            }
            () = closed(&peer) => {
                let broke = shared.broke.lock().unwrap_or_else(PoisonError::into_inner).take();
                return Down::because(broke.unwrap_or_else(|| "closed its connection".into()));
            }
            () = shared.relist.notified() => {
                if let Err(why) = offer(&peer, shared, source, server).await {
                    return Down::because(why);
                }
            }
            _ = health.tick(), if shared.remote => {
                if !answers_ping(&peer).await {
                    return Down::because(unreachable());
                }
            }
            Some(given_up) = given_up.recv() => {
                // A call given up (or, for a remote server, failed to reach it): is the server
                // still there? A local one gets a moment to take the cancellation first.
                if !shared.remote {
                    tokio::time::sleep(PING_AFTER).await;
                }
                if answers_ping(&peer).await {
                    continue;
                }
                if shared.remote {
                    return Down::because(unreachable());
                }
                // A server stuck in a call serves its calls in order: the oldest call in flight
                // (the one given up, or one sent before it) is the one it is stuck in.
                let culprit = match shared.oldest() {
                    Some((tool, since)) if since < given_up.since => tool,
                    _ => given_up.tool,
                };
                return Down {
                    why: format!(
                        "hung: stuck in a call of tool `{culprit}` (a call was given up and the \
                         server did not answer a ping within {} ms); killed and restarted",
                        PING_DEADLINE.as_millis()
                    ),
                    hung: Some(culprit),
                };
            }
        }
    }
}

/// Whether the server answers a ping within [`PING_DEADLINE`].
async fn answers_ping(peer: &Peer<RoleClient>) -> bool {
    let ping = ClientRequest::PingRequest(PingRequest {
        method: Default::default(),
        extensions: Default::default(),
    });
    let answered = tokio::time::timeout(PING_DEADLINE, peer.send_request(ping)).await;
    matches!(answered, Ok(Ok(_)))
}

/// Why a remote server is down.
fn unreachable() -> String {
    format!(
        "unreachable: it did not answer a ping within {} ms; reconnecting",
        PING_DEADLINE.as_millis()
    )
}

/// The exit of `child`, if there is one (never, for a remote server).
async fn wait_for(child: &mut Option<SandboxedChild>) -> std::io::Result<std::process::ExitStatus> {
    match child {
        Some(child) => child.wait().await,
        None => std::future::pending().await,
    }
}

/// Why a server process that exited went: the protocol it broke on its stdout, else its status.
/// A server whose stdout broke the protocol exits once its input is closed: the broken line is
/// why it went.
fn exit_why(shared: &Shared, status: std::io::Result<std::process::ExitStatus>) -> String {
    if let Some(broke) = shared.take_broke() {
        return broke;
    }
    match status {
        Ok(status) => format!("exited ({status})"),
        Err(e) => format!("could not be waited for: {e}"),
    }
}

/// `stateless = true`: what a call needs to start a server process of its own.
struct ProcessPerCall {
    server: McpServer,
    workers: WorkerOptions,
    home: Option<std::path::PathBuf>,
}

impl PerCall for ProcessPerCall {
    fn start<'a>(
        &'a self,
        source: &'a Shared,
    ) -> Pin<Box<dyn Future<Output = Result<CallProcess, Failure>> + Send + 'a>> {
        Box::pin(self.start_one(source))
    }
}

impl ProcessPerCall {
    /// Starts and initializes a server process for one call (a call given up ends it).
    async fn start_one(&self, source: &Shared) -> Result<CallProcess, Failure> {
        let name = &self.server.name;
        // No hang check: the process ends with its call.
        let (abandoned, _) = mpsc::unbounded_channel();
        let own = Shared::new(name, abandoned, None, false);
        let (running, mut child, exited) =
            start(&self.server, &self.workers, self.home.as_deref(), &own)
                .await
                .map_err(|why| {
                    let text = format!("mcp server `{name}` could not start for the call: {why}");
                    tracing::warn!(server = %source.name, "{text}");
                    Failure::Unavailable(text)
                })?;
        let process = Process {
            peer: running.peer().clone(),
            ended: exited.subscribe(),
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let watched = own.clone();
        tokio::spawn(async move {
            let exit = tokio::select! {
                status = child.wait() => Some(exit_why(&watched, status)),
                _ = stopped => None,
            };
            child.kill();
            let _ = child.wait().await;
            if let Some(why) = exit {
                let _ = exited.send(Some(Down::because(format!(
                    "{why}{}",
                    watched.last_words()
                ))));
            }
            drop(running);
        });
        Ok((process, own, stop))
    }
}

/// Resolves once the peer's connection is closed.
async fn closed(peer: &Peer<RoleClient>) {
    loop {
        if peer.is_transport_closed() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
