//! [`HostConfig`]: a host's settings as a configuration file states them (`rho.toml` is one),
//! deserialisable with serde from any format, with every number range-checked and relative paths
//! resolved against the file's directory. [`HostBuilder::config`](crate::HostBuilder::config)
//! applies it.
//!
//! ```
//! let config: rho_runtime::HostConfig = serde_json::from_str(r#"{
//!     "plugins": [{ "dir": "plugins", "isolate": true }],
//!     "runner": { "default_timeout_ms": 5000 },
//!     "gate": [{ "tool": "exit_*", "action": "deny" }]
//! }"#).unwrap();
//! config.check().unwrap();
//! assert_eq!(config.runner_config().default_timeout.as_millis(), 5000);
//! ```
//!
//! Every section and key is optional; an unknown key is an error (a typo never passes silently).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::agent::settings::{CallOrder, KeepDetails, LoopConfig};
use crate::call::rules::{Action, GateRule};
use crate::call::runner::RunnerConfig;
use crate::isolate::WorkerOptions;
use crate::plugin::options::{DirOptions, Isolation};
use crate::registry::health::QuarantinePolicy;
use rho_protocol::Grants;
use rho_worker::loader::trust::Trust;

/// The longest timeout a configuration may give, milliseconds (a day).
pub const MAX_TIMEOUT_MS: u64 = 86_400_000;

/// The most calls of one turn at once a configuration may give.
pub const MAX_PARALLEL: u64 = 1024;

/// A host's settings: plugin directories, the runner and the loop, per-tool timeouts, quarantine,
/// isolated workers, gate rules, and serving over MCP.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    /// Plugin directories, in rank order.
    #[serde(default)]
    pub plugins: Vec<PluginSource>,
    /// The runner and the agent loop.
    #[serde(default)]
    pub runner: RunnerSettings,
    /// Per-tool timeouts, milliseconds; they win over the tools' own.
    #[serde(default)]
    pub timeouts: HashMap<String, u64>,
    /// When a tool is quarantined.
    #[serde(default)]
    pub quarantine: QuarantinePolicy,
    /// Worker processes of isolated plugins (grants included, for every directory).
    #[serde(default)]
    pub workers: WorkerOptions,
    /// Gate rules, in order: the first whose pattern matches decides; no match allows.
    #[serde(default)]
    pub gate: Vec<GateRule>,
    /// Serving the host's tools to MCP clients (`rho serve`).
    #[serde(default)]
    pub serve: ServeConfig,
    /// NATS: where the host's events go and other hosts' tools come from (`rho-bridge-nats`).
    #[serde(default)]
    pub nats: NatsConfig,
    /// Other hosts whose tools this host serves too (`rho node`s over NATS), in rank order after
    /// the plugin directories.
    #[serde(default)]
    pub remote: Vec<RemoteConfig>,
}

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

/// One plugin directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginSource {
    /// The directory (relative paths are relative to the configuration file).
    pub dir: PathBuf,
    /// Run its plugins out of process, in sandboxed workers (the default); `false` runs them in
    /// the host's process, for plugins the host trusts as its own code.
    #[serde(default = "yes")]
    pub isolate: bool,
    /// Load files other users can write.
    #[serde(default)]
    pub trust_any_writer: bool,
    /// How many versions of one plugin file may stay mapped in process.
    pub max_versions: Option<usize>,
    /// The largest plugin file loaded, bytes.
    pub max_file_size: Option<u64>,
    /// How long loading one file may take, milliseconds.
    pub load_timeout_ms: Option<u64>,
    /// What its isolated plugins may do; replaces `workers.grants` for this directory.
    pub grants: Option<Grants>,
}

impl PluginSource {
    /// A source for `dir` with every other setting at its default (isolated, owner-only trust).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        PluginSource {
            dir: dir.into(),
            isolate: true,
            trust_any_writer: false,
            max_versions: None,
            max_file_size: None,
            load_timeout_ms: None,
            grants: None,
        }
    }

    /// The directory's options; isolated directories run with `workers`, their grants replaced
    /// by the source's own when it has some.
    pub fn dir_options(&self, workers: &WorkerOptions) -> DirOptions {
        let defaults = DirOptions::default();
        DirOptions {
            trust: if self.trust_any_writer {
                Trust::AnyWriter
            } else {
                Trust::OwnerOnly
            },
            isolation: if self.isolate {
                let mut workers = workers.clone();
                if let Some(grants) = &self.grants {
                    workers.grants = grants.clone();
                }
                Isolation::Process(workers)
            } else {
                Isolation::InProcess
            },
            max_versions: self.max_versions.unwrap_or(defaults.max_versions),
            max_file_size: self.max_file_size.unwrap_or(defaults.max_file_size),
            load_timeout: self
                .load_timeout_ms
                .map(Duration::from_millis)
                .unwrap_or(defaults.load_timeout),
        }
    }
}

/// `runner`: timeouts and the agent loop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunnerSettings {
    /// The timeout of tools that have none of their own, milliseconds.
    pub default_timeout_ms: u64,
    /// Calls of one turn that run at once.
    pub max_parallel: usize,
    /// Turns after which a loop stops even if the model goes on.
    pub max_turns: u32,
    /// What a session keeps of the details.
    pub keep_details: KeepDetails,
    /// The longest timeout a tool may declare for itself, milliseconds.
    pub max_tool_timeout_ms: u64,
    /// The result limit of tools that declare none, bytes of answer text (none when left out).
    pub max_result_bytes: Option<usize>,
    /// How the calls of one turn run (see [`CallOrder`]).
    pub call_order: CallOrder,
    /// How long plugin files still loading are waited for (see [`RunnerConfig::load_wait`]),
    /// milliseconds.
    pub load_wait_ms: u64,
}

impl Default for RunnerSettings {
    /// The defaults of [`RunnerConfig`] and [`LoopConfig`].
    fn default() -> Self {
        let runner = RunnerConfig::default();
        let agent = LoopConfig::default();
        RunnerSettings {
            default_timeout_ms: crate::millis::of(runner.default_timeout),
            max_parallel: agent.max_parallel,
            max_turns: agent.max_turns,
            keep_details: agent.keep_details,
            max_tool_timeout_ms: crate::millis::of(runner.max_tool_timeout),
            max_result_bytes: runner.max_result_bytes,
            call_order: agent.call_order,
            load_wait_ms: crate::millis::of(runner.load_wait),
        }
    }
}

/// `serve`: serving the host's tools to MCP clients.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServeConfig {
    /// What an "ask" rule does when the client cannot ask its user: deny or allow.
    pub ask_fallback: Action,
    /// Write every event to this JSON-lines journal.
    pub journal: Option<PathBuf>,
    /// The largest answer sent to a client, bytes (text, base64 images and structured content
    /// together); a larger one is cut with a note. Below the 10 MiB common clients accept.
    pub max_result_bytes: usize,
    /// Calls running at once at most; further requests wait for a turn.
    pub max_calls: usize,
    /// Serve MCP Streamable HTTP at `/mcp` on this address instead of stdio. Any address but a
    /// loopback one requires a bearer token.
    pub http: Option<std::net::SocketAddr>,
    /// A file holding the bearer token HTTP clients must send (`Authorization: Bearer ...`);
    /// readable by its owner only. Without one, a server on a non-loopback address makes a token
    /// and prints it once.
    pub token_file: Option<PathBuf>,
    /// Browser origins allowed to call over HTTP (`https://app.example.com`, `http://localhost:*`);
    /// a request with any other `Origin` is refused (DNS rebinding). Empty: the loopback origins.
    pub allowed_origins: Vec<String>,
    /// The largest HTTP request body, bytes.
    pub max_body_bytes: usize,
    /// HTTP requests handled at once at most; more are answered 503.
    pub max_requests: usize,
    /// MCP sessions (of 2025-era clients) open over HTTP at once at most; an `initialize` beyond
    /// closes the session idle longest, and is answered 503 only when every one has a request in
    /// flight.
    pub max_sessions: usize,
    /// MCP sessions one peer address may hold at once; past it, its own idle-longest one closes.
    pub max_sessions_per_peer: usize,
    /// An MCP session with no request for this long closes, milliseconds.
    pub session_idle_ms: u64,
    /// With `http`: serve the live page at `/`.
    pub web: bool,
    /// List two meta-tools besides the tools, for clients that never reread the list after a
    /// reload: `rho_find_tools` (search the tools as they are now) and `rho_call_tool` (call one
    /// by name, under the same gate).
    pub meta_tools: bool,
}

impl Default for ServeConfig {
    /// Deny when nobody can be asked, no journal, 8 MiB answers, 64 calls at once, stdio (no
    /// HTTP), loopback origins, 16 MiB request bodies, 256 HTTP requests and 256 sessions at once
    /// (64 per peer address, each closed after a minute idle), no meta-tools.
    fn default() -> Self {
        ServeConfig {
            ask_fallback: Action::Deny,
            journal: None,
            max_result_bytes: 8 << 20,
            max_calls: 64,
            http: None,
            token_file: None,
            allowed_origins: Vec::new(),
            max_body_bytes: 16 << 20,
            max_requests: 256,
            max_sessions: 256,
            max_sessions_per_peer: 64,
            session_idle_ms: 60_000,
            web: false,
            meta_tools: false,
        }
    }
}

/// A setting out of its range: one line naming the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{key}`: {problem}")]
pub struct ConfigError {
    /// The key, dotted (`runner.default_timeout_ms`).
    pub key: String,
    /// What is wrong with it.
    pub problem: String,
}

impl HostConfig {
    /// Checks every number against its range and every choice against what it allows.
    pub fn check(&self) -> Result<(), ConfigError> {
        let within = |key: &str, value: u64, low: u64, high: u64| {
            if (low..=high).contains(&value) {
                Ok(())
            } else {
                Err(ConfigError {
                    key: key.to_owned(),
                    problem: format!("{value} is out of range ({low} to {high})"),
                })
            }
        };
        let r = &self.runner;
        within(
            "runner.default_timeout_ms",
            r.default_timeout_ms,
            1,
            MAX_TIMEOUT_MS,
        )?;
        within(
            "runner.max_parallel",
            r.max_parallel as u64,
            1,
            MAX_PARALLEL,
        )?;
        within("runner.max_turns", u64::from(r.max_turns), 1, 1 << 20)?;
        within(
            "runner.max_tool_timeout_ms",
            r.max_tool_timeout_ms,
            1,
            MAX_TIMEOUT_MS,
        )?;
        if let Some(bytes) = r.max_result_bytes {
            within("runner.max_result_bytes", bytes as u64, 1, 1 << 30)?;
        }
        within("runner.load_wait_ms", r.load_wait_ms, 0, MAX_TIMEOUT_MS)?;
        for (tool, ms) in &self.timeouts {
            within(&format!("timeouts.{tool}"), *ms, 1, MAX_TIMEOUT_MS)?;
        }
        let w = &self.workers;
        within("workers.max_workers", w.max_workers as u64, 1, 1024)?;
        within("workers.spares", w.spares as u64, 0, w.max_workers as u64)?;
        within("workers.max_frame", w.max_frame as u64, 1 << 10, 1 << 30)?;
        within(
            "workers.idle_timeout_ms",
            crate::millis::of(w.idle_timeout),
            1,
            MAX_TIMEOUT_MS,
        )?;
        within(
            "workers.cancel_grace_ms",
            crate::millis::of(w.cancel_grace),
            1,
            60_000,
        )?;
        within(
            "workers.start_timeout_ms",
            crate::millis::of(w.start_timeout),
            1,
            MAX_TIMEOUT_MS,
        )?;
        within(
            "workers.limits.scratch_bytes",
            w.limits.scratch_bytes,
            1 << 16,
            1 << 40,
        )?;
        let l = &w.limits;
        for (key, limit, low) in [
            ("workers.limits.memory_bytes", l.memory_bytes, 16 << 20),
            ("workers.limits.cpu_seconds", l.cpu_seconds, 1),
            ("workers.limits.open_files", l.open_files, 16),
            ("workers.limits.processes", l.processes, 1),
            ("workers.limits.file_bytes", l.file_bytes, 1),
        ] {
            if let Some(limit) = limit {
                within(key, limit, low, u64::MAX)?;
            }
        }
        within(
            "quarantine.window_ms",
            crate::millis::of(self.quarantine.window),
            1,
            7 * MAX_TIMEOUT_MS,
        )?;
        within("serve.max_calls", self.serve.max_calls as u64, 1, 4096)?;
        within(
            "serve.max_body_bytes",
            self.serve.max_body_bytes as u64,
            1 << 10,
            1 << 30,
        )?;
        within(
            "serve.max_requests",
            self.serve.max_requests as u64,
            1,
            1 << 16,
        )?;
        within(
            "serve.max_sessions",
            self.serve.max_sessions as u64,
            1,
            1 << 16,
        )?;
        within(
            "serve.max_sessions_per_peer",
            self.serve.max_sessions_per_peer as u64,
            1,
            1 << 16,
        )?;
        within(
            "serve.session_idle_ms",
            self.serve.session_idle_ms,
            1_000,
            MAX_TIMEOUT_MS,
        )?;
        within(
            "serve.max_result_bytes",
            self.serve.max_result_bytes as u64,
            1 << 10,
            1 << 30,
        )?;
        if self.serve.ask_fallback == Action::Ask {
            return Err(ConfigError {
                key: "serve.ask_fallback".into(),
                problem: "expected \"deny\" or \"allow\", not \"ask\"".into(),
            });
        }
        for (i, source) in self.plugins.iter().enumerate() {
            if let Some(n) = source.max_versions {
                within(&format!("plugins[{i}].max_versions"), n as u64, 1, 1 << 20)?;
            }
            if let Some(ms) = source.load_timeout_ms {
                within(
                    &format!("plugins[{i}].load_timeout_ms"),
                    ms,
                    1,
                    MAX_TIMEOUT_MS,
                )?;
            }
            if let Some(bytes) = source.max_file_size {
                within(
                    &format!("plugins[{i}].max_file_size"),
                    bytes,
                    1 << 10,
                    1 << 40,
                )?;
            }
        }
        // Subject tokens and stream names: what NATS accepts everywhere.
        let name_ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 64
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        let names = [
            ("nats.host", self.nats.host.as_deref()),
            ("nats.stream", Some(self.nats.stream.as_str())),
        ];
        for (key, name) in names {
            if let Some(name) = name
                && !name_ok(name)
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

    /// Makes every relative path (plugin directories, granted paths, the journal) relative to
    /// `base`, the configuration file's directory.
    pub fn resolve_paths(&mut self, base: &Path) {
        let absolute = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        fn grant_paths(g: &mut Grants) -> impl Iterator<Item = &mut PathBuf> {
            g.read.iter_mut().chain(g.write.iter_mut())
        }
        grant_paths(&mut self.workers.grants).for_each(absolute);
        if let Some(journal) = &mut self.serve.journal {
            absolute(journal);
        }
        for path in [
            &mut self.serve.token_file,
            &mut self.nats.credentials,
            &mut self.nats.token_file,
        ]
        .into_iter()
        .chain(
            self.remote
                .iter_mut()
                .flat_map(|r| [&mut r.credentials, &mut r.token_file]),
        )
        .flatten()
        {
            absolute(path);
        }
        for source in &mut self.plugins {
            absolute(&mut source.dir);
            if let Some(grants) = &mut source.grants {
                grant_paths(grants).for_each(absolute);
            }
        }
    }

    /// The runner's settings: the default timeout, the per-tool ones and the cap on a tool's own.
    pub fn runner_config(&self) -> RunnerConfig {
        RunnerConfig {
            default_timeout: Duration::from_millis(self.runner.default_timeout_ms),
            timeout_overrides: self
                .timeouts
                .iter()
                .map(|(tool, ms)| (tool.clone(), Duration::from_millis(*ms)))
                .collect(),
            max_tool_timeout: Duration::from_millis(self.runner.max_tool_timeout_ms),
            max_result_bytes: self.runner.max_result_bytes,
            load_wait: Duration::from_millis(self.runner.load_wait_ms),
            ..RunnerConfig::default()
        }
    }

    /// The agent loop's settings.
    pub fn loop_config(&self) -> LoopConfig {
        LoopConfig {
            max_parallel: self.runner.max_parallel,
            max_turns: self.runner.max_turns,
            keep_details: self.runner.keep_details,
            call_order: self.runner.call_order,
        }
    }
}

fn yes() -> bool {
    true
}
