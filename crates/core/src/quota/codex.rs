//! Codex (ChatGPT subscription) usage headers.
//!
//! The ChatGPT backend reports two windows on every response: `primary` (the short one, five
//! hours) and `secondary` (the weekly one), each as `x-codex-{primary,secondary}-used-percent`
//! (0–100), `-window-minutes` and `-reset-at` (Unix seconds) or `-reset-after-seconds`. The
//! account is cut off when either window is full, so the more used window is the signal.

use std::time::SystemTime;

use http::{HeaderMap, HeaderValue};

use super::QuotaSignal;
use super::value::{after, epoch, seconds, signal, value_number, worst};

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
    let [primary, secondary] = Values::read(headers);
    worst(primary.signal(now), secondary.signal(now))
}

/// The first value of each header of one window.
#[derive(Default)]
struct Values<'h> {
    used: Option<&'h HeaderValue>,
    reset_at: Option<&'h HeaderValue>,
    reset_after: Option<&'h HeaderValue>,
    minutes: Option<&'h HeaderValue>,
}

impl<'h> Values<'h> {
    /// Both windows' values, read in one pass over the headers: an answer carries eight
    /// Codex headers among its others, and a look-up per name hashes the name each time.
    fn read(headers: &'h HeaderMap) -> [Self; 2] {
        let mut windows = [Self::default(), Self::default()];
        for (name, value) in headers {
            let Some(rest) = name.as_str().strip_prefix("x-codex-") else {
                continue;
            };
            let (window, field) = match rest.split_once('-') {
                Some(("primary", field)) => (&mut windows[0], field),
                Some(("secondary", field)) => (&mut windows[1], field),
                _ => continue,
            };
            let slot = match field {
                "used-percent" => &mut window.used,
                "reset-at" => &mut window.reset_at,
                "reset-after-seconds" => &mut window.reset_after,
                "window-minutes" => &mut window.minutes,
                _ => continue,
            };
            // The first value, as `HeaderMap::get` gives it.
            slot.get_or_insert(value);
        }
        windows
    }

    fn signal(&self, now: SystemTime) -> Option<QuotaSignal> {
        let used = value_number(self.used)?;
        let resets_at = value_number(self.reset_at)
            .and_then(epoch)
            .or_else(|| value_number(self.reset_after).and_then(|s| after(now, s)));
        let window = value_number(self.minutes).and_then(|m| seconds(m * 60.0));
        signal(used / 100.0, resets_at, window)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    use super::super::test_headers as headers;
    use super::super::value::header_number;
    use proptest::prelude::*;

    /// The windows read with one look-up per header name, as before the single pass.
    fn by_lookups(headers: &HeaderMap, now: SystemTime) -> Option<QuotaSignal> {
        let window = |w: &str| {
            let name = |f: &str| format!("x-codex-{w}-{f}");
            let used = header_number(headers, name("used-percent"))?;
            let resets_at = header_number(headers, name("reset-at"))
                .and_then(epoch)
                .or_else(|| {
                    header_number(headers, name("reset-after-seconds")).and_then(|s| after(now, s))
                });
            let window =
                header_number(headers, name("window-minutes")).and_then(|m| seconds(m * 60.0));
            signal(used / 100.0, resets_at, window)
        };
        worst(window("primary"), window("secondary"))
    }

    proptest! {
        #[test]
        fn one_pass_reads_what_lookups_read(
            pairs in proptest::collection::vec(
                (
                    prop_oneof![
                        Just("x-codex-primary-used-percent"),
                        Just("x-codex-primary-reset-at"),
                        Just("x-codex-primary-reset-after-seconds"),
                        Just("x-codex-primary-window-minutes"),
                        Just("x-codex-secondary-used-percent"),
                        Just("x-codex-secondary-reset-at"),
                        Just("x-codex-secondary-reset-after-seconds"),
                        Just("x-codex-secondary-window-minutes"),
                        Just("x-codex-primary"),
                        Just("x-codex-tertiary-used-percent"),
                        Just("x-codex-primary-used"),
                        Just("x-request-id"),
                    ],
                    prop_oneof![
                        "[0-9]{1,3}(\\.[0-9])?",
                        "[0-9]{9,10}",
                        Just(" 42 ".to_owned()),
                        Just("".to_owned()),
                        Just("NaN".to_owned()),
                        Just("-1".to_owned()),
                        "[ -~]{0,6}",
                    ],
                ),
                0..14,
            ),
            now in 0u64..4_000_000_000,
        ) {
            let mut h = HeaderMap::new();
            for (name, value) in &pairs {
                h.append(*name, HeaderValue::from_str(value).unwrap());
            }
            let now = UNIX_EPOCH + Duration::from_secs(now);
            prop_assert_eq!(from_headers(&h, now), by_lookups(&h, now));
        }
    }

    #[test]
    fn the_first_of_repeated_values_counts() {
        let mut h = HeaderMap::new();
        h.append(
            "x-codex-primary-used-percent",
            HeaderValue::from_static("90"),
        );
        h.append(
            "x-codex-primary-used-percent",
            HeaderValue::from_static("10"),
        );
        assert_eq!(
            from_headers(&h, UNIX_EPOCH).map(|s| s.percent_used),
            Some(0.9)
        );
    }

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
