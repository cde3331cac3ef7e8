//! A pool of workers for one plugin version: each worker runs one call at a time, warm spares are
//! started ahead, dead workers are replaced, idle ones beyond the spares are reclaimed, and a
//! retired pool lets its busy workers finish their call and then stops them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use crate::error::LoadError;
use crate::isolate::WorkerOptions;
use crate::isolate::protocol::{Frame, FrameError, FromWorker, ToWorker, encode, read_frame_async};
use crate::isolate::spawn::{Process, kill_group, start};
use crate::plugin::load::PluginInfo;
use crate::spec::ToolSpec;

/// One worker process. Dropping it kills its process group.
pub(crate) struct Worker {
    process: Process,
    next_id: u64,
}

impl Worker {
    /// The worker's pid (its process group id).
    pub fn pid(&self) -> i32 {
        self.process.pid
    }

    /// A new call number.
    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Sends one message with its blob (a call's arguments): calls on the channel, cancellations
    /// on the cancel channel.
    pub async fn send(&mut self, message: &ToWorker, blob: &[u8]) -> std::io::Result<()> {
        let frame = encode(message, &[blob]);
        match message {
            ToWorker::Cancel { .. } => self.process.cancel.write_all(&frame).await,
            ToWorker::Call { .. } => self.process.stream.write_all(&frame).await,
        }
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
            ..
        } = &mut self.process;
        let (status, words) = tokio::join!(
            tokio::time::timeout(wait, child.wait()),
            crate::isolate::spawn::last_words(
                last_stderr,
                stderr_reader,
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
            Some(line) => format!("{how} (its last words on stderr: {})", truncate(&line, 200)),
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
}

struct Idle {
    worker: Worker,
    since: Instant,
}

struct State {
    idle: Vec<Idle>,
    starting: usize,
    retired: bool,
}

struct Inner {
    options: Arc<WorkerOptions>,
    copy: PathBuf,
    shown: PathBuf,
    label: String,
    state: Mutex<State>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Idle workers die with their `Worker`; the copy they loaded is no longer needed.
        let _ = std::fs::remove_file(&self.copy);
    }
}

/// The workers of one plugin version. Cheap to clone.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

impl Pool {
    /// Starts the first worker on the private copy `copy` of `info.path` and reads what it
    /// loaded; keeps it as the first idle worker and starts the spares.
    pub(crate) async fn open(
        options: Arc<WorkerOptions>,
        copy: PathBuf,
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
                copy,
                shown: info.path.clone(),
                label,
                state: Mutex::new(State {
                    idle: Vec::new(),
                    starting: 0,
                    retired: false,
                }),
            }),
        };
        let (worker, ready) = pool
            .start_worker()
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

    /// Workers idle now.
    pub fn idle(&self) -> usize {
        self.state().idle.len()
    }

    /// The pids of the idle workers.
    pub fn idle_pids(&self) -> Vec<i32> {
        self.state().idle.iter().map(|i| i.worker.pid()).collect()
    }

    async fn start_worker(&self) -> Result<(Worker, Ready), String> {
        let inner = &self.inner;
        let process = start(&inner.options, &inner.copy, &inner.shown, &inner.label)
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
        };
        let first = tokio::time::timeout(
            inner.options.start_timeout,
            worker.read(inner.options.max_frame),
        )
        .await;
        match first {
            Ok(Ok(Frame {
                message:
                    FromWorker::Ready {
                        name,
                        version,
                        interface_version,
                        tools,
                        rejected,
                    },
                ..
            })) => Ok((
                worker,
                Ready {
                    name,
                    version,
                    interface_version,
                    tools,
                    rejected,
                },
            )),
            Ok(Ok(Frame {
                message: FromWorker::LoadFailed { error },
                ..
            })) => Err(strip_path(&error, &inner.shown)),
            Ok(Ok(_)) => Err("the worker sent something else than Ready".into()),
            Ok(Err(FrameError::Closed)) => {
                let how = worker.exit_text(Duration::from_secs(2), "").await;
                Err(format!("the worker died while loading the plugin: {how}"))
            }
            Ok(Err(e)) => Err(format!("the worker broke the protocol while loading: {e}")),
            Err(_) => Err(format!(
                "the worker did not load the plugin within {} ms",
                inner.options.start_timeout.as_millis()
            )),
        }
    }

    /// An idle worker, or a new one. Starts a spare to replace it.
    pub(crate) async fn acquire(&self) -> Result<Worker, String> {
        loop {
            let idle = self.state().idle.pop();
            match idle {
                Some(mut idle) => {
                    if idle.worker.alive() {
                        self.top_up();
                        return Ok(idle.worker);
                    }
                    // Died while idle (the OOM killer, a CPU limit): replace it.
                }
                None => break,
            }
        }
        let started = self.start_worker().await.map(|(worker, _)| worker);
        self.top_up();
        started
    }

    /// Gives back a worker that finished its call cleanly. A retired pool stops it instead.
    pub(crate) fn release(&self, worker: Worker) {
        let mut state = self.state();
        if !state.retired {
            state.idle.push(Idle {
                worker,
                since: Instant::now(),
            });
        }
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

    /// Starts workers in the background until `spares` are idle or starting.
    fn top_up(&self) {
        let wanted = {
            let mut state = self.state();
            if state.retired {
                return;
            }
            let have = state.idle.len() + state.starting;
            let wanted = self.inner.options.spares.saturating_sub(have);
            state.starting += wanted;
            wanted
        };
        for _ in 0..wanted {
            let pool = self.clone();
            tokio::spawn(async move {
                let started = pool.start_worker().await;
                let mut state = pool.state();
                state.starting -= 1;
                match started {
                    Ok((worker, _)) if !state.retired => state.idle.push(Idle {
                        worker,
                        since: Instant::now(),
                    }),
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(plugin = %pool.inner.label, error = %e, "starting a spare worker")
                    }
                }
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
