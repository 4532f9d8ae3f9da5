//! Quota signals read from provider responses (DESIGN §6), as far as the account pool needs them.
//!
//! This is the gateway's small local parser: Codex `x-codex-{primary,secondary}-*` headers and
//! the Anthropic unified `anthropic-ratelimit-unified-{5h,7d}-*` headers, plus the reset an
//! exhausted account announces in a 429 (`usage_limit_reached` body, `retry-after`). It is kept
//! in this one file so that `context_relay_core::quota::from_headers` can replace it.
//! Malformed values are ignored, never an error.
//!
//! ```
//! use std::time::{Duration, UNIX_EPOCH};
//! use http::HeaderMap;
//! use context_relay_gateway::config::QuotaFormat;
//! use context_relay_gateway::quota::from_headers;
//!
//! let mut h = HeaderMap::new();
//! h.insert("x-codex-primary-used-percent", "42.5".parse().unwrap());
//! h.insert("x-codex-primary-reset-at", "1800000000".parse().unwrap());
//! let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
//! let s = from_headers(QuotaFormat::Auto, &h, now).unwrap();
//! assert_eq!(s.percent_used, 0.425);
//! assert_eq!(s.resets_at, Some(UNIX_EPOCH + Duration::from_secs(1_800_000_000)));
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use context_relay_core::QuotaSignal;
use http::HeaderMap;

use crate::config::QuotaFormat;

/// The quota signal of a response's headers, if `format` (or `auto`) finds one.
pub fn from_headers(
    format: QuotaFormat,
    headers: &HeaderMap,
    now: SystemTime,
) -> Option<QuotaSignal> {
    match format {
        QuotaFormat::Codex => codex(headers, now),
        QuotaFormat::Anthropic => anthropic(headers),
        QuotaFormat::Auto => codex(headers, now).or_else(|| anthropic(headers)),
        // Read by the core parsers once they are wired in; until then only 429s count.
        QuotaFormat::Openai | QuotaFormat::Ietf | QuotaFormat::None => None,
    }
}

fn header_f64(headers: &HeaderMap, name: &str) -> Option<f64> {
    headers
        .get(name)?
        .to_str()
        .ok()?
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
}

fn epoch(secs: f64) -> Option<SystemTime> {
    // Values far beyond any real reset (year ~2500) are treated as malformed.
    (0.0..17_000_000_000.0)
        .contains(&secs)
        .then(|| UNIX_EPOCH + Duration::from_secs_f64(secs))
}

fn codex(headers: &HeaderMap, now: SystemTime) -> Option<QuotaSignal> {
    ["primary", "secondary"]
        .iter()
        .filter_map(|w| {
            let used = header_f64(headers, &format!("x-codex-{w}-used-percent"))? / 100.0;
            let resets_at = header_f64(headers, &format!("x-codex-{w}-reset-at"))
                .and_then(epoch)
                .or_else(|| {
                    header_f64(headers, &format!("x-codex-{w}-reset-after-seconds"))
                        .map(|s| now + Duration::from_secs_f64(s.min(1e9)))
                });
            let window = header_f64(headers, &format!("x-codex-{w}-window-minutes"))
                .map(|m| Duration::from_secs_f64(m.min(1e9) * 60.0));
            Some(QuotaSignal {
                percent_used: used,
                resets_at,
                window,
            })
        })
        .reduce(|a, b| {
            if b.percent_used > a.percent_used {
                b
            } else {
                a
            }
        })
}

fn anthropic(headers: &HeaderMap) -> Option<QuotaSignal> {
    [("5h", 5 * 3600), ("7d", 7 * 24 * 3600)]
        .iter()
        .filter_map(|(w, secs)| {
            let used = header_f64(
                headers,
                &format!("anthropic-ratelimit-unified-{w}-utilization"),
            )?;
            let resets_at = header_f64(headers, &format!("anthropic-ratelimit-unified-{w}-reset"))
                .or_else(|| header_f64(headers, "anthropic-ratelimit-unified-reset"))
                .and_then(epoch);
            Some(QuotaSignal {
                percent_used: used,
                resets_at,
                window: Some(Duration::from_secs(*secs)),
            })
        })
        .reduce(|a, b| {
            if b.percent_used > a.percent_used {
                b
            } else {
                a
            }
        })
}

/// When an account that answered 429 may be tried again, as announced by the provider: the
/// Codex body's `resets_at` / `resets_in_seconds`, else `retry-after` (seconds), else the reset
/// of the quota headers. `None` when nothing was announced.
pub fn reset_of_429(
    format: QuotaFormat,
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
) -> Option<SystemTime> {
    let from_body = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            let e = v.get("error")?;
            let at = e.get("resets_at").and_then(|x| x.as_f64()).and_then(epoch);
            let r#in = e
                .get("resets_in_seconds")
                .and_then(|x| x.as_f64())
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(|s| now + Duration::from_secs_f64(s.min(1e9)));
            at.or(r#in)
        });
    from_body
        .or_else(|| {
            header_f64(headers, "retry-after").map(|s| now + Duration::from_secs_f64(s.min(1e9)))
        })
        .or_else(|| from_headers(format, headers, now).and_then(|s| s.resets_at))
        .filter(|t| *t > now)
}

/// The error type of a 429 body: Codex `usage_limit_reached`, Anthropic `rate_limit_error`,
/// OpenAI `rate_limit_exceeded`/`insufficient_quota`, … (for logs and metrics).
pub fn error_type_of_429(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let e = v.get("error")?;
    e.get("type")
        .or_else(|| e.get("code"))
        .and_then(|t| t.as_str())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn h(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        m
    }

    fn t(s: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(s)
    }

    #[test]
    fn codex_most_used_window_wins() {
        let m = h(&[
            ("x-codex-primary-used-percent", "20"),
            ("x-codex-primary-window-minutes", "300"),
            ("x-codex-primary-reset-at", "1000"),
            ("x-codex-secondary-used-percent", "97.0"),
            ("x-codex-secondary-window-minutes", "10080"),
            ("x-codex-secondary-reset-after-seconds", "50"),
        ]);
        let s = from_headers(QuotaFormat::Codex, &m, t(100)).unwrap();
        assert_eq!(s.percent_used, 0.97);
        assert_eq!(s.resets_at, Some(t(150)));
        assert_eq!(s.window, Some(Duration::from_secs(10080 * 60)));
        // Anthropic-only parsing does not read Codex headers; `none` reads nothing.
        assert!(from_headers(QuotaFormat::Anthropic, &m, t(100)).is_none());
        assert!(from_headers(QuotaFormat::None, &m, t(100)).is_none());
    }

    #[test]
    fn anthropic_unified() {
        let m = h(&[
            ("anthropic-ratelimit-unified-5h-utilization", "0.5"),
            ("anthropic-ratelimit-unified-7d-utilization", "1.02"),
            ("anthropic-ratelimit-unified-reset", "5000"),
        ]);
        let s = from_headers(QuotaFormat::Auto, &m, t(100)).unwrap();
        assert_eq!(s.percent_used, 1.02);
        assert_eq!(s.resets_at, Some(t(5000)));
        assert_eq!(s.window, Some(Duration::from_secs(7 * 24 * 3600)));
    }

    #[test]
    fn malformed_values_are_ignored() {
        for bad in ["abc", "-5", "NaN", "inf", ""] {
            let m = h(&[("x-codex-primary-used-percent", bad)]);
            assert!(from_headers(QuotaFormat::Auto, &m, t(0)).is_none(), "{bad}");
        }
        let m = h(&[
            ("x-codex-primary-used-percent", "10"),
            ("x-codex-primary-reset-at", "1e300"),
        ]);
        assert_eq!(
            from_headers(QuotaFormat::Auto, &m, t(0)).unwrap().resets_at,
            None
        );
    }

    #[test]
    fn resets_of_429() {
        let codex = br#"{"error":{"type":"usage_limit_reached","resets_in_seconds":30}}"#;
        assert_eq!(
            reset_of_429(QuotaFormat::Auto, &HeaderMap::new(), codex, t(100)),
            Some(t(130))
        );
        let at = br#"{"error":{"type":"usage_limit_reached","resets_at":400}}"#;
        assert_eq!(
            reset_of_429(QuotaFormat::Auto, &HeaderMap::new(), at, t(100)),
            Some(t(400))
        );
        let m = h(&[("retry-after", "7")]);
        assert_eq!(
            reset_of_429(QuotaFormat::Auto, &m, b"", t(100)),
            Some(t(107))
        );
        let m = h(&[
            ("x-codex-primary-used-percent", "100"),
            ("x-codex-primary-reset-at", "900"),
        ]);
        assert_eq!(
            reset_of_429(QuotaFormat::Auto, &m, b"{}", t(100)),
            Some(t(900))
        );
        // A reset in the past is no announcement.
        assert_eq!(reset_of_429(QuotaFormat::Auto, &m, b"{}", t(1000)), None);
        assert_eq!(
            reset_of_429(QuotaFormat::Auto, &HeaderMap::new(), b"x", t(1)),
            None
        );
    }

    #[test]
    fn error_types() {
        assert_eq!(
            error_type_of_429(
                br#"{"type":"error","error":{"type":"rate_limit_error","message":"m"}}"#
            )
            .as_deref(),
            Some("rate_limit_error")
        );
        assert_eq!(
            error_type_of_429(br#"{"error":{"type":"usage_limit_reached"}}"#).as_deref(),
            Some("usage_limit_reached")
        );
        assert_eq!(error_type_of_429(b"busy"), None);
    }

    proptest! {
        #[test]
        fn header_parsing_never_panics(v in "\\PC{0,30}", body in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(val) = http::HeaderValue::from_str(&v) {
                let mut m = HeaderMap::new();
                for name in ["x-codex-primary-used-percent", "x-codex-primary-reset-at",
                             "x-codex-primary-reset-after-seconds", "x-codex-primary-window-minutes",
                             "anthropic-ratelimit-unified-5h-utilization", "retry-after"] {
                    m.insert(name, val.clone());
                }
                let _ = from_headers(QuotaFormat::Auto, &m, t(1));
                let _ = reset_of_429(QuotaFormat::Auto, &m, &body, t(1));
            }
        }
    }
}
