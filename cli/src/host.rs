//! Building a host from `rho.toml` and command-line flags (flags win): the flags, their
//! application to the configuration, and the one line per failure a command prints.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use rho_runtime::{Grants, Host, HostBuilder, PluginSource};

use crate::config::Config;

use crate::gates::parse_flag;

/// Exit status of a usage error.
pub const USAGE: u8 = 2;

/// Flags every command that loads plugins takes.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct PluginFlags {
    /// A plugin directory (repeat for several); replaces the config file's `[[plugins]]`.
    #[arg(long = "plugins", value_name = "DIR")]
    pub plugins: Vec<PathBuf>,
    /// Load plugins from directories and files other users can write.
    #[arg(long)]
    pub trust_any_writer: bool,
    /// Run the plugins in this process instead of sandboxed workers: faster calls, but a plugin
    /// that crashes, exits or hangs its thread takes the host with it. Only for plugins you trust
    /// as your own code.
    #[arg(long)]
    pub in_process: bool,
    /// Run the plugins in sandboxed worker processes (the default; kept for older scripts).
    #[arg(long, hide = true, conflicts_with = "in_process")]
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
    /// Isolated plugins see the host's environment variable KEY (repeat for several; others are
    /// cleared but for PATH, LANG, LC_ALL, TZ and RUST_LOG).
    #[arg(long = "grant-env", value_name = "KEY")]
    pub grant_env: Vec<String>,
    /// Serve the tools of an MCP server started by this command line too (repeat for several;
    /// added to the config file's `[[mcp]]`), e.g. `--mcp 'npx -y
    /// @modelcontextprotocol/server-everything'`; `NAME=COMMAND` names it. It runs in the
    /// sandbox isolated plugins run in, with the `--grant-*` grants (a server started by `npx
    /// -y` of a package not yet installed needs `--grant-network` to fetch it).
    #[arg(long = "mcp", value_name = "COMMAND")]
    pub mcp: Vec<String>,
    /// Decide who may list and call which tool by the Cedar policies of FILE (replaces the
    /// config file's `[policy]`; reloaded when it changes). See `rho policy check`.
    #[arg(long = "policy", value_name = "FILE")]
    pub policy: Option<PathBuf>,
}

impl PluginFlags {
    /// Widens `grants` by the `--grant-*` flags.
    fn widen(&self, grants: &mut Grants) {
        grants.read.extend(self.grant_read.iter().cloned());
        grants.write.extend(self.grant_write.iter().cloned());
        grants.network |= self.grant_network;
        grants.processes |= self.grant_processes;
        for key in &self.grant_env {
            if !grants.env.contains(key) {
                grants.env.push(key.clone());
            }
        }
    }
}

/// Flags of commands that run calls.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct RunFlags {
    /// The timeout of tools that have none of their own, in milliseconds (1 to 86400000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=rho_runtime::MAX_TIMEOUT_MS))]
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
        Some(path) => crate::config::load(path).map_err(|e| usage(&e)),
    }
}

/// `config` with the flags applied: `--plugins` replaces the file's directories, `--isolate`
/// and `--trust-any-writer` apply to every directory, `--grant-*` widen every grant,
/// `--timeout-ms` and `--gate` replace the file's.
fn with_flags(
    config: &Config,
    plugins: &PluginFlags,
    run: Option<&RunFlags>,
) -> Result<Config, String> {
    let mut whole = config.clone();
    for line in &plugins.mcp {
        let server = rho_mcp::McpServer::from_command_line(line)
            .ok_or_else(|| "--mcp: an empty command line".to_owned())?;
        server.check().map_err(|e| format!("--mcp {line:?}: {e}"))?;
        if whole.mcp.iter().any(|s| s.name == server.name) {
            return Err(format!(
                "--mcp {line:?}: a server named `{}` is already configured",
                server.name
            ));
        }
        whole.mcp.push(server);
    }
    for server in &mut whole.mcp {
        plugins.widen(&mut server.grants);
    }
    let has_mcp = !whole.mcp.is_empty();
    if let Some(file) = &plugins.policy {
        whole.policy.file = Some(file.clone());
    }
    let config = &mut whole.host;
    if !plugins.plugins.is_empty() {
        config.plugins = plugins.plugins.iter().map(PluginSource::new).collect();
    }
    if config.plugins.is_empty() && !has_mcp {
        return Err(
            "no plugin directory: pass --plugins DIR or list [[plugins]] in rho.toml".into(),
        );
    }
    for source in &mut config.plugins {
        source.isolate = (source.isolate || plugins.isolate) && !plugins.in_process;
        source.trust_any_writer |= plugins.trust_any_writer;
        if let Some(grants) = &mut source.grants {
            plugins.widen(grants);
        }
    }
    plugins.widen(&mut config.workers.grants);
    if let Some(run) = run {
        if let Some(ms) = run.timeout_ms {
            config.runner.default_timeout_ms = ms;
        }
        if let Some(spec) = &run.gate {
            config.gate = parse_flag(spec)?;
        }
    }
    Ok(whole)
}

/// A host from `config` and the flags, with `extra` settings of the command's own (an asker,
/// watching, a bus). Load failures are printed on stderr, one line each, and the other plugins
/// serve; a directory that cannot be used at all fails the command (exit 1), as does a bad flag
/// (exit 2).
///
/// A stop signal during all of it (`crate::signals`, the long-running commands) stops it: what
/// was built so far is let go, and the command exits 0 saying so.
pub async fn build(
    config: &Config,
    plugins: &PluginFlags,
    run: Option<&RunFlags>,
    extra: impl FnOnce(HostBuilder) -> HostBuilder,
) -> Result<(Host, Config), ExitCode> {
    tokio::select! {
        built = build_host(config, plugins, run, extra) => built,
        signal = crate::signals::stopped() => {
            eprintln!("rho: {signal} during start-up: stopped");
            Err(ExitCode::SUCCESS)
        }
    }
}

/// [`build`] without the stop signals.
async fn build_host(
    config: &Config,
    plugins: &PluginFlags,
    run: Option<&RunFlags>,
    extra: impl FnOnce(HostBuilder) -> HostBuilder,
) -> Result<(Host, Config), ExitCode> {
    let config = with_flags(config, plugins, run).map_err(|e| usage(&e))?;
    let mut builder = Host::builder().config(&config.host);
    // The policies are in force before the first tool is served: a file that cannot be used
    // fails the command, never "no policy".
    if let Some(file) = &config.policy.file {
        let policy = rho_policy::CedarPolicy::from_file(file).map_err(|e| {
            eprintln!("rho: {}", crate::render::terminal_safe(&e.to_string()));
            ExitCode::from(1)
        })?;
        builder = builder.policy(std::sync::Arc::new(policy));
    }
    #[cfg(feature = "wasm")]
    let builder = builder.components(config.wasm.engine().map_err(|e| {
        eprintln!("rho: {e}");
        ExitCode::from(1)
    })?);
    let built = extra(builder).build().await;
    let (host, reports) = built.map_err(|e| {
        eprintln!("rho: {e}");
        ExitCode::from(1)
    })?;
    let mut unusable = false;
    for report in &reports {
        for line in &report.errors {
            eprintln!("rho: {line}");
        }
        for file in &report.loading {
            eprintln!(
                "rho: {}: still loading after {} ms (its load-time code is slow or hangs); its \
                 tools are not served yet",
                crate::render::terminal_safe(file),
                config.host.runner.load_wait_ms
            );
        }
        unusable |= report.dir_error.is_some();
    }
    if let Err(line) = crate::telemetry::start(&host, &config.otel) {
        eprintln!("rho: {}", crate::render::terminal_safe(&line));
        host.shutdown().await;
        return Err(ExitCode::from(1));
    }
    // A directory that cannot be used at all is the command's failure, not a quiet empty list.
    if unusable {
        host.shutdown().await;
        return Err(ExitCode::from(1));
    }
    if let Err(line) =
        crate::nats::add_remotes(&host, &config.remote, config.nats.host.as_deref()).await
    {
        eprintln!("rho: {}", crate::render::terminal_safe(&line));
        host.shutdown().await;
        return Err(ExitCode::from(1));
    }
    if let Some(file) = &config.policy.file {
        match rho_policy::watch(&host, file) {
            Ok(watcher) => watcher.detach(),
            Err(e) => {
                eprintln!("rho: {}", crate::render::terminal_safe(&e.to_string()));
                host.shutdown().await;
                return Err(ExitCode::from(1));
            }
        }
    }
    add_mcp_servers(&host, &config.mcp, &config.host.workers).await;
    Ok((host, config))
}

/// Starts a source for each MCP server and waits, at most each one's start bound, until each has
/// listed its tools or failed its first start (said on stderr, one line each: it is retried).
async fn add_mcp_servers(
    host: &Host,
    servers: &[rho_mcp::McpServer],
    workers: &rho_runtime::WorkerOptions,
) {
    use rho_runtime::{BusItem, EventKind};
    use tokio_stream::StreamExt;
    if servers.is_empty() {
        return;
    }
    let mut events = host.subscribe();
    let mut waiting: std::collections::BTreeSet<String> =
        servers.iter().map(|s| format!("mcp:{}", s.name)).collect();
    for server in servers {
        host.add_source(
            &format!("mcp:{}", server.name),
            rho_mcp::McpSource::new(server.clone()).workers(workers.clone()),
        );
    }
    let longest = servers
        .iter()
        .map(|s| s.start_timeout())
        .max()
        .unwrap_or_default();
    let deadline = tokio::time::Instant::now() + longest + std::time::Duration::from_secs(1);
    while !waiting.is_empty() {
        let Ok(Some(item)) = tokio::time::timeout_at(deadline, events.next()).await else {
            break;
        };
        match item {
            BusItem::Event(event) => match &event.kind {
                EventKind::RemoteToolsChanged { source, .. } => {
                    waiting.remove(source);
                }
                EventKind::SourceStateChanged {
                    source,
                    state: rho_runtime::SourceState::Restarting | rho_runtime::SourceState::Down,
                    retry_in_ms,
                    message,
                    ..
                } if waiting.remove(source) => {
                    let retry = retry_in_ms
                        .map(|ms| format!("; restarting in {ms} ms"))
                        .unwrap_or_default();
                    eprintln!("rho: {}{retry}", crate::render::terminal_safe(message));
                }
                _ => {}
            },
            _ => continue,
        }
    }
}

/// Prints a usage error and returns its exit status.
pub fn usage(message: &str) -> ExitCode {
    eprintln!("rho: {message}");
    ExitCode::from(USAGE)
}
