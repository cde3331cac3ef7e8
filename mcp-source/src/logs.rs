//! A server's log messages (`notifications/message`) as rho's log lines. MCP deprecates logging
//! after the 2025 revisions (SEP-2577; rmcp marks it deprecated): this is the one place that reads
//! it.
#![allow(deprecated)]

use rho_runtime::LogLevel;
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use serde_json::Value;

/// The level and text of a log message (its data as text: a string as it is, else its JSON).
pub(crate) fn line(params: &LoggingMessageNotificationParam) -> (LogLevel, String) {
    let level = match params.level {
        LoggingLevel::Debug => LogLevel::Debug,
        LoggingLevel::Info => LogLevel::Info,
        LoggingLevel::Notice => LogLevel::Notice,
        LoggingLevel::Warning => LogLevel::Warning,
        LoggingLevel::Error => LogLevel::Error,
        LoggingLevel::Critical => LogLevel::Critical,
        LoggingLevel::Alert => LogLevel::Alert,
        LoggingLevel::Emergency => LogLevel::Emergency,
    };
    let text = match &params.data {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    (level, text)
}
