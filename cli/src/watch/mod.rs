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

use rho_runtime::{BusItem, Event};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncSeekExt, BufReader};
use tokio_stream::StreamExt;

mod display;
mod nats;
mod remote;

use display::Display;

use crate::config::Config;
use crate::host::{self, PluginFlags, RunFlags};
use crate::render::Detail;

/// `rho watch` flags.
#[derive(clap::Args)]
#[command(
    after_help = "Exit status: 0 on SIGINT (Ctrl-C) or SIGTERM, at any moment, or at the end of the session, 1 when a plugin directory is unusable or the journal cannot be read, 2 for a usage error."
)]
pub struct Args {
    /// A script to run as a session while watching (a JSON array of assistant turns). Without
    /// one, rho watch follows the plugin directories, or the journal given to --attach.
    #[arg(value_name = "SCRIPT")]
    script: Option<PathBuf>,
    #[command(flatten)]
    plugins: PluginFlags,
    #[command(flatten)]
    run: RunFlags,
    /// Follow the journal of a `rho serve` instead (PATH, or without one the newest under
    /// ~/.local/state/rho), or the events of a `rho serve --http` (http://HOST:PORT); it follows
    /// the server across restarts and reconnects where it stopped.
    #[arg(long, value_name = "PATH|URL", num_args = 0..=1, conflicts_with = "script")]
    attach: Option<Option<PathBuf>>,
    /// The bearer token of the server given to --attach as a URL (or, with --web, of this
    /// watcher's page): the first line of this file.
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// Follow the events hosts publish to this NATS server (`nats://HOST:PORT`; `rho serve
    /// --nats`), through a durable consumer: started again, it goes on where it stopped.
    #[arg(long, value_name = "URL", conflicts_with_all = ["script", "attach"])]
    nats: Option<String>,
    /// With --nats: only this host's events (default: every host's).
    #[arg(long, value_name = "NAME", requires = "nats")]
    host: Option<String>,
    /// With --nats: the durable consumer's name (default rho-watch-<host> or rho-watch-all); one
    /// watcher per name.
    #[arg(long, value_name = "NAME", requires = "nats")]
    durable: Option<String>,
    /// With --nats: also serve the live page of the followed events at http://ADDR/ (as `rho
    /// serve --http --web` does; a token is required off loopback, as there).
    #[arg(long, value_name = "ADDR", requires = "nats")]
    web: Option<std::net::SocketAddr>,
    /// Print every event as one JSON object per line.
    #[arg(long)]
    json: bool,
    /// Print plain lines even on a terminal (the default there is the live view, redrawn in
    /// place).
    #[arg(long)]
    plain: bool,
    /// Seconds between health tables (0: only at the end).
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    summary_secs: u64,
    /// Calls of one turn that run at once.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=rho_runtime::MAX_PARALLEL))]
    max_parallel: Option<u64>,
}

pub async fn main(args: Args, config: Config) -> ExitCode {
    let detail = if args.json { None } else { Some(Detail::All) };
    use std::io::IsTerminal;
    let live = detail.is_some() && !args.plain && std::io::stdout().is_terminal();
    let display = |source: &str| Display::new(live, source, detail, args.summary_secs);
    if let Some(url) = &args.nats {
        let nats = crate::nats::config_with(&config, Some(url), None);
        eprintln!(
            "rho: following {url}, stream {}, {}",
            nats.stream,
            args.host
                .as_deref()
                .map_or("every host".to_owned(), |h| format!("host {h}"))
        );
        let display = display(url);
        let follow = nats::Follow {
            host: args.host.as_deref(),
            durable: args.durable.as_deref(),
            web: args.web,
            token_file: args.token_file.as_deref(),
        };
        return nats::follow(&nats, follow, display).await;
    }
    if let Some(Some(url)) = &args.attach
        && let Some(authority) = url.to_str().and_then(|u| u.strip_prefix("http://"))
    {
        let token = match &args.token_file {
            Some(path) => match std::fs::read_to_string(path) {
                Ok(text) => Some(text.lines().next().unwrap_or_default().trim().to_owned()),
                Err(e) => {
                    eprintln!("rho: token file {}: {e}", path.display());
                    return ExitCode::from(1);
                }
            },
            None => None,
        };
        let authority = authority.trim_end_matches('/').to_owned();
        eprintln!("rho: following http://{authority}/events");
        let display = display(&format!("http://{authority}"));
        return remote::follow(&authority, token.as_deref(), display).await;
    }
    if let Some(journal) = &args.attach {
        // Without a path: the newest running server's journal, and the next one's when a newer
        // server starts.
        let newest = journal.is_none();
        let journal = match journal {
            Some(path) => path.clone(),
            None => match crate::journals::newest_running() {
                Ok(path) => path,
                Err(e) => {
                    eprintln!("rho: {e}");
                    return ExitCode::from(1);
                }
            },
        };
        eprintln!("rho: following {}", journal.display());
        let display = display(&journal.display().to_string());
        return follow_journal(journal, display, newest).await;
    }
    let Some(script) = &args.script else {
        return follow_dirs(
            &config,
            &args.plugins,
            &args.run,
            display("plugin directories"),
        )
        .await;
    };
    let session = crate::run::Session {
        config,
        plugins: args.plugins,
        run: args.run,
        max_parallel: args.max_parallel.map(|n| n as usize),
    };
    // A stop signal ends the session (its host dropped: calls in flight end).
    tokio::select! {
        code = session.run(script, detail) => code,
        signal = crate::signals::stopped() => {
            eprintln!("rho: {signal}: the session stopped");
            ExitCode::SUCCESS
        }
    }
}

/// Loads and watches the directories and prints their events until Ctrl-C.
async fn follow_dirs(
    config: &Config,
    plugins: &PluginFlags,
    run: &RunFlags,
    mut display: Display,
) -> ExitCode {
    let bus = rho_runtime::Bus::default();
    let mut events = bus.subscribe();
    let (host, _) = match host::build(config, plugins, Some(run), |b| b.bus(bus).watch(true)).await
    {
        Ok(built) => built,
        Err(code) => return code,
    };
    // `rho call --host` runs calls in this host: they show here.
    let _control = crate::control::listen(&host);
    let mut tick = display.ticker();
    // One future for the whole loop: a signal between two iterations is not lost.
    let stop = crate::signals::stopped();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            item = events.next() => match item {
                Some(BusItem::Event(e)) => {
                    if !display.show(&e) {
                        return ExitCode::SUCCESS;
                    }
                }
                Some(BusItem::Lagged { missed, .. }) => eprintln!("rho: the view missed {missed} event(s)"),
                None => return ExitCode::SUCCESS,
            },
            _ = tick.tick() => display.tick(),
            _ = &mut stop => {
                display.finish();
                return ExitCode::SUCCESS;
            }
        }
    }
}

/// The longest journal line read: 256 MiB.
const MAX_JOURNAL_LINE: usize = 256 << 20;

/// Opens `path` for following: a regular file only (a FIFO or a device such as `/dev/zero` would
/// hang or grow without bound). Returns the reader and the file's inode.
fn open_journal(path: &Path) -> Result<(BufReader<tokio::fs::File>, u64), String> {
    use std::os::unix::fs::MetadataExt;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .and_then(|f| f.metadata().map(|m| (f, m)));
    match opened {
        Ok((file, meta)) if meta.is_file() => {
            Ok((BufReader::new(tokio::fs::File::from_std(file)), meta.ino()))
        }
        Ok(_) => Err(format!("{}: not a regular file", path.display())),
        Err(e) => Err(format!("cannot open the journal {}: {e}", path.display())),
    }
}

/// Whether the file at `path` is no longer the one being read (`inode`) or is shorter than what
/// was read (`read`): rotated, replaced or truncated. Then the follower starts it over.
fn replaced(path: &Path, inode: u64, read: u64) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).is_ok_and(|m| m.ino() != inode || m.len() < read)
}

/// Follows a journal file as it grows (like `tail -f`), printing each event, until Ctrl-C. A
/// server restarted on the same file (its `seq` starts again) or a file replaced under the same
/// path is followed on, with a line saying so.
async fn follow_journal(mut path: PathBuf, mut display: Display, newest: bool) -> ExitCode {
    let (mut reader, mut inode) = match open_journal(&path) {
        Ok(opened) => opened,
        Err(e) => {
            eprintln!("rho: {e}");
            return ExitCode::from(1);
        }
    };
    let mut read: u64 = 0;
    let mut idle_reads = 0u32;
    let mut tick = display.ticker();
    let mut line = String::new();
    let mut last_seq = 0;
    // Whether the journal's server was seen gone (said once).
    let mut ended = false;
    // Where each journal followed before was left (inode, bytes read, last seq): one followed
    // again goes on from there, so no event is shown (or counted) twice.
    let mut left: std::collections::HashMap<PathBuf, (u64, u64, u64)> = Default::default();
    // One future for the whole loop: a signal between two iterations is not lost.
    let stop = crate::signals::stopped();
    tokio::pin!(stop);
    loop {
        let room = MAX_JOURNAL_LINE + 1 - line.len().min(MAX_JOURNAL_LINE);
        let mut limited = (&mut reader).take(room as u64);
        tokio::select! {
            got = limited.read_line(&mut line) => match got {
                Ok(0) => {
                    idle_reads += 1;
                    // About every half second at the end of the file: a server that started
                    // after this one's, to follow? (Never an older one, even when this one ends.)
                    if newest && idle_reads.is_multiple_of(10)
                        && let Ok(newer) = crate::journals::newest_running()
                        && newer != path
                        && crate::journals::started_ms(&newer) > crate::journals::started_ms(&path)
                        && crate::journals::in_use(&newer)
                    {
                        match open_journal(&newer) {
                            Ok((mut new_reader, new_inode)) => {
                                display.source_changed(
                                    &newer.display().to_string(),
                                    &format!("a newer server started; following {}", newer.display()),
                                );
                                left.insert(path.clone(), (inode, read, last_seq));
                                let (from, seq) = match left.get(&newer) {
                                    Some(&(seen, at, seq)) if seen == new_inode => (at, seq),
                                    _ => (0, 0),
                                };
                                if from > 0 && new_reader.seek(std::io::SeekFrom::Start(from)).await.is_err() {
                                    eprintln!("rho: cannot go on in {} where it was left", newer.display());
                                }
                                (reader, inode, read, last_seq, ended) = (new_reader, new_inode, from, seq, false);
                                path = newer;
                                line.clear();
                                continue;
                            }
                            Err(e) => eprintln!("rho: {e}"),
                        }
                    }
                    // Its server gone: the journal is complete (said once, until a server writes
                    // it again).
                    if idle_reads.is_multiple_of(10) && ended && crate::journals::in_use(&path) {
                        ended = false;
                        display.source_changed(
                            &path.display().to_string(),
                            &format!("a server writes {} again", path.display()),
                        );
                    }
                    if idle_reads.is_multiple_of(10) && !ended && !crate::journals::in_use(&path) {
                        ended = true;
                        let waiting = if newest { "; waiting for a newer server" } else { "" };
                        display.source_changed(
                            &format!("{} (ended)", path.display()),
                            &format!("the server of {} has ended{waiting}", path.display()),
                        );
                    }
                    // Has it been replaced?
                    if idle_reads.is_multiple_of(10) && replaced(&path, inode, read) {
                        match open_journal(&path) {
                            Ok((new_reader, new_inode)) => {
                                eprintln!("rho: {} was replaced; following the new file", path.display());
                                (reader, inode, read, last_seq) = (new_reader, new_inode, 0, 0);
                                line.clear();
                                continue;
                            }
                            Err(e) => eprintln!("rho: {e}"),
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Ok(n) if line.ends_with('\n') => {
                    read += n as u64;
                    idle_reads = 0;
                    if let Ok(event) = serde_json::from_str::<Event>(&line) {
                        if event.seq <= last_seq {
                            eprintln!("rho: the server restarted (seq {} after {last_seq}); following its new run", event.seq);
                        } else if event.seq != last_seq + 1 && last_seq != 0 {
                            eprintln!("rho: the journal skips from seq {last_seq} to {}", event.seq);
                        }
                        last_seq = event.seq;
                        if !display.show(&event) {
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
                Ok(n) => {
                    read += n as u64;
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                Err(e) => {
                    eprintln!("rho: reading the journal {}: {e}", path.display());
                    return ExitCode::from(1);
                }
            },
            _ = tick.tick() => display.tick(),
            _ = &mut stop => {
                display.finish();
                return ExitCode::SUCCESS;
            }
        }
    }
}
