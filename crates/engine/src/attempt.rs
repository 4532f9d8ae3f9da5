//! One upstream attempt of a request, phase by phase: the injection side's lifecycle.
//!
//! A proxy sees an attempt in this order, and calls the [`Attempt`] at each step:
//!
//! | proxy phase | call | the attempt |
//! |---|---|---|
//! | request head | [`Relay::attempt`], [`body_plan`](Attempt::body_plan) | decides whether the body must be held (a switch, or no session header) |
//! | request body | [`request_body`](Attempt::request_body) or [`body_too_large`](Attempt::body_too_large) | claims, scrubs, injects; keeps what a repair needs |
//! | no response | [`failed`](Attempt::failed) | gives the claim back before the error reaches the client |
//! | response head | [`response_head`](Attempt::response_head) | gives the claim back on an error status (before the client sees it); asks for a look ahead only when a repair may follow |
//! | looked ahead | [`look_chunk`](Attempt::look_chunk), [`looked`](Attempt::looked) | tells whether the provider rejected account-bound state: the body to send again |
//! | response body | [`response_chunk`](Attempt::response_chunk), [`end`](Attempt::end) | completes the handoff and moves the affinity only when the API's success event was handed on (an error or a drop after it changes nothing: the client has the turn); gives the claim back as soon as an in-band failure is seen |
//!
//! Dropping an attempt at any other point counts as a cut: a claimed handoff goes back (in
//! the background) for the next attempt. These ordering rules live here only; an adapter
//! translates its framework's phases into these calls and moves the bytes.

use std::sync::Arc;

use bytes::Bytes;
use context_relay_core::ending::{EndDetector, Ending};
use context_relay_core::repair::RepairKind;
use http::{HeaderMap, StatusCode, Uri};

use crate::action::RelayAction;
use crate::extensions::{RequestFacts, ResolvedAccount};
use crate::facts::FactsExt;
use crate::injection::{BodyDecision, Inject, Look, Repair, Tee, Ticket};
use crate::relay::Relay;

/// What to do with the request body.
#[derive(Debug, Clone)]
pub enum BodyPlan {
    /// Forward the body as it comes. With `keep`, pass every chunk to it as it goes out
    /// ([`Tee::keep`], then [`Tee::end`]): a rejected request can then be sent again.
    Stream {
        /// Where the chunks are kept for a repair.
        keep: Option<Arc<Tee>>,
    },
    /// Hold the whole body, at most `limit` bytes, then give it to
    /// [`Attempt::request_body`]; a longer body (or one with trailers, or that failed) goes
    /// out as it came after [`Attempt::body_too_large`].
    Hold {
        /// The most bytes held.
        limit: usize,
    },
}

/// What to do with the response head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponsePlan {
    /// Hand the response on; push its chunks to [`Attempt::response_chunk`] and call
    /// [`Attempt::end`] at its end.
    Forward,
    /// Read the body ahead before handing anything on: push chunks to
    /// [`Attempt::look_chunk`] while it asks for more, no later than `deadline`, then call
    /// [`Attempt::looked`].
    LookAhead {
        /// When to stop reading ahead, whatever arrives (a held stream opening); `None` when
        /// only the size bounds the look (an error body).
        deadline: Option<tokio::time::Instant>,
    },
}

/// The outcome of a look ahead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Looked {
    /// Hand on what was read, then the rest (chunks after those read to
    /// [`Attempt::response_chunk`]).
    Forward,
    /// The provider rejected account-bound state the request carried: drop this response and
    /// send this body once more to the same account (headers adjusted with
    /// [`resend_headers`](crate::injection::resend_headers)); its response starts again at
    /// [`Attempt::response_head`].
    Resend(Bytes),
}

/// The injection side of one upstream attempt. See the [module docs](self).
#[derive(Debug)]
pub struct Attempt {
    /// The request's account, put on the response when the relay keeps no ticket.
    account: Option<ResolvedAccount>,
    ticket: Option<Ticket>,
    repair: Option<Box<Repair>>,
    /// The body decision, while the body is held (boxed: the slow path only).
    decision: Option<Box<BodyDecision>>,
    /// The look at a response: ahead of the client, or aside when it cannot be sent again.
    look: Option<Box<Look>>,
    /// The end of the response body, watched for the ticket.
    end: Option<EndDetector>,
    /// The adapter cannot send a request again: a rejection is only logged.
    no_resend: bool,
}

impl Relay {
    /// The request head of an attempt sent to `facts.account`: the injection side's phase
    /// object. `body_len_hint` is the least the body may weigh (its `content-length`, or 0).
    ///
    /// A request the relay has nothing to do with gets an attempt that only labels its
    /// response with the account.
    pub fn attempt(
        &self,
        uri: &Uri,
        headers: &HeaderMap,
        facts: RequestFacts<'_>,
        body_len_hint: u64,
    ) -> Attempt {
        let mut attempt = Attempt::pass(facts.account.cloned());
        match self.inject(uri, headers, facts, body_len_hint) {
            Inject::Pass => {}
            Inject::Forward { ticket, repair } => {
                attempt.ticket = Some(ticket);
                attempt.repair = repair;
            }
            Inject::ReadBody(decision) => attempt.decision = Some(Box::new(decision)),
        }
        attempt
    }
}

impl Attempt {
    /// An attempt the relay leaves alone, labelled with `account`.
    pub fn pass(account: Option<ResolvedAccount>) -> Self {
        Self {
            account,
            ticket: None,
            repair: None,
            decision: None,
            look: None,
            end: None,
            no_resend: false,
        }
    }

    /// The adapter cannot send the request again (a proxy that streams the body upstream as
    /// it comes): the response is never read ahead; a rejection of account-bound state is
    /// logged at the end of its body and handed on.
    pub fn without_resend(mut self) -> Self {
        self.no_resend = true;
        self
    }

    /// What to do with the request body.
    pub fn body_plan(&self) -> BodyPlan {
        match &self.decision {
            Some(d) => BodyPlan::Hold { limit: d.limit() },
            None => BodyPlan::Stream {
                keep: self
                    .repair
                    .as_ref()
                    .filter(|_| !self.no_resend)
                    .and_then(|r| r.tee().cloned()),
            },
        }
    }

    /// Whether the relay acts on this request at all: it holds the body, or settles an
    /// outcome with the response.
    pub fn is_relayed(&self) -> bool {
        self.decision.is_some() || self.ticket.is_some()
    }

    /// Whether the request may have to be sent again ([`Looked::Resend`]): keep what that
    /// needs (its head). A body forwarded as it comes may; a body the relay read may when it
    /// carries account-bound state.
    pub fn may_resend(&self) -> bool {
        !self.no_resend
            && self
                .repair
                .as_ref()
                .is_some_and(|r| r.tee().is_some() || r.may_repair())
    }

    /// Whether the relay reads this attempt's answer (whether it completed, what a refusal
    /// blames), or may once the held body is decided: the answer must then come uncompressed
    /// (an adapter whose client forwards the client's `accept-encoding` and does not decode
    /// answers asks for `identity` upstream; the pingora example does).
    pub fn reads_answer(&self) -> bool {
        self.ticket.is_some() || self.repair.is_some() || self.decision.is_some()
    }

    /// The whole held body (as the client sent it, possibly compressed per `headers`): the
    /// body to send, `headers` adjusted to it. Never fails: a body the relay cannot use goes
    /// out unchanged.
    pub async fn request_body(&mut self, headers: &mut HeaderMap, whole: Bytes) -> Bytes {
        let Some(decision) = self.decision.take() else {
            return whole;
        };
        let decided = decision.decide(headers, whole).await;
        self.ticket = decided.ticket;
        self.repair = decided.repair;
        decided.body
    }

    /// The held body was over the limit, had trailers or failed: it goes out as it came.
    pub async fn body_too_large(&mut self) {
        if let Some(decision) = self.decision.take() {
            self.ticket = Some(decision.too_large().await);
        }
    }

    /// No response came (the provider could not be reached, the inner service failed): the
    /// claim goes back before the error reaches the client.
    pub async fn failed(&mut self) {
        if let Some(t) = self.ticket.as_mut() {
            t.release_now().await;
        }
        self.ticket = None;
        self.repair = None;
    }

    /// The response head: a claimed handoff goes back before this returns when the status is
    /// an error (so that the client's retry on another account can claim it at once); the
    /// body is read ahead only when a repair may follow.
    pub async fn response_head(&mut self, status: StatusCode, headers: &HeaderMap) -> ResponsePlan {
        if let Some(plan) = self.look_plan(status, headers) {
            return plan;
        }
        if !status.is_success()
            && let Some(t) = self.ticket.as_mut()
        {
            t.release_now().await;
        }
        self.forward(status)
    }

    /// [`response_head`](Self::response_head) when it need not wait: `None` when a claim must
    /// be given back first (then call `response_head`).
    pub fn response_head_now(
        &mut self,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Option<ResponsePlan> {
        if let Some(plan) = self.look_plan(status, headers) {
            return Some(plan);
        }
        if !status.is_success() && self.ticket.as_ref().is_some_and(Ticket::carries_handoff) {
            return None;
        }
        Some(self.forward(status))
    }

    /// A look ahead when the response may blame account-bound state and the request can be
    /// sent again; a look aside (logged at the end) when it cannot.
    fn look_plan(&mut self, status: StatusCode, headers: &HeaderMap) -> Option<ResponsePlan> {
        let repair = self.repair.as_ref()?;
        if self.no_resend {
            if status == StatusCode::BAD_REQUEST && repair.may_repair() {
                self.look = Some(Box::new(Look::new(repair, status, headers)));
            }
            self.repair = None;
            return None;
        }
        if !repair.wants_look(status, headers) {
            return None;
        }
        let look = Look::new(repair, status, headers);
        let deadline = look.deadline();
        self.look = Some(Box::new(look));
        Some(ResponsePlan::LookAhead { deadline })
    }

    /// Forwarding: the ticket waits for the end of a successful body; otherwise nothing is
    /// left to settle (an error's claim went back, and it records nothing).
    fn forward(&mut self, status: StatusCode) -> ResponsePlan {
        self.repair = None;
        if status.is_success() && self.ticket.as_ref().is_some_and(Ticket::waits_for_end) {
            self.end = Some(EndDetector::new());
        }
        ResponsePlan::Forward
    }

    /// A chunk read ahead: `true` while more should be read (the look is not settled and
    /// holds less than its bound).
    pub fn look_chunk(&mut self, data: &[u8]) -> bool {
        match &mut self.look {
            Some(look) => {
                look.push(data);
                !(look.settled() || look.full())
            }
            None => false,
        }
    }

    /// The look ahead stopped (`ended`: at the end of the body). A rejection of account-bound
    /// state that a stripped body can fix gives [`Looked::Resend`]; otherwise the response is
    /// handed on, its claim given back first on an error status.
    pub async fn looked(&mut self, status: StatusCode, ended: bool) -> Looked {
        let (detector, blames) = match self.look.take() {
            Some(look) => look.finish(ended),
            None => (EndDetector::new(), None),
        };
        if let Some(kind) = blames
            && let Some(body) = self.resend_body(kind, status)
        {
            return Looked::Resend(body);
        }
        if !status.is_success()
            && let Some(t) = self.ticket.as_mut()
        {
            t.release_now().await;
        }
        self.forward(status);
        if self.end.is_some() {
            if detector.ending() == Ending::Failed {
                // An in-band failure read ahead: the claim goes back before the client reads
                // it (a retry must find the handoff while the provider holds the stream
                // open), and the response is not labelled as carrying it.
                if let Some(t) = self.ticket.as_mut() {
                    t.release_now().await;
                    t.action.injected = false;
                    t.action.extractive = false;
                }
                self.end = None;
            } else {
                // It saw the chunks read ahead.
                self.end = Some(detector);
            }
        }
        Looked::Forward
    }

    fn resend_body(&mut self, kind: RepairKind, status: StatusCode) -> Option<Bytes> {
        let repair = self.repair.take()?;
        repair.resend_body(kind, status, self.ticket.as_mut())
    }

    /// A chunk of the response body as it is handed on. An in-band failure gives the claim
    /// back at once: the client may retry while the provider still holds the failed stream
    /// open, and the retry must find the handoff.
    pub fn response_chunk(&mut self, data: &[u8]) {
        if let Some(end) = &mut self.end {
            end.push(data);
            if end.ending() == Ending::Failed {
                // Dropping the ticket releases its claim (in the background).
                self.ticket.take();
                self.end.take();
            }
        }
        if let Some(look) = self.look.as_mut().filter(|l| !l.full()) {
            look.push(data);
        }
    }

    /// The response body ended (`errored`: with an error). Only a body that ended with the
    /// API's success event completes the handoff and moves the affinity; anything else gives
    /// the claim back. A body whose success event went out before the error (a provider that
    /// resets its connection after it) completed: the client has the whole turn.
    pub fn end(mut self, errored: bool) {
        if let Some(look) = self.look.take()
            && let (_, Some(kind)) = look.finish(!errored)
        {
            tracing::warn!(
                %kind,
                "provider rejected account-bound state; the error goes to the client"
            );
        }
        let (Some(ticket), Some(mut end)) = (self.ticket.take(), self.end.take()) else {
            // No end to watch: dropping the ticket settles it.
            return;
        };
        let ending = match (errored, end.ending()) {
            (true, Ending::Completed) => Ending::Completed,
            (true, _) => Ending::Unfinished,
            // A last event without its closing blank line is judged too.
            (false, _) => end.finish(),
        };
        ticket.ended(ending);
    }

    /// What the relay did to the request (the [`RELAY_HEADER`](crate::RELAY_HEADER) value).
    pub fn action(&self) -> RelayAction {
        self.ticket.as_ref().map(Ticket::action).unwrap_or_default()
    }

    /// The account the request was sent to.
    pub fn account(&self) -> Option<&ResolvedAccount> {
        self.ticket
            .as_ref()
            .map(Ticket::account)
            .or(self.account.as_ref())
    }

    /// Labels a response head: the [`ResolvedAccount`] extension, inserted on its own (where an
    /// application reads it), when the response holds none (on its own or in its
    /// [`Facts`](crate::Facts));
    /// the [`RelayAction`] extension and [`RELAY_HEADER`](crate::RELAY_HEADER) when the relay
    /// acted (an upstream's own header is removed: it is the relay's word). A handoff counts as
    /// injected only on a success: on an error answer it is given back, not delivered.
    pub fn label(&self, parts: &mut http::response::Parts) {
        if parts.extensions.fact::<ResolvedAccount>().is_none()
            && let Some(a) = self.account()
        {
            parts.extensions.insert(a.clone());
        }
        if self.ticket.is_none() {
            return;
        }
        parts.headers.remove(crate::RELAY_HEADER);
        let mut action = self.action();
        if !parts.status.is_success() {
            // Refused by the provider: the handoff did not reach the model and is given back
            // for a later request (none was delivered; the scrub did happen).
            action.injected = false;
            action.extractive = false;
        }
        if let Some(value) = action.header_value() {
            parts.headers.insert(crate::RELAY_HEADER, value);
            parts.extensions.insert(action);
        }
    }

    /// Whether the end of the response body is watched (see [`end`](Self::end)).
    pub fn watches_end(&self) -> bool {
        self.end.is_some() || self.look.is_some()
    }
}

/// A response body dropped before its end (the client went away): a turn whose success event
/// was already handed on completed all the same (Codex CLI closes the connection as soon as it
/// reads `response.completed`, before the provider's end of body arrives); anything else gives
/// the claim back (the ticket's own drop).
impl Drop for Attempt {
    fn drop(&mut self) {
        if let (Some(end), Some(_)) = (&self.end, &self.ticket)
            && end.ending() == Ending::Completed
            && let Some(ticket) = self.ticket.take()
        {
            ticket.ended(Ending::Completed);
        }
    }
}
