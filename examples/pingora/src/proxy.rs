//! The `ProxyHttp`: routing over the [`Pool`], the relay at each phase of a request.
//!
//! | pingora phase | what happens |
//! |---|---|
//! | `request_filter` | identity (tenant, session), account by affinity, the relay's header-time decisions |
//! | `upstream_request_filter` | the account's credential; framing for a held body |
//! | `request_body_filter` | the summary's copy of the request; hold, decide, emit the rewritten body |
//! | `response_filter` | quota: a 429 or a used-up account leaves rotation; settle or watch the relay's ticket; the summary gates |
//! | `response_body_filter` | the reply into the end watch and the summary's capture |
//! | `logging` | whatever is still open ends (completed, failed or cut) |
//!
//! A 429 is passed to the client: pingora has sent the body upstream by the time the status
//! is known and keeps at most 64 KiB of it for retries on connection errors only, so the
//! proxy cannot send a coding client's request again by itself. The client's own retry is
//! routed to the other account, and that request is where the handoff goes in.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use context_relay_core::decode;
use context_relay_core::portable::TURN_STATE_HEADER;
use context_relay_core::quota::{self, QuotaKind};
use context_relay_core::session;
use context_relay_engine::{
    BodyDecision, Capture, ComboName, EndWatch, GenerationTicket, Inject, Look, QuotaSignal,
    RELAY_HEADER, Relay, Repair, ReplyWatch, RequestFacts, ResolvedAccount, SessionId, Tenant,
    Ticket,
};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::{HttpPeer, Result, Session};
use pingora::proxy::{FailToProxy, ProxyHttp};
use pingora::{Error, ErrorSource, ErrorType};

use crate::held::{Held, Hold};
use crate::pool::{DEFAULT_RESET, Pool, ROTATE_AT, Route};

/// Request body codings the relay can read (and so may hold and send decoded).
const READABLE_CODINGS: [&str; 5] = ["zstd", "gzip", "x-gzip", "deflate", "br"];

/// How much larger than the relay's limit a held compressed body may decode to: one the relay
/// left unchanged because it decodes past its limit must still go out decoded.
const DECODED_SLACK: usize = 8;

/// The reverse proxy: one upstream, one provider, the accounts of a [`Pool`], a [`Relay`].
pub struct RelayProxy {
    upstream: SocketAddr,
    combo: ComboName,
    pool: Arc<Pool>,
    relay: Relay,
}

impl std::fmt::Debug for RelayProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayProxy")
            .field("upstream", &self.upstream)
            .field("combo", &self.combo)
            .finish_non_exhaustive()
    }
}

impl RelayProxy {
    /// Proxies to `upstream` (plain HTTP) with the accounts of `pool`; every request belongs
    /// to one combo named after the pool's provider. `relay` should send its summaries
    /// through the same pool ([`PoolSummarizer`](crate::PoolSummarizer)).
    pub fn new(upstream: SocketAddr, pool: Arc<Pool>, relay: Relay) -> Self {
        Self {
            upstream,
            combo: ComboName::new(pool.provider()),
            pool,
            relay,
        }
    }

    /// The relay.
    pub fn relay(&self) -> &Relay {
        &self.relay
    }
}

/// The state of one request across pingora's phases.
#[derive(Default)]
pub struct Exchange {
    route: Option<Route>,
    served_by: Option<ResolvedAccount>,
    moved: bool,
    body: BodyState,
    capture: Option<Arc<Capture>>,
    generation: Option<GenerationTicket>,
    ticket: Option<Ticket>,
    end: Option<EndWatch>,
    reply: Option<ReplyWatch>,
    /// What the request's account-bound state is, should the provider reject it.
    repair: Option<Box<Repair>>,
    /// A 400 read to tell whether it blames that state.
    rejection: Option<Look>,
}

/// What happens to the request body.
#[derive(Default)]
enum BodyState {
    /// Streams through untouched.
    #[default]
    Untouched,
    /// Held until whole, then decided on.
    Held {
        held: Held,
        decision: BodyDecision,
        /// The client's headers, which the decision reads (`content-encoding`).
        headers: Box<HeaderMap>,
    },
    /// Decided and sent: a second pass (pingora retrying on a connection error) sends it again.
    Sent(Bytes),
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange")
            .field("route", &self.route)
            .field("moved", &self.moved)
            .finish_non_exhaustive()
    }
}

impl RelayProxy {
    /// Identity, routing and the relay's header-time decisions.
    async fn begin(&self, session: &Session, ctx: &mut Exchange) {
        let req = session.req_header();
        let headers = &req.headers;
        // The body is not known yet: a session named only there is found by the relay later,
        // and such a request is routed like a new session.
        let identity = session::identify(headers, None, self.relay.session_sources(), None, None);
        let tenant = Tenant(identity.tenant);
        let session_id = identity.session.map(SessionId);
        let now = Instant::now();
        let route = self
            .pool
            .route(&tenant.0, session_id.as_ref().map(|s| &*s.0), now);
        ctx.moved = route.moved();
        let account = route.account().clone();
        let facts = RequestFacts {
            combo: Some(&self.combo),
            account: Some(&account),
            model: None,
            session: session_id.as_ref(),
            tenant: Some(&tenant),
            skip: false,
        };
        ctx.generation = self.relay.generation(&req.uri, headers, facts);
        ctx.capture = ctx.generation.as_ref().map(|g| g.capture().clone());
        let length: u64 = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        match self.relay.inject(&req.uri, headers, facts, length) {
            Inject::Pass => {}
            Inject::Forward { ticket, repair } => {
                ctx.ticket = Some(ticket);
                ctx.repair = repair;
            }
            Inject::ReadBody(decision) => {
                if holdable(headers, length, decision.limit()) {
                    ctx.body = BodyState::Held {
                        held: Held::new(decision.limit()),
                        decision,
                        headers: Box::new(headers.clone()),
                    };
                } else {
                    ctx.ticket = Some(decision.too_large().await);
                }
            }
        }
        ctx.served_by = Some(account);
        ctx.route = Some(route);
    }

    /// The account leaves rotation when the response says it is used up.
    fn read_quota(
        &self,
        route: &Route,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Option<QuotaSignal> {
        let now = SystemTime::now();
        let signal = quota::from_response(QuotaKind::Auto, status, headers, None, now);
        if let Some(s) = signal.filter(|s| s.percent_used >= ROTATE_AT) {
            let reset = s
                .resets_at
                .and_then(|t| t.duration_since(now).ok())
                .unwrap_or(DEFAULT_RESET);
            tracing::info!(
                account = route.id(),
                used = s.percent_used,
                "account leaves rotation"
            );
            self.pool.exhaust(route.index(), Instant::now() + reset);
        }
        signal
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

#[async_trait]
impl ProxyHttp for RelayProxy {
    type CTX = Exchange;

    fn new_ctx(&self) -> Exchange {
        Exchange::default()
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Exchange) -> Result<bool> {
        self.begin(session, ctx).await;
        Ok(false)
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        _ctx: &mut Exchange,
    ) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(self.upstream, false, String::new())))
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut Exchange,
    ) -> Result<()> {
        // The client's credential never reaches the provider: the account's replaces it.
        upstream.remove_header("x-api-key");
        if let Some(route) = &ctx.route {
            upstream.insert_header(header::AUTHORIZATION, route.authorization().clone())?;
        }
        // Turn state pins a turn to the account that minted it.
        if ctx.moved {
            upstream.remove_header(TURN_STATE_HEADER);
        }
        if matches!(ctx.body, BodyState::Held { .. } | BodyState::Sent(_)) {
            // These headers leave before the body is decided: its length is unknown, and it
            // goes out decoded.
            upstream.remove_header(&header::CONTENT_LENGTH);
            upstream.remove_header(&header::CONTENT_ENCODING);
            upstream.insert_header(
                header::TRANSFER_ENCODING,
                HeaderValue::from_static("chunked"),
            )?;
        }
        Ok(())
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Exchange,
    ) -> Result<()> {
        if let Some(capture) = &ctx.capture {
            if let Some(chunk) = body.as_ref() {
                capture.push(chunk);
            }
            if end_of_stream {
                capture.finish();
                ctx.capture = None;
            }
        }
        match std::mem::take(&mut ctx.body) {
            BodyState::Untouched => {}
            BodyState::Sent(sent) => {
                *body = end_of_stream.then(|| sent.clone()).or(Some(Bytes::new()));
                ctx.body = BodyState::Sent(sent);
            }
            BodyState::Held {
                mut held,
                decision,
                mut headers,
            } => match held.push(body.take(), end_of_stream) {
                Hold::Holding => {
                    // An empty chunk is not written upstream.
                    *body = Some(Bytes::new());
                    ctx.body = BodyState::Held {
                        held,
                        decision,
                        headers,
                    };
                }
                Hold::TooLarge(released) => {
                    // Not compressed (see `begin`), or its announced length was wrong.
                    *body = Some(released);
                    ctx.ticket = Some(decision.too_large().await);
                }
                Hold::Whole(raw) => {
                    let limit = decision.limit();
                    let decided = decision.decide(&mut headers, raw).await;
                    let out = outgoing(&headers, decided.body, limit.saturating_mul(DECODED_SLACK));
                    ctx.ticket = decided.ticket;
                    ctx.repair = decided.repair;
                    *body = (!out.is_empty()).then(|| out.clone());
                    ctx.body = BodyState::Sent(out);
                }
            },
        }
        Ok(())
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut Exchange,
    ) -> Result<()> {
        let status = response.status;
        let signal = ctx
            .route
            .as_ref()
            .and_then(|route| self.read_quota(route, status, &response.headers));
        if let Some(mut ticket) = ctx.ticket.take() {
            if let Some(value) = ticket.action().header_value() {
                response.insert_header(RELAY_HEADER, value)?;
            }
            if !status.is_success() {
                // Before the client sees the error: its retry may claim the handoff at once.
                ticket.release_now().await;
            } else if ticket.waits_for_end() {
                ctx.end = Some(EndWatch::new(ticket));
            }
        }
        if let Some(repair) = ctx.repair.take()
            && status == StatusCode::BAD_REQUEST
            && repair.may_repair()
        {
            ctx.rejection = Some(Look::new(&repair, status, &response.headers));
        }
        if let Some(generation) = ctx.generation.take() {
            ctx.reply =
                generation.response(status, &response.headers, ctx.served_by.as_ref(), signal);
        }
        Ok(())
    }

    fn response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Exchange,
    ) -> Result<Option<std::time::Duration>> {
        if let Some(chunk) = body.as_ref() {
            if let Some(end) = &mut ctx.end {
                end.push(chunk);
            }
            if let Some(reply) = &mut ctx.reply {
                reply.push(chunk);
            }
            if let Some(look) = ctx.rejection.as_mut().filter(|l| !l.full()) {
                look.push(chunk);
            }
        }
        if end_of_stream {
            if let Some(look) = ctx.rejection.take()
                && let (_, Some(kind)) = look.finish(true)
            {
                // pingora sent the body as it came: it cannot be sent again without the state.
                tracing::warn!(
                    %kind,
                    "provider rejected account-bound state; the error goes to the client"
                );
            }
            if let Some(end) = ctx.end.take() {
                end.finish(false);
            }
            if let Some(mut reply) = ctx.reply.take() {
                reply.ended();
            }
        }
        Ok(None)
    }

    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut Exchange,
    ) -> FailToProxy {
        if let Some(mut ticket) = ctx.ticket.take() {
            ticket.release_now().await;
        }
        let code = match (e.etype(), e.esource()) {
            (ErrorType::HTTPStatus(code), _) => *code,
            (_, ErrorSource::Upstream) => 502,
            (
                ErrorType::WriteError | ErrorType::ReadError | ErrorType::ConnectionClosed,
                ErrorSource::Downstream,
            ) => 0,
            (_, ErrorSource::Downstream) => 400,
            _ => 500,
        };
        if code > 0
            && let Err(e) = session.respond_error(code).await
        {
            tracing::warn!(error = %e, "the error response could not be sent");
        }
        FailToProxy {
            error_code: code,
            can_reuse_downstream: false,
        }
    }

    async fn logging(&self, _session: &mut Session, e: Option<&Error>, ctx: &mut Exchange) {
        let errored = e.is_some();
        if let Some(capture) = ctx.capture.take() {
            // The request body never reached its end.
            capture.fail();
        }
        if let Some(end) = ctx.end.take() {
            end.finish(errored);
        }
        if let Some(mut reply) = ctx.reply.take() {
            if errored {
                reply.failed();
            } else {
                reply.ended();
            }
        }
        // A ticket still held here saw no response: dropping it releases its claim.
        ctx.ticket = None;
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn encoded(value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static(value));
        h
    }

    #[test]
    fn only_codings_the_relay_decodes_are_held() {
        assert!(readable(&HeaderMap::new()));
        assert!(readable(&encoded("zstd")));
        assert!(readable(&encoded("GZIP")));
        assert!(readable(&encoded("gzip, br")));
        assert!(!readable(&encoded("compress")));
        assert!(!readable(&encoded("gzip, snappy")));
    }

    #[test]
    fn held_bodies_are_announced_small_enough_or_plain() {
        let mut plain = HeaderMap::new();
        assert!(
            holdable(&plain, 0, 100),
            "chunked, plain: held up to the limit"
        );
        plain.insert(header::CONTENT_LENGTH, HeaderValue::from(100));
        assert!(holdable(&plain, 100, 100));
        assert!(!holdable(&plain, 101, 100), "announced over the limit");
        let chunked_gzip = encoded("gzip");
        assert!(
            !holdable(&chunked_gzip, 0, 100),
            "compressed, length unknown"
        );
        let mut gzip = encoded("gzip");
        gzip.insert(header::CONTENT_LENGTH, HeaderValue::from(50));
        assert!(holdable(&gzip, 50, 100));
        let mut unknown = encoded("compress");
        unknown.insert(header::CONTENT_LENGTH, HeaderValue::from(50));
        assert!(
            !holdable(&unknown, 50, 100),
            "a coding the relay cannot read"
        );
    }

    #[test]
    fn a_body_still_encoded_goes_out_decoded() {
        let json = br#"{"input":"hi"}"#;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(json).unwrap();
        let gz = Bytes::from(e.finish().unwrap());
        assert_eq!(outgoing(&encoded("gzip"), gz, 1024), &json[..]);
        // Already decoded by the decision (the header is gone): as it is.
        let plain = Bytes::from_static(json);
        assert_eq!(outgoing(&HeaderMap::new(), plain.clone(), 1024), plain);
        // Undecodable: as received, the provider answers for it.
        let junk = Bytes::from_static(b"not gzip");
        assert_eq!(outgoing(&encoded("gzip"), junk.clone(), 1024), junk);
    }
}
