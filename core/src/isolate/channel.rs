//! The host's end of a worker's socket: read through the runtime, watched for reading only.
//!
//! A tokio `UnixStream` asks epoll for both readiness kinds, so every time the worker reads what
//! the host sent, the freed buffer space ("writable") wakes a host thread parked in `epoll_wait`
//! for nothing: one spurious wake-up per frame, a VM exit for the inter-processor interrupt on a
//! virtual machine (perf of a 64 KiB echo: a tenth of the worker's time was that wake-up, charged
//! to the worker's `recv`). A [`Channel`] registers for reading alone. A write goes straight to
//! the socket, as one `sendmsg` of all its parts; only when the socket's buffer is full (a
//! frame larger than it, the worker not reading) does it watch for room, through a second
//! registration that lives for that one write.

use rho_protocol::frames::{BODY_PREFIX, Body, Frame, FrameError, body_len, closed_at_eof};
use serde::Deserialize;
use std::io::{self, IoSlice, Write};
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::AsyncReadExt;

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, Interest, ReadBuf};

/// One end of a socket pair, non-blocking, read through the runtime's reactor.
pub(crate) struct Channel {
    socket: AsyncFd<UnixStream>,
}

impl Channel {
    /// Takes `socket` (made non-blocking here); must be called inside a runtime.
    pub fn new(socket: UnixStream) -> io::Result<Channel> {
        socket.set_nonblocking(true)?;
        Ok(Channel {
            socket: watch(socket, Interest::READABLE)?,
        })
    }

    /// Writes `parts` back to back, whole, in as few system calls as the socket's buffer allows
    /// (one, unless a part is larger than the buffer). Not cancellation-safe: a write dropped
    /// midway leaves a partial frame on the socket, as any stream write would.
    pub async fn write_all(&self, parts: &[&[u8]]) -> io::Result<()> {
        let mut slices: Vec<IoSlice<'_>> = parts
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| IoSlice::new(p))
            .collect();
        let mut rest = &mut slices[..];
        // Registered only once the buffer is full, and only for this write.
        let mut room: Option<AsyncFd<UnixStream>> = None;
        while !rest.is_empty() {
            match self.socket.get_ref().write_vectored(rest) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut rest, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let watch = match room.take() {
                        Some(watch) => watch,
                        None => watch(self.socket.get_ref().try_clone()?, Interest::WRITABLE)?,
                    };
                    watch.writable().await?.clear_ready();
                    room = Some(watch);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// `socket` registered with the reactor for `interest` alone.
fn watch(socket: UnixStream, interest: Interest) -> io::Result<AsyncFd<UnixStream>> {
    // SAFETY: the `AsyncFd` owns the socket, whose descriptor stays open, the same and the one
    // `as_raw_fd` returns until the `AsyncFd` drops it.
    unsafe { AsyncFd::register_with_interest(socket, interest) }.map_err(io::Error::from)
}

impl AsyncRead for Channel {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.socket.poll_read_ready(cx))?;
            // SAFETY: `read` only writes into the unfilled part, and `assume_init` covers no more
            // than the bytes it reported written.
            let unfilled = unsafe { buf.unfilled_mut() };
            let read = guard.try_io(|socket| {
                let n = unsafe {
                    libc::read(
                        std::os::fd::AsRawFd::as_raw_fd(socket.get_ref()),
                        unfilled.as_mut_ptr().cast(),
                        unfilled.len(),
                    )
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match read {
                Ok(Ok(n)) => {
                    // SAFETY: the kernel wrote `n` bytes there.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                // Not ready after all: the guard cleared the readiness; wait again.
                Err(_would_block) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// Parts larger than the socket's buffer arrive whole and in order while the peer reads
    /// slowly; a closed peer reads as the end.
    #[tokio::test]
    async fn large_writes_wait_for_room_and_arrive_whole() {
        let (a, b) = UnixStream::pair().unwrap();
        let (a, b) = (Channel::new(a).unwrap(), Channel::new(b).unwrap());
        let big: Vec<u8> = (0..3 << 20).map(|i| (i % 251) as u8).collect();
        let small = b"head".to_vec();
        let expected = [&small[..], &big[..], &small[..]].concat();
        let reader = tokio::spawn(async move {
            let mut b = b;
            let mut got = Vec::new();
            let mut chunk = vec![0u8; 100_000];
            loop {
                let n = b.read(&mut chunk).await.unwrap();
                if n == 0 {
                    return got;
                }
                got.extend_from_slice(&chunk[..n]);
                tokio::task::yield_now().await;
            }
        });
        a.write_all(&[&small, &big, &[], &small]).await.unwrap();
        drop(a);
        assert!(reader.await.unwrap() == expected);
    }
}

/// Reads one frame from a worker (async), as [`rho_protocol::frames::read_frame`] does.
pub async fn read_frame_async<M: for<'de> Deserialize<'de>>(
    reader: &mut (impl AsyncRead + Unpin),
    limit: usize,
) -> Result<Frame<M>, FrameError> {
    let mut header = [0u8; 4];
    match reader.read_exact(&mut header).await {
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        other => other?,
    };
    let size = body_len(header, limit)?;
    let mut prefix = vec![0u8; size.min(BODY_PREFIX)];
    reader
        .read_exact(&mut prefix)
        .await
        .map_err(closed_at_eof)?;
    let mut body = Body::of(prefix, size)?;
    // Both parts grow as their bytes arrive (`read_to_end` reserves ahead of what came, never
    // the announced length): what a worker announces costs nothing until it sends it.
    let (json_missing, blobs_missing) = (body.json_missing(), body.blobs_missing());
    let (json, blobs) = body.parts_mut();
    for (part, missing) in [(json, json_missing), (blobs, blobs_missing)] {
        if missing > 0 {
            (&mut *reader)
                .take(missing as u64)
                .read_to_end(part)
                .await
                .map_err(FrameError::Io)?;
        }
    }
    body.frame()
}

#[cfg(test)]
mod frame_tests {
    use super::*;
    use rho_protocol::answer::FailureKind;
    use rho_protocol::frames::{FromWorker, encode, read_frame};

    /// The async reader reads what the codec's blocking reader reads, and a frame cut anywhere
    /// is `Closed` to both.
    #[tokio::test]
    async fn the_async_reader_agrees_with_the_codec() {
        let msg = FromWorker::Failure {
            id: 1,
            kind: FailureKind::Error,
            message: "m".repeat(3 * BODY_PREFIX),
            details: None,
            spent: false,
        };
        let big: Vec<u8> = (0..200_000).map(|i| i as u8).collect();
        let bytes = encode(&msg, &[&big[..], b"tail"]);
        let sync: Frame<FromWorker> = read_frame(&mut &bytes[..], 1 << 30).unwrap();
        let frame: Frame<FromWorker> = read_frame_async(&mut &bytes[..], 1 << 30).await.unwrap();
        assert_eq!((&frame.message, &frame.blobs), (&sync.message, &sync.blobs));
        for cut in [5, BODY_PREFIX, bytes.len() - 1] {
            assert!(matches!(
                read_frame_async::<FromWorker>(&mut &bytes[..cut], 1 << 30).await,
                Err(FrameError::Closed)
            ));
        }
    }
}
