//! Time helpers: Unix-millisecond conversions and their serde form.
//!
//! Core never reads a clock; callers pass `now` in.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 for times before it, saturating far in the future).
pub fn to_unix_millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The time `ms` milliseconds after the Unix epoch (saturating).
pub fn from_unix_millis(ms: u64) -> SystemTime {
    UNIX_EPOCH
        .checked_add(Duration::from_millis(ms))
        .unwrap_or(UNIX_EPOCH + Duration::from_secs(u64::from(u32::MAX)))
}

/// `serde(with = "…")` module storing a [`SystemTime`] as Unix milliseconds.
pub mod unix_millis {
    use std::time::SystemTime;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Serializes `t` as Unix milliseconds.
    pub fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(super::to_unix_millis(*t))
    }

    /// Deserializes Unix milliseconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        u64::deserialize(d).map(super::from_unix_millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_round_trip() {
        let t = UNIX_EPOCH + Duration::from_millis(1_796_069_796_950);
        assert_eq!(from_unix_millis(to_unix_millis(t)), t);
        assert_eq!(to_unix_millis(UNIX_EPOCH - Duration::from_secs(5)), 0);
    }
}
