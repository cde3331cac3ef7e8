//! The MCP stdio framing, owned by rho: every line from the client gets exactly the answer
//! JSON-RPC 2.0 prescribes, and nothing rmcp would drop is lost.
//!
//! rmcp (3.11) keeps the protocol; in front of it this guard reads stdin on a thread of its own,
//! one bounded line at a time, and answers itself what rmcp would drop or answer without an id:
//!
//! | the client sends | the guard answers |
//! |---|---|
//! | a line over [`MAX_LINE`] bytes | -32600, `"id": null` (the line is skipped, not buffered) |
//! | a line that is not JSON (a lone surrogate escape included) | -32700, `"id": null` |
//! | JSON nested deeper than 128 levels (rmcp's parser gives up) | -32600, with the id when it can be read |
//! | not an object (a batch, a number) | -32600, `"id": null` |
//! | `"jsonrpc"` other than `"2.0"`, `params` that are not an object, a method that is not a string | -32600 with the id |
//! | `tools/call` without a string `name` or with `arguments` that are not an object | -32602 with the id |
//! | a request whose id is still in flight | -32600 with the id (the first request is answered) |
//! | an id that is not a string or an integer (an object, `null`, `1.5`) | -32600, with the number if it is one |
//!
//! Notifications (no id) never get an answer, as JSON-RPC says. On the way out, an error response
//! without an `id` member gets `"id": null`. If a fix belongs upstream in rmcp, it is one of these
//! checks; the guard stays this small.

use std::collections::HashSet;
use std::io::BufRead;
use std::sync::{Arc, Mutex, PoisonError};

use rho_core::text_depth;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;

/// The longest line read from the client: 16 MiB.
pub const MAX_LINE: usize = 16 << 20;

/// How deep a message may nest for rmcp's parser.
const MAX_DEPTH: usize = 128;

/// What the guard tells its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// The client closed stdin.
    Input,
    /// stdout is closed (the client went away).
    Output,
}

/// The guard's ends: rmcp's transport, and a receiver told when the client's side closes.
pub struct Guard {
    /// rmcp reads the client's checked messages here.
    pub to_rmcp: DuplexStream,
    /// rmcp writes its messages here.
    pub from_rmcp: DuplexStream,
    /// Told once when stdin or stdout closes.
    pub closed: mpsc::Receiver<Closed>,
    /// Whether everything owed to the client is written.
    pub drain: Drain,
}

/// What is still owed to the client: requests not yet answered, lines not yet written.
#[derive(Clone)]
pub struct Drain {
    in_flight: InFlight,
    unwritten: Arc<std::sync::atomic::AtomicUsize>,
}

impl Drain {
    /// Waits up to `within` until every request has its answer written to stdout; `false` if
    /// some is still owed.
    pub async fn flushed(&self, within: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let owed = !self
                .in_flight
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_empty()
                || self.unwritten.load(std::sync::atomic::Ordering::Acquire) > 0;
            if !owed {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

type InFlight = Arc<Mutex<HashSet<String>>>;

/// Starts the guard between the client (stdin, and `stdout`) and rmcp.
pub fn start(stdout: std::fs::File) -> Guard {
    let (rmcp_in, guard_in) = tokio::io::duplex(1 << 16);
    let (rmcp_out, guard_out) = tokio::io::duplex(1 << 16);
    let (closed_tx, closed) = mpsc::channel(2);
    let (lines_tx, mut lines) = mpsc::channel::<Line>(16);
    let (out_tx, mut out) = mpsc::channel::<String>(64);
    let in_flight: InFlight = Arc::default();
    let unwritten = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let drain = Drain {
        in_flight: in_flight.clone(),
        unwritten: unwritten.clone(),
    };

    // stdin, on a thread of its own: tokio's stdin would hold the runtime's shutdown.
    let reader = std::thread::Builder::new()
        .name("rho-stdin".into())
        .spawn(move || read_lines(std::io::stdin().lock(), &lines_tx));
    if let Err(e) = reader {
        tracing::error!(error = %e, "cannot start the stdin reader");
    }

    // Client -> checks -> rmcp (or an answer of the guard's own).
    let checked_flight = in_flight.clone();
    let answers = out_tx.clone();
    let input_closed = closed_tx.clone();
    tokio::spawn(async move {
        let mut to_rmcp = guard_in;
        while let Some(line) = lines.recv().await {
            let verdict = match line {
                Line::TooLong => Verdict::Answer(error(
                    Value::Null,
                    -32600,
                    &format!("the message is larger than {MAX_LINE} bytes"),
                )),
                Line::Text(text) => check(&text, &checked_flight),
            };
            match verdict {
                Verdict::Forward(mut text) => {
                    text.push('\n');
                    if to_rmcp.write_all(text.as_bytes()).await.is_err() {
                        break;
                    }
                }
                Verdict::Answer(answer) => {
                    if answers.send(answer).await.is_err() {
                        break;
                    }
                }
                Verdict::Ignore => {}
            }
        }
        let _ = input_closed.send(Closed::Input).await;
        // rmcp's input stays open: the owner stops the calls first, then ends the session.
        std::future::pending::<()>().await;
        drop(to_rmcp);
    });

    // rmcp -> stdout, noting answered requests (owed until written).
    let answered = in_flight;
    let queued = unwritten.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(guard_out).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            queued.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            let line = settle(line, &answered);
            if out_tx.send(line).await.is_err() {
                break;
            }
        }
    });

    // A client that stops reading is seen even when nothing is written: the pipe (or terminal)
    // reports an error or a hang-up on our end.
    let watched = std::os::fd::AsRawFd::as_raw_fd(&stdout);
    let hung_up = closed_tx.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let mut poll = libc::pollfd {
                fd: watched,
                events: 0,
                revents: 0,
            };
            // SAFETY: polls a descriptor the writer thread keeps open for the server's life.
            let ready = unsafe { libc::poll(&mut poll, 1, 0) };
            if ready > 0 && poll.revents & (libc::POLLERR | libc::POLLHUP) != 0 {
                let _ = hung_up.send(Closed::Output).await;
                return;
            }
        }
    });

    // The one writer of stdout, on a thread of its own: a blocking write per line (through
    // tokio's file, each line was a hand-off to a blocking thread and back).
    let unstarted = closed_tx.clone();
    let writer = std::thread::Builder::new()
        .name("rho-stdout".into())
        .spawn(move || {
            use std::io::Write;
            let mut stdout = stdout;
            while let Some(mut line) = out.blocking_recv() {
                line.push('\n');
                let written = stdout.write_all(line.as_bytes());
                unwritten
                    .fetch_update(
                        std::sync::atomic::Ordering::AcqRel,
                        std::sync::atomic::Ordering::Acquire,
                        |n| Some(n.saturating_sub(1)),
                    )
                    .ok();
                if written.is_err() {
                    let _ = closed_tx.blocking_send(Closed::Output);
                    break;
                }
            }
        });
    if let Err(e) = writer {
        // Nothing could reach the client: the server stops as if it had hung up.
        tracing::error!(error = %e, "cannot start the stdout writer");
        let _ = unstarted.try_send(Closed::Output);
    }

    Guard {
        to_rmcp: rmcp_in,
        from_rmcp: rmcp_out,
        closed,
        drain,
    }
}

enum Line {
    Text(String),
    TooLong,
}

/// Reads lines of at most [`MAX_LINE`] bytes; a longer one is skipped to its end, never held.
fn read_lines(mut input: impl BufRead, lines: &mpsc::Sender<Line>) {
    loop {
        let mut line = Vec::new();
        let mut too_long = false;
        loop {
            let buf = match input.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            if buf.is_empty() {
                if line.is_empty() && !too_long {
                    return;
                }
                break;
            }
            let (part, used, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (&buf[..i], i + 1, true),
                None => (buf, buf.len(), false),
            };
            if !too_long && line.len() + part.len() <= MAX_LINE {
                line.extend_from_slice(part);
            } else {
                too_long = true;
                line = Vec::new();
            }
            input.consume(used);
            if done {
                break;
            }
        }
        let item = if too_long {
            Line::TooLong
        } else {
            // Not UTF-8 is not JSON: the checks answer it.
            Line::Text(String::from_utf8(line).unwrap_or_else(|_| "\u{0}".into()))
        };
        if lines.blocking_send(item).is_err() {
            return;
        }
    }
}

enum Verdict {
    Forward(String),
    Answer(String),
    Ignore,
}

fn error(id: Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

/// The key of a request id in the in-flight set (`1` and `"1"` differ).
fn id_key(id: &Value) -> String {
    id.to_string()
}

/// `text` as JSON nested at most `limit` levels; `None` if it is not JSON (or deeper).
fn parse(text: &str, limit: usize) -> Option<Value> {
    rho_core::parse_within(text, limit).ok()
}

/// The checks of the module doc.
fn check(text: &str, in_flight: &InFlight) -> Verdict {
    if text.trim().is_empty() {
        return Verdict::Ignore;
    }
    let too_deep = text_depth(text, MAX_DEPTH) > MAX_DEPTH;
    let Some(message) = parse(text, rho_core::plugin_api::MAX_DETAILS_DEPTH) else {
        if too_deep {
            return Verdict::Answer(error(
                Value::Null,
                -32600,
                &format!("the message nests deeper than {MAX_DEPTH} levels"),
            ));
        }
        return Verdict::Answer(error(Value::Null, -32700, "parse error: not JSON"));
    };
    let Value::Object(fields) = &message else {
        let what = if message.is_array() {
            "batches are not supported"
        } else {
            "a message must be a JSON object"
        };
        return Verdict::Answer(error(Value::Null, -32600, what));
    };
    let id = fields.get("id").cloned();
    // A client's error response to something it could not read carries `"id": null`: nothing
    // to answer, nothing rmcp could match.
    let response = !fields.contains_key("method")
        && (fields.contains_key("result") || fields.contains_key("error"));
    if response && id == Some(Value::Null) {
        return Verdict::Ignore;
    }
    let id_ok = match &id {
        None | Some(Value::String(_)) => true,
        // rmcp keeps numeric ids as i64: another number would come back as another id.
        Some(Value::Number(n)) => n.is_i64(),
        Some(_) => false,
    };
    if !id_ok {
        let echoed = match &id {
            Some(n @ Value::Number(_)) => n.clone(),
            _ => Value::Null,
        };
        return Verdict::Answer(error(
            echoed,
            -32600,
            "an id must be a string or an integer",
        ));
    }
    // Notifications get no answer, even when they are wrong.
    let invalid = |message: &str| match &id {
        Some(id) => Verdict::Answer(error(id.clone(), -32600, message)),
        None => Verdict::Ignore,
    };
    if fields.get("jsonrpc") != Some(&json!("2.0")) {
        return invalid("`jsonrpc` must be \"2.0\"");
    }
    if too_deep {
        return invalid(&format!("the message nests deeper than {MAX_DEPTH} levels"));
    }
    let Some(method) = fields.get("method") else {
        // A response to one of the server's requests (elicitation).
        if id.is_some() && (fields.contains_key("result") || fields.contains_key("error")) {
            return Verdict::Forward(text.to_owned());
        }
        return invalid("neither a request, a notification nor a response");
    };
    let Some(method) = method.as_str() else {
        return invalid("`method` must be a string");
    };
    // `null` params are absent params.
    let params = fields.get("params").filter(|p| !p.is_null());
    if params.is_some_and(|p| !p.is_object()) {
        return invalid("`params` must be an object");
    }
    if method == "tools/call" {
        let name_ok = params
            .and_then(|p| p.get("name"))
            .is_some_and(Value::is_string);
        let args_ok = params
            .and_then(|p| p.get("arguments"))
            .is_none_or(|a| a.is_object() || a.is_null());
        if !(name_ok && args_ok) {
            return match &id {
                Some(id) => Verdict::Answer(error(
                    id.clone(),
                    -32602,
                    "invalid params: tools/call needs a string `name` and object `arguments`",
                )),
                None => Verdict::Ignore,
            };
        }
    }
    // What rmcp cannot decode it would answer without an id: answered here, with it.
    if let Err(e) = serde_json::from_value::<rmcp::model::ClientJsonRpcMessage>(message.clone()) {
        return invalid(&format!("invalid request: {e}"));
    }
    // A cancelled request gets no response from rmcp: its id is free again.
    if method == "notifications/cancelled"
        && let Some(request) = params.and_then(|p| p.get("requestId"))
    {
        in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id_key(request));
    }
    if let Some(id) = &id {
        let mut flight = in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        if !flight.insert(id_key(id)) {
            return Verdict::Answer(error(
                id.clone(),
                -32600,
                &format!("a request with id {id} is still in flight"),
            ));
        }
    }
    Verdict::Forward(text.to_owned())
}

/// An outgoing line: a response frees its id; an error response without an id gets `"id": null`.
fn settle(line: String, in_flight: &InFlight) -> String {
    // Results carry details up to their bound, a few levels inside the response.
    let limit = rho_core::plugin_api::MAX_DETAILS_DEPTH + 16;
    let Some(Value::Object(mut fields)) = parse(&line, limit) else {
        return line;
    };
    let is_response = fields.contains_key("result") || fields.contains_key("error");
    if !is_response {
        return line;
    }
    match fields.get("id") {
        Some(id) => {
            in_flight
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id_key(id));
            line
        }
        None => {
            fields.insert("id".into(), Value::Null);
            Value::Object(fields).to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(text: &str) -> Value {
        match check(text, &InFlight::default()) {
            Verdict::Answer(a) => serde_json::from_str(&a).unwrap(),
            Verdict::Forward(_) => panic!("forwarded {text}"),
            Verdict::Ignore => panic!("ignored {text}"),
        }
    }

    #[test]
    fn each_malformed_message_gets_its_code_and_id() {
        let cases = [
            ("not json", -32700, json!(null)),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":"\ud800"}}"#,
                -32700,
                json!(null),
            ),
            ("[1,2]", -32600, json!(null)),
            (
                r#"{"jsonrpc":"1.0","id":7,"method":"ping"}"#,
                -32600,
                json!(7),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"a","method":"ping","params":[]}"#,
                -32600,
                json!("a"),
            ),
            (
                r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":[1]}}"#,
                -32602,
                json!(3),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
                -32600,
                json!(1.5),
            ),
            (
                r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                -32600,
                json!(null),
            ),
        ];
        for (text, code, id) in cases {
            let a = answer(text);
            assert_eq!(a["error"]["code"], code, "{text}: {a}");
            assert_eq!(a["id"], id, "{text}: {a}");
            assert!(a.as_object().unwrap().contains_key("id"));
        }
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":9,"method":"x","params":{{"a":{}{}}}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let a = answer(&deep);
        assert_eq!(
            (a["error"]["code"].clone(), a["id"].clone()),
            (json!(-32600), json!(9))
        );
    }

    #[test]
    fn duplicate_ids_in_flight_are_refused_until_answered() {
        let flight = InFlight::default();
        let request = r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#;
        assert!(matches!(check(request, &flight), Verdict::Forward(_)));
        assert!(matches!(check(request, &flight), Verdict::Answer(_)));
        // `"5"` is another id.
        let other = r#"{"jsonrpc":"2.0","id":"5","method":"ping"}"#;
        assert!(matches!(check(other, &flight), Verdict::Forward(_)));
        settle(r#"{"jsonrpc":"2.0","id":5,"result":{}}"#.into(), &flight);
        assert!(matches!(check(request, &flight), Verdict::Forward(_)));
        let fixed = settle(
            r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"x"}}"#.into(),
            &flight,
        );
        assert_eq!(
            serde_json::from_str::<Value>(&fixed).unwrap()["id"],
            Value::Null
        );
    }

    #[test]
    fn long_lines_are_skipped_not_held() {
        let mut input = vec![b'x'; MAX_LINE + 10];
        input.extend_from_slice(b"\n{\"a\":1}\n");
        let (tx, mut rx) = mpsc::channel(4);
        read_lines(&input[..], &tx);
        assert!(matches!(rx.try_recv(), Ok(Line::TooLong)));
        assert!(matches!(rx.try_recv(), Ok(Line::Text(t)) if t == "{\"a\":1}"));
    }
}
