//! Account pools: which account of a provider serves a request (DESIGN §10).
//!
//! - **Sticky sessions**: a session stays on the account that last served it while that account
//!   is available.
//! - **Fill first**: a new session (or one whose account ran out) goes to the first available
//!   account in configuration order, so accounts are used up one after the other and the
//!   others keep their quota for the sessions that need to move.
//! - **Exhaustion**: a 429, or a quota signal at or above `rotate_at`, makes an account
//!   unavailable until the reset the provider announced (60 s when it announced none).
//!
//! The pool is shared by every connection (axum clones services per connection), so its state
//! sits behind one short-held mutex. Functions take `now` so the rules are testable without a
//! clock.
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use context_relay_gateway::config::Config;
//! use context_relay_gateway::pool::AccountPools;
//! # let config = Config::from_toml_str(r#"
//! # [[providers]]
//! # name = "codex"
//! # base_url = "http://127.0.0.1:9/v1"
//! # [[providers.accounts]]
//! # id = "a"
//! # api_key = "ka"
//! # [[providers.accounts]]
//! # id = "b"
//! # api_key = "kb"
//! # "#, |_| None).unwrap();
//! let pools = AccountPools::from_config(&config);
//! let codex = pools.get("codex").unwrap();
//! let now = SystemTime::now();
//! assert_eq!(codex.pick(Some("s1"), &[], now), Some(0)); // fill first
//! codex.mark_exhausted(0, now + Duration::from_secs(60));
//! assert_eq!(codex.pick(Some("s1"), &[], now), Some(1));
//! assert_eq!(codex.pick(Some("s1"), &[], now + Duration::from_secs(61)), Some(0));
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use context_relay_core::QuotaSignal;
use context_relay_core::quota::QuotaKind;
use http::{HeaderName, HeaderValue, header};

use crate::config::{AuthScheme, Config, ProviderConfig, QuotaFormat};

/// How long an account stays exhausted when the provider announced no reset.
pub const DEFAULT_RESET: Duration = Duration::from_secs(60);
/// Sessions remembered per provider before idle ones are forgotten.
const MAX_SESSIONS: usize = 100_000;
/// A session idle for this long may be forgotten (it is then placed fill-first again).
const SESSION_IDLE: Duration = Duration::from_secs(6 * 3600);

/// The pools of every configured provider.
#[derive(Debug, Default)]
pub struct AccountPools {
    providers: HashMap<Arc<str>, Arc<ProviderPool>>,
}

impl AccountPools {
    /// One pool per provider of `config`.
    pub fn from_config(config: &Config) -> Self {
        Self {
            providers: config
                .providers
                .iter()
                .map(|p| (Arc::from(p.name.as_str()), Arc::new(ProviderPool::new(p))))
                .collect(),
        }
    }

    /// The pool of `provider`.
    pub fn get(&self, provider: &str) -> Option<&Arc<ProviderPool>> {
        self.providers.get(provider)
    }

    /// Every pool, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<ProviderPool>> {
        self.providers.values()
    }
}

/// One account's credential.
#[derive(Clone)]
pub struct Account {
    /// The account id.
    pub id: Arc<str>,
    header: (HeaderName, HeaderValue),
}

impl std::fmt::Debug for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Account")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Account {
    /// The header carrying this account's credential upstream (marked sensitive).
    pub fn credential(&self) -> (HeaderName, HeaderValue) {
        self.header.clone()
    }
}

/// A point-in-time view of one account, for logs, demos and tests.
#[derive(Debug, Clone, PartialEq)]
pub struct AccountStatus {
    /// The account id.
    pub id: Arc<str>,
    /// Last usage fraction the provider reported, if any.
    pub used: Option<f64>,
    /// Until when the account is exhausted (`None` = available).
    pub exhausted_until: Option<SystemTime>,
}

#[derive(Debug, Default, Clone)]
struct AccountState {
    used: Option<f64>,
    exhausted_until: Option<SystemTime>,
}

#[derive(Debug, Default)]
struct PoolState {
    accounts: Vec<AccountState>,
    sessions: HashMap<Arc<str>, (usize, SystemTime)>,
}

/// The accounts of one provider and their state.
#[derive(Debug)]
pub struct ProviderPool {
    name: Arc<str>,
    base_url: Arc<str>,
    quota: QuotaFormat,
    rotate_at: f64,
    accounts: Vec<Account>,
    state: Mutex<PoolState>,
}

impl ProviderPool {
    /// The pool of one provider's configuration (keys already resolved by [`Config`]).
    pub fn new(p: &ProviderConfig) -> Self {
        let accounts: Vec<Account> = p
            .accounts
            .iter()
            .filter_map(|a| {
                let key = a.api_key.as_deref()?;
                let (name, value) = match p.auth {
                    AuthScheme::Bearer => (header::AUTHORIZATION, format!("Bearer {key}")),
                    AuthScheme::XApiKey => (HeaderName::from_static("x-api-key"), key.to_owned()),
                };
                // Validated at load; an invalid key leaves the account out rather than panic.
                let mut value = HeaderValue::from_str(&value).ok()?;
                value.set_sensitive(true);
                Some(Account {
                    id: Arc::from(a.id.as_str()),
                    header: (name, value),
                })
            })
            .collect();
        let state = PoolState {
            accounts: vec![AccountState::default(); accounts.len()],
            sessions: HashMap::new(),
        };
        Self {
            name: Arc::from(p.name.as_str()),
            base_url: Arc::from(p.base_url.trim_end_matches('/')),
            quota: p.quota,
            rotate_at: p.rotate_at,
            accounts,
            state: Mutex::new(state),
        }
    }

    /// The provider name.
    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// The base URL, without a trailing `/`.
    pub fn base_url(&self) -> &Arc<str> {
        &self.base_url
    }

    /// Which quota headers this provider sends.
    pub fn quota_format(&self) -> QuotaFormat {
        self.quota
    }

    /// The core parser selection for this provider's quota headers.
    pub fn quota_kind(&self) -> QuotaKind {
        self.quota.kind()
    }

    /// The usage fraction at which an account is exhausted.
    pub fn rotate_at(&self) -> f64 {
        self.rotate_at
    }

    /// The accounts in configuration order.
    pub fn accounts(&self) -> &[Account] {
        &self.accounts
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // The state stays consistent after a panic elsewhere: every update is a single store.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The account for the next attempt of `session`, skipping `exclude` (accounts already
    /// tried for this request): the session's account if it is available, else the first
    /// available one. `None` when every account is exhausted or excluded.
    pub fn pick(&self, session: Option<&str>, exclude: &[usize], now: SystemTime) -> Option<usize> {
        let mut state = self.lock();
        for a in state.accounts.iter_mut() {
            if a.exhausted_until.is_some_and(|t| t <= now) {
                // The window reset: the old usage figure no longer holds.
                *a = AccountState::default();
            }
        }
        let available = |i: usize, state: &PoolState| {
            !exclude.contains(&i)
                && state
                    .accounts
                    .get(i)
                    .is_some_and(|a| a.exhausted_until.is_none())
        };
        if let Some(&(i, _)) = session.and_then(|s| state.sessions.get(s))
            && available(i, &state)
        {
            return Some(i);
        }
        (0..self.accounts.len()).find(|&i| available(i, &state))
    }

    /// Remembers that `account` served `session`.
    pub fn bind(&self, session: &str, account: usize, now: SystemTime) {
        let mut state = self.lock();
        if state.sessions.len() >= MAX_SESSIONS && !state.sessions.contains_key(session) {
            forget_idle(&mut state.sessions, now);
        }
        match state.sessions.get_mut(session) {
            Some(entry) => *entry = (account, now),
            None => {
                state.sessions.insert(Arc::from(session), (account, now));
            }
        }
    }

    /// The account `session` is bound to, if any.
    pub fn bound(&self, session: &str) -> Option<usize> {
        self.lock().sessions.get(session).map(|(i, _)| *i)
    }

    /// Records a quota signal of `account`; at or above `rotate_at` the account is exhausted
    /// until the signal's reset. Returns whether it is now exhausted.
    pub fn observe(&self, account: usize, signal: &QuotaSignal, now: SystemTime) -> bool {
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
    pub fn note_usage(&self, account: usize, used: f64) {
        if let Some(a) = self.lock().accounts.get_mut(account) {
            a.used = Some(used);
        }
    }

    /// Makes `account` unavailable until `until`.
    pub fn mark_exhausted(&self, account: usize, until: SystemTime) {
        if let Some(a) = self.lock().accounts.get_mut(account) {
            a.exhausted_until = Some(until);
        }
    }

    /// The state of every account, in configuration order.
    pub fn snapshot(&self, now: SystemTime) -> Vec<AccountStatus> {
        let state = self.lock();
        self.accounts
            .iter()
            .zip(state.accounts.iter())
            .map(|(acct, s)| AccountStatus {
                id: acct.id.clone(),
                used: s.used,
                exhausted_until: s.exhausted_until.filter(|t| *t > now),
            })
            .collect()
    }

    /// How many sessions are bound to each account, in configuration order.
    pub fn sessions_per_account(&self) -> Vec<usize> {
        let state = self.lock();
        let mut counts = vec![0; self.accounts.len()];
        for (account, _) in state.sessions.values() {
            if let Some(c) = counts.get_mut(*account) {
                *c += 1;
            }
        }
        counts
    }

    /// The earliest time an exhausted account becomes available again.
    pub fn next_reset(&self, now: SystemTime) -> Option<SystemTime> {
        self.lock()
            .accounts
            .iter()
            .filter_map(|a| a.exhausted_until)
            .filter(|t| *t > now)
            .min()
    }
}

/// The announced reset when it lies in the future, else `now + DEFAULT_RESET`.
pub fn reset_or_default(resets_at: Option<SystemTime>, now: SystemTime) -> SystemTime {
    resets_at
        .filter(|t| *t > now)
        .unwrap_or(now + DEFAULT_RESET)
}

fn forget_idle(sessions: &mut HashMap<Arc<str>, (usize, SystemTime)>, now: SystemTime) {
    sessions.retain(|_, (_, seen)| now.duration_since(*seen).unwrap_or_default() < SESSION_IDLE);
    if sessions.len() >= MAX_SESSIONS {
        // Still full of active sessions: keep the more recent half.
        let mut seen: Vec<SystemTime> = sessions.values().map(|(_, t)| *t).collect();
        let mid = seen.len() / 2;
        let (_, cut, _) = seen.select_nth_unstable(mid);
        let cut = *cut;
        sessions.retain(|_, (_, t)| *t > cut);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn pool(n: usize, rotate_at: f64) -> ProviderPool {
        let accounts = (0..n)
            .map(|i| format!("[[providers.accounts]]\nid = \"a{i}\"\napi_key = \"k{i}\"\n"))
            .collect::<String>();
        let text = format!(
            "[[providers]]\nname = \"p\"\nbase_url = \"http://h/v1/\"\nrotate_at = {rotate_at}\nauth = \"x-api-key\"\n{accounts}"
        );
        let c = Config::from_toml_str(&text, |_| None).unwrap();
        ProviderPool::new(&c.providers[0])
    }

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + s)
    }

    #[test]
    fn credentials_follow_auth() {
        let p = pool(1, 0.95);
        let (name, value) = p.accounts()[0].credential();
        assert_eq!(name, "x-api-key");
        assert_eq!(value, "k0");
        assert!(value.is_sensitive());
        assert_eq!(&**p.base_url(), "http://h/v1");
    }

    #[test]
    fn fill_first_and_sticky() {
        let p = pool(3, 0.95);
        assert_eq!(p.pick(Some("s1"), &[], t(0)), Some(0));
        // A session bound to the second account stays there although the first is free.
        p.bind("s2", 1, t(0));
        assert_eq!(p.pick(Some("s2"), &[], t(1)), Some(1));
        assert_eq!(p.bound("s2"), Some(1));
        // New sessions and sessionless requests fill the first account.
        assert_eq!(p.pick(Some("s3"), &[], t(1)), Some(0));
        assert_eq!(p.pick(None, &[], t(1)), Some(0));
    }

    #[test]
    fn rotation_at_threshold_until_reset() {
        let p = pool(2, 0.9);
        p.bind("s", 0, t(0));
        assert!(!p.observe(0, &QuotaSignal::used(0.89), t(0)));
        assert_eq!(p.pick(Some("s"), &[], t(0)), Some(0));
        let signal = QuotaSignal {
            percent_used: 0.9,
            resets_at: Some(t(500)),
            window: None,
        };
        assert!(p.observe(0, &signal, t(1)));
        assert_eq!(p.pick(Some("s"), &[], t(2)), Some(1));
        assert_eq!(p.next_reset(t(2)), Some(t(500)));
        let snap = p.snapshot(t(2));
        assert_eq!(snap[0].used, Some(0.9));
        assert_eq!(snap[0].exhausted_until, Some(t(500)));
        // After the reset the session's account is available again, its usage forgotten.
        assert_eq!(p.pick(Some("s"), &[], t(500)), Some(0));
        assert_eq!(p.snapshot(t(500))[0].used, None);
    }

    #[test]
    fn default_reset_when_none_announced() {
        let p = pool(1, 0.95);
        assert!(p.observe(0, &QuotaSignal::used(1.0), t(0)));
        assert_eq!(p.pick(None, &[], t(59)), None);
        assert_eq!(p.pick(None, &[], t(60)), Some(0));
        // A reset in the past counts as none.
        assert_eq!(reset_or_default(Some(t(5)), t(10)), t(70));
    }

    #[test]
    fn exclusion_and_exhaustion() {
        let p = pool(3, 0.95);
        p.bind("s", 0, t(0));
        assert_eq!(p.pick(Some("s"), &[0], t(0)), Some(1));
        p.mark_exhausted(1, t(100));
        assert_eq!(p.pick(Some("s"), &[0], t(0)), Some(2));
        assert_eq!(p.pick(Some("s"), &[0, 2], t(0)), None);
    }

    #[test]
    fn idle_sessions_are_forgotten_when_full() {
        let mut m = HashMap::new();
        for i in 0..10 {
            m.insert(Arc::from(format!("s{i}")), (0, t(i)));
        }
        forget_idle(&mut m, t(10) + SESSION_IDLE);
        // Every entry is idle for at least SESSION_IDLE: all gone.
        assert!(m.is_empty());
    }

    proptest! {
        /// Whatever happened before, `pick` returns an available, non-excluded account, and
        /// the first such account when the session is not bound.
        #[test]
        fn pick_is_fill_first(
            exhausted in proptest::collection::vec(any::<bool>(), 4),
            exclude in proptest::collection::vec(0usize..4, 0..4),
        ) {
            let p = pool(4, 0.95);
            for (i, e) in exhausted.iter().enumerate() {
                if *e {
                    p.mark_exhausted(i, t(100));
                }
            }
            let expected = (0..4).find(|i| !exhausted[*i] && !exclude.contains(i));
            prop_assert_eq!(p.pick(Some("new"), &exclude, t(1)), expected);
        }
    }
}
