//! What a running tool sends beside its answer (partial updates, log lines), on their way to
//! the call's hook and the bus: each bounded, none once the call has ended.

use std::sync::Arc;

use crate::bus::Bus;
use crate::bus::event_type::EventType;
use crate::bus::events::EventKind;
use crate::call::gate::ToolCall;

/// The longest partial update published, bytes: a plugin cannot make the host write (journal,
/// subscribers, clients) without bound by sending huge updates.
pub const MAX_UPDATE_BYTES: usize = 64 << 10;

/// `text` (an update or a log line: `what`), cut at [`MAX_UPDATE_BYTES`] with a note.
fn bounded(text: &str, what: &str) -> String {
    if text.len() <= MAX_UPDATE_BYTES {
        return text.to_owned();
    }
    let at = (0..=MAX_UPDATE_BYTES)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    format!(
        "{}... [rho: {what} cut from {} bytes]",
        &text[..at],
        text.len()
    )
}

/// Marks a call ended when dropped (see [`Sender`]).
pub(crate) struct EndsOnDrop(pub(crate) Arc<std::sync::Mutex<bool>>);

impl Drop for EndsOnDrop {
    fn drop(&mut self) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
    }
}

/// What a running tool sends beside its answer (partial updates, log lines), on their way to the
/// call's hook and the bus: bounded, and dropped once the call has ended.
#[derive(Clone)]
pub(crate) struct Sender {
    pub(crate) ended: Arc<std::sync::Mutex<bool>>,
    pub(crate) bus: Bus,
    pub(crate) session: Option<String>,
    pub(crate) call: Arc<ToolCall>,
}

impl Sender {
    /// `text` (a `what`), cut at [`MAX_UPDATE_BYTES`], to `hook` and, when someone subscribes to
    /// `kind`, as the event `event` makes of it; nothing once the call has ended. The hook is the
    /// host's, not the tool's: its panic is logged, never the tool's crash.
    pub(crate) fn send(
        &self,
        kind: EventType,
        what: &str,
        text: &str,
        hook: Option<&dyn Fn(&str)>,
        event: impl FnOnce(&ToolCall, String) -> EventKind,
    ) {
        let ended = self
            .ended
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let wanted = self.bus.wants(kind);
        if *ended || !wanted && hook.is_none() {
            return;
        }
        let text = bounded(text, what);
        if let Some(hook) = hook {
            let called = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(&text)));
            if called.is_err() {
                tracing::error!(call = %self.call.id, "the call's {what} hook panicked");
            }
        }
        if wanted {
            self.bus
                .publish(self.session.as_deref(), event(&self.call, text));
        }
    }
}
