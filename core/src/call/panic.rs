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

/// A future that makes its inner future and polls it, turning a panic of either into
/// `Err(Caught)`. No allocation of its own: the futures it runs (a gate's check, a tool's call)
/// come boxed already.
pub(crate) struct Catch<M, F> {
    /// Makes the inner future at the first poll, inside the catch.
    make: Option<M>,
    inner: Option<F>,
}

/// Wraps the future `make` makes so that a panic while making or polling it ends it with
/// `Err(Caught)`.
pub(crate) fn catch<M, F>(make: M) -> Catch<M, F>
where
    M: FnOnce() -> F + Unpin,
    F: Future + Unpin,
{
    install_hook();
    Catch {
        make: Some(make),
        inner: None,
    }
}

impl<M, F> Future for Catch<M, F>
where
    M: FnOnce() -> F + Unpin,
    F: Future + Unpin,
{
    type Output = Result<F::Output, Caught>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let outer = CAPTURE.with(|c| c.replace(true));
        let polled = catch_unwind(AssertUnwindSafe(|| {
            let inner = match (&mut this.inner, this.make.take()) {
                (Some(inner), _) => inner,
                (inner @ None, Some(make)) => inner.insert(make()),
                // Polled again after its maker panicked: never ready.
                (None, None) => return Poll::Pending,
            };
            Pin::new(inner).poll(cx)
        }));
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
