//! The in-memory bookkeeping of one handoff key, shared by the memory and redb backends.

use std::time::Duration;

use crate::clock::after_ms;

/// The concurrent map behind the hot path. foldhash is several times faster than SipHash on
/// short keys and is randomly seeded per process, which keeps client-chosen session ids from
/// steering keys into one bucket.
pub(crate) type FastMap<K, V> = dashmap::DashMap<K, V, foldhash::fast::RandomState>;

/// What the store knows about a stored record without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Meta {
    /// Unique per write of the key; `complete` compares it.
    pub(crate) version: u64,
    /// Unix ms after which the record is absent.
    pub(crate) expires_ms: u64,
    pub(crate) lease: Option<Lease>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lease {
    pub(crate) until_ms: u64,
    pub(crate) token: u64,
}

impl Meta {
    pub(crate) fn new(version: u64, expires_ms: u64) -> Self {
        Self {
            version,
            expires_ms,
            lease: None,
        }
    }

    pub(crate) fn is_live(&self, now_ms: u64) -> bool {
        now_ms < self.expires_ms
    }

    /// Whether a request carries the record now: live and leased at `now_ms`.
    pub(crate) fn is_carried(&self, now_ms: u64) -> bool {
        self.is_live(now_ms) && self.is_leased(now_ms)
    }

    fn is_leased(&self, now_ms: u64) -> bool {
        self.lease.is_some_and(|l| now_ms < l.until_ms)
    }

    /// Takes a lease if the record is live and unleased at `now_ms`.
    pub(crate) fn try_lease(&mut self, now_ms: u64, lease: Duration, token: u64) -> bool {
        if !self.is_live(now_ms) || self.is_leased(now_ms) {
            return false;
        }
        self.lease = Some(Lease {
            until_ms: after_ms(now_ms, lease),
            token,
        });
        true
    }

    /// Ends the lease if it is still the one taken with `token` on `version`.
    pub(crate) fn release(&mut self, version: u64, token: u64) {
        if self.version == version && self.lease.is_some_and(|l| l.token == token) {
            self.lease = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_rules() {
        let mut m = Meta::new(1, 100);
        assert!(m.try_lease(10, Duration::from_millis(20), 7));
        assert!(!m.try_lease(29, Duration::from_millis(20), 8), "leased");
        assert!(
            m.try_lease(30, Duration::from_millis(20), 9),
            "lease ran out"
        );
        m.release(1, 7);
        assert!(
            m.lease.is_some(),
            "an older token cannot release a newer lease"
        );
        m.release(1, 9);
        assert!(m.lease.is_none());
        assert!(!m.try_lease(100, Duration::from_millis(1), 10), "expired");
    }
}
