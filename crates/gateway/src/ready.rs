//! `GET /readyz`: whether this replica should receive traffic.
//!
//! 200 `{"status":"ready"}` when the handoff store answers; 503 `{"status":"store unreachable"}`
//! while it does not (for Redis, also while its circuit breaker is open; for redb, while its
//! file is broken after an I/O error and not reopened yet), and 503
//! `{"status":"shutting down"}` once shutdown began. `/healthz` stays 200 while the process runs:
//! the gateway still serves requests without its store (the relay fails open).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use context_relay_core::HandoffKey;
use context_relay_store::HandoffStore;

/// Longest wait for the store's answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The readiness of a gateway; clones share it.
#[derive(Clone)]
pub struct Readiness {
    store: Arc<dyn HandoffStore>,
    shutting_down: Arc<AtomicBool>,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness")
            .field("store", &self.store.backend())
            .field("shutting_down", &self.shutting_down.load(Ordering::Relaxed))
            .finish()
    }
}

/// Why a gateway is not ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotReady {
    /// Shutdown began.
    ShuttingDown,
    /// The handoff store did not answer.
    StoreUnreachable,
}

impl NotReady {
    /// The `status` text of `/readyz`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ShuttingDown => "shutting down",
            Self::StoreUnreachable => "store unreachable",
        }
    }
}

impl Readiness {
    /// The readiness of a gateway over `store`.
    pub fn new(store: Arc<dyn HandoffStore>) -> Self {
        Self {
            store,
            shutting_down: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Marks the gateway as shutting down: `/readyz` answers 503 from now on.
    pub fn shutting_down(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
    }

    /// Asks the store (one cheap read, bounded by a second).
    pub async fn check(&self) -> Result<(), NotReady> {
        if self.shutting_down.load(Ordering::Relaxed) {
            return Err(NotReady::ShuttingDown);
        }
        // A store known to be broken (a redb file after an I/O error) is not ready, even
        // though it still answers reads from memory.
        if let Err(e) = self.store.health() {
            tracing::debug!(error = %e, "readyz: store broken");
            return Err(NotReady::StoreUnreachable);
        }
        let probe = HandoffKey::new("context-relay", "readyz", "probe");
        match tokio::time::timeout(PROBE_TIMEOUT, self.store.contains(&probe)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "readyz: store error");
                Err(NotReady::StoreUnreachable)
            }
            Err(_) => Err(NotReady::StoreUnreachable),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ready_until_shutdown() {
        let r = Readiness::new(Arc::new(context_relay_store::MemoryStore::new()));
        assert_eq!(r.check().await, Ok(()));
        r.clone().shutting_down();
        assert_eq!(r.check().await, Err(NotReady::ShuttingDown));
    }
}
