//! Storing a job's handoff: offered, not upserted (a handoff a switching request carries now
//! is not replaced), dropped when the session moved to another account before the summary
//! was done, and withdrawn when it moved while the summary was being stored (a switch that
//! completed between the look at the session's account and the offer).

use std::time::SystemTime;

use context_relay_core::handoff::RECORD_VERSION;
use context_relay_core::time::to_unix_millis;
use context_relay_core::{Handoff, HandoffKind, HandoffRecord, HandoffSlot};

use super::job::Job;
use super::outcome::Stored;
use crate::metrics;

/// The lease a job takes on its own handoff to withdraw it ([`Job::withdraw`]): a claim and a
/// completion, back to back.
const WITHDRAW_LEASE: std::time::Duration = std::time::Duration::from_secs(30);

impl Job {
    /// Whether the session is now served by another account than the one this job
    /// summarises (it moved while the summary was being written).
    async fn moved_on(&self) -> bool {
        self.shared
            .affinity(&self.key)
            .await
            .is_some_and(|now| !now.serves(&self.account))
    }

    /// Takes back the handoff this job stored (generated at `generated_at` by its account):
    /// claimed, so that a request carrying it now keeps it, and completed only if it is still
    /// this job's (a record stored meanwhile by another writer is released untouched).
    async fn withdraw(&self, generated_at: std::time::SystemTime) {
        let store = &self.shared.store;
        match store.claim(&self.key, WITHDRAW_LEASE).await {
            Ok(Some(claim))
                if claim.record.is_from(&self.account)
                    && to_unix_millis(claim.record.generated_at)
                        == to_unix_millis(generated_at) =>
            {
                if let Err(e) = store.complete(&claim).await {
                    metrics::store_error("complete", &e);
                }
            }
            Ok(Some(other)) => {
                if let Err(e) = store.release(&other).await {
                    metrics::store_error("release", &e);
                }
            }
            Ok(None) => {}
            Err(e) => metrics::store_error("claim", &e),
        }
    }

    /// Stores a handoff of `kind` (see [`Stored`]).
    pub(super) async fn store(
        &self,
        handoff: Handoff,
        kind: HandoffKind,
        message_count: u32,
        model: String,
        opening: Option<u64>,
        compaction: bool,
    ) -> Stored {
        let now = SystemTime::now();
        let ttl_end = now + self.config.ttl;
        let expires_at = match self.signal.as_ref().and_then(|s| s.resets_at) {
            Some(reset) if reset > now && reset < ttl_end => reset,
            _ => ttl_end,
        };
        let mut record = HandoffRecord {
            version: RECORD_VERSION,
            kind,
            tenant: self.key.tenant.clone(),
            session: self.key.session.clone(),
            combo: self.key.combo.clone(),
            from_provider: self.account.provider().to_string(),
            from_account: self.account.account().to_string(),
            handoff,
            message_count,
            conversation: None,
            compaction: false,
            model,
            threshold: self.config.handoff_threshold,
            generated_at: now,
            expires_at,
        };
        record.set_conversation(opening);
        record.compaction = compaction;
        let account_slot = record.slot() == HandoffSlot::Account;
        // A summary done after its session moved to another account is no handoff any more:
        // the switch carried one (stored, or built there), and a second would reach the new
        // account on its next request.
        if account_slot && self.moved_on().await {
            tracing::info!(
                kind = kind.as_str(),
                "the session moved to another account before its summary was done; dropped"
            );
            return Stored::Superseded;
        }
        // Offered, not upserted: a handoff a switching request is carrying right now (leased)
        // is not replaced by one it would then leave behind.
        let generated_at = record.generated_at;
        let stored = if account_slot {
            self.shared.store.offer(record).await
        } else {
            self.shared.store.upsert(record).await.map(|()| true)
        };
        match stored {
            Ok(false) => {
                tracing::info!(
                    kind = kind.as_str(),
                    "a switching request is carrying the session's handoff; this summary is dropped"
                );
                Stored::Superseded
            }
            // The switch may have completed between the look at the affinity above and the
            // offer (it consumed the leased handoff, then this one found none leased): the
            // session's new account must not get this one as well.
            Ok(true) if account_slot && self.moved_on().await => {
                self.withdraw(generated_at).await;
                tracing::info!(
                    kind = kind.as_str(),
                    "the session moved to another account while its summary was stored; withdrawn"
                );
                Stored::Superseded
            }
            Ok(true) => {
                tracing::info!(
                    messages = message_count,
                    kind = kind.as_str(),
                    "handoff stored"
                );
                Stored::Yes
            }
            Err(e) => {
                metrics::store_error("upsert", &e);
                Stored::Failed
            }
        }
    }
}
