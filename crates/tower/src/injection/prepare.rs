//! The slow path of [`Injection`](super::Injection): read the body, decide whether the request
//! is a switch and whether a handoff applies, rewrite, forward.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use context_relay_core::portable::{self, TURN_STATE_HEADER};
use context_relay_core::{ApiShape, HandoffKey, decode, render, session};
use context_relay_store::Claim;
use http::{HeaderValue, Request, Response, header};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tower_service::Service;
use tracing::Instrument;

use super::body::{RequestBody, release};
use super::future::After;
use super::shared::Shared;
use crate::extensions::ResolvedAccount;
use crate::metrics;

pub(crate) struct Prepare<S, B> {
    pub(crate) shared: Arc<Shared>,
    pub(crate) inner: S,
    pub(crate) request: Request<B>,
    pub(crate) shape: ApiShape,
    pub(crate) combo: Arc<str>,
    pub(crate) tenant: Arc<str>,
    pub(crate) header_session: Option<Arc<str>>,
    pub(crate) account: ResolvedAccount,
}

/// The body as read: whole (within the limit) or given up on.
enum Read<B> {
    Whole(Bytes),
    Partial(RequestBody<B>),
}

pub(crate) async fn prepare<S, B, ResBody>(
    p: Prepare<S, B>,
) -> (Result<Response<ResBody>, S::Error>, Option<After>)
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
    B: Body<Data = Bytes>,
{
    let span = tracing::info_span!(
        "context_relay.inject",
        tenant = %p.tenant,
        combo = %p.combo,
        account = %p.account.account,
    );
    let Prepare {
        shared,
        mut inner,
        request,
        shape,
        combo,
        tenant,
        header_session,
        account,
    } = p;
    let (mut parts, body) = request.into_parts();
    let config = shared.configs.for_combo_arc(&combo);

    let decision = async {
        let raw = match read_body(body, config.max_body_bytes).await {
            Read::Whole(raw) => raw,
            Read::Partial(body) => {
                skipped("too_large");
                let after = header_session.map(|s| after(&shared, &tenant, s, &account, true));
                return (body, after);
            }
        };
        let decoded = match parts.headers.get(header::CONTENT_ENCODING) {
            None => Some(raw.clone()),
            Some(enc) => enc
                .to_str()
                .ok()
                .and_then(|enc| decode::decode(enc, &raw, config.max_body_bytes).ok())
                .map(Bytes::from),
        };
        let session = header_session.clone().or_else(|| {
            let body = decoded.as_ref()?;
            session::session_id(&parts.headers, Some(body), &shared.sources).map(|m| Arc::from(m.id))
        });
        let Some(session) = session else {
            return (RequestBody::full(raw), None);
        };
        let key = HandoffKey {
            tenant: tenant.clone(),
            session: session.clone(),
            combo: combo.clone(),
        };

        // Switch: the last account that served this session is another one.
        let affinity = match shared.store.cached_affinity(&tenant, &session) {
            Some(a) => a,
            None => match shared.store.affinity(&tenant, &session).await {
                Ok(a) => a,
                Err(e) => {
                    metrics::store_error("affinity", &e);
                    None
                }
            },
        };
        let same = affinity
            .as_ref()
            .is_some_and(|a| a.provider == account.provider && a.account == account.account);
        let mut switch = affinity.is_some() && !same;

        // A live handoff written by another account.
        let claim = claim_for(&shared, &key, &account, config.lease).await;
        if claim.is_some() {
            switch = true;
        }
        let mut after = after(&shared, &tenant, session, &account, !same);
        if !switch {
            return (RequestBody::full(raw), Some(after));
        }
        let Some(decoded) = decoded else {
            skipped("undecodable");
            if let Some(c) = claim {
                release(&shared, c);
            }
            return (RequestBody::full(raw), Some(after));
        };
        let message = claim.as_ref().map(|c| render::render_record(&c.record));
        match portable::rewrite_for_switch(
            shape,
            &decoded,
            message.as_deref(),
            config.injection_slot_responses,
        ) {
            Ok(rewrite) => {
                ::metrics::counter!(metrics::SWITCHES).increment(1);
                for (kind, n) in rewrite.removed.iter() {
                    ::metrics::counter!(metrics::SCRUBBED, "kind" => kind).increment(n as u64);
                }
                let injected = rewrite.injected;
                if injected {
                    ::metrics::counter!(metrics::INJECTED).increment(1);
                }
                if let Some(e) = &rewrite.inject_error {
                    skipped("not_injectable");
                    tracing::warn!(error = %e, "handoff not injectable into this body; made portable only");
                }
                tracing::info!(injected, removed = ?rewrite.removed, "request made portable");
                parts.headers.remove(TURN_STATE_HEADER);
                let body = match rewrite.body {
                    // Rewritten bodies are forwarded uncompressed (DESIGN §7).
                    Some(new) => {
                        parts.headers.remove(header::CONTENT_ENCODING);
                        Bytes::from(new)
                    }
                    // Nothing account-bound and no handoff: the client's bytes, as sent.
                    None => raw,
                };
                parts.headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
                // A handoff that could not be injected stays for a later request.
                match claim {
                    Some(c) if injected => after.claim = Some(c),
                    Some(c) => release(&shared, c),
                    None => {}
                }
                (RequestBody::full(body), Some(after))
            }
            Err(e) => {
                skipped("not_applicable");
                tracing::warn!(error = %e, "request not rewritable; passing through");
                if let Some(c) = claim {
                    release(&shared, c);
                }
                (RequestBody::full(raw), Some(after))
            }
        }
    }
    .instrument(span)
    .await;

    let (body, after) = decision;
    let request = Request::from_parts(parts, body);
    // `inner` was polled ready by the caller (clone-and-swap in `call`).
    let result = inner.call(request).await;
    (result, after)
}

fn after(
    shared: &Arc<Shared>,
    tenant: &Arc<str>,
    session: Arc<str>,
    account: &ResolvedAccount,
    record_affinity: bool,
) -> After {
    After {
        shared: shared.clone(),
        tenant: tenant.clone(),
        session: Some(session),
        account: account.clone(),
        record_affinity,
        claim: None,
    }
}

/// Claims the key's handoff when one is live and was written by another account.
async fn claim_for(
    shared: &Shared,
    key: &HandoffKey,
    account: &ResolvedAccount,
    lease: std::time::Duration,
) -> Option<Claim> {
    if !shared.store.may_contain(key) {
        return None;
    }
    // Read first: while the session stays on the account that wrote the handoff (between the
    // threshold and the rotation), a claim/release pair per request would be two writes.
    match shared.store.get(key).await {
        Ok(Some(record)) if !written_by(&record, account) => {}
        Ok(_) => return None,
        Err(e) => {
            metrics::store_error("get", &e);
            return None;
        }
    }
    match shared.store.claim(key, lease).await {
        Ok(Some(claim)) if !written_by(&claim.record, account) => Some(claim),
        Ok(Some(claim)) => {
            release(shared, claim);
            None
        }
        // Leased by a concurrent request: it injects, this one does not.
        Ok(None) => None,
        Err(e) => {
            metrics::store_error("claim", &e);
            None
        }
    }
}

fn written_by(record: &context_relay_core::HandoffRecord, account: &ResolvedAccount) -> bool {
    record.from_account == *account.account && record.from_provider == *account.provider
}

/// Reads the body whole when it fits in `limit` and has no trailers; otherwise gives back a
/// body that replays what was read, then the rest.
async fn read_body<B>(body: B, limit: usize) -> Read<B>
where
    B: Body<Data = Bytes>,
{
    // Boxed so that any body (not only `Unpin` ones) can be read here and replayed later.
    let mut body = Box::pin(body);
    if body.size_hint().lower() > limit as u64 {
        return Read::Partial(RequestBody::replay(VecDeque::new(), body, false));
    }
    let mut frames: VecDeque<Frame<Bytes>> = VecDeque::new();
    let mut len = 0usize;
    loop {
        match body.frame().await {
            None => break,
            Some(Ok(frame)) => {
                let give_up = match frame.data_ref() {
                    Some(d) => {
                        len += d.len();
                        len > limit
                    }
                    None => true, // trailers: not ours to rewrite around
                };
                frames.push_back(frame);
                if give_up {
                    return Read::Partial(RequestBody::replay(frames, body, false));
                }
            }
            Some(Err(_)) => {
                // The client's body failed; forward what was read and let the inner service see
                // the failure when it polls the rest.
                return Read::Partial(RequestBody::replay(frames, body, false));
            }
        }
    }
    Read::Whole(concat(frames, len))
}

fn concat(frames: VecDeque<Frame<Bytes>>, len: usize) -> Bytes {
    let mut datas = frames.into_iter().filter_map(|f| f.into_data().ok());
    match (datas.next(), datas.next()) {
        (None, _) => Bytes::new(),
        (Some(one), None) => one,
        (Some(a), Some(b)) => {
            let mut all = BytesMut::with_capacity(len);
            all.extend_from_slice(&a);
            all.extend_from_slice(&b);
            for d in datas {
                all.extend_from_slice(&d);
            }
            all.freeze()
        }
    }
}

fn skipped(reason: &'static str) {
    ::metrics::counter!(metrics::REWRITE_SKIPPED, "reason" => reason).increment(1);
}
