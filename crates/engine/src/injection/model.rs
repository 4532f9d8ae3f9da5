//! Model switches: a session whose request goes to another model (`provider/model`) than the
//! one that last served it through its combo.
//!
//! The serving model comes from [`ServingModel`](crate::ServingModel) and is recorded with the
//! session's affinity when a response completes. A request sent to another model is a model
//! switch: the new model (often of another provider) can read none of the account-bound state
//! the session carries, so all of it goes, and a handoff naming both models is injected, made
//! from the freshest stored handoff of the session (read, never claimed: the account-switch
//! handoff stays for the accounts of its own provider), else built from the request itself
//! as at an account switch, else (a request with no text) the bare note saying that no
//! summary exists. The switch is injected once: the affinity moves to the new model when its
//! response completes.

use std::sync::Arc;

use context_relay_core::extractive::SwitchHandoff;
use context_relay_core::{HandoffKey, render};
use context_relay_store::Affinity;

use crate::extensions::ResolvedAccount;
use crate::metrics;
use crate::relay::Shared;

/// A move of the session from the model `previous` to `current`.
#[derive(Debug, Clone)]
pub(crate) struct ModelMove {
    pub(crate) previous: Arc<str>,
    pub(crate) current: Arc<str>,
}

/// Whether `affinity` was served by another model than `current` (`None` when either is
/// unknown: an affinity recorded without a model is no switch).
pub(crate) fn moved(affinity: &Affinity, current: Option<&str>) -> bool {
    matches!((affinity.model(), current), (Some(p), Some(c)) if p != c)
}

/// The move of the session from its affinity's model to `current`, if it is one.
pub(crate) fn model_move(
    affinity: Option<&Affinity>,
    current: Option<&Arc<str>>,
) -> Option<ModelMove> {
    let (affinity, current) = (affinity?, current?);
    moved(affinity, Some(current)).then(|| ModelMove {
        previous: Arc::from(affinity.model().unwrap_or_default()),
        current: current.clone(),
    })
}

/// The affinity to record when a request that is no switch completes: a new one when the
/// session had none, the same one with `model` when it did not record that model yet.
pub(crate) fn to_record(
    affinity: Option<&Affinity>,
    account: &ResolvedAccount,
    model: Option<&str>,
) -> Option<Affinity> {
    match affinity {
        None => Some(with_model(Affinity::of(account.clone()), model)),
        Some(a) => match model {
            Some(m) if a.model() != Some(m) => Some(a.clone().with_model(m)),
            _ => None,
        },
    }
}

/// `affinity` with `model` as its serving model, when known.
pub(crate) fn with_model(affinity: Affinity, model: Option<&str>) -> Affinity {
    match model {
        Some(m) => affinity.with_model(m),
        None => affinity,
    }
}

/// The message injected on `m`, and whether it summarises the request's compacted context:
/// the freshest stored handoff of the session rendered for a model switch; without one (or
/// when the store cannot tell), the handoff `built` from the request itself (a switch never
/// lands with nothing); the bare note when the request holds no text to build one from.
pub(crate) async fn message(
    shared: &Shared,
    key: &HandoffKey,
    m: &ModelMove,
    built: impl FnOnce() -> Option<SwitchHandoff>,
) -> (String, bool) {
    let freshest = match shared.bounded("freshest", shared.store.freshest(key)).await {
        Ok(record) => record,
        Err(e) => {
            metrics::store_error("freshest", &e);
            None
        }
    };
    if let Some(record) = freshest {
        let text = render::render_model_switch_record(&record, &m.previous, &m.current);
        return (text, record.compaction);
    }
    let text = match built() {
        Some(b) => {
            ::metrics::counter!(metrics::SWITCH_EXTRACTIVE, "stored" => "false").increment(1);
            render::render_model_switch(&b.handoff, b.message_count, &m.previous, &m.current)
        }
        None => render::render_model_switch_note(&m.previous, &m.current),
    };
    (text, false)
}
