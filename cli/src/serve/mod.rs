//! `rho serve`: every rho plugin as an MCP server over stdio, with rho's guarantees: gates,
//! timeouts that really kill, crash accounting, hot reload.
//!
//! Nothing but protocol frames reaches stdout: the protocol gets a private duplicate of fd 1 and
//! fd 1 itself is pointed at stderr, so a plugin that prints (in process) cannot corrupt the stream.

mod asking;
mod logging;
mod mcp;
mod meta_tools;
mod server;
pub mod settings;
mod stdio;
mod tasks;

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::ExitCode;

use rho_runtime::Host;
use rmcp::ServiceExt;

use crate::config::Config;
use crate::host::{self, PluginFlags, RunFlags};
use crate::http::{Endpoint, Guard};
use server::RhoServer;
use settings::ServeConfig;

/// `rho serve` flags.
#[derive(clap::Args)]
#[command(
    after_help = "Exit status: 0 when the client ends the session (or on SIGTERM/SIGINT), 1 when the session fails or a plugin directory is unusable, 2 for a usage error."
)]
pub struct Args {
    #[command(flatten)]
    plugins: PluginFlags,
    #[command(flatten)]
    run: RunFlags,
    /// Append every event to this JSON-lines journal, for `rho watch --attach PATH` (default: a
    /// file of this server's own under ~/.local/state/rho, printed at start; `rho watch --attach`
    /// finds the newest).
    #[arg(long, value_name = "PATH")]
    journal: Option<PathBuf>,
    /// Serve MCP Streamable HTTP at http://ADDR/mcp instead of stdio (e.g. 127.0.0.1:8750; port
    /// 0 picks a free one, printed at start). Any address but a loopback one requires a token.
    #[arg(long, value_name = "ADDR")]
    http: Option<std::net::SocketAddr>,
    /// The bearer token HTTP clients must send, first line of this owner-only file (default on a
    /// non-loopback address: one made at start and printed once).
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// A browser origin allowed to call over HTTP (repeatable; default: the loopback origins).
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allow_origins: Vec<String>,
    /// With --http: serve a live page at http://ADDR/ (calls, images, per-tool health, reloads
    /// and quarantines; with a token, open it as http://ADDR/?token=TOKEN).
    #[arg(long)]
    web: bool,
    /// List two meta-tools besides the tools, for clients that never reread the list:
    /// rho_find_tools (search the tools as they are now) and rho_call_tool (call one by name).
    #[arg(long)]
    meta_tools: bool,
    #[command(flatten)]
    nats: crate::nats::ExportFlags,
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

impl Args {
    /// `[serve]` with these flags applied: they win over the file.
    fn applied_to(&self, mut serve: ServeConfig) -> ServeConfig {
        if let Some(journal) = &self.journal {
            serve.journal = Some(journal.clone());
        }
        if self.http.is_some() {
            serve.http = self.http;
        }
        if let Some(path) = &self.token_file {
            serve.token_file = Some(path.clone());
        }
        if !self.allow_origins.is_empty() {
            serve.allowed_origins = self.allow_origins.clone();
        }
        serve.web |= self.web;
        serve.meta_tools |= self.meta_tools;
        serve
    }
}

pub async fn main(args: Args, mut config: Config) -> ExitCode {
    config.serve = args.applied_to(config.serve);
    // The flag asks for the page; `[serve] web` without `http` is for a file shared with stdio.
    if args.web && config.serve.http.is_none() {
        eprintln!("rho: --web serves its page over HTTP: give --http ADDR (or [serve] http)");
        return ExitCode::from(2);
    }
    let journal = match crate::journals::for_server(config.serve.journal.as_deref()) {
        Ok(path) => path,
        Err(e) => {
            eprintln!("rho: {e}");
            return ExitCode::from(1);
        }
    };
    eprintln!("rho: journal {} (rho watch --attach)", journal.display());
    let built = host::build(&config, &args.plugins, Some(&args.run), |b| {
        b.watch(true).journal(journal)
    });
    let (host, config) = match built.await {
        Ok(built) => built,
        Err(code) => return code,
    };
    let server = RhoServer::new(&host, &config.serve, &config.host.gate);
    let nats = crate::nats::config_with(
        &config,
        args.nats.nats.as_deref(),
        args.nats.nats_host.as_deref(),
    );
    if let Err(line) = crate::nats::start_export(&host, &nats).await {
        eprintln!("rho: {}", crate::render::terminal_safe(&line));
        shut_down(&host, "the NATS export could not start").await;
        return ExitCode::from(1);
    }
    // `rho call --host` runs calls here, where this server's journal and views see them.
    let _control = crate::control::listen(&host);
    if let Some(addr) = config.serve.http {
        return serve_http(server, &host, addr, &config.serve).await;
    }
    let stdout = match protocol_stdout() {
        Ok(stdout) => stdout,
        Err(e) => {
            eprintln!("rho: cannot set up stdout for the protocol: {e}");
            return ExitCode::from(1);
        }
    };
    let mut terminate = match host::sigterm() {
        Ok(signal) => signal,
        Err(line) => {
            eprintln!("rho: {line}");
            return ExitCode::from(1);
        }
    };
    let guard = stdio::start(stdout);
    let mut closed = guard.closed;
    let drain = guard.drain;
    let serving = server.serve((guard.to_rmcp, guard.from_rmcp));
    tokio::pin!(serving);
    // The session starts with the client's `initialize`; a client may go before it does.
    let early = tokio::select! {
        started = &mut serving => match started {
            Ok(service) => Ok(service),
            Err(e) => Err((format!("the MCP session did not start: {e}"), ExitCode::from(1))),
        },
        closed = closed.recv() => Err((
            match closed {
                Some(stdio::Closed::Output) => "the client closed its output before the MCP session started",
                _ => "the client closed its input before the MCP session started",
            }.to_owned(),
            ExitCode::from(1),
        )),
        _ = terminate.recv() => Err(("SIGTERM before the MCP session started".into(), ExitCode::SUCCESS)),
        _ = tokio::signal::ctrl_c() => Err(("SIGINT before the MCP session started".into(), ExitCode::SUCCESS)),
    };
    let service = match early {
        Ok(service) => service,
        Err((reason, code)) => {
            if code != ExitCode::SUCCESS {
                eprintln!("rho: {reason}");
            }
            shut_down(&host, &reason).await;
            return code;
        }
    };
    let session = service.cancellation_token();
    let waiting = service.waiting();
    tokio::pin!(waiting);
    let (reason, code) = tokio::select! {
        ended = &mut waiting => match ended {
            Ok(_) => ("the MCP session ended", ExitCode::SUCCESS),
            Err(e) => {
                eprintln!("rho: the MCP session ended with an error: {e}");
                ("the MCP session failed", ExitCode::from(1))
            }
        },
        closed = closed.recv() => match closed {
            Some(stdio::Closed::Output) => ("the client closed its output", ExitCode::SUCCESS),
            _ => ("the client closed its input", ExitCode::SUCCESS),
        },
        _ = terminate.recv() => ("SIGTERM", ExitCode::SUCCESS),
        _ = tokio::signal::ctrl_c() => ("SIGINT", ExitCode::SUCCESS),
    };
    shut_down(&host, reason).await;
    // The stopped calls' answers reach a client that still reads (bounded: one that does not
    // cannot hold the exit).
    let reading = reason != "the client closed its output";
    if reading && !drain.flushed(std::time::Duration::from_secs(1)).await {
        tracing::warn!("answers still owed to the client at exit");
    }
    session.cancel();
    code
}

/// `rho serve --http`: serves until SIGTERM or SIGINT, then stops as over stdio.
async fn serve_http(
    server: RhoServer,
    host: &Host,
    addr: std::net::SocketAddr,
    serve: &ServeConfig,
) -> ExitCode {
    let refused = async |line: String| {
        eprintln!("rho: {line}");
        shut_down(host, "the HTTP endpoint could not start").await;
        ExitCode::from(1)
    };
    let guard = Guard::new(
        addr,
        serve.token_file.as_deref(),
        &serve.allowed_origins,
        serve.http_limits(),
        serve.web,
    );
    let (guard, made) = match guard {
        Ok(guard) => guard,
        Err(e) => return refused(e.to_string()).await,
    };
    if made && let Some(token) = &guard.token {
        eprintln!("rho: token (send `Authorization: Bearer TOKEN`; shown once): {token}");
    }
    let mut terminate = match host::sigterm() {
        Ok(signal) => signal,
        Err(line) => return refused(line).await,
    };
    let started = Endpoint::new(host.clone(), guard).mcp(server).start(addr);
    let endpoint = match started.await {
        Ok(endpoint) => endpoint,
        Err(e) => return refused(e.to_string()).await,
    };
    eprintln!("rho: serving MCP at http://{}/mcp", endpoint.bound);
    if serve.web {
        eprintln!("rho: live page at http://{}/", endpoint.bound);
    }
    let reason = tokio::select! {
        _ = terminate.recv() => "SIGTERM",
        _ = tokio::signal::ctrl_c() => "SIGINT",
    };
    shut_down(host, reason).await;
    endpoint.stop().await;
    ExitCode::SUCCESS
}

/// The one way `rho serve` ends, whatever ended it: calls in flight end at once with a text
/// saying the host is stopping (their answers still go out while the client reads), each end
/// event reaches the journal, workers stop and the private copies are removed. Bounded: about
/// a second when no tool ignores cancellation, three at most.
async fn shut_down(host: &Host, reason: &str) {
    tracing::info!(reason, "rho serve is stopping");
    host.shutdown_because(reason).await;
    crate::nats::flush(host).await;
}
