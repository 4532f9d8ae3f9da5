//! Reading the claims the gateway needs from a ChatGPT token (a JWT), without verifying it:
//! the issuer verifies its tokens, the gateway only reads when the access token expires (`exp`)
//! and which ChatGPT account it belongs to (`chatgpt_account_id` under
//! `https://api.openai.com/auth`, where Codex CLI reads it too).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

/// Longest token decoded (real ones are a few KB).
const MAX_TOKEN: usize = 64 * 1024;

/// The claims of `token` (the JSON object of its middle part), `None` when it is no JWT.
fn claims(token: &str) -> Option<Value> {
    if token.len() > MAX_TOKEN {
        return None;
    }
    let mut parts = token.split('.');
    let (_, payload, _) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    // Some issuers pad; the URL-safe alphabet is the JWT one.
    let bytes = URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    serde_json::from_slice::<Value>(&bytes)
        .ok()
        .filter(Value::is_object)
}

/// When `token` expires (its `exp` claim, Unix seconds).
pub(crate) fn expires_at(token: &str) -> Option<SystemTime> {
    let exp = claims(token)?.get("exp")?.as_u64()?;
    UNIX_EPOCH.checked_add(Duration::from_secs(exp))
}

/// The ChatGPT account `token` belongs to.
pub(crate) fn chatgpt_account_id(token: &str) -> Option<String> {
    claims(token)?
        .get("https://api.openai.com/auth")?
        .get("chatgpt_account_id")?
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn jwt(claims: &str) -> String {
        format!(
            "eyJhbGciOiJSUzI1NiJ9.{}.c2ln",
            URL_SAFE_NO_PAD.encode(claims)
        )
    }

    #[test]
    fn claims_are_read() {
        let t = jwt(
            r#"{"exp":1700000000,"https://api.openai.com/auth":{"chatgpt_account_id":"ws-1"}}"#,
        );
        assert_eq!(
            expires_at(&t),
            Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
        assert_eq!(chatgpt_account_id(&t).as_deref(), Some("ws-1"));
        assert_eq!(expires_at("sk-ant-oat01-abc"), None);
        assert_eq!(expires_at(&jwt("[1]")), None);
        assert_eq!(expires_at(&jwt(r#"{"exp":"soon"}"#)), None);
        assert_eq!(chatgpt_account_id(&jwt(r#"{"exp":1}"#)), None);
        assert_eq!(expires_at("a.b.c.d"), None);
    }

    proptest! {
        #[test]
        fn any_text_is_read_without_panicking(s in ".{0,200}") {
            let _ = expires_at(&s);
            let _ = chatgpt_account_id(&s);
        }
    }
}
