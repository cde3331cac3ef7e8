//! `rho node`: serve a plugin directory's tools to other hosts over NATS (see
//! `rho_bridge_nats::Node`); hosts add them with `[[remote]] nats = URL`.

use std::process::ExitCode;
use std::time::Duration;

use crate::config::Config;
use rho_bridge_nats::{HostName, Node};

use crate::host::{self, PluginFlags, RunFlags};

/// `rho node` flags.
#[derive(clap::Args)]
#[command(
    after_help = "Exit status: 0 on SIGTERM or SIGINT (Ctrl-C), at any moment, 1 when a plugin directory or the NATS settings are unusable, 2 for a usage error."
)]
pub struct Args {
    #[command(flatten)]
    plugins: PluginFlags,
    #[command(flatten)]
    run: RunFlags,
    /// The NATS server to serve on (`nats://HOST:PORT`; replaces [nats] url).
    #[arg(long, value_name = "URL")]
    nats: Option<String>,
    /// This node's name, as callers' crash reports name it (default: [nats] host, else
    /// <machine>-<pid>).
    #[arg(long, value_name = "NAME")]
    node: Option<String>,
}

pub async fn main(args: Args, config: Config) -> ExitCode {
    let nats = crate::nats::config_with(&config, args.nats.as_deref(), args.node.as_deref());
    let Some(url) = nats.url.clone() else {
        return host::usage("rho node serves over NATS: give --nats URL (or [nats] url)");
    };
    let name = match &nats.host {
        Some(name) => match HostName::new(name) {
            Ok(name) => name,
            Err(e) => return host::usage(&e.to_string()),
        },
        None => match HostName::new(&format!(
            "{}-{}",
            HostName::of_this_machine(),
            std::process::id()
        )) {
            Ok(name) => name,
            Err(_) => HostName::of_this_machine(),
        },
    };
    // A node journals where `[serve] journal` says, as a server does (none by default).
    let journal = config.serve.journal.clone();
    let built = host::build(&config, &args.plugins, Some(&args.run), |b| match journal {
        Some(path) => b.watch(true).journal(path),
        None => b.watch(true),
    });
    let (host, _config) = match built.await {
        Ok(built) => built,
        Err(code) => return code,
    };
    let client = match rho_bridge_nats::connect(&nats).await {
        Ok(client) => client,
        Err(e) => {
            eprintln!("rho: {}", crate::render::terminal_safe(&e.to_string()));
            host.shutdown().await;
            return ExitCode::from(1);
        }
    };
    // The server may be down at start: the node registers once it is up.
    let mut told = false;
    let node = loop {
        tokio::select! {
            started = Node::start(&host, client.clone(), name.clone()) => match started {
                Ok(node) => break node,
                Err(e) => {
                    if !told {
                        eprintln!("rho: {}; retrying", crate::render::terminal_safe(&e.to_string()));
                        told = true;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            },
            signal = crate::signals::stopped() => {
                host.shutdown_because(signal).await;
                return ExitCode::SUCCESS;
            }
        }
    };
    eprintln!(
        "rho: node {name} serves {} tools on {url}",
        host.tools().len()
    );
    crate::signals::stopped().await;
    node.stop().await;
    host.shutdown_because("the node is stopping").await;
    ExitCode::SUCCESS
}
