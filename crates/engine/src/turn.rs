//! One client request, phase by phase: the generation side's lifecycle.
//!
//! | proxy phase | call | the turn |
//! |---|---|---|
//! | request head | [`Relay::turn`] | whether this request can lead to a summary at all |
//! | request body | [`request_chunk`](Turn::request_chunk) (or a body wrapper pushing into [`take_capture`](Turn::take_capture)) | keeps a bounded copy of the request for the summary; complete only at its end |
//! | response head | [`response`](Turn::response) | the gates: quota of the serving account, status, session, cool-down, one generation at a time |
//! | response body | [`response_chunk`](Turn::response_chunk), [`end`](Turn::end) | watches the reply; the summary job starts once the reply is complete |
//!
//! Dropping a turn is a cut: a request body that had not ended is given up, and a reply that
//! had not completed starts nothing (a stream whose terminal success event was seen counts as
//! complete, even if the client dropped it before the upstream closed it).

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, StatusCode, Uri};

use crate::extensions::{QuotaSignal, RequestFacts, ResolvedAccount, ServingModel};
use crate::generation::{Capture, GenerationTicket, ReplyWatch};
use crate::relay::Relay;
use crate::summary::Summarizer;

/// The generation side of one client request. See the [module docs](self).
#[derive(Debug, Default)]
pub struct Turn {
    /// Until the response head: what the gates need.
    pending: Option<GenerationTicket>,
    /// The copy of the request body, until it ended.
    capture: Option<Arc<Capture>>,
    /// After the response head, for a turn that qualified for a summary (boxed: a turn is
    /// moved with every response future, and few qualify).
    reply: Option<Box<ReplyWatch>>,
}

impl Relay {
    /// The request head of a client request: the generation side's phase object. A request
    /// that cannot lead to a summary (marked [`SkipRelay`](crate::SkipRelay) or
    /// [`SummaryCall`](crate::SummaryCall), no combo, no API path, generation off) gets an
    /// idle turn: every call on it does nothing.
    pub fn turn(&self, uri: &Uri, headers: &HeaderMap, facts: RequestFacts<'_>) -> Turn {
        let pending = self.generation(uri, headers, facts);
        Turn {
            capture: pending.as_ref().map(|p| p.capture().clone()),
            pending,
            reply: None,
        }
    }
}

impl Turn {
    /// A turn that leads to nothing.
    pub fn idle() -> Self {
        Self::default()
    }

    /// Whether this turn can still lead to a summary.
    pub fn is_active(&self) -> bool {
        self.pending.is_some() || self.reply.is_some()
    }

    /// Hands the copy of the request body to an adapter whose body wrapper pushes the
    /// chunks itself ([`Capture::push`], then [`Capture::finish`] or [`Capture::fail`]);
    /// [`request_chunk`](Self::request_chunk) then does nothing.
    pub fn take_capture(&mut self) -> Option<Arc<Capture>> {
        self.capture.take()
    }

    /// Uses the summarizer `default` makes when the relay was built without one.
    pub fn summarizer_or(&mut self, default: impl FnOnce() -> Arc<dyn Summarizer>) {
        if let Some(p) = &mut self.pending {
            p.summarizer_or(default);
        }
    }

    /// A chunk of the request body went out (`end`: the last one; an empty chunk may carry
    /// the end alone).
    pub fn request_chunk(&mut self, chunk: &Bytes, end: bool) {
        let Some(capture) = &self.capture else {
            return;
        };
        match (chunk.is_empty(), end) {
            (false, true) => capture.push_last(chunk),
            (false, false) => capture.push(chunk),
            (true, true) => capture.finish(),
            (true, false) => {}
        }
        if end {
            self.capture = None;
        }
    }

    /// The request body failed (or never reached its end): the copy is given up.
    pub fn request_failed(&mut self) {
        if let Some(capture) = self.capture.take() {
            capture.fail();
        }
    }

    /// The response head: the gates that need no store. A 2xx, served by an account whose
    /// provider gets handoffs, with usage in [threshold, 95 %), of a known session that is
    /// neither cooling down nor being summarised already; or the first successful response on
    /// a new model (labelled `model-switch` by the injection side) when the combo has
    /// `model_switch` on. Skips are counted in
    /// [`GENERATIONS_SKIPPED`](crate::metrics::GENERATIONS_SKIPPED).
    ///
    /// `served_by` is the account that served and `serving` the target it was sent to
    /// (`provider/model`, when the application knows it): the summary goes to that account,
    /// written by that model unless a summary model is configured (see
    /// [`SummaryRequest`](crate::SummaryRequest)). `signal` is a quota signal the application
    /// computed, which wins over the relay's [`QuotaSource`](crate::QuotaSource).
    pub fn response(
        &mut self,
        status: StatusCode,
        headers: &HeaderMap,
        served_by: Option<&ResolvedAccount>,
        serving: Option<&ServingModel>,
        signal: Option<QuotaSignal>,
    ) {
        if let Some(pending) = self.pending.take() {
            self.reply = pending
                .response(status, headers, served_by, serving, signal)
                .map(Box::new);
        }
    }

    /// Whether the response body is watched (the turn qualified for a summary).
    pub fn watches_reply(&self) -> bool {
        self.reply.is_some()
    }

    /// A chunk of the response body.
    pub fn response_chunk(&mut self, data: &[u8]) {
        if let Some(reply) = &mut self.reply {
            reply.push(data);
        }
    }

    /// The response body ended (`errored`: with an error): the summary starts when the reply
    /// is complete and did not end with an in-band failure.
    pub fn end(mut self, errored: bool) {
        if let Some(mut reply) = self.reply.take() {
            if errored {
                reply.failed();
            } else {
                reply.ended();
            }
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        // The request body never reached its end here.
        self.request_failed();
    }
}
