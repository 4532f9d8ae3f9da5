//! The accounts of one provider and which session goes to which.
//!
//! A session stays on the account it was first sent to (its *binding*) until that account is
//! exhausted; a new session, or one whose account is exhausted, goes to the first account that
//! is not (fill first, in configuration order). An account is exhausted until its quota resets,
//! after a 429 or a quota signal at or above [`ROTATE_AT`].
//!
//! ```
//! use std::time::{Duration, Instant};
//! use context_relay_pingora_example::pool::{Account, Pool};
//!
//! let pool = Pool::new("codex", vec![Account::new("a", "key-a"), Account::new("b", "key-b")]);
//! let now = Instant::now();
//! assert_eq!(pool.route("t", Some("s1"), now).id(), "a");
//! pool.exhaust(0, now + Duration::from_secs(60));
//! assert_eq!(pool.route("t", Some("s1"), now).id(), "b");
//! // Once moved, the session stays on `b`, even after `a` is back.
//! let route = pool.route("t", Some("s1"), now + Duration::from_secs(61));
//! assert_eq!(route.id(), "b");
//! // The relay's account reference of the route.
//! assert_eq!(route.account(), &context_relay_core::ResolvedAccount::new("codex", "b"));
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use context_relay_core::ResolvedAccount;
use context_relay_core::quota::{self, QuotaKind, QuotaSignal};
use http::{HeaderMap, HeaderValue, StatusCode};

/// Usage at or above which an account is taken out of rotation until it resets.
pub const ROTATE_AT: f64 = 0.95;

/// How long an account stays exhausted when the provider did not say when it resets.
pub const DEFAULT_RESET: Duration = Duration::from_secs(60);

/// Most session bindings remembered; past it the oldest half is forgotten (a forgotten
/// session is routed like a new one, and the relay's store still knows its account).
pub const MAX_BINDINGS: usize = 100_000;

/// One credential of the provider.
#[derive(Clone)]
pub struct Account {
    id: String,
    authorization: HeaderValue,
}

impl std::fmt::Debug for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Account")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Account {
    /// An account `id` whose requests carry `Authorization: Bearer {api_key}`.
    ///
    /// A key that is not a valid header value gives an account whose requests the provider
    /// refuses (it is never a panic).
    pub fn new(id: impl Into<String>, api_key: &str) -> Self {
        let mut authorization = HeaderValue::from_str(&format!("Bearer {api_key}"))
            .unwrap_or_else(|_| HeaderValue::from_static("Bearer invalid"));
        authorization.set_sensitive(true);
        Self {
            id: id.into(),
            authorization,
        }
    }

    /// The account id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The `authorization` header value sent upstream.
    pub fn authorization(&self) -> &HeaderValue {
        &self.authorization
    }
}

/// The accounts and the routing state. Shared by all requests (it is `Sync`).
#[derive(Debug)]
pub struct Pool {
    accounts: Vec<Arc<Slot>>,
    state: Mutex<State>,
}

/// One account as routes hand it out.
#[derive(Debug)]
struct Slot {
    reference: ResolvedAccount,
    authorization: HeaderValue,
}

#[derive(Debug, Default)]
struct State {
    exhausted_until: Vec<Option<Instant>>,
    bindings: HashMap<(String, String), Binding>,
    next_stamp: u64,
}

#[derive(Debug, Clone, Copy)]
struct Binding {
    account: usize,
    stamp: u64,
}

/// Where one request goes.
#[derive(Debug, Clone)]
pub struct Route {
    index: usize,
    slot: Arc<Slot>,
    moved: bool,
}

impl Route {
    /// Position of the account in the pool.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The account id.
    pub fn id(&self) -> &str {
        self.slot.reference.account()
    }

    /// The account, as the relay refers to it.
    pub fn account(&self) -> &ResolvedAccount {
        &self.slot.reference
    }

    /// The `authorization` header value of the account.
    pub fn authorization(&self) -> &HeaderValue {
        &self.slot.authorization
    }

    /// Whether the session was bound to another account until this request.
    pub fn moved(&self) -> bool {
        self.moved
    }
}

impl Pool {
    /// A pool of `accounts` of `provider`, tried in this order for new sessions.
    ///
    /// # Panics
    /// When `accounts` is empty (a configuration error caught at start-up).
    pub fn new(provider: &str, accounts: Vec<Account>) -> Self {
        assert!(!accounts.is_empty(), "a pool needs at least one account");
        let state = State {
            exhausted_until: vec![None; accounts.len()],
            ..State::default()
        };
        let accounts = accounts
            .into_iter()
            .map(|a| {
                Arc::new(Slot {
                    reference: ResolvedAccount::new(provider, a.id),
                    authorization: a.authorization,
                })
            })
            .collect();
        Self {
            accounts,
            state: Mutex::new(state),
        }
    }

    /// The provider of the accounts, as the relay names it (lower case).
    pub fn provider(&self) -> &str {
        self.accounts[0].reference.provider()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The account for a request of `session` (of `tenant`) at `now`, binding the session to
    /// it.
    ///
    /// Without a session the request goes to the first available account. When every account
    /// is exhausted the session's own account (or the first) is used anyway, and the provider
    /// answers for itself.
    pub fn route(&self, tenant: &str, session: Option<&str>, now: Instant) -> Route {
        let mut state = self.lock();
        let available = |state: &State, i: usize| state.exhausted_until[i].is_none_or(|t| t <= now);
        let bound = session.and_then(|s| {
            state
                .bindings
                .get(&(tenant.to_owned(), s.to_owned()))
                .map(|b| b.account)
        });
        let index = bound
            .filter(|&i| available(&state, i))
            .or_else(|| (0..self.accounts.len()).find(|&i| available(&state, i)))
            .or(bound)
            .unwrap_or(0);
        if let Some(session) = session {
            state.bind(tenant, session, index);
        }
        Route {
            index,
            slot: self.accounts[index].clone(),
            moved: bound.is_some_and(|b| b != index),
        }
    }

    /// Takes account `index` out of rotation until `until`.
    pub fn exhaust(&self, index: usize, until: Instant) {
        if let Some(slot) = self.lock().exhausted_until.get_mut(index) {
            *slot = Some(slot.map_or(until, |t| t.max(until)));
        }
    }

    /// Reads the quota signal of a response `route` got; the account leaves rotation when the
    /// response says it is used up (a signal at [`ROTATE_AT`], a 429 with its reset).
    pub fn observe(
        &self,
        route: &Route,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Option<QuotaSignal> {
        let now = SystemTime::now();
        let signal = quota::from_response(QuotaKind::Auto, status, headers, None, now);
        if let Some(s) = signal.filter(|s| s.percent_used >= ROTATE_AT) {
            let reset = s.resets_at.and_then(|t| t.duration_since(now).ok());
            tracing::info!(
                account = route.id(),
                used = s.percent_used,
                "account leaves rotation"
            );
            self.exhaust(
                route.index(),
                Instant::now() + reset.unwrap_or(DEFAULT_RESET),
            );
        }
        signal
    }

    /// Whether account `index` is out of rotation at `now`.
    pub fn is_exhausted(&self, index: usize, now: Instant) -> bool {
        self.lock()
            .exhausted_until
            .get(index)
            .copied()
            .flatten()
            .is_some_and(|t| t > now)
    }
}

impl State {
    fn bind(&mut self, tenant: &str, session: &str, account: usize) {
        self.next_stamp += 1;
        let stamp = self.next_stamp;
        let key = (tenant.to_owned(), session.to_owned());
        if self.bindings.len() >= MAX_BINDINGS && !self.bindings.contains_key(&key) {
            // Forget the older half: one sort per MAX_BINDINGS / 2 new sessions.
            let mut stamps: Vec<u64> = self.bindings.values().map(|b| b.stamp).collect();
            stamps.sort_unstable();
            let cut = stamps[stamps.len() / 2];
            self.bindings.retain(|_, b| b.stamp >= cut);
        }
        self.bindings.insert(key, Binding { account, stamp });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> Pool {
        Pool::new(
            "codex",
            vec![Account::new("a", "key-a"), Account::new("b", "key-b")],
        )
    }

    #[test]
    fn new_sessions_fill_the_first_account() {
        let pool = pool();
        let now = Instant::now();
        assert_eq!(pool.route("t", Some("s1"), now).id(), "a");
        assert_eq!(pool.route("t", Some("s2"), now).id(), "a");
        assert_eq!(pool.route("t", None, now).id(), "a");
    }

    #[test]
    fn a_session_stays_until_its_account_is_exhausted() {
        let pool = pool();
        let now = Instant::now();
        assert!(!pool.route("t", Some("s1"), now).moved());
        pool.exhaust(0, now + Duration::from_secs(10));
        let moved = pool.route("t", Some("s1"), now);
        assert_eq!(moved.id(), "b");
        assert!(moved.moved());
        assert!(!pool.route("t", Some("s1"), now).moved());
        // `a` resets, `s1` stays on `b`; a new session fills `a` again.
        let later = now + Duration::from_secs(11);
        assert!(!pool.is_exhausted(0, later));
        assert_eq!(pool.route("t", Some("s1"), later).id(), "b");
        assert_eq!(pool.route("t", Some("s2"), later).id(), "a");
    }

    #[test]
    fn tenants_do_not_share_bindings() {
        let pool = pool();
        let now = Instant::now();
        pool.exhaust(0, now + Duration::from_secs(10));
        assert_eq!(pool.route("t1", Some("s"), now).id(), "b");
        let later = now + Duration::from_secs(11);
        assert_eq!(pool.route("t2", Some("s"), later).id(), "a");
        assert_eq!(pool.route("t1", Some("s"), later).id(), "b");
    }

    #[test]
    fn all_exhausted_keeps_the_session_where_it_was() {
        let pool = pool();
        let now = Instant::now();
        assert_eq!(pool.route("t", Some("s"), now).id(), "a");
        pool.exhaust(1, now + Duration::from_secs(10));
        assert_eq!(pool.route("t", Some("s"), now).id(), "a");
        pool.exhaust(0, now + Duration::from_secs(10));
        assert_eq!(pool.route("t", Some("s"), now).id(), "a");
        assert_eq!(pool.route("t", None, now).id(), "a");
    }

    #[test]
    fn exhaustion_only_grows() {
        let pool = pool();
        let now = Instant::now();
        pool.exhaust(0, now + Duration::from_secs(10));
        pool.exhaust(0, now + Duration::from_secs(5));
        assert!(pool.is_exhausted(0, now + Duration::from_secs(7)));
        pool.exhaust(7, now + Duration::from_secs(5));
    }

    #[test]
    fn bindings_are_bounded() {
        let pool = pool();
        let now = Instant::now();
        for i in 0..MAX_BINDINGS + 10 {
            pool.route("t", Some(&i.to_string()), now);
        }
        let len = pool.lock().bindings.len();
        assert!(len <= MAX_BINDINGS, "{len}");
        assert!(len >= MAX_BINDINGS / 2, "{len}");
    }
}
