//! MCP's log levels in rho's words and back, and a server's log messages
//! (`notifications/message`) as rho's log lines. MCP deprecates logging after the 2025 revisions
//! (SEP-2577; rmcp marks it deprecated): rho's client and server read it here only.
#![allow(deprecated)]

use rho_runtime::LogLevel;
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use serde_json::Value;

/// rho's level of MCP's (the same eight).
///
/// ```
/// use rho_mcp::convert::logs::{from_mcp, to_mcp};
/// use rho_runtime::LogLevel;
/// assert_eq!(from_mcp(to_mcp(LogLevel::Notice)), LogLevel::Notice);
/// ```
pub fn from_mcp(level: LoggingLevel) -> LogLevel {
    match level {
        LoggingLevel::Debug => LogLevel::Debug,
        LoggingLevel::Info => LogLevel::Info,
        LoggingLevel::Notice => LogLevel::Notice,
        LoggingLevel::Warning => LogLevel::Warning,
        LoggingLevel::Error => LogLevel::Error,
        LoggingLevel::Critical => LogLevel::Critical,
        LoggingLevel::Alert => LogLevel::Alert,
        LoggingLevel::Emergency => LogLevel::Emergency,
    }
}

/// MCP's level of rho's.
pub fn to_mcp(level: LogLevel) -> LoggingLevel {
    match level {
        LogLevel::Debug => LoggingLevel::Debug,
        LogLevel::Info => LoggingLevel::Info,
        LogLevel::Notice => LoggingLevel::Notice,
        LogLevel::Warning => LoggingLevel::Warning,
        LogLevel::Error => LoggingLevel::Error,
        LogLevel::Critical => LoggingLevel::Critical,
        LogLevel::Alert => LoggingLevel::Alert,
        LogLevel::Emergency => LoggingLevel::Emergency,
    }
}

/// The level and text of a log message's params (its data as text: a string as it is, else
/// its JSON); `None` when they are not a log message's.
pub(crate) fn line(params: Value) -> Option<(LogLevel, String)> {
    serde_json::from_value(params).ok().map(line_of)
}

/// The level and text of a log message (its data as text: a string as it is, else its JSON).
pub(crate) fn line_of(params: LoggingMessageNotificationParam) -> (LogLevel, String) {
    let text = match params.data {
        Value::String(s) => s,
        other => other.to_string(),
    };
    (from_mcp(params.level), text)
}
