//! Streamable HTTP servers as sources: connecting to a server at a URL (the `client-http` feature).
//! rho neither starts nor confines such a server; the source pings it while it serves and
//! reconnects with the backoff when it stops answering.

use std::sync::Arc;

use rmcp::RoleClient;
use rmcp::service::RunningService;

use super::config::McpServer;
use super::handler::Handler;
use super::shared::Shared;

/// Connects to the server at `url` and initializes the session within the entry's bound.
#[cfg(feature = "client-http")]
pub(crate) async fn connect(
    server: &McpServer,
    url: &str,
    shared: &Arc<Shared>,
) -> Result<RunningService<RoleClient, Handler>, String> {
    use rmcp::ServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    if let Some(file) = &server.token_file {
        config = config.auth_header(read_token(file)?);
    }
    // reqwest builds its client with the process's rustls provider, for http too: rustls over
    // ring, the one TLS provider in rho's tree (one installed first by the host wins).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let transport = StreamableHttpClientTransport::from_config(config);
    let handler = Handler {
        shared: shared.clone(),
    };
    match tokio::time::timeout(server.start_timeout(), handler.serve(transport)).await {
        Ok(Ok(running)) => Ok(running),
        Ok(Err(e)) => Err(format!("{url} did not initialize: {e}")),
        Err(_) => Err(format!(
            "{url} did not initialize within {} ms",
            server.start_timeout_ms
        )),
    }
}

/// Without the `client-http` feature: refused (the entry's check says so first).
#[cfg(not(feature = "client-http"))]
pub(crate) async fn connect(
    _server: &McpServer,
    url: &str,
    _shared: &Arc<Shared>,
) -> Result<RunningService<RoleClient, Handler>, String> {
    Err(format!(
        "{url}: this build has no Streamable HTTP client (rho-mcp's `client-http` feature)"
    ))
}

/// The bearer token in `file` (trimmed): a file others may read or write is refused.
#[cfg(feature = "client-http")]
fn read_token(file: &std::path::Path) -> Result<String, String> {
    use std::os::unix::fs::PermissionsExt;
    let shown = file.display();
    let meta = std::fs::metadata(file).map_err(|e| format!("the token file {shown}: {e}"))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "the token file {shown} may be read or written by others (chmod 600 it)"
        ));
    }
    let token =
        std::fs::read_to_string(file).map_err(|e| format!("the token file {shown}: {e}"))?;
    let token = token.trim();
    if token.is_empty() {
        return Err(format!("the token file {shown} is empty"));
    }
    Ok(token.to_owned())
}
