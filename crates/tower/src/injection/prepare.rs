//! The slow path of [`Injection`](super::Injection): read the body, decide whether the request
//! is a switch, which account-bound state goes and whether a handoff applies, rewrite, forward.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use context_relay_core::portable::{self, ForeignSet, Scope, TURN_STATE_HEADER, digest};
use context_relay_core::{ApiShape, HandoffKey, decode, render, session};
use context_relay_store::{Affinity, Claim};
use http::{HeaderValue, Request, Response, header};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tower_service::Service;
use tracing::Instrument;

use super::after::{After, release};
use super::body::RequestBody;
use super::retry::{Remember, Retry, Sent, resend};
use super::shared::Shared;
use crate::extensions::ResolvedAccount;
use crate::metrics;

pub(crate) struct Prepare<S, B> {
    pub(crate) shared: Arc<Shared>,
    pub(crate) inner: S,
    /// A second clone of the inner service, for a repair.
    pub(crate) spare: S,
    pub(crate) request: Request<B>,
    pub(crate) shape: ApiShape,
    pub(crate) combo: Arc<str>,
    pub(crate) tenant: Arc<str>,
    pub(crate) header_session: Option<Arc<str>>,
    pub(crate) account: ResolvedAccount,
}

/// The body as read: whole (within the limit) or given up on.
enum Read<B: Body> {
    Whole(Bytes),
    Partial(RequestBody<B>),
}

/// The inner result, what to do at its end, and how to send the request again.
pub(crate) type Prepared<ResBody, E> = (
    Result<Response<ResBody>, E>,
    Option<After>,
    Option<Retry<ResBody, E>>,
);

pub(crate) async fn prepare<S, B, ResBody>(p: Prepare<S, B>) -> Prepared<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Send,
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
        spare,
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
                let mut after = After::new(shared.clone(), account.clone());
                if let Some(session) = header_session {
                    let key = HandoffKey {
                        tenant: tenant.clone(),
                        session,
                        combo: combo.clone(),
                    };
                    after.record = record_if_new(&shared, &key, &account).await;
                }
                return (body, Some(after), None);
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
            session::session_id(&parts.headers, Some(body), &shared.sources)
                .map(|m| Arc::from(m.id))
        });
        let Some(session) = session else {
            return (RequestBody::full(raw), None, None);
        };
        let key = HandoffKey {
            tenant: tenant.clone(),
            session,
            combo: combo.clone(),
        };
        let mut after = After::new(shared.clone(), account.clone());
        let now = SystemTime::now();
        let affinity = affinity_of(&shared, &key).await;
        let serving = affinity
            .as_ref()
            .is_some_and(|a| a.is(&account.provider, &account.account));
        // Switch: the last account that served this session is another one.
        let switch = affinity.is_some() && !serving;
        // A live handoff written by another account.
        let claim = claim_for(&shared, &key, &account, config.lease).await;
        let foreign = affinity
            .as_ref()
            .filter(|_| serving)
            .and_then(|a| a.foreign_at(now).cloned());
        let scope = if switch || (affinity.is_none() && claim.is_some()) {
            // Everything the session carries was minted elsewhere.
            Scope::All
        } else if let Some(set) = &foreign {
            Scope::Foreign(set)
        } else {
            Scope::Nothing
        };
        if matches!(scope, Scope::Nothing) && claim.is_none() {
            let remember = Remember {
                key: key.clone(),
                foreign: foreign.clone().unwrap_or_default(),
                ttl: config.ttl,
            };
            if affinity.is_none() {
                after.record = Some((
                    key,
                    Affinity::new(account.provider.clone(), account.account.clone()),
                ));
            }
            let retry = decoded.map(|json| Retry {
                shape,
                slot: config.injection_slot_responses,
                sent: Sent::Body(json),
                turn_state: parts.headers.contains_key(TURN_STATE_HEADER),
                resend: resend(spare, &parts),
                remember: Some(remember),
            });
            return (RequestBody::full(raw), Some(after), retry);
        }
        let Some(decoded) = decoded else {
            skipped("undecodable");
            if let Some(c) = claim {
                release(&shared, &c).await;
            }
            return (RequestBody::full(raw), Some(after), None);
        };
        let message = claim.as_ref().map(|c| render::render_record(&c.record));
        let rewrite = match portable::rewrite(
            shape,
            &decoded,
            scope,
            message.as_deref(),
            config.injection_slot_responses,
        ) {
            Ok(rewrite) => rewrite,
            Err(e) => {
                skipped("not_applicable");
                tracing::warn!(error = %e, "request not rewritable; passing through");
                if let Some(c) = claim {
                    release(&shared, &c).await;
                }
                return (RequestBody::full(raw), Some(after), None);
            }
        };
        let remember = Remember {
            key: key.clone(),
            foreign: foreign_of(&affinity, now),
            ttl: config.ttl,
        };
        let mut seen = rewrite.seen;
        let mut scrubbed = !rewrite.removed.is_empty();
        if let Some(state) = parts.headers.get(TURN_STATE_HEADER) {
            let d = digest(state.as_bytes());
            seen.push(d);
            let strip = match scope {
                Scope::All => true,
                Scope::Foreign(set) => set.contains(d),
                Scope::Nothing => false,
            };
            if strip {
                parts.headers.remove(TURN_STATE_HEADER);
                scrubbed = true;
            }
        }
        if switch {
            ::metrics::counter!(metrics::SWITCHES).increment(1);
        }
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
        tracing::info!(injected, switch, removed = ?rewrite.removed, "request rewritten");
        after.action.injected = injected;
        after.action.scrubbed = scrubbed;
        if matches!(scope, Scope::All) {
            // What this request carried was minted by other accounts: the serving account must
            // never be sent it, for as long as a handoff lives.
            let carried = foreign_of(&affinity, now).merged(&seen);
            after.record = Some((
                key,
                Affinity::new(account.provider.clone(), account.account.clone())
                    .with_foreign(carried, now + config.ttl),
            ));
        }
        let body = match rewrite.body {
            // Rewritten bodies are forwarded uncompressed.
            Some(new) => {
                parts.headers.remove(header::CONTENT_ENCODING);
                Bytes::from(new)
            }
            // Nothing account-bound and no handoff: the client's bytes, as sent.
            None => raw,
        };
        parts
            .headers
            .insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        // A handoff that could not be injected stays for a later request.
        match claim {
            Some(c) if injected => after.claim = Some(c),
            Some(c) => release(&shared, &c).await,
            None => {}
        }
        let sent = if parts.headers.contains_key(header::CONTENT_ENCODING) {
            Sent::Body(decoded)
        } else {
            Sent::Body(body.clone())
        };
        let retry = Retry {
            shape,
            slot: config.injection_slot_responses,
            sent,
            turn_state: parts.headers.contains_key(TURN_STATE_HEADER),
            resend: resend(spare, &parts),
            remember: Some(remember),
        };
        (RequestBody::full(body), Some(after), Some(retry))
    }
    .instrument(span)
    .await;

    let (body, after, retry) = decision;
    let request = Request::from_parts(parts, body);
    // `inner` was polled ready by the caller (clone-and-swap in `call`).
    let result = inner.call(request).await;
    (result, after, retry)
}

/// The live foreign digests of the session's previous affinity (kept across further switches).
fn foreign_of(affinity: &Option<Affinity>, now: SystemTime) -> ForeignSet {
    affinity
        .as_ref()
        .and_then(|a| a.foreign_at(now).cloned())
        .unwrap_or_default()
}

/// The session's affinity, from the cache when it knows, else from the store.
async fn affinity_of(shared: &Shared, key: &HandoffKey) -> Option<Affinity> {
    match shared.store.cached_affinity(key) {
        Some(a) => a,
        None => match shared.store.affinity(key).await {
            Ok(a) => a,
            Err(e) => {
                metrics::store_error("affinity", &e);
                None
            }
        },
    }
}

/// The affinity to record for a session seen for the first time.
async fn record_if_new(
    shared: &Shared,
    key: &HandoffKey,
    account: &ResolvedAccount,
) -> Option<(HandoffKey, Affinity)> {
    affinity_of(shared, key).await.is_none().then(|| {
        (
            key.clone(),
            Affinity::new(account.provider.clone(), account.account.clone()),
        )
    })
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
            release(shared, &claim).await;
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
        return Read::Partial(RequestBody::replay(VecDeque::new(), body));
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
                    return Read::Partial(RequestBody::replay(frames, body));
                }
            }
            Some(Err(e)) => {
                // The client's body failed: forward what was read, then the failure itself (the
                // body may well end cleanly if polled again).
                return Read::Partial(RequestBody::replay_failed(frames, body, e));
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
