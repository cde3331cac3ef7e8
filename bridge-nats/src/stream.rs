//! The events stream: made by whichever comes first, an export or a follower.

use std::time::Duration;

use async_nats::jetstream;

/// How long a stream made by a follower keeps events (an export makes it with its own limits).
pub(crate) const DEFAULT_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// How many bytes of events a stream made by a follower keeps.
pub(crate) const DEFAULT_MAX_BYTES: i64 = 1 << 30;

/// The stream `name` on subjects `rho.>`, made if absent (file storage, the oldest events dropped
/// past `max_age` or `max_bytes`, a two-minute duplicate window, direct gets); an existing one
/// is used as it is.
pub(crate) async fn ensure(
    context: &jetstream::Context,
    name: &str,
    max_age: Duration,
    max_bytes: i64,
) -> Result<jetstream::stream::Stream, String> {
    let config = jetstream::stream::Config {
        name: name.to_owned(),
        subjects: vec!["rho.>".into()],
        max_age,
        max_bytes,
        discard: jetstream::stream::DiscardPolicy::Old,
        duplicate_window: Duration::from_secs(120),
        storage: jetstream::stream::StorageType::File,
        allow_direct: true,
        ..Default::default()
    };
    context
        .get_or_create_stream(config)
        .await
        .map_err(|e| format!("stream {name}: {e}"))
}
