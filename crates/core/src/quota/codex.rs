//! Codex (ChatGPT subscription) usage headers.
//!
//! The ChatGPT backend reports two windows on every response: `primary` (the short one, five
//! hours) and `secondary` (the weekly one), each as `x-codex-{primary,secondary}-used-percent`
//! (0–100), `-window-minutes` and `-reset-at` (Unix seconds) or `-reset-after-seconds`. The
//! account is cut off when either window is full, so the more used window is the signal.

use std::time::SystemTime;

use http::{HeaderMap, HeaderName};

use super::QuotaSignal;
use super::value::{after, epoch, header_number, seconds, signal, worst};

/// The signal of the more used Codex window (the primary one on a tie).
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use context_relay_core::quota::codex;
///
/// let mut headers = http::HeaderMap::new();
/// headers.insert("x-codex-primary-used-percent", "88".parse().unwrap());
/// headers.insert("x-codex-primary-reset-at", "1800000000".parse().unwrap());
/// headers.insert("x-codex-secondary-used-percent", "20".parse().unwrap());
/// let signal = codex::from_headers(&headers, UNIX_EPOCH).unwrap();
/// assert_eq!(signal.percent_used, 0.88);
/// assert_eq!(signal.resets_at, Some(UNIX_EPOCH + Duration::from_secs(1_800_000_000)));
/// ```
pub fn from_headers(headers: &HeaderMap, now: SystemTime) -> Option<QuotaSignal> {
    worst(
        window(headers, now, &PRIMARY),
        window(headers, now, &SECONDARY),
    )
}

/// The header names of one window, parsed once (a lookup by `&str` parses the name every time).
struct Window {
    used: HeaderName,
    reset_at: HeaderName,
    reset_after: HeaderName,
    minutes: HeaderName,
}

const PRIMARY: Window = Window {
    used: HeaderName::from_static("x-codex-primary-used-percent"),
    reset_at: HeaderName::from_static("x-codex-primary-reset-at"),
    reset_after: HeaderName::from_static("x-codex-primary-reset-after-seconds"),
    minutes: HeaderName::from_static("x-codex-primary-window-minutes"),
};

const SECONDARY: Window = Window {
    used: HeaderName::from_static("x-codex-secondary-used-percent"),
    reset_at: HeaderName::from_static("x-codex-secondary-reset-at"),
    reset_after: HeaderName::from_static("x-codex-secondary-reset-after-seconds"),
    minutes: HeaderName::from_static("x-codex-secondary-window-minutes"),
};

fn window(headers: &HeaderMap, now: SystemTime, names: &Window) -> Option<QuotaSignal> {
    let used = header_number(headers, &names.used)?;
    let resets_at = header_number(headers, &names.reset_at)
        .and_then(epoch)
        .or_else(|| header_number(headers, &names.reset_after).and_then(|s| after(now, s)));
    let window = header_number(headers, &names.minutes).and_then(|m| seconds(m * 60.0));
    signal(used / 100.0, resets_at, window)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    use super::super::test_headers as headers;

    #[test]
    fn secondary_wins_when_more_used() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        let h = headers(&[
            ("x-codex-primary-used-percent", "10"),
            ("x-codex-secondary-used-percent", "96.5"),
            ("x-codex-secondary-window-minutes", "10080"),
            ("x-codex-secondary-reset-after-seconds", "60"),
        ]);
        let s = from_headers(&h, now).unwrap();
        assert_eq!(s.percent_used, 0.965);
        assert_eq!(s.window, Some(Duration::from_secs(7 * 24 * 3600)));
        assert_eq!(s.resets_at, Some(now + Duration::from_secs(60)));
    }

    #[test]
    fn malformed_window_is_skipped() {
        let h = headers(&[
            ("x-codex-primary-used-percent", "NaN"),
            ("x-codex-secondary-used-percent", "40"),
        ]);
        assert_eq!(
            from_headers(&h, UNIX_EPOCH).map(|s| s.percent_used),
            Some(0.4)
        );
        let h = headers(&[("x-codex-primary-used-percent", "-3")]);
        assert_eq!(from_headers(&h, UNIX_EPOCH), None);
    }
}
