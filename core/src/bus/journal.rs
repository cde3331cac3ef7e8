//! The journal: a must-see subscriber that writes every event of a bus to a JSON-lines file, from
//! which a lagged subscriber (or another process, such as `rho watch` attached to `rho serve`)
//! recovers what it missed by `seq`.
//!
//! Guarantees: every event published after [`Journal::attach`] is written, in `seq` order, one
//! JSON object per line. A journal file is only ever appended to, never truncated: a host that
//! restarts on the same path adds a new *run* (its `seq` starts again), so a reader following the
//! file (`rho watch --attach`) keeps going. One host at a time writes a file: it holds an
//! exclusive `flock` on it, and a second host gets [`JournalError::InUse`]. The bus hands events
//! to the journal's writer thread through an unbounded queue inside `publish`, so the loop never
//! waits for the disk; the cost is memory while the writer is behind (one `Arc<Event>` per queued
//! event). The writer writes what has gathered at most once per 2 ms, so a burst of events costs
//! one wake-up and one write, not one per event. If a write fails, the journal logs the
//! error, stops writing, and [`Journal::replay`] reports it instead of returning a partial range.
//!
//! Reading back is cheap whatever the run's length: the writer notes where every
//! [`INDEX_EVERY`]th event starts, so [`Journal::replay`] seeks near its first event, reads
//! lazily (one event in memory at a time, or a page bounded in bytes, [`Replay::page`]) and stops
//! after its last.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::bus::event_type::EventType;
use crate::bus::events::Event;
use crate::bus::{Bus, Sink};

/// Why a journal could not be opened or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// The file could not be created, written or read.
    #[error("journal {}: {reason}", path.display())]
    Io {
        /// The journal file.
        path: PathBuf,
        /// The operating system's reason.
        reason: String,
    },
    /// Another process holds the journal (a host writing to it).
    #[error("journal {}: in use by another process (a running host writes it)", path.display())]
    InUse {
        /// The journal file.
        path: PathBuf,
    },
    /// The writer has not caught up within the wait.
    #[error("journal {}: the writer has not reached seq {seq} within {waited_ms} ms", path.display())]
    Behind {
        /// The journal file.
        path: PathBuf,
        /// The seq waited for.
        seq: u64,
        /// How long.
        waited_ms: u64,
    },
}

struct Progress {
    written: u64,
    failed: Option<String>,
    /// `(seq, offset)` of every [`INDEX_EVERY`]th event of this run, in order.
    index: Vec<(u64, u64)>,
}

/// Every how many events the writer notes an event's offset in the file, for
/// [`Journal::replay`] to seek to: a replay reads at most this many events it does not return.
pub const INDEX_EVERY: u64 = 256;

/// How long the writer lets events gather after each write: under load it wakes and writes once
/// per this, not once per event (a call makes three events; each wake-up of a sleeping thread and
/// each write is a system call, which made the journal a tenth of `rho serve`'s time per call).
/// A reader waiting for an event ([`Journal::sync`], [`Journal::replay`]) waits this much longer
/// at most.
const GATHER: Duration = Duration::from_millis(2);

struct Shared {
    progress: Mutex<Progress>,
    changed: Condvar,
}

struct QueueSink(Mutex<mpsc::Sender<Arc<Event>>>);

impl Sink for QueueSink {
    fn accept(&self, event: &Arc<Event>) {
        if let Ok(tx) = self.0.lock() {
            let _ = tx.send(event.clone());
        }
    }
}

/// A journal attached to a bus. Dropping it does not detach it: the writer lives as long as the
/// bus publishes. Clones are handles to the same journal.
#[derive(Clone)]
pub struct Journal {
    path: PathBuf,
    /// Where this run starts in the file (what it held before is earlier runs').
    start: u64,
    bus: Bus,
    shared: Arc<Shared>,
}

impl Journal {
    /// Opens `path` for appending (creating it, mode 0600), takes its lock, and writes every
    /// event `bus` publishes from now on to it. `Err(InUse)` when another host writes it.
    pub fn attach(bus: &Bus, path: &Path) -> Result<Journal, JournalError> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| io_error(path, &e))?;
        // SAFETY: flock on our own descriptor; the lock lives as long as the file.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(if e.kind() == std::io::ErrorKind::WouldBlock {
                JournalError::InUse {
                    path: path.to_owned(),
                }
            } else {
                io_error(path, &e)
            });
        }
        let start = file.metadata().map_err(|e| io_error(path, &e))?.len();
        let shared = Arc::new(Shared {
            progress: Mutex::new(Progress {
                written: bus.last_seq(),
                failed: None,
                index: Vec::new(),
            }),
            changed: Condvar::new(),
        });
        let (tx, rx) = mpsc::channel::<Arc<Event>>();
        let writer_shared = shared.clone();
        let writer_path = path.to_owned();
        std::thread::Builder::new()
            .name("rho-journal".into())
            .spawn(move || {
                let out = Output {
                    file: BufWriter::new(file),
                    offset: start,
                    line: Vec::new(),
                };
                write_loop(rx, out, &writer_shared, &writer_path);
            })
            .map_err(|e| io_error(path, &e))?;
        bus.add_sink(Arc::new(QueueSink(Mutex::new(tx))));
        Ok(Journal {
            path: path.to_owned(),
            start,
            bus: bus.clone(),
            shared,
        })
    }

    /// The journal file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits (up to `wait`) until every event published so far is on disk.
    pub fn sync(&self, wait: Duration) -> Result<(), JournalError> {
        self.wait_for(self.bus.last_seq(), wait)
    }

    fn wait_for(&self, seq: u64, wait: Duration) -> Result<(), JournalError> {
        let deadline = Instant::now() + wait;
        let mut progress = self
            .shared
            .progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(reason) = &progress.failed {
                return Err(JournalError::Io {
                    path: self.path.clone(),
                    reason: reason.clone(),
                });
            }
            if progress.written >= seq {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(JournalError::Behind {
                    path: self.path.clone(),
                    seq,
                    waited_ms: wait.as_millis() as u64,
                });
            }
            progress = self
                .shared
                .changed
                .wait_timeout(progress, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// The events with seq in `from..=to`, in order, once the writer has written `to` (waiting up
    /// to five seconds), read lazily from the file: memory holds one event at a time (or one
    /// [`Replay::page`]), and the file is read from the indexed event nearest `from` to `to`.
    /// This is how a lagged subscriber recovers what it missed.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use rho_runtime::{Bus, EventKind, Journal};
    /// let dir = tempfile::tempdir()?;
    /// let bus = Bus::default();
    /// let journal = Journal::attach(&bus, &dir.path().join("events.jsonl"))?;
    /// for n in 0..5 {
    ///     bus.publish(None, EventKind::Warning { subject: "demo".into(), message: n.to_string() });
    /// }
    /// let seqs: Vec<u64> = journal.replay(2, 4)?.map(|e| e.map(|e| e.seq)).collect::<Result<_, _>>()?;
    /// assert_eq!(seqs, [2, 3, 4]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn replay(&self, from: u64, to: u64) -> Result<Replay, JournalError> {
        self.wait_for(to, Duration::from_secs(5))?;
        let offset = {
            let progress = self
                .shared
                .progress
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let at = progress.index.partition_point(|&(seq, _)| seq <= from);
            at.checked_sub(1)
                .map_or(self.start, |at| progress.index[at].1)
        };
        Replay::open(&self.path, offset, from, to)
    }
}

impl Journal {
    /// The events of type `kind` that earlier runs wrote to this journal's file (hosts before
    /// this one on the same path), oldest first, read lazily: how a restarted server picks up
    /// what it had promised to remember (`rho serve`'s tasks). Only lines of that type are
    /// parsed; the read costs one pass over the earlier runs' bytes.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use rho_runtime::{Bus, EventKind, EventType, Journal};
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("events.jsonl");
    /// // What an earlier host wrote.
    /// std::fs::write(&path, "{\"seq\":1,\"ts_ms\":0,\"type\":\"warning\",\"subject\":\"run 1\",\"message\":\"kept\"}\n")?;
    /// let bus = Bus::default();
    /// let journal = Journal::attach(&bus, &path)?;
    /// bus.publish(None, EventKind::Warning { subject: "run 2".into(), message: "not earlier".into() });
    /// let earlier: Vec<_> = journal.earlier(EventType::Warning)?.collect::<Result<_, _>>()?;
    /// assert_eq!(earlier.len(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn earlier(&self, kind: EventType) -> Result<Earlier, JournalError> {
        use std::io::Read;
        let file = File::open(&self.path).map_err(|e| io_error(&self.path, &e))?;
        Ok(Earlier {
            path: self.path.clone(),
            lines: BufReader::new(file.take(self.start)).lines(),
            tag: format!("\"type\":\"{}\"", kind.name()),
            done: false,
        })
    }
}

/// The events of one type of a journal's earlier runs ([`Journal::earlier`]), read from the file
/// as they are taken; lines that do not parse (one cut by a crash) are skipped.
pub struct Earlier {
    path: PathBuf,
    lines: std::io::Lines<BufReader<std::io::Take<File>>>,
    /// The type's tag as it is written (`"type":"task_changed"`): lines without it are not parsed.
    tag: String,
    /// A read failed: nothing more comes.
    done: bool,
}

impl Iterator for Earlier {
    type Item = Result<Event, JournalError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let line = match self.lines.next()? {
                Ok(line) => line,
                // A line that is not UTF-8 is no event of ours.
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => continue,
                Err(e) => {
                    self.done = true;
                    return Some(Err(io_error(&self.path, &e)));
                }
            };
            if !line.contains(&self.tag) {
                continue;
            }
            if let Ok(event) = serde_json::from_str::<Event>(&line) {
                return Some(Ok(event));
            }
        }
        None
    }
}

/// The events of a [`Journal::replay`], read from the file as they are taken. Ends after the
/// range's last event (or at the end of the file); an error ends it too.
pub struct Replay {
    path: PathBuf,
    lines: std::io::Lines<BufReader<File>>,
    from: u64,
    to: u64,
    done: bool,
}

impl Replay {
    fn open(path: &Path, offset: u64, from: u64, to: u64) -> Result<Replay, JournalError> {
        use std::io::{Seek, SeekFrom};
        let mut file = File::open(path).map_err(|e| io_error(path, &e))?;
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| io_error(path, &e))?;
        Ok(Replay {
            path: path.to_owned(),
            lines: BufReader::new(file).lines(),
            from,
            to,
            done: from > to,
        })
    }

    /// The next events, as many as fit in `max_bytes` of journal lines (at least one, if any is
    /// left): how a reader bounds its memory whatever the events' sizes. Empty at the end.
    pub fn page(&mut self, max_bytes: usize) -> Result<Vec<Event>, JournalError> {
        let mut page = Vec::new();
        let mut bytes = 0;
        while bytes < max_bytes {
            match self.next_sized() {
                Some(Ok((event, len))) => {
                    bytes += len;
                    page.push(event);
                }
                Some(Err(e)) => return Err(e),
                None => break,
            }
        }
        Ok(page)
    }

    fn next_sized(&mut self) -> Option<Result<(Event, usize), JournalError>> {
        while !self.done {
            let line = match self.lines.next()? {
                Ok(line) => line,
                Err(e) => {
                    self.done = true;
                    return Some(Err(io_error(&self.path, &e)));
                }
            };
            let Ok(event) = serde_json::from_str::<Event>(&line) else {
                continue;
            };
            if event.seq < self.from {
                continue;
            }
            if event.seq >= self.to {
                self.done = true;
                if event.seq > self.to {
                    return None;
                }
            }
            return Some(Ok((event, line.len() + 1)));
        }
        None
    }
}

impl Iterator for Replay {
    type Item = Result<Event, JournalError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_sized().map(|r| r.map(|(event, _)| event))
    }
}

/// Reads the events with seq in `from..=to` (to the end without `to`) of the last run in a
/// journal file (a run starts where `seq` goes back: a host restarted on the same file), skipping
/// lines that do not parse (a line being written by another process).
pub fn read_range(path: &Path, from: u64, to: Option<u64>) -> Result<Vec<Event>, JournalError> {
    read_run(path, 0, from, to)
}

/// [`read_range`] from byte `offset` on.
fn read_run(
    path: &Path,
    offset: u64,
    from: u64,
    to: Option<u64>,
) -> Result<Vec<Event>, JournalError> {
    use std::io::{Seek, SeekFrom};
    let mut file = File::open(path).map_err(|e| io_error(path, &e))?;
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| io_error(path, &e))?;
    let mut events = Vec::new();
    let mut last = 0;
    for line in BufReader::new(file).lines() {
        let line = line.map_err(|e| io_error(path, &e))?;
        let Ok(event) = serde_json::from_str::<Event>(&line) else {
            continue;
        };
        if event.seq <= last {
            // A new run: what came before is an earlier host's.
            events.clear();
        }
        last = event.seq;
        if event.seq < from || to.is_some_and(|to| event.seq > to) {
            continue;
        }
        events.push(event);
    }
    Ok(events)
}

fn io_error(path: &Path, e: &std::io::Error) -> JournalError {
    JournalError::Io {
        path: path.to_owned(),
        reason: e.to_string(),
    }
}

/// The writer's end of the file: where the next line starts, and a buffer to build it in.
struct Output {
    file: BufWriter<File>,
    offset: u64,
    line: Vec<u8>,
}

impl Output {
    /// Writes `event` as one line; returns where it starts.
    fn write(&mut self, event: &Event) -> std::io::Result<u64> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, event)?;
        self.line.push(b'\n');
        self.file.write_all(&self.line)?;
        let at = self.offset;
        self.offset += self.line.len() as u64;
        Ok(at)
    }
}

fn write_loop(rx: mpsc::Receiver<Arc<Event>>, mut out: Output, shared: &Shared, path: &Path) {
    let mut indexed = Vec::new();
    while let Ok(first) = rx.recv() {
        let mut last = 0;
        let mut write = |event: &Event, out: &mut Output| {
            let at = out.write(event)?;
            if event.seq % INDEX_EVERY == 1 {
                indexed.push((event.seq, at));
            }
            last = event.seq;
            Ok::<(), std::io::Error>(())
        };
        let mut result = write(&first, &mut out);
        while result.is_ok() {
            match rx.try_recv() {
                Ok(event) => result = write(&event, &mut out),
                Err(_) => break,
            }
        }
        let result = result.and_then(|()| out.file.flush());
        let mut progress = shared
            .progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match result {
            Ok(()) => {
                progress.written = last;
                progress.index.append(&mut indexed);
            }
            Err(e) => {
                tracing::error!(journal = %path.display(), error = %e, "journal write failed; journal stopped");
                progress.failed = Some(e.to_string());
                shared.changed.notify_all();
                return;
            }
        }
        shared.changed.notify_all();
        drop(progress);
        // Events that come meanwhile queue without waking this thread; the next round writes
        // them together.
        std::thread::sleep(GATHER);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::events::EventKind;

    #[test]
    fn a_restarted_host_appends_a_new_run_and_reads_see_the_last_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        let warn = |message: &str| EventKind::Warning {
            subject: "test".into(),
            message: message.into(),
        };
        for run in ["first", "second"] {
            let bus = Bus::default();
            let journal = Journal::attach(&bus, &path).unwrap();
            // One host at a time.
            assert!(matches!(
                Journal::attach(&Bus::default(), &path),
                Err(JournalError::InUse { .. })
            ));
            for n in 0..3 {
                bus.publish(None, warn(&format!("{run} {n}")));
            }
            let replayed: Vec<Event> = journal.replay(1, 3).unwrap().map(Result::unwrap).collect();
            assert_eq!(replayed.len(), 3, "{run}");
            assert!(replayed.iter().all(|e| matches!(&e.kind,
                EventKind::Warning { message, .. } if message.starts_with(run))));
            drop(journal);
            drop(bus);
            // The writer thread ends with the bus; the lock with the file.
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 6, "appended, not truncated");
        let last = read_range(&path, 2, None).unwrap();
        assert_eq!(last.len(), 2);
        assert!(
            matches!(&last[0].kind, EventKind::Warning { message, .. } if message == "second 1")
        );
    }

    /// The voluntary context switches of this process's `rho-journal` threads, by thread id.
    fn journal_switches() -> std::collections::HashMap<String, u64> {
        let mut found = std::collections::HashMap::new();
        for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let dir = task.path();
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            if comm.trim() != "rho-journal" {
                continue;
            }
            let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
            let switches = status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
            found.insert(task.file_name().to_string_lossy().into_owned(), switches);
        }
        found
    }

    /// Events that come one at a time (200 us apart, as a host's calls make them) are written
    /// in rounds: the writer sleeps far fewer times than there are events.
    #[test]
    fn events_that_trickle_in_are_written_in_rounds() {
        let dir = tempfile::tempdir().unwrap();
        let bus = Bus::default();
        let before = journal_switches();
        let journal = Journal::attach(&bus, &dir.path().join("j.jsonl")).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let ours = |now: &std::collections::HashMap<String, u64>| -> u64 {
            now.iter()
                .filter(|(tid, _)| !before.contains_key(*tid))
                .map(|(_, n)| n)
                .sum()
        };
        let started = ours(&journal_switches());
        const EVENTS: u64 = 300;
        for n in 0..EVENTS {
            bus.publish(
                None,
                EventKind::Warning {
                    subject: "test".into(),
                    message: n.to_string(),
                },
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        journal.sync(Duration::from_secs(5)).unwrap();
        let switches = ours(&journal_switches()) - started;
        assert!(
            switches < EVENTS / 3,
            "the writer slept {switches} times for {EVENTS} events"
        );
        let seqs: Vec<u64> = journal
            .replay(1, EVENTS)
            .unwrap()
            .map(|e| e.unwrap().seq)
            .collect();
        assert_eq!(seqs, (1..=EVENTS).collect::<Vec<_>>());
    }

    #[test]
    fn a_replay_seeks_by_the_index_stops_at_its_end_and_pages_by_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        let bus = Bus::default();
        let journal = Journal::attach(&bus, &path).unwrap();
        let total = 3 * INDEX_EVERY + 10;
        for n in 0..total {
            bus.publish(
                None,
                EventKind::Warning {
                    subject: "test".into(),
                    message: "x".repeat(100) + &n.to_string(),
                },
            );
        }
        let from = 2 * INDEX_EVERY + 5;
        let seqs: Vec<u64> = journal
            .replay(from, from + 20)
            .unwrap()
            .map(|e| e.unwrap().seq)
            .collect();
        assert_eq!(seqs, (from..=from + 20).collect::<Vec<_>>());
        let index = journal.shared.progress.lock().unwrap().index.clone();
        assert_eq!(index.len() as u64, 4, "{index:?}");
        // The index points at the start of its event's line.
        let text = std::fs::read(&path).unwrap();
        for (seq, at) in index {
            let line = &text[at as usize..];
            let event: Event =
                serde_json::from_slice(&line[..line.iter().position(|&b| b == b'\n').unwrap()])
                    .unwrap();
            assert_eq!(event.seq, seq);
        }
        // Pages: at least one event each, however small the bound; in order, no gap.
        let mut replay = journal.replay(1, total).unwrap();
        assert_eq!(replay.page(1).unwrap().len(), 1);
        let mut next = 2;
        loop {
            let page = replay.page(4096).unwrap();
            if page.is_empty() {
                break;
            }
            assert!(
                page.len() < 40,
                "a page is bounded by bytes: {}",
                page.len()
            );
            for event in page {
                assert_eq!(event.seq, next);
                next += 1;
            }
        }
        assert_eq!(next, total + 1);
        assert_eq!(journal.replay(5, 4).unwrap().count(), 0, "an empty range");
    }
}
