//! Gemini API quota errors.
//!
//! The Gemini API answers an exhausted quota with HTTP 429 and a `google.rpc.Status` body:
//! `{"error":{"code":429,"message":…,"status":"RESOURCE_EXHAUSTED","details":[…]}}`. Its
//! `details` name the quota that ran out (`google.rpc.QuotaFailure`), link to the docs
//! (`google.rpc.Help`) and, usually, say when to retry: a `google.rpc.RetryInfo` whose
//! `retryDelay` is a protobuf `Duration` in its JSON form, decimal seconds with an `s` suffix
//! (`"37s"`, `"1.5s"`, up to nine fractional digits). The non-SSE `:streamGenerateContent`
//! wraps the same body in a one-element array.

use std::time::Duration;

use serde_json::Value;

/// The `status` of a `google.rpc.Status` that means "quota used up".
const EXHAUSTED: &str = "RESOURCE_EXHAUSTED";

/// The `@type` of the detail that carries the retry delay.
const RETRY_INFO: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// Whether a `google.rpc.Status` `status` member says the quota is used up.
pub(super) fn is_exhausted(status: &Value) -> bool {
    status.as_str() == Some(EXHAUSTED)
}

/// The `retryDelay` of the first `RetryInfo` in `details` that has a valid one.
pub(super) fn retry_delay(details: &Value) -> Option<Duration> {
    details.as_array()?.iter().find_map(|d| {
        let d = d.as_object()?;
        if d.get("@type")?.as_str()? != RETRY_INFO {
            return None;
        }
        duration(d.get("retryDelay")?.as_str()?)
    })
}

/// A protobuf `Duration` in its JSON form (`"37s"`, `"1.5s"`, `"0.000000001s"`). Negative,
/// signless-garbage and over-precise values give `None`.
fn duration(s: &str) -> Option<Duration> {
    let number = s.strip_suffix('s')?;
    let (whole, frac) = match number.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (number, None),
    };
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs: u64 = whole.parse().ok()?;
    let nanos = match frac {
        None => 0,
        Some(f) if (1..=9).contains(&f.len()) && f.bytes().all(|b| b.is_ascii_digit()) => {
            let digits: u32 = f.parse().ok()?;
            digits * 10u32.pow(9 - f.len() as u32)
        }
        Some(_) => return None,
    };
    Some(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn durations() {
        assert_eq!(duration("37s"), Some(Duration::from_secs(37)));
        assert_eq!(duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(duration("0.000000001s"), Some(Duration::from_nanos(1)));
        assert_eq!(duration("0s"), Some(Duration::ZERO));
        for bad in [
            "",
            "s",
            "37",
            "-1s",
            "+1s",
            "1.s",
            ".5s",
            "1.0000000001s",
            "1e3s",
            " 1s",
            "1 s",
            "1.5ms",
            "99999999999999999999s",
        ] {
            assert_eq!(duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn retry_info_among_other_details() {
        let details = serde_json::json!([
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "soon"},
            {"@type": "type.googleapis.com/google.rpc.Help", "retryDelay": "5s"},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "22s"},
        ]);
        assert_eq!(retry_delay(&details), Some(Duration::from_secs(22)));
        assert_eq!(retry_delay(&serde_json::json!([])), None);
        assert_eq!(retry_delay(&serde_json::json!({"retryDelay": "1s"})), None);
    }

    proptest! {
        #[test]
        fn round_trips_what_protobuf_writes(secs in 0u64..10_000_000, nanos in 0u32..1_000_000_000) {
            // protobuf writes 0, 3, 6 or 9 fractional digits.
            let text = match nanos {
                0 => format!("{secs}s"),
                n if n % 1_000_000 == 0 => format!("{secs}.{:03}s", n / 1_000_000),
                n if n % 1_000 == 0 => format!("{secs}.{:06}s", n / 1_000),
                n => format!("{secs}.{n:09}s"),
            };
            prop_assert_eq!(duration(&text), Some(Duration::new(secs, nanos)));
        }
    }
}
