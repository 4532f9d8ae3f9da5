//! Session bindings rebuilt from the store's affinity, so that a restart (or a binding the pool
//! forgot) does not move a session off its account.
//!
//! The pool's bindings live in memory; the relay records, durably, the account that last served
//! each `(tenant, session, combo)` (its affinity). A session the pool has no binding for is
//! looked up there once, before its first attempt: when its account belongs to one of the
//! request's targets, the session is bound to it again. Without this, every session on a later
//! account went back to the first available one after a restart, and paid a switch (scrub,
//! handoff, lost prompt cache). Only combo requests have an affinity; a store error leaves the
//! request to fill-first placement, as before.
//!
//! A store other processes write to (Redis, shared by replicas) is read for every request of
//! a session, and its affinity wins over the pool's binding: another replica may have moved
//! the session (a quota rotation, a retry on another account) since this one bound it, and
//! the relay, which reads the same affinity, would take the stale binding for a switch, and
//! the other replica the next turn for one back. What was read is handed to the relay
//! ([`StoredAffinity`]), which would otherwise read it again for the request: the price is
//! one store read per request on such a store, made earlier, not one more.

use std::sync::Arc;

use context_relay_core::HandoffKey;
use context_relay_store::HandoffStore;
use context_relay_tower::{ComboName, FactsExt, SessionId, StoredAffinity, Tenant};
use http::Extensions;

use crate::combo::RouteTargets;
use crate::pool::{AccountPools, SessionKey};

/// The longest [`rebind`] waits for the store (the Redis backend answers or fails well within).
const AFFINITY_READ_BOUND: std::time::Duration = std::time::Duration::from_secs(3);

/// The store whose affinities [`rebind`] reads.
#[derive(Clone)]
pub(crate) struct AffinityStore {
    store: Arc<dyn HandoffStore>,
    /// Other processes write to it (replicas on one Redis): its affinity is read for every
    /// request, not only for sessions the pools do not know.
    shared: bool,
}

impl AffinityStore {
    /// The affinities of `store`; shared when it is the Redis backend.
    pub(crate) fn new(store: Arc<dyn HandoffStore>) -> Self {
        let shared = store.backend() == "redis";
        Self { store, shared }
    }
}

impl std::fmt::Debug for AffinityStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AffinityStore")
            .field("backend", &self.store.backend())
            .field("shared", &self.shared)
            .finish()
    }
}

/// Binds `session` (the pool key) to the account of its stored affinity: when no pool of the
/// request's targets knows it, or, on a shared store, when the affinity names another account.
/// On a shared store, the affinity read is set on `extensions` for the relay (other stores
/// answer the relay from their own cache).
pub(super) async fn rebind(
    pools: &AccountPools,
    store: &AffinityStore,
    extensions: &mut Extensions,
    session: &SessionKey,
    targets: &RouteTargets,
) {
    let target_pools = targets
        .targets
        .iter()
        .filter_map(|t| pools.get(&t.provider));
    if !store.shared && target_pools.clone().any(|p| p.bound(session).is_some()) {
        return;
    }
    let (Some(tenant), Some(id), Some(combo)) = (
        extensions.fact::<Tenant>(),
        extensions.fact::<SessionId>(),
        extensions.fact::<ComboName>(),
    ) else {
        return;
    };
    let key = HandoffKey::new(tenant.0.clone(), id.0.clone(), combo.0.clone());
    // Bounded as the relay bounds its own store calls on a request's path: a store given to
    // `Gateway::with_store` that never answers must not hold the request.
    let read = tokio::time::timeout(AFFINITY_READ_BOUND, store.store.affinity(&key));
    let affinity = match read.await {
        Ok(Ok(Some(a))) => {
            if store.shared {
                extensions.set_fact(StoredAffinity::new(key, Some(a.clone())));
            }
            a
        }
        Ok(Ok(None)) => {
            if store.shared {
                extensions.set_fact(StoredAffinity::new(key, None));
            }
            return;
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "affinity not readable; the session is placed afresh");
            return;
        }
        Err(_) => {
            tracing::debug!("affinity read timed out; the session is placed afresh");
            return;
        }
    };
    let account = affinity.account();
    let Some(pool) = target_pools
        .into_iter()
        .find(|p| **p.name() == **account.provider())
    else {
        return;
    };
    if let Some(idx) = pool
        .accounts()
        .iter()
        .position(|a| *a.id == **account.account())
        && pool.bound(session) != Some(idx)
    {
        pool.bind(session, idx);
        tracing::debug!(
            provider = %pool.name(),
            account = %account.account(),
            "session bound again to the account of its stored affinity"
        );
    }
}
