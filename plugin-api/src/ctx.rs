//! [`Ctx`]: what a tool knows about the call it serves.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use abi_stable::std_types::RStr;

use crate::ffi::FfiCtx;

/// The context of one call, handed to a tool function by reference for the duration of the call.
///
/// Through it a tool reads its call id, polls whether the host has given up on the call
/// ([`Ctx::is_cancelled`]), and sends partial updates ([`Ctx::update`]). For unit tests,
/// [`Ctx::detached`] builds one without a host.
pub struct Ctx {
    inner: Inner,
}

enum Inner {
    /// A context from a host; valid only while the call runs (tools only ever see `&Ctx`).
    Host(FfiCtx<'static>),
    /// A context without a host, for tests.
    Detached {
        call_id: String,
        cancelled: AtomicBool,
        updates: Mutex<Vec<String>>,
    },
}

impl Ctx {
    /// Wraps a host's context for the duration of `f`. Not for plugin authors.
    #[doc(hidden)]
    pub fn with_host<R>(ffi: FfiCtx<'_>, f: impl FnOnce(&Ctx) -> R) -> R {
        // SAFETY: the 'static is never observable: `f` only gets `&Ctx`, whose lifetime ends before
        // this function returns, and `Ctx` hands out nothing that outlives `&self`.
        let ffi: FfiCtx<'static> =
            unsafe { std::mem::transmute::<FfiCtx<'_>, FfiCtx<'static>>(ffi) };
        let ctx = Ctx {
            inner: Inner::Host(ffi),
        };
        f(&ctx)
    }

    /// A context without a host, for calling tool functions directly in tests. It records the
    /// updates sent through it ([`Ctx::sent_updates`]) and can be cancelled ([`Ctx::cancel`]).
    pub fn detached(call_id: impl Into<String>) -> Self {
        Ctx {
            inner: Inner::Detached {
                call_id: call_id.into(),
                cancelled: AtomicBool::new(false),
                updates: Mutex::new(Vec::new()),
            },
        }
    }

    /// The call's id, as the model gave it.
    pub fn call_id(&self) -> &str {
        match &self.inner {
            Inner::Host(ffi) => ffi.call_id.as_str(),
            Inner::Detached { call_id, .. } => call_id,
        }
    }

    /// Whether the host has given up on this call (its timeout expired or it was cancelled).
    /// A long-running tool should poll this and return early; one that does not keeps its thread
    /// busy after the host has moved on.
    pub fn is_cancelled(&self) -> bool {
        match &self.inner {
            Inner::Host(ffi) => ffi.is_cancelled(),
            Inner::Detached { cancelled, .. } => cancelled.load(Ordering::Relaxed),
        }
    }

    /// Sends a partial update (text) to the host while the tool runs. Screens show it as
    /// `tool_execution_update`; it is not part of the answer.
    pub fn update(&self, partial: impl AsRef<str>) {
        match &self.inner {
            Inner::Host(ffi) => (ffi.send_update)(ffi.sink, RStr::from_str(partial.as_ref())),
            Inner::Detached { updates, .. } => {
                if let Ok(mut updates) = updates.lock() {
                    updates.push(partial.as_ref().to_owned());
                }
            }
        }
    }

    /// Marks a detached context cancelled (no effect on a host's context).
    pub fn cancel(&self) {
        if let Inner::Detached { cancelled, .. } = &self.inner {
            cancelled.store(true, Ordering::Relaxed);
        }
    }

    /// The updates sent through a detached context so far (empty for a host's context).
    pub fn sent_updates(&self) -> Vec<String> {
        match &self.inner {
            Inner::Detached { updates, .. } => {
                updates.lock().map(|u| u.clone()).unwrap_or_default()
            }
            Inner::Host(_) => Vec::new(),
        }
    }
}
