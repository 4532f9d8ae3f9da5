//! OpenAI API rate-limit headers.
//!
//! `x-ratelimit-{limit,remaining}-{requests,tokens}` with `x-ratelimit-reset-{requests,tokens}`
//! as Go durations (`6m0s`, `12ms`). Usage is `1 − remaining/limit` and the worst dimension is
//! the signal; a limit of `-1` (or any non-positive one) means "not limited" and is skipped.

use std::time::SystemTime;

use http::HeaderMap;

use super::QuotaSignal;
use super::value::{go_duration, header, header_number, signal, used_of, worst};

/// Limit, remaining and reset headers of each dimension.
const DIMENSIONS: [[&str; 3]; 2] = [
    [
        "x-ratelimit-limit-requests",
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-requests",
    ],
    [
        "x-ratelimit-limit-tokens",
        "x-ratelimit-remaining-tokens",
        "x-ratelimit-reset-tokens",
    ],
];

/// The worst OpenAI dimension.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use context_relay_core::quota::openai;
///
/// let mut headers = http::HeaderMap::new();
/// headers.insert("x-ratelimit-limit-tokens", "1000".parse().unwrap());
/// headers.insert("x-ratelimit-remaining-tokens", "100".parse().unwrap());
/// headers.insert("x-ratelimit-reset-tokens", "6m0s".parse().unwrap());
/// let signal = openai::from_headers(&headers, UNIX_EPOCH).unwrap();
/// assert_eq!(signal.percent_used, 0.9);
/// assert_eq!(signal.resets_at, Some(UNIX_EPOCH + Duration::from_secs(360)));
/// ```
pub fn from_headers(headers: &HeaderMap, now: SystemTime) -> Option<QuotaSignal> {
    DIMENSIONS
        .iter()
        .map(|dim| dimension(headers, now, dim))
        .fold(None, worst)
}

fn dimension(
    headers: &HeaderMap,
    now: SystemTime,
    [limit, remaining, reset]: &[&str; 3],
) -> Option<QuotaSignal> {
    // A negative limit fails `header_number`, which is exactly "not limited".
    let limit = header_number(headers, *limit)?;
    let remaining = header_number(headers, *remaining)?;
    let reset = header(headers, *reset)
        .and_then(go_duration)
        .and_then(|d| now.checked_add(d));
    signal(used_of(limit, remaining)?, reset, None)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    use super::super::test_headers as headers;

    #[test]
    fn unlimited_dimension_is_skipped() {
        let h = headers(&[
            ("x-ratelimit-limit-requests", "-1"),
            ("x-ratelimit-remaining-requests", "-1"),
            ("x-ratelimit-limit-tokens", "200"),
            ("x-ratelimit-remaining-tokens", "150"),
            ("x-ratelimit-reset-tokens", "12ms"),
        ]);
        let s = from_headers(&h, UNIX_EPOCH).unwrap();
        assert_eq!(s.percent_used, 0.25);
        assert_eq!(s.resets_at, Some(UNIX_EPOCH + Duration::from_millis(12)));
    }

    #[test]
    fn remaining_above_limit_clamps_to_zero() {
        let h = headers(&[
            ("x-ratelimit-limit-requests", "10"),
            ("x-ratelimit-remaining-requests", "20"),
        ]);
        assert_eq!(from_headers(&h, UNIX_EPOCH).unwrap().percent_used, 0.0);
    }
}
