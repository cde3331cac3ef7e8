//! MCP logging for a session: the least level its client asked for (`logging/setLevel`) and the
//! `notifications/message` that carry its calls' log lines.
//!
//! MCP deprecates logging after the 2025 revisions (SEP-2577; rmcp marks its types deprecated),
//! but the 2025-era clients rho serves read it: this module is where rho uses it, so its removal
//! touches one file.
#![allow(deprecated)]

use std::sync::{Mutex, PoisonError};

use crate::convert::logs::{from_mcp, to_mcp};
use rho_runtime::LogLevel;
use rmcp::model::{LoggingMessageNotificationParam, RequestMetaObject};
use rmcp::{Peer, RoleServer};

/// The least level of log lines a session is sent: none until its client sets one
/// (`logging/setLevel`). Each session has its own: a clone (what the HTTP service makes for a
/// new session) starts without one.
#[derive(Default)]
pub struct SessionLevel(Mutex<Option<LogLevel>>);

impl Clone for SessionLevel {
    fn clone(&self) -> Self {
        SessionLevel::default()
    }
}

impl SessionLevel {
    /// The level the client set, if it set one.
    pub fn get(&self) -> Option<LogLevel> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets it.
    pub fn set(&self, level: LogLevel) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(level);
    }
}

/// The level a request asks for its own log lines (`_meta`, 2026-07-28), if it asks.
pub fn requested(meta: &RequestMetaObject) -> Option<LogLevel> {
    meta.log_level().map(from_mcp)
}

/// Sends `line` of tool `tool` at `level` to the client of `peer` (the tool's name as `logger`).
pub async fn notify(peer: &Peer<RoleServer>, tool: &str, level: LogLevel, line: String) {
    let note = LoggingMessageNotificationParam::new(to_mcp(level), line.into())
        .with_logger(tool.to_owned());
    let _ = peer.notify_logging_message(note).await;
}
