//! The injection decision: at header time whether the body must be read at all (the fast
//! path), and on the whole body whether the request is a switch, which account-bound state
//! goes, and whether a handoff is injected.

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use context_relay_core::extractive::switch_handoff;
use context_relay_core::portable::{self, ForeignSet, Scope, TURN_STATE_HEADER, digest};
use context_relay_core::{ApiShape, HandoffKey, RelayConfig, decode, render, session};
use context_relay_store::Affinity;
use http::{HeaderMap, Uri, header};
use tracing::Instrument;

use super::claim::{Carried, Found, claim_for, give_back, outgrown};
use super::conversation::Conversation;
use super::extractive;
use super::fast::fast;
use super::model::{self, ModelMove};
use super::repair::{Remember, Repair, Sent};
use super::ticket::{Counted, Ticket};
use crate::extensions::{RequestFacts, ResolvedAccount, StoredAffinity};
use crate::metrics;
use crate::relay::{Relay, Shared};

/// What to do with a request on its way to the provider, decided at header time.
#[derive(Debug)]
pub(crate) enum Inject {
    /// The relay has nothing to do with this request (no combo, no account, no API path, or
    /// marked [`SkipRelay`](crate::SkipRelay) or [`SummaryCall`](crate::SummaryCall)): forward
    /// it untouched.
    Pass,
    /// The fast path: the session stays on its account with nothing foreign to remove and no
    /// handoff waits; forward the body untouched. Settle the ticket with the response. With a
    /// repair (an API with account-bound state), keep the body's chunks in its
    /// [`Repair::tee`] as they go out.
    Forward {
        /// Ends with the response.
        ticket: Ticket,
        /// How to send the request again if the provider rejects its account-bound state.
        repair: Option<Box<Repair>>,
    },
    /// Read the whole body (up to [`BodyDecision::limit`] bytes), then
    /// [`decide`](BodyDecision::decide); a body over the limit goes to
    /// [`too_large`](BodyDecision::too_large).
    ReadBody(BodyDecision),
}

impl Relay {
    /// At header time, the injection side: what to do with a request sent to
    /// `facts.account`. `body_len_hint` is the least the body may weigh (its
    /// `content-length`, or 0): a body known to be over the limit is not kept for a repair.
    ///
    /// The fast path reads no body and touches no store: the store's in-memory index says no
    /// handoff waits for the session, and the affinity cache says the session stays on this
    /// account and model ([`RequestFacts::model`]) with nothing foreign to remove. It needs the
    /// session from a header (or [`RequestFacts::session`]); clients that send none have their
    /// body read to derive the session fingerprint.
    pub(crate) fn inject(
        &self,
        uri: &Uri,
        headers: &HeaderMap,
        facts: RequestFacts<'_>,
        body_len_hint: u64,
    ) -> Inject {
        let (Some(combo), Some(account)) = (facts.combo, facts.account) else {
            return Inject::Pass;
        };
        if facts.skip {
            return Inject::Pass;
        }
        let Some(shape) = ApiShape::from_path(uri.path()) else {
            return Inject::Pass;
        };
        let shared = &self.shared;
        // Tenant and header session are memoised (derived in core, interned here).
        let tenant = shared.tenants.tenant(facts.tenant, headers, uri);
        let header_session = shared
            .sessions
            .session(facts.session, headers, &shared.sources);
        let keyless =
            header_session.is_none() && crate::tenant::keyless(facts.tenant, headers, uri);
        let config = shared.configs.for_combo(&combo.0);
        // Model switches are detected only with a serving model, and where they are on.
        let serving_model = facts.model.filter(|_| config.model_switch);
        if !config.account_handoff && serving_model.is_none() {
            // Only model switches are relayed here, and they cannot be told.
            return Inject::Pass;
        }

        // The ids move into the key (no reference counts touched on the fast path), and back
        // out of it for the slow path.
        let (tenant, header_session) = match header_session {
            None => (tenant, None),
            Some(session) => {
                let key = HandoffKey {
                    tenant,
                    session,
                    combo: combo.0.clone(),
                };
                match fast(
                    shared,
                    config,
                    key,
                    shape,
                    account,
                    serving_model,
                    headers,
                    body_len_hint,
                ) {
                    Ok(forward) => return forward,
                    Err(key) => (key.tenant, Some(key.session)),
                }
            }
        };
        Inject::ReadBody(BodyDecision {
            shared: shared.clone(),
            config: shared.configs.for_combo_arc(&combo.0),
            shape,
            combo: combo.0.clone(),
            tenant,
            header_session,
            account: account.clone(),
            model: serving_model.map(|m| m.0.clone()),
            keyless,
            stored: facts.affinity.cloned(),
            compaction: uri.path().ends_with("/compact"),
        })
    }
}

/// The slow path of the injection side: the decision once the whole body is known.
#[derive(Debug)]
pub(crate) struct BodyDecision {
    shared: Arc<Shared>,
    config: Arc<RelayConfig>,
    shape: ApiShape,
    combo: Arc<str>,
    tenant: Arc<str>,
    header_session: Option<Arc<str>>,
    account: ResolvedAccount,
    /// The serving model, when model switches are detected.
    model: Option<Arc<str>>,
    /// No tenant of its own ([`keyless`](crate::tenant::keyless)): a fingerprint keys nothing.
    keyless: bool,
    /// The session's affinity as read for this request before the relay, if it was.
    stored: Option<StoredAffinity>,
    /// A Responses compaction request (`…/responses/compact`): it is scrubbed like any other,
    /// but carries no handoff. Its answer keeps only the user's messages and the account's
    /// own compaction item, so a handoff given to it would reach no turn: the next request
    /// claims it (one a switch builds from the compaction's history is stored for it).
    compaction: bool,
}

/// The affinity of `key`: the one read for this request before the relay when it was read for
/// `key` (one store read fewer), else the store's.
async fn affinity_of(
    shared: &Shared,
    stored: Option<&StoredAffinity>,
    key: &HandoffKey,
) -> Option<Affinity> {
    match stored.and_then(|s| s.of(key)) {
        Some(read) => read,
        None => shared.affinity(key).await,
    }
}

/// The request as it goes out after [`BodyDecision::decide`].
#[derive(Debug)]
pub(crate) struct Decided {
    /// The body to send (the client's bytes when nothing changed); the headers were adjusted
    /// to it (`content-length`, `content-encoding`, `x-codex-turn-state`).
    pub(crate) body: Bytes,
    /// Ends with the response; `None` when the session could not be told.
    pub(crate) ticket: Option<Ticket>,
    /// How to send the request again if the provider rejects its account-bound state.
    pub(crate) repair: Option<Box<Repair>>,
}

impl BodyDecision {
    /// The largest body read for a decision.
    pub(crate) fn limit(&self) -> usize {
        self.config.max_body_bytes
    }

    /// The body was over the limit (or had trailers, or failed while read): it goes out
    /// unchanged. Counted as a skipped rewrite (`too_large`).
    pub(crate) async fn too_large(self) -> Ticket {
        skipped("too_large");
        let mut ticket = Ticket::new(self.shared.clone(), self.account.clone());
        if let Some(session) = self.header_session {
            let key = HandoffKey {
                tenant: self.tenant,
                session,
                combo: self.combo,
            };
            let affinity = affinity_of(&self.shared, self.stored.as_ref(), &key).await;
            let model = self.model.as_deref();
            if let Some(record) = model::to_record(affinity.as_ref(), &self.account, model) {
                ticket.set_record(key, record);
            }
        }
        ticket
    }

    /// Decides on the whole body `raw` (as the client sent it, possibly compressed per
    /// `headers`): claims a handoff written by another account, removes the account-bound
    /// state the serving account would reject, injects the handoff, and edits `headers` to
    /// match the body to send. Never fails: a body it cannot use goes out unchanged (counted in
    /// [`REWRITE_SKIPPED`](crate::metrics::REWRITE_SKIPPED)).
    pub(crate) async fn decide(self, headers: &mut HeaderMap, raw: Bytes) -> Decided {
        let span = tracing::info_span!(
            "context_relay.inject",
            tenant = &*self.tenant,
            combo = context_relay_core::parse::clamp_logged(&self.combo),
            account = %self.account.account(),
        );
        self.decide_in(headers, raw).instrument(span).await
    }

    async fn decide_in(self, headers: &mut HeaderMap, raw: Bytes) -> Decided {
        let Self {
            shared,
            config,
            shape,
            combo,
            tenant,
            header_session,
            account,
            model,
            keyless,
            stored,
            compaction,
        } = self;
        let unchanged = |body, ticket| Decided {
            body,
            ticket,
            repair: None,
        };
        let decoded = match headers.get(header::CONTENT_ENCODING) {
            None => Some(raw.clone()),
            Some(enc) => enc
                .to_str()
                .ok()
                .and_then(|enc| decode::decode(enc, &raw, config.max_body_bytes).ok())
                .map(Bytes::from),
        };
        let session = header_session.clone().or_else(|| {
            let body = decoded.as_deref()?;
            let id = session::identify(
                headers,
                Some(body),
                &shared.sources,
                None,
                Some(tenant.clone()),
            );
            id.session
                .filter(|_| crate::tenant::may_key(id.source.as_ref(), keyless))
        });
        let Some(session) = session else {
            return unchanged(raw, None);
        };
        let session_key = HandoffKey {
            tenant,
            session,
            combo,
        };
        let mut ticket = Ticket::new(shared.clone(), account.clone());
        let now = SystemTime::now();
        let session_affinity = affinity_of(&shared, stored.as_ref(), &session_key).await;
        // Which conversation of the session this is (sub-agents share their parent's header).
        let opening = decoded.as_deref().and_then(session::opening);
        let conversation =
            Conversation::resolve(&shared, session_key, session_affinity, opening, now).await;
        let key = conversation.key.clone();
        let affinity = conversation.affinity.clone();
        let serving = affinity.as_ref().is_some_and(|a| a.serves(&account));
        // Switch: the last account that served this session is another one (relayed only
        // where account switches are).
        let switch = affinity.is_some() && !serving && config.account_handoff;
        // Model switch: the last model that served this session is another one.
        let moved = model::model_move(affinity.as_ref(), model.as_ref());
        // A live handoff written by another account (a model switch reads the freshest handoff
        // instead, and claims none).
        let found = match moved {
            Some(_) => Found::Nothing,
            None if !config.account_handoff || compaction => Found::Nothing,
            None => {
                let same_provider = model.is_some();
                claim_for(
                    &shared,
                    &key,
                    &account,
                    same_provider,
                    &conversation,
                    config.lease,
                )
                .await
            }
        };
        let elsewhere = matches!(found, Found::Elsewhere);
        let mut carried = match found {
            Found::Mine(c) => Some(Carried::Claimed(c)),
            Found::Elsewhere | Found::Nothing => None,
        };
        // The state recorded as foreign at the last switch; where account switches are not
        // relayed, that was a model switch, and it is foreign to every account of the model.
        let foreign = affinity
            .as_ref()
            .filter(|_| serving || !config.account_handoff)
            .and_then(|a| a.foreign_at(now).cloned());
        let scope = if switch || moved.is_some() || (affinity.is_none() && carried.is_some()) {
            // Everything the session carries was minted elsewhere.
            Scope::All
        } else if let Some(set) = &foreign {
            Scope::Foreign(set)
        } else {
            Scope::Nothing
        };
        let turn_state = headers.contains_key(TURN_STATE_HEADER);
        if matches!(scope, Scope::Nothing) && carried.is_none() {
            let remember = Remember {
                key: key.clone(),
                foreign: foreign.clone().unwrap_or_default(),
                ttl: config.ttl,
                affinity: kept_affinity(&conversation, &account, model.as_deref()),
            };
            if let Some(record) = conversation.record(&account, model.as_deref()) {
                ticket.set_record(key, record);
            }
            let repair = decoded.map(|json| {
                Box::new(Repair {
                    shape,
                    slot: config.injection_slot_responses,
                    sent: Sent::Body(json),
                    turn_state,
                    remember: Some(remember),
                })
            });
            return Decided {
                body: raw,
                ticket: Some(ticket),
                repair,
            };
        }
        let Some(decoded) = decoded else {
            skipped("undecodable");
            give_back(&shared, carried).await;
            return unchanged(raw, Some(ticket));
        };
        // A stored handoff the conversation has outgrown is not carried: the switch builds a
        // current one from this request (given back first: a leased one is not replaced).
        let outgrown = switch
            && moved.is_none()
            && carried.as_ref().is_some_and(|c| {
                outgrown(c.record(), shape, &decoded, config.refresh_after_messages)
            });
        if outgrown {
            tracing::info!("the stored handoff is many turns old; building one from the request");
            give_back(&shared, carried.take()).await;
        }
        // A switch never lands with nothing: without a stored handoff, one is built from
        // this request (unless a concurrent request of the conversation carries one).
        if carried.is_none()
            && !elsewhere
            && switch
            && moved.is_none()
            && let Some(previous) = affinity.as_ref()
        {
            carried = extractive::at_switch(
                &shared,
                &config,
                &key,
                shape,
                &decoded,
                previous,
                opening.map(|o| o.digest),
            )
            .await;
            if compaction {
                // Stored for the next turn (built here, from the history the compaction is
                // about to fold away), not carried by the compaction itself.
                give_back(&shared, carried.take()).await;
            }
        }
        if outgrown && carried.is_none() {
            // None could be built or stored: the old handoff is better than none.
            let same_provider = model.is_some();
            let lease = config.lease;
            if let Found::Mine(c) =
                claim_for(&shared, &key, &account, same_provider, &conversation, lease).await
            {
                carried = Some(Carried::Claimed(c));
            }
        }
        let (message, covers_compaction) = match &moved {
            Some(m) => {
                let built = || {
                    switch_handoff(
                        shape,
                        &decoded,
                        config.relay_mode,
                        config.max_messages_for_summary,
                    )
                };
                let (text, covers) = model::message(&shared, &key, m, built).await;
                (Some(text), covers)
            }
            None => match carried.as_ref() {
                Some(c) => (
                    Some(render::render_record(c.record())),
                    c.record().compaction,
                ),
                None => (None, false),
            },
        };
        let rewrite = match portable::rewrite_noting(
            shape,
            &decoded,
            scope,
            message.as_deref(),
            covers_compaction,
            config.injection_slot_responses,
        ) {
            Ok(rewrite) => rewrite,
            Err(e) => {
                skipped("not_applicable");
                tracing::warn!(error = %e, "request not rewritable; passing through");
                give_back(&shared, carried).await;
                return unchanged(raw, Some(ticket));
            }
        };
        let remember = Remember {
            key: key.clone(),
            foreign: foreign_of(&affinity, now),
            ttl: config.ttl,
            affinity: kept_affinity(&conversation, &account, model.as_deref()),
        };
        let mut seen = rewrite.seen;
        let mut scrubbed = !rewrite.removed.is_empty();
        if let Some(state) = headers.get(TURN_STATE_HEADER) {
            let d = digest(state.as_bytes());
            seen.push(d);
            let strip = match scope {
                Scope::All => true,
                Scope::Foreign(set) => set.contains(d),
                Scope::Nothing => false,
            };
            if strip {
                headers.remove(TURN_STATE_HEADER);
                scrubbed = true;
            }
        }
        // Which handoff the request is about: an account switch's or a model switch's.
        ticket.counted = match moved {
            Some(_) => Counted::Model,
            None => Counted::Account(switch),
        };
        for (kind, n) in rewrite.removed.iter() {
            ::metrics::counter!(metrics::SCRUBBED, "kind" => kind).increment(n as u64);
        }
        let injected = rewrite.injected;
        if let Some(e) = &rewrite.inject_error {
            skipped("not_injectable");
            tracing::warn!(error = %e, "handoff not injectable into this body; made portable only");
        }
        log_rewrite(injected, switch, moved.as_ref(), &rewrite.removed);
        ticket.action.model_switch = moved.is_some();
        ticket.action.injected = injected;
        ticket.action.extractive = injected
            && carried
                .as_ref()
                .is_some_and(|c| c.record().kind == context_relay_core::HandoffKind::Extractive);
        ticket.action.scrubbed = scrubbed;
        if matches!(scope, Scope::All) {
            // What this request carried was minted by other accounts: the serving account must
            // never be sent it, for as long as a handoff lives.
            let carried = foreign_of(&affinity, now).merged(&seen);
            let mut to = conversation
                .fresh(&account, model.as_deref())
                .with_foreign(carried, now + config.ttl);
            if let Some(previous) = affinity.as_ref().filter(|a| !a.serves(&account)) {
                to = to.with_previous(previous.account().clone());
            }
            ticket.set_record(key, to);
        } else if let Some(record) = conversation.record(&account, model.as_deref()) {
            ticket.set_record(key, record);
        } else if let (Scope::Foreign(set), true, Some(a)) = (&scope, scrubbed, &affinity)
            && a.foreign_expires_at < now + config.ttl / 2
        {
            // The session still carries state of the accounts before the switch: the record of
            // it lives on while it does (one write per half TTL at most), or the serving account
            // would be sent that state once the record expired (a refusal, and a repair that
            // also drops the account's own state).
            let renewed = a.clone().with_foreign((*set).clone(), now + config.ttl);
            ticket.set_record(key, renewed);
        }
        let body = match rewrite.body {
            // Rewritten bodies are forwarded uncompressed.
            Some(new) => {
                headers.remove(header::CONTENT_ENCODING);
                Bytes::from(new)
            }
            // Nothing account-bound and no handoff: the client's bytes, as sent.
            None => raw,
        };
        super::repair::framed_by_length(headers, body.len());
        // A handoff that could not be injected stays for a later request.
        match carried {
            Some(Carried::Claimed(c)) if injected => ticket.claim = Some(c),
            other => give_back(&shared, other).await,
        }
        let sent = if headers.contains_key(header::CONTENT_ENCODING) {
            Sent::Body(decoded)
        } else {
            Sent::Body(body.clone())
        };
        let repair = Box::new(Repair {
            shape,
            slot: config.injection_slot_responses,
            sent,
            turn_state: headers.contains_key(TURN_STATE_HEADER),
            remember: Some(remember),
        });
        Decided {
            body,
            ticket: Some(ticket),
            repair: Some(repair),
        }
    }
}

/// The affinity a repair records (before the stripped state is added): the one the request
/// records when it completes, else the conversation's own, else a fresh one.
fn kept_affinity(
    conversation: &Conversation,
    account: &ResolvedAccount,
    model: Option<&str>,
) -> Affinity {
    conversation
        .record(account, model)
        .or_else(|| conversation.affinity.clone())
        .unwrap_or_else(|| conversation.fresh(account, model))
}

/// The live foreign digests of the session's previous affinity (kept across further switches).
fn foreign_of(affinity: &Option<Affinity>, now: SystemTime) -> ForeignSet {
    affinity
        .as_ref()
        .and_then(|a| a.foreign_at(now).cloned())
        .unwrap_or_default()
}

fn log_rewrite(
    injected: bool,
    switch: bool,
    moved: Option<&ModelMove>,
    removed: &portable::Removed,
) {
    match moved {
        Some(m) => tracing::info!(
            injected,
            switch,
            from_model = context_relay_core::parse::clamp_logged(&m.previous),
            to_model = context_relay_core::parse::clamp_logged(&m.current),
            removed = ?removed,
            "request rewritten for a model switch"
        ),
        None => tracing::info!(injected, switch, removed = ?removed, "request rewritten"),
    }
}

fn skipped(reason: &'static str) {
    ::metrics::counter!(metrics::REWRITE_SKIPPED, "reason" => reason).increment(1);
}
