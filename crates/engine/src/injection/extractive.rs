//! A switch never lands with nothing: when a switch finds no stored handoff (no summary was
//! written — a 5xx, a connection error or a 401 moved the session, its usage jumped past the
//! handoff band in one turn, or its provider sends no quota headers), one is built there and
//! then from the request being sent ([`switch_handoff`]), stored as `extractive` and claimed
//! like any other, so that a retry on yet another account gets it too and a later model
//! handoff replaces it.

use std::time::SystemTime;

use context_relay_core::extractive::switch_handoff;
use context_relay_core::handoff::RECORD_VERSION;
use context_relay_core::time::to_unix_millis;
use context_relay_core::{ApiShape, HandoffKey, HandoffKind, HandoffRecord, RelayConfig};
use context_relay_store::Affinity;

use super::claim::Carried;
use crate::metrics;
use crate::relay::Shared;

/// Builds, stores and claims the extractive handoff of a switch away from `previous`, from
/// the decoded request `body`. `None` when the body holds no conversation text.
pub(crate) async fn at_switch(
    shared: &Shared,
    config: &RelayConfig,
    key: &HandoffKey,
    shape: ApiShape,
    body: &[u8],
    previous: &Affinity,
    opening: Option<u64>,
) -> Option<Carried> {
    let built = switch_handoff(
        shape,
        body,
        config.relay_mode,
        config.max_messages_for_summary,
    )?;
    let now = SystemTime::now();
    let from = previous.account();
    let mut record = HandoffRecord {
        version: RECORD_VERSION,
        kind: HandoffKind::Extractive,
        tenant: key.tenant.clone(),
        session: key.session.clone(),
        combo: key.combo.clone(),
        from_provider: from.provider().to_string(),
        from_account: from.account().to_string(),
        handoff: built.handoff,
        message_count: built.message_count,
        conversation: None,
        compaction: false,
        model: String::new(),
        threshold: config.handoff_threshold,
        generated_at: now,
        expires_at: now + config.ttl,
    };
    record.set_conversation(opening);
    // A concurrent request of the conversation that landed first moved it on and carried its
    // handoff: none is built for this one.
    if shared
        .affinity(key)
        .await
        .is_some_and(|now| now.account() != previous.account())
    {
        return None;
    }
    // Offered, not upserted: a handoff a concurrent request of the conversation is carrying
    // (leased) is not replaced, and this one is dropped.
    let claimed = match shared
        .bounded(
            "offer_at_switch",
            shared.store.offer_at_switch(record.clone()),
        )
        .await
    {
        Ok(true) => {
            shared
                .bounded("claim", shared.store.claim(key, config.lease))
                .await
        }
        Ok(false) => Ok(None),
        Err(e) => Err(e),
    };
    let carried = match claimed {
        // (A summary that landed meanwhile is claimed instead: it is better than this one.)
        Ok(Some(claim)) => Carried::Claimed(Box::new(claim)),
        // Leased by a concurrent request of the conversation: that request carries it.
        Ok(None) => return None,
        Err(e) => {
            metrics::store_error("extractive_at_switch", &e);
            forget_if_stored(shared, key, &record);
            Carried::Unstored(Box::new(record))
        }
    };
    let stored = matches!(carried, Carried::Claimed(_));
    ::metrics::counter!(metrics::SWITCH_EXTRACTIVE, "stored" => if stored { "true" } else { "false" })
        .increment(1);
    tracing::info!(
        messages = carried.record().message_count,
        stored,
        "no stored handoff at the switch; carrying one built from the request"
    );
    Some(carried)
}

/// A failed offer or claim may have failed after the store took the record (a timeout on the
/// request path's short limit; a Redis that refuses writes takes the offer's first command
/// and refuses the claim's): carried unstored now, a stored copy would be claimed by the
/// session's next request and injected a second time. So, in the background, the record is
/// deleted if it is there (the same handoff, generated at the same moment, to the
/// millisecond a store keeps, by the same account), trying again while the store recovers
/// ([`FORGET_RETRIES`]).
fn forget_if_stored(shared: &Shared, key: &HandoffKey, record: &HandoffRecord) {
    let (shared2, key) = (shared.clone(), key.clone());
    let (generated_at, from, handoff) = (
        to_unix_millis(record.generated_at),
        record.from_account.clone(),
        record.handoff.clone(),
    );
    shared.background.spawn(async move {
        let mut wait = std::time::Duration::ZERO;
        for _ in 0..FORGET_RETRIES {
            tokio::time::sleep(wait).await;
            wait = (wait * 2).clamp(FORGET_FIRST_WAIT, FORGET_LONGEST_WAIT);
            match shared2.store.get(&key).await {
                Ok(Some(r))
                    if r.kind == HandoffKind::Extractive
                        && to_unix_millis(r.generated_at) == generated_at
                        && r.from_account == from
                        && r.handoff == handoff =>
                {
                    if shared2.store.delete(&key).await.is_ok() {
                        tracing::info!(
                            "a handoff stored by a failed switch-time offer was removed"
                        );
                        return;
                    }
                }
                Ok(_) => return,
                Err(_) => {}
            }
        }
        tracing::warn!(
            "a handoff a failed switch-time offer may have stored could not be checked: the store kept failing"
        );
    });
}

/// How many times [`forget_if_stored`] looks, the first at once, then after
/// [`FORGET_FIRST_WAIT`] doubling to [`FORGET_LONGEST_WAIT`]: about two minutes in all, as
/// long as a store commonly refuses writes (a full Redis, a failover) without the session's
/// next request claiming the copy (its claim is a write, refused too).
const FORGET_RETRIES: u32 = 30;
const FORGET_FIRST_WAIT: std::time::Duration = std::time::Duration::from_millis(500);
const FORGET_LONGEST_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
