//! `rho serve --http ADDR`: the same MCP server as over stdio, as MCP Streamable HTTP at `/mcp`
//! (rmcp's transport on axum).
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
//! A client that disconnects mid-call cancels its call (rmcp cancels the request's token; the
//! runner ends the call once and stops its worker).
//!
//! `/events` streams the host's events as Server-Sent Events (`id:` `RUN-SEQ`, the server run and
//! the event's seq; `data:` its JSON, the journal's format), behind the same guard. A client that
//! reconnects with `Last-Event-ID: RUN-SEQ` (or `?after=RUN-SEQ`) gets every later event exactly
//! once: the missed ones from the journal, then the live ones; a subscriber that lags is caught up
//! the same way; an id of an earlier run (the server restarted) gets the new run from its start.
//! Memory stays bounded whatever the clients do: a connection queues at most 1 MiB of events for
//! a client that reads slowly (then it lags and is caught up from the journal later, a page at a
//! time), at most 128 streams are open at once, and images are served from the bus's shared copy.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::admission::{Connections, Room, Sessions};
use crate::jsonrpc::{self, Verdict};
use crate::serve::RhoServer;

/// A call in flight over HTTP: its session and its JSON-RPC id (as JSON text: `2`, `"a"`).
type CallKey = (String, String);

/// The `tools/call` requests of HTTP sessions in flight, with their cancellation: rmcp does not
/// cancel a session's request when its client disconnects, so the response body does (see
/// [`on_body_end`]). Cheap to clone.
#[derive(Clone, Default)]
pub struct HttpCalls(Arc<Mutex<HashMap<CallKey, CancellationToken>>>);

impl HttpCalls {
    /// Registers the call of `request_id` in the session of `parts` (a request over HTTP with a
    /// session) until the returned guard drops.
    pub fn register(
        &self,
        parts: Option<&axum::http::request::Parts>,
        request_id: &serde_json::Value,
        cancel: CancellationToken,
    ) -> Option<Registered> {
        let session = parts?
            .headers
            .get("mcp-session-id")?
            .to_str()
            .ok()?
            .to_owned();
        let key = (session, request_id.to_string());
        self.map().insert(key.clone(), cancel);
        Some(Registered {
            calls: self.clone(),
            key,
        })
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<CallKey, CancellationToken>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn cancel(&self, key: &CallKey) {
        if let Some(cancel) = self.map().remove(key) {
            cancel.cancel();
        }
    }
}

/// Keeps a call registered in [`HttpCalls`] while it runs.
pub struct Registered {
    calls: HttpCalls,
    key: CallKey,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.calls.map().remove(&self.key);
    }
}

/// A JSON-RPC id as a key: a number with an integral value as that integer (rmcp reads `103.0`,
/// `1.03e2` and `103` as one id), anything else as its JSON text.
fn id_key(id: &serde_json::Value) -> String {
    match id.as_f64() {
        Some(n) if n.fract() == 0.0 && n.abs() < 9e15 => format!("{}", n as i64),
        _ => id.to_string(),
    }
}

/// How the HTTP endpoint is guarded, resolved from the flags and `[serve]`.
pub struct Guard {
    /// The bearer token every request must carry, if any.
    pub token: Option<String>,
    /// Allowed `Origin`s (never empty: the loopback origins by default).
    pub allowed_origins: Vec<String>,
    /// The largest request body.
    pub max_body_bytes: usize,
    /// Requests in flight at most.
    pub max_requests: usize,
    /// MCP sessions open at once at most, in all and per peer address, and their idle life.
    pub sessions: SessionLimits,
    /// Serve the live page at `/`.
    pub web: bool,
}

/// The bounds of MCP sessions (see [`crate::admission`]).
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    /// Open at once at most.
    pub max: usize,
    /// Open at once per peer address at most.
    pub max_per_peer: usize,
    /// A session with no request for this long is closed.
    pub idle: std::time::Duration,
}

impl SessionLimits {
    /// The limits `serve` states.
    pub fn of(serve: &rho_runtime::ServeConfig) -> SessionLimits {
        SessionLimits {
            max: serve.max_sessions,
            max_per_peer: serve.max_sessions_per_peer,
            idle: std::time::Duration::from_millis(serve.session_idle_ms),
        }
    }
}

/// The origins a loopback server's own pages have.
const LOOPBACK_ORIGINS: [&str; 3] = ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"];

/// Why the HTTP endpoint cannot start: one line.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The token file is unusable.
    #[error("token file {path}: {reason}")]
    TokenFile {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// No token could be made.
    #[error("cannot make a token: {0}")]
    Random(std::io::Error),
    /// The address cannot be bound.
    #[error("cannot listen on {addr}: {reason}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
}

impl Guard {
    /// The guard for `addr`: the token from `token_file` (owner-only, one line), else one made
    /// now when `addr` is not loopback (the caller prints it); the origins allowed.
    pub fn new(
        addr: SocketAddr,
        token_file: Option<&Path>,
        allowed_origins: &[String],
        max_body_bytes: usize,
        max_requests: usize,
        sessions: SessionLimits,
        web: bool,
    ) -> Result<(Guard, bool), HttpError> {
        let (token, made) = match token_file {
            Some(path) => (Some(read_token(path)?), false),
            None if addr.ip().is_loopback() => (None, false),
            None => (Some(make_token().map_err(HttpError::Random)?), true),
        };
        let allowed_origins = if allowed_origins.is_empty() {
            LOOPBACK_ORIGINS.map(String::from).to_vec()
        } else {
            allowed_origins.to_vec()
        };
        Ok((
            Guard {
                token,
                allowed_origins,
                max_body_bytes,
                max_requests,
                sessions,
                web,
            },
            made,
        ))
    }
}

/// Reads a token file: a regular file, not readable by group or others, its first line (16 to
/// 4096 characters, no spaces).
fn read_token(path: &Path) -> Result<String, HttpError> {
    use std::os::unix::fs::MetadataExt;
    let failed = |reason: String| HttpError::TokenFile {
        path: path.display().to_string(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| failed(e.to_string()))?;
    if !meta.is_file() || meta.len() > 8192 {
        return Err(failed("not a regular file of at most 8 KiB".into()));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(failed(format!(
            "mode {:o}: others can read it (chmod 600)",
            meta.mode() & 0o777
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| failed(e.to_string()))?;
    let token = text.lines().next().unwrap_or_default().trim().to_owned();
    if token.len() < 16
        || token.len() > 4096
        || token.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(failed(
            "its first line must be a token of 16 to 4096 characters without spaces".into(),
        ));
    }
    Ok(token)
}

/// 32 random bytes from the kernel, hex.
fn make_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether a GET's query carries `token=<token>`: how the page's `EventSource` and images
/// authenticate (browsers send no headers of their own for them).
fn query_token(request: &Request, token: &str) -> bool {
    request
        .uri()
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|pair| pair.strip_prefix("token="))
        .filter_map(percent_decoded)
        .any(|given| same(&given, token))
}

/// `a == b` in time independent of where they differ and of their lengths (their SHA-256
/// digests are compared).
fn same(a: &str, b: &str) -> bool {
    let (a, b) = (
        rho_runtime::sha256_hex(a.as_bytes()),
        rho_runtime::sha256_hex(b.as_bytes()),
    );
    a.bytes()
        .zip(b.bytes())
        .fold(0u8, |diff, (x, y)| diff | (x ^ y))
        == 0
}

/// `%XX` and `+` of a query value decoded (`None` when it is not UTF-8 after decoding).
fn percent_decoded(value: &str) -> Option<String> {
    let mut out = Vec::with_capacity(value.len());
    let mut bytes = value.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let hex: String = bytes.by_ref().take(2).map(char::from).collect();
                out.push(u8::from_str_radix(&hex, 16).ok()?);
            }
            other => out.push(other),
        }
    }
    String::from_utf8(out).ok()
}

/// Whether `headers` carry `Authorization: Bearer <token>` (compared in constant time).
fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, given) = v.split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then_some(given.trim())
        })
    else {
        return false;
    };
    same(given, token)
}

struct Gatekeeper {
    token: Option<String>,
    in_flight: Arc<tokio::sync::Semaphore>,
    max_body_bytes: usize,
    calls: HttpCalls,
    /// Browser origins allowed (`scheme://host[:port|:*]`).
    allowed_origins: Vec<String>,
    /// Without a token: the `Host` names the server answers to (loopback names and the bound
    /// address), so a page that rebinds a name of its own to this address is refused.
    allowed_hosts: Option<Vec<String>>,
    /// rmcp's MCP sessions (2025 era), closed here when idle or evicted.
    rmcp_sessions: Arc<LocalSessionManager>,
    /// Who opened each session and when it was last active (see [`crate::admission`]).
    sessions: Arc<Sessions>,
}

/// How long a client may take to send a request body.
const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether `origin` (`scheme://host[:port]`) is one `allowed` names (`scheme://host`,
/// `scheme://host:port` or `scheme://host:*`), scheme and host compared without case.
fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    let origin = origin.to_ascii_lowercase();
    let (scheme, rest) = origin.split_once("://").unwrap_or(("", &origin));
    let default_port = if scheme == "https" { "443" } else { "80" };
    let (host, port) = split_port(rest).unwrap_or((rest, default_port));
    allowed.iter().any(|entry| {
        let entry = entry.to_ascii_lowercase();
        let Some((e_scheme, e_rest)) = entry.split_once("://") else {
            return false;
        };
        let (e_host, e_port) = split_port(e_rest).unwrap_or((e_rest, "*"));
        e_scheme == scheme && e_host == host && (e_port == "*" || e_port == port)
    })
}

/// `host:port` (or `[v6]:port`) split at its port, if it has one.
fn split_port(authority: &str) -> Option<(&str, &str)> {
    let at = authority.rfind(':')?;
    let (host, port) = (&authority[..at], &authority[at + 1..]);
    (!host.is_empty() && (host.ends_with(']') || !host.contains(':'))).then_some((host, port))
}

/// Whether the `Host` header names this server: a loopback name or the bound address.
fn host_allowed(headers: &HeaderMap, allowed: &[String]) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let host = host.to_ascii_lowercase();
    let name = split_port(&host).map_or(host.as_str(), |(name, _)| name);
    allowed.iter().any(|a| a == name)
}

async fn gatekeeper(
    State(keeper): State<Arc<Gatekeeper>>,
    request: Request,
    next: Next,
) -> Response {
    // Every route, not only /mcp: a page of another origin, or one that rebound its own name to
    // this address, reads nothing (events carry every call's arguments and answers).
    let foreign_origin = request
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|origin| !origin_allowed(origin, &keeper.allowed_origins));
    let foreign_host = keeper
        .allowed_hosts
        .as_ref()
        .is_some_and(|hosts| !host_allowed(request.headers(), hosts));
    if foreign_origin || foreign_host {
        return (
            StatusCode::FORBIDDEN,
            "rho: this origin or host is not allowed\n",
        )
            .into_response();
    }
    if let Some(token) = &keeper.token
        && !authorized(request.headers(), token)
        && !(request.method() == axum::http::Method::GET && query_token(&request, token))
    {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "rho: a bearer token is required (Authorization: Bearer TOKEN)\n",
        )
            .into_response();
    }
    let Ok(_permit) = keeper.in_flight.clone().try_acquire_owned() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "rho: too many requests in flight; retry\n",
        )
            .into_response();
    };
    let session = request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let peer = request
        .extensions()
        .get::<Peer>()
        .map_or(IpAddr::from([127, 0, 0, 1]), |p| p.0);
    if request.method() != axum::http::Method::POST {
        if request.method() == axum::http::Method::DELETE
            && let Some(id) = &session
        {
            keeper.sessions.closed(id);
            return next.run(request).await;
        }
        // A session's standing stream (GET /mcp) keeps it active while it is open.
        let active = session
            .as_deref()
            .filter(|id| keeper.sessions.request_started(id));
        let response = next.run(request).await;
        return match active {
            Some(id) => ends_session_request(response, &keeper.sessions, id),
            None => response,
        };
    }
    // A POST is read whole here, bounded in size and time (a client that sends its body slowly
    // holds nothing for long), and checked as the stdio face checks a line (`crate::jsonrpc`):
    // what rmcp could not take is answered here, with the request's id.
    let (parts, body) = request.into_parts();
    let read = tokio::time::timeout(BODY_TIMEOUT, read_bounded(body, keeper.max_body_bytes));
    let bytes = match read.await {
        Ok(Ok(ReadBody::Whole(bytes))) => bytes,
        Ok(Ok(ReadBody::TooLarge(head))) => {
            return json_rpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                jsonrpc::too_large(&head, keeper.max_body_bytes),
            );
        }
        Ok(Err(_)) => {
            return (
                StatusCode::BAD_REQUEST,
                "rho: the request body could not be read\n",
            )
                .into_response();
        }
        Err(_) => {
            return (
                StatusCode::REQUEST_TIMEOUT,
                "rho: the request body took too long\n",
            )
                .into_response();
        }
    };
    let verdict = match std::str::from_utf8(&bytes) {
        Ok(text) => jsonrpc::check(text),
        Err(_) => Verdict::Answer(jsonrpc::error(
            jsonrpc::id_from_head(&bytes).unwrap_or(serde_json::Value::Null),
            -32700,
            "parse error: not UTF-8",
        )),
    };
    let (text, id, method) = match verdict {
        Verdict::Forward { text, id, method } => (text, id, method),
        Verdict::Answer(answer) => return json_rpc_error(StatusCode::BAD_REQUEST, answer),
        // A notification that is wrong gets no answer, as JSON-RPC says: accepted, and dropped.
        Verdict::Ignore => return StatusCode::ACCEPTED.into_response(),
    };
    drop(bytes);
    let method = method.as_deref();
    let opening = session.is_none() && method == Some("initialize");
    if opening {
        match keeper.sessions.make_room(peer) {
            Room::Made(closed) => close_sessions(&keeper.rmcp_sessions, closed).await,
            Room::Full => {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [(header::RETRY_AFTER, "5")],
                    "rho: too many MCP sessions open, each with a request in flight; retry\n",
                )
                    .into_response();
            }
        }
    }
    let active = session
        .as_deref()
        .filter(|id| keeper.sessions.request_started(id))
        .map(str::to_owned);
    let call = session
        .filter(|_| method == Some("tools/call"))
        .and_then(|session| Some((session, id_key(id.as_ref()?))));
    let mut response = next
        .run(Request::from_parts(parts, axum::body::Body::from(text)))
        .await;
    if opening
        && let Some(id) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
    {
        keeper.sessions.opened(id, peer);
    }
    if let Some(id) = &active {
        response = ends_session_request(response, &keeper.sessions, id);
    }
    match call {
        None => response,
        // A response dropped before its end: the client went away, its call is cancelled.
        Some(key) => {
            let calls = keeper.calls.clone();
            on_body_end(response, move |finished| {
                if !finished {
                    calls.cancel(&key);
                }
            })
        }
    }
}

/// A request body read up to a bound.
enum ReadBody {
    /// All of it.
    Whole(Vec<u8>),
    /// It ran past the bound: its first [`jsonrpc::ID_HEAD`] bytes (to find its id); the rest
    /// was not read.
    TooLarge(Vec<u8>),
}

/// Reads `body` whole if it is at most `max` bytes, else stops reading at the bound.
async fn read_bounded(body: axum::body::Body, max: usize) -> Result<ReadBody, axum::Error> {
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if bytes.len() + chunk.len() > max {
            let room = jsonrpc::ID_HEAD.saturating_sub(bytes.len());
            bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
            bytes.truncate(jsonrpc::ID_HEAD);
            return Ok(ReadBody::TooLarge(bytes));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(ReadBody::Whole(bytes))
}

/// A JSON-RPC error response over HTTP.
fn json_rpc_error(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The peer address of the connection a request came on (a request extension).
#[derive(Debug, Clone, Copy)]
struct Peer(IpAddr);

/// `response` with a body that ends session `id`'s request when it ends (or is dropped: the
/// client went away).
fn ends_session_request(response: Response, sessions: &Arc<Sessions>, id: &str) -> Response {
    let (sessions, id) = (sessions.clone(), id.to_owned());
    on_body_end(response, move |_| sessions.request_ended(&id))
}

/// `response` with a body that runs `done` once it is dropped: `done(true)` when it was sent to
/// its end, `done(false)` when it was dropped before (the client went away). The body keeps its
/// length (a response with a `Content-Length` keeps it).
fn on_body_end(response: Response, done: impl FnOnce(bool) + Send + 'static) -> Response {
    response.map(|inner| {
        axum::body::Body::new(OnEnd {
            inner,
            done: Some(done),
            finished: false,
        })
    })
}

/// A body that tells `done` when it is dropped, and whether it had ended.
struct OnEnd<F: FnOnce(bool)> {
    inner: axum::body::Body,
    done: Option<F>,
    finished: bool,
}

// Only `inner` is polled, and it is `Unpin`.
impl<F: FnOnce(bool)> Unpin for OnEnd<F> {}

impl<F: FnOnce(bool)> http_body::Body for OnEnd<F> {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.finished = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl<F: FnOnce(bool)> Drop for OnEnd<F> {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            done(self.finished || http_body::Body::is_end_stream(&self.inner));
        }
    }
}

/// Closes rmcp's sessions `ids` (idle too long, or evicted for a newcomer).
async fn close_sessions(rmcp: &LocalSessionManager, ids: Vec<String>) {
    use rmcp::transport::streamable_http_server::session::SessionManager;
    for id in ids {
        if let Err(e) = rmcp.close_session(&id.as_str().into()).await {
            tracing::debug!(session = %id, error = %e, "closing an MCP session");
        }
    }
}

/// How long a client may take to send a request's head, from its connection or from the end of
/// its last response (an idle keep-alive connection included): 5 s.
const HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Accepts connections until `stop`, each admitted by [`Connections`] (a bound in all and per
/// peer address, a newcomer evicting the connection that has waited longest), served by hyper
/// with a bound on the time its request heads may take, with TCP_NODELAY (answers end with small
/// writes, the last SSE chunk, which would otherwise wait for the client's delayed ACK: 40 ms a
/// call). On `stop`, connections finish their requests and close.
async fn serve_connections(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    stop: CancellationToken,
) {
    let table = Arc::new(Connections::default());
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, mostly: back off rather than spin.
                    tracing::warn!(error = %e, "accepting an HTTP connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = stop.cancelled() => return,
        };
        let Some(admitted) = table.admit(peer.ip()) else {
            drop(stream);
            continue;
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set");
        }
        let inner = hyper_util::service::TowerToHyperService::new(app.clone());
        let connection = admitted.connection.clone();
        let service = hyper::service::service_fn(
            move |mut request: hyper::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(Peer(peer.ip()));
                connection.request_started();
                let ended = connection.clone();
                let response = hyper::service::Service::call(&inner, request);
                async move {
                    let response = response.await?;
                    Ok::<_, std::convert::Infallible>(on_body_end(response, move |_| {
                        ended.request_ended()
                    }))
                }
            },
        );
        let stop = stop.clone();
        tokio::spawn(async move {
            let evicted = admitted.connection.evicted.clone();
            let _admitted = admitted;
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT);
            let connection = http.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                // A newcomer needed its place: closed at once.
                () = evicted.cancelled() => {}
                () = stop.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
}

/// This server run's id: its start, Unix milliseconds.
fn run_id() -> String {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
        .to_string()
}

/// The most events one `/events` connection reads back from the journal in one catch-up.
const MAX_REPLAY: u64 = 20_000;

/// How many bytes of events one `/events` connection may have queued for a client that reads
/// slowly: past it the connection waits, its bus subscription lags, and it is caught up from the
/// journal once the client reads again (nothing lost, memory bounded).
const QUEUED_BYTES: usize = 1 << 20;

/// How many bytes of journal lines a catch-up reads at a time.
const REPLAY_PAGE_BYTES: usize = 1 << 20;

/// `/events` connections open at once at most (each may hold [`QUEUED_BYTES`] and a
/// [`REPLAY_PAGE_BYTES`] page); more get 503.
const MAX_EVENT_STREAMS: usize = 128;

/// The seq after which a client wants events: `Last-Event-ID`, else `?after=`, else now. An id
/// is `RUN-SEQ`: one of another run (the server restarted since) means this run from its start;
/// a bare `SEQ` is taken as of this run.
fn resume_after(request: &Request, run: &str) -> Option<u64> {
    let header = request
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let given = header.or_else(|| {
        request
            .uri()
            .query()?
            .split('&')
            .find_map(|pair| pair.strip_prefix("after="))
            .and_then(percent_decoded)
    })?;
    match given.trim().split_once('-') {
        Some((of, seq)) if of == run => seq.parse().ok(),
        Some(_) => Some(0),
        None => given.trim().parse().ok(),
    }
}

/// What `/events` serves: the host, this run's id (the server's start, in ms), and the streams
/// that may still open.
#[derive(Clone)]
struct EventsState {
    host: rho_runtime::Host,
    run: Arc<str>,
    streams: Arc<tokio::sync::Semaphore>,
}

/// One SSE event on its way to the client, holding its bytes' share of the connection's
/// [`QUEUED_BYTES`] until hyper takes it.
struct Queued {
    event: axum::response::sse::Event,
    _bytes: tokio::sync::OwnedSemaphorePermit,
}

/// `GET /events`: the bus as Server-Sent Events, resumable by seq (see the module doc).
async fn events(State(state): State<EventsState>, request: Request) -> Response {
    use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
    let EventsState { host, run, streams } = state;
    let Ok(stream_permit) = streams.try_acquire_owned() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "rho: too many event streams open; retry\n",
        )
            .into_response();
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Queued>();
    let budget = Arc::new(tokio::sync::Semaphore::new(QUEUED_BYTES));
    // Subscribed before anything is read back: every event is either in the journal up to
    // `now` or comes live after it.
    let mut live = host.subscribe();
    let now = host.bus().last_seq();
    // A seq beyond this run's is of an earlier run of the server: this run from its start.
    let after = resume_after(&request, &run)
        .map(|seq| if seq > now { 0 } else { seq })
        .unwrap_or(now);
    tokio::spawn(async move {
        let _stream_permit = stream_permit;
        // Waits for room in the connection's byte budget (an event larger than the whole budget
        // takes all of it), then queues; false once the client is gone.
        let queue = async |event: SseEvent, bytes: usize| {
            let Ok(permit) = budget
                .clone()
                .acquire_many_owned(bytes.clamp(1, QUEUED_BYTES) as u32)
                .await
            else {
                return false;
            };
            tx.send(Queued {
                event,
                _bytes: permit,
            })
            .is_ok()
        };
        // At once, so the client knows the stream is live (a response's head may wait for its
        // first bytes).
        if !queue(SseEvent::default().comment("rho events"), 1).await {
            return;
        }
        let mut last = after;
        let send = async |event: &rho_runtime::Event, last: &mut u64| {
            if event.seq <= *last {
                return true;
            }
            *last = event.seq;
            let data = serde_json::to_string(event).unwrap_or_default();
            let bytes = data.len();
            let event = SseEvent::default()
                .id(format!("{run}-{}", event.seq))
                .data(data);
            queue(event, bytes).await
        };
        // Reads back `from..=to` from the journal, a page of REPLAY_PAGE_BYTES at a time, so
        // neither a long run nor large events make a connection hold much; the last
        // MAX_REPLAY events at most. False once the client is gone.
        let catch_up = async |from: u64, to: u64, last: &mut u64| {
            let from = from.max(to.saturating_sub(MAX_REPLAY - 1));
            let opened = {
                let host = host.clone();
                tokio::task::spawn_blocking(move || host.replay(from, to)).await
            };
            let Ok(Some(Ok(mut replay))) = opened else {
                return true;
            };
            loop {
                let read = tokio::task::spawn_blocking(move || {
                    let page = replay.page(REPLAY_PAGE_BYTES);
                    (replay, page)
                })
                .await;
                let Ok((rest, Ok(page))) = read else {
                    return true;
                };
                if page.is_empty() {
                    return true;
                }
                for event in &page {
                    if !send(event, last).await {
                        return false;
                    }
                }
                replay = rest;
            }
        };
        if !catch_up(after + 1, now, &mut last).await {
            return;
        }
        while let Some(item) = live.recv().await {
            let open = match item {
                rho_runtime::BusItem::Event(event) => send(&event, &mut last).await,
                rho_runtime::BusItem::Lagged { .. } => {
                    let now = host.bus().last_seq();
                    catch_up(last + 1, now, &mut last).await
                }
            };
            if !open {
                return;
            }
        }
    });
    let stream = tokio_stream::wrappers::UnboundedReceiverStream::new(rx)
        .map(|queued| Ok::<_, std::convert::Infallible>(queued.event));
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// The live page (`--web`): calls running and done, images, per-tool health, reloads and
/// quarantines, fed by `/events`.
async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-store"),
            (header::X_FRAME_OPTIONS, "DENY"),
        ],
        include_str!("web/page.html"),
    )
        .into_response()
}

/// The type an image is served as: a raster type browsers show as an image, anything else
/// (SVG, HTML, types in other cases or with parameters) as bytes to download.
fn served_type(mime: &str) -> &'static str {
    match mime.to_ascii_lowercase().trim() {
        "image/png" => "image/png",
        "image/jpeg" => "image/jpeg",
        "image/gif" => "image/gif",
        "image/webp" => "image/webp",
        _ => "application/octet-stream",
    }
}

/// A kept image's bytes as a response body, shared with the bus (no copy).
struct ImageBytes(Arc<rho_plugin_api::Image>);

impl AsRef<[u8]> for ImageBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0.bytes
    }
}

/// `GET /images/SHA256`: the bytes of an image a recent call answered (`Bus::image`).
async fn image(
    State(host): State<rho_runtime::Host>,
    axum::extract::Path(sha256): axum::extract::Path<String>,
) -> Response {
    match host.bus().image(&sha256) {
        Some(image) => {
            // A plugin chose these bytes and this type: only raster types a browser shows as
            // images (never SVG or HTML, which can run script at this origin), the rest as bytes
            // to download, and nothing of it may run or be framed.
            let mime = served_type(&image.mime_type).to_owned();
            (
                [
                    (header::CONTENT_TYPE, mime),
                    (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
                    (
                        header::CONTENT_SECURITY_POLICY,
                        "default-src 'none'; sandbox; frame-ancestors 'none'".to_owned(),
                    ),
                    (header::CACHE_CONTROL, "private, max-age=86400".to_owned()),
                ],
                axum::body::Body::from(axum::body::Bytes::from_owner(ImageBytes(image))),
            )
                .into_response()
        }
        None => (StatusCode::NOT_FOUND, "rho: no such recent image\n").into_response(),
    }
}

/// Serves `server` at `http://addr/mcp` (none without one: a page and its events only) until
/// `stop` is cancelled. Returns once the listener is bound (the serving goes on in a task), or
/// why it could not be.
pub async fn start(
    server: Option<RhoServer>,
    host: rho_runtime::Host,
    calls: HttpCalls,
    addr: SocketAddr,
    guard: Guard,
    stop: CancellationToken,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), HttpError> {
    // `/images` serves what the bus keeps from now on.
    host.bus().keep_recent_images();
    // rmcp's own idle life is off: a session is closed here when it has had no request in
    // flight for `guard.sessions.idle` (rmcp's counted only its own events, so a long call
    // without progress could lose its session).
    let mut rmcp_sessions = LocalSessionManager::default();
    rmcp_sessions.session_config.keep_alive = None;
    let sessions = Arc::new(rmcp_sessions);
    let service = server.map(|server| {
        let config = StreamableHttpServerConfig::default()
            .with_allowed_origins(guard.allowed_origins.clone())
            .with_max_request_body_bytes(guard.max_body_bytes)
            .with_cancellation_token(stop.child_token())
            // Host names are checked by the gatekeeper for every route (loopback names and the
            // bound address without a token, any name with one: rebinding gains nothing without
            // the token).
            .disable_allowed_hosts();
        StreamableHttpService::new(move || Ok(server.clone()), sessions.clone(), config)
    });
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| HttpError::Bind {
            addr,
            reason: e.to_string(),
        })?;
    let bound = listener.local_addr().map_err(|e| HttpError::Bind {
        addr,
        reason: e.to_string(),
    })?;
    let allowed_hosts = guard.token.is_none().then(|| {
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "[::1]", "::1"]
            .map(String::from)
            .to_vec();
        hosts.push(match bound.ip() {
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        });
        hosts
    });
    let keeper = Arc::new(Gatekeeper {
        token: guard.token,
        in_flight: Arc::new(tokio::sync::Semaphore::new(guard.max_requests)),
        max_body_bytes: guard.max_body_bytes,
        calls,
        allowed_origins: guard.allowed_origins.clone(),
        allowed_hosts,
        rmcp_sessions: sessions.clone(),
        sessions: Arc::new(Sessions::new(
            guard.sessions.max,
            guard.sessions.max_per_peer,
            guard.sessions.idle,
        )),
    });
    // Sessions idle past their life are closed, a few times per life.
    let sweeping = keeper.clone();
    let swept = stop.clone();
    tokio::spawn(async move {
        let every = (guard.sessions.idle / 4).max(std::time::Duration::from_millis(250));
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = swept.cancelled() => return,
            }
            close_sessions(&sweeping.rmcp_sessions, sweeping.sessions.expired()).await;
        }
    });
    let mut app = axum::Router::new()
        .route(
            "/events",
            axum::routing::get(events).with_state(EventsState {
                host: host.clone(),
                run: run_id().into(),
                streams: Arc::new(tokio::sync::Semaphore::new(MAX_EVENT_STREAMS)),
            }),
        )
        .route(
            "/images/{sha256}",
            axum::routing::get(image).with_state(host),
        );
    if guard.web {
        app = app.route("/", axum::routing::get(page));
    }
    if let Some(service) = service {
        app = app.nest_service("/mcp", service);
    }
    let app = app.layer(axum::middleware::from_fn_with_state(keeper, gatekeeper));
    let task = tokio::spawn(serve_connections(listener, app, stop));
    Ok((bound, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_hosts_ids_tokens_and_image_types() {
        let loopback = LOOPBACK_ORIGINS.map(String::from).to_vec();
        assert!(origin_allowed("http://localhost:3000", &loopback));
        assert!(origin_allowed("HTTP://LOCALHOST:3000", &loopback));
        assert!(origin_allowed("http://[::1]:8080", &loopback));
        assert!(!origin_allowed(
            "http://rebind.evil.example:3000",
            &loopback
        ));
        assert!(!origin_allowed("http://localhost.evil.com", &loopback));
        assert!(!origin_allowed("null", &loopback));
        let exact = vec!["https://ide.example.com".to_owned()];
        assert!(origin_allowed("https://ide.example.com", &exact));
        assert!(!origin_allowed("http://ide.example.com", &exact));

        let hosts = vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "[::1]".to_owned(),
        ];
        let with = |host: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, host.parse().unwrap());
            host_allowed(&headers, &hosts)
        };
        assert!(with("127.0.0.1:8750") && with("localhost") && with("[::1]:80"));
        assert!(!with("rebind.evil.example:8750") && !with("localhost.evil.com"));

        assert_eq!(id_key(&serde_json::json!(103)), "103");
        assert_eq!(id_key(&serde_json::json!(103.0)), "103");
        assert_eq!(id_key(&serde_json::json!(-0.0)), "0");
        assert_eq!(id_key(&serde_json::json!("103")), "\"103\"");

        assert_eq!(percent_decoded("a%2Bb+c").as_deref(), Some("a+b c"));
        assert!(same("token", "token") && !same("token", "tokens"));

        assert_eq!(served_type("image/png"), "image/png");
        assert_eq!(served_type("image/SVG+xml"), "application/octet-stream");
        assert_eq!(served_type("text/html"), "application/octet-stream");
    }
}
