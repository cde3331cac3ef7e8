//! rho over NATS: a host's events to a JetStream stream ([`EventExport`]), followed from anywhere
//! ([`Follower`]).
//!
//! # Subjects and payloads
//!
//! Every event of a host goes to the stream (`RHO_EVENTS` unless configured) on the subject
//! `rho.<host>.<type>`: `<host>` the host's name ([`HostName`]), `<type>` the event's `type`
//! (`tool_execution_end`, `plugin_loaded`, ...). The payload is the event's JSON, the same line
//! as in the host's journal (`seq`, `ts_ms`, `type` and the type's fields). Headers:
//!
//! | header | value |
//! |---|---|
//! | `Nats-Msg-Id` | `<host>.<run>.<seq>`: JetStream drops a duplicate within the stream's duplicate window |
//! | `Rho-Host` | the host's name |
//! | `Rho-Run` | the host run (its start, Unix milliseconds): `seq` starts again at 1 in each run |
//! | `Rho-Seq` | the event's `seq` |
//! | `Rho-Cut` | present when a string field was cut to fit the server's largest message (the journal keeps it whole): the bytes cut |
//!
//! A subscriber in any language follows `rho.<host>.>` (one host) or `rho.*.>` (all) with a
//! JetStream consumer, and orders and deduplicates by (`Rho-Host`, `Rho-Run`, `Rho-Seq`): after an
//! outage a host's events may be stored slightly out of order, and a few twice.
//!
//! # Example
//!
//! ```no_run
//! # async fn demo(host: rho_runtime::Host) -> Result<(), rho_bridge_nats::NatsError> {
//! use rho_bridge_nats::{EventExport, ExportConfig, HostName, connect};
//! let client = connect(&rho_bridge_nats::NatsConfig {
//!     url: Some("nats://127.0.0.1:4222".into()),
//!     ..Default::default()
//! })
//! .await?;
//! let export = EventExport::start(&host, client, ExportConfig::new(HostName::new("build-1")?))?;
//! println!("{} events behind", export.status().behind());
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod config;
mod export;
mod follow;
mod name;
mod node;
mod remote;
pub mod rpc;
mod stream;

pub use config::{NatsConfig, RemoteConfig};
pub use export::{EventExport, ExportConfig, ExportStatus};
pub use follow::{Followed, Follower, HOLD};
pub use name::HostName;
pub use node::Node;
pub use remote::{MAX_TOOLS_PER_NODE, NodeTools};

use std::path::Path;

/// Why something on NATS could not be done: one line for a person.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NatsError {
    /// The configuration has no server.
    #[error("no NATS server configured (give --nats URL or [nats] url)")]
    NoServer,
    /// A credentials or token file could not be used.
    #[error("{}: {reason}", path.display())]
    Secret {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        reason: String,
    },
    /// The server could not be reached or refused us.
    #[error("NATS {url}: {reason}")]
    Connect {
        /// The server.
        url: String,
        /// Why.
        reason: String,
    },
    /// A name is not usable in a subject.
    #[error("`{0}` is not a usable host name: 1 to 64 letters, digits, `-` or `_`")]
    BadName(String),
    /// The host keeps no journal, which the export catches up from.
    #[error("the NATS export catches up from the host's journal: give the host a journal")]
    NoJournal,
    /// A JetStream request failed.
    #[error("JetStream: {0}")]
    JetStream(String),
}

/// A client for `config`'s server, authenticated as it says (credentials file or token file).
/// It connects in the background and reconnects forever: a server that is down now is not an
/// error, and what uses the client waits for it or reports it.
pub async fn connect(config: &NatsConfig) -> Result<async_nats::Client, NatsError> {
    let url = config.url.as_deref().ok_or(NatsError::NoServer)?;
    let mut options = async_nats::ConnectOptions::new()
        .name("rho")
        .retry_on_initial_connect()
        .max_reconnects(None);
    if let Some(path) = &config.credentials {
        options = options
            .credentials_file(path)
            .await
            .map_err(|e| secret_error(path, e.to_string()))?;
    }
    if let Some(path) = &config.token_file {
        options = options.token(read_token(path)?);
    }
    if let Some(path) = &config.nkey_file {
        options = options.nkey(read_token(path)?);
    }
    // Replies come to an inbox named after this host, node or watcher, so the server's
    // permissions can let each read its own replies only (`deploy/nats/rho.conf`).
    if let Some(name) = &config.host {
        options = options.custom_inbox_prefix(format!("_INBOX_{}", HostName::new(name)?));
    }
    options.connect(url).await.map_err(|e| NatsError::Connect {
        url: url.to_owned(),
        reason: e.to_string(),
    })
}

fn secret_error(path: &Path, reason: String) -> NatsError {
    NatsError::Secret {
        path: path.to_owned(),
        reason,
    }
}

/// A token file's first line; the file must be readable by its owner only.
fn read_token(path: &Path) -> Result<String, NatsError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|e| secret_error(path, e.to_string()))?;
    if meta.mode() & 0o077 != 0 {
        return Err(secret_error(
            path,
            format!(
                "readable by others (mode {:o}); chmod 600 it",
                meta.mode() & 0o777
            ),
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| secret_error(path, e.to_string()))?;
    let token = text.lines().next().unwrap_or_default().trim();
    if token.is_empty() {
        return Err(secret_error(path, "empty".into()));
    }
    Ok(token.to_owned())
}

/// The header names of an exported event.
pub mod header {
    /// The host's name.
    pub const HOST: &str = "Rho-Host";
    /// The host run.
    pub const RUN: &str = "Rho-Run";
    /// The event's seq.
    pub const SEQ: &str = "Rho-Seq";
    /// Bytes cut from string fields to fit the server's largest message.
    pub const CUT: &str = "Rho-Cut";
}
