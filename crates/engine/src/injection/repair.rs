//! Repair: when the provider rejects account-bound state the request carried (encrypted
//! content it cannot verify, an unknown previous response, an invalid thinking signature), the
//! request is sent once more to the same account with all account-bound state removed.
//!
//! The rejection comes as a `400` whose body names the state, or, for a Responses stream, as a
//! failure event before any output: such a stream's opening events are held back until the
//! first output event (at most [`HOLD_LIMIT`] bytes, at most [`HOLD_TIME`] in all), so that
//! the client never sees the failed attempt. Any other error is passed on untouched.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use context_relay_core::config::InjectionSlot;
use context_relay_core::ending::{EndDetector, Ending};
use context_relay_core::portable::{self, ForeignSet, Scope, TURN_STATE_HEADER};
use context_relay_core::repair::{self, ERROR_BODY_LIMIT, RepairKind};
use context_relay_core::{ApiShape, HandoffKey, decode};
use context_relay_store::Affinity;
use http::{HeaderMap, HeaderValue, StatusCode, header};

use super::tee::Tee;
use super::ticket::Ticket;
use crate::metrics;

/// Most stream bytes held back while waiting for the first output event; past this the stream
/// is passed on as it is.
pub const HOLD_LIMIT: usize = 64 * 1024;
/// Longest a stream's opening is held back, in all (keep-alive comments do not extend it): a
/// provider that goes quiet after `response.created`, or only sends pings while the model
/// thinks, gets its stream passed on rather than the client's response head delayed.
pub const HOLD_TIME: Duration = Duration::from_secs(10);

/// What a repair needs of a request: the body that went out, and where to remember that the
/// state it strips is foreign to the serving account.
#[derive(Debug)]
pub(crate) struct Repair {
    pub(crate) shape: ApiShape,
    pub(crate) slot: InjectionSlot,
    pub(crate) sent: Sent,
    pub(crate) remember: Option<Remember>,
    /// The request carried an `x-codex-turn-state` header.
    pub(crate) turn_state: bool,
}

/// The session a repair belongs to: the state it strips is recorded as foreign to the serving
/// account, so that the next turns are scrubbed instead of rejected again.
#[derive(Debug)]
pub(crate) struct Remember {
    pub(crate) key: HandoffKey,
    /// The live foreign digests of the session's affinity.
    pub(crate) foreign: ForeignSet,
    /// How long the record is kept (the handoff TTL).
    pub(crate) ttl: Duration,
    /// The affinity recorded when the response completes, before the stripped state is
    /// added to it: the serving account, its model and the conversation's opening.
    pub(crate) affinity: Affinity,
}

/// The body that went out.
#[derive(Debug)]
pub(crate) enum Sent {
    /// Read (and possibly rewritten) by the relay: JSON, not compressed.
    Body(Bytes),
    /// Passed through, kept as it went out, possibly compressed with `encoding`.
    Tee {
        tee: Arc<Tee>,
        encoding: Option<HeaderValue>,
        limit: usize,
    },
}

impl Sent {
    /// Whether the body that went out may carry account-bound state: without any, a rejection
    /// cannot be repaired, and a stream need not be held back.
    fn may_be_bound(&self) -> bool {
        match self {
            Sent::Body(b) => portable::may_carry_bound_state(b),
            // Compressed: cannot tell without decoding; assume it may.
            Sent::Tee {
                encoding: Some(_), ..
            } => true,
            Sent::Tee { tee, .. } => tee.may_be_bound(),
        }
    }

    /// The JSON that went out, when all of it is known.
    fn json(self) -> Option<Bytes> {
        match self {
            Sent::Body(b) => Some(b),
            Sent::Tee {
                tee,
                encoding,
                limit,
            } => {
                let raw = tee.whole()?;
                match encoding {
                    None => Some(raw),
                    Some(enc) => decode::decode(enc.to_str().ok()?, &raw, limit)
                        .ok()
                        .map(Bytes::from),
                }
            }
        }
    }
}

impl Repair {
    /// Where to keep the chunks of a body forwarded untouched (the fast path); `None` when
    /// the relay read the body itself.
    pub(crate) fn tee(&self) -> Option<&Arc<Tee>> {
        match &self.sent {
            Sent::Tee { tee, .. } => Some(tee),
            Sent::Body(_) => None,
        }
    }

    /// Whether a repair could change anything: the request may carry account-bound state.
    pub(crate) fn may_repair(&self) -> bool {
        self.turn_state || self.sent.may_be_bound()
    }

    /// Whether a response must be looked at (with a [`Look`]) before it is handed on: a 400
    /// that may blame account-bound state, or a Responses stream whose opening may be
    /// followed by such a failure, when the request may carry account-bound state at all.
    pub(crate) fn wants_look(&self, status: StatusCode, headers: &HeaderMap) -> bool {
        (status == StatusCode::BAD_REQUEST || holdable(self.shape, status, headers))
            && self.may_repair()
    }

    /// The provider blamed account-bound state (`kind`): the body to send once more, with all
    /// account-bound state removed (send it with [`resend_headers`]). The ticket is marked
    /// repaired and will record the stripped state as foreign to the serving account. `None`
    /// when there is nothing to remove (a retry would be rejected the same way) or the body
    /// is unknown: pass the rejection on.
    pub(crate) fn resend_body(
        self,
        kind: RepairKind,
        status: StatusCode,
        ticket: Option<&mut Ticket>,
    ) -> Option<Bytes> {
        let (body, seen) = stripped(self.sent.json(), self.shape, self.slot)?;
        ::metrics::counter!(metrics::REPAIRS, "kind" => kind.as_str()).increment(1);
        tracing::warn!(
            %kind,
            status = status.as_u16(),
            "provider rejected account-bound state; sending once more without it"
        );
        if let Some(t) = ticket {
            t.action.repaired = true;
            if let Some(r) = self.remember {
                // What the rejected request carried is foreign to this account from now on:
                // the next turns are scrubbed instead of rejected again.
                let (base, foreign) = match t.record.take() {
                    Some(planned) => {
                        let (_, planned) = *planned;
                        let foreign = (*planned.foreign).clone();
                        (planned, foreign)
                    }
                    None => (r.affinity, r.foreign),
                };
                let affinity = base.with_foreign(foreign.merged(&seen), SystemTime::now() + r.ttl);
                t.set_record(r.key, affinity);
            }
        }
        Some(body)
    }
}

/// The headers of a repaired request: its stripped body goes uncompressed, without the
/// account-bound `x-codex-turn-state`, framed by its own `content-length`.
pub fn resend_headers(headers: &mut HeaderMap, len: usize) {
    headers.remove(header::CONTENT_ENCODING);
    headers.remove(TURN_STATE_HEADER);
    framed_by_length(headers, len);
}

/// Frames a body the relay sends whole by its `len`: `content-length` set, and the client's
/// `transfer-encoding` (a chunked upload) removed, since a message may not carry both (RFC
/// 9112 §6.2; a head with both is how requests are smuggled past a proxy).
pub(crate) fn framed_by_length(headers: &mut HeaderMap, len: usize) {
    headers.remove(header::TRANSFER_ENCODING);
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
}

/// Whether a response is a Responses stream whose opening may be held back.
fn holdable(shape: ApiShape, status: StatusCode, headers: &HeaderMap) -> bool {
    shape == ApiShape::Responses
        && status.is_success()
        && headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// The body with all account-bound state removed, and the digests of what it carried; `None`
/// when there was none to remove or the body is unknown.
fn stripped(
    json: Option<Bytes>,
    shape: ApiShape,
    slot: InjectionSlot,
) -> Option<(Bytes, Vec<u64>)> {
    let json = json?;
    match portable::rewrite(shape, &json, Scope::All, None, slot) {
        Ok(r) => r.body.map(|b| (Bytes::from(b), r.seen)),
        Err(e) => {
            tracing::warn!(error = %e, "rejected body cannot be stripped; passing the error on");
            None
        }
    }
}

/// Reading a response ahead to tell whether it blames account-bound state: a 400 body
/// (bounded) is classified; a Responses stream's opening events are held until the first
/// output event, the end, or a failure.
///
/// The adapter reads chunks while [`settled`](Self::settled) and [`full`](Self::full) are
/// false and the body goes on, [`push`](Self::push)es each, waits for the next chunk no later
/// than the [`deadline`](Self::deadline) (one deadline for the whole hold, [`HOLD_TIME`] after
/// the look began), then [`finish`](Self::finish)es.
#[derive(Debug)]
pub(crate) struct Look {
    hold: bool,
    deadline: tokio::time::Instant,
    detector: EndDetector,
    error_body: Vec<u8>,
    held: usize,
}

impl Look {
    /// A look at a response of `repair`'s request.
    pub(crate) fn new(repair: &Repair, status: StatusCode, headers: &HeaderMap) -> Self {
        Self {
            hold: holdable(repair.shape, status, headers),
            deadline: tokio::time::Instant::now() + HOLD_TIME,
            detector: EndDetector::new(),
            error_body: Vec::new(),
            held: 0,
        }
    }
    /// When a held stream's opening stops being held, whatever arrives meanwhile: the adapter
    /// stops reading ahead at this instant and passes on what it holds. `None` when it reads
    /// an error body (bounded by size instead).
    pub(crate) fn deadline(&self) -> Option<tokio::time::Instant> {
        self.hold.then_some(self.deadline)
    }

    /// A held stream got its first output event or its end: the rest is not held.
    pub(crate) fn settled(&self) -> bool {
        self.hold
            && (self.detector.output_started() || self.detector.ending() != Ending::Unfinished)
    }

    /// Enough was read ahead: the rest is passed on as it comes.
    pub(crate) fn full(&self) -> bool {
        self.held > HOLD_LIMIT.max(ERROR_BODY_LIMIT)
    }

    /// A chunk read ahead.
    pub(crate) fn push(&mut self, data: &[u8]) {
        self.held += data.len();
        if self.hold {
            self.detector.push(data);
        } else if self.error_body.len() < ERROR_BODY_LIMIT {
            self.error_body.extend_from_slice(data);
        }
    }

    /// The reading ahead stopped (`ended`: at the end of the body): what the response blames,
    /// and the end detector that saw the held chunks (to keep watching the rest with).
    pub(crate) fn finish(self, ended: bool) -> (EndDetector, Option<RepairKind>) {
        let Self {
            hold,
            mut detector,
            error_body,
            ..
        } = self;
        let blames = if hold {
            if ended {
                detector.finish();
            }
            (detector.ending() == Ending::Failed && !detector.output_started())
                .then(|| detector.failure().and_then(repair::classify))
                .flatten()
        } else {
            repair::classify(&error_body)
        };
        (detector, blames)
    }
}
