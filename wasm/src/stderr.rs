//! A component's stderr as the host keeps it ([`LastWords`]): every write accepted, only the
//! last [`KEPT`] bytes kept, read back as its last words when a call traps.
//!
//! (wasmtime's `MemoryOutputPipe` refuses writes once its buffer is full: a Rust component then
//! panics printing to stderr, so a chatty component would crash after some kilobytes.)

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// How much of a component's stderr is kept: its end.
pub(crate) const KEPT: usize = 16 << 10;

/// The longest line of a component's last words, in characters.
const LINE_SHOWN: usize = 500;

/// A component's stderr: takes all it writes, keeps the last [`KEPT`] bytes. Cheap to clone
/// (clones share the bytes).
#[derive(Clone, Default)]
pub(crate) struct LastWords {
    bytes: Arc<Mutex<Vec<u8>>>,
}

impl LastWords {
    fn lock(&self) -> MutexGuard<'_, Vec<u8>> {
        // Bytes only: a panic while holding it leaves them usable.
        self.bytes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn keep(&self, written: &[u8]) {
        let mut bytes = self.lock();
        bytes.extend_from_slice(written);
        // Cut back to KEPT once twice that has piled up: each byte is moved at most once.
        if bytes.len() > 2 * KEPT {
            let cut = bytes.len() - KEPT;
            bytes.drain(..cut);
        }
    }

    /// The last two lines that may say why it stopped (a panic's place and message; not blank,
    /// not indented, not Rust's `note:` hints), each cut to [`LINE_SHOWN`] characters, as a
    /// clause for a trap's text; empty when it said nothing.
    pub(crate) fn said(&self) -> String {
        let bytes = self.lock();
        let start = bytes.len().saturating_sub(KEPT);
        let text = String::from_utf8_lossy(&bytes[start..]);
        let mut said: Vec<String> = text
            .lines()
            .rev()
            .filter(|l| {
                !l.trim().is_empty()
                    && !l.starts_with(char::is_whitespace)
                    && !l.starts_with("note:")
                    && !l.starts_with("stack backtrace:")
            })
            .take(2)
            .map(|line| match line.char_indices().nth(LINE_SHOWN) {
                Some((cut, _)) => format!("{}…", &line[..cut]),
                None => line.to_owned(),
            })
            .collect();
        said.reverse();
        if said.is_empty() {
            return String::new();
        }
        format!(" (its last words on stderr: {})", said.join(" "))
    }
}

impl OutputStream for LastWords {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.keep(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(KEPT)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LastWords {
    async fn ready(&mut self) {}
}

impl AsyncWrite for LastWords {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.keep(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for LastWords {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LastWords {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_end_of_all_it_was_given_and_cuts_long_lines() {
        let mut words = LastWords::default();
        for _ in 0..100 {
            words.write(Bytes::from(vec![b'x'; 10_000])).unwrap();
        }
        words
            .write(Bytes::from_static(
                b"\nthread 'main' panicked at src/lib.rs:3:5:\nboom\n",
            ))
            .unwrap();
        assert!(words.lock().len() <= 2 * KEPT);
        assert_eq!(
            words.said(),
            " (its last words on stderr: thread 'main' panicked at src/lib.rs:3:5: boom)"
        );
        words.write(Bytes::from(vec![b'y'; 2000])).unwrap();
        let said = words.said();
        assert!(
            said.ends_with("…)") && said.len() < 2 * LINE_SHOWN + 100,
            "{said}"
        );
    }
}
