//! SIGINT and SIGTERM for the long-running commands (`serve`, `watch`, `node`): handled from the
//! command's first moment, before its configuration, plugins or servers load, so a signal takes
//! the same way out whenever it comes. One during start-up stops the start-up (what was loaded
//! so far is let go: workers stop with their host, private copies are removed) and the command
//! exits 0; one later shuts the command down as it always does (calls in flight end, stating
//! the reason). A second signal exits at once (status 130).
//!
//! SIGINT inherited ignored (a background job of a non-interactive shell inherits it so) is
//! handled all the same: it is one of rho's two stop signals, and `kill -INT` stops a running
//! rho whether it was started in a terminal or by a script. To keep such a job through a
//! terminal's Ctrl-C, start it in a session of its own (`setsid`).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, Ordering};

use tokio::sync::watch;

/// A SIGINT or SIGTERM that came before the runtime's handlers were in place (its number).
static EARLY: AtomicI32 = AtomicI32::new(0);

/// Records an early signal: all a handler may do (an atomic store is async-signal-safe).
extern "C" fn record(signal: libc::c_int) {
    EARLY.store(signal, Ordering::Relaxed);
}

/// What SIGINT and SIGTERM did before [`catch_early`]: given back to a command that does not
/// handle them ([`release_early`]).
pub struct Inherited([libc::sigaction; 2]);

const CAUGHT: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

/// Records SIGINT and SIGTERM from the very first instruction of `main`, until the runtime's
/// handlers take over ([`install`]) or the inherited ones are given back ([`release_early`]).
pub fn catch_early() -> Inherited {
    // SAFETY: sigaction with zeroed structs filled as the man page says; `record` only stores
    // to an atomic.
    unsafe {
        let mut previous: [libc::sigaction; 2] = std::mem::zeroed();
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = record as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        for (signal, previous) in CAUGHT.iter().zip(previous.iter_mut()) {
            libc::sigaction(*signal, &action, previous);
        }
        Inherited(previous)
    }
}

/// Gives SIGINT and SIGTERM back what they did before (a one-shot command), and delivers
/// again one that came meanwhile: it does then what it would have done.
pub fn release_early(inherited: Inherited) {
    // SAFETY: restores the dispositions sigaction gave back; raise sends ourselves a signal.
    unsafe {
        for (signal, previous) in CAUGHT.iter().zip(inherited.0.iter()) {
            libc::sigaction(*signal, previous, std::ptr::null_mut());
        }
        let early = EARLY.swap(0, Ordering::Relaxed);
        if early != 0 {
            libc::raise(early);
        }
    }
}

/// The signal that asked to stop, once one did.
static STOP: OnceLock<watch::Receiver<Option<&'static str>>> = OnceLock::new();

/// Handles SIGINT and SIGTERM from now on (in the tokio runtime this is called in). `Err`: one
/// line, a signal that cannot be handled.
pub fn install() -> Result<(), String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate =
        signal(SignalKind::terminate()).map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
    let mut interrupt =
        signal(SignalKind::interrupt()).map_err(|e| format!("cannot handle SIGINT: {e}"))?;
    let early = match EARLY.swap(0, Ordering::Relaxed) {
        0 => None,
        libc::SIGTERM => Some("SIGTERM"),
        _ => Some("SIGINT"),
    };
    let (told, stop) = watch::channel(None);
    let _ = STOP.set(stop);
    tokio::spawn(async move {
        let first = match early {
            Some(signal) => signal,
            None => tokio::select! {
                _ = terminate.recv() => "SIGTERM",
                _ = interrupt.recv() => "SIGINT",
            },
        };
        let _ = told.send(Some(first));
        let second = tokio::select! {
            _ = terminate.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
        };
        eprintln!("rho: {second} while stopping: exiting at once");
        std::process::exit(130);
    });
    Ok(())
}

/// Resolves with the signal's name once one asked to stop; never, when none is handled (a
/// one-shot command).
pub async fn stopped() -> &'static str {
    let Some(stop) = STOP.get() else {
        return std::future::pending().await;
    };
    let mut stop = stop.clone();
    loop {
        if let Some(signal) = *stop.borrow_and_update() {
            return signal;
        }
        if stop.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}
