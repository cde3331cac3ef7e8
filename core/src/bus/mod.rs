//! The event bus: every event fanned out to any number of subscribers, lag made explicit.
//!
//! Underneath is a tokio broadcast channel of `Arc<Event>`. Publishing never blocks and never
//! waits for a subscriber; a subscriber that falls more than the channel's capacity behind gets a
//! [`BusItem::Lagged`] item saying how many events it missed and the `seq` to resume from, never a
//! silent gap. Must-see consumers (the [`crate::Journal`]) are fed inside the publish itself, in
//! `seq` order, through an unbounded channel, so they see every event without slowing the loop.
//!
//! Events nobody would receive are not built. The bus counts its listeners by event type (a sink
//! or an unfiltered subscription takes every type; a [`Filter`] with `types` only those), and the
//! runner asks before it builds a call's events: with no subscriber and no journal, a call
//! publishes nothing, and the copy of its answer an end event carries is never made. Seqs stay
//! gapless over the events published, and a subscription sees every event of its types published
//! after it was opened.

pub(crate) mod event_type;
pub(crate) mod events;
pub(crate) mod journal;

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::broadcast;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio_stream::Stream;
use tokio_util::sync::ReusableBoxFuture;

use crate::bus::event_type::EventType;
use crate::bus::events::{Event, EventKind};

/// The default number of events a subscriber may fall behind before it lags.
pub const DEFAULT_CAPACITY: usize = 4096;

/// A consumer that must see every event, fed synchronously inside `publish` (so in `seq` order).
/// It must not block: hand the event to a queue and return.
pub trait Sink: Send + Sync {
    /// Takes one event.
    fn accept(&self, event: &Arc<Event>);
}

/// A handle to one bus; clones share it.
#[derive(Clone)]
pub struct Bus {
    inner: Arc<Inner>,
}

struct Inner {
    /// Kept for its capacity and its count of receivers once closed.
    capacity: usize,
    interest: Arc<Interest>,
    state: Mutex<State>,
    images: Mutex<RecentImages>,
    /// Whether end events' images are kept ([`Bus::keep_recent_images`]).
    keeping_images: std::sync::atomic::AtomicBool,
}

/// The bytes of the images of recent end events, by SHA-256, oldest dropped first past
/// [`RECENT_IMAGE_BYTES`].
#[derive(Default)]
struct RecentImages {
    total: usize,
    entries: std::collections::VecDeque<(String, Arc<rho_plugin_api::Image>)>,
}

/// How many bytes of recent images a bus keeps for [`Bus::image`]: 64 MiB.
pub const RECENT_IMAGE_BYTES: usize = 64 << 20;

/// Who listens for which types of event: the producers of costly events ask
/// ([`Bus::wants`]) before they build one, as tracing-core's callsites ask for interest, and an
/// event nobody would receive (no sink, no subscription whose filter lets its type through) is
/// never built or published.
#[derive(Default)]
struct Interest {
    /// Sinks, and subscriptions that take every type.
    every: AtomicUsize,
    /// Subscriptions that take only some types, by [`EventType::index`].
    by_type: [AtomicUsize; EventType::ALL.len()],
}

impl Interest {
    /// Counts one more listener for `types` (`None`: every type) until the returned guard drops.
    fn listen(self: &Arc<Self>, types: Option<&HashSet<EventType>>) -> Listening {
        let types: Option<Vec<usize>> =
            types.map(|types| types.iter().map(|t| t.index()).collect());
        match &types {
            None => self.every.fetch_add(1, Ordering::AcqRel),
            Some(indexes) => {
                for &i in indexes {
                    self.by_type[i].fetch_add(1, Ordering::AcqRel);
                }
                0
            }
        };
        Listening {
            interest: self.clone(),
            types,
        }
    }
}

/// One subscription's share of the bus's [`Interest`], given back when it drops.
struct Listening {
    interest: Arc<Interest>,
    types: Option<Vec<usize>>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        match &self.types {
            None => {
                self.interest.every.fetch_sub(1, Ordering::AcqRel);
            }
            Some(indexes) => {
                for &i in indexes {
                    self.interest.by_type[i].fetch_sub(1, Ordering::AcqRel);
                }
            }
        }
    }
}

struct State {
    seq: u64,
    sinks: Vec<Arc<dyn Sink>>,
    /// The subscriptions' channel; `None` once the bus is closed ([`Bus::close`]).
    tx: Option<broadcast::Sender<Arc<Event>>>,
}

impl Default for Bus {
    fn default() -> Self {
        Bus::new(DEFAULT_CAPACITY)
    }
}

impl Bus {
    /// A bus on which a subscriber may fall `capacity` events behind before it lags.
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(1));
        Bus {
            inner: Arc::new(Inner {
                capacity: capacity.max(1),
                interest: Arc::default(),
                state: Mutex::new(State {
                    seq: 0,
                    sinks: Vec::new(),
                    tx: Some(tx),
                }),
                images: Mutex::default(),
                keeping_images: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing panics while holding the lock; a poisoned lock still holds consistent data.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Publishes an event and returns it. Never blocks on a subscriber. From async code prefer
    /// [`Bus::emit`], which also yields to subscribers on the same runtime when due.
    pub fn publish(&self, session_id: Option<&str>, kind: EventKind) -> Arc<Event> {
        let mut state = self.state();
        state.seq += 1;
        let event = Arc::new(Event {
            seq: state.seq,
            ts_ms: now_ms(),
            session_id: session_id.map(str::to_owned),
            kind,
        });
        for sink in &state.sinks {
            sink.accept(&event);
        }
        // An error only means nobody subscribes right now.
        if let Some(tx) = &state.tx {
            let _ = tx.send(event.clone());
        }
        event
    }

    /// Publishes an event at once (when called, not when first polled), then, awaited, spends one
    /// unit of the task's tokio budget, yielding when it is exhausted: a loop that publishes in
    /// bursts cannot starve subscribers on its runtime. The event is not kept in the future.
    pub fn emit(
        &self,
        session_id: Option<&str>,
        kind: EventKind,
    ) -> impl Future<Output = Arc<Event>> + Send + use<> {
        let event = self.publish(session_id, kind);
        async move {
            tokio::task::coop::consume_budget().await;
            event
        }
    }

    /// Adds a must-see sink; it gets every event published from now on.
    pub fn add_sink(&self, sink: Arc<dyn Sink>) {
        let mut state = self.state();
        self.inner.interest.every.fetch_add(1, Ordering::AcqRel);
        state.sinks.push(sink);
    }

    /// Whether an event of type `ty` published now would reach anyone: a sink, or a subscription
    /// whose filter lets the type through. A subscription opened after this answer misses the
    /// event, as it would have had it subscribed a moment later.
    pub(crate) fn wants(&self, ty: EventType) -> bool {
        let interest = &self.inner.interest;
        interest.every.load(Ordering::Acquire) > 0
            || interest.by_type[ty.index()].load(Ordering::Acquire) > 0
    }

    /// [`Bus::emit`] of the event `build` makes, built and published only if someone
    /// [`wants`](Bus::wants) events of type `ty`; the task's budget is spent either way.
    pub(crate) async fn emit_wanted(
        &self,
        session_id: Option<&str>,
        ty: EventType,
        build: impl FnOnce() -> EventKind,
    ) {
        if self.wants(ty) {
            self.publish(session_id, build());
        }
        tokio::task::coop::consume_budget().await;
    }

    /// The `seq` of the last event published (0 before the first).
    pub fn last_seq(&self) -> u64 {
        self.state().seq
    }

    /// From now on, keeps the images of `tool_execution_end` events (up to
    /// [`RECENT_IMAGE_BYTES`], oldest dropped first) for [`Bus::image`]. Off until called: a host
    /// that serves no image downloads (the HTTP server calls this) pays no copy and no memory for
    /// them.
    pub fn keep_recent_images(&self) {
        self.inner
            .keeping_images
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The bytes of an image a recent `tool_execution_end` named ([`ImageView::sha256`]), once
    /// [`Bus::keep_recent_images`] was called; `None` before, once [`RECENT_IMAGE_BYTES`] of newer
    /// images pushed it out, or for another hash. Shared, not copied: a download costs no copy of
    /// the bytes.
    ///
    /// [`ImageView::sha256`]: crate::ImageView::sha256
    pub fn image(&self, sha256: &str) -> Option<Arc<rho_plugin_api::Image>> {
        let images = self
            .inner
            .images
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        images
            .entries
            .iter()
            .rev()
            .find(|(sha, _)| sha == sha256)
            .map(|(_, image)| image.clone())
    }

    /// Whether [`Bus::keep_images`] would keep anything of `output`: it has images and
    /// [`Bus::keep_recent_images`] was called.
    pub(crate) fn keeps_images_of(&self, output: &rho_plugin_api::Output) -> bool {
        !output.images().is_empty()
            && self
                .inner
                .keeping_images
                .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Keeps the images of `output` (named in `view`) for [`Bus::image`].
    pub(crate) fn keep_images(&self, view: &events::OutputView, output: &rho_plugin_api::Output) {
        if !self.keeps_images_of(output) {
            return;
        }
        let mut images = self
            .inner
            .images
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (named, image) in view.images.iter().zip(output.images()) {
            if image.bytes.len() > RECENT_IMAGE_BYTES
                || images.entries.iter().any(|(sha, _)| *sha == named.sha256)
            {
                continue;
            }
            images.total += image.bytes.len();
            images
                .entries
                .push_back((named.sha256.clone(), Arc::new(image.clone())));
            while images.total > RECENT_IMAGE_BYTES {
                match images.entries.pop_front() {
                    Some((_, old)) => images.total -= old.bytes.len(),
                    None => break,
                }
            }
        }
    }

    /// Subscribes to every event published from now on.
    pub fn subscribe(&self) -> Subscription {
        self.subscribe_filtered(Filter::default())
    }

    /// Subscribes to the events `filter` lets through, from now on.
    pub fn subscribe_filtered(&self, filter: Filter) -> Subscription {
        let state = self.state();
        let listening = self.inner.interest.listen(filter.types.as_ref());
        let rx = match &state.tx {
            Some(tx) => tx.subscribe(),
            // Closed: a subscription that ends at once.
            None => broadcast::channel(self.inner.capacity).1,
        };
        Subscription {
            _listening: listening,
            rx: Some(rx),
            waiting: None,
            filter,
            last_seq: state.seq,
        }
    }

    /// How many subscriptions are open (none once the bus is closed).
    pub fn subscriber_count(&self) -> usize {
        self.state().tx.as_ref().map_or(0, |tx| tx.receiver_count())
    }

    /// Closes the bus for subscribers: each subscription ends (`recv` gives `None`) once it has
    /// taken the events published before, and later subscriptions end at once. Sinks (a
    /// journal) still get what is published after. [`Host::shutdown`](crate::Host::shutdown)
    /// closes its bus after its last event.
    pub fn close(&self) {
        self.state().tx = None;
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Which events a subscription yields. Empty fields let everything through.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// The event types to keep.
    pub types: Option<HashSet<EventType>>,
    /// Keep only events of this session.
    pub session_id: Option<String>,
    /// Keep only events about this tool.
    pub tool: Option<String>,
}

impl Filter {
    /// Keeps only events of these types.
    ///
    /// ```
    /// use rho_runtime::{EventType, Filter};
    ///
    /// let ends = Filter::default().types([EventType::ToolExecutionEnd]);
    /// assert!(ends.types.unwrap().contains(&EventType::ToolExecutionEnd));
    /// ```
    pub fn types(mut self, types: impl IntoIterator<Item = EventType>) -> Self {
        self.types = Some(types.into_iter().collect());
        self
    }

    /// Keeps only events of session `id`.
    pub fn session(mut self, id: impl Into<String>) -> Self {
        self.session_id = Some(id.into());
        self
    }

    /// Keeps only events about tool `name`.
    pub fn tool(mut self, name: impl Into<String>) -> Self {
        self.tool = Some(name.into());
        self
    }

    /// Whether `event` passes.
    pub fn matches(&self, event: &Event) -> bool {
        self.types
            .as_ref()
            .is_none_or(|t| t.contains(&event.kind.event_type()))
            && self
                .session_id
                .as_ref()
                .is_none_or(|s| event.session_id.as_ref() == Some(s))
            && self
                .tool
                .as_ref()
                .is_none_or(|t| event.kind.tool() == Some(t.as_str()))
    }
}

/// One item of a subscription.
#[derive(Debug, Clone, PartialEq)]
pub enum BusItem {
    /// An event.
    Event(Arc<Event>),
    /// The subscriber fell behind: `missed` events (counted before filtering) were dropped for it,
    /// with seqs `resume_from ..= resume_from + missed - 1`; the journal has them.
    Lagged {
        /// How many events were dropped.
        missed: u64,
        /// The seq of the first one.
        resume_from: u64,
    },
}

/// A subscriber's stream of [`BusItem`]s: read it with [`Subscription::recv`] or as a
/// `futures::Stream`. Dropping it unsubscribes.
///
/// It ends (`None`) when the bus is gone: every [`Bus`] clone dropped. For a
/// [`Host`](crate::Host) that is when its last clone is dropped, every call it ran has ended
/// (so the end events of calls stopped by the drop still arrive first), no plugin thread still
/// holds a call's context, and no `Bus` clone of the embedder's own is left. A subscription that
/// falls behind does not end: it gets a [`BusItem::Lagged`] and goes on.
pub struct Subscription {
    /// Counts this subscription in the bus's interest while it is open.
    _listening: Listening,
    /// The receiver, while no wait is under way (it is inside the wait's future meanwhile).
    rx: Option<broadcast::Receiver<Arc<Event>>>,
    /// The wait for the next event once none was ready; its box is reused by later waits.
    waiting: Option<ReusableBoxFuture<'static, Received>>,
    filter: Filter,
    last_seq: u64,
}

/// What a wait for the next event gives: the event (or why none) and the receiver back.
type Received = (
    Result<Arc<Event>, RecvError>,
    broadcast::Receiver<Arc<Event>>,
);

async fn next_event(mut rx: broadcast::Receiver<Arc<Event>>) -> Received {
    (rx.recv().await, rx)
}

impl Subscription {
    /// The next item: an event the filter lets through, or a lag notice. `None` once the bus is
    /// gone (see [`Subscription`]). Cancellation-safe: dropping the future loses no item.
    pub async fn recv(&mut self) -> Option<BusItem> {
        use tokio_stream::StreamExt;
        self.next().await
    }

    /// The seq of the last event this subscription saw or was told it missed.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// The next event or lag notice from the channel, before filtering: taken at once when one is
    /// ready (no future, no allocation), else waited for in the reused box.
    fn poll_raw(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Arc<Event>, u64>>> {
        if let Some(rx) = &mut self.rx {
            match rx.try_recv() {
                Ok(event) => return Poll::Ready(Some(Ok(event))),
                Err(TryRecvError::Lagged(missed)) => return Poll::Ready(Some(Err(missed))),
                Err(TryRecvError::Closed) => return Poll::Ready(None),
                Err(TryRecvError::Empty) => {}
            }
        }
        let waiting = match (self.rx.take(), &mut self.waiting) {
            (Some(rx), Some(waiting)) => {
                waiting.set(next_event(rx));
                waiting
            }
            (Some(rx), waiting @ None) => waiting.insert(ReusableBoxFuture::new(next_event(rx))),
            (None, Some(waiting)) => waiting,
            // Unreachable: the receiver is either here or inside the wait.
            (None, None) => return Poll::Ready(None),
        };
        let (received, rx) = std::task::ready!(waiting.poll(cx));
        self.rx = Some(rx);
        Poll::Ready(match received {
            Ok(event) => Some(Ok(event)),
            Err(RecvError::Lagged(missed)) => Some(Err(missed)),
            Err(RecvError::Closed) => None,
        })
    }
}

impl Stream for Subscription {
    type Item = BusItem;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BusItem>> {
        let this = self.get_mut();
        loop {
            match std::task::ready!(this.poll_raw(cx)) {
                None => return Poll::Ready(None),
                Some(Err(missed)) => {
                    let resume_from = this.last_seq + 1;
                    this.last_seq += missed;
                    return Poll::Ready(Some(BusItem::Lagged {
                        missed,
                        resume_from,
                    }));
                }
                Some(Ok(event)) => {
                    this.last_seq = event.seq;
                    if this.filter.matches(&event) {
                        return Poll::Ready(Some(BusItem::Event(event)));
                    }
                }
            }
        }
    }
}
