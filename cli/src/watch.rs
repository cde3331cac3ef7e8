//! `rho watch`: the live event stream for a person, one line per event (`--json`: raw events).

use std::path::PathBuf;
use std::process::ExitCode;

use rho_core::ScriptedModel;

use crate::host::{self, PluginFlags, RunFlags};
use crate::render::Detail;

/// `rho watch` flags.
#[derive(clap::Args)]
pub struct Args {
    /// A script to run as a session while watching (a JSON array of assistant turns).
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
    let Some(script) = &args.script else {
        return host::usage("rho watch needs a SCRIPT.json to run while watching");
    };
    let model = match ScriptedModel::from_file(script) {
        Ok(model) => model,
        Err(e) => return host::usage(&e.to_string()),
    };
    let gate = match host::gate(&args.run.gate) {
        Ok(gate) => gate,
        Err(message) => return host::usage(&message),
    };
    let detail = if args.json { None } else { Some(Detail::All) };
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
