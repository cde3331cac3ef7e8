//! What a server tells an observer of its requests: the seam through which a tracing exporter
//! (the `rho` binary's OpenTelemetry SERVER spans, rho-otel's `ServerSpan`) sees them, so this
//! crate depends on no exporter.
//!
//! ```
//! use rho_mcp::{RequestInfo, RequestObserver, RequestSpan};
//! struct Count(std::sync::atomic::AtomicU64);
//! struct Nothing;
//! impl RequestSpan for Nothing {
//!     fn traceparent(&self) -> Option<String> { None }
//!     fn end(self: Box<Self>, _error_type: Option<String>) {}
//! }
//! impl RequestObserver for Count {
//!     fn begin(&self, _request: RequestInfo) -> Box<dyn RequestSpan> {
//!         self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
//!         Box::new(Nothing)
//!     }
//! }
//! ```

use rmcp::RoleServer;
use rmcp::service::RequestContext;
use serde_json::Value;

/// How a request reached the server (OpenTelemetry's `network.transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// stdio: a pipe.
    Pipe,
    /// Streamable HTTP: TCP.
    Tcp,
}

impl Transport {
    /// `pipe` or `tcp`.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Pipe => "pipe",
            Transport::Tcp => "tcp",
        }
    }
}

/// One request as its observer is told of it when it arrives.
#[derive(Debug, Clone)]
pub struct RequestInfo {
    /// The JSON-RPC method (`tools/list`, `tools/call`).
    pub method: &'static str,
    /// What it names: the tool of a `tools/call`.
    pub target: Option<String>,
    /// The W3C trace context the client sent in the request's `_meta.traceparent`, unchecked.
    pub traceparent: Option<String>,
    /// The request's JSON-RPC id, as text.
    pub request_id: String,
    /// The MCP revision of the request (2026-07-28) or its session (2025 era), if known.
    pub protocol_version: Option<String>,
    /// How it arrived.
    pub transport: Transport,
    /// A digest of the HTTP session's id (32 hex digits), never the id itself: whoever holds
    /// the id can act in the session.
    pub session: Option<String>,
    /// Who sent it (OpenTelemetry's `enduser.id`, `enduser.scope`).
    pub principal: std::sync::Arc<rho_runtime::Principal>,
}

/// Told of every request a [`RhoServer`](crate::RhoServer) answers, when it arrives; the span it
/// hands back is ended when the request is answered. Called on the request's task: it must not
/// block.
pub trait RequestObserver: Send + Sync + 'static {
    /// A request arrives.
    fn begin(&self, request: RequestInfo) -> Box<dyn RequestSpan>;
}

/// One observed request, from its arrival to its answer.
pub trait RequestSpan: Send {
    /// The trace context the request's calls carry, this span their parent (`None`: the
    /// request's own).
    fn traceparent(&self) -> Option<String>;
    /// The request is answered; `error_type` says how it failed, if it did (`tool_error` for a
    /// call whose result is an error, else the JSON-RPC error code).
    fn end(self: Box<Self>, error_type: Option<String>);
}

impl RequestInfo {
    /// The request of `method` on `target` that arrives now with `context`.
    pub(crate) fn of(
        method: &'static str,
        target: Option<&str>,
        context: &RequestContext<RoleServer>,
    ) -> RequestInfo {
        #[cfg(feature = "server-http")]
        let parts = context.extensions.get::<axum::http::request::Parts>();
        #[cfg(not(feature = "server-http"))]
        let parts: Option<&()> = None;
        RequestInfo {
            method,
            target: target.map(str::to_owned),
            traceparent: context
                .meta
                .get("traceparent")
                .and_then(Value::as_str)
                .map(str::to_owned),
            request_id: request_id(context),
            protocol_version: context
                .meta
                .protocol_version()
                .map(|v| v.to_string())
                .or_else(|| {
                    context
                        .peer
                        .peer_info()
                        .map(|info| info.protocol_version.to_string())
                }),
            transport: if parts.is_some() {
                Transport::Tcp
            } else {
                Transport::Pipe
            },
            #[cfg(feature = "server-http")]
            session: parts
                .and_then(|p| p.headers.get("mcp-session-id"))
                .and_then(|v| v.to_str().ok())
                .map(|id| rho_runtime::sha256_hex(id.as_bytes())[..32].to_owned()),
            #[cfg(not(feature = "server-http"))]
            session: None,
            principal: principal_of(context),
        }
    }
}

/// The JSON-RPC id of `context`'s request, as text.
pub(crate) fn request_id(context: &RequestContext<RoleServer>) -> String {
    match serde_json::to_value(&context.id) {
        Ok(Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".into(),
    }
}

/// Who sent `context`'s request: over HTTP, who the endpoint told it was (a token's principal,
/// `anonymous` on an open loopback listener); else this machine's user (stdio).
pub(crate) fn principal_of(
    context: &RequestContext<RoleServer>,
) -> std::sync::Arc<rho_runtime::Principal> {
    principal_in(&context.extensions)
}

/// Who sent the message whose `extensions` these are ([`principal_of`]).
pub(crate) fn principal_in(
    extensions: &rmcp::model::Extensions,
) -> std::sync::Arc<rho_runtime::Principal> {
    #[cfg(feature = "server-http")]
    if let Some(parts) = extensions.get::<axum::http::request::Parts>() {
        return parts
            .extensions
            .get::<std::sync::Arc<rho_runtime::Principal>>()
            .cloned()
            .unwrap_or_else(|| std::sync::Arc::new(rho_runtime::Principal::anonymous()));
    }
    let _ = extensions;
    std::sync::Arc::new(rho_runtime::Principal::local())
}

/// How the message whose `extensions` these are came: over HTTP, else stdio.
pub(crate) fn via_in(extensions: &rmcp::model::Extensions) -> rho_runtime::Via {
    #[cfg(feature = "server-http")]
    if extensions.get::<axum::http::request::Parts>().is_some() {
        return rho_runtime::Via::Http;
    }
    let _ = extensions;
    rho_runtime::Via::Stdio
}
