//! The engine's epoch ([`Ticker`]): what stops a call at its deadline or when it is given up, and
//! what makes a running call let its thread go for a moment.
//!
//! While calls run, a thread of the engine's own advances the epoch every [`TICK`]: a call's
//! instance checks its deadline and cancellation at each tick and yields there (so a call that
//! computes for long leaves the async thread it started on after at most one tick). Once no call
//! has run for [`QUIET_TICKS`] ticks, the thread sleeps, ticking every [`IDLE_TICK`] (what bounds
//! a component describing itself at load), until a call wakes it: an idle engine costs no CPU.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::Thread;
use std::time::Duration;

use wasmtime::Engine;

/// How often the epoch ticks while calls run: the granularity of deadlines and cancellation.
pub(crate) const TICK: Duration = Duration::from_millis(1);

/// How often it ticks once idle.
const IDLE_TICK: Duration = Duration::from_secs(1);

/// Ticks without a call after which it goes idle (one second).
const QUIET_TICKS: u32 = 1000;

/// The engine's epoch thread and the calls it ticks for. Ends with the engine.
pub(crate) struct Ticker {
    /// Calls running.
    running: AtomicUsize,
    /// Whether the thread sleeps until a call starts.
    idle: AtomicBool,
    thread: Thread,
}

impl Ticker {
    /// Starts ticking for `engine`, on a thread that ends once the engine is dropped.
    pub(crate) fn start(engine: &Engine) -> std::io::Result<Arc<Ticker>> {
        let weak = engine.weak();
        let (told, started) = std::sync::mpsc::channel::<Arc<Ticker>>();
        let thread = std::thread::Builder::new()
            .name("rho-wasm-epoch".into())
            .spawn(move || {
                let Ok(ticker) = started.recv() else {
                    return;
                };
                let mut quiet = 0;
                while let Some(engine) = weak.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    if ticker.running.load(Ordering::SeqCst) > 0 {
                        quiet = 0;
                    } else {
                        quiet += 1;
                    }
                    if quiet < QUIET_TICKS {
                        std::thread::sleep(TICK);
                        continue;
                    }
                    // A call that starts from here on sees `idle` and wakes the thread.
                    ticker.idle.store(true, Ordering::SeqCst);
                    if ticker.running.load(Ordering::SeqCst) == 0 {
                        std::thread::park_timeout(IDLE_TICK);
                    }
                    ticker.idle.store(false, Ordering::SeqCst);
                    if ticker.running.load(Ordering::SeqCst) > 0 {
                        // Woken by a call: its first tick comes a whole tick from now (a tick
                        // at once would move a short call to a blocking thread).
                        quiet = 0;
                        std::thread::sleep(TICK);
                    }
                }
            })?;
        let ticker = Arc::new(Ticker {
            running: AtomicUsize::new(0),
            idle: AtomicBool::new(false),
            thread: thread.thread().clone(),
        });
        // The thread waits for this; it cannot be gone yet.
        let _ = told.send(ticker.clone());
        Ok(ticker)
    }

    /// Counts a call as running until the guard is dropped, waking the thread if it sleeps.
    pub(crate) fn running(self: &Arc<Self>) -> Running {
        self.running.fetch_add(1, Ordering::SeqCst);
        if self.idle.load(Ordering::SeqCst) {
            self.thread.unpark();
        }
        Running(self.clone())
    }
}

/// A running call, counted by its [`Ticker`] until dropped.
pub(crate) struct Running(Arc<Ticker>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}
