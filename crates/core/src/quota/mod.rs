//! Quota signals: "this account is X % used, resets at T", read from response headers and
//! 429 bodies (DESIGN §6).

use std::time::{Duration, SystemTime};

/// Account usage read from one response.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuotaSignal {
    /// Fraction of the quota used: `0.0..=1.0`, may exceed 1 when the provider says so.
    pub percent_used: f64,
    /// When the window that is most used resets, when known.
    pub resets_at: Option<SystemTime>,
    /// Length of that window, when known.
    pub window: Option<Duration>,
}

impl QuotaSignal {
    /// A signal with only a usage fraction.
    pub fn used(percent_used: f64) -> Self {
        Self {
            percent_used,
            resets_at: None,
            window: None,
        }
    }
}
