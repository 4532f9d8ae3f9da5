//! The right to generate one key's summary, from [`HandoffStore::begin_generation`].

use context_relay_core::HandoffKey;

#[cfg(doc)]
use crate::HandoffStore;

/// The right to generate one key's summary, from [`HandoffStore::begin_generation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerationLease {
    pub(crate) key: HandoffKey,
    // `None` for a local (always granted) lease; the Redis token otherwise.
    pub(crate) token: Option<u64>,
}

impl GenerationLease {
    /// A lease that needs no coordination (single-process backends).
    pub fn local(key: &HandoffKey) -> Self {
        Self {
            key: key.clone(),
            token: None,
        }
    }

    /// The key the lease is for.
    pub fn key(&self) -> &HandoffKey {
        &self.key
    }

    /// Whether another replica could have been refused because of this lease.
    pub fn is_distributed(&self) -> bool {
        self.token.is_some()
    }
}
