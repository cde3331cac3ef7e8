//! rho and NATS from the command line: `rho serve --nats URL` exports the host's events to
//! JetStream; `rho watch --nats URL` follows them from anywhere (see `rho_bridge_nats`).

use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

use rho_bridge_nats::{EventExport, ExportConfig, Follower, HostName};
use rho_runtime::{Host, HostConfig, NatsConfig};

use crate::watch::Display;

/// The NATS flags of `rho serve`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ExportFlags {
    /// Publish every event to this NATS server's JetStream (`nats://HOST:PORT`; replaces
    /// [nats] url), on the subjects rho.<host>.<type>.
    #[arg(long, value_name = "URL")]
    pub nats: Option<String>,
    /// This host's name in those subjects (default: [nats] host, else the machine's name).
    #[arg(long, value_name = "NAME", requires = "nats")]
    pub nats_host: Option<String>,
}

/// `config`'s `[nats]` with `url` (and `host`) replaced where given.
pub fn config_with(config: &HostConfig, url: Option<&str>, host: Option<&str>) -> NatsConfig {
    let mut nats = config.nats.clone();
    if let Some(url) = url {
        nats.url = Some(url.to_owned());
    }
    if let Some(host) = host {
        nats.host = Some(host.to_owned());
    }
    nats
}

/// The host name of `nats`: the configured one, or this machine's.
fn host_name(nats: &NatsConfig) -> Result<HostName, rho_bridge_nats::NatsError> {
    match &nats.host {
        Some(name) => HostName::new(name),
        None => Ok(HostName::of_this_machine()),
    }
}

/// Adds the tools of the `rho node`s of each `[[remote]]` to `host`, waiting up to 1 s for the
/// nodes to announce them (so a one-shot command sees them). `Err` is the line saying which
/// remote cannot be used (credentials unreadable, a bad URL); a server that is down is not an
/// error: its nodes' tools come when it does.
pub async fn add_remotes(
    host: &Host,
    remotes: &[rho_runtime::RemoteConfig],
    name: Option<&str>,
) -> Result<(), String> {
    if remotes.is_empty() {
        return Ok(());
    }
    let mut changes = host.subscribe_filtered(
        rho_runtime::Filter::default().types([rho_runtime::EventType::RemoteToolsChanged]),
    );
    for remote in remotes {
        let client = rho_bridge_nats::connect(&remote.nats_config(name))
            .await
            .map_err(|e| format!("[[remote]] {}: {e}", remote.nats))?;
        host.add_source(&remote.nats, rho_bridge_nats::NodeTools::new(client));
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        for _ in remotes {
            changes.recv().await;
        }
    })
    .await;
    Ok(())
}

/// The export of this process's host, flushed at its end ([`flush`]).
static EXPORT: Mutex<Option<EventExport>> = Mutex::new(None);

/// Starts exporting `host`'s events when `nats` names a server and exporting is on; one line on
/// stderr says where. `Err` is the line saying why it cannot.
pub async fn start_export(host: &Host, nats: &NatsConfig) -> Result<(), String> {
    let Some(url) = nats.url.as_deref().filter(|_| nats.export) else {
        return Ok(());
    };
    let name = host_name(nats).map_err(|e| e.to_string())?;
    let client = rho_bridge_nats::connect(nats)
        .await
        .map_err(|e| e.to_string())?;
    let mut config = ExportConfig::new(name.clone());
    config.stream = nats.stream.clone();
    let export = EventExport::start(host, client, config).map_err(|e| e.to_string())?;
    eprintln!(
        "rho: events to {url}, stream {}, subjects rho.{name}.<type>",
        nats.stream
    );
    *EXPORT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(export);
    Ok(())
}

/// Gives the export up to 2 s to publish the host's last events, then stops it.
pub async fn flush(host: &Host) {
    let export = EXPORT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    if let Some(export) = export {
        let last = host.bus().last_seq();
        if !export.confirmed(last, Duration::from_secs(2)).await {
            let status = export.status();
            eprintln!(
                "rho: {} events not confirmed by NATS at exit (they are in the journal)",
                status.behind()
            );
        }
        export.stop().await;
    }
}

/// What `rho watch --nats` follows, and where it shows it besides the terminal.
pub struct Follow<'a> {
    /// One host's events (all hosts' without).
    pub host: Option<&'a str>,
    /// The durable consumer's name (default `rho-watch-<host>` or `rho-watch-all`).
    pub durable: Option<&'a str>,
    /// Serve the live page of the followed events here.
    pub web: Option<std::net::SocketAddr>,
    /// The page's bearer token file.
    pub token_file: Option<&'a std::path::Path>,
}

/// The live page of followed events: a host of its own (no plugins) whose bus replays them, as
/// `rho serve --http --web` serves its own.
struct Relay {
    host: Host,
    journal: std::path::PathBuf,
    stop: tokio_util::sync::CancellationToken,
}

impl Relay {
    async fn start(
        addr: std::net::SocketAddr,
        token_file: Option<&std::path::Path>,
    ) -> Result<Relay, String> {
        let journal =
            std::env::temp_dir().join(format!("rho-watch-page-{}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&journal);
        let (host, _) = Host::builder()
            .journal(&journal)
            .build()
            .await
            .map_err(|e| e.to_string())?;
        let defaults = rho_runtime::ServeConfig::default();
        let (guard, made) = crate::http::Guard::new(
            addr,
            token_file,
            &[],
            defaults.max_body_bytes,
            defaults.max_requests,
            crate::http::SessionLimits::of(&defaults),
            true,
        )
        .map_err(|e| e.to_string())?;
        if made && let Some(token) = &guard.token {
            eprintln!(
                "rho: token of the page (open http://ADDR/?token=TOKEN; shown once): {token}"
            );
        }
        let stop = tokio_util::sync::CancellationToken::new();
        let calls = crate::http::HttpCalls::default();
        let (bound, _task) =
            crate::http::start(None, host.clone(), calls, addr, guard, stop.clone())
                .await
                .map_err(|e| e.to_string())?;
        eprintln!("rho: live page at http://{bound}/");
        Ok(Relay {
            host,
            journal,
            stop,
        })
    }

    async fn stop(self) {
        self.stop.cancel();
        self.host.shutdown().await;
        let _ = std::fs::remove_file(&self.journal);
    }
}

/// `event` of host `host` with its call id made unique across hosts (`host/ID`), for views
/// that follow several hosts at once.
fn of_host(event: rho_runtime::Event, host: &str) -> rho_runtime::Event {
    let Ok(mut value) = serde_json::to_value(&event) else {
        return event;
    };
    if let Some(serde_json::Value::String(id)) = value.get_mut("call_id") {
        *id = format!("{host}/{id}");
    }
    serde_json::from_value(value).unwrap_or(event)
}

/// Follows the events of one host (or of every host) from `nats` as a durable consumer until
/// Ctrl-C, each shown once (on `display`, and on the page when asked) and then acknowledged.
pub async fn follow(nats: &NatsConfig, follow: Follow<'_>, mut display: Display) -> ExitCode {
    let failed = |line: String| {
        eprintln!("rho: {}", crate::render::terminal_safe(&line));
        ExitCode::from(1)
    };
    let host = match follow.host.map(HostName::new).transpose() {
        Ok(host) => host,
        Err(e) => return failed(e.to_string()),
    };
    let durable = follow
        .durable
        .map(str::to_owned)
        .unwrap_or_else(|| format!("rho-watch-{}", host.as_ref().map_or("all", |h| h.as_str())));
    let client = match rho_bridge_nats::connect(nats).await {
        Ok(client) => client,
        Err(e) => return failed(e.to_string()),
    };
    let mut follower = match Follower::start(client, &nats.stream, host.as_ref(), &durable).await {
        Ok(follower) => follower,
        Err(e) => return failed(e.to_string()),
    };
    let relay = match follow.web {
        Some(addr) => match Relay::start(addr, follow.token_file).await {
            Ok(relay) => Some(relay),
            Err(line) => return failed(line),
        },
        None => None,
    };
    let mut tick = display.ticker();
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let code = loop {
        tokio::select! {
            next = follower.next() => match next {
                Ok(followed) => {
                    let event = match &host {
                        Some(_) => followed.event.clone(),
                        None => of_host(followed.event.clone(), &followed.host),
                    };
                    if let Some(relay) = &relay {
                        relay.host.bus().publish(event.session_id.as_deref(), event.kind.clone());
                    }
                    if !display.show(&event) {
                        break ExitCode::SUCCESS;
                    }
                    if let Err(e) = followed.ack().await {
                        tracing::warn!(error = %e, "acknowledging an event failed; it may be shown again");
                    }
                }
                Err(e) => {
                    display.finish();
                    break failed(e.to_string());
                }
            },
            _ = tick.tick() => display.tick(),
            _ = &mut ctrl_c => {
                display.finish();
                break ExitCode::SUCCESS;
            }
        }
    };
    if let Some(relay) = relay {
        relay.stop().await;
    }
    code
}
