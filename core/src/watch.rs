//! Hot reload: a plugin directory watched with notify (through a debouncer), rescanned when it
//! changes.
//!
//! The directory is watched, not its files: `cargo build` deletes the old library and hard-links a
//! new one (a new inode), and installers rename a finished file into place. Every debounced batch
//! of events triggers one [`PluginDir::scan`], which compares content hashes, so events that change
//! nothing cost one directory listing and a hash per changed file.

use std::time::Duration;

use notify_debouncer_full::notify::RecommendedWatcher;
use notify_debouncer_full::notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};
use tokio::sync::mpsc;

use crate::events::EventKind;
use crate::plugin::dir::PluginDir;

/// The default quiet time before a burst of file-system events triggers a scan.
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

/// A running watch of one plugin directory. Dropping it stops watching.
pub struct DirWatcher {
    _debouncer: Debouncer<RecommendedWatcher, RecommendedCache>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for DirWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PluginDir {
    /// Watches the directory and rescans it after each burst of changes (quiet for `debounce`).
    /// Must be called inside a tokio runtime.
    pub fn watch(&self, debounce: Duration) -> Result<DirWatcher, WatchError> {
        let error = |e: &dyn std::fmt::Display| WatchError {
            path: self.path().display().to_string(),
            reason: e.to_string(),
        };
        let (tx, mut rx) = mpsc::channel::<()>(1);
        let bus = self.registry_bus();
        let path = self.path().display().to_string();
        let mut debouncer = new_debouncer(debounce, None, move |result: DebounceEventResult| {
            match result {
                // A full channel means a scan is already due: nothing is lost.
                Ok(events) if !events.is_empty() => {
                    let _ = tx.try_send(());
                }
                Ok(_) => {}
                Err(errors) => {
                    for e in errors {
                        tracing::warn!(dir = %path, error = %e, "watching the plugin directory");
                        bus.publish(
                            None,
                            EventKind::Warning {
                                subject: path.clone(),
                                message: format!("watching the plugin directory: {e}"),
                            },
                        );
                    }
                    let _ = tx.try_send(());
                }
            }
        })
        .map_err(|e| error(&e))?;
        debouncer
            .watch(self.path(), RecursiveMode::NonRecursive)
            .map_err(|e| error(&e))?;
        let dir = self.clone();
        let task = tokio::spawn(async move {
            while rx.recv().await.is_some() {
                dir.scan().await;
            }
        });
        Ok(DirWatcher {
            _debouncer: debouncer,
            task,
        })
    }
}
