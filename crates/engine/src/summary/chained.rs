//! What chained turns add toward a handoff's refresh. A Responses client that chains its
//! turns (`previous_response_id`) sends a few items per turn, so a turn's own count never
//! reaches `refresh_after_messages` more than the stored handoff's: the items its qualifying
//! turns send are counted here instead, per key, in this process, until the handoff is
//! written again.

use std::collections::HashMap;
use std::sync::Mutex;

use context_relay_core::HandoffKey;

/// Keys counted before the counts start over (a bound, not an LRU: a count lost only delays a
/// refresh).
const MAX_KEYS: usize = 4096;

/// Items of chained turns since each key's handoff was last written.
#[derive(Debug, Default)]
pub(crate) struct ChainedItems(Mutex<HashMap<HandoffKey, u32>>);

impl ChainedItems {
    /// Adds `items` to `key`'s count; the count since its handoff was last written.
    pub(crate) fn add(&self, key: &HandoffKey, items: u32) -> u32 {
        let Ok(mut map) = self.0.lock() else {
            return items;
        };
        if map.len() >= MAX_KEYS && !map.contains_key(key) {
            map.clear();
        }
        let count = map.entry(key.clone()).or_default();
        *count = count.saturating_add(items);
        *count
    }

    /// Starts `key`'s count over: its handoff is being written again.
    pub(crate) fn reset(&self, key: &HandoffKey) {
        if let Ok(mut map) = self.0.lock() {
            map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_key_until_reset() {
        let items = ChainedItems::default();
        let (a, b) = (
            HandoffKey::new("t", "a", "c"),
            HandoffKey::new("t", "b", "c"),
        );
        assert_eq!(items.add(&a, 2), 2);
        assert_eq!(items.add(&a, 3), 5);
        assert_eq!(items.add(&b, 1), 1);
        items.reset(&a);
        assert_eq!(items.add(&a, 2), 2);
        assert_eq!(items.add(&b, 1), 2);
    }
}
