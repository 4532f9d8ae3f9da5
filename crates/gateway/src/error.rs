//! Errors the gateway answers itself, in the error shape of the API the client speaks.
//!
//! OpenAI clients read `{"error":{"message","type"}}`; Anthropic clients read
//! `{"type":"error","error":{"type","message"}}` and map the status to an exception class
//! (its SDKs map the status to an exception class), and Gemini clients read a
//! `google.rpc.Status`, `{"error":{"code","message","status"}}`; the shape follows the request
//! path.

use bytes::Bytes;
use context_relay_core::ApiShape;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;

/// Which error shape a client understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorShape {
    /// `{"error":{"message","type"}}` (OpenAI Chat Completions and Responses).
    OpenAi,
    /// `{"type":"error","error":{"type","message"}}` (Anthropic Messages).
    Anthropic,
    /// `{"error":{"code","message","status"}}`, a `google.rpc.Status` (Gemini API).
    Gemini,
}

impl ErrorShape {
    /// The shape of the API that `path` belongs to (`/v1/messages…` is Anthropic).
    pub(crate) fn for_path(path: &str) -> Self {
        // Two layers ask on every request, and paths are a few dozen bytes: core's
        // word-at-a-time search and a byte loop, no vector searcher set up per `/`.
        let path = ApiShape::without_query(path);
        // `…/messages/count_tokens` and the like are no conversation turn, but the Messages API.
        let bytes = path.as_bytes();
        let path = (0..bytes.len())
            .find(|&i| bytes[i] == b'/' && bytes[i..].starts_with(b"/messages/"))
            .and_then(|slash| path.get(..slash + "/messages".len()))
            .unwrap_or(path);
        Self::of_api(ApiShape::from_path(path))
    }

    /// The shape clients of `api` read (OpenAI's for an unknown API).
    fn of_api(api: Option<ApiShape>) -> Self {
        match api {
            Some(ApiShape::AnthropicMessages) => Self::Anthropic,
            Some(ApiShape::Gemini) => Self::Gemini,
            _ => Self::OpenAi,
        }
    }
}

/// What went wrong in an error the gateway answers itself; each API names it its own way
/// ([`name`](Self::name)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// The request cannot be served as sent (400).
    InvalidRequest,
    /// The request body is larger than the gateway accepts (413).
    RequestTooLarge,
    /// No combo or model of that name (404).
    ModelNotFound,
    /// The gateway has no room for the request right now (503).
    Overloaded,
    /// The client was too slow sending its request (408).
    RequestTimeout,
    /// The provider sent no response in time (504).
    UpstreamTimeout,
    /// The provider could not be reached or refused every account (502).
    Upstream,
    /// Every account is exhausted (429).
    RateLimited,
    /// Every account is exhausted until a reset further away than a client's retries reach
    /// (429): named as the ChatGPT backend names a used-up plan (`usage_limit_reached`), which
    /// Codex CLI shows at once, where a `rate_limit_error` makes it retry after each
    /// `retry-after` (hours, for a quota window).
    UsageLimit,
    /// No client key, or an unknown one (401).
    Unauthenticated,
    /// The client may not use what it asked for (403).
    PermissionDenied,
    /// The gateway itself failed (500).
    Internal,
}

impl ErrorKind {
    /// The error type name in `shape`: OpenAI's free-form names, or one of Anthropic's fixed
    /// `*_error` types.
    pub(crate) fn name(self, shape: ErrorShape) -> &'static str {
        if shape == ErrorShape::Gemini {
            return self.google_status();
        }
        let (openai, anthropic) = match self {
            Self::InvalidRequest => ("invalid_request_error", "invalid_request_error"),
            Self::RequestTooLarge => ("request_too_large", "request_too_large"),
            Self::ModelNotFound => ("model_not_found", "not_found_error"),
            Self::Overloaded => ("overloaded", "overloaded_error"),
            Self::RequestTimeout => ("request_timeout", "timeout_error"),
            Self::UpstreamTimeout => ("timeout", "timeout_error"),
            Self::Upstream => ("upstream_error", "api_error"),
            Self::RateLimited => ("rate_limit_error", "rate_limit_error"),
            Self::UsageLimit => ("usage_limit_reached", "rate_limit_error"),
            Self::Unauthenticated => ("invalid_api_key", "authentication_error"),
            Self::PermissionDenied => ("permission_denied", "permission_error"),
            Self::Internal => ("api_error", "api_error"),
        };
        match shape {
            ErrorShape::Anthropic => anthropic,
            _ => openai,
        }
    }

    /// The `google.rpc.Code` name of this error, as the Gemini API spells it.
    fn google_status(self) -> &'static str {
        match self {
            Self::InvalidRequest | Self::RequestTooLarge => "INVALID_ARGUMENT",
            Self::ModelNotFound => "NOT_FOUND",
            Self::Overloaded | Self::Upstream => "UNAVAILABLE",
            Self::RequestTimeout | Self::UpstreamTimeout => "DEADLINE_EXCEEDED",
            Self::RateLimited | Self::UsageLimit => "RESOURCE_EXHAUSTED",
            Self::Unauthenticated => "UNAUTHENTICATED",
            Self::PermissionDenied => "PERMISSION_DENIED",
            Self::Internal => "INTERNAL",
        }
    }
}

/// The HTTP status of a `google.rpc.Code` name; the names of the other shapes (the 404 of an
/// unknown path is named `not_found_error` whatever the shape) are mapped too.
fn google_code(status: &str) -> (u16, &str) {
    match status {
        "INVALID_ARGUMENT" | "invalid_request_error" => (400, "INVALID_ARGUMENT"),
        "UNAUTHENTICATED" => (401, "UNAUTHENTICATED"),
        "PERMISSION_DENIED" => (403, "PERMISSION_DENIED"),
        "NOT_FOUND" | "not_found_error" => (404, "NOT_FOUND"),
        "RESOURCE_EXHAUSTED" => (429, "RESOURCE_EXHAUSTED"),
        "UNAVAILABLE" => (503, "UNAVAILABLE"),
        "DEADLINE_EXCEEDED" => (504, "DEADLINE_EXCEEDED"),
        _ => (500, "INTERNAL"),
    }
}

/// The JSON bytes of an error.
pub(crate) fn error_body(shape: ErrorShape, kind: &str, message: &str) -> Bytes {
    body_of(shape, None, kind, message)
}

/// [`error_body`]; a Gemini error's `code` is `status` when given (the HTTP status it is sent
/// with), else the HTTP status its `google.rpc.Code` name maps to.
fn body_of(shape: ErrorShape, status: Option<u16>, kind: &str, message: &str) -> Bytes {
    let v = match shape {
        ErrorShape::OpenAi => serde_json::json!({
            "error": {"message": message, "type": kind, "code": kind}
        }),
        ErrorShape::Anthropic => serde_json::json!({
            "type": "error",
            "error": {"type": kind, "message": message}
        }),
        ErrorShape::Gemini => {
            let (code, name) = google_code(kind);
            let code = status.unwrap_or(code);
            serde_json::json!({"error": {"code": code, "message": message, "status": name}})
        }
    };
    Bytes::from(v.to_string())
}

/// A Gemini error `body` with a `google.rpc.RetryInfo` detail of `secs`: where Gemini clients
/// read how long to wait, as the API's own 429 says it (Gemini CLI stops at once on a long
/// wait and retries after a short one). Another body is returned as it is.
pub(crate) fn with_retry_info(body: Bytes, secs: u64) -> Bytes {
    let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return body;
    };
    let Some(error) = v
        .get_mut("error")
        .and_then(serde_json::Value::as_object_mut)
    else {
        return body;
    };
    error.insert(
        "details".to_owned(),
        serde_json::json!([{
            "@type": "type.googleapis.com/google.rpc.RetryInfo",
            "retryDelay": format!("{secs}s"),
        }]),
    );
    Bytes::from(v.to_string())
}

/// The JSON bytes of an error both shapes read: `{"type":"error","error":{"type","message",
/// "code"}}` is a valid OpenAI error (`error.message`, `error.type`) and a valid Anthropic one.
/// For answers given where the request path is unknown (a caught panic).
pub(crate) fn any_shape_error_body(kind: &str, message: &str) -> Bytes {
    let v = serde_json::json!({
        "type": "error",
        "error": {"type": kind, "message": message, "code": kind}
    });
    Bytes::from(v.to_string())
}

/// A complete JSON error response.
pub(crate) fn error_response(
    shape: ErrorShape,
    status: StatusCode,
    kind: &str,
    message: &str,
) -> Response<Full<Bytes>> {
    error_response_as(shape, status, kind, message, Full::new)
}

/// [`error_response`] with a body of another type, made by `wrap` from the error's bytes.
pub(crate) fn error_response_as<B>(
    shape: ErrorShape,
    status: StatusCode,
    kind: &str,
    message: &str,
    wrap: impl FnOnce(Bytes) -> B,
) -> Response<B> {
    let mut res = Response::new(wrap(body_of(shape, Some(status.as_u16()), kind, message)));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

/// `res` with `connection: close` on HTTP/1, for an answer given before the request's body was
/// read to its end: hyper then ends the connection (the unread rest cannot be told from a
/// next request), and a client's keep-alive pool must not reuse it. HTTP/2 ends only the
/// stream, and has no such header.
pub(crate) fn closing<B>(mut res: Response<B>, version: http::Version) -> Response<B> {
    if version < http::Version::HTTP_2 {
        res.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    res
}

/// [`closing`] for an answer given without reading the body of a request with `headers`,
/// when it has one ([`carries_body`]).
pub(crate) fn closing_if_body<B>(
    res: Response<B>,
    headers: &http::HeaderMap,
    version: http::Version,
) -> Response<B> {
    if carries_body(headers) {
        closing(res, version)
    } else {
        res
    }
}

/// Whether a request with `headers` carries a body: a `content-length` other than `0`, or a
/// `transfer-encoding`.
pub(crate) fn carries_body(headers: &http::HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_names_are_from_its_fixed_list() {
        use ErrorKind::*;
        const ANTHROPIC: [&str; 11] = [
            "invalid_request_error",
            "authentication_error",
            "billing_error",
            "permission_error",
            "not_found_error",
            "request_too_large",
            "rate_limit_error",
            "api_error",
            "timeout_error",
            "overloaded_error",
            "error",
        ];
        for kind in [
            InvalidRequest,
            RequestTooLarge,
            ModelNotFound,
            Overloaded,
            RequestTimeout,
            UpstreamTimeout,
            Upstream,
            RateLimited,
            UsageLimit,
            Unauthenticated,
            PermissionDenied,
            Internal,
        ] {
            let name = kind.name(ErrorShape::Anthropic);
            assert!(ANTHROPIC.contains(&name), "{kind:?}: {name}");
            assert!(!kind.name(ErrorShape::OpenAi).is_empty());
        }
    }

    proptest::proptest! {
        /// The shape is the one of the path cut at its query and after its first
        /// `/messages/`, found with a searcher as it was before.
        #[test]
        fn shape_of_a_path_as_searched(
            parts in proptest::collection::vec(
                proptest::sample::select(vec![
                    "/", "/v1", "/messages", "/messages/", "messages", "?", "?a=/messages/",
                    "/count_tokens", "/chat/completions", "/responses", ":generateContent",
                    "x", "é",
                ]),
                0..8,
            )
        ) {
            let path = parts.concat();
            let searched = {
                let cut = path.split('?').next().unwrap_or(&path);
                let cut = memchr::memmem::find(cut.as_bytes(), b"/messages/")
                    .and_then(|i| cut.get(..i + "/messages".len()))
                    .unwrap_or(cut);
                ErrorShape::of_api(ApiShape::from_path(cut))
            };
            proptest::prop_assert_eq!(ErrorShape::for_path(&path), searched);
        }
    }

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
        assert_eq!(
            ErrorShape::for_path("/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"),
            ErrorShape::Gemini
        );
        assert_eq!(
            ErrorShape::for_path("/v1/models/g/m:generateContent"),
            ErrorShape::Gemini
        );
        let v: serde_json::Value =
            serde_json::from_slice(&error_body(ErrorShape::OpenAi, "bad", "m \"q\"")).unwrap();
        assert_eq!(v["error"]["type"], "bad");
        assert_eq!(v["error"]["message"], "m \"q\"");
    }
}

#[cfg(test)]
mod gemini_tests {
    use super::*;

    /// Every kind the gateway answers in the Gemini shape is a `google.rpc.Status` whose code
    /// is the HTTP status the gateway sends with it.
    #[test]
    fn gemini_bodies_are_rpc_statuses() {
        use ErrorKind::*;
        for (kind, code) in [
            (InvalidRequest, 400),
            (RequestTooLarge, 400),
            (ModelNotFound, 404),
            (Overloaded, 503),
            (RequestTimeout, 504),
            (UpstreamTimeout, 504),
            (Upstream, 503),
            (RateLimited, 429),
            (UsageLimit, 429),
            (Unauthenticated, 401),
            (PermissionDenied, 403),
            (Internal, 500),
        ] {
            let name = kind.name(ErrorShape::Gemini);
            let v: serde_json::Value =
                serde_json::from_slice(&error_body(ErrorShape::Gemini, name, "why")).unwrap();
            assert_eq!(v["error"]["code"], code, "{kind:?}");
            assert_eq!(v["error"]["status"], name, "{kind:?}");
            assert_eq!(v["error"]["message"], "why");
        }
        let v: serde_json::Value =
            serde_json::from_slice(&error_body(ErrorShape::Gemini, "not_found_error", "x"))
                .unwrap();
        assert_eq!(v["error"]["status"], "NOT_FOUND");
    }

    /// An answer's `code` is the HTTP status it is sent with, also where the `google.rpc.Code`
    /// name maps to another (a 413 is `INVALID_ARGUMENT`, a 408 `DEADLINE_EXCEEDED`).
    #[tokio::test]
    async fn gemini_answers_carry_their_http_status_as_code() {
        use ErrorKind::*;
        use http_body_util::BodyExt;
        for (kind, status) in [
            (RequestTooLarge, StatusCode::PAYLOAD_TOO_LARGE),
            (RequestTimeout, StatusCode::REQUEST_TIMEOUT),
            (Upstream, StatusCode::BAD_GATEWAY),
            (InvalidRequest, StatusCode::UNSUPPORTED_MEDIA_TYPE),
            (RateLimited, StatusCode::TOO_MANY_REQUESTS),
        ] {
            let res = error_response(
                ErrorShape::Gemini,
                status,
                kind.name(ErrorShape::Gemini),
                "m",
            );
            assert_eq!(res.status(), status);
            let body = res.into_body().collect().await.unwrap().to_bytes();
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(v["error"]["code"], status.as_u16(), "{kind:?}");
            assert_eq!(v["error"]["status"], kind.name(ErrorShape::Gemini));
        }
    }
}

#[cfg(test)]
mod examples {
    #[test]
    fn module_example() {
        use crate::error::{ErrorShape, error_body};
        let b = error_body(
            ErrorShape::for_path("/v1/messages"),
            "invalid_request_error",
            "no model",
        );
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["error"]["message"], "no model");
        assert_eq!(v["type"], "error");
    }

    #[test]
    fn errorkind_example() {
        use crate::error::{ErrorKind, ErrorShape};
        assert_eq!(
            ErrorKind::ModelNotFound.name(ErrorShape::OpenAi),
            "model_not_found"
        );
        assert_eq!(
            ErrorKind::ModelNotFound.name(ErrorShape::Anthropic),
            "not_found_error"
        );
    }
}
