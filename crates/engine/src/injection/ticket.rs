//! What happens once the response of a relayed request is known: the claimed handoff is
//! completed or released, the session's affinity moves or stays.

use std::sync::Arc;

use context_relay_core::HandoffKey;
use context_relay_core::ending::{EndDetector, Ending};
use context_relay_store::{Affinity, Claim};

use crate::action::{RELAY_HEADER, RelayAction};
use crate::extensions::ResolvedAccount;
use crate::metrics;
use crate::relay::Shared;

/// The outcome bookkeeping of one relayed request: the handoff it carries (claimed) and the
/// affinity to record once its response completed.
///
/// - [`ended`](Self::ended) with [`Ending::Completed`] (a 2xx whose body ended with the API's
///   terminal success event, or a complete JSON body) deletes the handoff and records the
///   affinity, in the background;
/// - [`label`](Self::label) on an error status gives the claim back before the response is
///   handed on, so that a retry on another account can claim the handoff at once
///   ([`release_now`](Self::release_now) does the same when there is no response);
/// - dropping it, or ending it any other way, gives the claim back (in the background).
pub struct Ticket {
    pub(crate) shared: Arc<Shared>,
    pub(crate) account: ResolvedAccount,
    /// The handoff this request carries.
    pub(crate) claim: Option<Box<Claim>>,
    /// The affinity to record once the response completed (`None`: it stays as it is).
    /// Boxed: a session that stays on its account records nothing, and the ticket is moved
    /// with every response future.
    pub(crate) record: Option<Box<(HandoffKey, Affinity)>>,
    pub(crate) action: RelayAction,
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
        }
    }

    /// Records `affinity` for `key` once the response completed.
    pub(crate) fn set_record(&mut self, key: HandoffKey, affinity: Affinity) {
        self.record = Some(Box::new((key, affinity)));
    }

    /// The account the request was sent to.
    pub fn account(&self) -> &ResolvedAccount {
        &self.account
    }

    /// What the relay did to the request.
    pub fn action(&self) -> RelayAction {
        self.action
    }

    /// Whether the request carries a claimed handoff.
    pub fn carries_handoff(&self) -> bool {
        self.claim.is_some()
    }

    /// Whether anything waits for the end of the response body.
    pub fn waits_for_end(&self) -> bool {
        self.claim.is_some() || self.record.is_some()
    }

    /// Labels a response head: the [`ResolvedAccount`] extension when the response lacks one,
    /// the [`RelayAction`] extension and [`RELAY_HEADER`] when the relay acted. On an error
    /// status the claim is given back before this returns, so that a retry on another account
    /// can claim the handoff at once. Gives the ticket back when it waits for the end of a
    /// successful body (watch it with [`EndWatch`]); otherwise dropping it settles it.
    pub async fn label(mut self, parts: &mut http::response::Parts) -> Option<Ticket> {
        if !parts.status.is_success() {
            self.release_now().await;
        }
        self.label_head(parts)
    }

    /// [`label`](Self::label) without waiting, when nothing must be given back first (no
    /// claim, or a 2xx): `Err` with the ticket, the head untouched, when a claim must be
    /// released (then use `label`).
    pub fn try_label(
        self,
        parts: &mut http::response::Parts,
    ) -> Result<Option<Ticket>, Box<Ticket>> {
        if self.claim.is_some() && !parts.status.is_success() {
            return Err(Box::new(self));
        }
        Ok(self.label_head(parts))
    }

    fn label_head(self, parts: &mut http::response::Parts) -> Option<Ticket> {
        if parts.extensions.get::<ResolvedAccount>().is_none() {
            parts.extensions.insert(self.account.clone());
        }
        // The header is the relay's word: an upstream's own is not passed on as if it were.
        parts.headers.remove(RELAY_HEADER);
        if let Some(value) = self.action.header_value() {
            parts.headers.insert(RELAY_HEADER, value);
            parts.extensions.insert(self.action);
        }
        (parts.status.is_success() && self.waits_for_end()).then_some(self)
    }

    /// The response body ended (or failed, or was dropped) this way.
    pub fn ended(mut self, ending: Ending) {
        if ending != Ending::Completed {
            if ending == Ending::Failed {
                tracing::info!(account = %self.account.account(), "response failed in-band");
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
        if let Some(record) = self.record.take() {
            let (key, affinity) = *record;
            // Known to this process now, written in the background: a next turn that comes
            // before the write must not be taken for another switch.
            let write = self.shared.store.clone().set_affinity_now(key, affinity);
            self.shared.background.spawn(async move {
                if let Err(e) = write.await {
                    metrics::store_error("set_affinity", &e);
                }
            });
        }
    }

    /// Gives the claim back now, before the response is handed on: a retry on another account
    /// must be able to claim it at once. The affinity stays as it was.
    pub async fn release_now(&mut self) {
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
    match shared.store.release(claim).await {
        Ok(()) => {
            ::metrics::counter!(metrics::RELEASED).increment(1);
            tracing::info!(session = %claim.record.session, "handoff released for a later attempt");
        }
        Err(e) => metrics::store_error("release", &e),
    }
}

/// Watches how a response body ends for a [`Ticket`]: push every chunk, then
/// [`finish`](Self::finish) at the end of the body (or when it failed). Dropped unfinished, the
/// ticket releases its claim.
pub struct EndWatch {
    detector: EndDetector,
    ticket: Ticket,
}

impl std::fmt::Debug for EndWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndWatch")
            .field("ticket", &self.ticket)
            .finish_non_exhaustive()
    }
}

impl EndWatch {
    /// Watches a body from its start.
    pub fn new(ticket: Ticket) -> Self {
        Self::resume(EndDetector::new(), ticket)
    }

    /// Watches a body whose first chunks `detector` has seen already.
    pub fn resume(detector: EndDetector, ticket: Ticket) -> Self {
        Self { detector, ticket }
    }

    /// A chunk of the body.
    pub fn push(&mut self, data: &[u8]) {
        self.detector.push(data);
    }

    /// The body ended (`errored`: with an error): the ticket is settled.
    pub fn finish(mut self, errored: bool) {
        let ending = if errored {
            Ending::Unfinished
        } else {
            self.detector.finish()
        };
        self.ticket.ended(ending);
    }
}
