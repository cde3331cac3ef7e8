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
//!   (`serve.max_requests`, then 503), besides the calls running at once (`serve.max_calls`).
//!
//! A client that disconnects mid-call cancels its call (rmcp cancels the request's token; the
//! runner ends the call once and stops its worker).
//!
//! `/events` streams the host's events as Server-Sent Events (`id:` the event's seq, `data:` its
//! JSON, the journal's format), behind the same guard. A client that reconnects with
//! `Last-Event-ID: SEQ` (or `?after=SEQ`) gets every later event exactly once: the missed ones
//! from the journal, then the live ones; a subscriber that lags is caught up the same way.

use std::collections::HashMap;
use std::net::SocketAddr;
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

use crate::serve::RhoServer;

/// A call in flight over HTTP: its session and its JSON-RPC id (as JSON text: `2`, `"a"`).
type CallKey = (String, String);

/// The `tools/call` requests of HTTP sessions in flight, with their cancellation: rmcp does not
/// cancel a session's request when its client disconnects, so the response body does (see
/// [`CancelOnDrop`]). Cheap to clone.
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

/// A response body that cancels its call when dropped before its end (the client went away).
struct CancelOnDrop<S> {
    inner: S,
    cancel: Option<(HttpCalls, CallKey)>,
}

impl<S: tokio_stream::Stream + Unpin> tokio_stream::Stream for CancelOnDrop<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let polled = Pin::new(&mut self.inner).poll_next(cx);
        if let Poll::Ready(None) = polled {
            self.cancel = None;
        }
        polled
    }
}

impl<S> Drop for CancelOnDrop<S> {
    fn drop(&mut self) {
        if let Some((calls, key)) = self.cancel.take() {
            calls.cancel(&key);
        }
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
    /// Serve the live page at `/`.
    pub web: bool,
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
        .any(|given| same(given, token))
}

/// `a == b` in time independent of where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |diff, (x, y)| diff | (x ^ y))
            == 0
}

/// Whether `headers` carry `Authorization: Bearer <token>` (compared in constant time).
fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
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
}

async fn gatekeeper(
    State(keeper): State<Arc<Gatekeeper>>,
    request: Request,
    next: Next,
) -> Response {
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
    let Some(session) = session.filter(|_| request.method() == axum::http::Method::POST) else {
        return next.run(request).await;
    };
    // A session's POST: read it (bounded) to learn which call the response belongs to.
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, keeper.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                "rho: the request body is too large (serve.max_body_bytes)\n",
            )
                .into_response();
        }
    };
    let call = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .filter(|m| m["method"] == "tools/call")
        .map(|m| (session, m["id"].to_string()));
    let response = next
        .run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await;
    match call {
        None => response,
        Some(key) => {
            let (parts, body) = response.into_parts();
            let body = CancelOnDrop {
                inner: body.into_data_stream(),
                cancel: Some((keeper.calls.clone(), key)),
            };
            Response::from_parts(parts, axum::body::Body::from_stream(body))
        }
    }
}

/// The seq after which a client wants events: `Last-Event-ID`, else `?after=`, else now.
fn resume_after(request: &Request) -> Option<u64> {
    let header = request
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok());
    header.or_else(|| {
        request
            .uri()
            .query()?
            .split('&')
            .find_map(|pair| pair.strip_prefix("after="))?
            .parse()
            .ok()
    })
}

/// `GET /events`: the bus as Server-Sent Events, resumable by seq (see the module doc).
async fn events(State(host): State<rho_core::Host>, request: Request) -> Response {
    use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
    let (tx, rx) = tokio::sync::mpsc::channel::<SseEvent>(256);
    // Subscribed before anything is read back: every event is either in the journal up to
    // `now` or comes live after it.
    let mut live = host.subscribe();
    let now = host.bus().last_seq();
    // A seq beyond this run's is of an earlier run of the server: this run from its start.
    let after = resume_after(&request)
        .map(|seq| if seq > now { 0 } else { seq })
        .unwrap_or(now);
    tokio::spawn(async move {
        // At once, so the client knows the stream is live (a response's head may wait for its
        // first bytes).
        if tx
            .send(SseEvent::default().comment("rho events"))
            .await
            .is_err()
        {
            return;
        }
        let mut last = after;
        let send = async |event: &rho_core::Event, last: &mut u64| {
            if event.seq <= *last {
                return true;
            }
            *last = event.seq;
            let data = serde_json::to_string(event).unwrap_or_default();
            tx.send(SseEvent::default().id(event.seq.to_string()).data(data))
                .await
                .is_ok()
        };
        // Read back what the client missed (`after` to `now`), from the journal.
        let catch_up = async |host: &rho_core::Host, from: u64, to: u64| {
            if from > to {
                return Vec::new();
            }
            let host = host.clone();
            let read = tokio::task::spawn_blocking(move || host.replay(from, to)).await;
            match read {
                Ok(Some(Ok(events))) => events,
                _ => Vec::new(),
            }
        };
        for event in catch_up(&host, after + 1, now).await {
            if !send(&event, &mut last).await {
                return;
            }
        }
        while let Some(item) = live.recv().await {
            match item {
                rho_core::BusItem::Event(event) => {
                    if !send(&event, &mut last).await {
                        return;
                    }
                }
                rho_core::BusItem::Lagged { .. } => {
                    let now = host.bus().last_seq();
                    for event in catch_up(&host, last + 1, now).await {
                        if !send(&event, &mut last).await {
                            return;
                        }
                    }
                }
            }
        }
    });
    let stream =
        tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, std::convert::Infallible>);
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
        ],
        include_str!("web/page.html"),
    )
        .into_response()
}

/// `GET /images/SHA256`: the bytes of an image a recent call answered (`Bus::image`).
async fn image(
    State(host): State<rho_core::Host>,
    axum::extract::Path(sha256): axum::extract::Path<String>,
) -> Response {
    match host.bus().image(&sha256) {
        Some(image) => {
            // Only image types a browser shows as images; anything else as bytes to download.
            let mime = if image.mime_type.starts_with("image/")
                && !image.mime_type.contains("svg")
                && image.mime_type.len() < 64
            {
                image.mime_type.clone()
            } else {
                "application/octet-stream".to_owned()
            };
            (
                [
                    (header::CONTENT_TYPE, mime),
                    (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
                    (header::CACHE_CONTROL, "private, max-age=86400".to_owned()),
                ],
                image.bytes,
            )
                .into_response()
        }
        None => (StatusCode::NOT_FOUND, "rho: no such recent image\n").into_response(),
    }
}

/// Serves `server` at `http://addr/mcp` until `stop` is cancelled. Returns once the listener is
/// bound (the serving goes on in a task), or why it could not be.
pub async fn start(
    server: RhoServer,
    host: rho_core::Host,
    calls: HttpCalls,
    addr: SocketAddr,
    guard: Guard,
    stop: CancellationToken,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), HttpError> {
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_origins(guard.allowed_origins.clone())
        .with_max_request_body_bytes(guard.max_body_bytes)
        .with_cancellation_token(stop.child_token());
    if guard.token.is_some() {
        // With a token, any name may reach the server: rebinding gains nothing without it.
        config = config.disable_allowed_hosts();
    }
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let keeper = Arc::new(Gatekeeper {
        token: guard.token,
        in_flight: Arc::new(tokio::sync::Semaphore::new(guard.max_requests)),
        max_body_bytes: guard.max_body_bytes,
        calls,
    });
    let mut app = axum::Router::new()
        .route(
            "/events",
            axum::routing::get(events).with_state(host.clone()),
        )
        .route(
            "/images/{sha256}",
            axum::routing::get(image).with_state(host),
        );
    if guard.web {
        app = app.route("/", axum::routing::get(page));
    }
    let app = app
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(keeper, gatekeeper));
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
    // Answers end with small writes (the last SSE chunk): without TCP_NODELAY each waits for the
    // client's delayed ACK, 40 ms a call.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set");
        }
    });
    let task = tokio::spawn(async move {
        let serving = axum::serve(listener, app).with_graceful_shutdown(async move {
            stop.cancelled().await;
        });
        if let Err(e) = serving.await {
            tracing::error!(error = %e, "the HTTP server failed");
        }
    });
    Ok((bound, task))
}
