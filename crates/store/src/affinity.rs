//! The in-memory affinity table: a bounded cache of `(tenant, session, combo)` → [`Affinity`],
//! the whole table for memory, a cache in front of the disk for redb and of Redis for redis.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use context_relay_core::portable::ForeignSet;
use context_relay_core::time::{from_unix_millis, to_unix_millis};
use context_relay_core::{HandoffKey, ResolvedAccount};
use serde::{Deserialize, Serialize};

use crate::Affinity;
use crate::clock::after_ms;
use crate::index::FastMap;

/// One entry: the affinity, when it was last written, and when it was last used (for eviction).
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) affinity: Affinity,
    pub(crate) written_ms: u64,
    used_ms: AtomicU64,
}

/// An affinity as stored on disk (redb) or in Redis: JSON, human-inspectable.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Stored {
    pub(crate) provider: String,
    pub(crate) account: String,
    pub(crate) written_at: u64,
    #[serde(default)]
    pub(crate) foreign: ForeignSet,
    #[serde(default)]
    pub(crate) foreign_until: u64,
    /// The serving model; absent in what older code wrote (and left out when unknown, so an
    /// affinity without a model is stored as it always was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) model: Option<String>,
    /// The primary conversation's opening digest, in hex (absent in older records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) conversation: Option<String>,
    /// The account before the last switch (absent in older records and when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) previous_provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) previous_account: Option<String>,
}

impl Stored {
    pub(crate) fn new(a: &Affinity, written_at: u64) -> Self {
        Self {
            provider: a.account().provider().to_string(),
            account: a.account().account().to_string(),
            written_at,
            foreign: (*a.foreign).clone(),
            foreign_until: to_unix_millis(a.foreign_expires_at),
            model: a.model().map(str::to_owned),
            conversation: a.conversation().map(|d| format!("{d:016x}")),
            previous_provider: a.previous.as_ref().map(|p| p.provider().to_string()),
            previous_account: a.previous.as_ref().map(|p| p.account().to_string()),
        }
    }

    pub(crate) fn affinity(self) -> Affinity {
        let mut a = Affinity::new(self.provider, self.account)
            .with_foreign(self.foreign, from_unix_millis(self.foreign_until));
        if let Some(m) = self.model.filter(|m| !m.is_empty()) {
            a = a.with_model(m);
        }
        // A malformed digest is an unknown primary conversation, as in older records.
        if let Some(d) = self
            .conversation
            .and_then(|c| u64::from_str_radix(&c, 16).ok())
        {
            a = a.with_conversation(d);
        }
        if let (Some(p), Some(acc)) = (self.previous_provider, self.previous_account) {
            a = a.with_previous(ResolvedAccount::new(p, acc));
        }
        a
    }
}

/// The bounded table (see the module docs).
#[derive(Debug)]
pub(crate) struct AffinityMap {
    // Keyed by one string (see `key`): a lookup needs no tuple of `Arc`s.
    map: FastMap<String, Entry>,
    capacity: usize,
    /// Something was evicted: an absent key may exist in the backing store.
    evicted: AtomicBool,
}

/// Length-prefixed, so that no two keys share a string whatever they contain.
pub(crate) fn key(k: &HandoffKey) -> String {
    let mut buf = String::with_capacity(k.tenant.len() + k.session.len() + k.combo.len() + 12);
    fill_key(&mut buf, k);
    buf
}

/// Writes [`key`] of `k` into `buf` (cleared first), without allocating when `buf` is large
/// enough.
fn fill_key(buf: &mut String, k: &HandoffKey) {
    buf.clear();
    push_len(buf, k.tenant.len());
    buf.push(':');
    push_len(buf, k.session.len());
    buf.push(':');
    buf.push_str(&k.tenant);
    buf.push_str(&k.session);
    buf.push_str(&k.combo);
}

/// The decimal digits of `n`, without the allocation of `to_string`.
fn push_len(buf: &mut String, mut n: usize) {
    let mut digits = [0u8; 20];
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
}

/// Runs `f` with [`key`] of `k` built in a reused per-thread buffer: affinity look-ups are on
/// the path of every relayed request, and need no allocation.
pub(crate) fn with_key<R>(k: &HandoffKey, f: impl FnOnce(&str) -> R) -> R {
    thread_local! {
        static BUF: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    BUF.with(|buf| match buf.try_borrow_mut() {
        Ok(mut buf) => {
            fill_key(&mut buf, k);
            f(&buf)
        }
        // Re-entered from inside `f` (never done here, but cheap to survive).
        Err(_) => f(&key(k)),
    })
}

/// Inverse of [`key`].
pub(crate) fn split_key(key: &str) -> Option<(&str, &str, &str)> {
    let (t, rest) = key.split_once(':')?;
    let (s, rest) = rest.split_once(':')?;
    let (t, s): (usize, usize) = (t.parse().ok()?, s.parse().ok()?);
    let tenant = rest.get(..t)?;
    let session = rest.get(t..t.checked_add(s)?)?;
    Some((tenant, session, rest.get(t + s..)?))
}

/// What `set_affinity` has to do.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Write {
    /// Same affinity, written recently: nothing.
    Skip,
    /// New, changed, or due for a refresh.
    Store,
}

impl AffinityMap {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            map: FastMap::default(),
            capacity: capacity.max(1),
            evicted: AtomicBool::new(false),
        }
    }

    /// The live entry at `now_ms`, with entries older than `ttl` treated as absent.
    pub(crate) fn get(&self, key: &str, now_ms: u64, ttl: Duration) -> Option<Affinity> {
        self.map
            .get(key)
            .filter(|e| now_ms < after_ms(e.written_ms, ttl))
            .map(|e| {
                e.used_ms.store(now_ms, Ordering::Relaxed);
                e.affinity.clone()
            })
    }

    /// The entry of `key` whatever its age, without marking it used.
    #[cfg(feature = "redis")]
    pub(crate) fn peek(&self, key: &str) -> Option<Affinity> {
        self.map.get(key).map(|e| e.affinity.clone())
    }

    /// Whether an absent key is known to be absent (nothing was ever evicted).
    pub(crate) fn is_complete(&self) -> bool {
        !self.evicted.load(Ordering::Relaxed)
    }

    /// Whether `set_affinity(affinity)` at `now_ms` must write: yes unless the same affinity
    /// was written less than `fresh_for` ago.
    pub(crate) fn needs_write(
        &self,
        key: &str,
        affinity: &Affinity,
        now_ms: u64,
        fresh_for: Duration,
    ) -> Write {
        match self.map.get(key) {
            Some(e) if e.affinity == *affinity && now_ms < after_ms(e.written_ms, fresh_for) => {
                Write::Skip
            }
            _ => Write::Store,
        }
    }

    pub(crate) fn insert(&self, key: String, affinity: Affinity, written_ms: u64) {
        let entry = Entry {
            affinity,
            written_ms,
            used_ms: AtomicU64::new(written_ms),
        };
        self.map.insert(key, entry);
        if self.map.len() > self.capacity {
            self.evict();
        }
    }

    /// Drops the least recently used eighth of the table (at least one entry): one sort per
    /// `capacity / 8` inserts keeps eviction cheap.
    fn evict(&self) {
        let mut used: Vec<(u64, String)> = self
            .map
            .iter()
            .map(|e| (e.used_ms.load(Ordering::Relaxed), e.key().clone()))
            .collect();
        let n = (self.capacity / 8).max(1).min(used.len());
        used.select_nth_unstable_by_key(n - 1, |(u, _)| *u);
        for (_, k) in used.into_iter().take(n) {
            self.map.remove(&k);
        }
        self.evicted.store(true, Ordering::Relaxed);
    }

    /// Removes entries older than `ttl`; returns their keys.
    /// Removes the entries written longer than `ttl` ago (their keys returned), and forgets
    /// the digests of a switch past their window ([`Affinity::foreign_at`] no longer reads
    /// them): up to 2 048 digests of a session that stopped after its switch would otherwise
    /// stay in memory for the affinity's lifetime (7 days by default).
    pub(crate) fn purge(&self, now_ms: u64, ttl: Duration) -> Vec<String> {
        let mut gone = Vec::new();
        self.map.retain(|k, e| {
            if now_ms >= after_ms(e.written_ms, ttl) {
                gone.push(k.clone());
                return false;
            }
            let a = &mut e.affinity;
            if !a.foreign.is_empty() && to_unix_millis(a.foreign_expires_at) <= now_ms {
                a.foreign = Arc::default();
            }
            true
        });
        gone
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

/// Interns provider and account names: affinities repeat a handful of them millions of times.
pub(crate) fn intern(a: Affinity) -> Affinity {
    let account = ResolvedAccount::new(
        Arc::<str>::from(&**a.account().provider()),
        Arc::<str>::from(&**a.account().account()),
    );
    Affinity { account, ..a }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn k(t: &str, s: &str, c: &str) -> HandoffKey {
        HandoffKey::new(t, s, c)
    }

    #[test]
    fn keys_never_collide() {
        assert_ne!(key(&k("a:b", "c", "x")), key(&k("a", "b:c", "x")));
        assert_ne!(key(&k("ab", "c", "x")), key(&k("a", "bc", "x")));
        assert_ne!(key(&k("t", "s", "c1")), key(&k("t", "s", "c2")));
        assert_eq!(key(&k("tenant", "s1", "c")), "6:2:tenants1c");
    }

    proptest! {
        #[test]
        fn keys_split_back(t in ".*", s in ".*", c in ".*") {
            let kk = key(&k(&t, &s, &c));
            prop_assert_eq!(split_key(&kk), Some((t.as_str(), s.as_str(), c.as_str())));
        }

        #[test]
        fn the_reused_buffer_builds_the_same_key(t in ".*", s in ".*", c in ".*", t2 in ".*") {
            let (a, b) = (k(&t, &s, &c), k(&t2, &s, &c));
            // Twice, the second time over a longer or shorter key left in the buffer; once
            // re-entered.
            prop_assert_eq!(with_key(&a, str::to_owned), key(&a));
            prop_assert_eq!(with_key(&b, str::to_owned), key(&b));
            let (outer, inner) = with_key(&a, |x| (x.to_owned(), with_key(&b, str::to_owned)));
            prop_assert_eq!(outer, key(&a));
            prop_assert_eq!(inner, key(&b));
        }
    }

    #[test]
    fn an_affinity_stored_before_the_account_type_loads_and_stores_the_same() {
        // As the code before `ResolvedAccount` wrote it to redb (Redis keeps the same fields).
        let old = r#"{"provider":"codex","account":"acct-A","written_at":7,"foreign":[1,3],"foreign_until":9}"#;
        let stored: Stored = serde_json::from_str(old).expect("old affinity");
        let a = stored.affinity();
        assert!(a.serves(&ResolvedAccount::new("codex", "acct-A")));
        assert_eq!(
            serde_json::to_string(&Stored::new(&a, 7)).expect("json"),
            old
        );
        // A provider spelled in upper case by an older configuration is the same provider.
        let upper: Stored = serde_json::from_str(&old.replace("codex", "Codex")).expect("old");
        assert_eq!(upper.affinity(), a);
    }

    #[test]
    fn an_affinity_without_a_model_loads_with_none_and_a_model_round_trips() {
        // As the code before models were recorded wrote it.
        let old = r#"{"provider":"codex","account":"acct-A","written_at":7,"foreign":[],"foreign_until":0}"#;
        let a = serde_json::from_str::<Stored>(old).expect("old").affinity();
        assert_eq!(a.model(), None);
        let with = a.clone().with_model("anthropic/claude-sonnet-4-5");
        let json = serde_json::to_string(&Stored::new(&with, 7)).expect("json");
        assert!(
            json.contains(r#""model":"anthropic/claude-sonnet-4-5""#),
            "{json}"
        );
        let back = serde_json::from_str::<Stored>(&json)
            .expect("new")
            .affinity();
        assert_eq!(back, with);
        assert_eq!(back.model(), Some("anthropic/claude-sonnet-4-5"));
    }

    #[test]
    fn the_conversation_and_the_previous_account_round_trip_and_older_records_have_none() {
        let old = r#"{"provider":"codex","account":"acct-A","written_at":7,"foreign":[],"foreign_until":0}"#;
        let a = serde_json::from_str::<Stored>(old).expect("old").affinity();
        assert_eq!(a.conversation(), None);
        assert_eq!(a.previous, None);
        let with = a
            .with_conversation(0x00ab_cdef_0123_4567)
            .with_previous(ResolvedAccount::new("codex", "acct-B"));
        let json = serde_json::to_string(&Stored::new(&with, 7)).expect("json");
        assert!(
            json.contains(r#""conversation":"00abcdef01234567""#),
            "{json}"
        );
        let back = serde_json::from_str::<Stored>(&json)
            .expect("new")
            .affinity();
        assert_eq!(back, with);
        assert_eq!(back.conversation(), Some(0x00ab_cdef_0123_4567));
        // A malformed digest reads as an unknown conversation, not an error.
        let bad = json.replace("00abcdef01234567", "not hex");
        let back = serde_json::from_str::<Stored>(&bad)
            .expect("bad")
            .affinity();
        assert_eq!(back.conversation(), None);
    }

    #[test]
    fn writes_only_when_changed_or_stale() {
        let m = AffinityMap::new(100);
        let ttl = Duration::from_secs(400);
        let fresh = ttl / 4;
        let kk = key(&k("t", "s", "c"));
        let a = Affinity::new("p", "a");
        assert_eq!(m.needs_write(&kk, &a, 0, fresh), Write::Store);
        m.insert(kk.clone(), a.clone(), 0);
        assert_eq!(m.needs_write(&kk, &a, 1_000, fresh), Write::Skip);
        assert_eq!(
            m.needs_write(&kk, &Affinity::new("p", "b"), 1_000, fresh),
            Write::Store
        );
        let with_foreign = a.clone().with_foreign(
            ForeignSet::from_digests([1]),
            std::time::SystemTime::UNIX_EPOCH,
        );
        assert_eq!(
            m.needs_write(&kk, &with_foreign, 1_000, fresh),
            Write::Store
        );
        assert_eq!(m.needs_write(&kk, &a, 100_000, fresh), Write::Store);
        assert!(m.get(&kk, 399_999, ttl).is_some());
        assert!(m.get(&kk, 400_000, ttl).is_none());
        assert_eq!(m.purge(400_000, ttl), vec![kk]);
        assert_eq!(m.len(), 0);
    }

    /// A purge forgets a switch's digests once their window has passed, and keeps the
    /// affinity (and digests still in their window).
    #[test]
    fn a_purge_forgets_digests_past_their_window() {
        let m = AffinityMap::new(100);
        let ttl = Duration::from_secs(7 * 24 * 3600);
        let foreign = ForeignSet::from_digests([7]);
        let until = |ms| from_unix_millis(ms);
        let with = |ms| Affinity::new("p", "a").with_foreign(foreign.clone(), until(ms));
        m.insert("over".into(), with(5_000), 0);
        m.insert("open".into(), with(50_000), 0);
        assert!(m.purge(10_000, ttl).is_empty());
        let over = m.get("over", 10_000, ttl).expect("the affinity stays");
        assert!(over.foreign.is_empty() && over.account().account().as_ref() == "a");
        assert_eq!(m.get("open", 10_000, ttl).unwrap().foreign.len(), 1);
    }

    #[test]
    fn bounded_evicting_the_least_recently_used() {
        let m = AffinityMap::new(16);
        let ttl = Duration::from_secs(1_000_000);
        for i in 0..16u64 {
            m.insert(format!("k{i}"), Affinity::new("p", "a"), i);
        }
        assert!(m.is_complete());
        // k0 is used late: it survives, k1 (the least recently used) goes.
        assert!(m.get("k0", 100, ttl).is_some());
        m.insert("k16".into(), Affinity::new("p", "a"), 101);
        assert!(m.len() <= 16);
        assert!(!m.is_complete());
        assert!(m.get("k0", 102, ttl).is_some());
        assert!(m.get("k1", 102, ttl).is_none());
        assert!(m.get("k16", 102, ttl).is_some());
        for i in 17..1000u64 {
            m.insert(format!("k{i}"), Affinity::new("p", "a"), 200 + i);
        }
        assert!(m.len() <= 16);
    }
}
