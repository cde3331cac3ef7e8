//! Building a host from command-line flags: the bus, the registry with its plugin directories, the
//! runner and the gate.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use rho_core::{
    Bus, DenyList, DirOptions, Gate, PluginDir, RunnerConfig, ToolRegistry, ToolRunner, Trust,
};

use crate::ask::AskGate;

/// Exit status of a usage error.
pub const USAGE: u8 = 2;

/// Flags every command that loads plugins takes.
#[derive(clap::Args, Clone, Debug)]
pub struct PluginFlags {
    /// A plugin directory (repeat for several).
    #[arg(long = "plugins", value_name = "DIR", required = true)]
    pub plugins: Vec<PathBuf>,
    /// Load plugins from directories and files other users can write.
    #[arg(long)]
    pub trust_any_writer: bool,
    /// Run the plugins out of process, in worker processes (for plugins you do not trust).
    #[arg(long)]
    pub isolate: bool,
}

/// Flags of commands that run calls.
#[derive(clap::Args, Clone, Debug)]
pub struct RunFlags {
    /// The timeout of tools that have none of their own, in milliseconds.
    #[arg(long, value_name = "N")]
    pub timeout_ms: Option<u64>,
    /// The gate: `allow` (default), `deny:TOOL,TOOL...`, or `ask` (y/n on the terminal).
    #[arg(long, value_name = "GATE", default_value = "allow")]
    pub gate: String,
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

/// A registry on `bus` with the flags' plugin directories loaded; load failures are printed on
/// stderr, one line each, and do not stop the command.
pub async fn registry(
    bus: &Bus,
    flags: &PluginFlags,
) -> Result<(ToolRegistry, Vec<PluginDir>), ExitCode> {
    let registry = ToolRegistry::new(bus.clone());
    let options = DirOptions {
        trust: if flags.trust_any_writer {
            Trust::AnyWriter
        } else {
            Trust::OwnerOnly
        },
        isolation: if flags.isolate {
            rho_core::Isolation::Process(rho_core::WorkerOptions::default())
        } else {
            rho_core::Isolation::InProcess
        },
        ..DirOptions::default()
    };
    let mut dirs = Vec::new();
    for dir in &flags.plugins {
        match registry.add_plugin_dir(dir, options.clone()).await {
            Ok((plugin_dir, report)) => {
                for line in &report.errors {
                    eprintln!("rho: {line}");
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

/// A runner over `registry` with the flags' timeout.
pub fn runner(registry: ToolRegistry, flags: &RunFlags) -> ToolRunner {
    let mut config = RunnerConfig::default();
    if let Some(ms) = flags.timeout_ms {
        config.default_timeout = Duration::from_millis(ms);
    }
    ToolRunner::new(registry, config)
}

/// The gate the flags ask for, or a usage error.
pub fn gate(spec: &str) -> Result<Arc<dyn Gate>, String> {
    match spec {
        "allow" | "allow_all" => Ok(rho_core::allow_all()),
        "ask" => Ok(Arc::new(AskGate::default())),
        other => match other.strip_prefix("deny:") {
            Some(list) if !list.trim().is_empty() => Ok(Arc::new(DenyList::new(
                list.split(',').map(str::trim).filter(|s| !s.is_empty()),
            ))),
            _ => Err(format!(
                "unknown gate `{other}`: use `allow`, `ask` or `deny:TOOL,TOOL...`"
            )),
        },
    }
}

/// Prints a usage error and returns its exit status.
pub fn usage(message: &str) -> ExitCode {
    eprintln!("rho: {message}");
    ExitCode::from(USAGE)
}
