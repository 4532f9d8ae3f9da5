//! The fast path of the injection side: at header time, a session that stays on its account
//! and model with nothing foreign to remove and no handoff waiting goes out with its body
//! unread (the store's caches tell, without I/O); the body is only copied for a possible
//! repair.

use std::sync::Arc;
use std::time::SystemTime;

use context_relay_core::portable::{ForeignSet, TURN_STATE_HEADER};
use context_relay_core::{ApiShape, HandoffKey, RelayConfig};
use http::{HeaderMap, HeaderName, header};

use super::decide::Inject;
use super::model;
use super::repair::{Remember, Repair, Sent};
use super::tee::Tee;
use super::ticket::Ticket;
use crate::extensions::{ResolvedAccount, ServingModel};
use crate::relay::Shared;

/// Named once: a header looked up by a string is parsed on every look-up.
const TURN_STATE: HeaderName = HeaderName::from_static(TURN_STATE_HEADER);

/// The fast path of [`Relay::inject`]: the session stays on its account and model with nothing
/// foreign to remove, and no handoff waits (the store's caches tell, without I/O). Otherwise
/// the key back, for the slow path.
#[allow(clippy::too_many_arguments)]
pub(super) fn fast(
    shared: &Arc<Shared>,
    config: &RelayConfig,
    key: HandoffKey,
    shape: ApiShape,
    account: &ResolvedAccount,
    serving_model: Option<&ServingModel>,
    headers: &HeaderMap,
    body_len_hint: u64,
) -> Result<Inject, HandoffKey> {
    let Some(affinity) = shared.store.cached_affinity(&key) else {
        return Err(key);
    };
    let stays = match &affinity {
        // The session's first request is read: its opening tells its primary conversation
        // apart from others sharing the session header.
        None => false,
        // Where account switches are not relayed, any account of the model stays.
        Some(a) => {
            (a.serves(account) || !config.account_handoff)
                // Never switched: no clock read. After a switch, every conversation of the
                // session is read until the switch window closes.
                && (a.foreign_expires_at == SystemTime::UNIX_EPOCH
                    || !a.in_switch_window(SystemTime::now()))
                && !model::moved(a, serving_model.map(|m| &*m.0))
        }
    };
    if !stays || shared.store.may_contain(&key) {
        return Err(key);
    }
    let Some(affinity) = affinity else {
        return Err(key);
    };
    let mut ticket = Ticket::new(shared.clone(), account.clone());
    let model = serving_model.map(|m| &*m.0);
    // The key moves to the repair; it is cloned only when an affinity is recorded (rare).
    if let Some(record) = model::to_record(Some(&affinity), account, model) {
        ticket.set_record(key.clone(), record);
    }
    let limit = config.max_body_bytes;
    let bound = matches!(shape, ApiShape::Responses | ApiShape::AnthropicMessages);
    let repair = (bound && body_len_hint <= limit as u64).then(|| {
        Box::new(Repair {
            shape,
            slot: config.injection_slot_responses,
            sent: Sent::Tee {
                tee: Tee::new(limit),
                encoding: headers.get(header::CONTENT_ENCODING).cloned(),
                limit,
            },
            turn_state: headers.contains_key(TURN_STATE),
            remember: Some(Remember {
                key,
                foreign: ForeignSet::default(),
                ttl: config.ttl,
                affinity: model::with_model(affinity, model),
            }),
        })
    });
    Ok(Inject::Forward { ticket, repair })
}
