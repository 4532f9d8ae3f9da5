//! Affinities this replica could not write to Redis.
//!
//! A Redis that answers reads but refuses writes (`maxmemory` with `noeviction`, a read-only
//! replica after a failover, `CLIENT PAUSE WRITE` past the timeout) keeps a session's old
//! affinity. Read back on the session's next request, it would make that request a switch
//! again, with another handoff, and so every later one. So a failed write is remembered here
//! with what Redis held when it was made (`over`), and a later read that still finds that value
//! answers with the unwritten one instead: this replica's requests see their own decision.
//! A read that finds anything else (the write landed after all, or another replica wrote since)
//! ends the entry, as does a successful write; a read that answers with the kept value tries
//! the write again ([`Resolved::Kept`]), so the entry ends once Redis takes writes again.
//! Other replicas see Redis's value, as they would have without this table.
//!
//! The table is bounded: past [`capacity`](Unwritten::new) entries a new failure is not
//! remembered, and that session behaves as without the table; the store's purge drops
//! entries older than the affinity TTL (sessions that never came back).

use context_relay_core::time::to_unix_millis;

use crate::Affinity;
use crate::index::FastMap;

/// The unwritten affinities, by the affinity table's key (see `affinity::key`).
#[derive(Debug)]
pub(super) struct Unwritten {
    map: FastMap<String, Pending>,
    capacity: usize,
}

#[derive(Debug)]
struct Pending {
    /// What this replica decided.
    affinity: Affinity,
    /// What Redis held when the first unwritten decision was made (`None`: nothing).
    over: Option<Affinity>,
    /// When the last write of it failed (Unix ms).
    failed_ms: u64,
}

/// What [`Unwritten::resolve`] answers.
#[derive(Debug, PartialEq)]
pub(super) enum Resolved {
    /// What Redis holds is the session's.
    Read(Option<Affinity>),
    /// This replica's unwritten decision (Redis still holds what it was to replace): to be
    /// written again.
    Kept(Affinity),
}

impl Unwritten {
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            map: FastMap::default(),
            capacity: capacity.max(1),
        }
    }

    /// Whether `key` has an unwritten affinity (its next `set_affinity` must write).
    pub(super) fn contains(&self, key: &str) -> bool {
        !self.map.is_empty() && self.map.contains_key(key)
    }

    /// What Redis is known to hold under `key` before this replica's unwritten decisions: the
    /// first decision's `over` when one is pending, else `last_read`.
    pub(super) fn base(&self, key: &str, last_read: Option<Affinity>) -> Option<Affinity> {
        match self.map.get(key) {
            Some(p) => p.over.clone(),
            None => last_read,
        }
    }

    /// Remembers that writing `affinity` under `key` failed at `now_ms` while Redis held
    /// `over`.
    pub(super) fn failed(
        &self,
        key: String,
        affinity: Affinity,
        over: Option<Affinity>,
        now_ms: u64,
    ) {
        if self.map.len() >= self.capacity && !self.map.contains_key(&key) {
            return;
        }
        let failed_ms = now_ms;
        self.map.insert(
            key,
            Pending {
                affinity,
                over,
                failed_ms,
            },
        );
    }

    /// `kept` (the entry of `key` when it was read) was written, or Redis moved on: the entry
    /// ends unless a newer decision replaced it meanwhile.
    pub(super) fn settled(&self, key: &str, kept: &Affinity) {
        self.map.remove_if(key, |_, p| p.affinity == *kept);
    }

    /// Writing `kept` again failed at `now_ms`: the entry (if it still holds `kept`) lives on.
    pub(super) fn still_failing(&self, key: &str, kept: &Affinity, now_ms: u64) {
        if let Some(mut p) = self.map.get_mut(key)
            && p.affinity == *kept
        {
            p.failed_ms = now_ms;
        }
    }

    /// Drops the entries whose last write failed `ttl_ms` or more before `now_ms`.
    pub(super) fn purge(&self, now_ms: u64, ttl_ms: u64) {
        if !self.map.is_empty() {
            self.map
                .retain(|_, p| now_ms.saturating_sub(p.failed_ms) < ttl_ms);
        }
    }

    /// A write of `key` succeeded: Redis holds this replica's decision.
    pub(super) fn written(&self, key: &str) {
        if !self.map.is_empty() {
            self.map.remove(key);
        }
    }

    /// The affinity of `key` given that Redis answered `read`: the unwritten one while Redis
    /// still holds what it was written over, else `read` (and the entry ends).
    pub(super) fn resolve(&self, key: &str, read: Option<Affinity>) -> Resolved {
        if self.map.is_empty() {
            return Resolved::Read(read);
        }
        match self.map.get(key) {
            None => return Resolved::Read(read),
            Some(p) if same_in_redis(p.over.as_ref(), read.as_ref()) => {
                return Resolved::Kept(p.affinity.clone());
            }
            Some(_) => {}
        }
        // Redis moved on: its value is the session's. (Checked again under the shard's lock,
        // so that a failure noted meanwhile over the value just read stays.)
        self.map
            .remove_if(key, |_, p| !same_in_redis(p.over.as_ref(), read.as_ref()));
        Resolved::Read(read)
    }
}

/// Whether `a` and `b` are the same in what Redis keeps of an affinity (account, model, the
/// foreign digests and their end to the millisecond; not the conversation or the previous
/// account, which the Redis hash does not hold).
fn same_in_redis(a: Option<&Affinity>, b: Option<&Affinity>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.account() == b.account()
                && a.model() == b.model()
                && a.foreign == b.foreign
                && to_unix_millis(a.foreign_expires_at) == to_unix_millis(b.foreign_expires_at)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    use context_relay_core::portable::ForeignSet;

    fn on(account: &str) -> Affinity {
        Affinity::new("codex", account)
    }

    #[test]
    fn kept_while_redis_holds_what_it_replaced_then_dropped() {
        let u = Unwritten::new(10);
        assert_eq!(u.resolve("k", Some(on("a"))), Resolved::Read(Some(on("a"))));
        u.failed("k".into(), on("b"), Some(on("a")), 0);
        assert!(u.contains("k"));
        assert_eq!(u.resolve("k", Some(on("a"))), Resolved::Kept(on("b")));
        // A second failure keeps what Redis held before the first.
        assert_eq!(u.base("k", Some(on("b"))), Some(on("a")));
        // Redis moved on: its value, and the entry is gone.
        assert_eq!(u.resolve("k", Some(on("c"))), Resolved::Read(Some(on("c"))));
        assert!(!u.contains("k"));
        assert_eq!(u.resolve("k", Some(on("a"))), Resolved::Read(Some(on("a"))));
        // Nothing in Redis before, nothing still: the unwritten one.
        u.failed("n".into(), on("d"), None, 0);
        assert_eq!(u.resolve("n", None), Resolved::Kept(on("d")));
        u.written("n");
        assert_eq!(u.resolve("n", None), Resolved::Read(None));
    }

    #[test]
    fn compares_only_what_redis_keeps() {
        let until = SystemTime::UNIX_EPOCH + Duration::from_millis(1_000);
        let a = on("a").with_foreign(ForeignSet::from_digests([1]), until);
        // The conversation, the previous account and sub-millisecond ends are not in Redis.
        let read = on("a").with_foreign(
            ForeignSet::from_digests([1]),
            until + Duration::from_micros(300),
        );
        let full = a
            .clone()
            .with_conversation(5)
            .with_previous(context_relay_core::ResolvedAccount::new("codex", "z"));
        assert!(same_in_redis(Some(&full), Some(&read)));
        assert!(!same_in_redis(Some(&a), Some(&on("a"))));
        assert!(!same_in_redis(
            Some(&a),
            Some(&a.clone().with_model("codex/m"))
        ));
        assert!(!same_in_redis(Some(&a), None));
    }

    #[test]
    fn bounded() {
        let u = Unwritten::new(2);
        u.failed("1".into(), on("b"), None, 0);
        u.failed("2".into(), on("b"), None, 10);
        u.failed("3".into(), on("b"), None, 0);
        assert!(!u.contains("3"));
        // An entry already held is updated at the bound.
        u.failed("2".into(), on("c"), None, 10);
        assert_eq!(u.resolve("2", None), Resolved::Kept(on("c")));
        // The purge drops what failed a TTL ago or more.
        u.purge(100, 95);
        assert!(!u.contains("1") && u.contains("2"));
    }
}
