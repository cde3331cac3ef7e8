//! The threads in-process plugin calls run on.
//!
//! Plugin calls are synchronous FFI, so they run off the async workers. They do not use tokio's
//! blocking pool: a plugin that ignores cancellation keeps its thread forever, and tokio waits for
//! its blocking threads when a runtime shuts down, so one runaway call would hang the host's exit.
//! These threads are detached instead: idle ones are reused, a new one starts when all are busy,
//! and one idle for [`IDLE_EXIT`] ends.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
use std::time::Duration;

/// How long an idle thread waits for work before it ends.
pub const IDLE_EXIT: Duration = Duration::from_secs(10);

type Job = Box<dyn FnOnce() + Send>;

struct Pool {
    state: Mutex<State>,
    work: Condvar,
}

struct State {
    queue: VecDeque<Job>,
    idle: usize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        state: Mutex::new(State {
            queue: VecDeque::new(),
            idle: 0,
        }),
        work: Condvar::new(),
    })
}

/// Runs `job` on a pool thread. Returns an error only if no thread could be started.
pub fn spawn(job: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    let pool = pool();
    let mut state = pool.state.lock().unwrap_or_else(PoisonError::into_inner);
    if state.idle > state.queue.len() {
        state.queue.push_back(Box::new(job));
        drop(state);
        pool.work.notify_one();
        return Ok(());
    }
    drop(state);
    std::thread::Builder::new()
        .name("rho-plugin".into())
        .spawn(move || {
            job();
            worker(pool);
        })
        .map(drop)
}

fn worker(pool: &'static Pool) {
    let mut state = pool.state.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        if let Some(job) = state.queue.pop_front() {
            drop(state);
            job();
            state = pool.state.lock().unwrap_or_else(PoisonError::into_inner);
            continue;
        }
        state.idle += 1;
        let (next, timeout) = pool
            .work
            .wait_timeout(state, IDLE_EXIT)
            .unwrap_or_else(PoisonError::into_inner);
        state = next;
        state.idle -= 1;
        if timeout.timed_out() && state.queue.is_empty() {
            return;
        }
    }
}
