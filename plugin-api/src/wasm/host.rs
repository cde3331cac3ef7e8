//! The host's functions as a component imports them (`rho:plugin/host`), in the words of
//! [`Ctx`](crate::Ctx): updates, log lines, cancellation, questions.

use super::bindings::rho::plugin::host;
use crate::{LogLevel, Question, Reply};

/// Sends a partial update through the host.
pub(crate) fn update(partial: &str) {
    host::update(partial);
}

/// Writes a log line through the host.
pub(crate) fn log(level: LogLevel, line: &str) {
    let level = match level {
        LogLevel::Debug => host::LogLevel::Debug,
        LogLevel::Info => host::LogLevel::Info,
        LogLevel::Notice => host::LogLevel::Notice,
        LogLevel::Warning => host::LogLevel::Warning,
        LogLevel::Error => host::LogLevel::Error,
        LogLevel::Critical => host::LogLevel::Critical,
        LogLevel::Alert => host::LogLevel::Alert,
        LogLevel::Emergency => host::LogLevel::Emergency,
    };
    host::log(level, line);
}

/// Whether the host gave up on the running call.
pub(crate) fn is_cancelled() -> bool {
    host::is_cancelled()
}

/// Asks the host's user; the reply and the call's time left once it came.
pub(crate) fn ask(question: &Question) -> (Reply, Option<u64>) {
    let reply = host::ask(&question.message, &question.schema.to_string());
    let answer = match reply.kind {
        host::ReplyKind::Accepted => match serde_json::from_str(&reply.text) {
            Ok(value) => Reply::Accepted(value),
            Err(e) => Reply::Cancelled(format!("the host's answer is not JSON: {e}")),
        },
        host::ReplyKind::Declined => Reply::Declined(reply.text),
        host::ReplyKind::Cancelled => Reply::Cancelled(reply.text),
    };
    (answer, reply.time_left_ms)
}
