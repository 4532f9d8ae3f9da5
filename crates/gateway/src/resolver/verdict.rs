//! What an upstream error answer means for the account that gave it.
//!
//! The resolver asks this of every response with an error status, after reading (a bounded
//! prefix of) its body and decoding it ([`decoded_error_body`]):
//!
//! - **exhausted**: a 429, or a quota error body in any status (Codex sends
//!   `usage_limit_reached` with statuses other than 429; OpenAI `rate_limit_exceeded`,
//!   Anthropic `rate_limit_error`), or quota headers at 100 % or more. The account waits for
//!   its announced reset and the request goes to another account.
//! - **refused**: 401 or 403 without a quota body, or Gemini's 400 `API_KEY_INVALID`: the provider no longer accepts the account's
//!   credential (a revoked key, a logged-out subscription). The account leaves the pool for a
//!   back-off and the request goes to another account.
//! - **the request's own fault**, whatever its status: OpenAI's 429 "Request too large for
//!   … on tokens per min (TPM)" (this request alone exceeds the per-minute budget, on every
//!   account alike), a 403 that refuses a model or a resource rather than the credential
//!   (Gemini `PERMISSION_DENIED` "The caller does not have permission" without an API-key
//!   reason, OpenAI `model_not_found` "does not have access to model", Anthropic
//!   `permission_error`). It goes to the client as it is and changes no account: a tenant's
//!   request never exhausts or disables an account for everyone.
//! - **unavailable**: a 5xx (including the gateway's own 502 when the provider could not be
//!   reached): worth one more try on another account, since nothing reached the client yet.
//! - anything else is the **client's answer** (a 400 about the request itself, a 404, …).

use std::time::SystemTime;

use context_relay_core::quota::{self, QuotaKind};
use context_relay_core::{QuotaSignal, decode};

use super::MAX_ERROR_BODY;
use http::{HeaderMap, StatusCode, header};

/// What to do with the account that gave an error answer. See the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Verdict {
    /// Out of quota; the signal carries the reset when one was announced.
    Exhausted(QuotaSignal),
    /// The provider refuses the account's credential.
    Refused,
    /// The provider failed or could not be reached.
    Unavailable,
    /// The answer is about the request, not the account: it goes to the client.
    Answer,
}

/// The verdict on a response of `status` with `headers` and `body` (the complete, decoded
/// body when it was read within the limit; `None` otherwise). Successful and informational
/// statuses are always [`Verdict::Answer`].
pub(crate) fn classify(
    kind: QuotaKind,
    status: StatusCode,
    headers: &HeaderMap,
    body: Option<&[u8]>,
    now: SystemTime,
) -> Verdict {
    if !status.is_client_error() && !status.is_server_error() {
        return Verdict::Answer;
    }
    if body.is_some_and(|b| request_at_fault(status, b)) {
        return Verdict::Answer;
    }
    // The body and `retry-after` are read whatever the provider's header format (even with
    // `quota = "none"`): an error body that says "quota" means it for every provider.
    let body_only = quota::from_response(
        QuotaKind::Auto,
        status,
        &retry_after_only(headers),
        body,
        now,
    );
    let with_headers = quota::from_response(kind, status, headers, body, now);
    if status == StatusCode::TOO_MANY_REQUESTS || body_only.is_some() {
        let signal = match (with_headers, body_only) {
            (Some(h), Some(b)) => QuotaSignal {
                resets_at: b.resets_at.or(h.resets_at),
                ..h
            },
            (h, b) => h.or(b).unwrap_or(QuotaSignal::used(1.0)),
        };
        return Verdict::Exhausted(signal);
    }
    if let Some(signal) = with_headers.filter(|s| s.percent_used >= 1.0) {
        return Verdict::Exhausted(signal);
    }
    // The Gemini API refuses a bad key with a 400 whose `ErrorInfo` reason says so.
    if status == StatusCode::BAD_REQUEST
        && body.is_some_and(|b| contains_bytes(b, b"\"API_KEY_INVALID\""))
    {
        return Verdict::Refused;
    }
    match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Verdict::Refused,
        s if s.is_server_error() => Verdict::Unavailable,
        _ => Verdict::Answer,
    }
}

/// Whether an error answer blames the request, not the account (see the
/// [module docs](self)), by the providers' own texts.
pub(super) fn request_at_fault(status: StatusCode, body: &[u8]) -> bool {
    match status {
        // OpenAI: "Request too large for gpt-4o in organization org-… on tokens per min
        // (TPM): Limit 30000, Requested 41207. The input or output tokens must be reduced…".
        StatusCode::TOO_MANY_REQUESTS => contains_bytes(body, b"Request too large for"),
        StatusCode::FORBIDDEN => {
            // Gemini names the API key in an `ErrorInfo` reason when the key is at fault
            // (`API_KEY_INVALID`, `API_KEY_SERVICE_BLOCKED`, …); a bare PERMISSION_DENIED
            // refuses this model to the project (preview models, tuned models).
            (contains_bytes(body, b"\"PERMISSION_DENIED\"") && !contains_bytes(body, b"\"API_KEY_"))
                // OpenAI: "Project `proj_…` does not have access to model `gpt-5`".
                || contains_bytes(body, b"\"model_not_found\"")
                || contains_bytes(body, b"does not have access to model")
                // Anthropic: "Your API key does not have permission to use the specified
                // resource." (a model or a feature; a bad key is a 401).
                || contains_bytes(body, b"\"permission_error\"")
        }
        _ => false,
    }
}

fn contains_bytes(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn retry_after_only(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for name in [header::RETRY_AFTER.as_str(), "retry-after-ms"] {
        if let Some(v) = headers.get(name)
            && let Ok(name) = http::HeaderName::from_bytes(name.as_bytes())
        {
            out.insert(name, v.clone());
        }
    }
    out
}

/// The error type of an error body, for logs: Codex `usage_limit_reached`, Anthropic
/// `rate_limit_error` / `authentication_error`, OpenAI `invalid_api_key`, … (the `code` when
/// there is one, else the `type`).
pub(super) fn error_type(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let e = v.get("error")?;
    e.get("code")
        .and_then(|t| t.as_str())
        .or_else(|| e.get("type").and_then(|t| t.as_str()))
        .map(str::to_owned)
}

/// An error body as text: decoded when the provider compressed it (the client's
/// `accept-encoding` is forwarded). `None` when it cannot be decoded.
pub(super) fn decoded_error_body<'a>(
    headers: &HeaderMap,
    body: &'a [u8],
) -> Option<std::borrow::Cow<'a, [u8]>> {
    match headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
    {
        None => Some(std::borrow::Cow::Borrowed(body)),
        Some(coding) => decode::decode(coding.trim(), body, MAX_ERROR_BODY)
            .ok()
            .map(std::borrow::Cow::Owned),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use http::HeaderValue;

    use super::*;

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    fn v(
        kind: QuotaKind,
        status: u16,
        headers: &[(&'static str, &'static str)],
        body: &[u8],
    ) -> Verdict {
        let mut h = HeaderMap::new();
        for (k, val) in headers {
            h.insert(*k, HeaderValue::from_static(val));
        }
        classify(
            kind,
            StatusCode::from_u16(status).unwrap(),
            &h,
            Some(body),
            now(),
        )
    }

    const CODEX_LIMIT: &[u8] = br#"{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached","plan_type":"plus","resets_at":1700003600,"resets_in_seconds":3600}}"#;
    const OPENAI_RATE: &[u8] = br#"{"error":{"message":"Rate limit reached for gpt-5 in organization org-x on tokens per min (TPM): Limit 30000, Used 30000, Requested 900.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#;
    const OPENAI_KEY: &[u8] = br#"{"error":{"message":"Incorrect API key provided: sk-proj-****abcd. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#;
    const ANTHROPIC_AUTH: &[u8] =
        br#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
    const BAD_PARAM: &[u8] = br#"{"error":{"message":"Unsupported parameter: 'temperature' is not supported with this model.","type":"invalid_request_error","param":"temperature","code":"unsupported_parameter"}}"#;

    #[test]
    fn quota_bodies_exhaust_in_any_status() {
        for status in [400, 403, 429, 500, 503] {
            let Verdict::Exhausted(s) = v(QuotaKind::Codex, status, &[], CODEX_LIMIT) else {
                panic!("{status}");
            };
            assert_eq!(s.resets_at, Some(now() + Duration::from_secs(3600)));
            assert!(s.percent_used >= 1.0);
            assert!(matches!(
                v(QuotaKind::OpenAi, status, &[], OPENAI_RATE),
                Verdict::Exhausted(_)
            ));
        }
        // `quota = "none"` ignores usage headers, not what an error body says.
        let Verdict::Exhausted(s) = v(QuotaKind::None, 400, &[], CODEX_LIMIT) else {
            panic!();
        };
        assert_eq!(s.resets_at, Some(now() + Duration::from_secs(3600)));
        let Verdict::Exhausted(s) = v(QuotaKind::None, 429, &[("retry-after", "30")], b"") else {
            panic!();
        };
        assert_eq!(s.resets_at, Some(now() + Duration::from_secs(30)));
    }

    #[test]
    fn usage_headers_at_100_percent_on_an_error_exhaust() {
        let h = [("x-codex-primary-used-percent", "100")];
        assert!(matches!(
            v(QuotaKind::Codex, 400, &h, b"{}"),
            Verdict::Exhausted(_)
        ));
        let h = [("x-codex-primary-used-percent", "97")];
        assert_eq!(v(QuotaKind::Codex, 400, &h, BAD_PARAM), Verdict::Answer);
    }

    #[test]
    fn refused_credentials() {
        assert_eq!(v(QuotaKind::OpenAi, 401, &[], OPENAI_KEY), Verdict::Refused);
        assert_eq!(
            v(QuotaKind::Anthropic, 401, &[], ANTHROPIC_AUTH),
            Verdict::Refused
        );
        assert_eq!(
            v(QuotaKind::Anthropic, 403, &[], b"<html>forbidden</html>"),
            Verdict::Refused
        );
        // Gemini refuses a bad key with a 400; any other 400 of it is the client's answer.
        let gemini_key = br#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com"}]}}"#;
        assert_eq!(v(QuotaKind::None, 400, &[], gemini_key), Verdict::Refused);
        let signature = br#"{"error":{"code":400,"message":"Corrupted thought signature.","status":"INVALID_ARGUMENT"}}"#;
        assert_eq!(v(QuotaKind::None, 400, &[], signature), Verdict::Answer);
        let exhausted = br#"{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"37s"}]}}"#;
        assert!(matches!(
            v(QuotaKind::None, 429, &[], exhausted),
            Verdict::Exhausted(s) if s.resets_at == Some(now() + Duration::from_secs(37))
        ));
    }

    /// Errors caused by one request, in the providers' own words, go to the client and leave
    /// the account alone.
    #[test]
    fn a_request_at_fault_changes_no_account() {
        let too_large = br#"{"error":{"message":"Request too large for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Requested 41207. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#;
        assert_eq!(v(QuotaKind::OpenAi, 429, &[], too_large), Verdict::Answer);
        let gemini_model = br#"{"error":{"code":403,"message":"The caller does not have permission","status":"PERMISSION_DENIED"}}"#;
        assert_eq!(v(QuotaKind::None, 403, &[], gemini_model), Verdict::Answer);
        let openai_model = br#"{"error":{"message":"Project `proj_abc` does not have access to model `gpt-5`","type":"invalid_request_error","param":null,"code":"model_not_found"}}"#;
        assert_eq!(
            v(QuotaKind::OpenAi, 403, &[], openai_model),
            Verdict::Answer
        );
        let anthropic = br#"{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}"#;
        assert_eq!(
            v(QuotaKind::Anthropic, 403, &[], anthropic),
            Verdict::Answer
        );
        // The account's own faults still rotate: a real per-minute quota, a blocked key.
        assert!(matches!(
            v(QuotaKind::OpenAi, 429, &[], OPENAI_RATE),
            Verdict::Exhausted(_)
        ));
        let blocked = br#"{"error":{"code":403,"message":"Requests to this API generativelanguage.googleapis.com method google.ai.generativelanguage.v1beta.GenerativeService.StreamGenerateContent are blocked.","status":"PERMISSION_DENIED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_SERVICE_BLOCKED","domain":"googleapis.com"}]}}"#;
        assert_eq!(v(QuotaKind::None, 403, &[], blocked), Verdict::Refused);
        assert_eq!(v(QuotaKind::OpenAi, 401, &[], OPENAI_KEY), Verdict::Refused);
    }

    #[test]
    fn server_errors_and_the_rest() {
        assert_eq!(v(QuotaKind::Codex, 500, &[], b"{}"), Verdict::Unavailable);
        assert_eq!(v(QuotaKind::Codex, 502, &[], b""), Verdict::Unavailable);
        assert_eq!(
            v(
                QuotaKind::Anthropic,
                529,
                &[],
                br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            ),
            Verdict::Unavailable
        );
        assert_eq!(v(QuotaKind::Codex, 400, &[], BAD_PARAM), Verdict::Answer);
        assert_eq!(v(QuotaKind::Codex, 404, &[], b"not found"), Verdict::Answer);
        assert_eq!(v(QuotaKind::Codex, 200, &[], CODEX_LIMIT), Verdict::Answer);
        // A body too long to read whole is no quota body.
        let r = classify(
            QuotaKind::Codex,
            StatusCode::BAD_REQUEST,
            &HeaderMap::new(),
            None,
            now(),
        );
        assert_eq!(r, Verdict::Answer);
    }
}

#[cfg(test)]
mod examples {
    #[test]
    fn module_example() {
        use crate::resolver::verdict::{Verdict, classify};
        use context_relay_core::quota::QuotaKind;
        use http::{HeaderMap, StatusCode};
        use std::time::SystemTime;

        let body = br#"{"error":{"type":"usage_limit_reached","resets_in_seconds":60}}"#;
        let now = SystemTime::now();
        let v = classify(
            QuotaKind::Codex,
            StatusCode::BAD_REQUEST,
            &HeaderMap::new(),
            Some(body),
            now,
        );
        assert!(matches!(v, Verdict::Exhausted(_)));
        let body = br#"{"error":{"code":"invalid_api_key"}}"#;
        let v = classify(
            QuotaKind::Codex,
            StatusCode::UNAUTHORIZED,
            &HeaderMap::new(),
            Some(body),
            now,
        );
        assert_eq!(v, Verdict::Refused);
    }
}
