//! `rho watch`: the screen a person keeps open beside an agent. One line per event (`--json`: the
//! raw events), and a per-tool health table (calls, errors, crashes, timeouts, p50/p99,
//! quarantines) every few seconds when something changed, and at the end.
//!
//! It runs a scripted session, follows plugin directories, or attaches to a running `rho serve`
//! through its journal (`rho serve --journal PATH`, then `rho watch --attach PATH`).

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use rho_core::{BusItem, Event};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio_stream::StreamExt;

use crate::host::{self, PluginFlags, RunFlags};
use crate::render::{self, Detail};
use crate::view::Health;
use rho_core::HostConfig;

/// `rho watch` flags.
#[derive(clap::Args)]
pub struct Args {
    /// A script to run as a session while watching (a JSON array of assistant turns). Without
    /// one, rho watch follows the plugin directories, or the journal given to --attach.
    script: Option<PathBuf>,
    #[command(flatten)]
    plugins: PluginFlags,
    #[command(flatten)]
    run: RunFlags,
    /// Follow the journal of a running `rho serve` (its --journal file) instead.
    #[arg(long, value_name = "JOURNAL", conflicts_with = "script")]
    attach: Option<PathBuf>,
    /// Print every event as one JSON object per line.
    #[arg(long)]
    json: bool,
    /// Seconds between health tables (0: only at the end).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    summary_secs: u64,
    /// Calls of one turn that run at once.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=rho_core::MAX_PARALLEL))]
    max_parallel: Option<u64>,
}

pub async fn main(args: Args, config: HostConfig) -> ExitCode {
    let detail = if args.json { None } else { Some(Detail::All) };
    if let Some(journal) = &args.attach {
        return follow_journal(journal, detail, args.summary_secs).await;
    }
    let Some(script) = &args.script else {
        return follow_dirs(&config, &args.plugins, detail, args.summary_secs).await;
    };
    let session = crate::run::Session {
        config,
        plugins: args.plugins,
        run: args.run,
        max_parallel: args.max_parallel.map(|n| n as usize),
    };
    session.run(script, detail).await
}

/// Prints one event for the view and feeds the health table.
fn show(event: &Event, detail: Option<Detail>, health: &mut Health) -> bool {
    health.observe(event);
    let line = match detail {
        None => serde_json::to_string(event).ok(),
        Some(detail) => render::event_line(event, detail),
    };
    line.is_none_or(|l| render::print_line(&l))
}

fn summary(health: &mut Health, json: bool) {
    if health.changed() && !json {
        render::print_line(&format!("\n{}", health.table()));
    }
}

/// Loads and watches the directories and prints their events until Ctrl-C.
async fn follow_dirs(
    config: &HostConfig,
    plugins: &PluginFlags,
    detail: Option<Detail>,
    every: u64,
) -> ExitCode {
    let bus = rho_core::Bus::default();
    let mut events = bus.subscribe();
    let _host = match host::build(config, plugins, None, |b| b.bus(bus).watch(true)).await {
        Ok(built) => built,
        Err(code) => return code,
    };
    let mut health = Health::default();
    let mut tick = ticker(every);
    // One future for the whole loop: a signal between two iterations is not lost.
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            item = events.next() => match item {
                Some(BusItem::Event(e)) => {
                    if !show(&e, detail, &mut health) {
                        return ExitCode::SUCCESS;
                    }
                }
                Some(BusItem::Lagged { missed, .. }) => eprintln!("rho: the view missed {missed} event(s)"),
                None => return ExitCode::SUCCESS,
            },
            _ = tick.tick() => summary(&mut health, detail.is_none()),
            _ = &mut ctrl_c => {
                summary(&mut health, detail.is_none());
                return ExitCode::SUCCESS;
            }
        }
    }
}

fn ticker(every: u64) -> tokio::time::Interval {
    let period = if every == 0 {
        Duration::from_secs(86_400 * 365)
    } else {
        Duration::from_secs(every)
    };
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
}

/// The longest journal line read: 256 MiB.
const MAX_JOURNAL_LINE: usize = 256 << 20;

/// Follows a journal file as it grows (like `tail -f`), printing each event, until Ctrl-C.
async fn follow_journal(path: &Path, detail: Option<Detail>, every: u64) -> ExitCode {
    // Only a regular file: a FIFO or a device (`/dev/zero`) would hang or grow without bound.
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .and_then(|f| f.metadata().map(|m| (f, m)));
    let file = match opened {
        Ok((file, meta)) if meta.is_file() => tokio::fs::File::from_std(file),
        Ok(_) => {
            eprintln!("rho: {}: not a regular file", path.display());
            return ExitCode::from(1);
        }
        Err(e) => {
            eprintln!("rho: cannot open the journal {}: {e}", path.display());
            return ExitCode::from(1);
        }
    };
    let mut reader = BufReader::new(file);
    let mut health = Health::default();
    let mut tick = ticker(every);
    let mut line = String::new();
    let mut last_seq = 0;
    // One future for the whole loop: a signal between two iterations is not lost.
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let room = MAX_JOURNAL_LINE + 1 - line.len().min(MAX_JOURNAL_LINE);
        let mut limited = (&mut reader).take(room as u64);
        tokio::select! {
            read = limited.read_line(&mut line) => match read {
                Ok(0) => tokio::time::sleep(Duration::from_millis(50)).await,
                Ok(_) if line.ends_with('\n') => {
                    if let Ok(event) = serde_json::from_str::<Event>(&line) {
                        if event.seq != last_seq + 1 && last_seq != 0 {
                            eprintln!("rho: the journal skips from seq {last_seq} to {}", event.seq);
                        }
                        last_seq = event.seq;
                        if !show(&event, detail, &mut health) {
                            return ExitCode::SUCCESS;
                        }
                    }
                    line.clear();
                }
                Ok(_) if line.len() > MAX_JOURNAL_LINE => {
                    eprintln!(
                        "rho: {}: a line of more than {MAX_JOURNAL_LINE} bytes: not a journal",
                        path.display()
                    );
                    return ExitCode::from(1);
                }
                // A line still being written: keep it and read the rest later.
                Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(e) => {
                    eprintln!("rho: reading the journal {}: {e}", path.display());
                    return ExitCode::from(1);
                }
            },
            _ = tick.tick() => summary(&mut health, detail.is_none()),
            _ = &mut ctrl_c => {
                summary(&mut health, detail.is_none());
                return ExitCode::SUCCESS;
            }
        }
    }
}
