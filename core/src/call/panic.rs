//! Catching panics of the host's own code that runs in a call's task (the gate, a native tool),
//! formatted there with their location.
//!
//! A process-wide panic hook is installed once; it records the location of panics raised while a
//! [`Catch`] future is being polled on the current thread, and stays silent for them (they become
//! the call's `crashed` text and a `tracing` debug line). Every other panic goes to the previous
//! hook as before.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Once;
use std::task::{Context, Poll};

thread_local! {
    static CAPTURE: Cell<bool> = const { Cell::new(false) };
    static LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn install_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if CAPTURE.with(Cell::get) {
                let location = info.location().map(|l| l.to_string());
                tracing::debug!(location = ?location, "panic in a tool call's task");
                LOCATION.with(|l| *l.borrow_mut() = location);
            } else {
                previous(info);
            }
        }));
    });
}

/// A panic caught in a call's task: its message (if the payload was a string) and location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Caught {
    /// `None` for a non-string payload (which was leaked, never dropped or formatted).
    pub message: Option<String>,
    /// `file:line:column`, where known.
    pub location: Option<String>,
}

impl Caught {
    /// `"{what} panicked at {location}: {message}"`.
    pub fn describe(&self, what: &str) -> String {
        let at = self
            .location
            .as_deref()
            .map(|l| format!(" at {l}"))
            .unwrap_or_default();
        match &self.message {
            Some(message) => format!("{what} panicked{at}: {message}"),
            None => format!("{what} panicked{at} with a non-string payload"),
        }
    }
}

/// Reads a payload that is a `&str` or `String`; any other payload is leaked: its `Drop` is
/// foreign code that could panic again.
pub(crate) fn payload_message(payload: Box<dyn Any + Send>) -> Option<String> {
    if let Some(s) = payload.downcast_ref::<&str>() {
        return Some((*s).to_owned());
    }
    match payload.downcast::<String>() {
        Ok(s) => Some(*s),
        Err(other) => {
            std::mem::forget(other);
            None
        }
    }
}

/// A future that turns a panic of `inner` into `Err(Caught)`.
pub(crate) struct Catch<F> {
    inner: Pin<Box<F>>,
}

/// Wraps `future` so that a panic while polling it ends it with `Err(Caught)`.
pub(crate) fn catch<F: Future>(future: F) -> Catch<F> {
    install_hook();
    Catch {
        inner: Box::pin(future),
    }
}

impl<F: Future> Future for Catch<F> {
    type Output = Result<F::Output, Caught>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let outer = CAPTURE.with(|c| c.replace(true));
        let polled = catch_unwind(AssertUnwindSafe(|| self.inner.as_mut().poll(cx)));
        CAPTURE.with(|c| c.set(outer));
        match polled {
            Ok(Poll::Ready(value)) => Poll::Ready(Ok(value)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => {
                let location = LOCATION.with(|l| l.borrow_mut().take());
                Poll::Ready(Err(Caught {
                    message: payload_message(payload),
                    location,
                }))
            }
        }
    }
}
