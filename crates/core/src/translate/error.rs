//! An Anthropic error body as an OpenAI-style error body.

use serde_json::{Value, json};

/// A Messages error body (`{"type":"error","error":{"type":…,"message":…}}`) as the error body
/// Responses clients read (`{"error":{"message":…,"type":…,"code":…}}`); `None` when `body` is
/// not an Anthropic error. The error type is kept (`rate_limit_error`, `overloaded_error`, …)
/// both as `type` and as `code`, so quota errors stay recognisable; the HTTP status is the
/// caller's to keep.
///
/// ```
/// use context_relay_core::translate::messages_error_to_responses;
/// let body = br#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#;
/// let out = messages_error_to_responses(body).unwrap();
/// let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
/// assert_eq!(v["error"]["message"], "slow down");
/// assert_eq!(v["error"]["code"], "rate_limit_error");
/// ```
pub fn messages_error_to_responses(body: &[u8]) -> Option<Vec<u8>> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let e = v.get("error")?;
    if !e.is_object() {
        return None;
    }
    let kind = e.get("type").and_then(Value::as_str).unwrap_or("api_error");
    let message = e.get("message").and_then(Value::as_str).unwrap_or(kind);
    serde_json::to_vec(&json!({
        "error": {"message": message, "type": kind, "param": null, "code": kind}
    }))
    .ok()
}
