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

/// Sends what is queued and stops the export (before the process exits).
pub async fn flush() {
    if let Some(export) = EXPORT.get() {
        export.shutdown().await;
    }
}
