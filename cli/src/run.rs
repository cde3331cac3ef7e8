//! `rho run`: a scripted session, printed as it happens.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use rho_core::{Bus, BusItem, Gate, Loop, LoopConfig, ScriptedModel};
use tokio_stream::StreamExt;

use crate::config::Config;
use crate::gates::TerminalAsker;
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
    /// Calls of one turn that run at once, 1 to 1024 (default: the config's, else 8).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=crate::host::MAX_PARALLEL))]
    max_parallel: Option<u64>,
}

pub async fn main(args: Args, config: Config) -> ExitCode {
    let detail = if args.json { None } else { Some(Detail::Calls) };
    let session = Session {
        config,
        plugins: args.plugins,
        run: args.run,
        max_parallel: args.max_parallel.map(|n| n as usize),
    };
    session.run(&args.script, detail).await
}

/// A scripted session over the plugins, printed as it happens. Shared with `rho watch`.
pub struct Session {
    pub config: Config,
    pub plugins: PluginFlags,
    pub run: RunFlags,
    pub max_parallel: Option<usize>,
}

impl Session {
    /// Runs `script` and prints its events: human lines at `detail`, or JSON lines for `None`.
    pub async fn run(self, script: &std::path::Path, detail: Option<Detail>) -> ExitCode {
        let model = match ScriptedModel::from_file(script) {
            Ok(model) => model,
            Err(e) => return host::usage(&e.to_string()),
        };
        let gate: Arc<dyn Gate> =
            match host::gate(&self.config, &self.run, Arc::new(TerminalAsker::default())) {
                Ok(gate) => gate,
                Err(message) => return host::usage(&message),
            };
        let bus = Bus::default();
        let subscription = bus.subscribe();
        let printer = tokio::spawn(print_events(subscription, detail));
        let (registry, dirs) = match host::registry(&bus, &self.config, &self.plugins).await {
            Ok(loaded) => loaded,
            Err(code) => return code,
        };
        // Reloads during the session are shown (and served) as they happen.
        let _watchers = host::watch(&dirs);
        let runner = host::runner(registry, &self.config, &self.run);
        let loop_config = LoopConfig {
            max_parallel: self.max_parallel.unwrap_or(self.config.runner.max_parallel),
            keep_details: self.config.runner.keep_details,
            ..LoopConfig::default()
        };
        let mut session = Loop::new("session-1", runner, gate, loop_config);
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
