//! A pool of workers for one plugin version: each worker runs one call at a time, warm spares are
//! started ahead, dead workers are replaced, idle ones beyond the spares are reclaimed, and a
//! retired pool lets its busy workers finish their call and then stops them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

use crate::isolate::WorkerOptions;
use crate::isolate::channel::read_frame_async;
use crate::isolate::spawn::{Payload, Process, kill_group, start};
use rho_protocol::PROTOCOL_VERSION;
use rho_protocol::SandboxReport;
use rho_protocol::ToolSpec;
use rho_protocol::frames::{Frame, FrameError, FromWorker, ToWorker, encode_head};
use rho_worker::LoadError;
use rho_worker::loader::load::PluginInfo;

/// One worker process. Dropping it kills its process group.
pub(crate) struct Worker {
    process: Process,
    next_id: u64,
    _slot: Slot,
}

/// One of the pool's `max_workers` places, held by a worker (or a worker being started). Dropping
/// it frees the place and wakes a call waiting for one. Never dropped under the state lock.
struct Slot {
    pool: Weak<Inner>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(inner) = self.pool.upgrade() {
            inner
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .live -= 1;
            inner.freed.notify_one();
        }
    }
}

impl Worker {
    /// A new call number.
    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Sends one message with its blob (a call's arguments): calls on the channel, cancellations
    /// on the cancel channel.
    pub async fn send(&mut self, message: &ToWorker, blob: &[u8]) -> std::io::Result<()> {
        let head = encode_head(message, blob.len());
        let channel = match message {
            ToWorker::Cancel { .. } => &self.process.cancel,
            ToWorker::Call { .. }
            | ToWorker::Start { .. }
            | ToWorker::Exec { .. }
            | ToWorker::Answered { .. } => self.process.stream.get_ref(),
        };
        channel.write_all(&[&head, blob]).await
    }

    /// Reads one frame, refusing frames over `limit` bytes.
    pub async fn read(&mut self, limit: usize) -> Result<Frame<FromWorker>, FrameError> {
        read_frame_async(&mut self.process.stream, limit).await
    }

    /// How the process ended, if it has (waits up to `wait`; kills it if it has not), with its
    /// last line on stderr when it left one.
    pub async fn exit_text(&mut self, wait: Duration, when: &str) -> String {
        // The exit status and the end of stderr are awaited together, not one after the other.
        let Process {
            child,
            pid,
            last_stderr,
            stderr_reader,
            stderr_marks,
            status: reported,
            ..
        } = &mut self.process;
        // Marks read from here on are the worker's report of this end.
        let marks_before = *stderr_marks.borrow();
        let status = async {
            // A sandboxed worker reports its plugin process's status before it tears its
            // namespaces down; an unsandboxed one closed the pipe at once.
            if let Some(pipe) = reported {
                let mut raw = [0u8; 4];
                if pipe.read_exact(&mut raw).await.is_ok() {
                    use std::os::unix::process::ExitStatusExt;
                    return Ok(std::process::ExitStatus::from_raw(i32::from_ne_bytes(raw)));
                }
            }
            child.wait().await
        };
        let (status, words) = tokio::join!(
            tokio::time::timeout(wait, status),
            crate::isolate::spawn::last_words(
                last_stderr,
                stderr_reader,
                stderr_marks,
                marks_before,
                Duration::from_millis(200)
            )
        );
        let how = match status {
            Ok(Ok(status)) => format!("{}{when}", crate::isolate::exit_text(status)),
            Ok(Err(e)) => format!("its status could not be read: {e}"),
            Err(_) => {
                kill_group(*pid);
                "it closed its channel and was killed".into()
            }
        };
        match words {
            Some(line) => format!(
                "{how} (its last words on stderr: {})",
                rho_worker::one_line(&truncate(&line, 200))
            ),
            None => how,
        }
    }

    fn alive(&mut self) -> bool {
        matches!(self.process.child.try_wait(), Ok(None))
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        kill_group(self.process.pid);
        // `kill_on_drop` and tokio's orphan reaping collect the process.
    }
}

/// What a new worker reported after loading its plugin.
pub(crate) struct Ready {
    pub name: String,
    pub version: String,
    pub interface_version: u32,
    pub tools: Vec<ToolSpec>,
    pub rejected: Vec<String>,
    pub capabilities: rho_plugin_api::Capabilities,
    pub sandbox: SandboxReport,
}

struct Idle {
    worker: Worker,
    since: Instant,
}

struct State {
    idle: Vec<Idle>,
    starting: usize,
    /// Workers alive or being started (each holds a `Slot`).
    live: usize,
    retired: bool,
}

struct Inner {
    options: Arc<WorkerOptions>,
    payload: Payload,
    shown: PathBuf,
    label: String,
    state: Mutex<State>,
    /// Woken when a worker is released or a slot freed.
    freed: tokio::sync::Notify,
}

/// The workers of one plugin version. Cheap to clone.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

impl Pool {
    /// Starts the first worker on `payload` (the plugin at `info.path` and its sandbox) and reads
    /// what it loaded; keeps it as the first idle worker and starts the spares. The payload's
    /// memfd is closed with the pool (workers still running keep their own descriptor).
    pub(crate) async fn open(
        options: Arc<WorkerOptions>,
        payload: Payload,
        info: &PluginInfo,
    ) -> Result<(Pool, Ready), LoadError> {
        let label = info
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let pool = Pool {
            inner: Arc::new(Inner {
                options,
                payload,
                shown: info.path.clone(),
                label,
                state: Mutex::new(State {
                    idle: Vec::new(),
                    starting: 0,
                    live: 0,
                    retired: false,
                }),
                freed: tokio::sync::Notify::new(),
            }),
        };
        pool.state().live += 1;
        let slot = pool.slot();
        let (worker, ready) =
            pool.start_worker(slot)
                .await
                .map_err(|reason| LoadError::Worker {
                    path: info.path.clone(),
                    reason,
                })?;
        pool.state().idle.push(Idle {
            worker,
            since: Instant::now(),
        });
        pool.top_up();
        pool.spawn_reaper();
        Ok((pool, ready))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The pool's options.
    pub fn options(&self) -> &WorkerOptions {
        &self.inner.options
    }

    /// A slot counted in `live` (the caller already incremented it).
    fn slot(&self) -> Slot {
        Slot {
            pool: Arc::downgrade(&self.inner),
        }
    }

    /// Takes a slot if fewer than `max` workers are alive or starting.
    fn reserve(&self, max: usize) -> Option<Slot> {
        let mut state = self.state();
        if state.live >= max {
            return None;
        }
        state.live += 1;
        drop(state);
        Some(self.slot())
    }

    async fn start_worker(&self, slot: Slot) -> Result<(Worker, Ready), String> {
        let inner = &self.inner;
        let process = start(&inner.options, &inner.payload, &inner.shown, &inner.label)
            .await
            .map_err(|e| {
                format!(
                    "cannot start the worker {}: {e}",
                    inner.options.worker_executable().display()
                )
            })?;
        let mut worker = Worker {
            process,
            next_id: 0,
            _slot: slot,
        };
        // Both frames within the start timeout: `Confined` (sent before the plugin's code ran)
        // and `Ready`.
        let limit = inner.options.max_frame;
        let started = tokio::time::timeout(inner.options.start_timeout, async {
            let sandbox = match worker.read(limit).await {
                Ok(Frame {
                    message: FromWorker::Confined { protocol, sandbox },
                    ..
                }) if protocol == PROTOCOL_VERSION => sandbox,
                // Another release's worker: one line, nothing more read from it.
                Ok(Frame {
                    message: FromWorker::Confined { protocol, .. },
                    ..
                }) => {
                    return Err(Ok(Frame {
                        message: FromWorker::LoadFailed {
                            error: format!(
                                "the worker {} speaks protocol {protocol}, this host speaks \
                                 {PROTOCOL_VERSION}: run the worker of the host's own rho release",
                                inner.options.worker_executable().display()
                            ),
                        },
                        blobs: Vec::new(),
                    }));
                }
                other => return Err(other),
            };
            match worker.read(limit).await {
                Ok(Frame {
                    message:
                        FromWorker::Ready {
                            name,
                            version,
                            interface_version,
                            tools,
                            rejected,
                            capabilities,
                        },
                    ..
                }) => Ok(Ready {
                    name,
                    version,
                    interface_version,
                    tools,
                    rejected,
                    capabilities,
                    sandbox,
                }),
                other => Err(other),
            }
        })
        .await;
        match started {
            Ok(Ok(ready)) => Ok((worker, ready)),
            Ok(Err(Ok(Frame {
                message: FromWorker::LoadFailed { error },
                ..
            }))) => Err(rho_worker::one_line(&strip_path(&error, &inner.shown))),
            Ok(Err(Ok(_))) => Err("the worker broke the protocol while loading".into()),
            Ok(Err(Err(FrameError::Closed))) => {
                let how = worker.exit_text(Duration::from_secs(2), "").await;
                Err(format!("the worker died while loading the plugin: {how}"))
            }
            Ok(Err(Err(e))) => Err(format!("the worker broke the protocol while loading: {e}")),
            Err(_) => Err(format!(
                "the worker did not load the plugin within {} ms",
                inner.options.start_timeout.as_millis()
            )),
        }
    }

    /// An idle worker, or a new one while fewer than `max_workers` are alive; otherwise waits
    /// for one to be released (the call's timeout bounds the wait). Starts a spare to replace it
    /// at once only when none is left idle; otherwise the call's end does
    /// ([`Pool::top_up`]), so that a start never competes with the call for the CPU (a crash's
    /// report above all).
    pub(crate) async fn acquire(&self) -> Result<Worker, String> {
        let max = self.inner.options.max_workers.max(1);
        loop {
            let freed = self.inner.freed.notified();
            tokio::pin!(freed);
            // Registered before looking, so a release between the look and the wait is not lost.
            freed.as_mut().enable();
            let idle = self.state().idle.pop();
            if let Some(mut idle) = idle {
                if idle.worker.alive() {
                    if self.state().idle.is_empty() {
                        self.top_up();
                    }
                    return Ok(idle.worker);
                }
                // Died while idle (the OOM killer, a CPU limit): dropped here, replaced below.
                continue;
            }
            if let Some(slot) = self.reserve(max) {
                let started = self.start_worker(slot).await.map(|(worker, _)| worker);
                self.top_up();
                return started;
            }
            freed.await;
        }
    }

    /// Gives back a worker that finished its call cleanly. A retired pool stops it instead.
    pub(crate) fn release(&self, worker: Worker) {
        let mut state = self.state();
        if state.retired {
            drop(state);
            drop(worker);
            return;
        }
        state.idle.push(Idle {
            worker,
            since: Instant::now(),
        });
        drop(state);
        self.inner.freed.notify_one();
    }

    /// No new calls: idle workers stop now, busy ones after their call.
    pub(crate) fn retire(&self) {
        let idle = {
            let mut state = self.state();
            state.retired = true;
            std::mem::take(&mut state.idle)
        };
        drop(idle);
    }

    /// Starts workers in the background until `spares` are idle or starting (within
    /// `max_workers`); nothing when they are.
    pub(crate) fn top_up(&self) {
        let max = self.inner.options.max_workers.max(1);
        let mut slots = Vec::new();
        {
            let mut state = self.state();
            if state.retired {
                return;
            }
            let have = state.idle.len() + state.starting;
            let wanted = self
                .inner
                .options
                .spares
                .saturating_sub(have)
                .min(max.saturating_sub(state.live));
            state.starting += wanted;
            state.live += wanted;
            slots.extend((0..wanted).map(|_| self.slot()));
        }
        for slot in slots {
            let pool = self.clone();
            tokio::spawn(async move {
                let started = pool.start_worker(slot).await;
                let mut state = pool.state();
                state.starting -= 1;
                let unused = match started {
                    Ok((worker, _)) if !state.retired => {
                        state.idle.push(Idle {
                            worker,
                            since: Instant::now(),
                        });
                        None
                    }
                    Ok((worker, _)) => Some(worker),
                    Err(e) => {
                        tracing::warn!(plugin = %pool.inner.label, error = %e, "starting a spare worker");
                        None
                    }
                };
                drop(state);
                // Dropped outside the lock: its slot takes the lock to free itself.
                drop(unused);
                pool.inner.freed.notify_one();
            });
        }
    }

    /// Stops idle workers beyond the spares once they have been idle for `idle_timeout`.
    fn spawn_reaper(&self) {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let period = (self.inner.options.idle_timeout / 2).max(Duration::from_millis(50));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let Some(inner) = weak.upgrade() else { return };
                let pool = Pool { inner };
                let stale = {
                    let mut state = pool.state();
                    if state.retired {
                        return;
                    }
                    let spares = pool.inner.options.spares;
                    let timeout = pool.inner.options.idle_timeout;
                    let mut stale = Vec::new();
                    // Oldest first; keep the newest `spares`.
                    state.idle.sort_by_key(|i| i.since);
                    while state.idle.len() > spares && state.idle[0].since.elapsed() >= timeout {
                        stale.push(state.idle.remove(0));
                    }
                    stale
                };
                drop(stale);
            }
        });
    }
}

fn truncate(line: &str, max: usize) -> String {
    if line.chars().count() <= max {
        return line.to_owned();
    }
    let cut: String = line.chars().take(max).collect();
    format!("{cut}...")
}

/// A worker's load error names its copy; show the plugin's own path instead.
fn strip_path(error: &str, shown: &Path) -> String {
    let prefix = format!("{}: ", shown.display());
    error.strip_prefix(&prefix).unwrap_or(error).to_owned()
}
