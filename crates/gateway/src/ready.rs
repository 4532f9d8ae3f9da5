//! `GET /readyz`: whether this replica should receive traffic.
//!
//! - 200 `{"status":"ready"}` when the handoff store answers;
//! - 200 `{"status":"degraded","store":"unreachable","detail":…}` while an **optional** store
//!   does not answer: the Redis store. Requests keep passing through without the relay (it
//!   fails open), and every replica shares that Redis: answering 503 would take all of them out
//!   of their balancer at once and turn a relay outage into a full one;
//! - 503 `{"status":"store unreachable"}` while a **required** store does not answer: one
//!   replica's own file (redb), which another replica may not share; also while that file is
//!   broken after an I/O error and no commit has succeeded on it since;
//! - 503 `{"status":"shutting down"}` once shutdown began.
//!
//! `/healthz` stays 200 while the process runs.

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

/// A gateway that can take traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ready {
    /// Everything answers.
    Ready,
    /// The optional store does not answer: requests pass through without the relay.
    StoreDegraded,
}

impl Ready {
    /// The `status` text of `/readyz`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::StoreDegraded => "degraded",
        }
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
    pub async fn check(&self) -> Result<Ready, NotReady> {
        if self.shutting_down.load(Ordering::Relaxed) {
            return Err(NotReady::ShuttingDown);
        }
        let probe = HandoffKey::new("context-relay", "readyz", "probe");
        let answered = match self.store.health() {
            // A store known to be broken (a redb file after an I/O error) does not answer,
            // even though it still answers reads from memory.
            Err(e) => {
                tracing::debug!(error = %e, "readyz: store broken");
                false
            }
            Ok(()) => {
                match tokio::time::timeout(PROBE_TIMEOUT, self.store.contains(&probe)).await {
                    Ok(Ok(_)) => true,
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "readyz: store error");
                        false
                    }
                    Err(_) => false,
                }
            }
        };
        match (answered, store_is_optional(self.store.backend())) {
            (true, _) => Ok(Ready::Ready),
            (false, true) => Ok(Ready::StoreDegraded),
            (false, false) => Err(NotReady::StoreUnreachable),
        }
    }
}

/// Whether a store's outage leaves the replica serving (see the module docs): a store shared
/// by every replica, whose outage only switches the relay off.
fn store_is_optional(backend: &str) -> bool {
    backend == "redis"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ready_until_shutdown() {
        let r = Readiness::new(Arc::new(context_relay_store::MemoryStore::new()));
        assert_eq!(r.check().await, Ok(Ready::Ready));
        r.clone().shutting_down();
        assert_eq!(r.check().await, Err(NotReady::ShuttingDown));
    }
}
