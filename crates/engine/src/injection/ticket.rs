//! What happens once the response of a relayed request is known: the claimed handoff is
//! completed or released, the session's affinity moves or stays.

use std::sync::Arc;

use context_relay_core::HandoffKey;
use context_relay_core::ending::Ending;
use context_relay_store::{Affinity, Claim};

use crate::action::RelayAction;
use crate::extensions::ResolvedAccount;
use crate::metrics;
use crate::relay::Shared;

/// The longest a completed switch waits for its affinity write before it consumes the
/// handoff it carried (see [`Ticket::ended`]).
const AFFINITY_FIRST: std::time::Duration = std::time::Duration::from_secs(5);

/// The outcome bookkeeping of one relayed request: the handoff it carries (claimed) and the
/// affinity to record once its response completed.
///
/// - [`ended`](Self::ended) with [`Ending::Completed`] (a 2xx whose body ended with the API's
///   terminal success event, or a complete JSON body) deletes the handoff and records the
///   affinity, in the background;
/// - [`release_now`](Self::release_now) on an error status (or when no response came) gives
///   the claim back before the response is handed on, so that a retry on another account can
///   claim the handoff at once ([`Attempt`](crate::Attempt) calls it in that order);
/// - dropping it, or ending it any other way, gives the claim back (in the background).
pub(crate) struct Ticket {
    pub(crate) shared: Arc<Shared>,
    pub(crate) account: ResolvedAccount,
    /// The handoff this request carries.
    pub(crate) claim: Option<Box<Claim>>,
    /// The affinity to record once the response completed (`None`: it stays as it is).
    /// Boxed: a session that stays on its account records nothing, and the ticket is moved
    /// with every response future.
    pub(crate) record: Option<Box<(HandoffKey, Affinity)>>,
    pub(crate) action: RelayAction,
    /// What is counted once the response completed (an attempt refused and retried elsewhere
    /// is no switch that happened).
    pub(crate) counted: Counted,
}

/// What a [`Ticket`] counts once its response completed: which handoff the request is about,
/// and whether it was made portable on a switch (one byte: the ticket moves with every
/// response future).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Counted {
    /// Nothing (the fast path, and requests the relay did not decide on).
    #[default]
    Nothing,
    /// An account handoff's request; `true` when it switched.
    Account(bool),
    /// A model switch's request.
    Model,
}

impl Counted {
    /// The metrics' `kind` label and whether the request switched.
    fn kind(self) -> Option<(&'static str, bool)> {
        match self {
            Self::Nothing => None,
            Self::Account(switched) => Some(("account", switched)),
            Self::Model => Some(("model", true)),
        }
    }
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("account", &self.account)
            .field("claimed", &self.claim.is_some())
            .field("records_affinity", &self.record.is_some())
            .field("action", &self.action)
            .finish_non_exhaustive()
    }
}

impl Ticket {
    pub(crate) fn new(shared: Arc<Shared>, account: ResolvedAccount) -> Self {
        Self {
            shared,
            account,
            claim: None,
            record: None,
            action: RelayAction::default(),
            counted: Counted::Nothing,
        }
    }

    /// Records `affinity` for `key` once the response completed.
    pub(crate) fn set_record(&mut self, key: HandoffKey, affinity: Affinity) {
        self.record = Some(Box::new((key, affinity)));
    }

    /// The account the request was sent to.
    pub(crate) fn account(&self) -> &ResolvedAccount {
        &self.account
    }

    /// What the relay did to the request.
    pub(crate) fn action(&self) -> RelayAction {
        self.action
    }

    /// Whether the request carries a claimed handoff.
    pub(crate) fn carries_handoff(&self) -> bool {
        self.claim.is_some()
    }

    /// Whether anything waits for the end of the response body.
    pub(crate) fn waits_for_end(&self) -> bool {
        self.claim.is_some()
            || self.record.is_some()
            || self
                .counted
                .kind()
                .is_some_and(|(_, switched)| switched || self.action.injected)
    }
    /// The response body ended (or failed, or was dropped) this way.
    pub(crate) fn ended(mut self, ending: Ending) {
        if ending != Ending::Completed {
            if ending == Ending::Failed {
                tracing::info!(account = %self.account.account(), "response failed in-band");
            }
            // `Drop` releases the claim.
            return;
        }
        if let Some((kind, switched)) = self.counted.kind() {
            if switched {
                ::metrics::counter!(metrics::SWITCHES, "kind" => kind).increment(1);
            }
            if self.action.injected {
                ::metrics::counter!(metrics::INJECTED, "kind" => kind).increment(1);
            }
        }
        let store = self.shared.store.clone();
        // Known to this process now, written in the background: a next turn that comes before
        // the write must not be taken for another switch.
        let write = self.record.take().map(|record| {
            let (key, affinity) = *record;
            store.clone().set_affinity_now(key, affinity)
        });
        let claim = self.claim.take();
        if write.is_none() && claim.is_none() {
            return;
        }
        // The new account is written before the handoff is consumed: a summary of the old
        // account that finds no handoff leased any more then finds the session moved too
        // (it looks again after its offer), and leaves no second handoff behind. A write
        // that takes longer than `AFFINITY_FIRST` goes on after the completion: the lease
        // must not run out first (the next request would inject the handoff again).
        self.shared.background.spawn(async move {
            let mut write = std::pin::pin!(async move {
                if let Some(write) = write
                    && let Err(e) = write.await
                {
                    metrics::store_error("set_affinity", &e);
                }
            });
            let written = tokio::time::timeout(AFFINITY_FIRST, write.as_mut())
                .await
                .is_ok();
            if let Some(claim) = claim {
                match store.complete(&claim).await {
                    Ok(_) => {
                        ::metrics::counter!(metrics::CONSUMED).increment(1);
                        tracing::info!(session = &*claim.record.session, "handoff consumed");
                    }
                    Err(e) => metrics::store_error("complete", &e),
                }
            }
            if !written {
                write.await;
            }
        });
    }

    /// Gives the claim back now, before the response is handed on: a retry on another account
    /// must be able to claim it at once. The affinity stays as it was.
    pub(crate) async fn release_now(&mut self) {
        self.record = None;
        if let Some(claim) = self.claim.take() {
            release(&self.shared, &claim).await;
        }
    }
}

impl Drop for Ticket {
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
    match shared.bounded("release", shared.store.release(claim)).await {
        Ok(()) => {
            ::metrics::counter!(metrics::RELEASED).increment(1);
            tracing::info!(
                session = &*claim.record.session,
                "handoff released for a later attempt"
            );
        }
        Err(e) => metrics::store_error("release", &e),
    }
}
