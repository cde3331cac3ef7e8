//! [`watch`]: a policy file in force on a host, reloaded when it changes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify_debouncer_full::notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, new_debouncer};
use rho_runtime::{EventKind, Host};
use tokio::sync::mpsc;

use crate::set::{CedarPolicy, PolicyError};

/// How long a burst of changes to the file is let settle before it is read again.
pub const RELOAD_DEBOUNCE: Duration = Duration::from_millis(100);

/// A policy file watched for a host: dropping it stops the watching (the policies in force
/// stay in force), unless it was [detached](PolicyWatcher::detach).
pub struct PolicyWatcher {
    reloads: Option<tokio::task::AbortHandle>,
}

impl PolicyWatcher {
    /// Keeps watching for as long as the process runs (a command's host).
    pub fn detach(mut self) {
        self.reloads = None;
    }
}

impl Drop for PolicyWatcher {
    fn drop(&mut self) {
        if let Some(reloads) = self.reloads.take() {
            reloads.abort();
        }
    }
}

/// Puts the policies of `path` in force on `host` ([`Host::set_policy`], a `policy_changed`
/// event) and reloads them whenever the file changes, within [`RELOAD_DEBOUNCE`] and a read:
/// a new set that parses and validates replaces the old one whole (`policy_changed`); one that
/// does not is refused in one line (a `warning` event and the log) and the policies in force
/// stay. `Err` when the file cannot be used now: nothing is put in force. Call it inside a tokio
/// runtime.
pub fn watch(host: &Host, path: &Path) -> Result<PolicyWatcher, PolicyError> {
    let first = CedarPolicy::from_file(path)?;
    let mut last = std::fs::read(path).unwrap_or_default();
    host.set_policy(Some(Arc::new(first)));
    let watch_error = |e: &dyn std::fmt::Display| PolicyError::Watch {
        path: path.to_owned(),
        message: e.to_string(),
    };
    let file: PathBuf = path.to_owned();
    let name = file.file_name().map(ToOwned::to_owned);
    let parent = match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    let (tx, mut changed) = mpsc::channel::<()>(1);
    let mut debouncer = new_debouncer(RELOAD_DEBOUNCE, None, move |result: DebounceEventResult| {
        let concerns = match &result {
            // An editor writes a copy and renames it over the file: any event naming the
            // file's name counts.
            Ok(events) => events.iter().any(|event| {
                event.need_rescan() || event.paths.iter().any(|p| p.file_name() == name.as_deref())
            }),
            Err(_) => true,
        };
        if concerns {
            // A full channel means a reload is already due.
            let _ = tx.try_send(());
        }
    })
    .map_err(|e| watch_error(&e))?;
    debouncer
        .watch(&parent, RecursiveMode::NonRecursive)
        .map_err(|e| watch_error(&e))?;
    let host = host.clone();
    let reloads = tokio::spawn(async move {
        // The watching lives as long as this task.
        let _debouncer = debouncer;
        while changed.recv().await.is_some() {
            let text = match tokio::fs::read(&file).await {
                Ok(text) => text,
                Err(e) => {
                    refuse(
                        &host,
                        &file,
                        &PolicyError::Read {
                            path: file.clone(),
                            source: e,
                        },
                    );
                    continue;
                }
            };
            if text == last {
                continue;
            }
            last = text;
            let read = file.clone();
            let loaded = tokio::task::spawn_blocking(move || CedarPolicy::from_file(&read)).await;
            match loaded {
                Ok(Ok(policy)) => {
                    tracing::info!(policy = %rho_runtime::Policy::describe(&policy), "policies reloaded");
                    host.set_policy(Some(Arc::new(policy)));
                }
                Ok(Err(error)) => refuse(&host, &file, &error),
                Err(e) => tracing::error!(error = %e, "reading the policy file failed"),
            }
        }
    });
    Ok(PolicyWatcher {
        reloads: Some(reloads.abort_handle()),
    })
}

/// Says in one line that a changed policy file was refused and the policies in force stay.
fn refuse(host: &Host, file: &Path, error: &PolicyError) {
    let message = format!("{error}; the policies in force stay");
    tracing::warn!("{message}");
    host.bus().publish(
        None,
        EventKind::Warning {
            subject: file.display().to_string(),
            message,
        },
    );
}
