//! `rho`: run, inspect and serve rho plugins from the command line. A thin layer over `rho-runtime`.

/// `println!` that ignores a closed stdout instead of panicking (`rho tools | head`).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod call;
mod config;
mod control;
mod distribute;
mod gates;
mod host;
mod inspect;
mod journals;
mod live;
mod nats;
mod node;
mod plugin;
mod policy;
mod render;
mod run;
mod serve;
mod signals;
mod telemetry;
mod token;
mod tools;
mod view;
mod wasm;
mod watch;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// `rho --version`: the release and the plugin interface it speaks (what `rho plugin check`
/// prints of a plugin): `0.1.0, plugin interface 3 (loads 1 to 3)`.
fn version_text() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        use rho_runtime::plugin_api::ffi::{INTERFACE_VERSION, OLDEST_INTERFACE_VERSION};
        format!(
            "{}, plugin interface {INTERFACE_VERSION} (loads {OLDEST_INTERFACE_VERSION} to \
             {INTERFACE_VERSION})",
            env!("CARGO_PKG_VERSION")
        )
    })
}

/// rho: compiled tools for AI agents, loaded from plugin directories.
#[derive(Parser)]
#[command(name = "rho", version = version_text(), about)]
struct Cli {
    /// The configuration file (rho.toml); flags override it. Without one, defaults apply.
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the tools of the plugins in a directory.
    Tools(tools::Args),
    /// Call one tool through the same runner a host uses.
    Call(call::Args),
    /// Run a scripted session (a JSON array of assistant turns) and print what happens.
    Run(run::Args),
    /// Serve every plugin's tools to any MCP client, over stdio or Streamable HTTP (--http).
    Serve(serve::Args),
    /// Serve the plugins' tools to other hosts over NATS (they add `[[remote]] nats = URL`).
    Node(node::Args),
    /// Show the live event stream of a session (and, with no script, of the plugin directories).
    Watch(watch::Args),
    /// Plugins: make, rebuild on save and check one; sign, publish, install, update, verify,
    /// list and remove them (OCI registries); make signing keys.
    #[command(subcommand)]
    Plugin(plugin::Command),
    /// Named tokens of `rho serve --http`: add (printed once), remove, list.
    #[command(subcommand)]
    Token(token::Command),
    /// Check a policy file, and what a principal may list and call under it.
    #[command(subcommand)]
    Policy(policy::Command),
}

fn main() -> ExitCode {
    // Before anything else: a stop signal is never lost, whenever it comes (see `signals`).
    let inherited = signals::catch_early();
    let cli = Cli::parse();
    host::init_logging();
    let long_running = matches!(
        cli.command,
        Command::Serve(_) | Command::Watch(_) | Command::Node(_)
    );
    if !long_running {
        signals::release_early(inherited);
    }
    // Plugin authors' commands need neither a configuration nor the async runtime.
    let command = match cli.command {
        Command::Plugin(command) => return plugin::main(command),
        other => other,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rho: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(async {
        // The long-running commands stop on SIGINT and SIGTERM from their first moment.
        if long_running && let Err(line) = signals::install() {
            eprintln!("rho: {line}");
            return ExitCode::from(1);
        }
        let config = match host::load_config(cli.config.as_deref()) {
            Ok(config) => config,
            Err(code) => return code,
        };
        let code = match command {
            Command::Tools(args) => tools::main(args, config).await,
            Command::Call(args) => call::main(args, config).await,
            Command::Run(args) => run::main(args, config).await,
            Command::Watch(args) => watch::main(args, config).await,
            Command::Serve(args) => serve::main(args, config).await,
            Command::Node(args) => node::main(args, config).await,
            Command::Plugin(command) => plugin::main(command),
            Command::Token(command) => token::main(command, &config),
            Command::Policy(command) => policy::main(command, config).await,
        };
        // What the calls exported is sent before the process exits.
        telemetry::flush().await;
        code
    });
    // Runaway plugin threads must not keep the process alive.
    runtime.shutdown_background();
    // What a host still loading when it was let go (a start-up stopped by a signal) held.
    rho_worker::loader::copy::remove_this_process_copies();
    code
}
