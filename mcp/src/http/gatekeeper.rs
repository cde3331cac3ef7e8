//! The guard of every route: origins and host names, the token, bounded bodies and requests in
//! flight, MCP sessions admitted and closed, and calls cancelled when their client goes away.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use super::admission::{Room, Sessions};
use super::body::{ReadBody, on_body_end, read_bounded};
use super::calls::{HttpCalls, id_key};
use super::connections::Peer;
use tokio_util::sync::CancellationToken;

use super::auth::Access;
use super::guard::{Guard, host_allowed, origin_allowed, query_token};
use super::refusal::{Refusal, bearer};
use crate::server::jsonrpc::{self, Verdict};

/// The state of [`gatekeeper`], one per endpoint.
pub(super) struct Gatekeeper {
    /// How callers are told apart.
    access: Access,
    /// Where refusals are said (`access_refused` events).
    bus: rho_runtime::Bus,
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
    /// Who opened each session and when it was last active (see [`super::admission`]).
    sessions: Arc<Sessions>,
}

impl Gatekeeper {
    /// The gatekeeper of an endpoint bound at `bound` with `guard`, closing `rmcp_sessions`' idle
    /// sessions until `stop`.
    pub(super) fn start(
        guard: Guard,
        bus: rho_runtime::Bus,
        bound: SocketAddr,
        rmcp_sessions: Arc<LocalSessionManager>,
        stop: &CancellationToken,
    ) -> Arc<Gatekeeper> {
        if let Access::OAuth(verifier) = &guard.access {
            verifier.bound_at(bound);
        }
        let open = matches!(guard.access, Access::Open);
        let allowed_hosts = open.then(|| {
            let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "[::1]", "::1"]
                .map(String::from)
                .to_vec();
            hosts.push(match bound.ip() {
                IpAddr::V6(ip) => format!("[{ip}]"),
                ip => ip.to_string(),
            });
            hosts
        });
        let every = (guard.limits.sessions.idle / 4).max(std::time::Duration::from_millis(250));
        let keeper = Arc::new(Gatekeeper {
            access: guard.access,
            bus,
            in_flight: Arc::new(tokio::sync::Semaphore::new(guard.limits.max_requests)),
            max_body_bytes: guard.limits.max_body_bytes,
            calls: HttpCalls::default(),
            allowed_origins: guard.allowed_origins.clone(),
            allowed_hosts,
            rmcp_sessions,
            sessions: Arc::new(Sessions::new(
                guard.limits.sessions.max,
                guard.limits.sessions.max_per_peer,
                guard.limits.sessions.idle,
            )),
        });
        // Sessions idle past their life are closed, a few times per life.
        let sweeping = keeper.clone();
        let swept = stop.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    () = swept.cancelled() => return,
                }
                close_sessions(&sweeping.rmcp_sessions, sweeping.sessions.expired()).await;
            }
        });
        keeper
    }
}

/// How long a client may take to send a request body.
const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

pub(super) async fn gatekeeper(
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
    let peer_address = request
        .extensions()
        .get::<Peer>()
        .map_or(IpAddr::from([127, 0, 0, 1]), |p| p.0);
    // Where a client learns how to get a token: open to all (RFC 9728).
    let metadata = request
        .uri()
        .path()
        .starts_with("/.well-known/oauth-protected-resource");
    let principal = if metadata {
        Arc::new(rho_runtime::Principal::anonymous())
    } else {
        // What the caller is read from (a request's body is not shared across the await).
        let headers = request.headers().clone();
        let query = (request.method() == axum::http::Method::GET)
            .then(|| query_token(&request))
            .flatten();
        match keeper.caller(&headers, query).await {
            Ok(principal) => principal,
            Err(refusal) => return keeper.refused(refusal, peer_address),
        }
    };
    let mut request = request;
    // The token stops here: nothing behind the gatekeeper (rmcp, a tool, a source) sees it.
    request.headers_mut().remove(header::AUTHORIZATION);
    request.extensions_mut().insert(principal.clone());
    let owner = principal.to_string();
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
    let peer = peer_address;
    // A session is its opener's: another principal holding its id is answered as if it were
    // unknown.
    if let Some(id) = &session
        && !keeper.sessions.usable_by(id, &owner)
    {
        return keeper.refused(Refusal::foreign_session(), peer);
    }
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
    let (mut parts, body) = request.into_parts();
    // An MCP handler registers its calls here (`calls::register`).
    parts.extensions.insert(keeper.calls.clone());
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
    // A tool that needs scopes of its own: read off the call, through `rho_call_tool` too
    // (OAuth only).
    if method == Some("tools/call")
        && let Access::OAuth(verifier) = &keeper.access
        && verifier.scopes_per_tool()
        && let Some(tool) = called_tool(&text)
        && let Some(refusal) = verifier.tool_refusal(&principal, &tool)
    {
        return keeper.refused(refusal, peer);
    }
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
        keeper.sessions.opened(id, peer, owner);
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

impl Gatekeeper {
    /// Who sent a request of `headers` (and, for a GET, the query's `token=`: the page's
    /// `EventSource` and images send no headers of their own), or why it is refused.
    async fn caller(
        &self,
        headers: &axum::http::HeaderMap,
        query: Option<String>,
    ) -> Result<Arc<rho_runtime::Principal>, Refusal> {
        match &self.access {
            Access::Open => Ok(Arc::new(rho_runtime::Principal::anonymous())),
            Access::Tokens(tokens) => {
                let given = bearer(headers)
                    .map(str::to_owned)
                    .or(query)
                    .ok_or_else(|| Refusal::unauthorized("no token"))?;
                tokens.principal(&given).map(Arc::new)
            }
            Access::OAuth(verifier) => match bearer(headers) {
                None => Err(verifier.no_token()),
                Some(token) => verifier.principal(token).await,
            },
        }
    }

    /// The response of a refusal, said on the bus (`access_refused`: why, never the token).
    fn refused(&self, refusal: Refusal, peer: IpAddr) -> Response {
        tracing::info!(status = refusal.status, reason = %refusal.reason, %peer, "a request refused");
        self.bus.publish(
            None,
            rho_runtime::EventKind::AccessRefused {
                status: refusal.status,
                reason: refusal.reason.clone(),
                peer: peer.to_string(),
            },
        );
        let (status, text) = match refusal.status {
            403 => (
                StatusCode::FORBIDDEN,
                "rho: the token lacks a scope this needs",
            ),
            404 => (StatusCode::NOT_FOUND, "rho: no such MCP session"),
            _ => (
                StatusCode::UNAUTHORIZED,
                "rho: a valid bearer token is required (Authorization: Bearer TOKEN)",
            ),
        };
        // Whose a session is stays in the journal.
        let body = match refusal.status {
            404 => format!("{text}\n"),
            _ => format!("{text}: {}\n", refusal.reason),
        };
        let mut response = (status, body).into_response();
        if !refusal.challenge.is_empty()
            && let Ok(value) = refusal.challenge.parse()
        {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }
}

/// The tool a `tools/call` request of body `text` calls: the one it names, or the one its
/// `rho_call_tool` names.
fn called_tool(text: &str) -> Option<String> {
    let request: serde_json::Value = serde_json::from_str(text).ok()?;
    let params = &request["params"];
    let name = params["name"].as_str()?;
    match name {
        crate::server::meta_tools::CALL => params["arguments"]["name"].as_str().map(str::to_owned),
        name => Some(name.to_owned()),
    }
}

/// A JSON-RPC error response over HTTP.
fn json_rpc_error(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// `response` with a body that ends session `id`'s request when it ends (or is dropped: the
/// client went away).
fn ends_session_request(response: Response, sessions: &Arc<Sessions>, id: &str) -> Response {
    let (sessions, id) = (sessions.clone(), id.to_owned());
    on_body_end(response, move |_| sessions.request_ended(&id))
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
