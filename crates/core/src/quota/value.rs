//! Lenient readers for the values quota headers carry: numbers, epoch seconds, RFC 3339 and
//! HTTP dates, Go-style durations. Every reader returns `None` on anything it does not
//! understand, so one malformed header can only ever remove a signal.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::AsHeaderName;
use http::{HeaderMap, HeaderValue};

use super::QuotaSignal;

/// The first value of `name`, trimmed; `None` when absent, blank or not UTF-8.
pub(crate) fn header(headers: &HeaderMap, name: impl AsHeaderName) -> Option<&str> {
    text(headers.get(name))
}

/// A header value trimmed; `None` when absent, blank or not UTF-8.
fn text(value: Option<&HeaderValue>) -> Option<&str> {
    let value = std::str::from_utf8(value?.as_bytes()).ok()?.trim();
    (!value.is_empty()).then_some(value)
}

/// A header's first value (found by the caller) as [`header_number`] reads it.
pub(crate) fn value_number(value: Option<&HeaderValue>) -> Option<f64> {
    number(text(value)?)
}

/// A finite, non-negative number. `f64::from_str` accepts `inf` and `NaN`, which no provider
/// means, so they are rejected here.
pub(crate) fn number(s: &str) -> Option<f64> {
    let v: f64 = s.trim().parse().ok()?;
    (v.is_finite() && v >= 0.0).then_some(v)
}

/// The header `name` as a finite, non-negative number.
pub(crate) fn header_number(headers: &HeaderMap, name: impl AsHeaderName) -> Option<f64> {
    number(header(headers, name)?)
}

/// `secs` seconds as a duration, `None` when it does not fit.
pub(crate) fn seconds(secs: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(secs).ok()
}

/// `secs` seconds after `now`.
pub(crate) fn after(now: SystemTime, secs: f64) -> Option<SystemTime> {
    now.checked_add(seconds(secs)?)
}

/// `secs` seconds after the Unix epoch.
pub(crate) fn epoch(secs: f64) -> Option<SystemTime> {
    UNIX_EPOCH.checked_add(seconds(secs)?)
}

/// Values at or above this are Unix timestamps, not delays: a delay of 30 years is not one
/// any server means, while `X-RateLimit-Reset` is epoch seconds at some providers and delta
/// seconds at others.
const EPOCH_THRESHOLD: f64 = 1_000_000_000.0;

/// A reset given as either delta seconds or epoch seconds (see [`EPOCH_THRESHOLD`]).
pub(crate) fn delta_or_epoch(now: SystemTime, v: f64) -> Option<SystemTime> {
    if v >= EPOCH_THRESHOLD {
        epoch(v)
    } else {
        after(now, v)
    }
}

/// A point in time given as epoch seconds or as RFC 3339.
pub(crate) fn instant(s: &str) -> Option<SystemTime> {
    match number(s) {
        Some(v) => epoch(v),
        None => rfc3339(s),
    }
}

/// `Retry-After` (delta seconds or an HTTP date), preceded by the millisecond variant
/// `retry-after-ms` that OpenAI sends because whole seconds are too coarse for it.
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<SystemTime> {
    if let Some(ms) = header_number(headers, "retry-after-ms") {
        return after(now, ms / 1000.0);
    }
    let value = header(headers, "retry-after")?;
    match number(value) {
        Some(secs) => after(now, secs),
        None => httpdate::parse_http_date(value).ok(),
    }
}

/// An RFC 3339 timestamp (`2026-01-02T03:04:05.678Z`, `…+02:00`); a space may replace the `T`.
pub(crate) fn rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.trim().as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let digits = |from: usize, to: usize| -> Option<i64> {
        let part = b.get(from..to)?;
        part.iter().try_fold(0i64, |acc, &c| {
            c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
        })
    };
    let (year, month, day) = (digits(0, 4)?, digits(5, 7)?, digits(8, 10)?);
    let (hour, minute, second) = (digits(11, 13)?, digits(14, 16)?, digits(17, 19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    // 60 is a leap second; it is read as the next second rather than rejected.
    if second > 60 {
        return None;
    }
    let mut rest = &b[19..];
    let mut nanos = 0u32;
    if let Some((b'.', frac)) = rest.split_first() {
        let len = frac.iter().take_while(|c| c.is_ascii_digit()).count();
        if len == 0 {
            return None;
        }
        for (i, &c) in frac[..len].iter().take(9).enumerate() {
            nanos += u32::from(c - b'0') * 10u32.pow(8 - i as u32);
        }
        rest = &frac[len..];
    }
    let offset = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let h = digits_of(*h1, *h2)?;
            let m = digits_of(*m1, *m2)?;
            let secs = h * 3600 + m * 60;
            if *sign == b'+' { secs } else { -secs }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let unix = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
    let base = if unix >= 0 {
        UNIX_EPOCH.checked_add(Duration::from_secs(unix.unsigned_abs()))?
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(unix.unsigned_abs()))?
    };
    base.checked_add(Duration::from_nanos(u64::from(nanos)))
}

fn digits_of(a: u8, b: u8) -> Option<i64> {
    (a.is_ascii_digit() && b.is_ascii_digit())
        .then(|| i64::from(a - b'0') * 10 + i64::from(b - b'0'))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A Go `time.Duration` string as OpenAI prints it (`6m0s`, `12ms`, `1h2m3.5s`, `0.5s`); a
/// bare number is read as seconds.
pub(crate) fn go_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if let Some(secs) = number(s) {
        return seconds(secs);
    }
    let mut rest = s;
    let mut total = 0.0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value = number(&rest[..num_len])?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" | "μs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += value * scale;
    }
    seconds(total)
}

/// A signal with a usage fraction made finite and non-negative; `None` when it cannot be.
pub(crate) fn signal(
    percent_used: f64,
    resets_at: Option<SystemTime>,
    window: Option<Duration>,
) -> Option<QuotaSignal> {
    percent_used.is_finite().then(|| QuotaSignal {
        percent_used: percent_used.max(0.0),
        resets_at,
        window,
    })
}

/// `1 − remaining/limit`; `None` when the limit is not a positive number (OpenAI sends `-1`
/// for dimensions it does not limit).
pub(crate) fn used_of(limit: f64, remaining: f64) -> Option<f64> {
    (limit > 0.0).then(|| 1.0 - remaining / limit)
}

/// The more used of two signals; the first wins a tie, so callers list windows in the order
/// they prefer.
pub(crate) fn worst(a: Option<QuotaSignal>, b: Option<QuotaSignal>) -> Option<QuotaSignal> {
    match (a, b) {
        (Some(a), Some(b)) if b.percent_used > a.percent_used => Some(b),
        (Some(a), _) => Some(a),
        (None, b) => b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_reject_non_finite_and_negative() {
        assert_eq!(number(" 12.5 "), Some(12.5));
        for bad in ["inf", "NaN", "-1", "", "1e400", "12%", "0x10"] {
            assert_eq!(number(bad), None, "{bad}");
        }
    }

    #[test]
    fn go_durations() {
        let d = |s| go_duration(s).map(|d| d.as_secs_f64());
        assert_eq!(d("6m0s"), Some(360.0));
        assert_eq!(d("12ms"), Some(0.012));
        assert_eq!(d("1s"), Some(1.0));
        assert_eq!(d("0.5s"), Some(0.5));
        assert_eq!(d("1h2m3.5s"), Some(3723.5));
        assert_eq!(d("7"), Some(7.0));
        for bad in ["", "s", "5x", "1h-2m", "-1s", "1..5s", "m5"] {
            assert_eq!(go_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn rfc3339_forms() {
        let t = |s| rfc3339(s).map(crate::time::to_unix_millis);
        assert_eq!(t("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(t("2026-01-02T03:04:05.678Z"), Some(1_767_323_045_678));
        assert_eq!(t("2026-01-02T05:04:05.678+02:00"), Some(1_767_323_045_678));
        assert_eq!(t("2026-01-02 03:04:05z"), Some(1_767_323_045_000));
        for bad in [
            "2026-13-02T03:04:05Z",
            "2026-01-02T03:04:05",
            "2026-01-02",
            "garbage string here",
            "2026-01-02T03:04:05.Z",
        ] {
            assert_eq!(rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn worst_prefers_first_on_tie() {
        let a = QuotaSignal::used(0.5);
        let b = QuotaSignal {
            window: Some(Duration::from_secs(1)),
            ..QuotaSignal::used(0.5)
        };
        assert_eq!(worst(Some(a), Some(b)), Some(a));
        assert_eq!(
            worst(Some(a), Some(QuotaSignal::used(0.6))),
            Some(QuotaSignal::used(0.6))
        );
        assert_eq!(worst(None, Some(a)), Some(a));
    }
}
