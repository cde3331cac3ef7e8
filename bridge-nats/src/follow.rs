//! [`Follower`]: the events of one host, or of all, from the stream, through a durable consumer.
//!
//! A follower reads through a JetStream durable pull consumer of its own name: the server
//! remembers what it has acknowledged, so a follower that stops (or is killed) and starts again
//! with the same name goes on after the last event it acknowledged, without a gap. Events are
//! handed out once each: a follower drops what it has already handed out of the same host run
//! (a redelivery, or an event the export published twice), by `Rho-Host`, `Rho-Run` and `Rho-Seq`.
//! A follower is one reader: two with one name would share its events between them, and the
//! second to start would set the first back; give each its own name.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use futures_util::StreamExt;
use rho_core::Event;

use crate::{HostName, NatsError, header};

/// One event as followed: the host and run it comes from, the event, and its acknowledgement.
pub struct Followed {
    /// The host that published it.
    pub host: String,
    /// The host run (its start, Unix ms); `event.seq` counts within it.
    pub run: u64,
    /// The event, as in the host's journal.
    pub event: Event,
    /// Bytes cut from its strings to fit a NATS message (0: whole).
    pub cut: u64,
    message: jetstream::Message,
}

impl Followed {
    /// Acknowledges it: a follower started again with the same name goes on after it. Call it
    /// once the event is handled (shown, stored).
    pub async fn ack(&self) -> Result<(), NatsError> {
        self.message
            .double_ack()
            .await
            .map_err(|e| NatsError::JetStream(e.to_string()))
    }
}

/// A durable follower of the stream's events (see the module doc).
pub struct Follower {
    messages: consumer::pull::Stream,
    hosts: HashMap<String, HostState>,
    /// Events in order, not handed out yet.
    ready: VecDeque<Followed>,
    /// Duplicates to acknowledge and drop.
    stale: Vec<Followed>,
}

impl Follower {
    /// Follows `host` (or every host) in `stream` (made if absent, as an export would) as the durable consumer `durable` (letters,
    /// digits, `-`, `_`), made on first use to start from the stream's first event. A consumer
    /// of that name following other subjects is an error, not changed.
    pub async fn start(
        client: async_nats::Client,
        stream: &str,
        host: Option<&HostName>,
        durable: &str,
    ) -> Result<Follower, NatsError> {
        HostName::new(durable)?;
        let subject = match host {
            Some(host) => format!("rho.{host}.>"),
            None => "rho.*.>".to_owned(),
        };
        let context = jetstream::new(client);
        let failed =
            |e: &dyn std::fmt::Display| NatsError::JetStream(format!("stream {stream}: {e}"));
        let made = crate::stream::ensure(
            &context,
            stream,
            crate::stream::DEFAULT_MAX_AGE,
            crate::stream::DEFAULT_MAX_BYTES,
        );
        let stream_handle = tokio::time::timeout(Duration::from_secs(10), made)
            .await
            .map_err(|_| failed(&"no answer within 10 s (is the server up?)"))?
            .map_err(NatsError::JetStream)?;
        let config = |deliver_policy| consumer::pull::Config {
            durable_name: Some(durable.to_owned()),
            filter_subject: subject.clone(),
            ack_policy: consumer::AckPolicy::Explicit,
            deliver_policy,
            ack_wait: Duration::from_secs(30),
            max_ack_pending: 10_000,
            ..Default::default()
        };
        let mut consumer: consumer::PullConsumer = stream_handle
            .get_or_create_consumer(durable, config(consumer::DeliverPolicy::All))
            .await
            .map_err(|e| failed(&e))?;
        let info = consumer.info().await.map_err(|e| failed(&e))?.clone();
        if info.config.filter_subject != subject {
            return Err(NatsError::JetStream(format!(
                "the consumer `{durable}` follows `{}`, not `{subject}`; give another name",
                info.config.filter_subject
            )));
        }
        if info.num_ack_pending > 0 {
            // The last follower of this name stopped with events delivered and not acknowledged:
            // the server would hand them out again only after their ack wait, after newer ones.
            // Start the consumer again right after the last acknowledged event instead.
            let after = info.ack_floor.stream_sequence;
            stream_handle
                .delete_consumer(durable)
                .await
                .map_err(|e| failed(&e))?;
            consumer = stream_handle
                .create_consumer(config(consumer::DeliverPolicy::ByStartSequence {
                    start_sequence: after + 1,
                }))
                .await
                .map_err(|e| failed(&e))?;
        }
        let messages = consumer.messages().await.map_err(|e| failed(&e))?;
        Ok(Follower {
            messages,
            hosts: HashMap::new(),
            ready: VecDeque::new(),
            stale: Vec::new(),
        })
    }

    /// The next event not handed out before, in each host's order. Waits for one; a server that
    /// is away is waited for too (the client reconnects). A message that is not a rho event is
    /// acknowledged and passed over with a warning.
    ///
    /// A host's events may sit in the stream out of order (after an outage, the export publishes
    /// again what was not confirmed, and the client may already have delivered later ones): an
    /// event that comes before one it follows is held, up to [`HOLD`], until the missing one
    /// arrives; then both go out in order. One still missing after that is given up (the host
    /// lost it, or the stream's limits dropped it).
    pub async fn next(&mut self) -> Result<Followed, NatsError> {
        loop {
            // Seen already: acknowledged (so the consumer goes on past them), not handed out.
            for seen in self.stale.drain(..) {
                let _ = seen.ack().await;
            }
            if let Some(followed) = self.ready.pop_front() {
                return Ok(followed);
            }
            let held_since = self.hosts.values().filter_map(|h| h.since).min();
            let message = match held_since {
                Some(since) => {
                    let at = tokio::time::Instant::from_std(since + HOLD);
                    match tokio::time::timeout_at(at, self.messages.next()).await {
                        Ok(message) => message,
                        Err(_) => {
                            self.give_up_gaps();
                            continue;
                        }
                    }
                }
                None => self.messages.next().await,
            };
            let message = match message {
                Some(Ok(message)) => message,
                Some(Err(e)) => {
                    // Heartbeats missed, the server restarting: the stream goes on by itself.
                    tracing::debug!(error = %e, "NATS follower: waiting for the server");
                    continue;
                }
                None => {
                    return Err(NatsError::JetStream(
                        "the consumer's message stream ended".into(),
                    ));
                }
            };
            let Some(followed) = parse(message) else {
                continue;
            };
            self.take(followed);
        }
    }

    /// Places a followed event: ready when it is its host's next, held when one before it is
    /// missing, stale when it was handed out (or is held) already.
    fn take(&mut self, followed: Followed) {
        let place = (followed.run, followed.event.seq);
        let state = self.hosts.entry(followed.host.clone()).or_default();
        match state.last {
            Some(last) if place <= last || state.held.contains_key(&place) => {
                self.stale.push(followed);
            }
            Some(last) if !follows(last, place) => {
                state.held.insert(place, followed);
                state.since.get_or_insert_with(std::time::Instant::now);
            }
            _ => {
                state.last = Some(place);
                self.ready.push_back(followed);
                state.release(&mut self.ready, &mut self.stale);
            }
        }
    }

    /// Gives up the missing events of hosts that have held one for [`HOLD`]: the first held goes
    /// out, and those that follow it.
    fn give_up_gaps(&mut self) {
        for (host, state) in &mut self.hosts {
            if state.since.is_none_or(|since| since.elapsed() < HOLD) {
                continue;
            }
            if let Some((place, followed)) = state.held.pop_first() {
                tracing::warn!(%host, run = place.0, seq = place.1, "events before it never arrived; going on");
                state.last = Some(place);
                self.ready.push_back(followed);
                state.release(&mut self.ready, &mut self.stale);
            }
        }
    }
}

/// How long a follower holds a host's event while one before it is missing.
pub const HOLD: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether `place` is the event right after `last` (the next seq of the run, or the first of a
/// later run).
fn follows(last: (u64, u64), place: (u64, u64)) -> bool {
    (place.0 == last.0 && place.1 == last.1 + 1) || (place.0 > last.0 && place.1 == 1)
}

/// Where one host's events have got to.
#[derive(Default)]
struct HostState {
    /// (run, seq) of the last event handed out (or made ready).
    last: Option<(u64, u64)>,
    /// Events waiting for one before them.
    held: std::collections::BTreeMap<(u64, u64), Followed>,
    /// Since when something is held without progress.
    since: Option<std::time::Instant>,
}

impl HostState {
    /// Moves the held events that now follow in order to `ready` (and those already handed out
    /// to `stale`).
    fn release(&mut self, ready: &mut VecDeque<Followed>, stale: &mut Vec<Followed>) {
        while let Some(last) = self.last {
            let Some((&place, _)) = self.held.first_key_value() else {
                break;
            };
            if place <= last {
                stale.extend(self.held.pop_first().map(|(_, followed)| followed));
                continue;
            }
            if !follows(last, place) {
                break;
            }
            if let Some((place, followed)) = self.held.pop_first() {
                self.last = Some(place);
                ready.push_back(followed);
            }
        }
        self.since = (!self.held.is_empty()).then(std::time::Instant::now);
    }
}

/// A stream message as a followed event; `None` (acknowledged, warned) when it is not one.
fn parse(message: jetstream::Message) -> Option<Followed> {
    let headers = message.headers.as_ref();
    let read = |name: &str| {
        headers
            .and_then(|h| h.get(name))
            .map(|v| v.as_str().to_owned())
    };
    let host = read(header::HOST);
    let run = read(header::RUN).and_then(|r| r.parse().ok());
    let cut = read(header::CUT).and_then(|c| c.parse().ok()).unwrap_or(0);
    let event = serde_json::from_slice::<Event>(&message.payload);
    match (host, run, event) {
        (Some(host), Some(run), Ok(event)) => Some(Followed {
            host,
            run,
            event,
            cut,
            message,
        }),
        (_, _, event) => {
            tracing::warn!(
                subject = %message.subject,
                error = ?event.err().map(|e| e.to_string()),
                "not a rho event (or a kind this version does not know); passed over"
            );
            tokio::spawn(async move {
                let _ = message.ack().await;
            });
            None
        }
    }
}
