//! The handoff a request carries: a live one another account wrote for this conversation,
//! claimed from the store (leased, so that no concurrent request injects it too), or the one
//! built at the switch ([`super::extractive`]); given back when it does not go out.

use context_relay_core::{HandoffKey, HandoffRecord};
use context_relay_store::Claim;

use super::conversation::Conversation;
use super::ticket::release;
use crate::extensions::ResolvedAccount;
use crate::metrics;
use crate::relay::Shared;

/// The handoff a switch carries.
pub(crate) enum Carried {
    /// Claimed from the store (written earlier, or just now at the switch).
    Claimed(Box<Claim>),
    /// Built at the switch but not stored (the store failed): injected all the same, with
    /// nothing to complete or release.
    Unstored(Box<HandoffRecord>),
}

impl Carried {
    pub(crate) fn record(&self) -> &HandoffRecord {
        match self {
            Carried::Claimed(c) => &c.record,
            Carried::Unstored(r) => r,
        }
    }
}

/// What [`claim_for`] found.
pub(super) enum Found {
    /// Claimed: this request carries it.
    Mine(Box<Claim>),
    /// Leased by a concurrent request of the conversation (or by a replica that died with it,
    /// until the lease runs out): that request carries the conversation's handoff, this one
    /// none, and none is built for it either.
    Elsewhere,
    /// Nothing this request may carry.
    Nothing,
}

/// Claims the key's handoff when one is live and was written by another account (of the
/// serving provider, when `same_provider`: with models known, a handoff written on another
/// provider was for a model switch to read, not for this account to consume).
pub(super) async fn claim_for(
    shared: &Shared,
    key: &HandoffKey,
    account: &ResolvedAccount,
    same_provider: bool,
    conversation: &Conversation,
    lease: std::time::Duration,
) -> Found {
    let claimable = |record: &context_relay_core::HandoffRecord| {
        !record.is_from(account)
            && conversation.owns(record.conversation_digest())
            && (!same_provider
                || record
                    .from_provider
                    .eq_ignore_ascii_case(account.provider()))
    };
    if !shared.store.may_contain(key) {
        return Found::Nothing;
    }
    // Read first: while the session stays on the account that wrote the handoff (between the
    // threshold and the rotation), a claim/release pair per request would be two writes.
    match shared.bounded("get", shared.store.get(key)).await {
        Ok(Some(record)) if claimable(&record) => {}
        Ok(_) => return Found::Nothing,
        Err(e) => {
            metrics::store_error("get", &e);
            return Found::Nothing;
        }
    }
    match shared
        .bounded("claim", shared.store.claim(key, lease))
        .await
    {
        Ok(Some(claim)) if claimable(&claim.record) => Found::Mine(Box::new(claim)),
        Ok(Some(claim)) => {
            release(shared, &claim).await;
            Found::Nothing
        }
        // Leased by a concurrent request: it injects, this one does not. (Gone since the read,
        // it was consumed or expired: nothing is carried, and the switch builds its own.)
        Ok(None) => match shared.bounded("get", shared.store.get(key)).await {
            Ok(Some(_)) => Found::Elsewhere,
            Ok(None) => Found::Nothing,
            Err(e) => {
                metrics::store_error("get", &e);
                Found::Nothing
            }
        },
        Err(e) => {
            metrics::store_error("claim", &e);
            Found::Nothing
        }
    }
}

/// Whether the conversation in `body` has outgrown `record`: it holds at least twice
/// `refresh_after` entries more than the handoff read. A session in the handoff band gets a
/// new summary every `refresh_after` entries, so one that far behind was written many turns
/// before the account left the band (its usage fell back below it, then jumped past it): the
/// switch builds one from the request instead. With `refresh_after` 0 (a summary every
/// turn) nothing is outgrown; nor is anything by a body that holds no conversation.
pub(super) fn outgrown(
    record: &HandoffRecord,
    shape: context_relay_core::ApiShape,
    body: &[u8],
    refresh_after: u32,
) -> bool {
    let margin = (refresh_after as usize).saturating_mul(2);
    margin > 0
        && context_relay_core::extractive::entry_count(shape, body)
            .is_some_and(|n| n >= (record.message_count as usize).saturating_add(margin))
}

/// Gives a claimed handoff that goes out with no request back.
pub(super) async fn give_back(shared: &Shared, carried: Option<Carried>) {
    if let Some(Carried::Claimed(c)) = carried {
        release(shared, &c).await;
    }
}
