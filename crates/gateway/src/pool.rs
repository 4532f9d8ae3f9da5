//! Account pools: which account of a provider serves a request.
//!
//! - **Sticky sessions**: a session stays on the account that last served it while that account
//!   is available.
//! - **Fill first**: a new session (or one whose account ran out) goes to the first available
//!   account in configuration order, so accounts are used up one after the other and the
//!   others keep their quota for the sessions that need to move.
//! - **Exhaustion**: a 429, or a quota signal at or above `rotate_at`, makes an account
//!   unavailable until the reset the provider announced (60 s when it announced none).
//! - **Refusal**: an account whose credential the provider refused (401/403) is disabled for a
//!   back-off that doubles with each consecutive refusal (1 min, 2 min, … at most 1 h). After
//!   the back-off one request probes it while the others keep skipping it: an answer that
//!   shows the credential works (a success, a quota error, an error about the request)
//!   re-enables it and resets the back-off; a refusal of the probe doubles the back-off. Further
//!   refusals while it is disabled (requests that were already on their way) change nothing.
//!   A subscription login whose refresh its issuer refused for good is disabled for good
//!   (until a new login is written to its file and the configuration reloaded, or the
//!   gateway restarted): see [`login`](crate::login).
//! - **Bounded memory**: at most [`DEFAULT_MAX_SESSIONS`] session bindings per provider; when
//!   full, the least recently used eighth is forgotten (those sessions are placed fill-first
//!   again on their next request).
//!
//! The pool is shared by every connection (axum clones services per connection), so its state
//! sits behind one short-held mutex. Functions take `now` so the rules are testable without a
//! clock.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use context_relay_core::QuotaSignal;
use context_relay_core::ResolvedAccount;
use context_relay_core::quota::QuotaKind;
use foldhash::HashMap;
use http::{HeaderName, HeaderValue, header};

use crate::config::{AuthScheme, Config, ProviderApi, ProviderConfig, QuotaFormat};
use crate::credential::Credential;
use crate::login::{Login, LoginName, TokenEndpoint};
use crate::telemetry::AccountMetrics;
use crate::upstream::{BaseUrl, HttpClient};

mod account;
pub(crate) use account::{Account, AccountAuth, AccountStatus};
mod reload;
mod session_key;
pub(crate) use session_key::SessionKey;

/// How long an account stays exhausted when the provider announced no reset.
pub(crate) const DEFAULT_RESET: Duration = Duration::from_secs(60);
/// The furthest reset believed: the longest quota window of the providers (Codex's and
/// Claude's weekly limits). A later one (`retry-after: 999999999`) is read as this.
pub(crate) const MAX_RESET: Duration = Duration::from_secs(7 * 24 * 3600);
/// Session bindings remembered per provider.
pub(crate) const DEFAULT_MAX_SESSIONS: usize = 100_000;
/// The first back-off of a refused account; it doubles with each consecutive refusal.
pub(crate) const REFUSED_BACKOFF: Duration = Duration::from_secs(60);
/// The longest back-off of a refused account.
pub(crate) const MAX_REFUSED_BACKOFF: Duration = Duration::from_secs(3600);
/// How long the probe of a disabled account may take before another request probes it (a
/// probe whose client went away never reports).
pub(crate) const PROBE_WINDOW: Duration = Duration::from_secs(60);

/// The pools of every configured provider.
#[derive(Debug, Default)]
pub(crate) struct AccountPools {
    providers: HashMap<Arc<str>, Arc<ProviderPool>>,
    /// The same pools in configuration order, for what operators read.
    ordered: Vec<Arc<ProviderPool>>,
}

/// What subscription logins need: the store that shares their pairs, and the HTTP client
/// they refresh with.
#[derive(Clone)]
pub(crate) struct LoginServices {
    pub(crate) store: Arc<dyn context_relay_store::HandoffStore>,
    pub(crate) client: Arc<HttpClient>,
    /// The logins of the pools a reload replaces: an account whose login is unchanged keeps
    /// its own (its tokens, and any refresh in flight, are not duplicated).
    pub(crate) carried: Vec<Arc<Login>>,
    /// Where refreshes run: the relay's background work, which a shutdown drains.
    pub(crate) tasks: context_relay_tower::Background,
}

impl AccountPools {
    /// One pool per provider of `config`, without its login accounts.
    #[cfg(test)]
    pub(crate) fn from_config(config: &Config) -> Self {
        Self::new(config, None)
    }

    /// One pool per provider of `config`; login accounts use `logins` (without it they are
    /// left out).
    pub(crate) fn new(config: &Config, logins: Option<&LoginServices>) -> Self {
        let ordered: Vec<Arc<ProviderPool>> = config
            .providers
            .iter()
            .map(|p| Arc::new(ProviderPool::new(p, logins)))
            .collect();
        Self {
            providers: ordered
                .iter()
                .map(|p| (p.name.clone(), p.clone()))
                .collect(),
            ordered,
        }
    }

    /// The logins of every pool, for a reload to carry over.
    pub(crate) fn logins(&self) -> Vec<Arc<Login>> {
        self.ordered
            .iter()
            .flat_map(|p| p.accounts.iter().filter_map(|a| a.login().cloned()))
            .collect()
    }

    /// The pool of `provider`.
    pub(crate) fn get(&self, provider: &str) -> Option<&Arc<ProviderPool>> {
        self.providers.get(provider)
    }

    /// Every pool, in configuration order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<ProviderPool>> {
        self.ordered.iter()
    }
}

#[derive(Debug, Default, Clone)]
struct AccountState {
    used: Option<f64>,
    exhausted_until: Option<SystemTime>,
    disabled_until: Option<SystemTime>,
    /// Consecutive refusals, for the back-off.
    refusals: u32,
    /// A disabled account past its back-off is being probed by one request until then.
    probe_until: Option<SystemTime>,
    /// A login refused for good: out of the pool.
    refused: bool,
    /// No longer in the configuration (or its credential changed): a reload replaced this pool,
    /// and what still holds it (a request in flight, its summary) does not use the account.
    removed: bool,
}

impl AccountState {
    /// Configured, its key neither refused for good nor in a back-off: it may be sent a
    /// request, whatever its quota.
    fn may_send(&self, now: SystemTime) -> bool {
        !self.refused && !self.removed && self.disabled_until.is_none_or(|t| t <= now)
    }
}

#[derive(Debug, Default)]
struct PoolState {
    accounts: Vec<AccountState>,
    /// Session → (account, last use as a tick of `clock`).
    sessions: HashMap<SessionKey, (usize, u64)>,
    clock: u64,
}

/// The accounts of one provider and their state.
#[derive(Debug)]
pub(crate) struct ProviderPool {
    name: Arc<str>,
    base_url: Arc<BaseUrl>,
    /// The `Host` of its requests, when that is known before connecting (plain `http`).
    host: Option<http::HeaderValue>,
    api: ProviderApi,
    max_output_tokens: Option<u64>,
    quota: QuotaFormat,
    rotate_at: f64,
    accounts: Vec<Account>,
    max_sessions: usize,
    state: Mutex<PoolState>,
}

impl ProviderPool {
    /// The pool of one provider's configuration (keys already resolved and credential files
    /// read by [`Config`]); login accounts use `logins` (without it they are left out). A
    /// login carried over from before a reload is kept unless its file moved or its issuer
    /// refused it and the file now holds a new login.
    pub(crate) fn new(p: &ProviderConfig, logins: Option<&LoginServices>) -> Self {
        let accounts: Vec<Account> = p
            .accounts
            .iter()
            .filter_map(|a| {
                let auth = match (&a.login, logins) {
                    (Some(file), Some(services)) => {
                        let endpoint = TokenEndpoint {
                            url: Arc::from(p.token_url()),
                            client_id: Arc::from(p.client_id()),
                            client: services.client.clone(),
                        };
                        let name = LoginName::new(&p.name, &a.id);
                        let path = a.credentials.clone().unwrap_or_default();
                        let carried = services
                            .carried
                            .iter()
                            .find(|l| l.is_same(&name, &path, &endpoint) && !l.renewed_by(file));
                        AccountAuth::Login(match carried {
                            Some(login) => login.clone(),
                            None => Arc::new(Login::new(
                                name,
                                path,
                                file.clone(),
                                endpoint,
                                services.store.clone(),
                                services.tasks.clone(),
                            )),
                        })
                    }
                    (Some(_), None) => return None,
                    (None, _) => AccountAuth::Key(key_credential(p.auth, a.api_key.as_deref()?)?),
                };
                Some(Account {
                    id: Arc::from(a.id.as_str()),
                    resolved: ResolvedAccount::new(p.name.as_str(), a.id.as_str()),
                    auth,
                    metrics: Arc::new(AccountMetrics::new(&p.name, &a.id)),
                })
            })
            .collect();
        let state = PoolState {
            accounts: vec![AccountState::default(); accounts.len()],
            sessions: HashMap::default(),
            clock: 0,
        };
        Self {
            name: Arc::from(p.name.as_str()),
            base_url: Arc::new(BaseUrl::new(&p.base_url)),
            host: crate::connector::plain_host(&p.base_url),
            api: p.api,
            max_output_tokens: p.max_output_tokens,
            quota: p.quota,
            rotate_at: p.rotate_at,
            accounts,
            max_sessions: DEFAULT_MAX_SESSIONS,
            state: Mutex::new(state),
        }
    }

    #[cfg(test)]
    /// Keeps at most `max` session bindings (at least 8).
    pub(crate) fn with_max_sessions(mut self, max: usize) -> Self {
        self.max_sessions = max.max(8);
        self
    }

    /// The provider name.
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// The base URL, with the upstream URLs made for it.
    pub(crate) fn base_url(&self) -> &Arc<BaseUrl> {
        &self.base_url
    }

    /// The `Host` of its requests when known before connecting (see [`plain_host`]).
    ///
    /// [`plain_host`]: crate::connector::plain_host
    pub(crate) fn host(&self) -> Option<&http::HeaderValue> {
        self.host.as_ref()
    }

    /// The API the provider speaks.
    pub(crate) fn api(&self) -> ProviderApi {
        self.api
    }

    /// `max_tokens` of a translated request whose client set none (`max_output_tokens`).
    pub(crate) fn max_output_tokens(&self) -> Option<u64> {
        self.max_output_tokens
    }

    /// The core parser selection for this provider's quota headers.
    pub(crate) fn quota_kind(&self) -> QuotaKind {
        self.quota.kind()
    }

    /// The accounts in configuration order.
    pub(crate) fn accounts(&self) -> &[Account] {
        &self.accounts
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // The state stays consistent after a panic elsewhere: every update is a single store.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The account for the next attempt of `session`, skipping `exclude` (accounts already
    /// tried for this request): the session's account if it is available, else the first
    /// available one. `None` when every account is exhausted or excluded.
    pub(crate) fn pick(
        &self,
        session: Option<&SessionKey>,
        exclude: &[usize],
        now: SystemTime,
    ) -> Option<usize> {
        let mut state = self.lock();
        for a in state.accounts.iter_mut() {
            if a.exhausted_until.is_some_and(|t| t <= now) {
                // The window reset: the old usage figure no longer holds.
                a.used = None;
                a.exhausted_until = None;
            }
        }
        // A disabled account past its back-off takes one probe at a time.
        let available = |i: usize, state: &PoolState| {
            !exclude.contains(&i)
                && state.accounts.get(i).is_some_and(|a| {
                    a.exhausted_until.is_none()
                        && a.may_send(now)
                        && (a.disabled_until.is_none() || a.probe_until.is_none_or(|p| p <= now))
                })
        };
        let picked = match session.and_then(|s| state.sessions.get(s)) {
            Some(&(i, _)) if available(i, &state) => Some(i),
            _ => (0..self.accounts.len()).find(|&i| available(i, &state)),
        }?;
        if let Some(a) = state.accounts.get_mut(picked)
            && a.disabled_until.is_some()
        {
            a.probe_until = Some(now + PROBE_WINDOW);
        }
        Some(picked)
    }

    /// Whether `account` may still be sent a request whatever its quota: it is configured (no
    /// reload removed it or gave it another key) and its credential is not refused or in a
    /// back-off. The summary of a turn goes to the account that served it even when the pool
    /// rotated away from it, but never past these.
    pub(crate) fn may_send(&self, account: usize, now: SystemTime) -> bool {
        self.lock()
            .accounts
            .get(account)
            .is_some_and(|a| a.may_send(now))
    }

    /// Remembers that `account` served `session` (call it on a successful answer only, so
    /// that a failing account never captures a session).
    /// Returns the account the session was bound to before, when it was another.
    pub(crate) fn bind(&self, session: &SessionKey, account: usize) -> Option<usize> {
        let mut state = self.lock();
        state.clock += 1;
        let tick = state.clock;
        if let Some(entry) = state.sessions.get_mut(session) {
            let before = entry.0;
            *entry = (account, tick);
            return (before != account).then_some(before);
        }
        if state.sessions.len() >= self.max_sessions {
            forget_least_recent(&mut state.sessions, self.max_sessions / 8);
        }
        state.sessions.insert(session.clone(), (account, tick));
        None
    }

    /// Records an answer of `account` that shows its credential works (a success, or an error
    /// about quota or about the request): a disabled account is enabled again and its refusal
    /// back-off starts over.
    pub(crate) fn succeeded(&self, account: usize) {
        let mut state = self.lock();
        if let Some(a) = state.accounts.get_mut(account)
            && (a.refusals > 0 || a.disabled_until.is_some())
        {
            a.refusals = 0;
            a.disabled_until = None;
            a.probe_until = None;
        }
    }

    /// Ends the probe of `account` without a verdict on its credential (the provider failed):
    /// the next request probes it again.
    pub(crate) fn probe_ended(&self, account: usize) {
        if let Some(a) = self.lock().accounts.get_mut(account) {
            a.probe_until = None;
        }
    }

    /// Disables `account` because the provider refused its credential, for a back-off that
    /// doubles with each consecutive refusal. Returns until when.
    ///
    /// A refusal while the account is still in its back-off (a request that was sent before
    /// it was disabled) leaves the back-off as it is: only a refused probe doubles it.
    pub(crate) fn disable(&self, account: usize, now: SystemTime) -> SystemTime {
        let mut state = self.lock();
        let Some(a) = state.accounts.get_mut(account) else {
            return now;
        };
        if let Some(until) = a.disabled_until.filter(|t| *t > now) {
            return until;
        }
        a.probe_until = None;
        let factor = 1u32 << a.refusals.min(10);
        let until = now + (REFUSED_BACKOFF * factor).min(MAX_REFUSED_BACKOFF);
        a.refusals = a.refusals.saturating_add(1);
        a.disabled_until = Some(until);
        until
    }

    /// Takes `account` out of the pool for good: its login was refused.
    pub(crate) fn refuse(&self, account: usize) {
        if let Some(a) = self.lock().accounts.get_mut(account) {
            a.refused = true;
        }
    }

    #[cfg(test)]
    /// Session bindings currently remembered.
    pub(crate) fn sessions(&self) -> usize {
        self.lock().sessions.len()
    }

    /// The account `session` is bound to, if any.
    pub(crate) fn bound(&self, session: &SessionKey) -> Option<usize> {
        self.lock().sessions.get(session).map(|(i, _)| *i)
    }

    /// Records a quota signal of `account`; at or above `rotate_at` the account is exhausted
    /// until the signal's reset. Returns whether it is now exhausted.
    pub(crate) fn observe(&self, account: usize, signal: &QuotaSignal, now: SystemTime) -> bool {
        let exhausted = signal.percent_used >= self.rotate_at;
        let mut state = self.lock();
        if let Some(a) = state.accounts.get_mut(account) {
            a.used = Some(signal.percent_used);
            if exhausted {
                a.exhausted_until = Some(reset_or_default(signal.resets_at, now));
            }
        }
        exhausted
    }

    /// Records the usage fraction of `account` without exhausting it, whatever the value (for
    /// readings of internal requests, which must not move sessions).
    pub(crate) fn note_usage(&self, account: usize, used: f64) {
        if let Some(a) = self.lock().accounts.get_mut(account) {
            a.used = Some(used);
        }
    }

    /// Makes `account` unavailable until `until`.
    pub(crate) fn mark_exhausted(&self, account: usize, until: SystemTime) {
        if let Some(a) = self.lock().accounts.get_mut(account) {
            a.exhausted_until = Some(until);
        }
    }

    /// The state of every account, in configuration order.
    pub(crate) fn snapshot(&self, now: SystemTime) -> Vec<AccountStatus> {
        let state = self.lock();
        self.accounts
            .iter()
            .zip(state.accounts.iter())
            .map(|(acct, s)| AccountStatus {
                id: acct.id.clone(),
                used: s.used,
                exhausted_until: s.exhausted_until.filter(|t| *t > now),
                disabled_until: s.disabled_until.filter(|t| *t > now),
                refused: s.refused,
            })
            .collect()
    }

    /// How many sessions are bound to each account, in configuration order.
    pub(crate) fn sessions_per_account(&self) -> Vec<usize> {
        let state = self.lock();
        let mut counts = vec![0; self.accounts.len()];
        for (account, _) in state.sessions.values() {
            if let Some(c) = counts.get_mut(*account) {
                *c += 1;
            }
        }
        counts
    }

    /// The earliest time an exhausted or disabled account becomes available again.
    pub(crate) fn next_reset(&self, now: SystemTime) -> Option<SystemTime> {
        self.lock()
            .accounts
            .iter()
            .filter_map(|a| match (a.exhausted_until, a.disabled_until) {
                (Some(e), Some(d)) => Some(e.max(d)),
                (e, d) => e.or(d),
            })
            .filter(|t| *t > now)
            .min()
    }

    /// Whether every account is out because the provider refused its credential (disabled for
    /// a back-off, probed or not, or a login refused for good), not for its quota.
    pub(crate) fn all_refused(&self) -> bool {
        let state = self.lock();
        !state.accounts.is_empty()
            && state
                .accounts
                .iter()
                .all(|a| a.refused || a.disabled_until.is_some())
    }
}

/// The headers of an API key under `auth`; `None` for a login `auth` or a key that cannot be
/// a header value (validated at load: such an account is left out rather than panic).
fn key_credential(auth: AuthScheme, key: &str) -> Option<Credential> {
    let (name, value) = match auth {
        AuthScheme::Bearer => (header::AUTHORIZATION, format!("Bearer {key}")),
        AuthScheme::XApiKey => (HeaderName::from_static("x-api-key"), key.to_owned()),
        AuthScheme::XGoogApiKey => (HeaderName::from_static("x-goog-api-key"), key.to_owned()),
        AuthScheme::Chatgpt | AuthScheme::ClaudeOauth => return None,
    };
    Some(Credential::header(
        name,
        HeaderValue::from_str(&value).ok()?,
    ))
}

/// The announced reset when it lies in the future (at most [`MAX_RESET`] away), else
/// `now + DEFAULT_RESET`.
pub(crate) fn reset_or_default(resets_at: Option<SystemTime>, now: SystemTime) -> SystemTime {
    resets_at
        .filter(|t| *t > now)
        .map_or(now + DEFAULT_RESET, |t| t.min(now + MAX_RESET))
}

/// Forgets the `count` least recently used bindings (at least one). Evicting a batch at once
/// keeps the cost amortised: one pass over the map per `count` new sessions.
fn forget_least_recent(sessions: &mut HashMap<SessionKey, (usize, u64)>, count: usize) {
    let count = count.clamp(1, sessions.len().max(1));
    let mut ticks: Vec<u64> = sessions.values().map(|(_, t)| *t).collect();
    if ticks.is_empty() {
        return;
    }
    let (_, cut, _) = ticks.select_nth_unstable(count - 1);
    let cut = *cut;
    // Ticks are unique, so exactly `count` entries are at or below the cut.
    sessions.retain(|_, (_, t)| *t > cut);
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod examples {
    #[test]
    fn module_example() {
        use crate::config::Config;
        use crate::pool::AccountPools;
        use std::time::{Duration, SystemTime};
        let config = Config::from_toml_str(
            r#"
        [[providers]]
        name = "codex"
        base_url = "http://127.0.0.1:9/v1"
        [[providers.accounts]]
        id = "a"
        api_key = "ka"
        [[providers.accounts]]
        id = "b"
        api_key = "kb"
        "#,
            |_| None,
        )
        .unwrap();
        let pools = AccountPools::from_config(&config);
        let codex = pools.get("codex").unwrap();
        let now = SystemTime::now();
        assert_eq!(codex.pick(Some(&"s1".into()), &[], now), Some(0)); // fill first
        codex.mark_exhausted(0, now + Duration::from_secs(60));
        assert_eq!(codex.pick(Some(&"s1".into()), &[], now), Some(1));
        assert_eq!(
            codex.pick(Some(&"s1".into()), &[], now + Duration::from_secs(61)),
            Some(0)
        );
    }
}
