//! The OAuth token endpoint of a login's issuer: one refresh request, and what its answer means.
//!
//! The request is the one the clients send: `POST {token_url}` with the JSON body
//! `{"grant_type": "refresh_token", "refresh_token": …, "client_id": …}` (codex-rs
//! `login/src/auth/manager.rs` `request_chatgpt_token_refresh`; Claude Code posts the same
//! fields). A refusal **for good** is a 401, or an error code that says the refresh token is
//! dead: ChatGPT's `refresh_token_expired`, `refresh_token_reused`,
//! `refresh_token_invalidated` (the codes Codex CLI classifies as permanent), OAuth's
//! `invalid_grant`, `invalid_client`, `unauthorized_client` (RFC 6749 §5.2, what Claude's
//! endpoint answers). Anything else (a 5xx, a timeout, an unreadable answer) is a failure for
//! now: the pair is kept and tried again later.
//!
//! Nothing of a token reaches an error: a refusal carries the status and the issuer's error
//! code only.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Either, Full, Limited};
use serde_json::{Value, json};

use super::tokens::Secret;
use crate::upstream::HttpClient;

/// Longest a refresh may take, answer included.
pub(crate) const REFRESH_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer read.
const MAX_ANSWER: usize = 64 * 1024;

/// Error codes that mean the refresh token is dead.
const DEAD: [&str; 6] = [
    "refresh_token_expired",
    "refresh_token_reused",
    "refresh_token_invalidated",
    "invalid_grant",
    "invalid_client",
    "unauthorized_client",
];

/// Where and as whom a login refreshes.
#[derive(Clone)]
pub(crate) struct TokenEndpoint {
    pub(crate) url: Arc<str>,
    pub(crate) client_id: Arc<str>,
    pub(crate) client: Arc<HttpClient>,
}

impl std::fmt::Debug for TokenEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenEndpoint")
            .field("url", &crate::secret::redact_url(&self.url))
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

/// What a successful refresh answered.
#[derive(Debug)]
pub(crate) struct Refreshed {
    pub(crate) access: Secret,
    /// `None` when the issuer did not rotate it (the old one stays good).
    pub(crate) refresh: Option<Secret>,
    pub(crate) id_token: Option<Secret>,
    pub(crate) expires_in: Option<Duration>,
}

/// Why a refresh gave no new pair.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RefreshError {
    /// The issuer refused the refresh token for good.
    #[error("the token endpoint refused the refresh token for good ({status}, {code})")]
    Refused { status: u16, code: String },
    /// No answer worth trusting (for now).
    #[error("the refresh failed: {0}")]
    Failed(String),
}

impl TokenEndpoint {
    /// Trades `refresh` for a new pair.
    pub(crate) async fn refresh(&self, refresh: &Secret) -> Result<Refreshed, RefreshError> {
        let body = json!({
            "grant_type": "refresh_token",
            "refresh_token": refresh.expose(),
            "client_id": &*self.client_id,
        });
        let req = Request::post(&*self.url)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json")
            .header(
                header::USER_AGENT,
                concat!("context-relay-gateway/", env!("CARGO_PKG_VERSION")),
            )
            .body(Either::Right(
                Full::new(Bytes::from(body.to_string()))
                    .map_err(|e| match e {})
                    .boxed_unsync(),
            ))
            .map_err(|e| RefreshError::Failed(format!("invalid token_url: {e}")))?;
        let answer = tokio::time::timeout(REFRESH_TIMEOUT, async {
            let res = self.client.request(req).await.map_err(|e| {
                RefreshError::Failed(format!("the token endpoint could not be reached: {e}"))
            })?;
            let status = res.status();
            let bytes = Limited::new(res.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| RefreshError::Failed(format!("the answer could not be read: {e}")))?
                .to_bytes();
            Ok::<_, RefreshError>((status, bytes))
        })
        .await
        .map_err(|_| RefreshError::Failed(format!("no answer within {REFRESH_TIMEOUT:?}")))??;
        judge(answer.0, &answer.1)
    }
}

/// What an answer of `status` with `body` means (see the module docs).
pub(crate) fn judge(status: StatusCode, body: &[u8]) -> Result<Refreshed, RefreshError> {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if status.is_success() {
        let token = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic()))
                .map(Secret::new)
        };
        let access = token("access_token").ok_or_else(|| {
            RefreshError::Failed("the answer holds no usable access_token".to_owned())
        })?;
        return Ok(Refreshed {
            access,
            refresh: token("refresh_token"),
            id_token: token("id_token"),
            expires_in: v
                .get("expires_in")
                .and_then(Value::as_u64)
                .map(Duration::from_secs),
        });
    }
    let code = error_code(&v);
    let dead = code.as_deref().is_some_and(|c| DEAD.contains(&c));
    let code = code.unwrap_or_else(|| status.as_str().to_owned());
    // A throttled or timed-out request says nothing about the token, whatever its body.
    let transient =
        status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::REQUEST_TIMEOUT;
    if status == StatusCode::UNAUTHORIZED || (status.is_client_error() && !transient && dead) {
        Err(RefreshError::Refused {
            status: status.as_u16(),
            code,
        })
    } else {
        Err(RefreshError::Failed(format!("status {status}, {code}")))
    }
}

/// The issuer's error code: `error.code` (ChatGPT), `error` (OAuth) or `code`; at most 64
/// characters of an identifier.
fn error_code(v: &Value) -> Option<String> {
    let code = match v.get("error") {
        Some(Value::Object(e)) => e.get("code").and_then(Value::as_str),
        Some(Value::String(s)) => Some(s.as_str()),
        _ => v.get("code").and_then(Value::as_str),
    }?;
    let ok = !code.is_empty()
        && code.len() <= 64
        && code
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    ok.then(|| code.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn j(status: u16, body: &str) -> Result<Refreshed, RefreshError> {
        judge(StatusCode::from_u16(status).unwrap(), body.as_bytes())
    }

    #[test]
    fn answers_are_judged_like_the_clients_do() {
        let ok = j(
            200,
            r#"{"access_token":"at","refresh_token":"rt","expires_in":28800}"#,
        )
        .unwrap();
        assert_eq!(
            (ok.access.expose(), ok.refresh.unwrap().expose()),
            ("at", "rt")
        );
        assert_eq!(ok.expires_in, Some(Duration::from_secs(28_800)));
        assert!(matches!(
            j(200, r#"{"refresh_token":"rt"}"#),
            Err(RefreshError::Failed(_))
        ));
        assert!(matches!(j(200, "<html>"), Err(RefreshError::Failed(_))));

        let reused = r#"{"error":{"message":"Your refresh token has already been used","type":"invalid_request_error","param":null,"code":"refresh_token_reused"}}"#;
        assert_eq!(
            j(401, reused).unwrap_err(),
            RefreshError::Refused {
                status: 401,
                code: "refresh_token_reused".into()
            }
        );
        let grant =
            r#"{"error":"invalid_grant","error_description":"Refresh token not found or invalid"}"#;
        assert_eq!(
            j(400, grant).unwrap_err(),
            RefreshError::Refused {
                status: 400,
                code: "invalid_grant".into()
            }
        );
        // A 401 is for good whatever it says; a 5xx or another 400 is for now.
        assert!(matches!(
            j(401, "{}"),
            Err(RefreshError::Refused { status: 401, .. })
        ));
        assert!(matches!(
            j(500, r#"{"error":"temporary-failure"}"#),
            Err(RefreshError::Failed(_))
        ));
        assert!(matches!(
            j(400, r#"{"error":"invalid_request"}"#),
            Err(RefreshError::Failed(_))
        ));
        assert!(matches!(j(429, grant), Err(RefreshError::Failed(_))));
    }

    #[test]
    fn codes_are_identifiers_only() {
        let long = format!(r#"{{"error":"{}"}}"#, "x".repeat(100));
        assert_eq!(error_code(&serde_json::from_str(&long).unwrap()), None);
        assert_eq!(error_code(&json!({"error": "a b"})), None);
        assert_eq!(error_code(&json!({"code": "c"})).as_deref(), Some("c"));
    }
}
