//! One attempt of the account resolver: the request it sends (the client's head, the body
//! with the target's model, the account's endpoint) and the label its answer carries.

use context_relay_tower::{FactsExt, ResolvedAccount, ServingModel};
use http::{Extensions, Request};

use super::head::Head;
use super::rotate::InBandQuota;
use crate::chunks::Chunks;
use crate::combo::Target;
use crate::credential::Credential;
use crate::model::{WrittenModel, find_model, replace_model};
use crate::pool::ProviderPool;
use crate::routing::Routing;
use crate::upstream::UpstreamEndpoint;

/// The body for `target`: its model written where ComboService wrote the first target's
/// ([`WrittenModel`]). A request ComboService did not route (the relay's summary call, whose
/// body the relay built and may name its own handoff model) keeps its body on the first target
/// and is searched for `model` on a later one.
pub(super) fn body_for_target(
    body: &Chunks,
    target: &Target,
    written: Option<&WrittenModel>,
    first_model: Option<&str>,
) -> Chunks {
    if let Some(out) = written.and_then(|w| w.retarget(body, &target.model)) {
        return out;
    }
    if first_model == Some(&*target.model) {
        return body.clone();
    }
    // The relay's own body, in one chunk (joined, should it not be).
    let whole = body.to_bytes();
    match find_model(&whole) {
        Ok(field) => {
            replace_model(&whole, &field, &target.model).map_or_else(|| body.clone(), Chunks::from)
        }
        Err(_) => body.clone(),
    }
}

/// The request of an attempt on `pool`'s account `resolved`: the client's `head`, `body`
/// and the account's endpoint.
pub(super) fn attempt_request(
    head: &mut Head,
    body: Chunks,
    pool: &ProviderPool,
    credential: Credential,
    (resolved, in_band): (ResolvedAccount, InBandQuota),
) -> Request<Chunks> {
    let len = body.len();
    let mut req = head.request(body);
    crate::content_length::fix(req.headers_mut(), len as u64);
    Routing::set_endpoint(
        req.extensions_mut(),
        UpstreamEndpoint {
            base_url: pool.base_url().clone(),
            host: pool.host().cloned(),
            credential: Some(credential),
            api: pool.api(),
            max_output_tokens: pool.max_output_tokens(),
            in_band: Some(in_band),
        },
    );
    req.extensions_mut().set_fact(resolved);
    req
}

/// Marks a response with the account and the target that served it (GenerationLayer sends
/// the turn's summary there). The relay layer below already put the same account there (it
/// labels every answer with the attempt's account), and the request's facts handed on to the
/// answer may hold the target: each is then left as it is, not boxed again.
pub(super) fn label(
    extensions: &mut Extensions,
    resolved: ResolvedAccount,
    serving: &ServingModel,
) {
    if extensions.fact::<ResolvedAccount>() != Some(&resolved) {
        extensions.set_fact(resolved);
    }
    if extensions.fact::<ServingModel>() != Some(serving) {
        extensions.set_fact(serving.clone());
    }
}
