//! `rho serve`: every rho plugin as an MCP server over stdio, with rho's guarantees: gates,
//! timeouts that really kill, crash accounting, hot reload.
//!
//! Nothing but protocol frames reaches stdout: the protocol gets a private duplicate of fd 1 and
//! fd 1 itself is pointed at stderr, so a plugin that prints (in process) cannot corrupt the stream.

use std::path::PathBuf;
use std::process::ExitCode;

use rho_mcp::{Endpoint, Guard, RhoServer, ServeConfig, Stdio};
use rho_runtime::Host;

use crate::config::Config;
use crate::host::{self, PluginFlags, RunFlags};

/// `rho serve` flags.
#[derive(clap::Args)]
#[command(
    after_help = "Exit status: 0 when the client ends the session (or on SIGTERM/SIGINT, at any moment, start-up included), 1 when the session fails or a plugin directory is unusable, 2 for a usage error."
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
    /// Named tokens instead: each a principal with its scopes, in a file of their SHA-256 made
    /// by `rho token add`, read again when it changes (not with --token-file or [serve.oauth]).
    #[arg(long, value_name = "PATH")]
    tokens_file: Option<PathBuf>,
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
        if let Some(path) = &self.tokens_file {
            serve.tokens_file = Some(path.clone());
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
    // The flags joined the file: what they say together is checked again.
    if let Err(e) = config.serve.check() {
        eprintln!("rho: {}", crate::render::terminal_safe(&e.to_string()));
        return ExitCode::from(2);
    }
    // The flag asks for the page; `[serve] web` without `http` is for a file shared with stdio.
    if args.web && config.serve.http.is_none() {
        eprintln!("rho: --web serves its page over HTTP: give --http ADDR (or [serve] http)");
        return ExitCode::from(2);
    }
    // Who may call is settled before anything loads: an issuer that cannot be reached, or a
    // token file that cannot be read, stops the server here, in one line.
    let access = match config.serve.http {
        Some(addr) => match Guard::for_config(addr, &config.serve).await {
            Ok(access) => Some((addr, access)),
            Err(e) => {
                eprintln!("rho: {}", crate::render::terminal_safe(&e.to_string()));
                return ExitCode::from(1);
            }
        },
        None => None,
    };
    let journal = match crate::journals::for_server(config.serve.journal.as_deref()) {
        Ok(path) => path,
        Err(e) => {
            eprintln!("rho: {e}");
            return ExitCode::from(1);
        }
    };
    let fresh = !journal.exists();
    // A server that never served leaves no journal of its own behind.
    let never_served = |code: ExitCode| {
        if fresh {
            let _ = std::fs::remove_file(&journal);
        }
        code
    };
    let built = host::build(&config, &args.plugins, Some(&args.run), |b| {
        b.watch(true).journal(&journal)
    });
    let (host, config) = match built.await {
        Ok(built) => built,
        Err(code) => return never_served(code),
    };
    eprintln!("rho: journal {} (rho watch --attach)", journal.display());
    let mut server = RhoServer::new(&host, &config.serve).gate_rules(&config.host.gate);
    if let Some(observer) = crate::telemetry::observer() {
        server = server.observed_by(observer);
    }
    let nats = crate::nats::config_with(
        &config,
        args.nats.nats.as_deref(),
        args.nats.nats_host.as_deref(),
    );
    if let Err(line) = crate::nats::start_export(&host, &nats).await {
        eprintln!("rho: {}", crate::render::terminal_safe(&line));
        shut_down(&host, "the NATS export could not start").await;
        return never_served(ExitCode::from(1));
    }
    // `rho call --host` runs calls here, where this server's journal and views see them.
    let _control = crate::control::listen(&host);
    if let Some((addr, (guard, made))) = access {
        return match serve_http(server, &host, addr, guard, made, &config.serve).await {
            Served::Stopped => ExitCode::SUCCESS,
            Served::NotStarted => never_served(ExitCode::from(1)),
        };
    }
    let signalled = async { crate::signals::stopped().await.to_owned() };
    let ended = Stdio::new(server).until(signalled).serve().await;
    crate::nats::flush(&host).await;
    match ended {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rho: {e}");
            ExitCode::from(1)
        }
    }
}

/// How `rho serve --http` ended.
enum Served {
    /// It served until a signal.
    Stopped,
    /// Its endpoint could not start (said on stderr).
    NotStarted,
}

/// `rho serve --http` behind `guard` (`made`: the token it made, shown once): serves until
/// SIGTERM or SIGINT, then stops as over stdio.
async fn serve_http(
    server: RhoServer,
    host: &Host,
    addr: std::net::SocketAddr,
    guard: Guard,
    made: Option<String>,
    serve: &ServeConfig,
) -> Served {
    if let Some(token) = &made {
        eprintln!("rho: token (send `Authorization: Bearer TOKEN`; shown once): {token}");
    }
    // A browser cannot send the header: the page's address carries the token.
    let page_query = match (&made, &serve.token_file, &serve.tokens_file) {
        (Some(token), _, _) => format!("?token={token}"),
        (None, Some(file), _) => {
            format!("?token=TOKEN (TOKEN: the first line of {})", file.display())
        }
        (None, None, Some(_)) => "?token=TOKEN (TOKEN: one of the named tokens)".to_owned(),
        (None, None, None) => String::new(),
    };
    let started = Endpoint::new(host.clone(), guard).mcp(server).start(addr);
    let endpoint = match started.await {
        Ok(endpoint) => endpoint,
        Err(e) => {
            eprintln!("rho: {}", crate::render::terminal_safe(&e.to_string()));
            shut_down(host, "the HTTP endpoint could not start").await;
            return Served::NotStarted;
        }
    };
    eprintln!("rho: serving MCP at http://{}/mcp", endpoint.bound);
    if let (Some((resource, metadata)), Some(oauth)) = (&endpoint.oauth_resource, &serve.oauth) {
        eprintln!(
            "rho: OAuth 2.1: access tokens of {} for {resource} (metadata: {metadata})",
            oauth.issuers.join(", ")
        );
    }
    if serve.web {
        eprintln!("rho: live page at http://{}/{page_query}", endpoint.bound);
    }
    let reason = crate::signals::stopped().await;
    shut_down(host, reason).await;
    endpoint.stop().await;
    Served::Stopped
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
