//! The relay in pingora's phases: one value per request, one call per `ProxyHttp` phase. Any
//! pingora proxy plugs the relay in with these calls; the engine's [`Turn`] and [`Attempt`]
//! keep the ordering rules, this module only translates pingora's phases and frames the body.
//!
//! | `ProxyHttp` phase | call |
//! |---|---|
//! | `request_filter` | [`RelayPhases::request`] (tenant, session and account known) |
//! | `upstream_request_filter` | [`RelayPhases::upstream_request`] (framing for a held body) |
//! | `request_body_filter` | [`RelayPhases::request_body`] (the summary's copy; hold, decide, emit the rewritten body) |
//! | `response_filter` | [`RelayPhases::response`] (gives a claim back on an error, labels the head, the summary's gates) |
//! | `response_body_filter` | [`RelayPhases::response_body`] |
//! | `fail_to_proxy` | [`RelayPhases::failed`] |
//! | `logging` | [`RelayPhases::finish`] (whatever is still open ends: completed, failed or cut) |
//!
//! pingora streams the request body upstream as it comes and cannot send it again once the
//! status is known, so the attempt is made [`without_resend`](Attempt::without_resend): a
//! rejection of account-bound state is logged and handed on, and the client's retry (on the
//! same session, now scrubbed) goes through.

use bytes::Bytes;
use context_relay_core::decode;
use context_relay_engine::{
    Attempt, BodyPlan, QuotaSignal, RELAY_HEADER, Relay, RequestFacts, ResolvedAccount,
    ServingModel, Turn,
};
use http::{HeaderMap, HeaderValue, header};
use pingora::http::{RequestHeader, ResponseHeader};

use crate::held::{Held, Hold};

/// Request body codings the relay can read (and so may hold and send decoded).
const READABLE_CODINGS: [&str; 5] = ["zstd", "gzip", "x-gzip", "deflate", "br"];

/// How much larger than the relay's limit a held compressed body may decode to: one the relay
/// left unchanged because it decodes past its limit must still go out decoded.
const DECODED_SLACK: usize = 8;

/// The relay's state of one request across pingora's phases (keep it in the `CTX`).
#[derive(Debug, Default)]
pub struct RelayPhases {
    turn: Option<Turn>,
    attempt: Option<Attempt>,
    body: BodyState,
    served_by: Option<ResolvedAccount>,
    serving: Option<ServingModel>,
}

/// What happens to the request body.
#[derive(Debug, Default)]
enum BodyState {
    /// Streams through untouched.
    #[default]
    Untouched,
    /// Held until whole, then decided on; `headers` are the client's (the decision reads
    /// `content-encoding`).
    Held { held: Held, headers: Box<HeaderMap> },
    /// Decided and sent: a second pass (pingora retrying on a connection error) sends it again.
    Sent(Bytes),
}

impl RelayPhases {
    /// `request_filter`: the request head, with the facts the proxy knows (combo, account,
    /// tenant, session).
    pub async fn request(relay: &Relay, req: &RequestHeader, facts: RequestFacts<'_>) -> Self {
        let headers = &req.headers;
        let length: u64 = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let turn = relay.turn(&req.uri, headers, facts);
        let mut attempt = relay
            .attempt(&req.uri, headers, facts, length)
            .without_resend();
        let body = match attempt.body_plan() {
            BodyPlan::Hold { limit } if holdable(headers, length, limit) => BodyState::Held {
                held: Held::new(limit),
                headers: Box::new(headers.clone()),
            },
            BodyPlan::Hold { .. } => {
                attempt.body_too_large().await;
                BodyState::Untouched
            }
            BodyPlan::Stream { .. } => BodyState::Untouched,
        };
        Self {
            turn: Some(turn),
            attempt: Some(attempt),
            body,
            served_by: facts.account.cloned(),
            serving: facts.model.cloned(),
        }
    }

    /// `upstream_request_filter`: a held body leaves after its headers, so its length is
    /// unknown and it goes out decoded and chunked; an answer the relay reads is asked for
    /// uncompressed.
    pub fn upstream_request(&self, upstream: &mut RequestHeader) -> pingora::Result<()> {
        // The relay reads the answer: it must come uncompressed.
        if self.attempt.as_ref().is_some_and(Attempt::reads_answer)
            && upstream.headers.contains_key(header::ACCEPT_ENCODING)
        {
            upstream.insert_header(
                header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            )?;
        }
        if matches!(self.body, BodyState::Held { .. } | BodyState::Sent(_)) {
            upstream.remove_header(&header::CONTENT_LENGTH);
            upstream.remove_header(&header::CONTENT_ENCODING);
            upstream.insert_header(
                header::TRANSFER_ENCODING,
                HeaderValue::from_static("chunked"),
            )?;
        }
        Ok(())
    }

    /// `request_body_filter`: the summary's copy; a held body is replaced by empty chunks
    /// (which pingora does not write) until it is whole, then by the decided body.
    pub async fn request_body(&mut self, body: &mut Option<Bytes>, end_of_stream: bool) {
        if let Some(turn) = &mut self.turn {
            turn.request_chunk(body.as_ref().unwrap_or(&Bytes::new()), end_of_stream);
        }
        let Some(attempt) = &mut self.attempt else {
            return;
        };
        match std::mem::take(&mut self.body) {
            BodyState::Untouched => {}
            BodyState::Sent(sent) => {
                *body = end_of_stream.then(|| sent.clone()).or(Some(Bytes::new()));
                self.body = BodyState::Sent(sent);
            }
            BodyState::Held {
                mut held,
                mut headers,
            } => match held.push(body.take(), end_of_stream) {
                Hold::Holding => {
                    *body = Some(Bytes::new());
                    self.body = BodyState::Held { held, headers };
                }
                Hold::TooLarge(released) => {
                    // Not compressed (see `holdable`), or its announced length was wrong.
                    *body = Some(released);
                    attempt.body_too_large().await;
                }
                Hold::Whole(raw) => {
                    let limit = held.limit().saturating_mul(DECODED_SLACK);
                    let decided = attempt.request_body(&mut headers, raw).await;
                    let out = outgoing(&headers, decided, limit);
                    *body = (!out.is_empty()).then(|| out.clone());
                    self.body = BodyState::Sent(out);
                }
            },
        }
    }

    /// `response_filter`: a claim goes back before the client sees an error; the head is
    /// labelled; the summary's gates read the quota `signal` the proxy computed.
    pub async fn response(
        &mut self,
        response: &mut ResponseHeader,
        signal: Option<QuotaSignal>,
    ) -> pingora::Result<()> {
        let status = response.status;
        if let Some(attempt) = &mut self.attempt {
            attempt.response_head(status, &response.headers).await;
            if let Some(value) = attempt.action().header_value() {
                response.insert_header(RELAY_HEADER, value)?;
            }
        }
        if let Some(turn) = &mut self.turn {
            turn.response(
                status,
                &response.headers,
                self.served_by.as_ref(),
                self.serving.as_ref(),
                signal,
            );
        }
        Ok(())
    }

    /// `response_body_filter`.
    pub fn response_body(&mut self, body: &Option<Bytes>, end_of_stream: bool) {
        if let Some(chunk) = body {
            if let Some(attempt) = &mut self.attempt {
                attempt.response_chunk(chunk);
            }
            if let Some(turn) = &mut self.turn {
                turn.response_chunk(chunk);
            }
        }
        if end_of_stream {
            self.finish(false);
        }
    }

    /// `fail_to_proxy`: no response came; a claim goes back before the error is sent.
    pub async fn failed(&mut self) {
        if let Some(attempt) = &mut self.attempt {
            attempt.failed().await;
        }
    }

    /// `logging` (and the end of the response body): whatever is still open ends.
    pub fn finish(&mut self, errored: bool) {
        if let Some(attempt) = self.attempt.take() {
            attempt.end(errored);
        }
        if let Some(turn) = self.turn.take() {
            turn.end(errored);
        }
    }
}

/// Whether a body to decide on is held: no larger than the limit as announced (`length`, 0
/// when unknown) and in a coding the relay reads; a compressed one only with its length
/// announced (once its head has left without `content-encoding`, it cannot turn out too large
/// and go out as it came).
fn holdable(headers: &HeaderMap, length: u64, limit: usize) -> bool {
    let encoded = headers.contains_key(header::CONTENT_ENCODING);
    let announced = headers.contains_key(header::CONTENT_LENGTH);
    readable(headers) && length <= limit as u64 && (announced || !encoded)
}

/// Whether a request body is in a coding the relay can read (or in none).
fn readable(headers: &HeaderMap) -> bool {
    headers.get_all(header::CONTENT_ENCODING).iter().all(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',')
                .map(str::trim)
                .all(|c| c.is_empty() || READABLE_CODINGS.iter().any(|k| k.eq_ignore_ascii_case(c)))
        })
    })
}

/// The decided body as it goes out: decoded (up to `limit` bytes), since the held request went
/// out without its `content-encoding` (the headers left before the body was known).
fn outgoing(decided_headers: &HeaderMap, body: Bytes, limit: usize) -> Bytes {
    let Some(coding) = decided_headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
    else {
        return body;
    };
    match decode::decode(coding, &body, limit) {
        Ok(decoded) => Bytes::from(decoded),
        Err(e) => {
            // The provider would refuse this body with or without the header.
            tracing::warn!(error = %e, "request body could not be decoded; sent as received");
            body
        }
    }
}

#[cfg(test)]
mod tests;
