//! A call of an MCP server's tool: on the server the source keeps running, or on a server
//! process of its own (`stateless = true`).

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use rho_runtime::{Answer, Failure, RemoteCall, RemoteTool, ToolCtx};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest,
    RequestMetaObject, ServerResult,
};
use rmcp::service::PeerRequestOptions;
use rmcp::{Peer, RoleClient};
use serde_json::Value;

use super::shared::{Down, GivenUp, Process, Shared, token_key};
use crate::convert;

/// One tool of the server, as the registry calls it.
pub(crate) struct McpTool {
    pub shared: Arc<Shared>,
    pub name: String,
}

/// Takes a call out of the calls in flight when it ends; ended before its answer (its timeout,
/// a cancellation), it tells the server (`notifications/cancelled`) and has the supervisor check
/// the server still answers.
struct InFlight {
    shared: Arc<Shared>,
    token: String,
    request: Option<(Peer<RoleClient>, rmcp::model::RequestId)>,
    tool: String,
    since: std::time::Instant,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.shared
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.token);
        if let Some((peer, id)) = self.request.take() {
            let _ = self.shared.abandoned.send(GivenUp {
                tool: self.tool.clone(),
                since: self.since,
            });
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let cancelled = CancelledNotificationParam::new(
                        Some(id),
                        Some("the host gave up on the call".into()),
                    );
                    let _ = peer.notify_cancelled(cancelled).await;
                });
            }
        }
    }
}

impl RemoteTool for McpTool {
    /// The call is a request to the server's process: the future only waits on its pipes.
    fn never_blocks(&self) -> bool {
        true
    }

    fn call(&self, args: Arc<Value>, ctx: ToolCtx) -> RemoteCall {
        let shared = self.shared.clone();
        let name = self.name.clone();
        Box::pin(async move {
            match shared.per_call.clone() {
                Some(per_call) => {
                    let (process, own, stop) = per_call.start(&shared).await?;
                    let answer = call_on(&process, &own, &name, &args, &ctx).await;
                    let _ = stop.send(());
                    answer
                }
                None => {
                    let process = shared.up().map_err(Failure::Unavailable)?;
                    call_on(&process, &shared, &name, &args, &ctx).await
                }
            }
        })
    }
}

/// Calls `name` on `process`, whose calls and progress `shared` keeps.
async fn call_on(
    process: &Process,
    shared: &Arc<Shared>,
    name: &str,
    args: &Value,
    ctx: &ToolCtx,
) -> Result<Answer, Failure> {
    let name = name.to_owned();
    let mut params = CallToolRequestParams::new(name.clone());
    if let Value::Object(map) = args {
        params = params.with_arguments(map.clone());
    }
    if let Some(traceparent) = ctx.traceparent() {
        let mut meta = RequestMetaObject::default();
        meta.0
            .insert("traceparent".into(), Value::String(traceparent.into()));
        params.meta = Some(meta);
    }
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let since = std::time::Instant::now();
    let sent = process
        .peer
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await;
    let result = match sent {
        Ok(handle) => {
            let token = token_key(&handle.progress_token);
            shared.register(&token, &name, since, ctx);
            let mut in_flight = InFlight {
                shared: shared.clone(),
                token,
                request: Some((process.peer.clone(), handle.id.clone())),
                tool: name.clone(),
                since,
            };
            let result = handle.await_response().await;
            in_flight.request = None;
            result
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(ServerResult::CallToolResult(result)) => convert::answer(&shared.name, result),
        Ok(other) => Err(Failure::crashed(format!(
            "mcp server `{}` answered the call of `{name}` with what is not a tool's \
             result: {other:?}",
            shared.name
        ))),
        // The server answered the request with an error: the tool's error.
        Err(rmcp::ServiceError::McpError(error)) => {
            Err(Failure::Tool(rho_runtime::ToolError::new(format!(
                "mcp server `{}` refused the call of `{name}`: {}",
                shared.name, error.message
            ))))
        }
        // A remote server whose connection failed (the request could not be sent, or the
        // transport closed): `unavailable`, saying the tool may have run if the request had
        // reached it before; the supervisor checks the server at once.
        Err(e @ (rmcp::ServiceError::TransportSend(_) | rmcp::ServiceError::TransportClosed))
            if shared.remote =>
        {
            let _ = shared.abandoned.send(GivenUp {
                tool: name.clone(),
                since,
            });
            Err(Failure::Unavailable(format!(
                "mcp server `{}` could not be reached for the call of `{name}` ({e}; had the \
                 request reached it before its connection failed, the tool may have run)",
                shared.name
            )))
        }
        // Any other failure of the exchange: the tool may have run; the server is checked.
        Err(e) if shared.remote => {
            let _ = shared.abandoned.send(GivenUp {
                tool: name.clone(),
                since,
            });
            Err(Failure::crashed(format!(
                "mcp server `{}` lost the call of `{name}` (it may have run): {e}",
                shared.name
            )))
        }
        Err(e) => {
            // How the server ended, once its supervisor has seen it (a moment).
            let mut ended = process.ended.clone();
            let how = tokio::time::timeout(Duration::from_secs(2), ended.wait_for(Option::is_some))
                .await
                .ok()
                .and_then(|seen| seen.ok().and_then(|down| down.clone()));
            Err(match how {
                Some(Down { why, hung }) => {
                    let text = format!(
                        "mcp server `{}` {why} during the call of `{name}`",
                        shared.name
                    );
                    // A call ended by another tool's hang: that tool is charged.
                    match hung.filter(|hung| *hung != name) {
                        Some(hung) => Failure::crashed_by(hung, text),
                        None => Failure::crashed(text),
                    }
                }
                None => Failure::crashed(format!(
                    "mcp server `{}` failed the call of `{name}`: {e}",
                    shared.name
                )),
            })
        }
    }
}
