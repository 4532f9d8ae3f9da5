//! Error bodies that say "this account is out of quota", with the reset they carry.
//!
//! - Codex (ChatGPT backend): `{"error":{"type":"usage_limit_reached","resets_at":<unix s>,
//!   "resets_in_seconds":<s>,…}}`, sometimes with a status other than 429;
//! - Anthropic: `{"type":"error","error":{"type":"rate_limit_error",…}}`;
//! - OpenAI: `{"error":{"code":"rate_limit_exceeded",…}}`;
//! - Gemini: `{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[…]}}`, its reset
//!   in a `google.rpc.RetryInfo` detail (see [`super::gemini`]), the whole body wrapped in a
//!   one-element array by the non-SSE `:streamGenerateContent`.

use std::time::SystemTime;

use serde::Deserialize;

use super::gemini;
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

/// A body as the providers send it: one envelope, or (Gemini's array streams) a list whose
/// first element is the error. The list is tried first: serde would also read a one-element
/// array as the struct's fields in order.
#[derive(Deserialize)]
#[serde(untagged)]
enum Body {
    Many(Vec<Envelope>),
    One(Envelope),
}

impl Body {
    fn error(self) -> Option<Error> {
        match self {
            Body::One(e) => e.error,
            Body::Many(list) => list.into_iter().next()?.error,
        }
    }
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
    /// Gemini's `google.rpc.Status` code name.
    #[serde(default)]
    status: serde_json::Value,
    /// Gemini's `google.rpc.Status` details.
    #[serde(default)]
    details: serde_json::Value,
}

/// A quota error body: `Some(reset)` when `body` is one (the reset may be unknown).
pub(crate) fn limit_reached(body: &[u8], now: SystemTime) -> Option<Option<SystemTime>> {
    if body.len() > MAX_ERROR_BODY {
        return None;
    }
    let error = serde_json::from_slice::<Body>(body).ok()?.error()?;
    if gemini::is_exhausted(&error.status) {
        return Some(gemini::retry_delay(&error.details).and_then(|d| now.checked_add(d)));
    }
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

    /// The body the Gemini API sends for an exhausted free-tier quota, as captured in
    /// `tests/fixtures/gemini/05-generate_content-429.json`.
    const GEMINI_429: &[u8] = br#"{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.5-flash"},"quotaValue":"10"}]},{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"37s"}]}}"#;

    #[test]
    fn gemini_resource_exhausted() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        assert_eq!(
            limit_reached(GEMINI_429, now),
            Some(Some(now + Duration::from_secs(37)))
        );
        let body = br#"{"error":{"code":429,"message":"Resource exhausted.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1.5s"}]}}"#;
        assert_eq!(
            limit_reached(body, now),
            Some(Some(now + Duration::from_millis(1500)))
        );
        // Without RetryInfo (or with one that cannot be read) the reset is unknown.
        let body = br#"{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}"#;
        assert_eq!(limit_reached(body, now), Some(None));
        let body = br#"{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"-3s"}]}}"#;
        assert_eq!(limit_reached(body, now), Some(None));
        // The non-SSE stream wraps the body in an array.
        let mut wrapped = b"[".to_vec();
        wrapped.extend_from_slice(GEMINI_429);
        wrapped.push(b']');
        assert_eq!(
            limit_reached(&wrapped, now),
            Some(Some(now + Duration::from_secs(37)))
        );
        // Another status of the same envelope is not a quota error.
        let body = br#"{"error":{"code":400,"message":"Invalid thought signature.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"37s"}]}}"#;
        assert_eq!(limit_reached(body, now), None);
        assert_eq!(limit_reached(b"[]", now), None);
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
