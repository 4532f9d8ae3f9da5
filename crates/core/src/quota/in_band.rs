//! Quota failures inside a successful stream: a provider that answered `200` and began a
//! stream can still end it with "this account is out of quota" as an event.
//!
//! - OpenAI Responses: `{"type":"response.failed","response":{…,"error":{"code":
//!   "rate_limit_exceeded","message":"… Please try again in 11.054s. …"}}}`, or the stream's
//!   `{"type":"error","code":"rate_limit_exceeded","message":…}`;
//! - Anthropic Messages: `event: error` with `{"type":"error","error":{"type":
//!   "rate_limit_error",…}}`;
//! - Chat Completions (and Gemini): `{"error":{…}}` as the data of an event.
//!
//! The error objects are the ones of the providers' error bodies (see [`super::body`]); the
//! reset is theirs, else the "try again in …" of the message.
//!
//! ```
//! use std::time::{Duration, UNIX_EPOCH};
//! use context_relay_core::quota::{limit_in_band, may_be_failure};
//!
//! let event = br#"{"type":"response.failed","response":{"id":"resp_1","status":"failed","error":{"code":"rate_limit_exceeded","message":"Rate limit reached for gpt-5 in organization org-x on tokens per min (TPM). Please try again in 1m30.5s."}}}"#;
//! assert!(may_be_failure(event));
//! let now = UNIX_EPOCH + Duration::from_secs(100);
//! assert_eq!(limit_in_band(event, now), Some(Some(now + Duration::from_millis(90_500))));
//! // A failure that is no quota error, and an ordinary event.
//! assert_eq!(limit_in_band(br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#, now), None);
//! assert!(!may_be_failure(br#"{"type":"response.output_text.delta","delta":"hi"}"#));
//! ```

use std::sync::LazyLock;
use std::time::SystemTime;

use memchr::memmem::Finder;
use serde::Deserialize;

use super::body::limit_reached;
use super::value::go_duration;

/// Whether an event's data may be a failure (an error event, a failed response): it begins
/// with an error object, or a `type` key names a failure (`"type":"error"`,
/// `"type":"response.failed"`, with any blanks a serializer puts around the colon; the
/// providers put `type` first, a proxy that rewrites the JSON may not). Cheap enough for every
/// event a stream reader decodes anyway: one search for `"type"`, a few bytes read at each hit.
pub fn may_be_failure(data: &[u8]) -> bool {
    static TYPE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(br#""type""#));
    let trimmed = data.trim_ascii_start();
    if trimmed.starts_with(b"{") && trimmed[1..].trim_ascii_start().starts_with(br#""error""#) {
        return true;
    }
    TYPE.find_iter(data).any(|at| {
        let rest = data[at + 6..].trim_ascii_start();
        let Some(value) = rest.strip_prefix(b":") else {
            return false;
        };
        let value = value.trim_ascii_start();
        value.starts_with(br#""error""#) || value.starts_with(br#""response.failed""#)
    })
}

/// A Responses `response.failed` event, or its stream's own `error` event.
#[derive(Deserialize)]
struct Failed {
    #[serde(default)]
    response: Option<Response>,
    #[serde(default)]
    code: serde_json::Value,
    #[serde(default)]
    message: serde_json::Value,
}

#[derive(Deserialize)]
struct Response {
    #[serde(default)]
    error: Option<serde_json::Value>,
}

/// Whether the event `data` says the account is out of quota: `Some(reset)` then (the reset
/// may be unknown), `None` for any other event or failure.
pub fn limit_in_band(data: &[u8], now: SystemTime) -> Option<Option<SystemTime>> {
    if !may_be_failure(data) {
        return None;
    }
    // The error object as an error body would carry it.
    let (error, message) = match serde_json::from_slice::<Failed>(data) {
        Ok(Failed {
            response: Some(Response { error: Some(e) }),
            ..
        }) => {
            let message = e.get("message").cloned().unwrap_or_default();
            (serde_json::json!({ "error": e }), message)
        }
        Ok(Failed { code, message, .. }) if code.is_string() => {
            (serde_json::json!({ "error": { "code": code } }), message)
        }
        // Anthropic's and Chat's: an error body as it is.
        _ => {
            let reset = limit_reached(data, now)?;
            return Some(reset.or_else(|| message_reset(data, now)));
        }
    };
    let reset = limit_reached(error.to_string().as_bytes(), now)?;
    Some(reset.or_else(|| {
        message
            .as_str()
            .and_then(try_again_in)
            .and_then(|d| now.checked_add(d))
    }))
}

/// The "try again in …" of the `message` of an error body's `error`.
fn message_reset(data: &[u8], now: SystemTime) -> Option<SystemTime> {
    let v: serde_json::Value = serde_json::from_slice(data).ok()?;
    let message = v.get("error")?.get("message")?.as_str()?;
    now.checked_add(try_again_in(message)?)
}

/// The wait of OpenAI's "Please try again in 11.054s." / "in 1m30s" / "in 820ms".
fn try_again_in(message: &str) -> Option<std::time::Duration> {
    let (_, rest) = message.split_once("try again in ")?;
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
        .unwrap_or(rest.len());
    go_duration(rest[..end].trim_end_matches('.'))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    const NOW: u64 = 1_000;

    fn at(secs: f64) -> Option<Option<SystemTime>> {
        Some(Some(
            UNIX_EPOCH + Duration::from_secs(NOW) + Duration::from_secs_f64(secs),
        ))
    }

    fn read(data: &str) -> Option<Option<SystemTime>> {
        limit_in_band(data.as_bytes(), UNIX_EPOCH + Duration::from_secs(NOW))
    }

    #[test]
    fn each_providers_quota_failure_is_read_with_its_reset() {
        assert_eq!(
            read(
                r#"{"type":"response.failed","sequence_number":3,"response":{"id":"r","error":{"code":"rate_limit_exceeded","message":"Rate limit reached. Please try again in 11.054s. Visit https://x"}}}"#
            ),
            at(11.054)
        );
        assert_eq!(
            read(
                r#"{"type":"response.failed","response":{"error":{"type":"usage_limit_reached","resets_in_seconds":600}}}"#
            ),
            at(600.0)
        );
        assert_eq!(
            read(
                r#"{"type":"error","code":"rate_limit_exceeded","message":"Please try again in 820ms.","sequence_number":2}"#
            ),
            at(0.82)
        );
        // Blanks around the colons (a serializer's), and `type` last (a proxy that sorted the
        // keys).
        assert_eq!(
            read(
                r#"{"type": "response.failed", "response": {"error": {"code": "rate_limit_exceeded", "message": "try again in 2s"}}}"#
            ),
            at(2.0)
        );
        assert_eq!(
            read(r#"{ "type" : "error", "error": {"type": "rate_limit_error", "message": "x"}}"#),
            Some(None)
        );
        assert_eq!(
            read(
                r#"{ "error": {"message": "x", "type": "requests", "code": "rate_limit_exceeded"}}"#
            ),
            Some(None)
        );
        assert_eq!(
            read(
                r#"{"response":{"error":{"code":"rate_limit_exceeded","message":"try again in 5s"}},"type":"response.failed"}"#
            ),
            at(5.0)
        );
        assert_eq!(
            read(
                r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#
            ),
            Some(None)
        );
        assert_eq!(
            read(
                r#"{"error":{"message":"Rate limit reached for requests. Please try again in 6m0s.","type":"requests","code":"rate_limit_exceeded"}}"#
            ),
            at(360.0)
        );
    }

    #[test]
    fn other_failures_and_events_are_not_quota() {
        for data in [
            r#"{"type":"response.failed","response":{"error":{"code":"server_error","message":"boom"}}}"#,
            r#"{"type":"response.failed","response":{"error":null}}"#,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            r#"{"type":"error","code":"invalid_prompt","message":"no"}"#,
            r#"{"error":{"type":"invalid_request_error","message":"try again in 5s"}}"#,
            r#"{"type":"response.completed","response":{"error":{"code":"rate_limit_exceeded"}}}"#,
            r#"{"type":"response.output_text.delta","delta":"{\"type\":\"error\"}"}"#,
            r#"{"type": "response.output_text.delta", "delta": "\"type\": \"error\""}"#,
            r#"{"type":"message_delta","usage":{"output_tokens":3},"error_type":"none"}"#,
            r#"{"choices":[{"delta":{"content":"rate_limit_exceeded"}}]}"#,
            "",
            "{",
        ] {
            assert_eq!(read(data), None, "{data}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2_000))]
        /// Any data, and any message: no panic, and nothing but a failure event is a limit.
        #[test]
        fn never_panics(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256), message in ".{0,80}") {
            let now = UNIX_EPOCH + Duration::from_secs(NOW);
            if limit_in_band(&data, now).is_some() {
                proptest::prop_assert!(may_be_failure(&data));
            }
            let _ = try_again_in(&message);
            // `type` first, as the providers send it.
            let message = serde_json::Value::from(message).to_string();
            let event = format!(r#"{{"type":"response.failed","response":{{"error":{{"code":"rate_limit_exceeded","message":{message}}}}}}}"#);
            proptest::prop_assert!(limit_in_band(event.as_bytes(), now).is_some());
        }
    }
}
