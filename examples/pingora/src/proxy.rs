//! The `ProxyHttp`: routing over the [`Pool`], the relay through [`RelayPhases`].
//!
//! | pingora phase | what happens |
//! |---|---|
//! | `request_filter` | identity (tenant, session), account by affinity, the relay's request head |
//! | `upstream_request_filter` | the account's credential; the relay's framing |
//! | `request_body_filter` | the relay (copy, hold, decide) |
//! | `response_filter` | quota: a 429 or a used-up account leaves rotation; the relay |
//! | `response_body_filter`, `fail_to_proxy`, `logging` | the relay |
//!
//! A 429 is passed to the client: pingora has sent the body upstream by the time the status
//! is known and keeps at most 64 KiB of it for retries on connection errors only, so the
//! proxy cannot send a coding client's request again by itself. The client's own retry is
//! routed to the other account, and that request is where the handoff goes in.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use context_relay_core::portable::TURN_STATE_HEADER;
use context_relay_core::session;
use context_relay_engine::{ComboName, Relay, RequestFacts, SessionId, Tenant};
use http::header;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::{HttpPeer, Result, Session};
use pingora::proxy::{FailToProxy, ProxyHttp};
use pingora::{Error, ErrorSource, ErrorType};

use crate::phases::RelayPhases;
use crate::pool::{Pool, Route};

/// The reverse proxy: one upstream, one provider, the accounts of a [`Pool`], a [`Relay`].
#[derive(Debug)]
pub struct RelayProxy {
    upstream: SocketAddr,
    combo: ComboName,
    pool: Arc<Pool>,
    relay: Relay,
}

impl RelayProxy {
    /// Proxies to `upstream` (plain HTTP) with the accounts of `pool`; every request belongs
    /// to one combo named after the pool's provider. `relay` should send its summaries
    /// through the same pool ([`PoolSummarizer`](crate::PoolSummarizer)).
    pub fn new(upstream: SocketAddr, pool: Arc<Pool>, relay: Relay) -> Self {
        let combo = ComboName::new(pool.provider());
        Self {
            upstream,
            combo,
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
#[derive(Debug, Default)]
pub struct Exchange {
    route: Option<Route>,
    relay: RelayPhases,
}

#[async_trait]
impl ProxyHttp for RelayProxy {
    type CTX = Exchange;

    fn new_ctx(&self) -> Exchange {
        Exchange::default()
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Exchange) -> Result<bool> {
        let req = session.req_header();
        // The body is not known yet: a session named only there is found by the relay later,
        // and such a request is routed like a new session.
        let identity =
            session::identify(&req.headers, None, self.relay.session_sources(), None, None);
        let tenant = Tenant(identity.tenant);
        let session_id = identity.session.map(SessionId);
        let route = self.pool.route(
            &tenant.0,
            session_id.as_ref().map(|s| &*s.0),
            Instant::now(),
        );
        let facts = RequestFacts {
            combo: Some(&self.combo),
            account: Some(route.account()),
            session: session_id.as_ref(),
            tenant: Some(&tenant),
            ..Default::default()
        };
        ctx.relay = RelayPhases::request(&self.relay, req, facts).await;
        ctx.route = Some(route);
        Ok(false)
    }

    async fn upstream_peer(&self, _: &mut Session, _: &mut Exchange) -> Result<Box<HttpPeer>> {
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
            // Turn state pins a turn to the account that minted it.
            if route.moved() {
                upstream.remove_header(TURN_STATE_HEADER);
            }
        }
        ctx.relay.upstream_request(upstream)
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Exchange,
    ) -> Result<()> {
        ctx.relay.request_body(body, end_of_stream).await;
        Ok(())
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut Exchange,
    ) -> Result<()> {
        let route = ctx.route.as_ref();
        let signal = route.and_then(|r| self.pool.observe(r, response.status, &response.headers));
        ctx.relay.response(response, signal).await
    }

    fn response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Exchange,
    ) -> Result<Option<std::time::Duration>> {
        ctx.relay.response_body(body, end_of_stream);
        Ok(None)
    }

    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut Exchange,
    ) -> FailToProxy {
        ctx.relay.failed().await;
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
        ctx.relay.finish(e.is_some());
    }
}
