//! The unparseable cool-down: a key whose summary reply could not be parsed waits before the
//! next attempt, 5 min doubling per consecutive failure up to 60 min, so that a summary model
//! that keeps answering badly is not paid for on every response.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use context_relay_core::HandoffKey;

/// First cool-down after an unparseable reply.
pub const DEFAULT_BASE: Duration = Duration::from_secs(5 * 60);
/// Longest cool-down.
pub const DEFAULT_MAX: Duration = Duration::from_secs(60 * 60);
/// Most keys tracked; the oldest failure is forgotten first.
pub const DEFAULT_CAPACITY: usize = 10_000;

/// Per-key cool-downs after unparseable summary replies, shared by cloning.
///
/// The clock is passed in, so that the caller (and tests) decide what "now" is.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use context_relay_core::HandoffKey;
/// use context_relay_store::CoolDown;
///
/// let cool = CoolDown::new();
/// let key = HandoffKey::new("tenant", "session", "combo");
/// let now = SystemTime::now();
/// assert_eq!(cool.fail(&key, now), Duration::from_secs(300));
/// assert_eq!(cool.fail(&key, now), Duration::from_secs(600));
/// assert!(cool.is_cooling(&key, now + Duration::from_secs(599)));
/// assert!(!cool.is_cooling(&key, now + Duration::from_secs(600)));
/// cool.clear(&key);
/// assert!(!cool.is_cooling(&key, now));
/// ```
#[derive(Clone)]
pub struct CoolDown {
    inner: Arc<Mutex<Inner>>,
    base: Duration,
    max: Duration,
    capacity: usize,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<HandoffKey, Entry>,
    // Monotonic stamp of the last failure: the smallest is the oldest, evicted first.
    next_seq: u64,
}

struct Entry {
    failures: u32,
    until: SystemTime,
    seq: u64,
}

impl Default for CoolDown {
    fn default() -> Self {
        Self::new()
    }
}

impl CoolDown {
    /// 5 min doubling to 60 min, at most 10 000 keys.
    pub fn new() -> Self {
        Self::with_limits(DEFAULT_BASE, DEFAULT_MAX, DEFAULT_CAPACITY)
    }

    /// Custom first cool-down, cap and number of keys tracked (at least one).
    pub fn with_limits(base: Duration, max: Duration, capacity: usize) -> Self {
        Self {
            inner: Arc::default(),
            base,
            max: max.max(base),
            capacity: capacity.max(1),
        }
    }

    /// Records one more consecutive unparseable reply for `key` at `now`; returns how long the key
    /// now cools down.
    pub fn fail(&self, key: &HandoffKey, now: SystemTime) -> Duration {
        let mut inner = self.lock();
        let seq = inner.next_seq;
        inner.next_seq += 1;
        let failures = inner
            .entries
            .get(key)
            .map_or(1, |e| e.failures.saturating_add(1));
        let wait = backoff(self.base, self.max, failures);
        if !inner.entries.contains_key(key) && inner.entries.len() >= self.capacity {
            // Linear scan: it only runs when the table is full, and 10 000 entries scan in
            // microseconds, cheaper than keeping a second ordered index on every failure.
            let oldest = inner
                .entries
                .iter()
                .min_by_key(|(_, e)| e.seq)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                inner.entries.remove(&oldest);
            }
        }
        inner.entries.insert(
            key.clone(),
            Entry {
                failures,
                until: now.checked_add(wait).unwrap_or(now),
                seq,
            },
        );
        wait
    }

    /// Whether `key` is still cooling down at `now`.
    pub fn is_cooling(&self, key: &HandoffKey, now: SystemTime) -> bool {
        self.lock().entries.get(key).is_some_and(|e| now < e.until)
    }

    /// Forgets `key` (a summary was stored: the failure streak is over).
    pub fn clear(&self, key: &HandoffKey) {
        self.lock().entries.remove(key);
    }

    /// How many keys are tracked.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The table stays consistent even if a holder panicked: every update is one insert/remove.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for CoolDown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoolDown")
            .field("base", &self.base)
            .field("max", &self.max)
            .field("capacity", &self.capacity)
            .field("len", &self.len())
            .finish()
    }
}

/// `base · 2^(failures−1)`, capped at `max`.
fn backoff(base: Duration, max: Duration, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(32);
    base.checked_mul(1u32 << doublings.min(31))
        .map_or(max, |d| d.min(max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(s: &str) -> HandoffKey {
        HandoffKey::new("t", s, "c")
    }

    #[test]
    fn doubles_from_five_minutes_to_sixty() {
        let cool = CoolDown::new();
        let now = SystemTime::UNIX_EPOCH;
        let mins: Vec<u64> = (0..7)
            .map(|_| cool.fail(&key("a"), now).as_secs() / 60)
            .collect();
        assert_eq!(mins, [5, 10, 20, 40, 60, 60, 60]);
    }

    #[test]
    fn cooling_ends_at_the_deadline_and_clear_resets_the_streak() {
        let cool = CoolDown::new();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        cool.fail(&key("a"), now);
        assert!(cool.is_cooling(&key("a"), now));
        assert!(!cool.is_cooling(&key("b"), now));
        assert!(cool.is_cooling(&key("a"), now + Duration::from_secs(299)));
        assert!(!cool.is_cooling(&key("a"), now + Duration::from_secs(300)));
        cool.clear(&key("a"));
        assert_eq!(cool.fail(&key("a"), now), DEFAULT_BASE);
    }

    #[test]
    fn full_table_evicts_the_oldest_failure() {
        let cool = CoolDown::with_limits(DEFAULT_BASE, DEFAULT_MAX, 3);
        let now = SystemTime::UNIX_EPOCH;
        for k in ["a", "b", "c"] {
            cool.fail(&key(k), now);
        }
        // "a" failing again makes it the newest; "b" is now the oldest.
        cool.fail(&key("a"), now);
        cool.fail(&key("d"), now);
        assert_eq!(cool.len(), 3);
        assert!(!cool.is_cooling(&key("b"), now));
        for k in ["a", "c", "d"] {
            assert!(cool.is_cooling(&key(k), now), "{k}");
        }
    }

    #[test]
    fn clones_share_state() {
        let cool = CoolDown::new();
        cool.clone().fail(&key("a"), SystemTime::UNIX_EPOCH);
        assert!(cool.is_cooling(&key("a"), SystemTime::UNIX_EPOCH));
    }

    proptest! {
        #[test]
        fn backoff_is_monotonic_and_bounded(failures in 1u32..100) {
            let d = backoff(DEFAULT_BASE, DEFAULT_MAX, failures);
            prop_assert!(d >= DEFAULT_BASE && d <= DEFAULT_MAX);
            prop_assert!(backoff(DEFAULT_BASE, DEFAULT_MAX, failures + 1) >= d);
        }

        #[test]
        fn never_tracks_more_than_capacity(cap in 1usize..20, keys in proptest::collection::vec(0u8..40, 0..100)) {
            let cool = CoolDown::with_limits(DEFAULT_BASE, DEFAULT_MAX, cap);
            for k in keys {
                cool.fail(&key(&k.to_string()), SystemTime::UNIX_EPOCH);
                prop_assert!(cool.len() <= cap);
            }
        }
    }
}
