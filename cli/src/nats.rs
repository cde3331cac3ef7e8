//! The NATS plumbing of the commands (see `rho_bridge_nats`): `[nats]` with the flags applied,
//! `[[remote]]` nodes' tools added to a host, and the export of `rho serve --nats URL` started and
//! flushed at exit. `rho watch --nats URL` follows the events in [`crate::watch`].

use std::sync::Mutex;
use std::time::Duration;

use rho_bridge_nats::{EventExport, ExportConfig, HostName, NatsConfig, RemoteConfig};
use rho_runtime::Host;

use crate::config::Config;

/// The NATS flags of `rho serve`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ExportFlags {
    /// Publish every event to this NATS server's JetStream (`nats://HOST:PORT`; replaces
    /// [nats] url), on the subjects rho.<host>.<type>.
    #[arg(long, value_name = "URL")]
    pub nats: Option<String>,
    /// This host's name in those subjects (default: [nats] host, else the machine's name).
    #[arg(long, value_name = "NAME", requires = "nats")]
    pub nats_host: Option<String>,
}

/// `config`'s `[nats]` with `url` (and `host`) replaced where given.
pub fn config_with(config: &Config, url: Option<&str>, host: Option<&str>) -> NatsConfig {
    let mut nats = config.nats.clone();
    if let Some(url) = url {
        nats.url = Some(url.to_owned());
    }
    if let Some(host) = host {
        nats.host = Some(host.to_owned());
    }
    nats
}

/// The host name of `nats`: the configured one, or this machine's.
pub fn host_name(nats: &NatsConfig) -> Result<HostName, rho_bridge_nats::NatsError> {
    match &nats.host {
        Some(name) => HostName::new(name),
        None => Ok(HostName::of_this_machine()),
    }
}

/// Adds the tools of the `rho node`s of each `[[remote]]` to `host`, waiting up to 1 s for the
/// nodes to announce them (so a one-shot command sees them). `Err` is the line saying which
/// remote cannot be used (credentials unreadable, a bad URL); a server that is down is not an
/// error: its nodes' tools come when it does.
pub async fn add_remotes(
    host: &Host,
    remotes: &[RemoteConfig],
    name: Option<&str>,
) -> Result<(), String> {
    if remotes.is_empty() {
        return Ok(());
    }
    let mut changes = host.subscribe_filtered(
        rho_runtime::Filter::default().types([rho_runtime::EventType::RemoteToolsChanged]),
    );
    for remote in remotes {
        let client = rho_bridge_nats::connect(&remote.nats_config(name))
            .await
            .map_err(|e| format!("[[remote]] {}: {e}", remote.nats))?;
        host.add_source(&remote.nats, rho_bridge_nats::NodeTools::new(client));
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        for _ in remotes {
            changes.recv().await;
        }
    })
    .await;
    Ok(())
}

/// The export of this process's host, flushed at its end ([`flush`]).
static EXPORT: Mutex<Option<EventExport>> = Mutex::new(None);

/// Starts exporting `host`'s events when `nats` names a server and exporting is on; one line on
/// stderr says where. `Err` is the line saying why it cannot.
pub async fn start_export(host: &Host, nats: &NatsConfig) -> Result<(), String> {
    let Some(url) = nats.url.as_deref().filter(|_| nats.export) else {
        return Ok(());
    };
    let name = host_name(nats).map_err(|e| e.to_string())?;
    let client = rho_bridge_nats::connect(nats)
        .await
        .map_err(|e| e.to_string())?;
    let mut config = ExportConfig::new(name.clone());
    config.stream = nats.stream.clone();
    let export = EventExport::start(host, client, config).map_err(|e| e.to_string())?;
    eprintln!(
        "rho: events to {url}, stream {}, subjects rho.{name}.<type>",
        nats.stream
    );
    *EXPORT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(export);
    Ok(())
}

/// Gives the export up to 2 s to publish the host's last events, then stops it.
pub async fn flush(host: &Host) {
    let export = EXPORT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    if let Some(export) = export {
        let last = host.bus().last_seq();
        if !export.confirmed(last, Duration::from_secs(2)).await {
            let status = export.status();
            eprintln!(
                "rho: {} events not confirmed by NATS at exit (they are in the journal)",
                status.behind()
            );
        }
        export.stop().await;
    }
}
