//! What a running tool sends beside its answer (partial updates, log lines), on their way to
//! the call's hook and the bus: each bounded, none once the call has ended.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rho_plugin_api::LogLevel;

use crate::bus::Bus;
use crate::bus::event_type::EventType;
use crate::bus::events::EventKind;
use crate::call::gate::ToolCall;
use crate::call::options::{LogHook, UpdateHook};

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

/// When a call last showed it is alive (a partial update, an answered question), for its idle
/// limit: touched from the tool's thread, read by the loop when the idle timer fires.
pub(crate) struct Activity {
    origin: Instant,
    /// Milliseconds from `origin`.
    last_ms: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Self {
        Activity {
            origin: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    pub(crate) fn touch(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    pub(crate) fn last(&self) -> Instant {
        self.origin + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// Where a runner's call sends what its tool sends beside its answer (partial updates, log
/// lines): the call's hooks and the bus, each bounded, none once the call has ended. Lives in
/// the call's context ([`ToolCtx`](crate::ToolCtx)): one allocation for all of it.
pub(crate) struct CallSink {
    /// Set once the call has ended: a runaway plugin thread that goes on sending updates or log
    /// lines must not put events after the call's `tool_execution_end`. Held across the check,
    /// the hook and the publish, and taken to set it: nothing is under way when the end goes
    /// out.
    pub(crate) ended: Mutex<bool>,
    pub(crate) bus: Bus,
    pub(crate) session: Option<String>,
    pub(crate) call: Arc<ToolCall>,
    pub(crate) on_update: Option<UpdateHook>,
    pub(crate) on_log: Option<LogHook>,
    /// Touched by each update, for the call's idle limit (if it has one).
    pub(crate) activity: Option<Arc<Activity>>,
}

impl CallSink {
    /// A partial update: the call's update hook and `tool_execution_update`.
    pub(crate) fn update(&self, partial: &str) {
        if let Some(activity) = &self.activity {
            activity.touch();
        }
        let hook = self.on_update.as_deref().map(|h| h as &dyn Fn(&str));
        self.send(
            EventType::ToolExecutionUpdate,
            "update",
            partial,
            hook,
            |c, partial| EventKind::ToolExecutionUpdate {
                call_id: c.id.clone(),
                tool: c.name.clone(),
                partial,
            },
        );
    }

    /// A log line at `level`: the call's log hook and `tool_execution_log`.
    pub(crate) fn log(&self, level: LogLevel, message: &str) {
        let forward = |line: &str| {
            if let Some(hook) = &self.on_log {
                hook(level, line);
            }
        };
        let hook = self.on_log.is_some().then_some(&forward as &dyn Fn(&str));
        self.send(
            EventType::ToolExecutionLog,
            "log line",
            message,
            hook,
            |c, message| EventKind::ToolExecutionLog {
                call_id: c.id.clone(),
                tool: c.name.clone(),
                level,
                message,
            },
        );
    }

    /// The call has ended: nothing is sent from now on (waits for a send under way).
    pub(crate) fn end(&self) {
        *self.ended.lock().unwrap_or_else(PoisonError::into_inner) = true;
    }

    /// `text` (a `what`), cut at [`MAX_UPDATE_BYTES`], to `hook` and, when someone subscribes to
    /// `kind`, as the event `event` makes of it; nothing once the call has ended. The hook is the
    /// host's, not the tool's: its panic is logged, never the tool's crash.
    fn send(
        &self,
        kind: EventType,
        what: &str,
        text: &str,
        hook: Option<&dyn Fn(&str)>,
        event: impl FnOnce(&ToolCall, String) -> EventKind,
    ) {
        let ended = self.ended.lock().unwrap_or_else(PoisonError::into_inner);
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
