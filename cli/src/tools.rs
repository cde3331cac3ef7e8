//! `rho tools`: the tools of the plugins in a directory.

use std::process::ExitCode;

use rho_core::Bus;

use crate::host::{self, PluginFlags};

/// `rho tools` flags.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    plugins: PluginFlags,
    /// Print a JSON array of {name, description, parameters, timeout_ms, plugin, plugin_version}.
    #[arg(long)]
    json: bool,
}

pub async fn main(args: Args) -> ExitCode {
    let bus = Bus::default();
    let (registry, _dirs) = match host::registry(&bus, &args.plugins).await {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let tools = registry.tools();
    if args.json {
        match serde_json::to_string_pretty(&tools) {
            Ok(json) => outln!("{json}"),
            Err(e) => {
                eprintln!("rho: cannot encode the tool list: {e}");
                return ExitCode::from(1);
            }
        }
        return ExitCode::SUCCESS;
    }
    if tools.is_empty() {
        outln!("no tools");
    }
    for tool in &tools {
        let timeout = tool
            .timeout_ms
            .map(|ms| format!(", timeout {ms} ms"))
            .unwrap_or_default();
        outln!("{}  ({}{timeout})", tool.name, tool.origin());
        outln!("    {}", tool.description);
        let params = crate::render::parameters_summary(&tool.parameters);
        if !params.is_empty() {
            outln!("    args: {params}");
        }
    }
    ExitCode::SUCCESS
}
