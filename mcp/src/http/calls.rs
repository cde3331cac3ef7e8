//! The `tools/call` requests in flight over HTTP sessions, so that a client that goes away
//! cancels its call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio_util::sync::CancellationToken;

/// A call in flight over HTTP: its session and its JSON-RPC id (as JSON text: `2`, `"a"`).
pub(super) type CallKey = (String, String);

/// The `tools/call` requests of HTTP sessions in flight, with their cancellation: rmcp does not
/// cancel a session's request when its client disconnects, so the response body does (see
/// [`on_body_end`](super::body::on_body_end)). Every POST the gatekeeper passes on carries its
/// endpoint's `HttpCalls` in its extensions, where an MCP handler finds it ([`register`]). Cheap
/// to clone.
#[derive(Clone, Default)]
pub(super) struct HttpCalls(Arc<Mutex<HashMap<CallKey, CancellationToken>>>);

/// Registers the call of `request_id` (cancelled by `cancel`) until the returned guard drops,
/// when `parts` are those of a request over HTTP in an MCP session; `None` otherwise (stdio, or
/// no session).
pub fn register(
    parts: Option<&axum::http::request::Parts>,
    request_id: &serde_json::Value,
    cancel: CancellationToken,
) -> Option<Registered> {
    let parts = parts?;
    parts
        .extensions
        .get::<HttpCalls>()?
        .register(parts, request_id, cancel)
}

impl HttpCalls {
    fn register(
        &self,
        parts: &axum::http::request::Parts,
        request_id: &serde_json::Value,
        cancel: CancellationToken,
    ) -> Option<Registered> {
        let session = parts
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

    /// Cancels the call of `key` (its client went away).
    pub(super) fn cancel(&self, key: &CallKey) {
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
pub(super) fn id_key(id: &serde_json::Value) -> String {
    match id.as_f64() {
        Some(n) if n.fract() == 0.0 && n.abs() < 9e15 => format!("{}", n as i64),
        _ => id.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::id_key;

    #[test]
    fn ids_as_rmcp_reads_them() {
        assert_eq!(id_key(&serde_json::json!(103)), "103");
        assert_eq!(id_key(&serde_json::json!(103.0)), "103");
        assert_eq!(id_key(&serde_json::json!(-0.0)), "0");
        assert_eq!(id_key(&serde_json::json!("103")), "\"103\"");
    }
}
