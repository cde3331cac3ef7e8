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
use crate::call::options::RunnerConfig;
use crate::call::rules::GateRule;
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
/// isolated workers and gate rules ([`SECTIONS`](Self::SECTIONS)). Sections of other readers
/// (`rho serve`'s `[serve]`, NATS) are theirs: `rho.toml` is composed by the program that reads it.
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
    /// Per-tool idle limits, milliseconds: a call that sends no partial update for this long
    /// ends `timed_out`; they win over the tools' own.
    #[serde(default)]
    pub idle_timeouts: HashMap<String, u64>,
    /// When a tool is quarantined.
    #[serde(default)]
    pub quarantine: QuarantinePolicy,
    /// Worker processes of isolated plugins (grants included, for every directory).
    #[serde(default)]
    pub workers: WorkerOptions,
    /// Gate rules, in order: the first whose pattern matches decides; no match allows.
    #[serde(default)]
    pub gate: Vec<GateRule>,
    /// Rate and concurrency limits per principal × tool (`[[limit]]`), each counted apart.
    #[serde(default)]
    pub limit: Vec<crate::LimitRule>,
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
    /// Load only the files its lock file (`<dir>.lock`, written by `rho plugin install`) names
    /// with their SHA-256 (see [`DirOptions::locked`]).
    #[serde(default)]
    pub locked: bool,
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
            locked: false,
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
            locked: self.locked,
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
    /// How long a tool's question to the user may stay open (see
    /// [`RunnerConfig::ask_timeout`]), milliseconds.
    pub ask_timeout_ms: u64,
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
            ask_timeout_ms: crate::millis::of(runner.ask_timeout),
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

impl ConfigError {
    /// `Ok` when `value` is within `low..=high`; else the error naming `key` and the range.
    ///
    /// ```
    /// use rho_runtime::ConfigError;
    /// assert!(ConfigError::check_range("serve.max_calls", 64, 1, 4096).is_ok());
    /// let error = ConfigError::check_range("serve.max_calls", 0, 1, 4096).unwrap_err();
    /// assert_eq!(error.to_string(), "`serve.max_calls`: 0 is out of range (1 to 4096)");
    /// ```
    pub fn check_range(key: &str, value: u64, low: u64, high: u64) -> Result<(), ConfigError> {
        if (low..=high).contains(&value) {
            Ok(())
        } else {
            Err(ConfigError {
                key: key.to_owned(),
                problem: format!("{value} is out of range ({low} to {high})"),
            })
        }
    }
}

/// Makes `path` relative to `base` (a configuration file's directory) when it is relative.
pub fn resolve_path(base: &Path, path: &mut PathBuf) {
    if path.is_relative() {
        *path = base.join(&*path);
    }
}

impl HostConfig {
    /// The top-level keys this type reads: the host's sections of `rho.toml`. A reader that
    /// composes a file of more sections hands these to [`HostConfig`] and the others to their
    /// owners.
    pub const SECTIONS: &[&str] = &[
        "plugins",
        "runner",
        "timeouts",
        "idle_timeouts",
        "quarantine",
        "workers",
        "gate",
        "limit",
    ];

    /// Checks every number against its range and every choice against what it allows.
    pub fn check(&self) -> Result<(), ConfigError> {
        let within = ConfigError::check_range;
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
        within("runner.ask_timeout_ms", r.ask_timeout_ms, 1, MAX_TIMEOUT_MS)?;
        for (tool, ms) in &self.idle_timeouts {
            within(&format!("idle_timeouts.{tool}"), *ms, 1, MAX_TIMEOUT_MS)?;
        }
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
            ("workers.limits.data_bytes", l.data_bytes, 16 << 20),
            ("workers.limits.cpu_seconds", l.cpu_seconds, 1),
            ("workers.limits.open_files", l.open_files, 16),
            ("workers.limits.processes", l.processes, 1),
            ("workers.limits.file_bytes", l.file_bytes, 1),
        ] {
            if let Some(limit) = limit {
                within(key, limit, low, u64::MAX)?;
            }
        }
        let q = &self.quarantine;
        within(
            "quarantine.window_ms",
            crate::millis::of(q.window),
            1,
            7 * MAX_TIMEOUT_MS,
        )?;
        within(
            "quarantine.cool_down_ms",
            crate::millis::of(q.cool_down),
            0,
            7 * MAX_TIMEOUT_MS,
        )?;
        within(
            "quarantine.cool_down_growth",
            u64::from(q.cool_down_growth),
            1,
            1000,
        )?;
        within(
            "quarantine.max_cool_down_ms",
            crate::millis::of(q.max_cool_down),
            crate::millis::of(q.cool_down),
            70 * MAX_TIMEOUT_MS,
        )?;
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
        for (i, rule) in self.limit.iter().enumerate() {
            rule.check().map_err(|problem| ConfigError {
                key: format!("limit[{i}]"),
                problem,
            })?;
        }
        Ok(())
    }

    /// Makes every relative path (plugin directories, granted paths) relative to `base`, the
    /// configuration file's directory.
    pub fn resolve_paths(&mut self, base: &Path) {
        let absolute = |p: &mut PathBuf| resolve_path(base, p);
        fn grant_paths(g: &mut Grants) -> impl Iterator<Item = &mut PathBuf> {
            g.read.iter_mut().chain(g.write.iter_mut())
        }
        grant_paths(&mut self.workers.grants).for_each(absolute);
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
            idle_timeout_overrides: self
                .idle_timeouts
                .iter()
                .map(|(tool, ms)| (tool.clone(), Duration::from_millis(*ms)))
                .collect(),
            max_tool_timeout: Duration::from_millis(self.runner.max_tool_timeout_ms),
            max_result_bytes: self.runner.max_result_bytes,
            load_wait: Duration::from_millis(self.runner.load_wait_ms),
            ask_timeout: Duration::from_millis(self.runner.ask_timeout_ms),
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

#[cfg(test)]
mod tests {
    use super::HostConfig;

    #[test]
    fn sections_are_the_keys_it_reads() {
        let written = serde_json::to_value(HostConfig::default()).unwrap_or_default();
        let mut keys: Vec<&str> = written
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let mut sections = HostConfig::SECTIONS.to_vec();
        keys.sort_unstable();
        sections.sort_unstable();
        assert_eq!(keys, sections);
    }
}
