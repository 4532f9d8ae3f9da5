//! What a configuration reload does to the pools: the new ones take over what the old ones
//! know ([`AccountPools::carry_from`]), and the old ones, which requests in flight (and the
//! summaries they start) still hold, stop using the accounts the new configuration removed or
//! gave another credential ([`AccountPools::retire_removed`]): an operator who removes a
//! leaked key expects no more traffic on it.

use std::sync::Arc;

use super::{Account, AccountAuth, AccountPools, ProviderPool};

impl AccountPools {
    /// Takes over what `old` (the pools before a configuration reload) knows of the providers
    /// both configurations have (see [`ProviderPool::carry_from`]).
    pub(crate) fn carry_from(&self, old: &AccountPools) {
        for pool in &self.ordered {
            if let Some(before) = old.get(pool.name()) {
                pool.carry_from(before);
            }
        }
    }

    /// These pools were replaced by `next`: each account `next` does not have with the same
    /// credential is no longer picked from them.
    pub(crate) fn retire_removed(&self, next: &AccountPools) {
        for pool in &self.ordered {
            pool.retire_removed(next.get(pool.name()).map(Arc::as_ref));
        }
    }
}

impl ProviderPool {
    /// Takes over what `old` (the same provider before a configuration reload) knows, by
    /// account id: each remaining account's usage, exhaustion and refusal back-off (the
    /// back-off only when its credential is the same: a reload that gives a refused account a
    /// new key lets it be tried at once), and the sessions bound to it. A removed account's
    /// sessions are placed afresh; a new account starts unused.
    pub(crate) fn carry_from(&self, old: &ProviderPool) {
        // Index in this pool of each account of the old one.
        let moved: Vec<Option<usize>> = old
            .accounts
            .iter()
            .map(|a| self.accounts.iter().position(|n| n.id == a.id))
            .collect();
        let before = old.lock();
        let mut state = self.lock();
        for (i, account) in before.accounts.iter().enumerate() {
            if let Some(Some(j)) = moved.get(i)
                && let Some(slot) = state.accounts.get_mut(*j)
            {
                *slot = account.clone();
                if let (Some(was), Some(now)) = (old.accounts.get(i), self.accounts.get(*j))
                    && !same_account(was, now)
                {
                    slot.disabled_until = None;
                    slot.refusals = 0;
                    slot.probe_until = None;
                    slot.refused = false;
                }
            }
        }
        state.sessions = before
            .sessions
            .iter()
            .filter_map(|(session, (i, tick))| {
                let j = moved.get(*i).copied().flatten()?;
                Some((session.clone(), (j, *tick)))
            })
            .collect();
        state.clock = before.clock;
    }

    /// This pool was replaced by `next` (`None`: the provider is gone): its accounts that
    /// `next` lacks, or has with another credential, are no longer picked.
    fn retire_removed(&self, next: Option<&ProviderPool>) {
        let kept: Vec<bool> = self
            .accounts
            .iter()
            .map(|a| next.is_some_and(|n| n.accounts.iter().any(|b| same_account(a, b))))
            .collect();
        let mut state = self.lock();
        for (slot, kept) in state.accounts.iter_mut().zip(kept) {
            slot.removed |= !kept;
        }
        drop(state);
        // An account gone from the configuration: its last usage reading is no longer one.
        for account in &self.accounts {
            if !next.is_some_and(|n| n.accounts.iter().any(|b| b.id == account.id)) {
                account.metrics.forget_used();
            }
        }
    }
}

/// Whether `b` is `a` with the same credential: the same key, or the same login (a reload
/// carries an unchanged login over as it is).
fn same_account(a: &Account, b: &Account) -> bool {
    a.id == b.id
        && match (&a.auth, &b.auth) {
            (AccountAuth::Key(x), AccountAuth::Key(y)) => x.same(y),
            (AccountAuth::Login(x), AccountAuth::Login(y)) => Arc::ptr_eq(x, y),
            _ => false,
        }
}
