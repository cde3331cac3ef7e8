//! Building a host from `rho.toml` and command-line flags (flags win): the bus, the registry with
//! its plugin directories, the runner and the gate.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use rho_core::{
    Bus, DirOptions, Gate, Isolation, PluginDir, RunnerConfig, ToolRegistry, ToolRunner, Trust,
};

use crate::config::{Config, PluginSource};
use crate::gates::parse_flag;
use rho_core::{Asker, RuleGate};

/// Exit status of a usage error.
pub const USAGE: u8 = 2;

/// The longest timeout a flag or the configuration may give, milliseconds (a day).
pub const MAX_TIMEOUT_MS: u64 = 86_400_000;

/// The most calls of one turn at once a flag or the configuration may give.
pub const MAX_PARALLEL: u64 = 1024;

/// Flags every command that loads plugins takes.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct PluginFlags {
    /// A plugin directory (repeat for several); replaces the config file's `[[plugins]]`.
    #[arg(long = "plugins", value_name = "DIR")]
    pub plugins: Vec<PathBuf>,
    /// Load plugins from directories and files other users can write.
    #[arg(long)]
    pub trust_any_writer: bool,
    /// Run the plugins out of process, in sandboxed worker processes (for plugins you do not
    /// trust).
    #[arg(long)]
    pub isolate: bool,
    /// Isolated plugins may read PATH and what is beneath it (repeat for several).
    #[arg(long = "grant-read", value_name = "PATH")]
    pub grant_read: Vec<PathBuf>,
    /// Isolated plugins may read and write PATH and what is beneath it (repeat for several).
    #[arg(long = "grant-write", value_name = "PATH")]
    pub grant_write: Vec<PathBuf>,
    /// Isolated plugins may use the network.
    #[arg(long)]
    pub grant_network: bool,
    /// Isolated plugins may start child processes (they die at the end of each call).
    #[arg(long)]
    pub grant_processes: bool,
}

impl PluginFlags {
    /// The grants of `base` widened by the `--grant-*` flags.
    fn widen(&self, mut base: rho_core::Grants) -> rho_core::Grants {
        base.read.extend(self.grant_read.iter().cloned());
        base.write.extend(self.grant_write.iter().cloned());
        base.network |= self.grant_network;
        base.processes |= self.grant_processes;
        base
    }
}

/// Flags of commands that run calls.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct RunFlags {
    /// The timeout of tools that have none of their own, in milliseconds (1 to 86400000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_MS))]
    pub timeout_ms: Option<u64>,
    /// The gate: `allow`, `deny:TOOL,TOOL...`, or `ask`; replaces the config file's `[[gate]]`.
    #[arg(long, value_name = "GATE")]
    pub gate: Option<String>,
}

/// Logs go to stderr, filtered by `RUST_LOG` (errors only by default).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// The configuration at `path`, or the defaults without one; a bad file is a usage error.
pub fn load_config(path: Option<&Path>) -> Result<Config, ExitCode> {
    match path {
        None => Ok(Config::default()),
        Some(path) => Config::load(path).map_err(|e| usage(&e)),
    }
}

/// The plugin sources the flags and the config name.
fn sources(config: &Config, flags: &PluginFlags) -> Vec<PluginSource> {
    if flags.plugins.is_empty() {
        config
            .plugins
            .iter()
            .cloned()
            .map(|mut s| {
                s.isolate |= flags.isolate;
                s.trust_any_writer |= flags.trust_any_writer;
                s
            })
            .collect()
    } else {
        flags
            .plugins
            .iter()
            .map(|dir| PluginSource {
                dir: dir.clone(),
                isolate: flags.isolate,
                trust_any_writer: flags.trust_any_writer,
                max_versions: None,
                max_file_size: None,
                load_timeout_ms: None,
                grants: None,
            })
            .collect()
    }
}

/// A registry on `bus` with the plugin directories loaded; load failures are printed on stderr,
/// one line each, and do not stop the command.
pub async fn registry(
    bus: &Bus,
    config: &Config,
    flags: &PluginFlags,
) -> Result<(ToolRegistry, Vec<PluginDir>), ExitCode> {
    let sources = sources(config, flags);
    if sources.is_empty() {
        return Err(usage(
            "no plugin directory: pass --plugins DIR or list [[plugins]] in rho.toml",
        ));
    }
    let registry = ToolRegistry::new(bus.clone());
    registry.set_quarantine_policy(config.quarantine);
    let mut dirs = Vec::new();
    for source in sources {
        let defaults = DirOptions::default();
        let options = DirOptions {
            trust: if source.trust_any_writer {
                Trust::AnyWriter
            } else {
                Trust::OwnerOnly
            },
            isolation: if source.isolate {
                let mut workers = config.workers.clone();
                let grants = source.grants.clone().unwrap_or(workers.grants);
                workers.grants = flags.widen(grants);
                Isolation::Process(workers)
            } else {
                Isolation::InProcess
            },
            max_versions: source.max_versions.unwrap_or(defaults.max_versions),
            max_file_size: source.max_file_size.unwrap_or(defaults.max_file_size),
            load_timeout: source
                .load_timeout_ms
                .map(Duration::from_millis)
                .unwrap_or(defaults.load_timeout),
        };
        match registry.add_plugin_dir(&source.dir, options).await {
            Ok((plugin_dir, report)) => {
                for line in &report.errors {
                    eprintln!("rho: {line}");
                }
                // A directory that cannot be used at all is the command's failure, not a quiet
                // empty tool list.
                if report.dir_error.is_some() {
                    return Err(ExitCode::from(1));
                }
                dirs.push(plugin_dir);
            }
            Err(error) => {
                eprintln!("rho: {error}");
                return Err(ExitCode::from(1));
            }
        }
    }
    Ok((registry, dirs))
}

/// Watches every directory for changes (hot reload); a directory that cannot be watched is
/// reported and the others are watched.
pub fn watch(dirs: &[PluginDir]) -> Vec<rho_core::DirWatcher> {
    dirs.iter()
        .filter_map(|dir| match dir.watch(rho_core::DEFAULT_DEBOUNCE) {
            Ok(watcher) => Some(watcher),
            Err(e) => {
                eprintln!("rho: {e}");
                None
            }
        })
        .collect()
}

/// A runner over `registry`: the flag's timeout, else the config's; the config's per-tool ones.
pub fn runner(registry: ToolRegistry, config: &Config, flags: &RunFlags) -> ToolRunner {
    let runner_config = RunnerConfig {
        default_timeout: Duration::from_millis(
            flags.timeout_ms.unwrap_or(config.runner.default_timeout_ms),
        ),
        timeout_overrides: config
            .timeouts
            .iter()
            .map(|(tool, ms)| (tool.clone(), Duration::from_millis(*ms)))
            .collect(),
        max_tool_timeout: Duration::from_millis(config.runner.max_tool_timeout_ms),
        ..RunnerConfig::default()
    };
    ToolRunner::new(registry, runner_config)
}

/// The gate: the flag's rules, else the config's; "ask" goes to `asker`.
pub fn gate(
    config: &Config,
    flags: &RunFlags,
    asker: Arc<dyn Asker>,
) -> Result<Arc<dyn Gate>, String> {
    let rules = match &flags.gate {
        Some(spec) => parse_flag(spec)?,
        None => config.gate.clone(),
    };
    Ok(Arc::new(RuleGate::new(rules, asker)))
}

/// Prints a usage error and returns its exit status.
pub fn usage(message: &str) -> ExitCode {
    eprintln!("rho: {message}");
    ExitCode::from(USAGE)
}
