//! Who minted a piece of account-bound state: digests of the state another account minted.
//!
//! When a session moves from account A to account B, every piece of account-bound state the
//! client sends in that first request to B was minted by A (or an earlier account): B has not
//! answered yet. The relay records the [`digest`] of each of them in a [`ForeignSet`] kept
//! with the session's affinity. Clients resend their whole history on every turn, so later
//! requests to B carry those same pieces again, next to the state B minted since: a piece whose
//! digest is in the set is foreign and removed; a piece the set does not know was minted by B
//! and is kept (removing it would throw away B's reasoning and prompt cache).
//!
//! A digest is taken over the raw JSON bytes of the piece's token (the `encrypted_content`
//! string of a Responses item, else a reasoning item's `id`; the `signature` of an Anthropic
//! `thinking` block, the `data` of a `redacted_thinking` block; the `previous_response_id`
//! value; the `x-codex-turn-state` header value). Clients resend these bytes as they received
//! them, and the blobs are random, so a 64-bit digest tells them apart. A Gemini
//! `thoughtSignature` is the exception: the `google-genai` SDK decodes it and encodes it again
//! in the URL-safe base64 alphabet, so its token is its text in that alphabet without padding
//! and without quotes, the same whichever spelling arrives.
//!
//! ```
//! use context_relay_core::portable::{ForeignSet, digest};
//!
//! let set = ForeignSet::from_digests([digest(b"\"blob-a\""), digest(b"\"blob-b\"")]);
//! assert!(set.contains(digest(b"\"blob-a\"")));
//! assert!(!set.contains(digest(b"\"blob-from-b\"")));
//! ```

use serde::{Deserialize, Serialize};

/// Most digests one session keeps. A Codex session carries a few reasoning items per turn,
/// and compaction folds old ones away; beyond this the oldest are forgotten, and a request
/// that still carries one is caught by the relay's repair of the provider's rejection.
pub const MAX_FOREIGN: usize = 2048;

/// The digest of one token's raw bytes (see the module docs).
pub fn digest(raw: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(raw)
}

/// A bounded set of digests of foreign account-bound state (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ForeignSet {
    /// Sorted, without duplicates, at most [`MAX_FOREIGN`] long.
    digests: Vec<u64>,
}

impl ForeignSet {
    /// The set of `digests`, given oldest first: beyond [`MAX_FOREIGN`] the first ones are
    /// dropped.
    pub fn from_digests(digests: impl IntoIterator<Item = u64>) -> Self {
        let all: Vec<u64> = digests.into_iter().collect();
        let skip = all.len().saturating_sub(MAX_FOREIGN);
        let mut digests = all[skip..].to_vec();
        digests.sort_unstable();
        digests.dedup();
        Self { digests }
    }

    /// Whether `digest` is foreign.
    pub fn contains(&self, digest: u64) -> bool {
        self.digests.binary_search(&digest).is_ok()
    }

    /// How many digests the set holds.
    pub fn len(&self) -> usize {
        self.digests.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// The digests, sorted.
    pub fn digests(&self) -> &[u64] {
        &self.digests
    }

    /// A set of `seen` (oldest first) plus what `self` holds, bounded: the digests of `seen`
    /// are kept first.
    pub fn merged(&self, seen: &[u64]) -> Self {
        Self::from_digests(self.digests.iter().copied().chain(seen.iter().copied()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn bounded_sorted_and_keeps_the_newest(n in 0usize..5000, seed in any::<u64>()) {
            let items: Vec<u64> = (0..n as u64).map(|i| i.wrapping_mul(seed | 1)).collect();
            let set = ForeignSet::from_digests(items.iter().copied());
            prop_assert!(set.len() <= MAX_FOREIGN);
            prop_assert!(set.digests().windows(2).all(|w| w[0] < w[1]));
            for d in items.iter().rev().take(MAX_FOREIGN) {
                prop_assert!(set.contains(*d));
            }
        }
    }

    #[test]
    fn merged_prefers_what_was_seen_last() {
        let old = ForeignSet::from_digests(0..MAX_FOREIGN as u64);
        let seen: Vec<u64> = (10_000..10_010).collect();
        let merged = old.merged(&seen);
        assert_eq!(merged.len(), MAX_FOREIGN);
        assert!(seen.iter().all(|d| merged.contains(*d)));
        assert!(!merged.contains(0), "the oldest digest was dropped");
        let json = serde_json::to_string(&ForeignSet::from_digests([3, 1])).unwrap();
        assert_eq!(json, "[1,3]");
    }
}
