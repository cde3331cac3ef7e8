//! [`Follower`]: the events of one host, or of all, from the stream, through a durable consumer.
//!
//! A follower reads through a JetStream durable pull consumer of its own name: the server
//! remembers what it has acknowledged, so a follower that stops (or is killed) and starts again
//! with the same name goes on after the last event it acknowledged, without a gap. Events are
//! handed out once each: a follower drops what it has already handed out of the same host run
//! (a redelivery, or an event the export published twice), by `Rho-Host`, `Rho-Run` and `Rho-Seq`.
//! A follower is one reader: two with one name would share its events between them, and the
//! second to start would set the first back; give each its own name.
//!
//! What it takes on a message's word is bounded, so one forged message cannot silence a host:
//! events are ordered within each run of a host only (a run never makes another stale); a run
//! that cannot be real (before 2020, or more than a day ahead of this clock) is passed over; an
//! event more than [`MAX_AHEAD`] seqs past what the follower has seen of its run is passed over
//! (an export is never that far ahead of its own stream); an event is a duplicate only when that
//! very (run, seq) was handed out, never because a later seq was; and at most [`MAX_RUNS`] runs
//! per host and [`MAX_HOSTS`] hosts are tracked, the least recently active forgotten first.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use futures_util::StreamExt;
use rho_runtime::Event;

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
            let held_since = self.held_since();
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

    /// Places a followed event (see the module doc): ready when it is its run's next, held when
    /// one before it is missing, stale when that very event was handed out (or is held)
    /// already, passed over when its run or seq cannot be real.
    fn take(&mut self, followed: Followed) {
        let (run, seq) = (followed.run, followed.event.seq);
        if !plausible_run(run) {
            tracing::warn!(host = %followed.host, run, "an event of a run that cannot be real; passed over");
            self.stale.push(followed);
            return;
        }
        if !self.hosts.contains_key(&followed.host) && self.hosts.len() >= MAX_HOSTS {
            forget_least_active(&mut self.hosts);
        }
        let host = self.hosts.entry(followed.host.clone()).or_default();
        host.active = std::time::Instant::now();
        if !host.runs.contains_key(&run) && host.runs.len() >= MAX_RUNS {
            forget_least_active(&mut host.runs);
        }
        let state = host
            .runs
            .entry(run)
            .or_insert_with(|| RunState::starting_at(seq));
        state.active = std::time::Instant::now();
        if seq <= state.floor || state.seen.contains(&seq) || state.held.contains_key(&seq) {
            self.stale.push(followed);
        } else if seq > state.floor.saturating_add(MAX_AHEAD) {
            tracing::warn!(host = %followed.host, run, seq, floor = state.floor, "an event too far ahead of its run; passed over");
            self.stale.push(followed);
        } else if seq == state.floor + 1 {
            state.deliver(followed, &mut self.ready);
            state.release(&mut self.ready);
        } else {
            state.held.insert(seq, followed);
            state.since.get_or_insert_with(std::time::Instant::now);
        }
    }

    /// Gives up the missing events of runs that have held one for [`HOLD`]: what is held goes
    /// out in order. Events that arrive later still go out (late) unless that very event was
    /// handed out.
    fn give_up_gaps(&mut self) {
        for (host, state) in &mut self.hosts {
            for (run, run_state) in &mut state.runs {
                if run_state.since.is_none_or(|since| since.elapsed() < HOLD) {
                    continue;
                }
                if let Some((&seq, _)) = run_state.held.first_key_value() {
                    tracing::warn!(%host, run, seq, "events before it never arrived; going on");
                }
                let held = std::mem::take(&mut run_state.held);
                for (_, followed) in held {
                    run_state.deliver(followed, &mut self.ready);
                }
                run_state.since = None;
            }
        }
    }

    /// The earliest instant something has been held since, if anything is.
    fn held_since(&self) -> Option<std::time::Instant> {
        self.hosts
            .values()
            .flat_map(|h| h.runs.values())
            .filter_map(|r| r.since)
            .min()
    }
}

/// How long a follower holds a host's event while one before it is missing.
pub const HOLD: std::time::Duration = std::time::Duration::from_secs(2);

/// How far past the events a follower has seen of a run an event may be: 65,536 seqs.
pub const MAX_AHEAD: u64 = 1 << 16;

/// Runs tracked per host at most.
pub const MAX_RUNS: usize = 64;

/// Hosts tracked at most.
pub const MAX_HOSTS: usize = 4096;

/// Whether a run id (its start, Unix ms) can be real: from 2020 on, at most a day ahead.
fn plausible_run(run: u64) -> bool {
    const YEAR_2020_MS: u64 = 1_577_836_800_000;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(u64::MAX, |d| d.as_millis() as u64);
    (YEAR_2020_MS..=now.saturating_add(86_400_000)).contains(&run)
}

/// Something tracked, with when it was last active.
trait Active {
    fn active(&self) -> std::time::Instant;
}

/// Forgets the least recently active entry of `map`.
fn forget_least_active<K: Clone + Eq + std::hash::Hash, V: Active>(map: &mut HashMap<K, V>) {
    if let Some(key) = map
        .iter()
        .min_by_key(|(_, v)| v.active())
        .map(|(k, _)| k.clone())
    {
        map.remove(&key);
    }
}

/// Where one host's events have got to: each run's own place.
struct HostState {
    runs: HashMap<u64, RunState>,
    active: std::time::Instant,
}

impl Default for HostState {
    fn default() -> Self {
        HostState {
            runs: HashMap::new(),
            active: std::time::Instant::now(),
        }
    }
}

impl Active for HostState {
    fn active(&self) -> std::time::Instant {
        self.active
    }
}

/// Where one run of a host has got to.
struct RunState {
    /// Every seq up to this one was handed out (or given up).
    floor: u64,
    /// Seqs above the floor handed out already (after a gap was given up).
    seen: std::collections::BTreeSet<u64>,
    /// Events waiting for one before them.
    held: std::collections::BTreeMap<u64, Followed>,
    /// Since when something is held without progress.
    since: Option<std::time::Instant>,
    active: std::time::Instant,
}

impl Active for RunState {
    fn active(&self) -> std::time::Instant {
        self.active
    }
}

impl RunState {
    /// A run first seen at `seq` (a follower may start after its first events left the stream).
    fn starting_at(seq: u64) -> RunState {
        RunState {
            floor: seq.saturating_sub(1),
            seen: std::collections::BTreeSet::new(),
            held: std::collections::BTreeMap::new(),
            since: None,
            active: std::time::Instant::now(),
        }
    }

    /// Hands `followed` out, moving the floor over what is now contiguous.
    fn deliver(&mut self, followed: Followed, ready: &mut VecDeque<Followed>) {
        let seq = followed.event.seq;
        if seq == self.floor + 1 {
            self.floor = seq;
        } else {
            self.seen.insert(seq);
        }
        while self.seen.remove(&(self.floor + 1)) {
            self.floor += 1;
        }
        // Seen far ahead after gaps given up: those gaps are abandoned, so the set stays small.
        if self.seen.len() > 4096
            && let Some(&first) = self.seen.first()
        {
            self.floor = first;
            self.seen.remove(&first);
            while self.seen.remove(&(self.floor + 1)) {
                self.floor += 1;
            }
        }
        ready.push_back(followed);
    }

    /// Hands out the held events that now follow the floor in order.
    fn release(&mut self, ready: &mut VecDeque<Followed>) {
        while let Some(entry) = self.held.first_entry() {
            if *entry.key() != self.floor + 1 {
                break;
            }
            let followed = entry.remove();
            self.deliver(followed, ready);
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
