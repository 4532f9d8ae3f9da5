//! Errors the gateway answers itself, in the error shape of the API the client speaks.
//!
//! OpenAI clients read `{"error":{"message","type"}}`; Anthropic clients read
//! `{"type":"error","error":{"type","message"}}` and map the status to an exception class
//! (see `CLIENTS.md`), so the shape follows the request path.
//!
//! ```
//! use context_relay_gateway::error::{ErrorShape, error_body};
//! let b = error_body(ErrorShape::for_path("/v1/messages"), "invalid_request_error", "no model");
//! let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
//! assert_eq!(v["error"]["message"], "no model");
//! assert_eq!(v["type"], "error");
//! ```

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;

/// Which error shape a client understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorShape {
    /// `{"error":{"message","type"}}` (OpenAI Chat Completions and Responses).
    OpenAi,
    /// `{"type":"error","error":{"type","message"}}` (Anthropic Messages).
    Anthropic,
}

impl ErrorShape {
    /// The shape of the API that `path` belongs to (`/v1/messages…` is Anthropic).
    pub fn for_path(path: &str) -> Self {
        let path = path.split('?').next().unwrap_or(path);
        if path.ends_with("/messages") || path.contains("/messages/") {
            Self::Anthropic
        } else {
            Self::OpenAi
        }
    }
}

/// The JSON bytes of an error.
pub fn error_body(shape: ErrorShape, kind: &str, message: &str) -> Bytes {
    let v = match shape {
        ErrorShape::OpenAi => serde_json::json!({
            "error": {"message": message, "type": kind, "code": kind}
        }),
        ErrorShape::Anthropic => serde_json::json!({
            "type": "error",
            "error": {"type": kind, "message": message}
        }),
    };
    Bytes::from(v.to_string())
}

/// The JSON bytes of an error both shapes read: `{"type":"error","error":{"type","message",
/// "code"}}` is a valid OpenAI error (`error.message`, `error.type`) and a valid Anthropic one.
/// For answers given where the request path is unknown (a caught panic).
pub fn any_shape_error_body(kind: &str, message: &str) -> Bytes {
    let v = serde_json::json!({
        "type": "error",
        "error": {"type": kind, "message": message, "code": kind}
    });
    Bytes::from(v.to_string())
}

/// A complete JSON error response.
pub fn error_response(
    shape: ErrorShape,
    status: StatusCode,
    kind: &str,
    message: &str,
) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(error_body(shape, kind, message)));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        assert_eq!(
            ErrorShape::for_path("/v1/messages?beta=true"),
            ErrorShape::Anthropic
        );
        assert_eq!(
            ErrorShape::for_path("/v1/messages/count_tokens"),
            ErrorShape::Anthropic
        );
        assert_eq!(ErrorShape::for_path("/v1/responses"), ErrorShape::OpenAi);
        assert_eq!(
            ErrorShape::for_path("/v1/chat/completions"),
            ErrorShape::OpenAi
        );
        let v: serde_json::Value =
            serde_json::from_slice(&error_body(ErrorShape::OpenAi, "bad", "m \"q\"")).unwrap();
        assert_eq!(v["error"]["type"], "bad");
        assert_eq!(v["error"]["message"], "m \"q\"");
    }
}
