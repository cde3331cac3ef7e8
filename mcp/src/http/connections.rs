//! Accepting connections: admitted by [`Connections`], served by hyper with bounded header
//! time, closed on stop.

use std::net::IpAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::admission::{Admitted, Connections, Pending};
use super::body::on_body_end;

/// How long a client may take to send a request's head, from its connection or from the end of
/// its last response (an idle keep-alive connection included): 5 s.
const HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The most of a newcomer's request head looked at while it waits: a head this long counts as
/// in (hyper reads it, and bounds it).
const PEEK_BYTES: usize = 8 << 10;

/// Accepts connections until `stop`, each admitted by [`Connections`] (a bound in all and per
/// peer address; past one, a newcomer waits, unadmitted, for its whole request head, then evicts
/// the connection that has waited longest), served by hyper with a bound on the time its request
/// heads may take, with TCP_NODELAY (answers end with small writes, the last SSE chunk, which
/// would otherwise wait for the client's delayed ACK: 40 ms a call). On `stop`, it accepts no
/// more, and returns once every connection has finished its request and closed.
pub(super) async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    stop: CancellationToken,
) {
    let table = Arc::new(Connections::default());
    let pending = Arc::new(Pending::default());
    let connections = tokio_util::task::TaskTracker::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, mostly: back off rather than spin.
                    tracing::warn!(error = %e, "accepting an HTTP connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = stop.cancelled() => break,
        };
        match table.admit(peer.ip(), false) {
            Ok(admitted) => {
                connections.spawn(serve_one(
                    stream,
                    peer.ip(),
                    admitted,
                    app.clone(),
                    stop.clone(),
                ));
            }
            // A bound is reached: in only with a whole request head, looked for without
            // holding the accepting loop.
            Err(_) => {
                let waiting = pending.wait();
                let (table, app, stop) = (table.clone(), app.clone(), stop.clone());
                connections.spawn(async move {
                    let head_in = tokio::select! {
                        head_in = whole_head(&stream) => head_in,
                        () = waiting.displaced.cancelled() => false,
                        () = stop.cancelled() => false,
                    };
                    drop(waiting);
                    if !head_in {
                        return;
                    }
                    if let Ok(admitted) = table.admit(peer.ip(), true) {
                        serve_one(stream, peer.ip(), admitted, app, stop).await;
                    }
                });
            }
        }
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// Serves one admitted connection until it closes, is evicted or the endpoint stops.
async fn serve_one(
    stream: tokio::net::TcpStream,
    peer: IpAddr,
    admitted: Admitted,
    app: axum::Router,
    stop: CancellationToken,
) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "TCP_NODELAY not set");
    }
    let inner = hyper_util::service::TowerToHyperService::new(app);
    let connection = admitted.connection.clone();
    let service =
        hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(Peer(peer));
            connection.request_started();
            let ended = connection.clone();
            let response = hyper::service::Service::call(&inner, request);
            async move {
                let response = response.await?;
                Ok::<_, std::convert::Infallible>(on_body_end(response, move |_| {
                    ended.request_ended()
                }))
            }
        });
    let evicted = admitted.connection.evicted.clone();
    let _admitted = admitted;
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    let connection = http.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        // A newcomer needed its place: closed at once.
        () = evicted.cancelled() => {}
        () = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

/// Whether `stream`'s whole first request head (up to its blank line, or [`PEEK_BYTES`] of it)
/// arrives within the head deadline. Looked at without reading it (hyper reads it then): at
/// once, then after 1, 2, 4 ... ms, at most 100 ms apart, so a head sent with the connection is
/// seen within a millisecond or two and a dripping one costs a look every 100 ms.
async fn whole_head(stream: &tokio::net::TcpStream) -> bool {
    let deadline = tokio::time::Instant::now() + HEADER_TIMEOUT;
    let mut buf = vec![0u8; PEEK_BYTES];
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        match tokio::time::timeout(left, stream.peek(&mut buf)).await {
            // Closed, failed or out of time.
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return false,
            Ok(Ok(n)) => {
                let head = &buf[..n];
                if n == buf.len()
                    || head.windows(4).any(|w| w == b"\r\n\r\n")
                    || head.windows(2).any(|w| w == b"\n\n")
                {
                    return true;
                }
            }
        }
        tokio::time::sleep(pause.min(left)).await;
        pause = (pause * 2).min(std::time::Duration::from_millis(100));
    }
}

/// The peer address of the connection a request came on (a request extension).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub(crate) IpAddr);
