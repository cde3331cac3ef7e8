//! `[otel]`: a host's calls as OpenTelemetry spans and metrics over OTLP (rho-otel), for every
//! command that builds a host; off unless an endpoint is configured (`[otel] endpoint` or
//! `OTEL_EXPORTER_OTLP_ENDPOINT`), and `OTEL_SDK_DISABLED=true` wins. One export per process;
//! [`flush`] sends what is queued before the process exits.

use std::sync::OnceLock;

use rho_otel::{OtelConfig, OtelExport};
use rho_runtime::Host;

static EXPORT: OnceLock<OtelExport> = OnceLock::new();

/// Starts exporting `host`'s calls as `config` and the environment say; nothing when neither
/// names an endpoint. `Err`: one line (a bad variable, an exporter that cannot be built).
pub fn start(host: &Host, config: &OtelConfig) -> Result<(), String> {
    let config = config.clone().with_env().map_err(|e| e.to_string())?;
    if !config.enabled() || EXPORT.get().is_some() {
        return Ok(());
    }
    let export = OtelExport::start(host, &config).map_err(|e| e.to_string())?;
    let _ = EXPORT.set(export);
    Ok(())
}

/// The running export, if any.
pub fn export() -> Option<&'static OtelExport> {
    EXPORT.get()
}

/// The running export as an observer of an MCP server's requests (a SERVER span each), if
/// any.
pub fn observer() -> Option<std::sync::Arc<dyn rho_mcp::RequestObserver>> {
    export().map(|export| std::sync::Arc::new(ServerSpans(export)) as _)
}

/// An MCP server's requests as SERVER spans of the export.
struct ServerSpans(&'static OtelExport);

/// One request's SERVER span, exported when it ends.
struct Request {
    export: &'static OtelExport,
    span: rho_otel::ServerSpan,
}

impl rho_mcp::RequestObserver for ServerSpans {
    fn begin(&self, request: rho_mcp::RequestInfo) -> Box<dyn rho_mcp::RequestSpan> {
        let inbound = request.traceparent.as_deref();
        let mut span =
            rho_otel::ServerSpan::begin(request.method, request.target.as_deref(), inbound);
        span.request_id = request.request_id;
        span.protocol_version = request.protocol_version;
        span.transport = request.transport.as_str();
        span.session_id = request.session;
        span.principal = Some(request.principal);
        Box::new(Request {
            export: self.0,
            span,
        })
    }
}

impl rho_mcp::RequestSpan for Request {
    fn traceparent(&self) -> Option<String> {
        Some(self.span.traceparent())
    }

    fn end(self: Box<Self>, error_type: Option<String>) {
        self.export.server_span(self.span.ended(error_type));
    }
}

/// Sends what is queued and stops the export (before the process exits): one try, within
/// `[otel] exit_timeout_ms`; what did not go out is said in one line on stderr.
pub async fn flush() {
    if let Some(export) = EXPORT.get() {
        let report = export.shutdown().await;
        if !report.complete() {
            eprintln!(
                "rho: OpenTelemetry: {}",
                crate::render::terminal_safe(&report.to_string())
            );
        }
    }
}
