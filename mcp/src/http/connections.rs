//! Accepting connections: admitted by [`Connections`], served by hyper with bounded header
//! time, closed on stop.

use std::net::IpAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::admission::Connections;
use super::body::on_body_end;

/// How long a client may take to send a request's head, from its connection or from the end of
/// its last response (an idle keep-alive connection included): 5 s.
const HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Accepts connections until `stop`, each admitted by [`Connections`] (a bound in all and per
/// peer address, a newcomer evicting the connection that has waited longest), served by hyper
/// with a bound on the time its request heads may take, with TCP_NODELAY (answers end with small
/// writes, the last SSE chunk, which would otherwise wait for the client's delayed ACK: 40 ms a
/// call). On `stop`, it accepts no more, and returns once every connection has finished its
/// request and closed.
pub(super) async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    stop: CancellationToken,
) {
    let table = Arc::new(Connections::default());
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
        let Some(admitted) = table.admit(peer.ip()) else {
            drop(stream);
            continue;
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set");
        }
        let inner = hyper_util::service::TowerToHyperService::new(app.clone());
        let connection = admitted.connection.clone();
        let service = hyper::service::service_fn(
            move |mut request: hyper::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(Peer(peer.ip()));
                connection.request_started();
                let ended = connection.clone();
                let response = hyper::service::Service::call(&inner, request);
                async move {
                    let response = response.await?;
                    Ok::<_, std::convert::Infallible>(on_body_end(response, move |_| {
                        ended.request_ended()
                    }))
                }
            },
        );
        let stop = stop.clone();
        connections.spawn(async move {
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
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// The peer address of the connection a request came on (a request extension).
#[derive(Debug, Clone, Copy)]
pub(super) struct Peer(pub(super) IpAddr);
