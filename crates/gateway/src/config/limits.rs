//! `[limits]`: the time and memory bounds of the gateway.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// A duration given in seconds (integer or fractional) in the configuration file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Secs(pub f64);

impl Secs {
    /// The duration; out-of-range values are clamped (loading rejects them anyway).
    pub fn duration(self) -> Duration {
        Duration::try_from_secs_f64(self.0.clamp(0.0, MAX_SECS)).unwrap_or(Duration::ZERO)
    }

    pub(crate) fn in_range(self) -> bool {
        self.0.is_finite() && (MIN_SECS..=MAX_SECS).contains(&self.0)
    }
}

impl<'de> Deserialize<'de> for Secs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        f64::deserialize(d).map(Secs)
    }
}

/// Smallest configurable duration (1 ms).
pub(crate) const MIN_SECS: f64 = 0.001;
/// Largest configurable duration (one day).
pub(crate) const MAX_SECS: f64 = 86_400.0;

/// `[limits]`: the time and memory bounds of the gateway.
///
/// | key | default | bounds |
/// |---|---|---|
/// | `client_header_timeout_secs` | 30 | a connection's first request head, whatever the protocol; a connection idle as long is closed |
/// | `client_body_timeout_secs` | 60 | between two chunks of a request body |
/// | `client_write_timeout_secs` | 60 | a write to a client waiting for it to read; the connection is closed beyond |
/// | `request_timeout_secs` | 3600 | a whole request, from its head to the end of its response body |
/// | `upstream_connect_timeout_secs` | 10 | connecting to a provider |
/// | `upstream_head_timeout_secs` | 600 | from sending to the provider's response headers |
/// | `upstream_idle_timeout_secs` | 300 | between two chunks of a provider's response body |
/// | `shutdown_timeout_secs` | 30 | draining on shutdown, then streams are cut |
/// | `max_connections` | 10000 | connections that sent a request (as many more may wait for their first) |
/// | `max_buffered_bytes` | 1 GiB | request bytes held by all requests together (buffers, decoded bodies, room for one rewritten copy each; keep it at least twice `max_request_bytes` and [`BUFFER_SLACK`]) |
///
/// Durations are seconds, integer or fractional (`0.5`), from 1 ms to one day.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Time for a connection to send its first complete request head, whatever the protocol,
    /// and the longest it stays open with no request in flight (30 s).
    #[serde(default = "secs::<30>")]
    pub client_header_timeout_secs: Secs,
    /// Time between two chunks of a request body (60 s).
    #[serde(default = "secs::<60>")]
    pub client_body_timeout_secs: Secs,
    /// Time a write to a client may wait for the client to read (60 s); beyond it the
    /// connection is closed, and the provider's stream it relayed with it.
    #[serde(default = "secs::<60>")]
    pub client_write_timeout_secs: Secs,
    /// Time a whole request may take, from its head to the end of its response body
    /// (3600 s): a later response head is a 504, a longer stream is cut.
    #[serde(default = "secs::<3600>")]
    pub request_timeout_secs: Secs,
    /// Time to connect to a provider (10 s).
    #[serde(default = "secs::<10>")]
    pub upstream_connect_timeout_secs: Secs,
    /// Time from sending a request to the provider's response headers (600 s: the first
    /// tokens of a long reasoning turn can take minutes).
    #[serde(default = "secs::<600>")]
    pub upstream_head_timeout_secs: Secs,
    /// Time between two chunks of a provider's response body (300 s).
    #[serde(default = "secs::<300>")]
    pub upstream_idle_timeout_secs: Secs,
    /// Time shutdown waits for in-flight requests before cutting them (30 s).
    #[serde(default = "secs::<30>")]
    pub shutdown_timeout_secs: Secs,
    /// Connections that have sent a request (10 000); a connection takes its slot with its
    /// first request head, and as many more may wait for theirs (the oldest is closed beyond).
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Request bytes buffered by all requests together; beyond it requests get a 503 with
    /// `retry-after` (1 GiB).
    #[serde(default = "default_max_buffered_bytes")]
    pub max_buffered_bytes: u64,
}

fn secs<const N: u32>() -> Secs {
    Secs(f64::from(N))
}

fn default_max_connections() -> usize {
    10_000
}

fn default_max_buffered_bytes() -> u64 {
    1 << 30
}

/// What a lone request may take from `max_buffered_bytes` beyond twice its body: the buffer's
/// spare bytes in front (a `model` rewritten longer in place) and a rewritten copy grown by the
/// target's model name. A budget of twice `max_request_bytes` and this serves a lone body of
/// the largest size allowed (an uncompressed one; a compressed one also holds its compressed
/// bytes).
pub const BUFFER_SLACK: u64 = 64 << 10;

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            client_header_timeout_secs: secs::<30>(),
            client_body_timeout_secs: secs::<60>(),
            client_write_timeout_secs: secs::<60>(),
            request_timeout_secs: secs::<3600>(),
            upstream_connect_timeout_secs: secs::<10>(),
            upstream_head_timeout_secs: secs::<600>(),
            upstream_idle_timeout_secs: secs::<300>(),
            shutdown_timeout_secs: secs::<30>(),
            max_connections: default_max_connections(),
            max_buffered_bytes: default_max_buffered_bytes(),
        }
    }
}

impl LimitsConfig {
    /// The durations with their key names (for validation).
    pub(crate) fn durations(&self) -> [(&'static str, Secs); 8] {
        [
            (
                "client_header_timeout_secs",
                self.client_header_timeout_secs,
            ),
            ("client_body_timeout_secs", self.client_body_timeout_secs),
            ("client_write_timeout_secs", self.client_write_timeout_secs),
            ("request_timeout_secs", self.request_timeout_secs),
            (
                "upstream_connect_timeout_secs",
                self.upstream_connect_timeout_secs,
            ),
            (
                "upstream_head_timeout_secs",
                self.upstream_head_timeout_secs,
            ),
            (
                "upstream_idle_timeout_secs",
                self.upstream_idle_timeout_secs,
            ),
            ("shutdown_timeout_secs", self.shutdown_timeout_secs),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_fractions() {
        let l: LimitsConfig = toml::from_str("").unwrap();
        assert_eq!(l, LimitsConfig::default());
        assert_eq!(
            l.upstream_head_timeout_secs.duration(),
            Duration::from_secs(600)
        );
        assert_eq!(l.max_buffered_bytes, 1 << 30);
        let l: LimitsConfig = toml::from_str("client_header_timeout_secs = 0.25").unwrap();
        assert_eq!(
            l.client_header_timeout_secs.duration(),
            Duration::from_millis(250)
        );
        assert!(!Secs(0.0).in_range() && !Secs(f64::NAN).in_range() && !Secs(1e9).in_range());
        assert_eq!(Secs(1e300).duration(), Duration::from_secs(86_400));
    }
}
