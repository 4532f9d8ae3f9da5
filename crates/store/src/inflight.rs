//! The in-flight registry: at most one summary generation per handoff key at a time in this
//! process, so that concurrent responses that all cross the threshold pay for one summary.
//!
//! Every clone of the generation layer shares one registry through an `Arc` (axum clones
//! services per connection, so a per-service registry would not deduplicate anything). With the
//! redis backend, the layer additionally takes a [`GenerationLease`](crate::GenerationLease) from
//! the store so that replicas do not summarise the same key twice.

use std::fmt;
use std::sync::Arc;

use context_relay_core::HandoffKey;
use dashmap::mapref::entry::Entry;

/// Keys whose summary is being generated right now, shared by cloning.
///
/// ```
/// use context_relay_core::HandoffKey;
/// use context_relay_store::InFlight;
///
/// let in_flight = InFlight::new();
/// let key = HandoffKey::new("tenant", "session", "combo");
/// let guard = in_flight.try_begin(&key).expect("first caller wins");
/// assert!(in_flight.try_begin(&key).is_none(), "second caller is turned away");
/// drop(guard);
/// assert!(in_flight.try_begin(&key).is_some(), "the key is free again");
/// ```
#[derive(Clone, Default)]
pub struct InFlight {
    keys: Arc<crate::index::FastMap<HandoffKey, ()>>,
}

impl InFlight {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks `key` as in flight, or returns `None` when someone already holds it.
    ///
    /// The key is freed when the guard drops, which also happens when the task holding it panics
    /// or its future is cancelled.
    pub fn try_begin(&self, key: &HandoffKey) -> Option<InFlightGuard> {
        // The entry's shard lock lives only inside this match: it is never held across an await.
        match self.keys.entry(key.clone()) {
            Entry::Occupied(_) => None,
            Entry::Vacant(slot) => {
                slot.insert(());
                Some(InFlightGuard {
                    keys: Arc::clone(&self.keys),
                    key: key.clone(),
                })
            }
        }
    }

    /// Whether `key` is in flight right now.
    pub fn contains(&self, key: &HandoffKey) -> bool {
        self.keys.contains_key(key)
    }

    /// How many keys are in flight.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is in flight.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

impl fmt::Debug for InFlight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlight")
            .field("len", &self.len())
            .finish()
    }
}

/// Proof that a key is in flight; frees it on drop.
#[must_use = "the key is freed as soon as the guard is dropped"]
pub struct InFlightGuard {
    keys: Arc<crate::index::FastMap<HandoffKey, ()>>,
    key: HandoffKey,
}

impl InFlightGuard {
    /// The key this guard holds.
    pub fn key(&self) -> &HandoffKey {
        &self.key
    }
}

impl fmt::Debug for InFlightGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlightGuard")
            .field("key", &self.key)
            .finish()
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.keys.remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> HandoffKey {
        HandoffKey::new("t", s, "c")
    }

    #[test]
    fn one_holder_per_key_and_keys_are_independent() {
        let reg = InFlight::new();
        let a = reg.try_begin(&key("a")).unwrap();
        let b = reg.try_begin(&key("b")).unwrap();
        assert!(reg.try_begin(&key("a")).is_none());
        assert_eq!(reg.len(), 2);
        drop(a);
        assert!(!reg.contains(&key("a")));
        assert!(reg.contains(&key("b")));
        drop(b);
        assert!(reg.is_empty());
    }

    #[test]
    fn clones_share_the_registry() {
        let reg = InFlight::new();
        let clone = reg.clone();
        let _g = reg.try_begin(&key("a")).unwrap();
        assert!(clone.try_begin(&key("a")).is_none());
    }

    #[test]
    fn panic_frees_the_key() {
        let reg = InFlight::new();
        let r2 = reg.clone();
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _g = r2.try_begin(&key("a")).unwrap();
            panic!("generation blew up");
        }));
        assert!(res.is_err());
        assert!(reg.try_begin(&key("a")).is_some());
    }

    #[tokio::test]
    async fn cancelled_task_frees_the_key() {
        let reg = InFlight::new();
        let r2 = reg.clone();
        let (held_tx, held_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let _g = r2.try_begin(&key("a")).unwrap();
            held_tx.send(()).unwrap();
            std::future::pending::<()>().await;
        });
        held_rx.await.unwrap();
        assert!(reg.contains(&key("a")));
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        assert!(!reg.contains(&key("a")));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_begins_have_one_winner() {
        let reg = InFlight::new();
        let barrier = Arc::new(tokio::sync::Barrier::new(1_000));
        let mut tasks = Vec::new();
        for _ in 0..1_000 {
            let reg = reg.clone();
            let barrier = Arc::clone(&barrier);
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                // Hold a winning guard until every task has tried.
                reg.try_begin(&key("a"))
            }));
        }
        let mut guards = Vec::new();
        for t in tasks {
            if let Some(g) = t.await.unwrap() {
                guards.push(g);
            }
        }
        assert_eq!(guards.len(), 1);
    }
}
