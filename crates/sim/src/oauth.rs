//! Subscription logins of the simulated provider: the OAuth token endpoints of ChatGPT (Codex
//! CLI) and of Claude (Claude Code), with access tokens that expire and refresh tokens that
//! rotate and are single-use, as the real ones.
//!
//! - `POST /oauth/token` is `https://auth.openai.com/oauth/token` and takes Codex CLI's client
//!   id; `POST /v1/oauth/token` is `https://console.anthropic.com/v1/oauth/token` and takes
//!   Claude Code's. Both take the JSON body the CLIs send
//!   (`{"grant_type": "refresh_token", "refresh_token", "client_id"}`); another client id is
//!   refused (`invalid_client`), another grant type too (`unsupported_grant_type`).
//! - A refresh answers a new access token **and a new refresh token**; the old refresh token is
//!   dead. Presenting it again is refused with the real error shape (ChatGPT: 401
//!   `refresh_token_reused`; Claude: 400 `invalid_grant`) and, as OAuth refresh-token rotation
//!   with reuse detection does, revokes that login's chain: its current refresh token and
//!   access tokens die too. Each login ([`SimProvider::login_file`]) starts a chain of its
//!   own.
//! - ChatGPT access tokens are JWTs (`exp`, and the `chatgpt_account_id` claim under
//!   `https://api.openai.com/auth`, as Codex reads them); Claude ones are `sk-ant-oat01-…`.
//!   Each expires after [`SimBuilder::access_ttl`](crate::SimBuilder::access_ttl) seconds, or
//!   at once with [`SimProvider::expire_access`](crate::SimProvider::expire_access).
//! - A revoked login ([`SimProvider::revoke`](crate::SimProvider::revoke)) has the access
//!   tokens of every chain issued so far refused, and their refresh tokens refused for good
//!   (ChatGPT `refresh_token_invalidated`, Claude `invalid_grant`); a login made after it
//!   works.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use axum::body::Body;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::{Response, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::control::json_response;
use super::{SimBuilder, SimProvider, lock, unix_now};

impl SimBuilder {
    /// Adds an account `id` that is a subscription login of `kind` instead of an API key: its
    /// credential file comes from [`SimProvider::login_file`], its tokens from the token
    /// endpoint.
    pub fn login(mut self, id: impl Into<String>, kind: SimLogin) -> Self {
        self.logins.push((id.into(), kind));
        self
    }

    /// Seconds an access token of a login lives (3600 by default).
    pub fn access_ttl(mut self, secs: u64) -> Self {
        self.access_ttl = secs;
        self
    }

    /// Makes the token endpoint take `delay` before it answers (a distant issuer), so that
    /// requests that need a refresh pile up while one is in flight. The issuer acts on a
    /// request when it arrives, as a real one does: a refresh is done (the old refresh token
    /// dead) even if the client hangs up before the answer comes.
    pub fn token_delay(mut self, delay: std::time::Duration) -> Self {
        self.token_delay = Some(delay);
        self
    }
}

impl SimProvider {
    /// A new login of account `id`, as logging in with the client's CLI writes it: a Codex CLI
    /// `auth.json` or a Claude Code `.credentials.json` holding a fresh pair. `None` for an
    /// account that is no login.
    pub fn login_file(&self, id: &str) -> Option<Value> {
        self.state.logins.login_file(id, None)
    }

    /// [`login_file`](Self::login_file) whose access token expires in `secs` seconds (the
    /// later ones live [`SimBuilder::access_ttl`]).
    pub fn login_file_expiring(&self, id: &str, secs: u64) -> Option<Value> {
        self.state.logins.login_file(id, Some(secs))
    }

    /// The token endpoint of `kind`'s logins: `{url}/oauth/token` (ChatGPT) or
    /// `{url}/v1/oauth/token` (Claude).
    pub fn token_url(&self, kind: SimLogin) -> String {
        match kind {
            SimLogin::Codex => format!("{}/oauth/token", self.server.url()),
            SimLogin::Claude => format!("{}/v1/oauth/token", self.server.url()),
        }
    }

    /// `{url}/backend-api/codex`: the `base_url` of the ChatGPT Codex backend.
    pub fn codex_base_url(&self) -> String {
        format!("{}/backend-api/codex", self.server.url())
    }

    /// Expires every access token issued to login `id` so far (the next request with one
    /// gets the backend's expired-token 401).
    pub fn expire_access(&self, id: &str) {
        self.state.logins.expire(id);
    }

    /// Successful refreshes of login `id` at the token endpoint.
    pub fn refreshes(&self, id: &str) -> u64 {
        self.state.logins.refreshes(id)
    }

    /// The bodies of every token request received, in order.
    pub fn token_requests(&self) -> Vec<Value> {
        self.state.logins.requests()
    }

    /// Makes the token endpoints answer every request `status` (`Some(503)`: the issuer is
    /// down, nothing rotates), until called with `None`.
    pub fn token_outage(&self, status: Option<StatusCode>) {
        self.state.logins.set_outage(status);
    }
}

/// Whether `path` is one of the token endpoints.
pub(crate) fn is_token_path(path: &str) -> bool {
    path == "/oauth/token" || path == "/v1/oauth/token"
}

/// Codex CLI's public OAuth client id (`CLIENT_ID` in codex-rs `login/src/auth/manager.rs`).
pub const CODEX_CLIENT_ID: &str = "app_EMoamEEZ73f0CkXaXp7hrann";
/// Claude Code's public OAuth client id.
pub const CLAUDE_CLIENT_ID: &str = "9d1c250a-e61b-44d9-88ed-5944d1962f5e";

/// Which client's login an account of the simulated provider is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimLogin {
    /// A ChatGPT plan logged in with Codex CLI (`auth.json`), served on
    /// `/backend-api/codex/responses`.
    Codex,
    /// A Claude Pro/Max plan logged in with Claude Code (`.credentials.json`), served on
    /// `/v1/messages` with the OAuth beta.
    Claude,
}

impl SimLogin {
    fn client_id(self) -> &'static str {
        match self {
            Self::Codex => CODEX_CLIENT_ID,
            Self::Claude => CLAUDE_CLIENT_ID,
        }
    }
}

/// What an access token presented to the API is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Access {
    /// Valid: the login's account.
    Valid(String, SimLogin),
    /// It was valid and expired.
    Expired(String, SimLogin),
    /// Its login was revoked.
    Revoked(String, SimLogin),
}

struct Login {
    id: String,
    kind: SimLogin,
    /// The ChatGPT account id (the `chatgpt-account-id` header value).
    workspace: String,
    /// Refresh tokens that may still be used, with their chain (one chain per login).
    live: HashMap<String, u64>,
    /// Refresh tokens already used, with their chain.
    used: HashMap<String, u64>,
    /// Every access token issued: token, expiry (Unix seconds), chain.
    access: Vec<(String, u64, u64)>,
    /// Chains revoked (by reuse, or by [`Logins::revoke`]).
    revoked: HashSet<u64>,
    chains: u64,
    refreshes: u64,
}

/// Every login of one simulated provider.
pub(crate) struct Logins {
    logins: Mutex<Vec<Login>>,
    ttl: u64,
    seed: u64,
    next: Mutex<u64>,
    /// Bodies of the token requests received, in order.
    requests: Mutex<Vec<Value>>,
    /// While set, every token request is answered this status (an issuer that is down).
    outage: Mutex<Option<StatusCode>>,
}

/// A fresh pair: (access, refresh, id token for Codex), and the access token's expiry.
struct Pair {
    access: String,
    refresh: String,
    id_token: Option<String>,
    expires_at: u64,
}

fn jwt(claims: &Value) -> String {
    let enc = |v: &Value| URL_SAFE_NO_PAD.encode(v.to_string());
    let signature = URL_SAFE_NO_PAD.encode(Sha256::digest(claims.to_string().as_bytes()));
    format!(
        "{}.{}.{signature}",
        enc(&json!({"alg": "RS256", "typ": "JWT"})),
        enc(claims)
    )
}

impl Logins {
    pub(crate) fn new(accounts: &[(String, SimLogin)], ttl: u64, seed: u64) -> Self {
        let logins = accounts
            .iter()
            .map(|(id, kind)| Login {
                id: id.clone(),
                kind: *kind,
                workspace: format!("ws-{id}"),
                live: HashMap::new(),
                used: HashMap::new(),
                access: Vec::new(),
                revoked: HashSet::new(),
                chains: 0,
                refreshes: 0,
            })
            .collect();
        Self {
            logins: Mutex::new(logins),
            ttl,
            seed,
            next: Mutex::new(1),
            requests: Mutex::new(Vec::new()),
            outage: Mutex::new(None),
        }
    }

    fn nonce(&self, what: &str, id: &str) -> String {
        let n = {
            let mut next = lock(&self.next);
            *next += 1;
            *next
        };
        let digest = Sha256::digest(format!("{}:{what}:{id}:{n}", self.seed).as_bytes());
        digest.iter().take(24).map(|b| format!("{b:02x}")).collect()
    }

    /// Issues a new pair to `login` (a new chain when `replacing` is `None`), its access token
    /// living `ttl` seconds (the configured TTL when `None`).
    fn issue(&self, login: &mut Login, replacing: Option<&str>, ttl: Option<u64>) -> Pair {
        let chain = match replacing.and_then(|old| login.live.remove(old).map(|c| (old, c))) {
            Some((old, chain)) => {
                login.used.insert(old.to_owned(), chain);
                chain
            }
            None => {
                login.chains += 1;
                login.chains
            }
        };
        let now = unix_now();
        // An issuer may answer any `expires_in`; its own clock saturates.
        let expires_at = now.saturating_add(ttl.unwrap_or(self.ttl));
        let pair = match login.kind {
            SimLogin::Codex => {
                let auth =
                    json!({"chatgpt_account_id": login.workspace, "chatgpt_plan_type": "plus"});
                let access = jwt(&json!({"exp": expires_at, "iat": now,
                    "jti": self.nonce("access", &login.id),
                    "https://api.openai.com/auth": auth}));
                let id_token = jwt(&json!({"exp": expires_at, "iat": now,
                    "email": format!("{}@example.com", login.id),
                    "https://api.openai.com/auth": auth}));
                Pair {
                    access,
                    refresh: format!("rt_{}", self.nonce("refresh", &login.id)),
                    id_token: Some(id_token),
                    expires_at,
                }
            }
            SimLogin::Claude => Pair {
                access: format!("sk-ant-oat01-{}", self.nonce("access", &login.id)),
                refresh: format!("sk-ant-ort01-{}", self.nonce("refresh", &login.id)),
                id_token: None,
                expires_at,
            },
        };
        login.live.insert(pair.refresh.clone(), chain);
        login.access.push((pair.access.clone(), expires_at, chain));
        pair
    }

    /// A new login of account `id` (what logging in with the CLI writes), as the CLI's
    /// credential file; `None` for an account that is no login.
    pub(crate) fn login_file(&self, id: &str, ttl: Option<u64>) -> Option<Value> {
        let mut logins = lock(&self.logins);
        let login = logins.iter_mut().find(|l| l.id == id)?;
        let pair = self.issue(login, None, ttl);
        Some(match login.kind {
            SimLogin::Codex => json!({
                "OPENAI_API_KEY": null,
                "tokens": {"id_token": pair.id_token, "access_token": pair.access,
                           "refresh_token": pair.refresh, "account_id": login.workspace},
                "last_refresh": jiff::Timestamp::now().to_string(),
            }),
            SimLogin::Claude => json!({"claudeAiOauth": {
                "accessToken": pair.access, "refreshToken": pair.refresh,
                "expiresAt": pair.expires_at.saturating_mul(1000),
                "scopes": ["user:inference", "user:profile"], "subscriptionType": "max"}}),
        })
    }

    /// The ChatGPT account id of login `id`.
    pub(crate) fn workspace(&self, id: &str) -> Option<String> {
        lock(&self.logins)
            .iter()
            .find(|l| l.id == id)
            .map(|l| l.workspace.clone())
    }

    /// The login whose access token `token` is, valid or not.
    pub(crate) fn owner(&self, token: &str) -> Option<String> {
        self.access(token).map(|a| match a {
            Access::Valid(id, _) | Access::Expired(id, _) | Access::Revoked(id, _) => id,
        })
    }

    /// Whose access token `token` is, and whether it still holds.
    pub(crate) fn access(&self, token: &str) -> Option<Access> {
        let now = unix_now();
        let logins = lock(&self.logins);
        let (login, &(_, exp, chain)) = logins
            .iter()
            .find_map(|l| l.access.iter().find(|(t, ..)| t == token).map(|a| (l, a)))?;
        let expired = exp <= now;
        let (id, kind) = (login.id.clone(), login.kind);
        Some(if login.revoked.contains(&chain) {
            Access::Revoked(id, kind)
        } else if expired {
            Access::Expired(id, kind)
        } else {
            Access::Valid(id, kind)
        })
    }

    /// Expires every access token of login `id` now.
    pub(crate) fn expire(&self, id: &str) {
        let now = unix_now();
        if let Some(l) = lock(&self.logins).iter_mut().find(|l| l.id == id) {
            for (_, exp, _) in &mut l.access {
                *exp = (*exp).min(now);
            }
        }
    }

    /// Revokes every chain of login `id` issued so far: their access and refresh tokens are
    /// refused from now on.
    pub(crate) fn revoke(&self, id: &str) {
        if let Some(l) = lock(&self.logins).iter_mut().find(|l| l.id == id) {
            l.revoked.extend(1..=l.chains);
        }
    }

    /// Successful refreshes of login `id`.
    pub(crate) fn refreshes(&self, id: &str) -> u64 {
        lock(&self.logins)
            .iter()
            .find(|l| l.id == id)
            .map_or(0, |l| l.refreshes)
    }

    /// The token requests received, bodies as JSON (secrets included: a test double's record).
    pub(crate) fn requests(&self) -> Vec<Value> {
        lock(&self.requests).clone()
    }

    /// Sets (or with `None` ends) an outage of the token endpoints.
    pub(crate) fn set_outage(&self, status: Option<StatusCode>) {
        *lock(&self.outage) = status;
    }

    /// Serves `POST /oauth/token` (ChatGPT) and `POST /v1/oauth/token` (Claude).
    pub(crate) fn token(&self, path: &str, body: &[u8]) -> Response<Body> {
        let kind = if path.ends_with("/v1/oauth/token") {
            SimLogin::Claude
        } else {
            SimLogin::Codex
        };
        let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        lock(&self.requests).push(request.clone());
        if let Some(status) = *lock(&self.outage) {
            return json_response(
                status,
                &json!({"error": "server_error", "error_description": "The service is unavailable"}),
            );
        }
        let field = |k: &str| request.get(k).and_then(Value::as_str).unwrap_or("");
        if field("client_id") != kind.client_id() {
            return oauth_error(
                StatusCode::UNAUTHORIZED,
                "invalid_client",
                "Client authentication failed",
            );
        }
        if field("grant_type") != "refresh_token" {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                "The authorization grant type is not supported",
            );
        }
        let presented = field("refresh_token");
        let mut logins = lock(&self.logins);
        let found = logins.iter_mut().find_map(|l| {
            let live = l.live.get(presented).map(|c| (*c, false));
            let chain = live.or_else(|| l.used.get(presented).map(|c| (*c, true)))?;
            (l.kind == kind).then_some((l, chain))
        });
        let Some((login, (chain, used))) = found else {
            return refused(kind, Refusal::Unknown);
        };
        if login.revoked.contains(&chain) {
            return refused(kind, Refusal::Revoked);
        }
        if used {
            // Reuse detection: the whole chain dies.
            login.revoked.insert(chain);
            return refused(kind, Refusal::Reused);
        }
        let pair = self.issue(login, Some(presented), None);
        login.refreshes += 1;
        let body = match kind {
            SimLogin::Codex => json!({
                "id_token": pair.id_token, "access_token": pair.access,
                "refresh_token": pair.refresh, "expires_in": self.ttl, "token_type": "Bearer",
                "scope": "openid profile email offline_access"}),
            SimLogin::Claude => json!({
                "token_type": "Bearer", "access_token": pair.access, "expires_in": self.ttl,
                "refresh_token": pair.refresh, "scope": "user:inference user:profile",
                "organization": {"uuid": format!("org-{}", login.id), "name": "sim"},
                "account": {"uuid": format!("acct-{}", login.id),
                            "email_address": format!("{}@example.com", login.id)}}),
        };
        json_response(StatusCode::OK, &body)
    }
}

#[derive(Clone, Copy)]
enum Refusal {
    Reused,
    Revoked,
    Unknown,
}

/// A refused refresh in each issuer's words: ChatGPT's `{"error": {…, "code"}}` with a 401 and
/// the codes Codex CLI classifies; Claude's OAuth `invalid_grant` with a 400.
fn refused(kind: SimLogin, why: Refusal) -> Response<Body> {
    match kind {
        SimLogin::Codex => {
            let (code, message) = match why {
                Refusal::Reused => (
                    "refresh_token_reused",
                    "Your refresh token has already been used to generate a new access token. Please try signing in again.",
                ),
                Refusal::Revoked | Refusal::Unknown => (
                    "refresh_token_invalidated",
                    "Your refresh token has been invalidated. Please try signing in again.",
                ),
            };
            json_response(
                StatusCode::UNAUTHORIZED,
                &json!({"error": {"message": message, "type": "invalid_request_error",
                                  "param": null, "code": code}}),
            )
        }
        SimLogin::Claude => oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_grant",
            "Refresh token not found or invalid",
        ),
    }
}

fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response<Body> {
    json_response(
        status,
        &json!({"error": error, "error_description": description}),
    )
}
