//! Error bodies that say "this account is out of quota", with the reset they carry.
//!
//! - Codex (ChatGPT backend): `{"error":{"type":"usage_limit_reached","resets_at":<unix s>,
//!   "resets_in_seconds":<s>,…}}`, sometimes with a status other than 429;
//! - Anthropic: `{"type":"error","error":{"type":"rate_limit_error",…}}`;
//! - OpenAI: `{"error":{"code":"rate_limit_exceeded",…}}`.

use std::time::SystemTime;

use serde::Deserialize;

use super::value::{after, epoch};

/// Error bodies are a few hundred bytes; anything much larger is not one, and is not worth
/// parsing on the response path.
const MAX_ERROR_BODY: usize = 64 * 1024;

const LIMIT_TYPES: [&str; 3] = [
    "usage_limit_reached",
    "rate_limit_error",
    "rate_limit_exceeded",
];

#[derive(Deserialize)]
struct Envelope {
    error: Option<Error>,
}

#[derive(Deserialize)]
struct Error {
    #[serde(default, rename = "type")]
    kind: serde_json::Value,
    #[serde(default)]
    code: serde_json::Value,
    #[serde(default)]
    resets_at: serde_json::Value,
    #[serde(default)]
    resets_in_seconds: serde_json::Value,
}

/// A quota error body: `Some(reset)` when `body` is one (the reset may be unknown).
pub(crate) fn limit_reached(body: &[u8], now: SystemTime) -> Option<Option<SystemTime>> {
    if body.len() > MAX_ERROR_BODY {
        return None;
    }
    let error = serde_json::from_slice::<Envelope>(body).ok()?.error?;
    let is_limit = |v: &serde_json::Value| v.as_str().is_some_and(|s| LIMIT_TYPES.contains(&s));
    if !is_limit(&error.kind) && !is_limit(&error.code) {
        return None;
    }
    let finite = |v: &serde_json::Value| v.as_f64().filter(|v| v.is_finite() && *v >= 0.0);
    // The relative value is preferred: it does not depend on our clock agreeing with theirs.
    let reset = finite(&error.resets_in_seconds)
        .and_then(|s| after(now, s))
        .or_else(|| finite(&error.resets_at).and_then(epoch));
    Some(reset)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn codex_usage_limit() {
        let now = UNIX_EPOCH + Duration::from_secs(10);
        let body = br#"{"error":{"type":"usage_limit_reached","message":"limit","plan_type":"plus","resets_at":1800000000,"resets_in_seconds":600}}"#;
        assert_eq!(
            limit_reached(body, now),
            Some(Some(now + Duration::from_secs(600)))
        );
        let body = br#"{"error":{"type":"usage_limit_reached","resets_at":1800000000}}"#;
        assert_eq!(
            limit_reached(body, now),
            Some(Some(UNIX_EPOCH + Duration::from_secs(1_800_000_000)))
        );
    }

    #[test]
    fn anthropic_and_openai_bodies() {
        let body = br#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#;
        assert_eq!(limit_reached(body, UNIX_EPOCH), Some(None));
        let body = br#"{"error":{"message":"x","type":"requests","code":"rate_limit_exceeded"}}"#;
        assert_eq!(limit_reached(body, UNIX_EPOCH), Some(None));
    }

    #[test]
    fn other_errors_and_garbage_are_not_limits() {
        for body in [
            &br#"{"error":{"type":"invalid_request_error"}}"#[..],
            br#"{"error":"usage_limit_reached"}"#,
            br#"{"error":{"type":"usage_limit_reached","resets_in_seconds":-5,"resets_at":"soon"}}"#,
            b"data: {}",
            b"",
        ] {
            let got = limit_reached(body, UNIX_EPOCH);
            assert!(got.is_none() || got == Some(None), "{:?}", String::from_utf8_lossy(body));
        }
        assert_eq!(
            limit_reached(br#"{"error":{"type":"invalid_request_error"}}"#, UNIX_EPOCH),
            None
        );
    }
}
