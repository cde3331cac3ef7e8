//! The sections of `rho.toml` this crate reads: `[nats]` ([`NatsConfig`], the server this host
//! talks to and as whom) and `[[remote]]` ([`RemoteConfig`], the `rho node`s whose tools it
//! serves). A program that reads `rho.toml` composes them with the host's own sections.

use std::path::{Path, PathBuf};

use rho_runtime::{ConfigError, resolve_path};

use crate::HostName;
use serde::{Deserialize, Serialize};

/// `[[remote]]`: the `rho node`s reachable through one NATS server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteConfig {
    /// The server (`nats://HOST:PORT`).
    pub nats: String,
    /// A NATS credentials file.
    #[serde(default)]
    pub credentials: Option<PathBuf>,
    /// A file whose first line is the server's token (owner-only).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// A file whose first line is this host's NKey seed (owner-only).
    #[serde(default)]
    pub nkey_file: Option<PathBuf>,
}

impl RemoteConfig {
    /// The connection settings of this remote, as a [`NatsConfig`], for the host named `host`
    /// (its `[nats] host`: the name its reply inbox carries).
    pub fn nats_config(&self, host: Option<&str>) -> NatsConfig {
        NatsConfig {
            url: Some(self.nats.clone()),
            host: host.map(str::to_owned),
            credentials: self.credentials.clone(),
            token_file: self.token_file.clone(),
            nkey_file: self.nkey_file.clone(),
            ..NatsConfig::default()
        }
    }
}

/// `nats`: the NATS server (with JetStream) this host talks to, and as whom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatsConfig {
    /// The server (`nats://HOST:PORT`; several, comma-separated, for a cluster). None: no NATS.
    pub url: Option<String>,
    /// This host's name in subjects (`rho.<host>.<type>`): letters, digits, `-` and `_`.
    /// Default: the machine's host name, so cleaned.
    pub host: Option<String>,
    /// A NATS credentials file (JWT and NKey seed), for servers with decentralized auth.
    pub credentials: Option<PathBuf>,
    /// A file whose first line is the server's token (readable by its owner only).
    pub token_file: Option<PathBuf>,
    /// A file whose first line is this user's NKey seed (`SU...`; readable by its owner only),
    /// for servers that list users by NKey with permissions of their own (`deploy/nats/rho.conf`).
    pub nkey_file: Option<PathBuf>,
    /// The JetStream stream the events go to (created if absent, on subjects `rho.>`).
    pub stream: String,
    /// Publish the host's events to the stream (`rho serve` with a `url`).
    pub export: bool,
}

impl Default for NatsConfig {
    /// No server; the stream `RHO_EVENTS`; events exported once a server is given.
    fn default() -> Self {
        NatsConfig {
            url: None,
            host: None,
            credentials: None,
            token_file: None,
            nkey_file: None,
            stream: "RHO_EVENTS".into(),
            export: true,
        }
    }
}

impl NatsConfig {
    /// Checks the names (`nats.host`, `nats.stream`): what NATS accepts in subjects and stream
    /// names.
    pub fn check(&self) -> Result<(), ConfigError> {
        let names = [
            ("nats.host", self.host.as_deref()),
            ("nats.stream", Some(self.stream.as_str())),
        ];
        for (key, name) in names {
            if let Some(name) = name
                && HostName::new(name).is_err()
            {
                return Err(ConfigError {
                    key: key.to_owned(),
                    problem: format!(
                        "`{name}`: 1 to 64 letters, digits, `-` or `_` (it is a NATS name)"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Makes its files (credentials, token, NKey seed) relative to `base`, the configuration
    /// file's directory.
    pub fn resolve_paths(&mut self, base: &Path) {
        resolve_files(
            base,
            [
                &mut self.credentials,
                &mut self.token_file,
                &mut self.nkey_file,
            ],
        );
    }
}

impl RemoteConfig {
    /// Makes its files (credentials, token, NKey seed) relative to `base`, the configuration
    /// file's directory.
    pub fn resolve_paths(&mut self, base: &Path) {
        resolve_files(
            base,
            [
                &mut self.credentials,
                &mut self.token_file,
                &mut self.nkey_file,
            ],
        );
    }
}

/// The files of a NATS connection made relative to `base` where they are relative.
fn resolve_files(base: &Path, files: [&mut Option<PathBuf>; 3]) {
    for path in files.into_iter().flatten() {
        resolve_path(base, path);
    }
}
