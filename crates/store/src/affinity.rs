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
    let mut k = String::with_capacity(tenant.len() + session.len() + 4);
    fill_key(&mut k, tenant, session);
    k
}

fn fill_key(buf: &mut String, tenant: &str, session: &str) {
    buf.clear();
    let mut digits = [0u8; 20];
    let mut n = tenant.len();
    let mut i = digits.len();
    loop {
        i -= 1;
        // `n % 10` is below 10: the cast cannot truncate.
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[i..] {
        buf.push(char::from(d));
    }
    buf.push(':');
    buf.push_str(tenant);
    buf.push_str(session);
}

/// Runs `f` with the key of `(tenant, session)` built in a reused per-thread buffer: look-ups
/// are on the hot path of every relayed request, and need no allocation.
fn with_key<R>(tenant: &str, session: &str, f: impl FnOnce(&str) -> R) -> R {
    thread_local! {
        static BUF: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    BUF.with(|buf| match buf.try_borrow_mut() {
        Ok(mut buf) => {
            fill_key(&mut buf, tenant, session);
            f(&buf)
        }
        // Re-entered from inside `f` (never done here, but cheap to survive).
        Err(_) => f(&key(tenant, session)),
    })
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
        with_key(tenant, session, |k| {
            self.map
                .get(k)
                .filter(|e| now_ms < after_ms(e.written_ms, ttl))
                .map(|e| e.affinity.clone())
        })
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
        with_key(tenant, session, |k| match self.map.get(k) {
            Some(e)
                if &*e.affinity.provider == provider
                    && &*e.affinity.account == account
                    && now_ms < after_ms(e.written_ms, fresh_for) =>
            {
                Write::Skip
            }
            _ => Write::Store,
        })
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
        assert_eq!(key("tenant", "s1"), "6:tenants1");
        assert_eq!(
            key(&"t".repeat(123), ""),
            format!("123:{}", "t".repeat(123))
        );
        assert_eq!(key("", "s"), "0:s");
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
