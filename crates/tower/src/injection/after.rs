//! What happens once the response of a relayed request is known: the claimed handoff is
//! completed or released, the session's affinity moves or stays.

use std::sync::Arc;

use context_relay_core::HandoffKey;
use context_relay_core::ending::Ending;
use context_relay_store::{Affinity, Claim};

use super::action::RelayAction;
use super::shared::Shared;
use crate::extensions::ResolvedAccount;
use crate::metrics;

/// The outcome bookkeeping of one relayed request.
pub(crate) struct After {
    pub(crate) shared: Arc<Shared>,
    pub(crate) account: ResolvedAccount,
    /// The handoff this request carries.
    pub(crate) claim: Option<Claim>,
    /// The affinity to record once the response completed (`None`: it stays as it is).
    pub(crate) record: Option<(HandoffKey, Affinity)>,
    pub(crate) action: RelayAction,
}

impl After {
    pub(crate) fn new(shared: Arc<Shared>, account: ResolvedAccount) -> Self {
        Self {
            shared,
            account,
            claim: None,
            record: None,
            action: RelayAction::default(),
        }
    }

    /// Whether anything waits for the end of the response body.
    pub(crate) fn waits_for_end(&self) -> bool {
        self.claim.is_some() || self.record.is_some()
    }

    /// The response body ended (or failed, or was dropped) this way.
    pub(crate) fn ended(mut self, ending: Ending) {
        if ending != Ending::Completed {
            if ending == Ending::Failed {
                tracing::info!(account = %self.account.account, "response failed in-band");
            }
            // `Drop` releases the claim.
            return;
        }
        let store = self.shared.store.clone();
        if let Some(claim) = self.claim.take() {
            self.shared.background.spawn(async move {
                match store.complete(&claim).await {
                    Ok(_) => {
                        ::metrics::counter!(metrics::CONSUMED).increment(1);
                        tracing::info!(session = %claim.record.session, "handoff consumed");
                    }
                    Err(e) => metrics::store_error("complete", &e),
                }
            });
        }
        if let Some((key, affinity)) = self.record.take() {
            let store = self.shared.store.clone();
            self.shared.background.spawn(async move {
                if let Err(e) = store.set_affinity(&key, affinity).await {
                    metrics::store_error("set_affinity", &e);
                }
            });
        }
    }

    /// Gives the claim back now, before the response is handed on: a retry on another account
    /// must be able to claim it at once.
    pub(crate) async fn release_now(&mut self) {
        self.record = None;
        if let Some(claim) = self.claim.take() {
            release(&self.shared, &claim).await;
        }
    }
}

impl Drop for After {
    fn drop(&mut self) {
        // Failed, cut or dropped: the claim goes back for the next attempt.
        if let Some(claim) = self.claim.take() {
            let shared = self.shared.clone();
            self.shared
                .background
                .spawn(async move { release(&shared, &claim).await });
        }
    }
}

/// Gives a claimed handoff back so that the next attempt gets it again.
pub(crate) async fn release(shared: &Shared, claim: &Claim) {
    match shared.store.release(claim).await {
        Ok(()) => {
            ::metrics::counter!(metrics::RELEASED).increment(1);
            tracing::info!(session = %claim.record.session, "handoff released for a later attempt");
        }
        Err(e) => metrics::store_error("release", &e),
    }
}
