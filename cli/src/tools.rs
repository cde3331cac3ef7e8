//! `rho tools`: the tools of the plugins in a directory.

use std::process::ExitCode;

use tokio_stream::StreamExt;

use crate::host::{self, PluginFlags};

/// `rho tools` flags.
#[derive(clap::Args)]
#[command(
    after_help = "Exit status: 0 when the directories loaded (\"no tools\" included), 1 when one is unusable or the list cannot be printed, 2 for a usage error."
)]
pub struct Args {
    #[command(flatten)]
    plugins: PluginFlags,
    /// Print a JSON array of {name, title, description, parameters, output_schema, hints,
    /// max_result_bytes, timeout_ms, plugin, plugin_version}.
    #[arg(long)]
    json: bool,
    /// Keep watching the directories and print the list again after every reload (Ctrl-C ends).
    #[arg(long)]
    watch: bool,
    /// List only what this principal may list under the policy in force (--policy, `[policy]`),
    /// as JSON: {"id": "alice", "auth": "oauth", "scopes": ["tools:read"]}.
    #[arg(long, value_name = "JSON")]
    principal: Option<String>,
}

pub async fn main(args: Args, config: crate::config::Config) -> ExitCode {
    let principal = match args.principal.as_deref().map(crate::policy::principal_flag) {
        Some(Err(code)) => return code,
        Some(Ok(principal)) => Some(principal),
        None => None,
    };
    // What this command shows: every tool, or those the principal may list.
    let shown = |host: &rho_runtime::Host| match &principal {
        Some(principal) => host.tools_for(Some(principal), rho_runtime::Via::Embedded),
        None => host.tools(),
    };
    let watch = args.watch;
    let (host, _) = match host::build(&config, &args.plugins, None, |b| b.watch(watch)).await {
        Ok(built) => built,
        Err(code) => return code,
    };
    if !print(&shown(&host), args.json) {
        return ExitCode::from(1);
    }
    if !args.json {
        print_plugins(&host.plugins().await);
    }
    // `print` says "no tools" for an empty list: that is a result, not a failure.
    if !args.watch {
        // Its sources (MCP servers) stopped and cleaned up before the process exits.
        host.shutdown().await;
        return ExitCode::SUCCESS;
    }
    let mut events = host.subscribe_filtered(rho_runtime::Filter::default().types([
        rho_runtime::EventType::PluginLoaded,
        rho_runtime::EventType::PluginReloaded,
        rho_runtime::EventType::PluginRemoved,
        rho_runtime::EventType::PluginLoadFailed,
        rho_runtime::EventType::ToolNameConflict,
        rho_runtime::EventType::ToolQuarantined,
        rho_runtime::EventType::ToolProbing,
        rho_runtime::EventType::ToolRestored,
        rho_runtime::EventType::Warning,
        rho_runtime::EventType::PolicyChanged,
    ]));
    // One future for the whole loop: a signal between two iterations is not lost.
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            item = events.next() => match item {
                Some(rho_runtime::BusItem::Event(event)) => {
                    if let Some(line) = crate::render::event_line(&event, crate::render::Detail::All) {
                        eprintln!("{line}");
                    }
                    if matches!(event.kind, rho_runtime::EventKind::PluginLoaded { .. }
                        | rho_runtime::EventKind::PluginReloaded { .. }
                        | rho_runtime::EventKind::PluginRemoved { .. }
                        | rho_runtime::EventKind::PolicyChanged { .. })
                        && !print(&shown(&host), args.json)
                    {
                        return ExitCode::from(1);
                    }
                }
                Some(rho_runtime::BusItem::Lagged { .. }) => {}
                None => return ExitCode::SUCCESS,
            },
            _ = &mut ctrl_c => return ExitCode::SUCCESS,
        }
    }
}

/// Prints the tool list; `false` if it could not be encoded.
fn print(tools: &[rho_runtime::ToolSpec], json: bool) -> bool {
    if json {
        return match serde_json::to_string_pretty(tools) {
            Ok(json) => {
                outln!("{json}");
                true
            }
            Err(e) => {
                eprintln!("rho: cannot encode the tool list: {e}");
                false
            }
        };
    }
    if tools.is_empty() {
        outln!("no tools");
    }
    for tool in tools {
        let mut timeout = tool
            .timeout_ms
            .map(|ms| format!(", timeout {ms} ms"))
            .unwrap_or_default();
        if let Some(ms) = tool.idle_timeout_ms {
            timeout.push_str(&format!(", idle limit {ms} ms"));
        }
        outln!("{}  ({}{timeout})", tool.name, tool.origin());
        if let Some(title) = &tool.title {
            outln!("    {}", crate::render::terminal_safe(title));
        }
        outln!("    {}", crate::render::terminal_safe(&tool.description));
        outln!("    hints: {}", tool.hints);
        // Property names and descriptions come from the plugin: escaped like every text of it.
        let params = crate::render::parameters(&tool.parameters);
        if !params.is_empty() {
            outln!("    args:");
        }
        for p in &params {
            let mut line = format!(
                "      {} ({}, {}",
                p.name,
                p.ty,
                if p.required { "required" } else { "optional" }
            );
            if let Some(default) = &p.default {
                line.push_str(&format!(", default {default}"));
            }
            line.push(')');
            if let Some(description) = &p.description {
                line.push_str(": ");
                line.push_str(description.lines().next().unwrap_or_default());
            }
            outln!("{}", crate::render::terminal_safe(&line));
        }
        if let Some(schema) = &tool.output_schema {
            let summary = crate::render::parameters_summary(schema);
            outln!(
                "    answers: structured ({})",
                crate::render::terminal_safe(&summary)
            );
        }
        if let Some(bytes) = tool.max_result_bytes {
            outln!("    result limit: {bytes} bytes");
        }
    }
    true
}

/// One line per plugin: what it asks for beside what the host grants it.
fn print_plugins(plugins: &[rho_runtime::PluginInfo]) {
    for plugin in plugins {
        let granted = match &plugin.granted {
            Some(grants) => grants.to_string(),
            None => "everything the host can do (in process)".to_owned(),
        };
        let line = format!(
            "plugin {}@{}: asks for {}; granted {}",
            plugin.name, plugin.version, plugin.capabilities, granted
        );
        outln!("{}", crate::render::terminal_safe(&line));
    }
}
