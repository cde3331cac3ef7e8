//! Hot reload: a plugin directory (and its parent) watched with notify (through a debouncer),
//! rescanned when it changes; polled where it cannot be watched.
//!
//! The directory is watched, not its files: `cargo build` deletes the old library and hard-links a
//! new one (a new inode), and installers rename a finished file into place. Every debounced batch
//! of events triggers one [`PluginDir::scan`], which compares content hashes, so events that change
//! nothing cost one directory listing and a hash per changed file.

use std::time::Duration;

use notify_debouncer_full::notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, new_debouncer};

/// The debouncer a watch runs.
type Debouncer = notify_debouncer_full::Debouncer<
    notify_debouncer_full::notify::RecommendedWatcher,
    notify_debouncer_full::RecommendedCache,
>;
use tokio::sync::mpsc;

use crate::bus::events::EventKind;
use crate::plugin::dir::PluginDir;

/// The quiet time hot reload waits for after a burst of file-system events before it rescans
/// ([`HostBuilder::watch`](crate::HostBuilder::watch)).
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(50);

/// Why a directory could not be watched.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch {path}: {reason}")]
pub struct WatchError {
    /// The directory.
    pub path: String,
    /// notify's reason.
    pub reason: String,
}

/// Whether an event of `kind` may mean a changed directory. Reads are not changes: a scan opens
/// the directory and its files, and were those opens taken for changes, every scan would start
/// the next one (an idle host rescanning its directories for ever). A file closed after writing
/// is one (its last write may come before the debounce's quiet time).
fn may_change(kind: &notify_debouncer_full::notify::EventKind) -> bool {
    use notify_debouncer_full::notify::EventKind;
    use notify_debouncer_full::notify::event::{AccessKind, AccessMode};
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Whether `event` calls for a scan: a change of the directory (`concerns` says which paths are
/// its own), or word that events were lost (the kernel's queue overflowed), which names no path.
fn calls_for_scan(
    event: &notify_debouncer_full::notify::Event,
    concerns: &dyn Fn(&std::path::Path) -> bool,
) -> bool {
    event.need_rescan() || may_change(&event.kind) && event.paths.iter().any(|p| concerns(p))
}

/// Whether an event of `kind` for a path means what was there went (deleted, or renamed away).
fn went(kind: &notify_debouncer_full::notify::EventKind) -> bool {
    use notify_debouncer_full::notify::EventKind;
    use notify_debouncer_full::notify::event::ModifyKind;
    matches!(
        kind,
        EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_))
    )
}

/// The device and inode of the directory at `path` (`None`: no directory there).
fn dir_identity(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .ok()
        .filter(std::fs::Metadata::is_dir)
        .map(|meta| (meta.dev(), meta.ino()))
}

/// How often a directory that cannot be watched (or whose parent cannot) is rescanned.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// A running watch of one plugin directory. Dropping it stops watching.
pub struct DirWatcher {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for DirWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PluginDir {
    /// Watches the directory and rescans it after each burst of changes (quiet for `debounce`).
    /// Its parent is watched too: a directory deleted and made again is scanned (its tools leave
    /// when it goes) and watched again. Where a watch cannot be set up, a `warning` event says so
    /// once and the directory is rescanned every [`POLL_INTERVAL`]. Must be called inside a tokio
    /// runtime.
    pub fn watch(&self, debounce: Duration) -> Result<DirWatcher, WatchError> {
        let error = |e: &dyn std::fmt::Display| WatchError {
            path: self.path().display().to_string(),
            reason: e.to_string(),
        };
        let (tx, mut rx) = mpsc::channel::<()>(1);
        let bus = self.registry_bus();
        let shown = self.path().display().to_string();
        // notify reports absolute paths: compare with the absolute directory.
        let dir_path = std::path::absolute(self.path()).unwrap_or_else(|_| self.path().to_owned());
        let warn = {
            let bus = bus.clone();
            let shown = shown.clone();
            move |message: String| {
                tracing::warn!(dir = %shown, "{message}");
                bus.publish(
                    None,
                    EventKind::Warning {
                        subject: shown.clone(),
                        message,
                    },
                );
            }
        };
        let concerns = {
            let dir = dir_path.clone();
            move |p: &std::path::Path| p == dir || p.parent() == Some(dir.as_path())
        };
        let parent = match dir_path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
            _ => std::path::PathBuf::from("."),
        };
        // Set when the directory itself went (deleted or renamed away): the kernel dropped its
        // watch, whatever is at the path later (a directory made again may even get the same
        // inode number).
        let gone = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // A debouncer watching the parent and (when it is there) the directory: whether each
        // watch holds. Made again for a directory deleted and made again: notify's state of the
        // old directory's watch (its removal reported late) must not swallow the new one's.
        let start = {
            let (parent, dir_path, warn) = (parent.clone(), dir_path.clone(), warn.clone());
            let gone = gone.clone();
            move || -> Result<(Debouncer, bool, bool), notify_debouncer_full::notify::Error> {
                let (tx, concerns, warn) = (tx.clone(), concerns.clone(), warn.clone());
                let (gone, dir) = (gone.clone(), dir_path.clone());
                let mut debouncer =
                    new_debouncer(debounce, None, move |result: DebounceEventResult| {
                        match result {
                            // A full channel means a scan is already due: nothing is lost.
                            Ok(events) => {
                                if events
                                    .iter()
                                    .any(|e| went(&e.kind) && e.paths.contains(&dir))
                                {
                                    gone.store(true, std::sync::atomic::Ordering::SeqCst);
                                }
                                if events.iter().any(|e| calls_for_scan(e, &concerns)) {
                                    let _ = tx.try_send(());
                                }
                            }
                            Err(errors) => {
                                for e in errors {
                                    warn(format!("watching the plugin directory: {e}"));
                                }
                                let _ = tx.try_send(());
                            }
                        }
                    })?;
                let parent = debouncer
                    .watch(&parent, RecursiveMode::NonRecursive)
                    .is_ok();
                let dir = debouncer
                    .watch(&dir_path, RecursiveMode::NonRecursive)
                    .is_ok();
                Ok((debouncer, parent, dir))
            }
        };
        let (mut debouncer, watching_parent, mut watching) = start().map_err(|e| error(&e))?;
        if !watching && dir_path.is_dir() || !watching_parent {
            warn(format!(
                "cannot watch {} for changes: rescanning it every {} s",
                if watching_parent {
                    &shown
                } else {
                    "its parent directory"
                },
                POLL_INTERVAL.as_secs()
            ));
        }
        let mut watched = dir_identity(&dir_path).filter(|_| watching);
        let dir = self.clone();
        let task = tokio::spawn(async move {
            // What landed between the directory's first scan and this watch.
            dir.scan().await;
            loop {
                let poll = !watching || !watching_parent;
                tokio::select! {
                    got = rx.recv() => if got.is_none() { return },
                    () = tokio::time::sleep(POLL_INTERVAL), if poll => {}
                }
                dir.scan().await;
                // The directory watched is the one at the path now, not one deleted (and maybe
                // made again) meanwhile: the kernel dropped the watch with the old one, and a
                // directory made again before this look is a new inode to watch.
                let now = dir_identity(&dir_path);
                let replaced = gone.swap(false, std::sync::atomic::Ordering::SeqCst);
                if now.is_some() && (!watching || replaced || now != watched) {
                    match start() {
                        Ok((fresh, _, dir_watched)) => {
                            debouncer = fresh;
                            watching = dir_watched;
                        }
                        Err(e) => {
                            tracing::warn!(dir = %dir_path.display(), error = %e, "watching again");
                            watching = false;
                        }
                    }
                    watched = now.filter(|_| watching);
                    // What landed between the scan and the watch.
                    if watching {
                        dir.scan().await;
                    }
                } else if now.is_none() && watching {
                    let _ = debouncer.unwatch(&dir_path);
                    watching = false;
                    watched = None;
                }
            }
        });
        Ok(DirWatcher { task })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify_debouncer_full::notify::{self, Watcher};

    /// Lost events (no path) call for a scan; a read of the directory does not.
    #[test]
    fn lost_events_call_for_a_scan() {
        use notify::event::{AccessKind, Flag};
        let dir = std::path::PathBuf::from("/plugins");
        let concerns = |p: &std::path::Path| p == dir;
        let lost = notify::Event::new(notify::EventKind::Other).set_flag(Flag::Rescan);
        assert!(calls_for_scan(&lost, &concerns));
        let read =
            notify::Event::new(notify::EventKind::Access(AccessKind::Read)).add_path(dir.clone());
        assert!(!calls_for_scan(&read, &concerns));
        let made = notify::Event::new(notify::EventKind::Create(notify::event::CreateKind::File))
            .add_path(dir.clone());
        assert!(calls_for_scan(&made, &concerns));
    }

    /// Against the kernel's own events: reading a directory and a file in it (what a scan does)
    /// is no change; writing a file is.
    #[test]
    fn reads_are_not_changes_and_writes_are() {
        let dir = std::env::temp_dir().join(format!("rho-watch-kinds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("old.so"), b"x").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let mut watcher = notify::recommended_watcher(move |event| {
            let _ = tx.send(event);
        })
        .unwrap();
        watcher.watch(&dir, RecursiveMode::NonRecursive).unwrap();
        let drain = || -> Vec<notify::EventKind> {
            let mut kinds = Vec::new();
            while let Ok(Ok(event)) = rx.recv_timeout(Duration::from_millis(300)) {
                kinds.push(event.kind);
            }
            kinds
        };
        let _ = std::fs::read_dir(&dir).unwrap().count();
        let _ = std::fs::read(dir.join("old.so")).unwrap();
        let reads = drain();
        assert!(!reads.is_empty(), "no events for the reads");
        assert!(!reads.iter().any(may_change), "{reads:?}");
        std::fs::write(dir.join("new.so"), b"y").unwrap();
        let writes = drain();
        assert!(writes.iter().any(may_change), "{writes:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
