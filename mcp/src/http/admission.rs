//! Who gets in when `rho serve --http` is full: connections and MCP sessions are bounded in all
//! and per peer address, and a newcomer makes room by evicting what waits longest, never by
//! being refused while something idles.
//!
//! - **Connections**: at most [`MAX_CONNECTIONS`] at once and [`MAX_CONNECTIONS_PER_PEER`] per
//!   peer address. A connection is *waiting* from its accept (or the end of its last response)
//!   until its next request head is in, and *busy* while a request runs. A newcomer within the
//!   bounds is admitted at once. Past a bound, only a newcomer whose whole request head has
//!   arrived gets in: it evicts the connection of that peer (for the per-peer bound) or of
//!   anyone (for the global one) that has waited longest, and is refused only when every one is
//!   busy. A newcomer without a whole head waits for one, unadmitted, among at most
//!   [`MAX_PENDING`] such (the newest displacing the oldest), until the head deadline. A flood
//!   of idle or dripping connections therefore holds at most its share and never evicts anyone,
//!   however fast it reopens what is closed, and a client with a whole request wins over every
//!   connection still waiting for its own, whatever address the flood comes from.
//! - **Sessions** (2025-era MCP sessions): at most `serve.max_sessions` and
//!   `serve.max_sessions_per_peer`; one idle for `serve.session_idle_ms` is closed; an
//!   `initialize` past a bound closes the session idle longest (of that peer, or of anyone), and
//!   is answered 503 only when every session has a request in flight.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// Connections open at once at most.
pub const MAX_CONNECTIONS: usize = 1024;

/// Connections open at once from one peer address at most.
pub const MAX_CONNECTIONS_PER_PEER: usize = 256;

/// Newcomers waiting for their whole request head while the bounds are reached, at most.
pub const MAX_PENDING: usize = 1024;

/// One connection's state, shared by its task and the table.
pub struct Connection {
    id: u64,
    peer: IpAddr,
    /// Requests running now.
    busy: AtomicU64,
    /// When it started waiting (its accept, or the end of its last response).
    waiting_since: Mutex<Instant>,
    /// Cancelled to evict it.
    pub evicted: CancellationToken,
}

impl Connection {
    /// A request of this connection started.
    pub fn request_started(&self) {
        self.busy.fetch_add(1, Ordering::AcqRel);
    }

    /// A request of this connection ended (its response sent or dropped).
    pub fn request_ended(&self) {
        *self
            .waiting_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
        self.busy.fetch_sub(1, Ordering::AcqRel);
    }

    /// Since when it has waited, if it is not busy.
    fn waiting(&self) -> Option<Instant> {
        (self.busy.load(Ordering::Acquire) == 0).then(|| {
            *self
                .waiting_since
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        })
    }
}

/// The open connections.
#[derive(Default)]
pub struct Connections {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Connection>>>,
}

/// A connection's place in the table, given back when dropped.
pub struct Admitted {
    table: Arc<Connections>,
    /// The connection.
    pub connection: Arc<Connection>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.table.map().remove(&self.connection.id);
    }
}

impl Connections {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Connection>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a connection from `peer`. Within the bounds, at once. Past one, `Err(Full)`
    /// unless its whole request head has arrived (`head_in`): then the connection that has
    /// waited longest in its way is evicted, and it is refused only when every one is busy.
    pub fn admit(self: &Arc<Self>, peer: IpAddr, head_in: bool) -> Result<Admitted, Full> {
        let mut open = self.map();
        let oldest_waiting = |open: &HashMap<u64, Arc<Connection>>, of: Option<IpAddr>| {
            open.values()
                .filter(|c| of.is_none_or(|p| c.peer == p))
                .filter_map(|c| c.waiting().map(|since| (since, c.id)))
                .min()
                .map(|(_, id)| id)
        };
        let evict = |open: &mut HashMap<u64, Arc<Connection>>, of: Option<IpAddr>| {
            let id = oldest_waiting(open, of).ok_or(Full)?;
            let victim = open.remove(&id).ok_or(Full)?;
            victim.evicted.cancel();
            Ok(())
        };
        let peer_full =
            open.values().filter(|c| c.peer == peer).count() >= MAX_CONNECTIONS_PER_PEER;
        let all_full = open.len() >= MAX_CONNECTIONS;
        if (peer_full || all_full) && !head_in {
            return Err(Full);
        }
        if peer_full {
            evict(&mut open, Some(peer))?;
        }
        if open.len() >= MAX_CONNECTIONS {
            evict(&mut open, None)?;
        }
        let connection = Arc::new(Connection {
            id: self.next.fetch_add(1, Ordering::Relaxed),
            peer,
            busy: AtomicU64::new(0),
            waiting_since: Mutex::new(Instant::now()),
            evicted: CancellationToken::new(),
        });
        open.insert(connection.id, connection.clone());
        Ok(Admitted {
            table: self.clone(),
            connection,
        })
    }
}

/// A bound is reached: a newcomer without its whole request head waits for it; one with it
/// found nothing to evict (every connection in its way is busy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// The newcomers waiting, unadmitted, for their whole request head: at most [`MAX_PENDING`],
/// the newest displacing the oldest (cancelled).
#[derive(Default)]
pub struct Pending {
    next: AtomicU64,
    waiting: Mutex<std::collections::VecDeque<(u64, CancellationToken)>>,
}

/// A newcomer's place among the pending, given back when dropped.
pub struct Waiting {
    pending: Arc<Pending>,
    id: u64,
    /// Cancelled when a newer newcomer needs its place.
    pub displaced: CancellationToken,
}

impl Pending {
    /// A place for a newcomer, displacing the oldest when all are taken.
    pub fn wait(self: &Arc<Self>) -> Waiting {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let displaced = CancellationToken::new();
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        while waiting.len() >= MAX_PENDING {
            if let Some((_, oldest)) = waiting.pop_front() {
                oldest.cancel();
            }
        }
        waiting.push_back((id, displaced.clone()));
        Waiting {
            pending: self.clone(),
            id,
            displaced,
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut waiting = self
            .pending
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(at) = waiting.iter().position(|(id, _)| *id == self.id) {
            waiting.remove(at);
        }
    }
}

/// One MCP session as the server tracks it.
struct Session {
    peer: IpAddr,
    /// Who opened it (the principal, as [`std::fmt::Display`] says it): no one else may use it.
    owner: String,
    in_flight: u64,
    last_active: Instant,
}

/// The open MCP sessions: who opened each, and when it last did anything.
pub struct Sessions {
    open: Mutex<HashMap<String, Session>>,
    /// Sessions open at once at most.
    pub max: usize,
    /// Sessions of one peer address at most.
    pub max_per_peer: usize,
    /// A session idle this long is closed.
    pub idle: Duration,
}

/// What an `initialize` may do.
pub enum Room {
    /// There is room (these sessions were closed to make it: idle too long, or idle longest).
    Made(Vec<String>),
    /// Every session in the way has a request in flight.
    Full,
}

impl Sessions {
    /// No session yet.
    pub fn new(max: usize, max_per_peer: usize, idle: Duration) -> Sessions {
        Sessions {
            open: Mutex::new(HashMap::new()),
            max,
            max_per_peer,
            idle,
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The sessions idle past the bound, removed: the caller closes them.
    pub fn expired(&self) -> Vec<String> {
        let now = Instant::now();
        let mut open = self.map();
        let gone: Vec<String> = open
            .iter()
            .filter(|(_, s)| s.in_flight == 0 && now.duration_since(s.last_active) >= self.idle)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &gone {
            open.remove(id);
        }
        gone
    }

    /// Makes room for a new session of `peer` (see the module doc); the sessions to close come
    /// back in [`Room::Made`].
    pub fn make_room(&self, peer: IpAddr) -> Room {
        let mut closed = self.expired();
        let mut open = self.map();
        let oldest_idle = |open: &HashMap<String, Session>, of: Option<IpAddr>| {
            open.iter()
                .filter(|(_, s)| s.in_flight == 0 && of.is_none_or(|p| s.peer == p))
                .min_by_key(|(_, s)| s.last_active)
                .map(|(id, _)| id.clone())
        };
        if open.values().filter(|s| s.peer == peer).count() >= self.max_per_peer {
            match oldest_idle(&open, Some(peer)) {
                Some(id) => {
                    open.remove(&id);
                    closed.push(id);
                }
                None => return Room::Full,
            }
        }
        if open.len() >= self.max {
            match oldest_idle(&open, None) {
                Some(id) => {
                    open.remove(&id);
                    closed.push(id);
                }
                None => return Room::Full,
            }
        }
        Room::Made(closed)
    }

    /// A session was opened by `owner` from `peer`.
    pub fn opened(&self, id: &str, peer: IpAddr, owner: String) {
        self.map().insert(
            id.to_owned(),
            Session {
                peer,
                owner,
                in_flight: 0,
                last_active: Instant::now(),
            },
        );
    }

    /// Whether session `id`, if open, was opened by `owner` (one not open is rmcp's to refuse).
    pub fn usable_by(&self, id: &str, owner: &str) -> bool {
        self.map().get(id).is_none_or(|s| s.owner == owner)
    }

    /// A request of session `id` starts; `false` for a session not (or no longer) open.
    pub fn request_started(&self, id: &str) -> bool {
        match self.map().get_mut(id) {
            Some(session) => {
                session.in_flight += 1;
                session.last_active = Instant::now();
                true
            }
            None => false,
        }
    }

    /// A request of session `id` ended.
    pub fn request_ended(&self, id: &str) {
        if let Some(session) = self.map().get_mut(id) {
            session.in_flight = session.in_flight.saturating_sub(1);
            session.last_active = Instant::now();
        }
    }

    /// Session `id` was closed by its client.
    pub fn closed(&self, id: &str) {
        self.map().remove(id);
    }

    /// How many sessions are open.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_newcomer_with_a_whole_head_evicts_and_the_one_waiting_longest_goes() {
        let table = Arc::new(Connections::default());
        let flood: IpAddr = "127.0.0.2".parse().unwrap();
        let client: IpAddr = "127.0.0.1".parse().unwrap();
        let mut kept = Vec::new();
        for _ in 0..MAX_CONNECTIONS_PER_PEER {
            kept.push(table.admit(flood, false).unwrap());
        }
        // The flood's next one, without a whole head, waits: it evicts no one.
        assert_eq!(table.admit(flood, false).err(), Some(Full));
        assert!(!kept[0].connection.evicted.is_cancelled());
        // With one, it evicts its own oldest; the client is not in its way.
        let first = kept[0].connection.clone();
        kept.push(table.admit(flood, true).unwrap());
        assert!(first.evicted.is_cancelled());
        assert!(table.admit(client, false).is_ok());
        // Busy connections are not evicted: with all of a peer's busy, its next is refused.
        for admitted in &kept[1..] {
            admitted.connection.request_started();
        }
        assert_eq!(table.admit(flood, true).err(), Some(Full));
    }

    #[test]
    fn the_newest_pending_newcomer_displaces_the_oldest() {
        let pending = Arc::new(Pending::default());
        let mut waiting: Vec<Waiting> = (0..MAX_PENDING).map(|_| pending.wait()).collect();
        let oldest = waiting[0].displaced.clone();
        waiting.push(pending.wait());
        assert!(oldest.is_cancelled());
        assert!(!waiting[1].displaced.is_cancelled());
        drop(waiting);
        assert!(pending.waiting.lock().unwrap().is_empty());
    }

    #[test]
    fn an_initialize_closes_the_session_idle_longest_or_is_refused_when_all_are_busy() {
        let peer: IpAddr = "127.0.0.1".parse().unwrap();
        let sessions = Sessions::new(2, 2, Duration::from_secs(60));
        sessions.opened("a", peer, "p".into());
        sessions.opened("b", peer, "p".into());
        assert!(sessions.request_started("b"));
        match sessions.make_room(peer) {
            Room::Made(closed) => assert_eq!(closed, ["a"]),
            Room::Full => panic!("a was idle"),
        }
        sessions.opened("c", peer, "p".into());
        assert!(sessions.request_started("c"));
        assert!(matches!(sessions.make_room(peer), Room::Full));
        sessions.request_ended("c");
        assert!(matches!(sessions.make_room(peer), Room::Made(c) if c == ["c"]));
        let idle = Sessions::new(8, 8, Duration::ZERO);
        idle.opened("x", peer, "p".into());
        assert_eq!(idle.expired(), ["x"]);
        assert_eq!(idle.len(), 0);
    }
}
