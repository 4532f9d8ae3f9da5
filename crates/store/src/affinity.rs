//! The in-memory affinity table: the whole table for memory and redb, a cache for redis.

use std::sync::Arc;
use std::time::Duration;

use crate::index::FastMap;

use crate::Affinity;
use crate::clock::after_ms;

/// One `(tenant, session)` → account entry and when it was last written.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) affinity: Affinity,
    pub(crate) written_ms: u64,
}

/// `(tenant, session)` → [`Entry`].
#[derive(Debug, Default)]
pub(crate) struct AffinityMap {
    // Keyed by one string (see `key`): a lookup by two `&str` then needs no tuple of `Arc`s.
    map: FastMap<String, Entry>,
}

/// Length-prefixed, so that no two `(tenant, session)` pairs share a key whatever they contain.
pub(crate) fn key(tenant: &str, session: &str) -> String {
    format!("{}:{tenant}{session}", tenant.len())
}

/// What `set_affinity` has to do.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Write {
    /// Same account, written recently: nothing.
    Skip,
    /// New, changed, or due for a refresh.
    Store,
}

impl AffinityMap {
    /// The live entry at `now_ms`, with entries older than `ttl` treated as absent.
    pub(crate) fn get(
        &self,
        tenant: &str,
        session: &str,
        now_ms: u64,
        ttl: Duration,
    ) -> Option<Affinity> {
        self.map
            .get(&key(tenant, session))
            .filter(|e| now_ms < after_ms(e.written_ms, ttl))
            .map(|e| e.affinity.clone())
    }

    /// Whether `set_affinity(provider, account)` at `now_ms` must write: yes unless the same
    /// account was written less than `fresh_for` ago.
    pub(crate) fn needs_write(
        &self,
        tenant: &str,
        session: &str,
        provider: &str,
        account: &str,
        now_ms: u64,
        fresh_for: Duration,
    ) -> Write {
        match self.map.get(&key(tenant, session)) {
            Some(e)
                if &*e.affinity.provider == provider
                    && &*e.affinity.account == account
                    && now_ms < after_ms(e.written_ms, fresh_for) =>
            {
                Write::Skip
            }
            _ => Write::Store,
        }
    }

    pub(crate) fn insert(&self, tenant: &str, session: &str, affinity: Affinity, written_ms: u64) {
        self.map.insert(
            key(tenant, session),
            Entry {
                affinity,
                written_ms,
            },
        );
    }

    pub(crate) fn insert_key(&self, key: String, entry: Entry) {
        self.map.insert(key, entry);
    }

    /// Removes entries older than `ttl`; returns their keys.
    pub(crate) fn purge(&self, now_ms: u64, ttl: Duration) -> Vec<String> {
        let mut gone = Vec::new();
        self.map.retain(|k, e| {
            let keep = now_ms < after_ms(e.written_ms, ttl);
            if !keep {
                gone.push(k.clone());
            }
            keep
        });
        gone
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

/// Interns provider and account names: affinities repeat a handful of them millions of times.
pub(crate) fn affinity(provider: &str, account: &str) -> Affinity {
    Affinity {
        provider: Arc::from(provider),
        account: Arc::from(account),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_never_collide() {
        assert_ne!(key("a:b", "c"), key("a", "b:c"));
        assert_ne!(key("ab", "c"), key("a", "bc"));
    }

    #[test]
    fn writes_only_when_changed_or_stale() {
        let m = AffinityMap::default();
        let ttl = Duration::from_secs(400);
        let fresh = ttl / 4;
        assert_eq!(m.needs_write("t", "s", "p", "a", 0, fresh), Write::Store);
        m.insert("t", "s", affinity("p", "a"), 0);
        assert_eq!(m.needs_write("t", "s", "p", "a", 1_000, fresh), Write::Skip);
        assert_eq!(
            m.needs_write("t", "s", "p", "b", 1_000, fresh),
            Write::Store
        );
        assert_eq!(
            m.needs_write("t", "s", "p", "a", 100_000, fresh),
            Write::Store
        );
        assert!(m.get("t", "s", 399_999, ttl).is_some());
        assert!(m.get("t", "s", 400_000, ttl).is_none());
        assert_eq!(m.purge(400_000, ttl), vec![key("t", "s")]);
        assert_eq!(m.len(), 0);
    }
}
