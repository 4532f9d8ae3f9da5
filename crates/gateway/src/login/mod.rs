//! Subscription logins: accounts that authenticate with a client's OAuth login (a ChatGPT plan
//! logged in with Codex CLI, a Claude Pro/Max plan logged in with Claude Code) instead of an API
//! key.
//!
//! An account `credentials = "PATH"` names the client's own credential file ([`file`]); its
//! provider's `auth` says how the access token is sent (`"chatgpt"`: `Authorization: Bearer`
//! and `chatgpt-account-id`; `"claude-oauth"`: `Authorization: Bearer` and the
//! `oauth-2025-04-20` beta). A [`Login`] keeps the account's current pair and refreshes it:
//!
//! - **ahead of expiry**: an attempt whose access token expires within [`REFRESH_AHEAD`] (from
//!   the JWT's `exp` for ChatGPT, `expiresAt` for Claude) refreshes first, waiting for the token
//!   endpoint at most [`REFRESH_WAIT`] while its token still holds;
//! - **to the end**: a refresh runs in a task of its own, so a request that goes away (a client
//!   that hangs up) does not cut a refresh the issuer has already acted on: its rotated pair is
//!   saved and used, and the store's refresh lock released. The task is the relay's background
//!   work, which a shutdown waits for (at most its grace), so a stop during a refresh keeps
//!   the rotated pair too;
//! - **once on a 401**: an attempt the provider answers 401 refreshes (unless another request
//!   did since) and is sent again on the same account, once;
//! - **one refresh at a time**: concurrent attempts of the account whose token has expired
//!   wait for the refresh in flight and use its pair (or take its failure: none tries again
//!   before [`RETRY_REFRESH_AFTER`]); replicas sharing a Redis store take the store's refresh lock, and
//!   one that finds another replica's newer pair in the store uses it instead of refreshing;
//! - **saved before use**: refresh tokens are single-use, so the rotated pair is written to the
//!   store (compare-and-set on its version) and back into the credential file (atomically,
//!   mode 0600) before any request carries it; a restart at any moment finds a usable pair
//!   (the newer of the store's and the file's);
//! - **refused for good**: a refresh the issuer refuses for good (`refresh_token_reused`,
//!   `invalid_grant`, a 401, …) disables the account for good, with an error log line naming
//!   it; it shows as `disabled` with its login `refused` on `/admin/accounts`. The other
//!   accounts carry on. Before giving a login up, the store and the file are read again: a pair
//!   another replica or a new login wrote is used instead. A configuration reload reads the
//!   file of a refused login again and starts it afresh when it holds a new login
//!   ([`Login::renewed_by`]).
//!
//! Tokens are [`Secret`]s: no log line, error, metric, admin view or `Debug` shows one.

mod endpoint;
pub(crate) mod file;
mod jwt;
mod refresh;
mod tokens;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use context_relay_store::HandoffStore;
use context_relay_tower::Background;
use http::{HeaderName, HeaderValue};

use crate::credential::{CLAUDE_OAUTH_BETA, Credential};
pub(crate) use endpoint::{REFRESH_TIMEOUT, TokenEndpoint};
pub(crate) use file::{LoginFile, LoginKind};
pub(crate) use tokens::Tokens;

/// Codex CLI's token endpoint (`REFRESH_TOKEN_URL` in codex-rs `login/src/auth/manager.rs`).
pub(crate) const CODEX_TOKEN_URL: &str = "https://auth.openai.com/oauth/token";
/// Codex CLI's public OAuth client id (`CLIENT_ID` in codex-rs `login/src/auth/manager.rs`).
pub(crate) const CODEX_CLIENT_ID: &str = "app_EMoamEEZ73f0CkXaXp7hrann";
/// Claude Code's token endpoint (the one its published builds call; Claude Code's source is
/// not public, the value is the one public write-ups of its OAuth flow agree on).
pub(crate) const CLAUDE_TOKEN_URL: &str = "https://console.anthropic.com/v1/oauth/token";
/// Claude Code's public OAuth client id (same source as [`CLAUDE_TOKEN_URL`]).
pub(crate) const CLAUDE_CLIENT_ID: &str = "9d1c250a-e61b-44d9-88ed-5944d1962f5e";

/// How long before its expiry an access token is refreshed (Codex CLI refreshes a token that
/// expires within 5 minutes).
pub(crate) const REFRESH_AHEAD: Duration = Duration::from_secs(300);
/// How long a refresh that failed for now is not tried again (attempts would otherwise queue
/// behind a token endpoint that does not answer): the access token serves meanwhile while it
/// holds; an expired one makes the account wait a back-off.
pub(crate) const RETRY_REFRESH_AFTER: Duration = Duration::from_secs(30);
/// Longest an attempt whose access token still holds waits for its refresh ahead of expiry:
/// past it, the attempt carries the current token and the refresh ends on its own.
pub(crate) const REFRESH_WAIT: Duration = Duration::from_secs(2);

/// Where a login is, for logs and the store: provider and account.
#[derive(Debug, Clone)]
pub(crate) struct LoginName {
    pub(crate) provider: Arc<str>,
    pub(crate) account: Arc<str>,
    /// `provider/account`: the login's name in the store.
    pub(crate) key: Arc<str>,
}

impl LoginName {
    pub(crate) fn new(provider: &str, account: &str) -> Self {
        Self {
            provider: Arc::from(provider),
            account: Arc::from(account),
            key: Arc::from(format!("{provider}/{account}")),
        }
    }
}

/// A credential an attempt may carry, and the pair it came from (for [`Login::recover`]).
#[derive(Debug, Clone)]
pub(crate) struct Issued {
    pub(crate) credential: Credential,
    pub(crate) generation: u64,
}

/// Why a login cannot serve an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unusable {
    /// Refused for good (the issuer's code): the account is out until someone logs in again.
    Refused(String),
    /// No usable access token for now (the refresh failed; why).
    Unavailable(String),
}

/// How a login looks on `/admin/accounts`: expiry and state, never a token.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LoginStatus {
    pub(crate) expires_at: Option<SystemTime>,
    /// `valid`, `expired` (it is refreshed on next use) or `refused`.
    pub(crate) state: &'static str,
    /// The issuer's code of a refusal.
    pub(crate) error: Option<String>,
}

struct State {
    tokens: Arc<Tokens>,
    credential: Option<Credential>,
    /// Bumped whenever the pair changes.
    generation: u64,
    /// The store version of `tokens` (0: not written or read yet).
    version: u64,
    /// Whether the store was consulted since start.
    synced: bool,
    refused: Option<String>,
    /// The refresh token the credential file holds as last read or written here: a file
    /// that holds another one was written by someone else (a new sign-in).
    file_refresh: tokens::Secret,
    /// Until when a failed refresh is not tried again (the current pair serves meanwhile).
    failed_until: Option<SystemTime>,
    /// Whether `failed_until` comes from the token endpoint (else from the store's lock): only
    /// an issuer's failure is the answer for an attempt that needs a new pair.
    issuer_failed: bool,
}

/// One subscription login (see the module docs).
pub(crate) struct Login {
    kind: LoginKind,
    name: LoginName,
    path: PathBuf,
    endpoint: TokenEndpoint,
    store: Arc<dyn HandoffStore>,
    state: Mutex<State>,
    /// One refresh at a time; attempts wait on it.
    refreshing: Arc<tokio::sync::Mutex<()>>,
    /// Where refreshes run (tracked, so that a shutdown waits for one in flight).
    tasks: Background,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("kind", &self.kind)
            .field("name", &self.name.key)
            .field("path", &self.path)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// The headers `tokens` go upstream with for `kind`.
fn credential(kind: LoginKind, tokens: &Tokens) -> Option<Credential> {
    let c = Credential::bearer(tokens.access.expose())?;
    Some(match kind {
        LoginKind::Codex => {
            let id = HeaderValue::from_str(tokens.account_id.as_deref()?).ok()?;
            c.with(HeaderName::from_static("chatgpt-account-id"), id)
        }
        LoginKind::Claude => c.with_beta(CLAUDE_OAUTH_BETA),
    })
}

impl Login {
    /// The login of `file` (read from `path`) for account `name`, refreshing at `endpoint` in
    /// tasks of `tasks` and sharing its pair through `store`.
    pub(crate) fn new(
        name: LoginName,
        path: PathBuf,
        file: LoginFile,
        endpoint: TokenEndpoint,
        store: Arc<dyn HandoffStore>,
        tasks: Background,
    ) -> Self {
        let state = State {
            file_refresh: file.tokens.refresh.clone(),
            credential: credential(file.kind, &file.tokens),
            tokens: Arc::new(file.tokens),
            generation: 0,
            version: 0,
            synced: false,
            refused: None,
            failed_until: None,
            issuer_failed: false,
        };
        Self {
            kind: file.kind,
            name,
            path,
            endpoint,
            store,
            state: Mutex::new(state),
            refreshing: Arc::new(tokio::sync::Mutex::new(())),
            tasks,
        }
    }

    /// Whether this is the login of account `name` read from `path`, refreshing at `endpoint`'s
    /// URL with its client id (a reloaded configuration that left it unchanged).
    pub(crate) fn is_same(&self, name: &LoginName, path: &Path, endpoint: &TokenEndpoint) -> bool {
        self.name.key == name.key
            && self.path == path
            && self.endpoint.url == endpoint.url
            && self.endpoint.client_id == endpoint.client_id
    }

    /// Whether a reload must start this login afresh from `file` (its credential file, just
    /// read): the issuer refused its pair for good, and the file holds another refresh token
    /// than it did when this login last read or wrote it (someone logged in again; a file the
    /// gateway could not write keeps an old token, which is no new login).
    pub(crate) fn renewed_by(&self, file: &LoginFile) -> bool {
        let st = self.state();
        st.refused.is_some() && file.kind == self.kind && file.tokens.refresh != st.file_refresh
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update replaces whole fields: the state stays consistent after a panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The credential for an attempt at `now`: the current access token, refreshed first when
    /// it expires within [`REFRESH_AHEAD`]. An expired token waits for the refresh (or the
    /// one in flight); one that still holds waits at most [`REFRESH_WAIT`], and not at all
    /// when another attempt's refresh is in flight.
    pub(crate) async fn issue(self: &Arc<Self>, now: SystemTime) -> Result<Issued, Unusable> {
        if let Some(done) = self.satisfied(refresh::Need::Fresh, now) {
            return done;
        }
        let Some(current) = self.unexpired(now) else {
            return self.detached(refresh::Need::Fresh).await;
        };
        // The refresh's turn taken here, and handed to its task: an attempt that comes while
        // it runs finds it taken and goes with the current token.
        let Ok(turn) = self.refreshing.clone().try_lock_owned() else {
            return Ok(current);
        };
        let login = Arc::clone(self);
        let (tx, rx) = tokio::sync::oneshot::channel();
        // A tracked task, as every refresh: a shutdown waits for it, so the pair an issuer
        // rotated is saved even when the request that started it went on without it.
        let spawned = self.tasks.spawn(async move {
            let _turn = turn;
            let _ = tx.send(login.ensure_locked(refresh::Need::Fresh).await);
        });
        if !spawned {
            return Ok(current);
        }
        match tokio::time::timeout(REFRESH_WAIT, rx).await {
            Ok(Ok(done)) => done,
            Ok(Err(_)) => Err(Unusable::Unavailable("the refresh stopped".into())),
            Err(_) => Ok(current),
        }
    }

    /// After the provider answered 401 to the credential of `generation`: a refreshed one (or
    /// the one another request refreshed meanwhile).
    pub(crate) async fn recover(self: &Arc<Self>, generation: u64) -> Result<Issued, Unusable> {
        self.detached(refresh::Need::After(generation)).await
    }

    /// Meets `need` in a task of its own (see the module docs, "to the end").
    async fn detached(self: &Arc<Self>, need: refresh::Need) -> Result<Issued, Unusable> {
        let login = Arc::clone(self);
        let (tx, rx) = tokio::sync::oneshot::channel();
        // A tracked task: a shutdown waits for it, so the pair an issuer rotated is saved.
        let spawned = self.tasks.spawn(async move {
            let _ = tx.send(login.ensure(need).await);
        });
        if !spawned {
            return Err(Unusable::Unavailable("no runtime to refresh on".into()));
        }
        rx.await
            .unwrap_or_else(|_| Err(Unusable::Unavailable("the refresh stopped".into())))
    }

    /// The current credential while its access token has not expired at `now`.
    fn unexpired(&self, now: SystemTime) -> Option<Issued> {
        let st = self.state();
        if st.refused.is_some() || st.tokens.expired(now) {
            return None;
        }
        st.credential.clone().map(|credential| Issued {
            credential,
            generation: st.generation,
        })
    }

    /// Expiry and state, for the admin view.
    pub(crate) fn status(&self, now: SystemTime) -> LoginStatus {
        let st = self.state();
        let state = if st.refused.is_some() {
            "refused"
        } else if st.tokens.expired(now) {
            "expired"
        } else {
            "valid"
        };
        LoginStatus {
            expires_at: st.tokens.expires_at,
            state,
            error: st.refused.clone(),
        }
    }

    /// `chatgpt` or `claude-oauth`.
    pub(crate) fn auth(&self) -> &'static str {
        match self.kind {
            LoginKind::Codex => "chatgpt",
            LoginKind::Claude => "claude-oauth",
        }
    }
}

#[cfg(test)]
mod tests;
