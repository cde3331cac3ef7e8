//! `rho run`: a scripted session, printed as it happens.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use rho_runtime::{Bus, BusItem, ScriptedModel};
use tokio_stream::StreamExt;

use crate::config::Config;
use crate::gates::TerminalAsker;
use crate::host::{self, PluginFlags, RunFlags};
use crate::render::{self, Detail};

/// `rho run` flags.
#[derive(clap::Args)]
#[command(
    after_help = "Exit status: 0 when the session ran to its end (whatever the calls' outcomes), 1 when the model failed or a plugin directory is unusable, 2 for a usage error."
)]
pub struct Args {
    /// The script: a JSON array of {"text", "tool_calls": [{"id", "name", "arguments"}]}.
    #[arg(value_name = "SCRIPT")]
    script: PathBuf,
    #[command(flatten)]
    plugins: PluginFlags,
    #[command(flatten)]
    run: RunFlags,
    /// Print every bus event as one JSON object per line.
    #[arg(long)]
    json: bool,
    /// Calls of one turn that run at once, 1 to 1024 (default: the config's, else 8).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=rho_runtime::MAX_PARALLEL))]
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
        let bus = Bus::default();
        let subscription = bus.subscribe();
        let printer = tokio::spawn(print_events(subscription, detail));
        let mut config = self.config;
        if let Some(n) = self.max_parallel {
            config.host.runner.max_parallel = n;
        }
        let asker = Arc::new(TerminalAsker::default());
        // Reloads during the session are shown (and served) as they happen.
        let built = host::build(&config, &self.plugins, Some(&self.run), |b| {
            b.bus(bus).asker(asker).watch(true)
        });
        let (host, _) = match built.await {
            Ok(built) => built,
            Err(code) => return code,
        };
        let mut session = host
            .agent_loop("session-1")
            .on_behalf_of(std::sync::Arc::new(rho_runtime::Principal::local()));
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
pub async fn print_events(mut events: rho_runtime::Subscription, detail: Option<Detail>) {
    // Once stdout is gone (a closed pipe) the events are still drained, so nothing is held up.
    let mut stdout_open = true;
    let mut ended: Vec<rho_runtime::Outcome> = Vec::new();
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
                if let rho_runtime::EventKind::ToolExecutionEnd { outcome, .. } = &event.kind {
                    ended.push(*outcome);
                }
                if matches!(event.kind, rho_runtime::EventKind::AgentEnd { .. }) {
                    if detail.is_some() && stdout_open {
                        render::print_line(&render::outcome_counts(&ended));
                    }
                    return;
                }
            }
        }
    }
}
