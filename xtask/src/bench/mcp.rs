//! `mcp_call`: `echo` through `rho serve` from an MCP client, against the same client talking to a
//! minimal rmcp server with an in-binary echo tool (`xtask mcp-echo-server`).

use std::sync::Arc;
use std::time::Instant;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::TokioChildProcess;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::json;

use super::{Ctx, Figure, median};
use crate::plugins::target_dir;

/// The baseline server: one `echo` tool answered in the server's own code.
#[derive(Clone)]
struct EchoServer;

impl ServerHandler for EchoServer {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
        let schema = schema.as_object().cloned().unwrap_or_default();
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "echo",
            "Echo",
            Arc::new(schema),
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let text = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("text"))
            .and_then(|t| t.as_str())
            .unwrap_or_default()
            .to_owned();
        Ok(CallToolResponse::Complete(CallToolResult::success(vec![
            ContentBlock::text(text),
        ])))
    }
}

/// `xtask mcp-echo-server`: serves [`EchoServer`] on stdio until the client leaves.
pub fn echo_server() -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let service = EchoServer
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| e.to_string())?;
        service.waiting().await.map_err(|e| e.to_string()).map(drop)
    })
}

async fn per_call_us(
    command: tokio::process::Command,
    calls: usize,
    runs: usize,
) -> Result<f64, String> {
    let transport = TokioChildProcess::new(command).map_err(|e| e.to_string())?;
    let client = ().serve(transport).await.map_err(|e| e.to_string())?;
    let args = json!({"text": "hello"})
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut samples = Vec::new();
    for _ in 0..=runs {
        let started = Instant::now();
        for _ in 0..calls {
            let result = client
                .call_tool(CallToolRequestParams::new("echo").with_arguments(args.clone()))
                .await
                .map_err(|e| e.to_string())?;
            if result.is_error == Some(true) {
                return Err(format!("echo failed: {:?}", result.content));
            }
        }
        samples.push(started.elapsed().as_secs_f64() * 1e6 / calls as f64);
    }
    let _ = client.cancel().await;
    Ok(median(&mut samples[1..]))
}

/// `mcp_call`.
pub async fn figures(ctx: &Ctx) -> Result<Vec<Figure>, String> {
    let calls = if ctx.quick { 300 } else { 2000 };
    let runs = ctx.runs().min(9);
    let release = target_dir().join("release");
    let dir = std::env::temp_dir().join(format!("rho-bench-mcp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    std::fs::copy(ctx.plugin("echo"), dir.join("libecho.so")).map_err(|e| e.to_string())?;
    let mut rho = tokio::process::Command::new(release.join("rho"));
    rho.arg("serve").arg("--plugins").arg(&dir);
    let mut raw = tokio::process::Command::new(release.join("xtask"));
    raw.arg("mcp-echo-server");
    let rho_us = per_call_us(rho, calls, runs).await?;
    let raw_us = per_call_us(raw, calls, runs).await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(vec![Figure {
        name: "mcp_call".into(),
        value: rho_us,
        unit: "us/call".into(),
        baseline: "same client, minimal rmcp server with an in-binary echo".into(),
        baseline_value: raw_us,
        runs,
    }])
}
