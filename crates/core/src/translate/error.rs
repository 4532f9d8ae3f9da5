//! An Anthropic error as the error a Responses client reads.
//!
//! The error type is kept (`rate_limit_error`, `invalid_request_error`, …) as `type` and, in
//! general, as `code`, so quota errors stay recognisable. Two errors get the `code` a
//! Responses client acts on instead:
//!
//! | Anthropic error | `code` | status |
//! |---|---|---|
//! | `invalid_request_error` about the context window (`prompt is too long: N tokens > M maximum`, `input length and max_tokens exceed context limit: …`) | `context_length_exceeded` (which Codex CLI reports as a full context window) | kept (400) |
//! | `overloaded_error` | `server_is_overloaded` (Codex CLI's overload handling) | 529 becomes 503, a status OpenAI clients know |
//!
//! Every other status is kept.

use serde_json::{Value, json};

/// The Responses error code of a request whose prompt does not fit the model's context window.
pub const CONTEXT_LENGTH_EXCEEDED: &str = "context_length_exceeded";

/// The Responses error code of a provider too busy to serve the request.
pub const SERVER_IS_OVERLOADED: &str = "server_is_overloaded";

/// Lower-case phrases of Anthropic's messages about a prompt longer than the context window.
const CONTEXT_PHRASES: [&str; 4] = [
    "prompt is too long",
    "exceed context limit",
    "exceeds the context window",
    "context window exceeded",
];

/// The Responses `code` of an Anthropic error of type `kind` saying `message`:
/// `context_length_exceeded` for an `invalid_request_error` about the context window
/// (`prompt is too long: N tokens > M maximum`, `input length and max_tokens exceed context
/// limit: …`), which Codex CLI reports as a full context window; `server_is_overloaded` for an
/// `overloaded_error`; else `kind` itself.
///
/// ```
/// use context_relay_core::translate::responses_error_code;
/// let m = "prompt is too long: 208423 tokens > 200000 maximum";
/// assert_eq!(responses_error_code("invalid_request_error", m), "context_length_exceeded");
/// assert_eq!(responses_error_code("overloaded_error", "Overloaded"), "server_is_overloaded");
/// assert_eq!(responses_error_code("rate_limit_error", "slow down"), "rate_limit_error");
/// ```
pub fn responses_error_code<'a>(kind: &'a str, message: &str) -> &'a str {
    match kind {
        "overloaded_error" => SERVER_IS_OVERLOADED,
        "invalid_request_error" if is_context_overflow(message) => CONTEXT_LENGTH_EXCEEDED,
        _ => kind,
    }
}

fn is_context_overflow(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    CONTEXT_PHRASES.iter().any(|p| m.contains(p))
}

/// An Anthropic error answer read as a Responses error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponsesError {
    /// The HTTP status the client gets.
    pub status: u16,
    /// The error type (Anthropic's).
    pub kind: String,
    /// The code a Responses client acts on ([`responses_error_code`]).
    pub code: String,
    /// The provider's message, unchanged.
    pub message: String,
}

impl ResponsesError {
    /// The Anthropic error answer of `status` with `body`
    /// (`{"type":"error","error":{"type":…,"message":…}}`); `None` when the body is not an
    /// Anthropic error. The status is kept, except 529 (Anthropic's overload status, unknown
    /// to OpenAI clients), which becomes 503; the code is [`responses_error_code`]'s.
    ///
    /// ```
    /// use context_relay_core::translate::ResponsesError;
    /// let body = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    /// let e = ResponsesError::from_messages(529, body).unwrap();
    /// assert_eq!((e.status, e.code.as_str()), (503, "server_is_overloaded"));
    /// let v: serde_json::Value = serde_json::from_slice(&e.body()).unwrap();
    /// assert_eq!(v["error"]["message"], "Overloaded");
    /// ```
    pub fn from_messages(status: u16, body: &[u8]) -> Option<Self> {
        let v: Value = serde_json::from_slice(body).ok()?;
        let e = v.get("error").filter(|e| e.is_object())?;
        let kind = e.get("type").and_then(Value::as_str).unwrap_or("api_error");
        let message = e.get("message").and_then(Value::as_str).unwrap_or(kind);
        let code = responses_error_code(kind, message);
        let status = if status == 529 { 503 } else { status };
        Some(Self {
            status,
            kind: kind.to_owned(),
            code: code.to_owned(),
            message: message.to_owned(),
        })
    }

    /// Whether the prompt did not fit the model's context window.
    pub fn is_context_overflow(&self) -> bool {
        self.code == CONTEXT_LENGTH_EXCEEDED
    }

    /// The error body Responses clients read: `{"error":{"message","type","param","code"}}`.
    pub fn body(&self) -> Vec<u8> {
        let v = json!({
            "error": {"message": self.message, "type": self.kind, "param": null, "code": self.code}
        });
        v.to_string().into_bytes()
    }
}

/// A Messages error body as the error body Responses clients read (see
/// [`ResponsesError::body`]); `None` when `body` is not an Anthropic error. The HTTP status
/// is the caller's: [`ResponsesError::from_messages`] maps it too.
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
    ResponsesError::from_messages(400, body).map(|e| e.body())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anthropic(kind: &str, message: &str) -> Vec<u8> {
        json!({"type": "error", "error": {"type": kind, "message": message}})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn context_window_errors_are_context_length_exceeded() {
        for m in [
            "prompt is too long: 208423 tokens > 200000 maximum",
            "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length or `max_tokens` and try again",
            "Prompt is too long",
        ] {
            let e =
                ResponsesError::from_messages(400, &anthropic("invalid_request_error", m)).unwrap();
            assert_eq!(e.status, 400);
            assert!(e.is_context_overflow(), "{m}");
            let v: Value = serde_json::from_slice(&e.body()).unwrap();
            assert_eq!(v["error"]["code"], "context_length_exceeded");
            assert_eq!(v["error"]["type"], "invalid_request_error");
            assert_eq!(v["error"]["message"], m, "the message is kept");
        }
        // Other invalid requests keep their type as code.
        let e = ResponsesError::from_messages(
            400,
            &anthropic("invalid_request_error", "max_tokens: Field required"),
        )
        .unwrap();
        assert!(!e.is_context_overflow());
        assert_eq!(e.code, "invalid_request_error");
        // The phrase in another error type is not a context overflow.
        let e = ResponsesError::from_messages(500, &anthropic("api_error", "prompt is too long"))
            .unwrap();
        assert_eq!((e.status, e.code.as_str()), (500, "api_error"));
    }

    #[test]
    fn overloaded_is_a_503_server_is_overloaded_and_other_statuses_are_kept() {
        let e = ResponsesError::from_messages(529, &anthropic("overloaded_error", "Overloaded"))
            .unwrap();
        assert_eq!((e.status, e.code.as_str()), (503, SERVER_IS_OVERLOADED));
        for status in [400, 401, 403, 404, 413, 429, 500, 503] {
            let e =
                ResponsesError::from_messages(status, &anthropic("rate_limit_error", "x")).unwrap();
            assert_eq!(e.status, status);
        }
        assert!(ResponsesError::from_messages(400, b"{\"error\":\"x\"}").is_none());
        assert!(ResponsesError::from_messages(400, b"<html>").is_none());
    }
}
