//! Request and response bodies: read up to a bound, and told when a response was sent to its
//! end or dropped (its client went away).

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::response::Response;
use tokio_stream::StreamExt;

use crate::server::jsonrpc;

/// A request body read up to a bound.
pub(super) enum ReadBody {
    /// All of it.
    Whole(Vec<u8>),
    /// It ran past the bound: its first [`jsonrpc::ID_HEAD`] bytes (to find its id); the rest
    /// was not read.
    TooLarge(Vec<u8>),
}

/// Reads `body` whole if it is at most `max` bytes, else stops reading at the bound.
pub(super) async fn read_bounded(
    body: axum::body::Body,
    max: usize,
) -> Result<ReadBody, axum::Error> {
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if bytes.len() + chunk.len() > max {
            let room = jsonrpc::ID_HEAD.saturating_sub(bytes.len());
            bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
            bytes.truncate(jsonrpc::ID_HEAD);
            return Ok(ReadBody::TooLarge(bytes));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(ReadBody::Whole(bytes))
}

/// `response` with a body that runs `done` once it is dropped: `done(true)` when it was sent to
/// its end, `done(false)` when it was dropped before (the client went away). The body keeps its
/// length (a response with a `Content-Length` keeps it).
pub(super) fn on_body_end(
    response: Response,
    done: impl FnOnce(bool) + Send + 'static,
) -> Response {
    response.map(|inner| {
        axum::body::Body::new(OnEnd {
            inner,
            done: Some(done),
            finished: false,
        })
    })
}

/// A body that tells `done` when it is dropped, and whether it had ended.
struct OnEnd<F: FnOnce(bool)> {
    inner: axum::body::Body,
    done: Option<F>,
    finished: bool,
}

// Only `inner` is polled, and it is `Unpin`.
impl<F: FnOnce(bool)> Unpin for OnEnd<F> {}

impl<F: FnOnce(bool)> http_body::Body for OnEnd<F> {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.finished = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl<F: FnOnce(bool)> Drop for OnEnd<F> {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            done(self.finished || http_body::Body::is_end_stream(&self.inner));
        }
    }
}
