//! `Duration` as integer milliseconds in configuration files (`*_ms` keys): the `serde(with)`
//! helpers, and the conversion.

use serde::{Deserialize, Deserializer, Serializer};
use std::time::Duration;

/// `d` in whole milliseconds (saturating).
pub(crate) fn of(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(of(*d))
}

pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    u64::deserialize(d).map(Duration::from_millis)
}
