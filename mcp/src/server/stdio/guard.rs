//! The MCP stdio framing, owned by rho: every line from the client gets exactly the answer
//! JSON-RPC 2.0 prescribes, and nothing rmcp would drop is lost.
//!
//! rmcp (3.11) keeps the protocol; in front of it this guard reads stdin on a thread of its own,
//! one bounded line at a time (at most [`MAX_LINE`] bytes: a longer line is skipped to its end,
//! only its head kept to find its id), and answers itself what rmcp would drop or answer without
//! an id: the checks of [`crate::server::jsonrpc`] (shared with the HTTP face), and one of its own, a
//! request whose id is still in flight (-32600 with the id; the first request is answered).
//!
//! On the way out, an error response without an `id` member gets `"id": null`. If a fix belongs
//! upstream in rmcp, it is one of these checks; the guard stays this small.

use std::collections::HashSet;
use std::io::BufRead;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;

use crate::server::jsonrpc::{self, Verdict};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;

/// The longest line read from the client: 16 MiB.
pub const MAX_LINE: usize = 16 << 20;

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
    let (out_tx, out) = mpsc::channel::<String>(64);
    let in_flight: InFlight = Arc::default();
    let unwritten = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let drain = Drain {
        in_flight: in_flight.clone(),
        unwritten: unwritten.clone(),
    };

    // Each message crosses one thread boundary each way besides rmcp's own: the stdin thread
    // reads, checks and hands a line to rmcp; the stdout thread takes rmcp's lines, settles and
    // writes them. Both wait on the duplex pipes through the runtime's handle.
    let runtime = tokio::runtime::Handle::current();

    // stdin, on a thread of its own: tokio's stdin would hold the runtime's shutdown.
    // Client -> checks -> rmcp (or an answer of the guard's own, to the stdout thread).
    let checked_flight = in_flight.clone();
    let answers = out_tx;
    let input_closed = closed_tx.clone();
    let reader_runtime = runtime.clone();
    let reader = std::thread::Builder::new()
        .name("rho-stdin".into())
        .spawn(move || {
            let mut to_rmcp = guard_in;
            read_lines(std::io::stdin().lock(), |line| {
                let verdict = match line {
                    Line::TooLong { head } => Verdict::Answer(jsonrpc::too_large(&head, MAX_LINE)),
                    Line::Text(text) => check(&text, &checked_flight),
                };
                match verdict {
                    Verdict::Forward { mut text, .. } => {
                        text.push('\n');
                        reader_runtime
                            .block_on(to_rmcp.write_all(text.as_bytes()))
                            .is_ok()
                    }
                    Verdict::Answer(answer) => answers.blocking_send(answer).is_ok(),
                    Verdict::Ignore => true,
                }
            });
            let _ = input_closed.blocking_send(Closed::Input);
            // rmcp's input stays open: the owner stops the calls first, then ends the session.
            reader_runtime.spawn(async move {
                std::future::pending::<()>().await;
                drop(to_rmcp);
            });
        });
    if let Err(e) = reader {
        tracing::error!(error = %e, "cannot start the stdin reader");
    }

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

    // The one writer of stdout, on a thread of its own: rmcp's lines (each noting its answered
    // request, owed until written) and the guard's own answers, a blocking write per line.
    let unstarted = closed_tx.clone();
    let answered = in_flight;
    let writer = std::thread::Builder::new()
        .name("rho-stdout".into())
        .spawn(move || {
            use std::io::Write;
            let mut stdout = stdout;
            // Each source is read until it ends; the writer ends with the last.
            let mut from_rmcp = Some(BufReader::new(guard_out).lines());
            let mut own = Some(out);
            while from_rmcp.is_some() || own.is_some() {
                let next = runtime.block_on(async {
                    tokio::select! {
                        line = async {
                            match from_rmcp.as_mut() {
                                Some(lines) => lines.next_line().await,
                                None => std::future::pending().await,
                            }
                        } => Outgoing::Rmcp(line.ok().flatten()),
                        answer = async {
                            match own.as_mut() {
                                Some(own) => own.recv().await,
                                None => std::future::pending().await,
                            }
                        } => Outgoing::Own(answer),
                    }
                });
                // Owed from before its request is settled until it is written.
                let mut line = match next {
                    Outgoing::Rmcp(Some(line)) => {
                        unwritten.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                        settle(line, &answered)
                    }
                    Outgoing::Own(Some(answer)) => {
                        unwritten.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                        answer
                    }
                    Outgoing::Rmcp(None) => {
                        from_rmcp = None;
                        continue;
                    }
                    Outgoing::Own(None) => {
                        own = None;
                        continue;
                    }
                };
                line.push('\n');
                let written = stdout.write_all(line.as_bytes());
                // Counted up above on this thread: it cannot go below zero.
                unwritten.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
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

/// What the stdout thread took: one of rmcp's lines, or one of the guard's own answers (`None`:
/// that source ended).
enum Outgoing {
    Rmcp(Option<String>),
    Own(Option<String>),
}

enum Line {
    Text(String),
    /// A line over [`MAX_LINE`], of which only the head was kept (to find its id).
    TooLong {
        head: Vec<u8>,
    },
}

/// Reads lines of at most [`MAX_LINE`] bytes; a longer one is skipped to its end, only its first
/// [`jsonrpc::ID_HEAD`] bytes held.
fn read_lines(mut input: impl BufRead, mut take: impl FnMut(Line) -> bool) {
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
            } else if !too_long {
                // Only the head is kept, to find the message's id.
                too_long = true;
                let room = jsonrpc::ID_HEAD.saturating_sub(line.len());
                line.extend_from_slice(&part[..part.len().min(room)]);
                line.truncate(jsonrpc::ID_HEAD);
                line.shrink_to_fit();
            }
            input.consume(used);
            if done {
                break;
            }
        }
        let item = if too_long {
            Line::TooLong { head: line }
        } else {
            // Not UTF-8 is not JSON: the checks answer it.
            Line::Text(String::from_utf8(line).unwrap_or_else(|_| "\u{0}".into()))
        };
        if !take(item) {
            return;
        }
    }
}

/// The key of a request id in the in-flight set (`1` and `"1"` differ).
fn id_key(id: &Value) -> String {
    id.to_string()
}

/// [`jsonrpc::check`], then the stdio face's own rule: a request whose id is still in flight is
/// refused (its first request is answered).
fn check(text: &str, in_flight: &InFlight) -> Verdict {
    let verdict = jsonrpc::check(text);
    let Verdict::Forward { id, method, .. } = &verdict else {
        return verdict;
    };
    // A cancelled request gets no response from rmcp: its id is free again.
    if method.as_deref() == Some("notifications/cancelled")
        && let Some(request) = jsonrpc::parse(text, jsonrpc::MAX_DEPTH)
            .as_ref()
            .and_then(|m| m.get("params"))
            .and_then(|p| p.get("requestId"))
    {
        in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id_key(request));
    }
    if let (Some(id), Some(_)) = (id, method) {
        let mut flight = in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        if !flight.insert(id_key(id)) {
            return Verdict::Answer(jsonrpc::error(
                id.clone(),
                -32600,
                &format!("a request with id {id} is still in flight"),
            ));
        }
    }
    verdict
}

/// An outgoing line: a response frees its id; an error response without an id gets `"id": null`.
/// Read for its head only (which members it has, and its id): nothing else of it is built.
fn settle(line: String, in_flight: &InFlight) -> String {
    let Ok(head) = serde_json::from_str::<ResponseHead>(&line) else {
        return line;
    };
    let is_response = head.result.is_present() || head.error.is_present();
    match head.id {
        _ if !is_response => line,
        Member::Present(id) => {
            in_flight
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id_key(&id));
            line
        }
        Member::Absent => {
            // Results carry details up to their bound, a few levels inside the response.
            let limit = rho_runtime::plugin_api::MAX_DETAILS_DEPTH + 16;
            let Some(Value::Object(mut fields)) = jsonrpc::parse(&line, limit) else {
                return line;
            };
            fields.insert("id".into(), Value::Null);
            Value::Object(fields).to_string()
        }
    }
}

/// What [`settle`] reads of an outgoing message.
#[derive(serde::Deserialize)]
struct ResponseHead {
    #[serde(default)]
    id: Member<Value>,
    #[serde(default)]
    result: Member<serde::de::IgnoredAny>,
    #[serde(default)]
    error: Member<serde::de::IgnoredAny>,
}

/// Whether a JSON member is there, whatever its value (`null` included, which `Option` would
/// read as absent).
#[derive(Default)]
enum Member<T> {
    #[default]
    Absent,
    Present(T),
}

impl<T> Member<T> {
    fn is_present(&self) -> bool {
        matches!(self, Member::Present(_))
    }
}

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Member<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(Member::Present)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_ids_in_flight_are_refused_until_answered() {
        let flight = InFlight::default();
        let request = r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#;
        assert!(matches!(check(request, &flight), Verdict::Forward { .. }));
        assert!(matches!(check(request, &flight), Verdict::Answer(_)));
        // `"5"` is another id.
        let other = r#"{"jsonrpc":"2.0","id":"5","method":"ping"}"#;
        assert!(matches!(check(other, &flight), Verdict::Forward { .. }));
        settle(r#"{"jsonrpc":"2.0","id":5,"result":{}}"#.into(), &flight);
        assert!(matches!(check(request, &flight), Verdict::Forward { .. }));
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
        let mut lines = Vec::new();
        read_lines(&input[..], |line| {
            lines.push(line);
            true
        });
        assert!(
            matches!(lines.first(), Some(Line::TooLong { head }) if head.len() == jsonrpc::ID_HEAD)
        );
        assert!(matches!(lines.get(1), Some(Line::Text(t)) if t == "{\"a\":1}"));
    }
}
