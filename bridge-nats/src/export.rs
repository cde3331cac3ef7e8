//! [`EventExport`]: every event of a host, in order, to a JetStream stream.
//!
//! # Guarantees
//!
//! - **In order, each once.** Events are published in `seq` order, each with the message id
//!   `<host>.<run>.<seq>`; at most [`ExportConfig::window`] wait for their acknowledgement at a
//!   time. When one fails (the server went away, an acknowledgement timed out), the export
//!   starts again after the last confirmed event, so JetStream's duplicate window drops what had
//!   been stored unconfirmed: nothing is lost, nothing doubled. The stream may then hold a few of
//!   them after later ones (the client delivers what it had buffered when it reconnects, before
//!   the export publishes again what was lost): readers order by `Rho-Run` and `Rho-Seq`, as
//!   [`crate::Follower`] does. (An outage longer than the stream's duplicate window, two minutes
//!   by default, may double at most `window` events; such a reader sees none.)
//! - **Off the host's path.** The export is a bus subscriber like any other, in a task of its own:
//!   publishing never makes a call wait. When it lags behind the bus, or the server is away, it
//!   catches up from the host's journal, a page at a time, in order.
//! - **It says how far behind it is**: [`EventExport::status`] at any time, and an
//!   `export_status` event on the bus when it loses or regains the server and every 5 s while it
//!   is behind.
//! - The stream is created if absent (subjects `rho.>`, file storage, a week of events and 1 GiB
//!   at most, the oldest dropped first, a two-minute duplicate window); an existing one is used as
//!   it is.

use std::collections::VecDeque;
use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, context::PublishAckFuture};
use rho_runtime::{BusItem, Event, EventKind, Host, Replay};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::{HostName, NatsError, header};

/// How an [`EventExport`] publishes.
#[derive(Debug, Clone)]
pub struct ExportConfig {
    /// The host's name in subjects.
    pub host: HostName,
    /// The stream (created if absent).
    pub stream: String,
    /// Events published and not yet acknowledged, at most.
    pub window: usize,
    /// How long an acknowledgement may take before the server counts as away.
    pub ack_timeout: Duration,
    /// For a stream the export creates: how long it keeps events.
    pub max_age: Duration,
    /// For a stream the export creates: how many bytes it keeps.
    pub max_bytes: i64,
}

impl ExportConfig {
    /// Defaults for `host`: the stream `RHO_EVENTS`, 256 acknowledgements in flight with 5 s each,
    /// a created stream keeping a week and 1 GiB.
    pub fn new(host: HostName) -> ExportConfig {
        ExportConfig {
            host,
            stream: "RHO_EVENTS".into(),
            window: 256,
            ack_timeout: Duration::from_secs(5),
            max_age: crate::stream::DEFAULT_MAX_AGE,
            max_bytes: crate::stream::DEFAULT_MAX_BYTES,
        }
    }
}

/// Where an export stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportStatus {
    /// Whether the last exchange with the server succeeded.
    pub connected: bool,
    /// The last seq the stream confirmed (0: none yet).
    pub confirmed: u64,
    /// The bus's last seq when this was written.
    pub last: u64,
    /// Why the server counts as away, when it does.
    pub reason: Option<String>,
}

impl ExportStatus {
    /// Events of this run not confirmed yet.
    pub fn behind(&self) -> u64 {
        self.last.saturating_sub(self.confirmed)
    }
}

/// A host's events going to a JetStream stream (see the module doc). Stops when dropped or
/// [`EventExport::stop`]ped.
pub struct EventExport {
    host: Host,
    client: async_nats::Client,
    status: watch::Receiver<ExportStatus>,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl EventExport {
    /// Starts exporting `host`'s events of this run (from seq 1: what came before the export
    /// started is read from the journal) through `client`. Needs a host with a journal. Returns
    /// at once: the server may be away; the export waits for it.
    pub fn start(
        host: &Host,
        client: async_nats::Client,
        config: ExportConfig,
    ) -> Result<EventExport, NatsError> {
        if host.replay(1, 0).is_none() {
            return Err(NatsError::NoJournal);
        }
        let (tx, status) = watch::channel(ExportStatus {
            connected: false,
            confirmed: 0,
            last: host.bus().last_seq(),
            reason: None,
        });
        let stop = CancellationToken::new();
        let run = Runner {
            exporter: format!("nats stream {}", config.stream),
            source: Source::new(host),
            host: host.clone(),
            context: jetstream::new(client.clone()),
            client: client.clone(),
            told_away: false,
            run: run_id(),
            config,
            status: tx,
            failing: None,
        };
        let task = tokio::spawn(run.run(stop.clone()));
        Ok(EventExport {
            host: host.clone(),
            client,
            status,
            stop,
            task: Some(task),
        })
    }

    /// Where the export stands now.
    pub fn status(&self) -> ExportStatus {
        let mut status = self.status.borrow().clone();
        status.last = self.host.bus().last_seq().max(status.confirmed);
        if status.connected && !is_connected(&self.client) {
            status.connected = false;
            status.reason = Some(LOST.into());
        }
        status
    }

    /// Waits until the stream has confirmed `seq` (true), or `wait` has passed (false).
    pub async fn confirmed(&self, seq: u64, wait: Duration) -> bool {
        let mut status = self.status.clone();
        tokio::time::timeout(wait, status.wait_for(|s| s.confirmed >= seq))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Stops exporting; events not confirmed by then stay in the journal.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for EventExport {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Why the export stops on a lost connection.
const LOST: &str = "the connection to the server was lost";

fn is_connected(client: &async_nats::Client) -> bool {
    client.connection_state() == async_nats::connection::State::Connected
}

/// This run's id: now, Unix milliseconds.
fn run_id() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A publish's acknowledgement on its way.
type AckFuture = std::pin::Pin<
    Box<
        dyn Future<
                Output = Result<jetstream::publish::PublishAck, jetstream::context::PublishError>,
            > + Send,
    >,
>;

/// How many bytes of journal lines one catch-up page reads.
const PAGE_BYTES: usize = 1 << 20;

/// The events in seq order, from the bus while the export keeps up, from the journal where it
/// does not (it lagged, or it starts again after a failure).
struct Source {
    host: Host,
    live: rho_runtime::Subscription,
    /// The last seq the subscription has delivered or reported missed: anything up to it is read
    /// back from the journal, anything after it comes live.
    live_seen: u64,
    /// A live event not handed out yet.
    held: Option<Arc<Event>>,
    /// Read back from the journal: the rest of the range, the current page, the seq it is at.
    replay: Option<(Replay, VecDeque<Event>)>,
    replay_next: u64,
}

impl Source {
    fn new(host: &Host) -> Source {
        // Subscribed first: every event is either up to `live_seen` (in the journal) or live.
        let live = host.subscribe();
        Source {
            host: host.clone(),
            live,
            live_seen: host.bus().last_seq(),
            held: None,
            replay: None,
            replay_next: 0,
        }
    }

    /// The event of seq `want` (or the next there is, should the journal have lost some);
    /// `Ok(None)` once the bus has closed, `Err` when the journal cannot be read.
    async fn next(&mut self, want: u64) -> Result<Option<Arc<Event>>, String> {
        loop {
            if let Some(event) = self.held.take_if(|e| e.seq <= want) {
                if event.seq == want {
                    return Ok(Some(event));
                }
                continue;
            }
            if want <= self.live_seen {
                if self.replay.is_none() || self.replay_next != want {
                    self.open_replay(want, self.live_seen).await?;
                }
                match self.replayed().await? {
                    Some(event) if event.seq >= want => return Ok(Some(Arc::new(event))),
                    Some(_) => continue,
                    None => {
                        return Err(format!(
                            "the journal ends before seq {want} (the bus is at {})",
                            self.live_seen
                        ));
                    }
                }
            }
            match self.live.recv().await {
                None => return Ok(None),
                Some(BusItem::Event(event)) => {
                    self.live_seen = event.seq;
                    self.held = Some(event);
                }
                Some(BusItem::Lagged {
                    missed,
                    resume_from,
                }) => self.live_seen = resume_from + missed.saturating_sub(1),
            }
        }
    }

    async fn open_replay(&mut self, from: u64, to: u64) -> Result<(), String> {
        let host = self.host.clone();
        let opened = tokio::task::spawn_blocking(move || host.replay(from, to)).await;
        self.replay = match opened {
            Ok(Some(Ok(replay))) => Some((replay, VecDeque::new())),
            Ok(Some(Err(e))) => return Err(e.to_string()),
            Ok(None) => return Err("the host has no journal".into()),
            Err(e) => return Err(e.to_string()),
        };
        self.replay_next = from;
        Ok(())
    }

    /// The replay's next event (a page read from the journal when its buffer is empty).
    async fn replayed(&mut self) -> Result<Option<Event>, String> {
        let Some((mut replay, mut buffer)) = self.replay.take() else {
            return Ok(None);
        };
        if buffer.is_empty() {
            let read = tokio::task::spawn_blocking(move || {
                let page = replay.page(PAGE_BYTES);
                (replay, page)
            })
            .await
            .map_err(|e| e.to_string())?;
            replay = read.0;
            buffer.extend(read.1.map_err(|e| e.to_string())?);
        }
        let event = buffer.pop_front();
        if let Some(event) = &event {
            self.replay_next = event.seq + 1;
            self.replay = Some((replay, buffer));
        }
        Ok(event)
    }
}

/// The export's task.
struct Runner {
    exporter: String,
    source: Source,
    host: Host,
    client: async_nats::Client,
    context: jetstream::Context,
    /// Whether an `export_status` event has said the server is away (and not yet that it is back).
    told_away: bool,
    run: u64,
    config: ExportConfig,
    status: watch::Sender<ExportStatus>,
    /// The event whose publishing failed while the server was there, and how many times: the
    /// third time it is skipped (one event never stops the export).
    failing: Option<(u64, u32)>,
}

/// How many times one event may fail while the server is connected before it is skipped.
const TRIES_PER_EVENT: u32 = 3;

/// Why a round of publishing ended.
enum Ended {
    Stopped,
    Failed(String),
    /// Event `seq` failed while the server was there (it refused the message).
    Refused {
        seq: u64,
        reason: String,
    },
}

/// An event on its way: its acknowledgement, or nothing to wait for (it was skipped).
enum Pending {
    Ack(AckFuture),
    Skipped,
}

impl Runner {
    async fn run(mut self, stop: CancellationToken) {
        let mut confirmed = 0u64;
        let mut backoff = Duration::from_millis(100);
        loop {
            let ended = if is_connected(&self.client) {
                tokio::select! {
                    ended = self.publish_round(&mut confirmed) => ended,
                    () = stop.cancelled() => Ended::Stopped,
                }
            } else {
                Ended::Failed(LOST.into())
            };
            let reason = match ended {
                Ended::Stopped => return,
                Ended::Failed(reason) => reason,
                Ended::Refused { seq, reason } => {
                    let tries = match self.failing {
                        Some((failed, n)) if failed == seq => n + 1,
                        _ => 1,
                    };
                    self.failing = Some((seq, tries));
                    reason
                }
            };
            if !self.told_away {
                tracing::warn!(exporter = %self.exporter, %reason, "NATS export interrupted; retrying");
                self.tell(confirmed, false, Some(reason.clone()));
                self.told_away = true;
            } else {
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            self.set_status(confirmed, false, Some(reason));
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = stop.cancelled() => return,
            }
        }
    }

    /// Publishes from `confirmed + 1` on until something fails; `confirmed` follows the
    /// acknowledgements.
    async fn publish_round(&mut self, confirmed: &mut u64) -> Ended {
        if let Err(reason) = self.ensure_stream().await {
            return Ended::Failed(reason);
        }
        self.set_status(*confirmed, true, None);
        if self.told_away {
            self.tell(*confirmed, true, None);
            self.told_away = false;
        }
        let max_payload = self.client.server_info().max_payload.max(4096);
        let mut pending: VecDeque<(u64, Pending)> = VecDeque::new();
        let mut next = *confirmed + 1;
        let mut report = tokio::time::interval(Duration::from_secs(5));
        report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The client knows at once when its connection drops; acknowledgements would take their
        // whole timeout to tell.
        let mut look = tokio::time::interval(Duration::from_millis(100));
        look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let room = pending.len() < self.config.window;
            tokio::select! {
                biased;
                acked = async {
                    match pending.front_mut() {
                        Some((_, Pending::Ack(ack))) => {
                            tokio::time::timeout(self.config.ack_timeout, ack).await.map(|r| r.map(drop))
                        }
                        Some((_, Pending::Skipped)) => Ok(Ok(())),
                        None => std::future::pending().await,
                    }
                } => {
                    let Some((seq, _)) = pending.pop_front() else { continue };
                    match acked {
                        Ok(Ok(())) => {
                            *confirmed = seq;
                            self.set_status(seq, true, None);
                        }
                        Ok(Err(e)) if is_connected(&self.client) => {
                            return Ended::Refused { seq, reason: e.to_string() };
                        }
                        Ok(Err(e)) => return Ended::Failed(e.to_string()),
                        Err(_) => return Ended::Failed(format!(
                            "no acknowledgement within {} ms", self.config.ack_timeout.as_millis()
                        )),
                    }
                }
                event = self.source.next(next), if room => {
                    let event = match event {
                        Ok(Some(event)) => event,
                        Ok(None) => return Ended::Stopped,
                        Err(reason) => return Ended::Failed(reason),
                    };
                    next = event.seq + 1;
                    let gave_up = matches!(self.failing, Some((seq, n)) if seq == event.seq && n >= TRIES_PER_EVENT);
                    let payload = if gave_up { None } else { payload_within(&event, max_payload.saturating_sub(1024)) };
                    let Some((payload, cut)) = payload else {
                        self.skip(&event, *confirmed, gave_up, max_payload);
                        pending.push_back((event.seq, Pending::Skipped));
                        continue;
                    };
                    match self.publish(&event, payload, cut).await {
                        Ok(ack) => pending.push_back((event.seq, Pending::Ack(ack.into_future()))),
                        Err(reason) if is_connected(&self.client) => {
                            return Ended::Refused { seq: event.seq, reason };
                        }
                        Err(reason) => return Ended::Failed(reason),
                    }
                }
                _ = look.tick() => {
                    if !is_connected(&self.client) {
                        return Ended::Failed(LOST.into());
                    }
                }
                _ = report.tick() => {
                    let behind = self.host.bus().last_seq().saturating_sub(*confirmed);
                    if behind > self.config.window as u64 {
                        self.tell(*confirmed, true, None);
                    }
                }
            }
        }
    }

    /// Creates the stream if it is absent.
    async fn ensure_stream(&self) -> Result<(), String> {
        let made = tokio::time::timeout(
            self.config.ack_timeout,
            crate::stream::ensure(
                &self.context,
                &self.config.stream,
                self.config.max_age,
                self.config.max_bytes,
            ),
        )
        .await;
        match made {
            Ok(result) => result.map(drop),
            Err(_) => Err(format!(
                "no answer within {} ms",
                self.config.ack_timeout.as_millis()
            )),
        }
    }

    /// Says on the bus (an `export_status` event) that `event` is not exported, and why.
    fn skip(&mut self, event: &Event, confirmed: u64, gave_up: bool, max_payload: usize) {
        let reason = if gave_up {
            let why = self
                .failing
                .take()
                .map(|_| "the server refused it")
                .unwrap_or_default();
            format!(
                "event {} ({}) was not exported: {why} {TRIES_PER_EVENT} times; the journal has it",
                event.seq,
                event.kind.type_name()
            )
        } else {
            format!(
                "event {} ({}) was not exported: it cannot fit the server's largest message \
                 ({max_payload} bytes) even cut; the journal has it",
                event.seq,
                event.kind.type_name()
            )
        };
        tracing::warn!(exporter = %self.exporter, "{reason}");
        self.tell(confirmed, true, Some(reason));
    }

    async fn publish(
        &self,
        event: &Event,
        payload: Vec<u8>,
        cut: usize,
    ) -> Result<PublishAckFuture, String> {
        let host = self.config.host.as_str();
        let mut message = jetstream::message::PublishMessage::build()
            .payload(payload.into())
            .message_id(format!("{host}.{}.{}", self.run, event.seq))
            .header(header::HOST, host)
            .header(header::RUN, self.run.to_string().as_str())
            .header(header::SEQ, event.seq.to_string().as_str());
        if cut > 0 {
            message = message.header(header::CUT, cut.to_string().as_str());
        }
        let subject = format!("rho.{host}.{}", event.kind.type_name());
        let sent = tokio::time::timeout(
            self.config.ack_timeout,
            self.context.send_publish(subject, message),
        )
        .await;
        match sent {
            Ok(Ok(ack)) => Ok(ack),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!(
                "the client took over {} ms to send",
                self.config.ack_timeout.as_millis()
            )),
        }
    }

    fn set_status(&self, confirmed: u64, connected: bool, reason: Option<String>) {
        let last = self.host.bus().last_seq();
        self.status.send_replace(ExportStatus {
            connected,
            confirmed,
            last,
            reason,
        });
    }

    /// Publishes an `export_status` event on the host's bus.
    fn tell(&self, confirmed: u64, connected: bool, reason: Option<String>) {
        let behind = self.host.bus().last_seq().saturating_sub(confirmed);
        self.host.bus().publish(
            None,
            EventKind::ExportStatus {
                exporter: self.exporter.clone(),
                connected,
                confirmed,
                behind,
                reason,
                // The NATS export falls behind and catches up from the journal: it drops nothing.
                dropped: 0,
            },
        );
    }
}

/// The event's JSON within `max` bytes: as it is when it fits, else with its longest strings cut
/// (each keeping its start and a note of what was cut) and its longest lists cut (each keeping
/// its first items and a note); the bytes cut (0: none). `None` when even cut it does not fit.
fn payload_within(event: &Event, max: usize) -> Option<(Vec<u8>, usize)> {
    let whole = serde_json::to_vec(event).ok()?;
    if whole.len() <= max {
        return Some((whole, 0));
    }
    let mut value = serde_json::to_value(event).ok()?;
    let (mut keep, mut items) = (max / 2, 1024usize);
    loop {
        cut_strings(&mut value, keep);
        cut_lists(&mut value, items);
        let bytes = serde_json::to_vec(&value).ok()?;
        if bytes.len() <= max {
            let cut = whole.len().saturating_sub(bytes.len());
            return Some((bytes, cut));
        }
        if keep < 64 && items < 2 {
            return None;
        }
        keep /= 2;
        items /= 2;
    }
}

/// Cuts every list longer than `keep` items to its first `keep` and a note of how many were cut.
fn cut_lists(value: &mut Value, keep: usize) {
    match value {
        Value::Array(items) => {
            if items.len() > keep {
                let cut = items.len() - keep;
                items.truncate(keep);
                items.push(Value::String(format!(
                    "[{cut} items cut; the journal has them]"
                )));
            }
            items.iter_mut().for_each(|v| cut_lists(v, keep));
        }
        Value::Object(map) => map.values_mut().for_each(|v| cut_lists(v, keep)),
        _ => {}
    }
}

/// Cuts every string longer than `keep` bytes to its first `keep` (at a character boundary) and
/// a note.
fn cut_strings(value: &mut Value, keep: usize) {
    match value {
        Value::String(s) if s.len() > keep => {
            let mut at = keep;
            while !s.is_char_boundary(at) {
                at -= 1;
            }
            let cut = s.len() - at;
            s.truncate(at);
            s.push_str(&format!(" [{cut} bytes cut; the journal has them]"));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| cut_strings(v, keep)),
        Value::Object(map) => map.values_mut().for_each(|v| cut_strings(v, keep)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: serde_json::Value) -> Event {
        let mut value = serde_json::json!({"seq": 1, "ts_ms": 0});
        value
            .as_object_mut()
            .unwrap()
            .extend(kind.as_object().unwrap().clone());
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn long_lists_and_strings_are_cut_to_fit_and_what_cannot_fit_is_none() {
        let items: Vec<u64> = (0..200_000).collect();
        let wide = event(
            serde_json::json!({"type": "warning", "subject": "s", "message": serde_json::to_string(&items).unwrap()}),
        );
        let (bytes, cut) = payload_within(&wide, 64 << 10).unwrap();
        assert!(bytes.len() <= 64 << 10 && cut > 0);
        let listed = event(
            serde_json::json!({"type": "remote_tools_changed", "source": "s",
            "tools": (0..100_000).map(|i| format!("t{i}")).collect::<Vec<_>>(), "added": [], "removed": []}),
        );
        let (bytes, _) = payload_within(&listed, 16 << 10).unwrap();
        let value: Value = serde_json::from_slice(&bytes).unwrap();
        assert!(
            value["tools"]
                .as_array()
                .unwrap()
                .last()
                .unwrap()
                .as_str()
                .unwrap()
                .contains("items cut")
        );
        assert!(payload_within(&listed, 40).is_none());
    }
}
