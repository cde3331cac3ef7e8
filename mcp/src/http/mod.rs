//! A host over HTTP: the same MCP server as over stdio as MCP Streamable HTTP at `/mcp` (rmcp's
//! transport on axum), the host's events at `/events`, its recent images at `/images`, and the
//! live page at `/` ([`Endpoint`]; [`serve_http`] for the common case).
//!
//! Who may call:
//! - a loopback address (the default) serves this machine's users; a non-loopback one requires a
//!   bearer token (`Authorization: Bearer TOKEN`): from `--token-file` (owner-only), or made at
//!   start and printed once on stderr;
//! - the `Host` header must name the server (loopback names, or any name with a token) and a
//!   request carrying an `Origin` must come from an allowed origin (the loopback origins unless
//!   `serve.allowed_origins` says otherwise): a web page cannot reach a local server through DNS
//!   rebinding;
//! - request bodies are bounded (`serve.max_body_bytes`) and so are requests in flight
//!   (`serve.max_requests`, then 503), and so are MCP sessions (`serve.max_sessions`), besides the
//!   calls running at once (`serve.max_calls`).
//!
//! A client that disconnects mid-call cancels its call (rmcp does not; the gatekeeper's response
//! body, dropped unfinished, cancels the call's token: see `calls`; the runner ends the call once
//! and stops its worker).
//!
//! `/events` streams the host's events as Server-Sent Events (`id:` `RUN-SEQ`, the server run and
//! the event's seq; `data:` its JSON, the journal's format), behind the same guard. A client that
//! reconnects with `Last-Event-ID: RUN-SEQ` (or `?after=RUN-SEQ`) gets every later event exactly
//! once: the missed ones from the journal, then the live ones; a subscriber that lags is caught up
//! the same way; an id of an earlier run (the server restarted) gets the new run from its start.
//! Memory stays bounded whatever the clients do: a connection queues at most 1 MiB of events for
//! a client that reads slowly (then it lags and is caught up from the journal later, a page at a
//! time), at most 128 streams are open at once, and images are served from the bus's shared copy.

mod admission;
pub(crate) mod auth;
mod body;
mod calls;
mod connections;
mod events;
mod gatekeeper;
mod guard;
pub(crate) mod oauth;
pub(crate) mod refusal;

use std::net::SocketAddr;
use std::sync::Arc;

use rho_runtime::Host;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use tokio_util::sync::CancellationToken;

pub(crate) use calls::register;
pub(crate) use connections::Peer;
pub use guard::{Guard, HttpError, Limits, SessionLimits};

/// An HTTP endpoint over a host: `/events`, `/images` and (with [`Guard::web`]) the live page,
/// all served from the host's bus and journal; and, given one, an MCP server at `/mcp`. Every
/// route is behind the same [`Guard`].
///
/// ```no_run
/// # async fn run(host: rho_runtime::Host) -> Result<(), rho_mcp::HttpError> {
/// use rho_mcp::{Endpoint, Guard, RhoServer, ServeConfig};
/// let addr = "127.0.0.1:8750".parse().expect("an address");
/// let serve = ServeConfig::default();
/// let (guard, _made) = Guard::for_config(addr, &serve).await?;
/// let server = RhoServer::new(&host, &serve);
/// let started = Endpoint::new(host, guard).mcp(server).start(addr).await?;
/// eprintln!("serving at http://{}/mcp", started.bound);
/// started.stop().await;
/// # Ok(()) }
/// ```
pub struct Endpoint {
    host: Host,
    guard: Guard,
    /// rmcp's MCP sessions: shared by the `/mcp` service and the gatekeeper, which closes them.
    sessions: Arc<LocalSessionManager>,
    stop: CancellationToken,
    app: axum::Router,
}

/// Serves `host`'s tools as MCP Streamable HTTP at `http://ADDR/mcp` with `config`'s settings
/// (`[serve]`: token file, origins, limits, the live page) and the host's own gate, in a task
/// of its own until [`Started::stop`]. A non-loopback address without a token file gets a
/// token made now ([`Started::made_token`]: show it to whoever must call).
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let (host, _reports) = rho_runtime::Host::builder().build().await?;
/// let config = rho_mcp::ServeConfig::default();
/// let started = rho_mcp::serve_http(&host, "127.0.0.1:0".parse()?, &config).await?;
/// println!("MCP at http://{}/mcp", started.bound);
/// tokio::signal::ctrl_c().await?;
/// host.shutdown().await;
/// started.stop().await;
/// # Ok(()) }
/// ```
pub async fn serve_http(
    host: &Host,
    addr: SocketAddr,
    config: &crate::ServeConfig,
) -> Result<Started, HttpError> {
    let (guard, made) = Guard::for_config(addr, config).await?;
    let server = crate::RhoServer::new(host, config);
    let mut started = Endpoint::new(host.clone(), guard)
        .mcp(server)
        .start(addr)
        .await?;
    started.made_token = made;
    Ok(started)
}

/// A started [`Endpoint`]: where it listens, and how to stop it.
pub struct Started {
    /// The bound address (port 0 asked: the port picked).
    pub bound: SocketAddr,
    /// The bearer token made at start ([`serve_http`] on a non-loopback address without a
    /// token file), to be shown once; `None` otherwise.
    pub made_token: Option<String>,
    /// With OAuth: the resource's canonical URL (what clients ask tokens for, and tokens must
    /// name) and where its RFC 9728 metadata is.
    pub oauth_resource: Option<(String, String)>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Endpoint {
    /// An endpoint over `host`'s bus and journal, guarded by `guard`, with no MCP server yet.
    pub fn new(host: Host, guard: Guard) -> Endpoint {
        // rmcp's own idle life is off: a session is closed here when it has had no request in
        // flight for `guard.sessions.idle` (rmcp's counted only its own events, so a long call
        // without progress could lose its session).
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.keep_alive = None;
        Endpoint {
            host,
            guard,
            sessions: Arc::new(sessions),
            stop: CancellationToken::new(),
            app: axum::Router::new(),
        }
    }

    /// Serves `server` as MCP Streamable HTTP at `/mcp`, one clone per session. Its calls find
    /// this endpoint's cancellation through [`register`].
    pub fn mcp<S>(mut self, server: S) -> Endpoint
    where
        S: rmcp::ServerHandler + Clone + Send + Sync + 'static,
    {
        let config = StreamableHttpServerConfig::default()
            .with_allowed_origins(self.guard.allowed_origins.clone())
            .with_max_request_body_bytes(self.guard.limits.max_body_bytes)
            .with_cancellation_token(self.stop.child_token())
            // Host names are checked by the gatekeeper for every route (loopback names and the
            // bound address without a token, any name with one: rebinding gains nothing without
            // the token).
            .disable_allowed_hosts();
        let service =
            StreamableHttpService::new(move || Ok(server.clone()), self.sessions.clone(), config);
        self.app = self.app.nest_service("/mcp", service);
        self
    }

    /// Binds `addr` and serves in a task of its own until [`Started::stop`]. `Err` is the line
    /// saying why it could not bind.
    pub async fn start(self, addr: SocketAddr) -> Result<Started, HttpError> {
        let Endpoint {
            host,
            guard,
            sessions,
            stop,
            mut app,
        } = self;
        // `/images` serves what the bus keeps from now on.
        host.bus().keep_recent_images();
        let bind_error = |e: std::io::Error| HttpError::Bind {
            addr,
            reason: e.to_string(),
        };
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(bind_error)?;
        let bound = listener.local_addr().map_err(bind_error)?;
        app = app.merge(events::routes(host.clone(), guard.web));
        let mut oauth_resource = None;
        if let auth::Access::OAuth(verifier) = &guard.access {
            // RFC 9728: where clients learn who issues tokens for this server (open to all;
            // the path-suffixed form for `/mcp` too).
            verifier.bound_at(bound);
            oauth_resource = Some((verifier.resource().to_owned(), verifier.metadata_url()));
            let metadata = verifier.metadata();
            let route = axum::routing::get(move || {
                let metadata = metadata.clone();
                async move {
                    (
                        [(axum::http::header::CONTENT_TYPE, "application/json")],
                        metadata.to_string(),
                    )
                }
            });
            app = app
                .route("/.well-known/oauth-protected-resource", route.clone())
                .route("/.well-known/oauth-protected-resource/mcp", route);
        }
        let keeper =
            gatekeeper::Gatekeeper::start(guard, host.bus().clone(), bound, sessions, &stop);
        let app = app.layer(axum::middleware::from_fn_with_state(
            keeper,
            gatekeeper::gatekeeper,
        ));
        let task = tokio::spawn(connections::serve(listener, app, stop.clone()));
        Ok(Started {
            bound,
            made_token: None,
            oauth_resource,
            stop,
            task,
        })
    }
}

impl Started {
    /// Stops accepting, lets every connection finish its request and close, and waits for that
    /// up to 2 s (a client holding a stream open cannot hold the caller; its connection is
    /// dropped with the runtime).
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), self.task).await;
    }
}
