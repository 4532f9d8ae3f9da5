//! What the subscription backends demand of a request, in their own words:
//!
//! | backend | demands | refusal |
//! |---|---|---|
//! | ChatGPT Codex (`/backend-api/codex/responses`) | a ChatGPT access token (an API key is refused), not expired | 401 `{"detail": {…, "code": "token_expired"}}` |
//! | | `chatgpt-account-id` naming the token's account | 403 `{"detail": …}` |
//! | | `instructions`, `input` a list, `stream: true`, `store: false`, no `max_output_tokens` / `temperature` / `top_p` ([`rules`](crate::rules)) | 400 `{"detail": "Instructions are required"}`, … |
//! | Claude OAuth (`/v1/messages` with a `sk-ant-oat01-…` Bearer token) | `anthropic-beta` containing `oauth-2025-04-20` | 401 `authentication_error` "OAuth authentication is currently not supported." |
//! | | a token not expired | 401 `authentication_error` "OAuth token has expired. Please obtain a new token or refresh your existing token." |
//! | | the Claude Code identity as the first `system` block (after Claude Code's own `x-anthropic-billing-header` block, when sent) | 400 `invalid_request_error` "This credential is only authorized for use with Claude Code and cannot be used for other API requests." |
//!
//! A ChatGPT access token is good for the Codex backend only, a Claude one for the Messages
//! API only. The wording of the refusals of a revoked token, of a missing account id and of a
//! token used on the wrong API is the simulator's own (the clients never meet them).

use axum::body::Body;
use http::{HeaderMap, Response, StatusCode};
use serde_json::{Value, json};

use super::control::json_response;
use super::oauth::{Access, SimLogin};
use super::{Api, SimState};

/// The beta a Claude OAuth request must name.
pub const OAUTH_BETA: &str = "oauth-2025-04-20";

/// How Claude Code introduces itself as the first system block (interactive, and as the Agent
/// SDK / `claude -p`).
pub const CLAUDE_CODE_IDENTITIES: [&str; 2] = [
    "You are Claude Code, Anthropic's official CLI for Claude.",
    "You are a Claude agent, built on Anthropic's Claude Agent SDK.",
];

/// Whether `path` is the ChatGPT Codex backend.
pub(crate) fn is_codex_backend(path: &str) -> bool {
    path.contains("/backend-api/codex/")
}

/// A refusal and the label it is recorded with.
pub(crate) type Refusal = Box<(Response<Body>, &'static str)>;

/// The account a request authenticates as, for a credential that is a login's access token or
/// a request to the Codex backend; `Ok(None)` when neither (the API-key path decides), `Err`
/// with the backend's refusal otherwise.
pub(crate) fn admit(
    state: &SimState,
    headers: &HeaderMap,
    path: &str,
    api: Api,
    credential: Option<&str>,
) -> Result<Option<(String, SimLogin)>, Refusal> {
    let access = credential.and_then(|c| state.logins.access(c));
    let backend = is_codex_backend(path);
    let Some(access) = access else {
        return if backend {
            Err(codex_detail(
                StatusCode::UNAUTHORIZED,
                "token_invalid",
                "Could not parse your authentication token. Please try signing in again.",
            ))
        } else {
            Ok(None)
        };
    };
    let kind = match &access {
        Access::Valid(_, k) | Access::Expired(_, k) | Access::Revoked(_, k) => *k,
    };
    match kind {
        SimLogin::Codex if !backend => Err(wrong_api(api)),
        SimLogin::Codex => match access {
            Access::Expired(..) => Err(codex_detail(
                StatusCode::UNAUTHORIZED,
                "token_expired",
                "Your authentication token has expired. Please try signing in again.",
            )),
            Access::Revoked(..) => Err(codex_detail(
                StatusCode::UNAUTHORIZED,
                "token_invalidated",
                "Your authentication token has been invalidated. Please try signing in again.",
            )),
            Access::Valid(id, kind) => {
                let named = headers
                    .get("chatgpt-account-id")
                    .and_then(|v| v.to_str().ok());
                if named.is_none() || named != state.logins.workspace(&id).as_deref() {
                    return Err(Box::new((
                        json_response(
                            StatusCode::FORBIDDEN,
                            &json!({"detail": "The chatgpt-account-id header is missing or names another account than the token's."}),
                        ),
                        "chatgpt_account_id",
                    )));
                }
                Ok(Some((id, kind)))
            }
        },
        SimLogin::Claude if api != Api::Messages || backend => Err(wrong_api(api)),
        SimLogin::Claude => {
            if !has_beta(headers, OAUTH_BETA) {
                return Err(anthropic(
                    StatusCode::UNAUTHORIZED,
                    "authentication_error",
                    "OAuth authentication is currently not supported.",
                    "oauth_beta",
                ));
            }
            match access {
                Access::Expired(..) => Err(anthropic(
                    StatusCode::UNAUTHORIZED,
                    "authentication_error",
                    "OAuth token has expired. Please obtain a new token or refresh your existing token.",
                    "token_expired",
                )),
                Access::Revoked(..) => Err(anthropic(
                    StatusCode::UNAUTHORIZED,
                    "authentication_error",
                    "OAuth token has been revoked. Please obtain a new token.",
                    "token_revoked",
                )),
                Access::Valid(id, kind) => Ok(Some((id, kind))),
            }
        }
    }
}

/// The refusal of a Claude login's request whose system prompt does not start with Claude
/// Code's identity; `None` for any other request.
pub(crate) fn check_body(login: Option<SimLogin>, request: &Value) -> Option<Refusal> {
    if login != Some(SimLogin::Claude) || claude_code_identity(request) {
        return None;
    }
    Some(anthropic(
        StatusCode::BAD_REQUEST,
        "invalid_request_error",
        "This credential is only authorized for use with Claude Code and cannot be used for other API requests.",
        "claude_code_only",
    ))
}

/// Whether the first `system` block (after Claude Code's billing-header block, when present)
/// starts with one of [`CLAUDE_CODE_IDENTITIES`].
fn claude_code_identity(request: &Value) -> bool {
    let texts: Vec<&str> = match request.get("system") {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(blocks)) => blocks
            .iter()
            .map(|b| b.get("text").and_then(Value::as_str).unwrap_or(""))
            .collect(),
        _ => Vec::new(),
    };
    let first = match texts.as_slice() {
        [billing, next, ..] if billing.starts_with("x-anthropic-billing-header:") => *next,
        [first, ..] => *first,
        [] => return false,
    };
    CLAUDE_CODE_IDENTITIES
        .iter()
        .any(|id| first.trim_start().starts_with(id))
}

/// Whether one of the `anthropic-beta` headers lists `beta`.
fn has_beta(headers: &HeaderMap, beta: &str) -> bool {
    headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|b| b.trim() == beta)
}

fn codex_detail(status: StatusCode, code: &'static str, message: &str) -> Refusal {
    let body = json!({"detail": {"message": message, "type": "invalid_request_error",
                                 "param": null, "code": code}});
    Box::new((json_response(status, &body), code))
}

fn anthropic(status: StatusCode, kind: &str, message: &str, label: &'static str) -> Refusal {
    let body = json!({"type": "error", "error": {"type": kind, "message": message},
                      "request_id": "req_sim"});
    Box::new((json_response(status, &body), label))
}

/// A login's token sent to an API it is not good for.
fn wrong_api(api: Api) -> Refusal {
    if api == Api::Messages {
        return anthropic(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid x-api-key",
            "wrong_api",
        );
    }
    let body = json!({"error": {"message": "You have insufficient permissions for this operation. Missing scopes: api.responses.write.",
                                "type": "invalid_request_error", "param": null, "code": "missing_scope"}});
    Box::new((json_response(StatusCode::UNAUTHORIZED, &body), "wrong_api"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_and_beta() {
        let cc = json!({"system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197; cc_entrypoint=cli;"},
            {"type": "text", "text": CLAUDE_CODE_IDENTITIES[0]},
            {"type": "text", "text": "You are an interactive agent."}]});
        assert!(claude_code_identity(&cc));
        assert!(claude_code_identity(
            &json!({"system": [{"type": "text", "text": CLAUDE_CODE_IDENTITIES[1]}]})
        ));
        assert!(!claude_code_identity(&json!({"system": "You are terse."})));
        assert!(!claude_code_identity(&json!({"messages": []})));
        let other_first = json!({"system": [{"type": "text", "text": "Be terse."},
                                            {"type": "text", "text": CLAUDE_CODE_IDENTITIES[0]}]});
        assert!(!claude_code_identity(&other_first));
        assert!(check_body(Some(SimLogin::Claude), &other_first).is_some());
        assert!(check_body(None, &other_first).is_none());

        let mut h = HeaderMap::new();
        h.append(
            "anthropic-beta",
            "claude-code-20250219, oauth-2025-04-20".parse().unwrap(),
        );
        assert!(has_beta(&h, OAUTH_BETA));
        let mut h = HeaderMap::new();
        h.append("anthropic-beta", "claude-code-20250219".parse().unwrap());
        h.append("anthropic-beta", "oauth-2025-04-20".parse().unwrap());
        assert!(has_beta(&h, OAUTH_BETA));
        assert!(!has_beta(&HeaderMap::new(), OAUTH_BETA));
    }
}
