//! Anthropic rate-limit headers, for subscription (unified) and API-key accounts.
//!
//! Subscription accounts (Claude Pro/Max, as Claude Code uses them) get
//! `anthropic-ratelimit-unified-{5h,7d}-utilization` (a fraction, above 1 when overdrawn) with
//! `-reset` (Unix seconds or RFC 3339), plus an overall `anthropic-ratelimit-unified-reset`
//! and `anthropic-ratelimit-unified-status` (`rejected` once the account is cut off). API keys
//! get `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`
//! with RFC 3339 resets. The worst window or dimension is the signal.

use std::time::{Duration, SystemTime};

use http::HeaderMap;

use super::QuotaSignal;
use super::value::{header, header_number, instant, signal, used_of, worst};

/// Unified windows: utilization header, reset header, window length.
const UNIFIED_WINDOWS: [(&str, &str, Duration); 2] = [
    (
        "anthropic-ratelimit-unified-5h-utilization",
        "anthropic-ratelimit-unified-5h-reset",
        Duration::from_secs(5 * 3600),
    ),
    (
        "anthropic-ratelimit-unified-7d-utilization",
        "anthropic-ratelimit-unified-7d-reset",
        Duration::from_secs(7 * 24 * 3600),
    ),
];

/// API-key dimensions: limit, remaining and reset headers.
const DIMENSIONS: [[&str; 3]; 4] = [
    [
        "anthropic-ratelimit-requests-limit",
        "anthropic-ratelimit-requests-remaining",
        "anthropic-ratelimit-requests-reset",
    ],
    [
        "anthropic-ratelimit-tokens-limit",
        "anthropic-ratelimit-tokens-remaining",
        "anthropic-ratelimit-tokens-reset",
    ],
    [
        "anthropic-ratelimit-input-tokens-limit",
        "anthropic-ratelimit-input-tokens-remaining",
        "anthropic-ratelimit-input-tokens-reset",
    ],
    [
        "anthropic-ratelimit-output-tokens-limit",
        "anthropic-ratelimit-output-tokens-remaining",
        "anthropic-ratelimit-output-tokens-reset",
    ],
];

/// The worst Anthropic window or dimension.
///
/// ```
/// use std::time::UNIX_EPOCH;
/// use context_relay_core::quota::anthropic;
///
/// let mut headers = http::HeaderMap::new();
/// headers.insert("anthropic-ratelimit-unified-5h-utilization", "0.91".parse().unwrap());
/// headers.insert("anthropic-ratelimit-unified-7d-utilization", "0.4".parse().unwrap());
/// assert_eq!(anthropic::from_headers(&headers, UNIX_EPOCH).unwrap().percent_used, 0.91);
/// ```
pub fn from_headers(headers: &HeaderMap, _now: SystemTime) -> Option<QuotaSignal> {
    let unified = unified(headers);
    let api_key = DIMENSIONS
        .iter()
        .map(|dim| dimension(headers, dim))
        .fold(None, worst);
    worst(unified, api_key)
}

fn unified(headers: &HeaderMap) -> Option<QuotaSignal> {
    let overall_reset = header(headers, "anthropic-ratelimit-unified-reset").and_then(instant);
    let rejected = header(headers, "anthropic-ratelimit-unified-status")
        .is_some_and(|s| s.eq_ignore_ascii_case("rejected"));
    let mut found = UNIFIED_WINDOWS
        .iter()
        .map(|(utilization, reset, length)| {
            let used = header_number(headers, *utilization)?;
            let reset = header(headers, *reset).and_then(instant);
            signal(used, reset, Some(*length))
        })
        .fold(None, worst);
    if rejected {
        // The status header is the provider's own verdict and can arrive without any
        // utilization header (or with a stale one below 1).
        let s = found.get_or_insert(QuotaSignal::used(1.0));
        s.percent_used = s.percent_used.max(1.0);
    }
    if let Some(s) = found.as_mut() {
        s.resets_at = s.resets_at.or(overall_reset);
    }
    found
}

fn dimension(headers: &HeaderMap, [limit, remaining, reset]: &[&str; 3]) -> Option<QuotaSignal> {
    let limit = header_number(headers, *limit)?;
    let remaining = header_number(headers, *remaining)?;
    let reset = header(headers, *reset).and_then(instant);
    signal(used_of(limit, remaining)?, reset, None)
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    use super::super::test_headers as headers;

    #[test]
    fn rejected_status_alone_means_exhausted() {
        let h = headers(&[
            ("anthropic-ratelimit-unified-status", "rejected"),
            ("anthropic-ratelimit-unified-reset", "1800000000"),
        ]);
        let s = from_headers(&h, UNIX_EPOCH).unwrap();
        assert_eq!(s.percent_used, 1.0);
        assert_eq!(
            s.resets_at,
            Some(UNIX_EPOCH + Duration::from_secs(1_800_000_000))
        );
    }

    #[test]
    fn overall_reset_fills_a_missing_window_reset() {
        let h = headers(&[
            ("anthropic-ratelimit-unified-7d-utilization", "1.2"),
            ("anthropic-ratelimit-unified-reset", "2027-01-15T08:00:00Z"),
        ]);
        let s = from_headers(&h, UNIX_EPOCH).unwrap();
        assert_eq!(s.percent_used, 1.2);
        assert_eq!(s.window, Some(Duration::from_secs(604_800)));
        assert!(s.resets_at.is_some());
    }

    #[test]
    fn zero_limit_dimension_is_ignored() {
        let h = headers(&[
            ("anthropic-ratelimit-requests-limit", "0"),
            ("anthropic-ratelimit-requests-remaining", "0"),
        ]);
        assert_eq!(from_headers(&h, UNIX_EPOCH), None);
    }
}
