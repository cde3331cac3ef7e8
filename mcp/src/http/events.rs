//! `/events` (the bus as Server-Sent Events, resumable from the journal), `/images` (the bus's
//! recent images) and `/` (the live page): what the HTTP face serves from the bus and the journal.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio_stream::StreamExt;

use super::guard::percent_decoded;

/// This server run's id: its start, Unix milliseconds.
fn run_id() -> String {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
        .to_string()
}

/// The most events one `/events` connection reads back from the journal in one catch-up.
const MAX_REPLAY: u64 = 20_000;

/// How many bytes of events one `/events` connection may have queued for a client that reads
/// slowly: past it the connection waits, its bus subscription lags, and it is caught up from the
/// journal once the client reads again (nothing lost, memory bounded).
const QUEUED_BYTES: usize = 1 << 20;

/// How many bytes of journal lines a catch-up reads at a time.
const REPLAY_PAGE_BYTES: usize = 1 << 20;

/// `/events` connections open at once at most (each may hold [`QUEUED_BYTES`] and a
/// [`REPLAY_PAGE_BYTES`] page); more get 503.
const MAX_EVENT_STREAMS: usize = 128;

/// The seq after which a client wants events: `Last-Event-ID`, else `?after=`, else now. An id
/// is `RUN-SEQ`: one of another run (the server restarted since) means this run from its start;
/// a bare `SEQ` is taken as of this run.
fn resume_after(request: &Request, run: &str) -> Option<u64> {
    let header = request
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let given = header.or_else(|| {
        request
            .uri()
            .query()?
            .split('&')
            .find_map(|pair| pair.strip_prefix("after="))
            .and_then(percent_decoded)
    })?;
    match given.trim().split_once('-') {
        Some((of, seq)) if of == run => seq.parse().ok(),
        Some(_) => Some(0),
        None => given.trim().parse().ok(),
    }
}

/// What `/events` serves: the host, this run's id (the server's start, in ms), and the streams
/// that may still open.
#[derive(Clone)]
struct EventsState {
    host: rho_runtime::Host,
    run: Arc<str>,
    streams: Arc<tokio::sync::Semaphore>,
}

/// One SSE event on its way to the client, holding its bytes' share of the connection's
/// [`QUEUED_BYTES`] until hyper takes it.
struct Queued {
    event: axum::response::sse::Event,
    _bytes: tokio::sync::OwnedSemaphorePermit,
}

/// `GET /events`: the bus as Server-Sent Events, resumable by seq (see the module doc).
async fn events(State(state): State<EventsState>, request: Request) -> Response {
    use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
    let EventsState { host, run, streams } = state;
    let Ok(stream_permit) = streams.try_acquire_owned() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "rho: too many event streams open; retry\n",
        )
            .into_response();
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Queued>();
    let budget = Arc::new(tokio::sync::Semaphore::new(QUEUED_BYTES));
    // Subscribed before anything is read back: every event is either in the journal up to
    // `now` or comes live after it.
    let mut live = host.subscribe();
    let now = host.bus().last_seq();
    // A seq beyond this run's is of an earlier run of the server: this run from its start.
    let after = resume_after(&request, &run)
        .map(|seq| if seq > now { 0 } else { seq })
        .unwrap_or(now);
    tokio::spawn(async move {
        let _stream_permit = stream_permit;
        // Waits for room in the connection's byte budget (an event larger than the whole budget
        // takes all of it), then queues; false once the client is gone.
        let queue = async |event: SseEvent, bytes: usize| {
            let Ok(permit) = budget
                .clone()
                .acquire_many_owned(bytes.clamp(1, QUEUED_BYTES) as u32)
                .await
            else {
                return false;
            };
            tx.send(Queued {
                event,
                _bytes: permit,
            })
            .is_ok()
        };
        // At once, so the client knows the stream is live (a response's head may wait for its
        // first bytes).
        if !queue(SseEvent::default().comment("rho events"), 1).await {
            return;
        }
        let mut last = after;
        let send = async |event: &rho_runtime::Event, last: &mut u64| {
            if event.seq <= *last {
                return true;
            }
            *last = event.seq;
            let data = serde_json::to_string(event).unwrap_or_default();
            let bytes = data.len();
            let event = SseEvent::default()
                .id(format!("{run}-{}", event.seq))
                .data(data);
            queue(event, bytes).await
        };
        // Reads back `from..=to` from the journal, a page of REPLAY_PAGE_BYTES at a time, so
        // neither a long run nor large events make a connection hold much; the last
        // MAX_REPLAY events at most. False once the client is gone.
        let catch_up = async |from: u64, to: u64, last: &mut u64| {
            let from = from.max(to.saturating_sub(MAX_REPLAY - 1));
            let opened = {
                let host = host.clone();
                tokio::task::spawn_blocking(move || host.replay(from, to)).await
            };
            let Ok(Some(Ok(mut replay))) = opened else {
                return true;
            };
            loop {
                let read = tokio::task::spawn_blocking(move || {
                    let page = replay.page(REPLAY_PAGE_BYTES);
                    (replay, page)
                })
                .await;
                let Ok((rest, Ok(page))) = read else {
                    return true;
                };
                if page.is_empty() {
                    return true;
                }
                for event in &page {
                    if !send(event, last).await {
                        return false;
                    }
                }
                replay = rest;
            }
        };
        if !catch_up(after + 1, now, &mut last).await {
            return;
        }
        while let Some(item) = live.recv().await {
            let open = match item {
                rho_runtime::BusItem::Event(event) => send(&event, &mut last).await,
                rho_runtime::BusItem::Lagged { .. } => {
                    let now = host.bus().last_seq();
                    catch_up(last + 1, now, &mut last).await
                }
            };
            if !open {
                return;
            }
        }
    });
    let stream = tokio_stream::wrappers::UnboundedReceiverStream::new(rx)
        .map(|queued| Ok::<_, std::convert::Infallible>(queued.event));
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// The live page (`--web`): calls running and done, images, per-tool health, reloads and
/// quarantines, fed by `/events`.
async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-store"),
            (header::X_FRAME_OPTIONS, "DENY"),
        ],
        include_str!("page.html"),
    )
        .into_response()
}

/// The type an image is served as: a raster type browsers show as an image, anything else
/// (SVG, HTML, types in other cases or with parameters) as bytes to download.
fn served_type(mime: &str) -> &'static str {
    match mime.to_ascii_lowercase().trim() {
        "image/png" => "image/png",
        "image/jpeg" => "image/jpeg",
        "image/gif" => "image/gif",
        "image/webp" => "image/webp",
        _ => "application/octet-stream",
    }
}

/// A kept image's bytes as a response body, shared with the bus (no copy).
struct ImageBytes(Arc<rho_runtime::Image>);

impl AsRef<[u8]> for ImageBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0.bytes
    }
}

/// `GET /images/SHA256`: the bytes of an image a recent call answered (`Bus::image`).
async fn image(
    State(host): State<rho_runtime::Host>,
    axum::extract::Path(sha256): axum::extract::Path<String>,
) -> Response {
    match host.bus().image(&sha256) {
        Some(image) => {
            // A plugin chose these bytes and this type: only raster types a browser shows as
            // images (never SVG or HTML, which can run script at this origin), the rest as bytes
            // to download, and nothing of it may run or be framed.
            let mime = served_type(&image.mime_type).to_owned();
            (
                [
                    (header::CONTENT_TYPE, mime),
                    (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
                    (
                        header::CONTENT_SECURITY_POLICY,
                        "default-src 'none'; sandbox; frame-ancestors 'none'".to_owned(),
                    ),
                    (header::CACHE_CONTROL, "private, max-age=86400".to_owned()),
                ],
                axum::body::Body::from(axum::body::Bytes::from_owner(ImageBytes(image))),
            )
                .into_response()
        }
        None => (StatusCode::NOT_FOUND, "rho: no such recent image\n").into_response(),
    }
}

/// The routes served from `host`'s bus and journal: `/events`, `/images/SHA256`, and with `web`
/// the live page at `/`.
pub(super) fn routes(host: rho_runtime::Host, web: bool) -> axum::Router {
    let mut app = axum::Router::new()
        .route(
            "/events",
            axum::routing::get(events).with_state(EventsState {
                host: host.clone(),
                run: run_id().into(),
                streams: Arc::new(tokio::sync::Semaphore::new(MAX_EVENT_STREAMS)),
            }),
        )
        .route(
            "/images/{sha256}",
            axum::routing::get(image).with_state(host),
        );
    if web {
        app = app.route("/", axum::routing::get(page));
    }
    app
}

#[cfg(test)]
mod tests {
    use super::served_type;

    #[test]
    fn images_are_served_as_images_only_when_browsers_show_them_as_such() {
        assert_eq!(served_type("image/png"), "image/png");
        assert_eq!(served_type("image/SVG+xml"), "application/octet-stream");
        assert_eq!(served_type("text/html"), "application/octet-stream");
    }
}
