//! `rho.toml`: the host's configuration. Every command takes `--config PATH`; flags override the
//! file; without a file the documented defaults apply. A bad file is one line naming the key and
//! what was expected.
//!
//! ```toml
//! [[plugins]]
//! dir = "target/plugins"
//! isolate = false            # true: run in worker processes
//! trust_any_writer = false   # true: load files other users can write
//!
//! [runner]
//! default_timeout_ms = 60000
//! max_parallel = 8
//! keep_details = "all"       # "none", "all", or { up_to = 4096 }
//!
//! [timeouts]                 # per tool, win over the tool's own
//! spin = 500
//!
//! [quarantine]
//! max_failures = 3
//! window_ms = 300000
//!
//! [workers]                  # isolated plugins
//! spares = 1
//! idle_timeout_ms = 60000
//! limits = { memory_bytes = 2147483648, open_files = 256, processes = 64 }
//! grants = { read = ["data"], write = [], network = false, processes = false }
//!
//! [[gate]]                   # first matching rule wins; no match: allow
//! tool = "exit_*"
//! action = "deny"            # "allow", "deny" or "ask"
//!
//! [serve]
//! ask_fallback = "deny"      # when "ask" cannot reach a person: "deny" or "allow"
//! journal = "/tmp/rho-serve.jsonl"
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rho_core::{Action, GateRule, Grants, KeepDetails, QuarantinePolicy, WorkerOptions};
use serde::Deserialize;

/// The whole file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Plugin directories.
    #[serde(default)]
    pub plugins: Vec<PluginSource>,
    /// The runner and loop.
    #[serde(default)]
    pub runner: RunnerSection,
    /// Per-tool timeouts, milliseconds.
    #[serde(default)]
    pub timeouts: HashMap<String, u64>,
    /// The quarantine policy.
    #[serde(default)]
    pub quarantine: QuarantinePolicy,
    /// Worker processes of isolated plugins.
    #[serde(default)]
    pub workers: WorkerOptions,
    /// Gate rules, in order.
    #[serde(default)]
    pub gate: Vec<GateRule>,
    /// `rho serve`.
    #[serde(default)]
    pub serve: ServeSection,
}

/// One plugin directory.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginSource {
    /// The directory (relative paths are relative to the config file).
    pub dir: PathBuf,
    /// Run its plugins out of process.
    #[serde(default)]
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
    /// What its isolated plugins may do; replaces `[workers] grants` for this directory.
    pub grants: Option<Grants>,
}

/// `[runner]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunnerSection {
    /// The timeout of tools that have none of their own.
    #[serde(default = "default_timeout_ms")]
    pub default_timeout_ms: u64,
    /// Calls of one turn that run at once.
    #[serde(default = "default_parallel")]
    pub max_parallel: usize,
    /// What the session keeps of details.
    #[serde(default)]
    pub keep_details: KeepDetails,
    /// The longest timeout a tool may declare for itself, milliseconds.
    #[serde(default = "default_max_tool_timeout_ms")]
    pub max_tool_timeout_ms: u64,
}

fn default_max_tool_timeout_ms() -> u64 {
    600_000
}

fn default_timeout_ms() -> u64 {
    60_000
}

fn default_parallel() -> usize {
    8
}

impl Default for RunnerSection {
    fn default() -> Self {
        RunnerSection {
            default_timeout_ms: default_timeout_ms(),
            max_parallel: default_parallel(),
            keep_details: KeepDetails::All,
            max_tool_timeout_ms: default_max_tool_timeout_ms(),
        }
    }
}

/// `[serve]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeSection {
    /// What "ask" does when the client cannot ask its user.
    #[serde(default = "deny")]
    pub ask_fallback: Action,
    /// Write every event to this JSON-lines journal (for `rho watch --attach`).
    pub journal: Option<PathBuf>,
    /// The largest answer sent to a client, bytes (text, base64 images and structured content
    /// together); a larger one is cut with a note. Below the 10 MiB common clients accept.
    #[serde(default = "default_max_result_bytes")]
    pub max_result_bytes: usize,
    /// Calls running at once at most; further requests wait for a turn.
    #[serde(default = "default_max_calls")]
    pub max_calls: usize,
}

fn default_max_calls() -> usize {
    64
}

fn default_max_result_bytes() -> usize {
    8 << 20
}

fn deny() -> Action {
    Action::Deny
}

impl Default for ServeSection {
    fn default() -> Self {
        ServeSection {
            ask_fallback: Action::Deny,
            journal: None,
            max_result_bytes: default_max_result_bytes(),
            max_calls: default_max_calls(),
        }
    }
}

impl Config {
    /// Reads `path` (a regular file of at most [`MAX_CONFIG_BYTES`]); an error is one line: the
    /// file, the key, what was expected.
    pub fn load(path: &Path) -> Result<Config, String> {
        let text = read_regular(path, MAX_CONFIG_BYTES)?;
        let mut config = Config::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        config
            .check_ranges()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let absolute = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        fn grant_paths(g: &mut Grants) -> impl Iterator<Item = &mut PathBuf> {
            g.read.iter_mut().chain(g.write.iter_mut())
        }
        grant_paths(&mut config.workers.grants).for_each(absolute);
        for source in &mut config.plugins {
            absolute(&mut source.dir);
            if let Some(grants) = &mut source.grants {
                grant_paths(grants).for_each(absolute);
            }
        }
        if config.serve.ask_fallback == Action::Ask {
            return Err(format!(
                "{}: `serve.ask_fallback`: expected \"deny\" or \"allow\", not \"ask\"",
                path.display()
            ));
        }
        Ok(config)
    }

    /// Checks every number against its range: one line naming the key.
    fn check_ranges(&self) -> Result<(), String> {
        use crate::host::{MAX_PARALLEL, MAX_TIMEOUT_MS};
        let within = |key: &str, value: u64, low: u64, high: u64| {
            if (low..=high).contains(&value) {
                Ok(())
            } else {
                Err(format!(
                    "`{key}`: {value} is out of range ({low} to {high})"
                ))
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
        within(
            "runner.max_tool_timeout_ms",
            r.max_tool_timeout_ms,
            1,
            MAX_TIMEOUT_MS,
        )?;
        for (tool, ms) in &self.timeouts {
            within(&format!("timeouts.{tool}"), *ms, 1, MAX_TIMEOUT_MS)?;
        }
        let w = &self.workers;
        within("workers.max_workers", w.max_workers as u64, 1, 1024)?;
        within("workers.spares", w.spares as u64, 0, w.max_workers as u64)?;
        within("workers.max_frame", w.max_frame as u64, 1 << 10, 1 << 30)?;
        let millis = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        within(
            "workers.idle_timeout_ms",
            millis(w.idle_timeout),
            1,
            MAX_TIMEOUT_MS,
        )?;
        within("workers.cancel_grace_ms", millis(w.cancel_grace), 1, 60_000)?;
        within(
            "workers.start_timeout_ms",
            millis(w.start_timeout),
            1,
            MAX_TIMEOUT_MS,
        )?;
        within(
            "workers.limits.scratch_bytes",
            w.limits.scratch_bytes,
            1 << 16,
            1 << 40,
        )?;
        within(
            "quarantine.window_ms",
            millis(self.quarantine.window),
            1,
            7 * MAX_TIMEOUT_MS,
        )?;
        within("serve.max_calls", self.serve.max_calls as u64, 1, 4096)?;
        within(
            "serve.max_result_bytes",
            self.serve.max_result_bytes as u64,
            1 << 10,
            1 << 30,
        )?;
        for source in &self.plugins {
            if let Some(n) = source.max_versions {
                within("plugins.max_versions", n as u64, 1, 1 << 20)?;
            }
            if let Some(ms) = source.load_timeout_ms {
                within("plugins.load_timeout_ms", ms, 1, MAX_TIMEOUT_MS)?;
            }
        }
        Ok(())
    }

    /// Parses a configuration text.
    pub fn parse(text: &str) -> Result<Config, String> {
        let deserializer = toml::Deserializer::parse(text).map_err(|e| one_line(text, &e, ""))?;
        serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let key = e.path().to_string();
            one_line(text, e.inner(), &key)
        })
    }
}

/// The largest configuration file read: 1 MiB.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Reads `path` as text if it is a regular file of at most `max` bytes: a FIFO, a device (say
/// `/dev/zero`) or a huge file is one line, never a hang or unbounded memory.
pub fn read_regular(path: &Path, max: u64) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let shown = path.display();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("{shown}: cannot read: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("{shown}: cannot read: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{shown}: not a regular file"));
    }
    if meta.len() > max {
        return Err(format!("{shown}: {} bytes, larger than {max}", meta.len()));
    }
    let mut text = String::new();
    file.take(max + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("{shown}: cannot read: {e}"))?;
    if text.len() as u64 > max {
        return Err(format!("{shown}: larger than {max} bytes"));
    }
    Ok(text)
}

fn one_line(text: &str, error: &toml::de::Error, key: &str) -> String {
    let line = error
        .span()
        .map(|span| text[..span.start.min(text.len())].lines().count().max(1))
        .map(|n| format!("line {n}: "))
        .unwrap_or_default();
    let key = if key.is_empty() || key == "." {
        String::new()
    } else {
        format!("`{key}`: ")
    };
    let message = error.message().lines().next().unwrap_or("").trim();
    format!("{line}{key}{message}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_per_directory_and_for_all_with_paths_relative_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rho.toml");
        std::fs::write(
            &path,
            r#"
            [[plugins]]
            dir = "untrusted"
            isolate = true
            grants = { write = ["out"], network = true }
            [[plugins]]
            dir = "other"
            isolate = true
            [workers]
            identity = { user = { uid = 1000, gid = 1000 } }
            [workers.grants]
            read = ["/srv/data", "data"]
            processes = true
            "#,
        )
        .unwrap();
        let config = Config::load(&path).unwrap();
        let own = config.plugins[0].grants.as_ref().unwrap();
        assert_eq!(own.write, [dir.path().join("out")]);
        assert!(own.network && !own.processes);
        assert!(config.plugins[1].grants.is_none());
        let all = &config.workers.grants;
        assert_eq!(
            all.read,
            [PathBuf::from("/srv/data"), dir.path().join("data")]
        );
        assert!(all.processes && !all.network);
        assert_eq!(all.env, Grants::default().env);
        assert_eq!(
            config.workers.identity,
            rho_core::Identity::User {
                uid: 1000,
                gid: 1000
            }
        );
        let err = Config::parse("[workers.grants]\nnetwork = \"yes\"\n").unwrap_err();
        assert!(
            err.starts_with("line 2: `workers.grants.network`: invalid type"),
            "{err}"
        );
    }

    #[test]
    fn parses_the_documented_example_and_defaults() {
        let text = r#"
            [[plugins]]
            dir = "target/plugins"
            isolate = true
            [runner]
            default_timeout_ms = 5000
            keep_details = { up_to = 4096 }
            [timeouts]
            spin = 500
            [quarantine]
            max_failures = 2
            window_ms = 1000
            [workers]
            spares = 0
            [[gate]]
            tool = "exit_*"
            action = "deny"
            [[gate]]
            tool = "*"
            action = "ask"
            [serve]
            ask_fallback = "allow"
        "#;
        let config = Config::parse(text).unwrap();
        assert!(config.plugins[0].isolate);
        assert_eq!(config.runner.keep_details, KeepDetails::UpTo(4096));
        assert_eq!(config.timeouts["spin"], 500);
        assert_eq!(config.quarantine.max_failures, 2);
        assert_eq!(config.workers.spares, 0);
        assert_eq!(
            config.workers.max_frame,
            64 << 20,
            "unset worker keys keep their defaults"
        );
        let action = |tool: &str| {
            config
                .gate
                .iter()
                .find(|r| rho_core::pattern_matches(&r.tool, tool))
                .map(|r| r.action)
        };
        assert_eq!(action("exit_process"), Some(Action::Deny));
        assert_eq!(action("echo"), Some(Action::Ask));
        assert_eq!(config.serve.ask_fallback, Action::Allow);
        let empty = Config::parse("").unwrap();
        assert_eq!(empty.runner.default_timeout_ms, 60_000);
        assert!(empty.gate.is_empty());
    }

    #[test]
    fn a_bad_file_is_one_line_naming_the_key() {
        let err = Config::parse("[runner]\ndefault_timeout_ms = \"soon\"\n").unwrap_err();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("runner.default_timeout_ms"), "{err}");
        assert!(err.contains("expected u64"), "{err}");
        let err = Config::parse("[runner]\ntimeout = 5\n").unwrap_err();
        assert!(err.contains("unknown field `timeout`"), "{err}");
        let err = Config::parse("[[gate]]\ntool = \"x\"\naction = \"maybe\"\n").unwrap_err();
        assert!(
            err.contains("gate[0].action") && err.contains("unknown variant `maybe`"),
            "{err}"
        );
        let err = Config::parse("[runner\n").unwrap_err();
        assert!(err.starts_with("line 1: "), "{err}");
    }
}
