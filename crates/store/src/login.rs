//! Subscription logins kept in the store: a login's current credentials (opaque bytes the
//! gateway writes), versioned for compare-and-set, and the store-wide right to refresh them.
//!
//! A subscription login (a ChatGPT plan used by Codex CLI, a Claude Pro/Max plan used by
//! Claude Code) authenticates with an access token that expires and a refresh token that is
//! **single-use**: refreshing returns a new pair and kills the old refresh token. Two holders
//! that refresh the same pair lose the login. The store is where replicas (and a restarted
//! gateway) agree on the current pair:
//!
//! - [`HandoffStore::login`](crate::HandoffStore::login) reads the stored pair and its version;
//! - [`HandoffStore::put_login`](crate::HandoffStore::put_login) writes a new pair only when the
//!   stored version is still the one the writer read (compare-and-set), durably on the durable
//!   backends before it returns;
//! - [`HandoffStore::lock_login`](crate::HandoffStore::lock_login) grants the right to refresh
//!   to one holder at a time: one replica per Redis (`SET NX PX`), always on the single-process
//!   backends (the process serialises its own refreshes).
//!
//! What the bytes hold is the caller's business; the store never looks inside and never
//! prints them (`Debug` shows their length).
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use context_relay_store::{HandoffStore, MemoryStore};
//!
//! let store = MemoryStore::new();
//! assert_eq!(store.login("codex/alice").await?, None);
//! let v1 = store.put_login("codex/alice", 0, b"pair-1").await?.expect("nothing stored yet");
//! // A writer that read no pair (version 0) lost the race: its write is refused.
//! assert_eq!(store.put_login("codex/alice", 0, b"pair-x").await?, None);
//! let v2 = store.put_login("codex/alice", v1, b"pair-2").await?.expect("v1 is current");
//! let stored = store.login("codex/alice").await?.expect("stored");
//! assert_eq!((stored.version, stored.data.as_slice()), (v2, &b"pair-2"[..]));
//! assert!(!format!("{stored:?}").contains("pair-2"), "Debug hides the bytes");
//! # Ok::<(), context_relay_store::StoreError>(())
//! # }).unwrap();
//! ```

use std::fmt;
use std::sync::Mutex;

use foldhash::HashMap;

/// A login's stored credentials: the bytes its owner wrote and their version (1 for the first
/// write, one more for each later one).
#[derive(Clone, PartialEq, Eq)]
pub struct StoredLogin {
    /// The version to pass to [`put_login`](crate::HandoffStore::put_login) to replace it.
    pub version: u64,
    /// What the owner wrote (secret: never printed).
    pub data: Vec<u8>,
}

impl fmt::Debug for StoredLogin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoredLogin")
            .field("version", &self.version)
            .field("data", &format_args!("<{} bytes>", self.data.len()))
            .finish()
    }
}

/// The right to refresh one login, from [`lock_login`](crate::HandoffStore::lock_login); give it
/// back with [`unlock_login`](crate::HandoffStore::unlock_login) (it also runs out by itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginLock {
    name: String,
    // `None` for a local (always granted) lock; the Redis token otherwise.
    pub(crate) token: Option<u64>,
}

impl LoginLock {
    /// A lock that needs no coordination (single-process backends).
    pub fn local(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            token: None,
        }
    }

    #[cfg(feature = "redis")]
    pub(crate) fn distributed(name: &str, token: u64) -> Self {
        Self {
            name: name.to_owned(),
            token: Some(token),
        }
    }

    /// The login it is for.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether another replica could have been refused because of this lock.
    pub fn is_distributed(&self) -> bool {
        self.token.is_some()
    }
}

/// The logins of a process-local store, with compare-and-set.
#[derive(Default)]
pub(crate) struct LoginTable {
    logins: Mutex<HashMap<String, StoredLogin>>,
}

impl LoginTable {
    pub(crate) fn get(&self, name: &str) -> Option<StoredLogin> {
        self.lock().get(name).cloned()
    }

    /// Writes `data` when the stored version is `expected` (0: none); the new version.
    pub(crate) fn put(&self, name: &str, expected: u64, data: &[u8]) -> Option<u64> {
        let mut logins = self.lock();
        let current = logins.get(name).map_or(0, |l| l.version);
        if current != expected {
            return None;
        }
        let version = current + 1;
        logins.insert(
            name.to_owned(),
            StoredLogin {
                version,
                data: data.to_vec(),
            },
        );
        Some(version)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, StoredLogin>> {
        // Every update is one insert: the map stays consistent after a panic elsewhere.
        self.logins
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A lock token no other holder of this process uses, unlikely to repeat across processes (the
/// process id, the time and a counter).
#[cfg(feature = "redis")]
pub(crate) fn lock_token() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (u64::from(std::process::id()) << 40)
        ^ nanos.rotate_left(17)
        ^ NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_and_set() {
        let t = LoginTable::default();
        assert_eq!(t.put("a", 1, b"x"), None, "nothing stored: only 0 matches");
        assert_eq!(t.put("a", 0, b"x"), Some(1));
        assert_eq!(t.put("a", 0, b"y"), None);
        assert_eq!(t.put("a", 1, b"y"), Some(2));
        assert_eq!(t.get("a").map(|l| l.data), Some(b"y".to_vec()));
        assert_eq!(t.get("b"), None);
    }
}
