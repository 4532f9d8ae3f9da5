//! The refresh of one login: waiting for the one in flight, agreeing with the store (another
//! replica's pair, or this process's own before a restart), the store-wide lock, the token
//! endpoint, and saving the rotated pair before it is used.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::endpoint::RefreshError;
use super::tokens::Tokens;
use super::{Issued, Login, Unusable, credential, file, jwt};

/// How long the store-wide refresh lock lives: longer than a refresh may take.
pub(crate) const LOCK_TTL: Duration = Duration::from_secs(60);
/// Longest wait for another replica's refresh, when this one has no usable access token: the
/// lock's life, so that a holder that died is outlived and its lock taken over.
const LOCK_WAIT: Duration = LOCK_TTL;
/// Longest a spent pair waits for the store to answer the lock again (a store that stalls for
/// a moment trips the request path's short timeout and its breaker) before it is refreshed
/// without the lock.
const STORE_WAIT: Duration = Duration::from_secs(5);
/// Why a login that failed to refresh a moment ago cannot serve an attempt that needs it.
fn recently_failed() -> Unusable {
    Unusable::Unavailable(format!(
        "its refresh failed less than {} s ago and is not tried again before then",
        super::RETRY_REFRESH_AFTER.as_secs()
    ))
}

/// What agreeing with the store comes to.
enum Sync {
    /// The store holds the current pair.
    Same,
    /// The store's newer pair is now the current one.
    Adopted(Arc<Tokens>),
    /// The current pair goes to the store, which holds this version.
    Put(Arc<Tokens>, u64),
}

/// What the caller needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Need {
    /// An access token that does not expire within `REFRESH_AHEAD`.
    Fresh,
    /// Another pair than the one of this generation (the provider refused it).
    After(u64),
}

impl Login {
    /// The answer to `need` from the current state alone, if there is one.
    pub(super) fn satisfied(
        &self,
        need: Need,
        now: SystemTime,
    ) -> Option<Result<Issued, Unusable>> {
        let st = self.state();
        if let Some(code) = &st.refused {
            return Some(Err(Unusable::Refused(code.clone())));
        }
        // A refresh failed a moment ago: not tried again before `failed_until`, whoever asks
        // (the current token serves meanwhile, while it holds). A store that could not lock
        // only defers the refresh ahead of expiry.
        let failed = st.failed_until.is_some_and(|t| t > now);
        let issuer_failed = failed && st.issuer_failed;
        let done = match need {
            Need::Fresh if issuer_failed && st.tokens.expired(now) => {
                return Some(Err(recently_failed()));
            }
            Need::Fresh => st.synced && (st.tokens.fresh(now, super::REFRESH_AHEAD) || failed),
            Need::After(generation) if issuer_failed && st.generation == generation => {
                return Some(Err(recently_failed()));
            }
            Need::After(generation) => st.generation != generation,
        };
        let issued = st.credential.clone().map(|credential| Issued {
            credential,
            generation: st.generation,
        });
        match (done, issued) {
            (true, Some(issued)) => Some(Ok(issued)),
            _ => None,
        }
    }

    /// Whether the current pair is of no use for `need` any more: refused by the provider, or
    /// expired.
    fn spent(&self, need: Need) -> bool {
        need != Need::Fresh || self.state().tokens.expired(SystemTime::now())
    }

    /// The current pair, as the fallback of a refresh that failed for now: still good for
    /// `Fresh` while it has not expired.
    fn fallback(&self, need: Need, why: String) -> Result<Issued, Unusable> {
        let st = self.state();
        match (&st.credential, need) {
            (Some(credential), Need::Fresh) if !st.tokens.expired(SystemTime::now()) => {
                Ok(Issued {
                    credential: credential.clone(),
                    generation: st.generation,
                })
            }
            _ => Err(Unusable::Unavailable(why)),
        }
    }

    /// Refreshes (or adopts a newer stored pair) so that `need` is met: one caller at a time.
    pub(super) async fn ensure(&self, need: Need) -> Result<Issued, Unusable> {
        let _one = self.refreshing.lock().await;
        self.ensure_locked(need).await
    }

    /// [`ensure`](Self::ensure) for a caller that holds the refresh's turn.
    pub(super) async fn ensure_locked(&self, need: Need) -> Result<Issued, Unusable> {
        if let Some(done) = self.satisfied(need, SystemTime::now()) {
            return done;
        }
        self.sync().await;
        if let Some(done) = self.satisfied(need, SystemTime::now()) {
            return done;
        }
        let deadline = Instant::now() + LOCK_WAIT;
        let mut poll = Duration::from_millis(50);
        let mut store_down_since = None;
        loop {
            match self.store.lock_login(&self.name.key, LOCK_TTL).await {
                Ok(Some(lock)) => {
                    // The last holder may have written right before letting go.
                    self.sync().await;
                    let out = match self.satisfied(need, SystemTime::now()) {
                        Some(done) => done,
                        None => self.refresh_now(need).await,
                    };
                    if let Err(e) = self.store.unlock_login(&lock).await {
                        tracing::warn!(provider = %self.name.provider, account = %self.name.account, error = %e, "cannot release the login's refresh lock; it runs out by itself");
                    }
                    return out;
                }
                Ok(None) if need == Need::Fresh && !self.spent(need) => {
                    // Another replica refreshes: the current token serves meanwhile, and its
                    // pair is found in the store next time.
                    return self.fallback(need, String::new());
                }
                Ok(None) if Instant::now() < deadline => {
                    // Another replica refreshes and this one has no usable token: wait for
                    // the other's pair.
                    tokio::time::sleep(poll).await;
                    poll = (poll * 2).min(Duration::from_secs(1));
                    self.sync().await;
                    if let Some(done) = self.satisfied(need, SystemTime::now()) {
                        return done;
                    }
                }
                Ok(None) => {
                    return self.fallback(
                        need,
                        "another replica has held the login's refresh lock too long".to_owned(),
                    );
                }
                Err(e) => {
                    let spent = self.spent(need);
                    if spent
                        && store_down_since.get_or_insert_with(Instant::now).elapsed() < STORE_WAIT
                    {
                        // The store may be back in a moment (its breaker lets a trial through
                        // after 100 ms, then 200 ms, …): a refresh without the lock is the last
                        // resort, since another replica may be refreshing the same pair.
                        tokio::time::sleep(poll).await;
                        poll = (poll * 2).min(Duration::from_secs(1));
                        continue;
                    }
                    // Nothing coordinates the replicas now: refresh only a pair that is of no
                    // use any more, the risk of two refreshes is then worth taking.
                    tracing::warn!(provider = %self.name.provider, account = %self.name.account, error = %e, refreshing = spent, "the store cannot lock the login's refresh");
                    if spent {
                        return self.refresh_now(need).await;
                    }
                    let mut st = self.state();
                    st.failed_until = Some(SystemTime::now() + super::RETRY_REFRESH_AFTER);
                    st.issuer_failed = false;
                    drop(st);
                    return self.fallback(need, format!("the store cannot lock the refresh: {e}"));
                }
            }
        }
    }

    /// Agrees with the store: adopts a newer pair it holds, else puts the current one there.
    pub(super) async fn sync(&self) {
        let (name, provider, account) = (&self.name.key, &self.name.provider, &self.name.account);
        let stored = match self.store.login(name).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(%provider, %account, error = %e, "cannot read the login from the store; using the pair this process holds");
                self.state().synced = true;
                return;
            }
        };
        let parsed = stored
            .as_ref()
            .map(|s| (s.version, serde_json::from_slice::<Tokens>(&s.data)));
        let step = {
            let mut st = self.state();
            st.synced = true;
            match parsed {
                Some((v, _)) if v == st.version => Sync::Same,
                Some((v, Ok(theirs))) if theirs.newer_than(&st.tokens) => {
                    self.adopt(&mut st, theirs, v);
                    Sync::Adopted(st.tokens.clone())
                }
                Some((v, parsed)) => {
                    if let Err(e) = parsed {
                        tracing::warn!(%provider, %account, error = %e, "the login stored for this account cannot be read; replacing it");
                    }
                    Sync::Put(st.tokens.clone(), v)
                }
                None => Sync::Put(st.tokens.clone(), 0),
            }
        };
        match step {
            Sync::Same => {}
            Sync::Adopted(tokens) => {
                tracing::info!(%provider, %account, "login: using the newer pair found in the store");
                self.write_file(&tokens).await;
            }
            // The store holds nothing, an older pair, or one it cannot read: ours replaces it.
            Sync::Put(ours, version) => {
                if let Some(v) = self.put(&ours, version).await {
                    let mut st = self.state();
                    if Arc::ptr_eq(&st.tokens, &ours) {
                        st.version = v;
                    }
                }
            }
        }
    }

    /// Makes `tokens` (at store `version`) the current pair.
    fn adopt(&self, st: &mut super::State, tokens: Tokens, version: u64) {
        st.credential = credential(self.kind, &tokens);
        st.tokens = Arc::new(tokens);
        st.version = version;
        st.generation += 1;
        st.failed_until = None;
    }

    /// Writes `tokens` to the store if it still holds `version`; the new version.
    async fn put(&self, tokens: &Tokens, version: u64) -> Option<u64> {
        let data = serde_json::to_vec(tokens).ok()?;
        match self.store.put_login(&self.name.key, version, &data).await {
            Ok(v) => v,
            Err(e) => {
                self.save_failed("store", &e);
                None
            }
        }
    }

    /// Writes `tokens` back into the credential file (off the async workers); whether it did.
    async fn write_file(&self, tokens: &Tokens) -> bool {
        let refresh = tokens.refresh.clone();
        let (path, kind, tokens) = (self.path.clone(), self.kind, tokens.clone());
        let written = tokio::task::spawn_blocking(move || file::write(&path, kind, &tokens)).await;
        match written {
            Ok(Ok(())) => {
                self.state().file_refresh = refresh;
                true
            }
            Ok(Err(e)) => {
                self.save_failed("file", &e);
                false
            }
            Err(e) => {
                self.save_failed("file", &e);
                false
            }
        }
    }

    fn save_failed(&self, target: &'static str, error: &dyn std::fmt::Display) {
        let (provider, account) = (&self.name.provider, &self.name.account);
        tracing::error!(%provider, %account, target, path = %self.path.display(), %error, "cannot save the login's pair");
        metrics::counter!("context_relay_gateway_login_save_failures_total",
            "provider" => provider.to_string(), "account" => account.to_string(), "target" => target)
        .increment(1);
    }

    fn count(&self, outcome: &'static str) {
        metrics::counter!("context_relay_gateway_login_refreshes_total",
            "provider" => self.name.provider.to_string(), "account" => self.name.account.to_string(),
            "outcome" => outcome)
        .increment(1);
    }

    /// Trades the current refresh token for a new pair and saves it before anything uses it.
    async fn refresh_now(&self, need: Need) -> Result<Issued, Unusable> {
        let (provider, account) = (&self.name.provider, &self.name.account);
        let (old, version) = {
            let st = self.state();
            (st.tokens.clone(), st.version)
        };
        let now = SystemTime::now();
        match self.endpoint.refresh(&old.refresh).await {
            Ok(r) => {
                let tokens = Tokens {
                    // An `expires_in` past what the clock can hold is no expiry known.
                    expires_at: jwt::expires_at(r.access.expose())
                        .or_else(|| r.expires_in.and_then(|d| now.checked_add(d))),
                    access: r.access,
                    refresh: r.refresh.unwrap_or_else(|| old.refresh.clone()),
                    id_token: r.id_token.or_else(|| old.id_token.clone()),
                    account_id: old.account_id.clone(),
                    obtained_at: Some(now),
                };
                // Saved before use: the old refresh token is dead from here on.
                let mut saved = self.put(&tokens, version).await;
                if saved.is_none() {
                    // Someone wrote meanwhile; the pair just issued is the live one.
                    if let Ok(Some(current)) = self.store.login(&self.name.key).await {
                        saved = self.put(&tokens, current.version).await;
                    }
                }
                let filed = self.write_file(&tokens).await;
                if saved.is_none() && !filed {
                    tracing::error!(%provider, %account, "the login's rotated pair is saved nowhere: a restart loses this login until someone logs in again");
                }
                let expires_in = tokens
                    .expires_at
                    .and_then(|t| t.duration_since(now).ok())
                    .map_or(0, |d| d.as_secs());
                let mut st = self.state();
                self.adopt(&mut st, tokens, saved.unwrap_or(0));
                self.count("ok");
                tracing::info!(%provider, %account, expires_in_secs = expires_in, "login refreshed");
                match &st.credential {
                    Some(credential) => Ok(Issued {
                        credential: credential.clone(),
                        generation: st.generation,
                    }),
                    None => Err(Unusable::Unavailable(
                        "the refreshed access token cannot be sent in a header".to_owned(),
                    )),
                }
            }
            Err(RefreshError::Refused { status, code }) => {
                // Before giving up: another holder may have refreshed (the store), or someone
                // logged in again (the file). Their pair is used as it is: should it be spent
                // too, the next attempt refreshes it.
                let before = self.state().generation;
                self.sync().await;
                let moved = self.state().generation != before;
                if moved || self.reread_file(&old) {
                    let st = self.state();
                    if let Some(credential) = &st.credential {
                        return Ok(Issued {
                            credential: credential.clone(),
                            generation: st.generation,
                        });
                    }
                }
                self.count("refused");
                tracing::error!(%provider, %account, status, error = %code, path = %self.path.display(), "the login was refused for good by its token endpoint; account disabled until someone logs in again (then reload the configuration or restart the gateway)");
                self.state().refused = Some(code.clone());
                Err(Unusable::Refused(code))
            }
            Err(RefreshError::Failed(why)) => {
                self.count("failed");
                let mut st = self.state();
                st.failed_until = Some(SystemTime::now() + super::RETRY_REFRESH_AFTER);
                st.issuer_failed = true;
                drop(st);
                tracing::warn!(%provider, %account, error = %why, "login refresh failed; the current pair is kept and tried again later");
                self.fallback(need, why)
            }
        }
    }

    /// Adopts the credential file's pair when it is another than `old` (a new login); whether
    /// it did.
    fn reread_file(&self, old: &Tokens) -> bool {
        // Another than the pair refused, and than the file held when last read or written
        // here: a file the gateway could not write still holds a pair it spent.
        let written = self.state().file_refresh.clone();
        match file::read(&self.path) {
            Ok(f)
                if f.kind == self.kind
                    && f.tokens.refresh != old.refresh
                    && f.tokens.refresh != written =>
            {
                let mut st = self.state();
                st.file_refresh = f.tokens.refresh.clone();
                // Not in the store yet: the next sync writes it there.
                self.adopt(&mut st, f.tokens, 0);
                tracing::info!(provider = %self.name.provider, account = %self.name.account, "login: using the new pair found in the credential file");
                true
            }
            _ => false,
        }
    }
}
