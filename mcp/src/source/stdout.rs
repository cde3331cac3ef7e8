//! The server's stdout as the MCP client reads it, each line checked on its way.
//!
//! - A line that is not a JSON-RPC message (its first byte past white space is not `{` or `[`)
//!   is a protocol failure: the connection ends there, so the supervisor restarts the server and
//!   its calls in flight end `crashed`, the reason naming the line.
//! - A line over [`MAX_LINE`] (rmcp's own bound) is not passed on: the request it answers (the
//!   message's top-level `id`, found by a scan of the whole line that keeps nothing of it, before
//!   or after the result: SDKs write it either side) gets an error response instead, saying how
//!   large the answer was, so that call ends `error` and the server keeps serving. A line whose
//!   id cannot be read is a protocol failure.
//! - A progress or log notification is handed to its call here, before the next line goes on:
//!   rmcp handles notifications in tasks of their own, so through it the last progress or log
//!   line of a call could come after the call's answer (and be lost).

use std::sync::{Arc, Mutex, PoisonError};

use rho_runtime::LogLevel;
use rmcp::model::ProgressNotificationParam;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};

/// The longest line passed on: 16 MiB, rmcp's bound on one message.
pub(crate) const MAX_LINE: usize = 16 << 20;

/// A notification of the server's that is handed on as it is read.
pub(crate) enum Notice {
    /// `notifications/progress`.
    Progress(ProgressNotificationParam),
    /// `notifications/message`: a log line, its level and text.
    Log(LogLevel, String),
}

/// Pumps `stdout` into the returned stream line by line, checked; the reason the connection
/// ended goes to `ended` when a line breaks the protocol.
pub(crate) fn checked(
    stdout: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    ended: Arc<Mutex<Option<String>>>,
    on_notice: impl Fn(Notice) + Send + 'static,
) -> DuplexStream {
    let (mut to_client, client_end) = tokio::io::duplex(64 << 10);
    tokio::spawn(async move {
        let mut reader = BufReader::with_capacity(64 << 10, stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            let mut total = 0usize;
            let mut over = false;
            let mut id = IdScanner::default();
            // One line, keeping at most MAX_LINE bytes (then only its head).
            let done = loop {
                let buf = match reader.fill_buf().await {
                    Ok(buf) => buf,
                    Err(_) => break true,
                };
                if buf.is_empty() {
                    break true;
                }
                let (take, newline) = match buf.iter().position(|&b| b == b'\n') {
                    Some(at) => (at + 1, true),
                    None => (buf.len(), false),
                };
                total = total.saturating_add(take);
                if !over && total > MAX_LINE {
                    over = true;
                    id.feed(&line);
                    line.clear();
                }
                if over {
                    id.feed(&buf[..take]);
                } else {
                    line.extend_from_slice(&buf[..take]);
                }
                reader.consume(take);
                if newline {
                    break false;
                }
            };
            if over {
                let Some(id) = id.found() else {
                    *ended.lock().unwrap_or_else(PoisonError::into_inner) = Some(format!(
                        "wrote a message of {total} bytes, over the {MAX_LINE} an MCP message may \
                         have, whose id could not be read"
                    ));
                    return;
                };
                if to_client
                    .write_all(too_large(&id, total).as_bytes())
                    .await
                    .is_err()
                {
                    return;
                }
                continue;
            }
            let first = line.iter().find(|b| !b.is_ascii_whitespace()).copied();
            match first {
                None => {}
                Some(b'{' | b'[') => {
                    if let Some(notice) = notice_of(&line) {
                        on_notice(notice);
                    }
                    if !line.ends_with(b"\n") {
                        line.push(b'\n');
                    }
                    if to_client.write_all(&line).await.is_err() {
                        return;
                    }
                }
                Some(_) => {
                    let shown: String = String::from_utf8_lossy(&line)
                        .trim()
                        .chars()
                        .take(120)
                        .collect();
                    *ended.lock().unwrap_or_else(PoisonError::into_inner) =
                        Some(format!("wrote what is not MCP on its stdout ({shown:?})"));
                    return;
                }
            }
            if done {
                return;
            }
        }
    });
    client_end
}

/// The progress or log notification a line is, if it is one (looked for in its first bytes,
/// parsed only then: such notifications are small).
fn notice_of(line: &[u8]) -> Option<Notice> {
    const PROGRESS: &[u8] = b"\"notifications/progress\"";
    const LOG: &[u8] = b"\"notifications/message\"";
    let head = &line[..line.len().min(512)];
    let has = |method: &[u8]| head.windows(method.len()).any(|w| w == method);
    if line.len() > 64 << 10 || !(has(PROGRESS) || has(LOG)) {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Notification {
        method: String,
        params: serde_json::Value,
    }
    let notification: Notification = serde_json::from_slice(line).ok()?;
    let params = notification.params;
    match notification.method.as_str() {
        "notifications/progress" => serde_json::from_value(params).ok().map(Notice::Progress),
        "notifications/message" => {
            crate::convert::logs::line(params).map(|(level, text)| Notice::Log(level, text))
        }
        _ => None,
    }
}

/// The error response to request `id` (its JSON) whose answer was `total` bytes.
fn too_large(id: &str, total: usize) -> String {
    let message = format!(
        "the server's answer is {total} bytes; an MCP message may be at most {MAX_LINE} bytes"
    );
    let error = serde_json::json!({"code": -32603, "message": message});
    format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{error}}}\n")
}

/// Finds the top-level `"id"` of a JSON message fed in pieces, keeping only the id: strings,
/// escapes and nesting are followed, so an `"id"` inside the result is not taken for it.
#[derive(Default)]
struct IdScanner {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// At depth 1, the next string is a key.
    expect_key: bool,
    /// The key being read at depth 1 (`None`: not a key, or longer than `id`).
    key: Option<Vec<u8>>,
    /// The last key at depth 1 was `id`: its value comes after the `:`.
    id_key: bool,
    /// The id's JSON as read so far, while it is read.
    value: Option<Vec<u8>>,
    /// The id's JSON, once read whole; `Err` once the scan cannot tell.
    found: Option<Result<String, ()>>,
}

/// The longest id kept.
const MAX_ID: usize = 256;

impl IdScanner {
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.found.is_some() {
                return;
            }
            if let Some(value) = &mut self.value {
                if value.len() >= MAX_ID {
                    self.found = Some(Err(()));
                    return;
                }
                let quoted = value.first() == Some(&b'"');
                if quoted {
                    value.push(b);
                    if self.escaped {
                        self.escaped = false;
                    } else if b == b'\\' {
                        self.escaped = true;
                    } else if b == b'"' && value.len() > 1 {
                        self.finish();
                    }
                    continue;
                }
                if value.is_empty() && b.is_ascii_whitespace() {
                    continue;
                }
                if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.' | b'"') {
                    value.push(b);
                    continue;
                }
                self.finish();
                // The byte that ended the value is structure: read it as such below.
            }
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                    if let Some(key) = self.key.take() {
                        self.id_key = key == b"id";
                    }
                    continue;
                }
                if let Some(key) = &mut self.key {
                    key.push(b);
                    if key.len() > 2 {
                        self.key = None;
                    }
                }
                continue;
            }
            match b {
                b'"' => {
                    self.in_string = true;
                    if self.depth == 1 && self.expect_key {
                        self.key = Some(Vec::new());
                        self.expect_key = false;
                    }
                }
                b'{' | b'[' => {
                    self.depth += 1;
                    self.expect_key = self.depth == 1 && b == b'{';
                }
                b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                b',' if self.depth == 1 => {
                    self.expect_key = true;
                    self.id_key = false;
                }
                b':' if self.depth == 1 && self.id_key => {
                    self.id_key = false;
                    self.value = Some(Vec::new());
                }
                _ => {}
            }
        }
    }

    /// The id read so far is whole.
    fn finish(&mut self) {
        let value = self.value.take().unwrap_or_default();
        self.found = Some(match String::from_utf8(value) {
            Ok(id) if !id.is_empty() => Ok(id),
            _ => Err(()),
        });
    }

    /// The id's JSON, if the scan found one.
    fn found(mut self) -> Option<String> {
        if self.value.is_some() && self.found.is_none() {
            self.finish();
        }
        self.found.and_then(Result::ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_over_long_answer_is_an_error_to_its_request() {
        let scan = |parts: &[&[u8]]| {
            let mut id = IdScanner::default();
            for part in parts {
                id.feed(part);
            }
            id.found()
        };
        // Python's SDK writes the id first, TypeScript's last, after the result; an id nested in
        // the result is not the message's; pieces may cut anywhere.
        let first = br#"{"jsonrpc":"2.0","id":17,"result":{"content":[{"type":"text","text":"bbbb"#;
        assert_eq!(scan(&[first]).as_deref(), Some("17"));
        let last = br#"{"result":{"structuredContent":{"id":3,"x":"a\"id\":9"}},"jsonrpc":"2.0","id":"a-1"}"#;
        assert_eq!(scan(&[last]).as_deref(), Some("\"a-1\""));
        assert_eq!(
            scan(&[&last[..40], &last[40..]]).as_deref(),
            Some("\"a-1\"")
        );
        assert_eq!(scan(&[br#"{"jsonrpc":"2.0","result":{"id":4}}"#]), None);
        let error: serde_json::Value = serde_json::from_str(&too_large("17", 20_000_000)).unwrap();
        assert_eq!(error["id"], 17);
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .contains("20000000 bytes")
        );
    }

    #[test]
    fn progress_and_log_notifications_are_read_on_the_way() {
        let line = br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":4,"progress":2,"total":3}}"#;
        let Some(Notice::Progress(progress)) = notice_of(line) else {
            panic!("not progress");
        };
        assert_eq!(progress.progress, 2.0);
        let line = br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"hi"}}"#;
        assert!(matches!(notice_of(line), Some(Notice::Log(LogLevel::Info, text)) if text == "hi"));
        assert!(notice_of(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#).is_none());
    }
}
