//! The periodic purge of expired records, for any backend.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::HandoffStore;

/// How often [`spawn_purger`] purges by default: expired records are already absent from
/// every read, so purging only reclaims space and can be infrequent.
pub const DEFAULT_PURGE_INTERVAL: Duration = Duration::from_secs(10 * 60);

/// Runs [`HandoffStore::purge_expired`] every `every` on the current tokio runtime, first after
/// one interval; stops when the returned handle drops.
///
/// A failed purge is logged and retried at the next tick. Needs a tokio runtime with timers.
pub fn spawn_purger(store: Arc<dyn HandoffStore>, every: Duration) -> PurgerHandle {
    let (runs_tx, runs) = watch::channel(0u64);
    let every = every.max(Duration::from_millis(1));
    let task = tokio::spawn(async move {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match store.purge_expired().await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(
                    backend = store.backend(),
                    purged = n,
                    "purged expired handoffs"
                ),
                Err(e) => {
                    tracing::warn!(backend = store.backend(), error = %e, "purging expired handoffs failed")
                }
            }
            runs_tx.send_modify(|n| *n += 1);
        }
    });
    PurgerHandle { task, runs }
}

/// Owns a running purger; dropping it stops the purger.
#[derive(Debug)]
pub struct PurgerHandle {
    task: JoinHandle<()>,
    runs: watch::Receiver<u64>,
}

impl PurgerHandle {
    /// Counts finished purge runs: lets a caller (or a test) wait for the next one.
    pub fn runs(&self) -> watch::Receiver<u64> {
        self.runs.clone()
    }

    /// Stops the purger and waits until its task has ended, and so has let go of the store.
    /// Dropping the handle stops it too, but the task ends a moment later on the runtime: a
    /// caller that reopens the store's file right after must stop it this way.
    pub async fn stop(mut self) {
        self.task.abort();
        // The task never panics; an abort is what ends it.
        let _ = (&mut self.task).await;
    }
}

impl Drop for PurgerHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}
