//! Serving a host's tools over stdio, from start to exit: fd 1 kept for the protocol (a private
//! duplicate; fd 1 itself pointed at stderr, so a plugin that prints cannot corrupt the
//! stream), the framing guard ([`guard`]) in front of rmcp, and one way out whatever ends the
//! session: the runner stops (calls in flight end at once, "the host is stopping (REASON)"),
//! the host shuts down, and the stopped calls' answers reach a client that still reads.

mod guard;

use std::future::Future;
use std::os::fd::{FromRawFd, OwnedFd};
use std::pin::Pin;

use rho_runtime::Host;
use rmcp::ServiceExt;

use super::handler::RhoServer;
use super::settings::ServeConfig;

/// How a stdio session ended (the host is shut down by then).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StdioEnd {
    /// The client ended the MCP session.
    SessionEnded,
    /// The client closed its input (our stdin).
    InputClosed,
    /// The client closed its output (our stdout): nothing more reaches it.
    OutputClosed,
    /// The stop future given to [`Stdio::until`] resolved, with this reason.
    Stopped(String),
}

impl StdioEnd {
    /// Why, in a few words (the reason calls stopped by it read).
    pub fn reason(&self) -> &str {
        match self {
            StdioEnd::SessionEnded => "the MCP session ended",
            StdioEnd::InputClosed => "the client closed its input",
            StdioEnd::OutputClosed => "the client closed its output",
            StdioEnd::Stopped(reason) => reason,
        }
    }
}

/// Why a stdio session failed: one line.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    /// stdout could not be set aside for the protocol.
    #[error("cannot set up stdout for the protocol: {0}")]
    Stdout(std::io::Error),
    /// The client left (or the transport failed) before the session started.
    #[error("{0}")]
    NotStarted(String),
    /// The session ended with an error.
    #[error("the MCP session ended with an error: {0}")]
    Failed(String),
}

/// A stop signal: resolves with the reason to stop.
type StopSignal = Pin<Box<dyn Future<Output = String> + Send>>;

/// A stdio MCP server over a [`RhoServer`]: [`serve_stdio`] for the common case, this for a
/// stop signal of the caller's.
///
/// ```no_run
/// # async fn run(host: rho_runtime::Host) -> Result<(), rho_mcp::StdioError> {
/// use rho_mcp::{RhoServer, ServeConfig, Stdio};
/// let server = RhoServer::new(&host, &ServeConfig::default());
/// let end = Stdio::new(server)
///     .until(async {
///         let _ = tokio::signal::ctrl_c().await;
///         "SIGINT".to_owned()
///     })
///     .serve()
///     .await?;
/// eprintln!("served until {}", end.reason());
/// # Ok(()) }
/// ```
pub struct Stdio {
    server: RhoServer,
    stop: Option<StopSignal>,
}

/// Serves `host`'s tools to the MCP client on stdin and stdout with the default `[serve]`
/// settings and the host's own gate, until the client ends the session or closes either
/// stream; then shuts the host down ([`Stdio`] says how). Once per process: it takes fd 1.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let (host, _reports) = rho_runtime::Host::builder().build().await?;
/// rho_mcp::serve_stdio(&host).await?;
/// # Ok(()) }
/// ```
pub async fn serve_stdio(host: &Host) -> Result<StdioEnd, StdioError> {
    Stdio::new(RhoServer::new(host, &ServeConfig::default()))
        .serve()
        .await
}

impl Stdio {
    /// Serves `server` over stdio, until the client ends the session.
    pub fn new(server: RhoServer) -> Stdio {
        Stdio { server, stop: None }
    }

    /// Also ends the session when `stop` resolves, with the reason it gives (a signal: the
    /// calls in flight read "the host is stopping (REASON)").
    pub fn until(mut self, stop: impl Future<Output = String> + Send + 'static) -> Stdio {
        self.stop = Some(Box::pin(stop));
        self
    }

    /// Serves until the session ends, then: the host's runner stops (every call in flight
    /// ends at once, with its end event), the host shuts down (workers killed, private copies
    /// removed), and what is owed to a client that still reads is written (at most a second
    /// more). A client that leaves before the session starts, or a session that fails, is an
    /// error, after the same shutdown.
    pub async fn serve(self) -> Result<StdioEnd, StdioError> {
        let host = self.server.host().clone();
        let mut stop = self
            .stop
            .unwrap_or_else(|| Box::pin(std::future::pending::<String>()));
        let stdout = match protocol_stdout() {
            Ok(stdout) => stdout,
            Err(e) => {
                host.shutdown_because("stdout could not be set up").await;
                return Err(StdioError::Stdout(e));
            }
        };
        let guard = guard::start(stdout);
        let mut closed = guard.closed;
        let drain = guard.drain;
        let serving = self.server.serve((guard.to_rmcp, guard.from_rmcp));
        tokio::pin!(serving);
        // The session starts with the client's `initialize`; a client may go before it does.
        let early = tokio::select! {
            started = &mut serving => started.map_err(|e| {
                StdioError::NotStarted(format!("the MCP session did not start: {e}"))
            }),
            closed = closed.recv() => Err(StdioError::NotStarted(match closed {
                Some(guard::Closed::Output) => {
                    "the client closed its output before the MCP session started"
                }
                _ => "the client closed its input before the MCP session started",
            }.to_owned())),
            reason = &mut stop => {
                let reason = format!("{reason} before the MCP session started");
                host.shutdown_because(&reason).await;
                return Ok(StdioEnd::Stopped(reason));
            }
        };
        let service = match early {
            Ok(service) => service,
            Err(e) => {
                host.shutdown_because(&e.to_string()).await;
                return Err(e);
            }
        };
        let session = service.cancellation_token();
        let waiting = service.waiting();
        tokio::pin!(waiting);
        let ended = tokio::select! {
            ended = &mut waiting => ended
                .map(|_| StdioEnd::SessionEnded)
                .map_err(|e| StdioError::Failed(e.to_string())),
            closed = closed.recv() => Ok(match closed {
                Some(guard::Closed::Output) => StdioEnd::OutputClosed,
                _ => StdioEnd::InputClosed,
            }),
            reason = &mut stop => Ok(StdioEnd::Stopped(reason)),
        };
        let reason = match &ended {
            Ok(end) => end.reason().to_owned(),
            Err(_) => "the MCP session failed".to_owned(),
        };
        tracing::info!(reason, "the stdio MCP server is stopping");
        host.shutdown_because(&reason).await;
        // The stopped calls' answers reach a client that still reads (bounded: one that does
        // not cannot hold the exit).
        let reading = !matches!(ended, Ok(StdioEnd::OutputClosed));
        if reading && !drain.flushed(std::time::Duration::from_secs(1)).await {
            tracing::warn!("answers still owed to the client at exit");
        }
        session.cancel();
        ended
    }
}

/// Keeps fd 1 for the protocol only: returns a private duplicate for the transport and points fd 1
/// at stderr.
fn protocol_stdout() -> std::io::Result<std::fs::File> {
    // SAFETY: dup/dup2 on the standard descriptors; the duplicate is owned by the File below.
    unsafe {
        let fd = libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::dup2(2, 1) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(std::fs::File::from(OwnedFd::from_raw_fd(fd)))
    }
}
