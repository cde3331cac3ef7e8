//! `rho watch --nats URL`: the events hosts export to JetStream, followed through a durable
//! consumer, shown on the terminal and, with `--web ADDR`, on a live page of their own.

use std::process::ExitCode;

use rho_bridge_nats::{Follower, HostName, NatsConfig};
use rho_runtime::Host;

use super::display::Display;
use rho_mcp::ServeConfig;
use rho_mcp::{Endpoint, Guard, Started};

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
/// `rho serve --http --web` serves its own, with `[serve]`'s default bounds.
struct Relay {
    host: Host,
    journal: std::path::PathBuf,
    endpoint: Started,
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
        let limits = rho_mcp::Limits::of(&ServeConfig::default());
        let (guard, made) =
            Guard::new(addr, token_file, &[], limits, true).map_err(|e| e.to_string())?;
        if let Some(token) = &made {
            eprintln!(
                "rho: token of the page (open http://ADDR/?token=TOKEN; shown once): {token}"
            );
        }
        let endpoint = Endpoint::new(host.clone(), guard)
            .start(addr)
            .await
            .map_err(|e| e.to_string())?;
        eprintln!("rho: live page at http://{}/", endpoint.bound);
        Ok(Relay {
            host,
            journal,
            endpoint,
        })
    }

    async fn stop(self) {
        self.endpoint.stop().await;
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
    let stop = crate::signals::stopped();
    tokio::pin!(stop);
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
            _ = &mut stop => {
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
