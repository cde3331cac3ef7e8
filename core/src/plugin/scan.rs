//! What a scan of a plugin directory reports, and a scan whose isolated loads may still be
//! running ([`Scanning`]): the directory ([`crate::plugin::dir`]) does the work, this is its result.

use std::path::PathBuf;

use crate::bus::events::EventKind;
use rho_worker::LoadError;
use rho_worker::loader::PluginInfo;

/// What one scan changed, for a caller that wants to print it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ScanReport {
    /// Plugins loaded for the first time (`name@version`).
    pub loaded: Vec<String>,
    /// Plugins replaced by a new version.
    pub reloaded: Vec<String>,
    /// Plugins whose file went away.
    pub removed: Vec<String>,
    /// One line per file (or directory) that failed or was refused.
    pub errors: Vec<String>,
    /// The directory itself could not be used (gone, refused, unreadable): its one line, also
    /// in `errors`.
    pub dir_error: Option<String>,
    /// Files still loading when the report was made (isolated files whose load-time code is
    /// slow or hangs): each serves as soon as it loads, or fails at the directory's
    /// `load_timeout`, with its events; this report does not see either.
    pub loading: Vec<String>,
    /// Events to publish once the registry shows the scan's result.
    pub(super) events: Vec<EventKind>,
    /// Versions to retire once the registry no longer hands them out.
    pub(super) retired: Vec<PluginInfo>,
}

impl ScanReport {
    /// Takes in what a load that finished in time reported (its events are already out).
    pub(super) fn absorb(&mut self, piece: ScanReport) {
        self.loaded.extend(piece.loaded);
        self.reloaded.extend(piece.reloaded);
        self.removed.extend(piece.removed);
        self.errors.extend(piece.errors);
    }

    pub(super) fn event(&mut self, kind: EventKind) {
        self.events.push(kind);
    }

    pub(super) fn fail_dir(&mut self, error: &LoadError) {
        self.dir_error = Some(error.to_string());
        self.fail(error);
    }

    pub(super) fn fail(&mut self, error: &LoadError) {
        let line = error.to_string();
        tracing::warn!("{line}");
        tracing::debug!(error = ?error, "the whole load error");
        self.event(EventKind::PluginLoadFailed {
            path: error.path().display().to_string(),
            error: line.clone(),
        });
        self.errors.push(line);
    }
}

/// A scan whose isolated loads may still be running (each in a task of its own, serving as soon
/// as it has loaded): [`Scanning::settle`] waits for them up to a deadline.
pub(crate) struct Scanning {
    report: ScanReport,
    loads: Vec<(PathBuf, tokio::task::JoinHandle<ScanReport>)>,
    bus: crate::bus::Bus,
    load_wait: std::time::Duration,
    load_timeout: std::time::Duration,
}

impl Scanning {
    /// A scan whose synchronous part produced `report` and that started `loads`.
    pub(super) fn new(
        report: ScanReport,
        loads: Vec<(PathBuf, tokio::task::JoinHandle<ScanReport>)>,
        bus: &crate::bus::Bus,
        load_wait: std::time::Duration,
        load_timeout: std::time::Duration,
    ) -> Scanning {
        Scanning {
            report,
            loads,
            bus: bus.clone(),
            load_wait,
            load_timeout,
        }
    }

    /// The scan's report once every load it started has ended, or at `deadline`: a file still
    /// loading then is named in [`ScanReport::loading`] and reported once, with a `warning`
    /// event; it serves when (if) its load ends.
    pub async fn settle(mut self, deadline: tokio::time::Instant) -> ScanReport {
        for (path, mut load) in self.loads {
            match tokio::time::timeout_at(deadline, &mut load).await {
                Ok(Ok(piece)) => self.report.absorb(piece),
                Ok(Err(_)) => self
                    .report
                    .errors
                    .push(format!("{}: the task loading it failed", path.display())),
                Err(_) => {
                    let message = format!(
                        "still loading after {} ms (its load-time code is slow or hangs); its \
                         tools serve when it has loaded, and it fails if that takes over {} ms",
                        self.load_wait.as_millis(),
                        self.load_timeout.as_millis()
                    );
                    tracing::warn!(file = %path.display(), "{message}");
                    self.bus.publish(
                        None,
                        EventKind::Warning {
                            subject: path.display().to_string(),
                            message,
                        },
                    );
                    self.report.loading.push(path.display().to_string());
                }
            }
        }
        self.report
    }
}
