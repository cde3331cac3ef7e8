//! The journal: a must-see subscriber that writes every event of a bus to a JSON-lines file, from
//! which a lagged subscriber (or another process, such as `rho watch` attached to `rho serve`)
//! recovers what it missed by `seq`.
//!
//! Guarantees: every event published after [`Journal::attach`] is written, in `seq` order, one
//! JSON object per line. A journal file is only ever appended to, never truncated: a host that
//! restarts on the same path adds a new *run* (its `seq` starts again), so a reader following the
//! file (`rho watch --attach`) keeps going. One host at a time writes a file: it holds an
//! exclusive `flock` on it, and a second host gets [`JournalError::InUse`]. The bus hands events to the journal's writer thread through an unbounded
//! queue inside `publish`, so the loop never waits for the disk; the cost is memory while the
//! writer is behind (one `Arc<Event>` per queued event). If a write fails, the journal logs the
//! error, stops writing, and [`Journal::replay`] reports it instead of returning a partial range.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

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
}

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
            }),
            changed: Condvar::new(),
        });
        let (tx, rx) = mpsc::channel::<Arc<Event>>();
        let writer_shared = shared.clone();
        let writer_path = path.to_owned();
        std::thread::Builder::new()
            .name("rho-journal".into())
            .spawn(move || write_loop(rx, BufWriter::new(file), &writer_shared, &writer_path))
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
    /// to five seconds). This is how a lagged subscriber recovers what it missed.
    pub fn replay(&self, from: u64, to: u64) -> Result<Vec<Event>, JournalError> {
        self.wait_for(to, Duration::from_secs(5))?;
        read_run(&self.path, self.start, from, Some(to))
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

fn write_loop(
    rx: mpsc::Receiver<Arc<Event>>,
    mut out: BufWriter<File>,
    shared: &Shared,
    path: &Path,
) {
    while let Ok(first) = rx.recv() {
        let mut last = 0;
        let mut result = write_event(&mut out, &first).map(|()| last = first.seq);
        while result.is_ok() {
            match rx.try_recv() {
                Ok(event) => result = write_event(&mut out, &event).map(|()| last = event.seq),
                Err(_) => break,
            }
        }
        let result = result.and_then(|()| out.flush());
        let mut progress = shared
            .progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match result {
            Ok(()) => progress.written = last,
            Err(e) => {
                tracing::error!(journal = %path.display(), error = %e, "journal write failed; journal stopped");
                progress.failed = Some(e.to_string());
                shared.changed.notify_all();
                return;
            }
        }
        shared.changed.notify_all();
    }
}

fn write_event(out: &mut BufWriter<File>, event: &Event) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, event)?;
    out.write_all(b"\n")
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
            let replayed = journal.replay(1, 3).unwrap();
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
}
