//! The server's stdout as the MCP client reads it, each line checked on its way.
//!
//! - A line that is not a JSON-RPC message (its first byte past white space is not `{` or `[`)
//!   is a protocol failure: the connection ends there, so the supervisor restarts the server and
//!   its calls in flight end `crashed`, the reason naming the line.
//! - A line over [`MAX_LINE`] (rmcp's own bound) is not passed on: the request it answers (its
//!   `id`, read from the line's head) gets an error response instead, saying how large the
//!   answer was, so that call ends `error` and the server keeps serving.
//! - A progress or log notification is handed to its call here, before the next line goes on:
//!   rmcp handles notifications in tasks of their own, so through it the last progress or log
//!   line of a call could come after the call's answer (and be lost).

use std::sync::{Arc, Mutex, PoisonError};

use rho_runtime::LogLevel;
use rmcp::model::ProgressNotificationParam;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};

/// The longest line passed on: 16 MiB, rmcp's bound on one message.
pub(crate) const MAX_LINE: usize = 16 << 20;

/// How much of an over-long line is kept to find its `id`.
const HEAD: usize = 4096;

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
                    line.truncate(HEAD);
                }
                if !over {
                    line.extend_from_slice(&buf[..take]);
                } else if line.len() < HEAD {
                    line.extend_from_slice(&buf[..take.min(HEAD - line.len())]);
                }
                reader.consume(take);
                if newline {
                    break false;
                }
            };
            if over {
                if let Some(error) = too_large(&line, total)
                    && to_client.write_all(error.as_bytes()).await.is_err()
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
            crate::logs::line(params).map(|(level, text)| Notice::Log(level, text))
        }
        _ => None,
    }
}

/// The error response to the request an over-long line answered, if its head names one.
fn too_large(head: &[u8], total: usize) -> Option<String> {
    let text = String::from_utf8_lossy(head);
    let at = text.find("\"id\"")? + 4;
    let rest = text[at..].trim_start().strip_prefix(':')?.trim_start();
    let id: String = if let Some(quoted) = rest.strip_prefix('"') {
        let end = quoted.find('"')?;
        serde_json::to_string(&quoted[..end]).ok()?
    } else {
        let digits: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '-')
            .collect();
        if digits.is_empty() {
            return None;
        }
        digits
    };
    let message = format!(
        "the server's answer is {total} bytes; an MCP message may be at most {MAX_LINE} bytes"
    );
    let error = serde_json::json!({"code": -32603, "message": message});
    Some(format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{error}}}\n"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_over_long_answer_is_an_error_to_its_request() {
        let head = br#"{"jsonrpc":"2.0","id":17,"result":{"content":[{"type":"text","text":"bbbb"#;
        let error = too_large(head, 20_000_000).unwrap();
        let value: serde_json::Value = serde_json::from_str(&error).unwrap();
        assert_eq!(value["id"], 17);
        assert!(
            value["error"]["message"]
                .as_str()
                .unwrap()
                .contains("20000000 bytes")
        );
        let head = br#"{"id": "a-1", "jsonrpc":"2.0","result":{}"#;
        let value: serde_json::Value = serde_json::from_str(&too_large(head, 1).unwrap()).unwrap();
        assert_eq!(value["id"], "a-1");
        assert!(too_large(b"{\"jsonrpc\":\"2.0\",\"result\":", 1).is_none());
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
