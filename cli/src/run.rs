//! `rho run`: a scripted session, printed as it happens.

use std::path::PathBuf;
use std::process::ExitCode;

use rho_core::{Bus, BusItem, KeepDetails, Loop, LoopConfig, ScriptedModel};
use tokio_stream::StreamExt;

use crate::host::{self, PluginFlags, RunFlags};
use crate::render::{self, Detail};

/// `rho run` flags.
#[derive(clap::Args)]
pub struct Args {
    /// The script: a JSON array of {"text", "tool_calls": [{"id", "name", "arguments"}]}.
    script: PathBuf,
    #[command(flatten)]
    plugins: PluginFlags,
    #[command(flatten)]
    run: RunFlags,
    /// Print every bus event as one JSON object per line.
    #[arg(long)]
    json: bool,
    /// Calls of one turn that run at once.
    #[arg(long, default_value_t = 8)]
    max_parallel: usize,
}

pub async fn main(args: Args) -> ExitCode {
    let model = match ScriptedModel::from_file(&args.script) {
        Ok(model) => model,
        Err(e) => return host::usage(&e.to_string()),
    };
    let gate = match host::gate(&args.run.gate) {
        Ok(gate) => gate,
        Err(message) => return host::usage(&message),
    };
    let detail = if args.json { None } else { Some(Detail::Calls) };
    session(
        args.plugins,
        args.run,
        model,
        gate,
        detail,
        args.max_parallel,
    )
    .await
}

/// Runs `model` as a session over the plugins and prints its events: human lines at `detail`, or
/// JSON lines when `detail` is `None`. Shared with `rho watch`.
pub async fn session(
    plugins: PluginFlags,
    run: RunFlags,
    model: ScriptedModel,
    gate: std::sync::Arc<dyn rho_core::Gate>,
    detail: Option<Detail>,
    max_parallel: usize,
) -> ExitCode {
    let bus = Bus::default();
    let subscription = bus.subscribe();
    let printer = tokio::spawn(print_events(subscription, detail));
    let (registry, dirs) = match host::registry(&bus, &plugins).await {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    // Reloads during the session are shown (and served) as they happen.
    let _watchers = host::watch(&dirs);
    let runner = host::runner(registry, &run);
    let config = LoopConfig {
        max_parallel,
        keep_details: KeepDetails::All,
        ..LoopConfig::default()
    };
    let mut session = Loop::new("session-1", runner, gate, config);
    let result = session.run(&model).await;
    // The printer stops at agent_end.
    let _ = printer.await;
    match result {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rho: the model failed: {e}");
            ExitCode::from(1)
        }
    }
}

/// Prints events until `agent_end` (or the stream ends): JSON lines when `detail` is `None`.
pub async fn print_events(mut events: rho_core::Subscription, detail: Option<Detail>) {
    // Once stdout is gone (a closed pipe) the events are still drained, so nothing is held up.
    let mut stdout_open = true;
    while let Some(item) = events.next().await {
        match item {
            BusItem::Lagged {
                missed,
                resume_from,
            } => {
                eprintln!(
                    "rho: the view fell behind and missed {missed} event(s) from seq {resume_from}"
                );
            }
            BusItem::Event(event) => {
                let line = match detail {
                    None => serde_json::to_string(&*event).ok(),
                    Some(detail) => render::event_line(&event, detail),
                };
                if let Some(line) = line.filter(|_| stdout_open) {
                    stdout_open = render::print_line(&line);
                }
                if matches!(event.kind, rho_core::EventKind::AgentEnd { .. }) {
                    return;
                }
            }
        }
    }
}
