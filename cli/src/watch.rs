//! `rho watch`: the live event stream for a person, one line per event (`--json`: raw events).

use std::path::PathBuf;
use std::process::ExitCode;

use rho_core::ScriptedModel;

use crate::host::{self, PluginFlags, RunFlags};
use crate::render::Detail;

/// `rho watch` flags.
#[derive(clap::Args)]
pub struct Args {
    /// A script to run as a session while watching (a JSON array of assistant turns). Without
    /// one, rho watch follows the plugin directories (loads, reloads, failures) until Ctrl-C.
    script: Option<PathBuf>,
    #[command(flatten)]
    plugins: PluginFlags,
    #[command(flatten)]
    run: RunFlags,
    /// Print every event as one JSON object per line.
    #[arg(long)]
    json: bool,
    /// Calls of one turn that run at once.
    #[arg(long, default_value_t = 8)]
    max_parallel: usize,
}

pub async fn main(args: Args) -> ExitCode {
    let detail = if args.json { None } else { Some(Detail::All) };
    let Some(script) = &args.script else {
        return follow_dirs(&args.plugins, detail).await;
    };
    let model = match ScriptedModel::from_file(script) {
        Ok(model) => model,
        Err(e) => return host::usage(&e.to_string()),
    };
    let gate = match host::gate(&args.run.gate) {
        Ok(gate) => gate,
        Err(message) => return host::usage(&message),
    };
    crate::run::session(
        args.plugins,
        args.run,
        model,
        gate,
        detail,
        args.max_parallel,
    )
    .await
}

/// Loads and watches the directories and prints their events until Ctrl-C.
async fn follow_dirs(plugins: &PluginFlags, detail: Option<Detail>) -> ExitCode {
    let bus = rho_core::Bus::default();
    let events = bus.subscribe();
    let printer = tokio::spawn(crate::run::print_events(events, detail));
    let (_registry, dirs) = match host::registry(&bus, plugins).await {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let _watchers = host::watch(&dirs);
    let _ = tokio::signal::ctrl_c().await;
    printer.abort();
    ExitCode::SUCCESS
}
