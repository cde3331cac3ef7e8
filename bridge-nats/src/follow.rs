//! [`Follower`]: the events of one host, or of all, from the stream, through a durable consumer.
//!
//! A follower reads through a JetStream durable pull consumer of its own name: the server
//! remembers what it has acknowledged, so a follower that stops (or is killed) and starts again
//! with the same name goes on after the last event it acknowledged, without a gap. Events are
//! handed out once each: a follower drops what it has already handed out of the same host run
//! (a redelivery, or an event the export published twice), by `Rho-Host`, `Rho-Run` and `Rho-Seq`.
//! A follower is one reader: two with one name would share its events between them, and the
//! second to start would set the first back; give each its own name.

use std::collections::HashMap;
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

/// Where each host's events have got to: (run, seq) of the last one handed out.
type Positions = HashMap<String, (u64, u64)>;

/// A durable follower of the stream's events (see the module doc).
pub struct Follower {
    messages: consumer::pull::Stream,
    positions: Positions,
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
            positions: Positions::new(),
        })
    }

    /// The next event not handed out before. Waits for one; a server that is away is waited for
    /// too (the client reconnects). A message that is not a rho event is acknowledged and passed
    /// over with a warning.
    pub async fn next(&mut self) -> Result<Followed, NatsError> {
        loop {
            let message = match self.messages.next().await {
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
            let place = (followed.run, followed.event.seq);
            match self.positions.get(&followed.host) {
                Some(last) if place <= *last => {
                    // Seen already: acknowledged, not handed out again.
                    let _ = followed.ack().await;
                    continue;
                }
                _ => {}
            }
            self.positions.insert(followed.host.clone(), place);
            return Ok(followed);
        }
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
