//! The summary call, sent with pingora's own HTTP client to the account that serves the
//! session now.
//!
//! The relay derives the summary request from the turn that crossed the threshold (same
//! endpoint, the client's headers); this summarizer routes it through the [`Pool`] like a turn
//! of the session, so it goes to the session's current account, with that account's
//! credential in place of the client's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use context_relay_engine::{
    MAX_ERROR_BODY_BYTES, MAX_SUMMARY_REPLY_BYTES, Summarizer, SummaryError, SummaryFuture,
    SummaryRequest,
};
use http::{HeaderValue, Method, header};
use pingora::connectors::http::Connector;
use pingora::http::RequestHeader;
use pingora::upstreams::peer::HttpPeer;

use crate::pool::Pool;

/// Sends summary requests to the upstream through the pool.
pub struct PoolSummarizer {
    upstream: SocketAddr,
    pool: Arc<Pool>,
    connector: Arc<Connector>,
}

impl std::fmt::Debug for PoolSummarizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolSummarizer")
            .field("upstream", &self.upstream)
            .finish_non_exhaustive()
    }
}

impl PoolSummarizer {
    /// Sends to `upstream` (plain HTTP) with the credential of the session's account in
    /// `pool`.
    pub fn new(upstream: SocketAddr, pool: Arc<Pool>) -> Self {
        Self {
            upstream,
            pool,
            connector: Arc::new(Connector::new(None)),
        }
    }
}

impl Summarizer for PoolSummarizer {
    fn summarize(&self, request: SummaryRequest) -> SummaryFuture {
        let route = self
            .pool
            .route(&request.tenant.0, Some(&request.session.0), Instant::now());
        let authorization = route.authorization().clone();
        let connector = self.connector.clone();
        let upstream = self.upstream;
        Box::pin(async move { send(&connector, upstream, request, authorization).await })
    }
}

fn transport(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> SummaryError {
    SummaryError::Transport(e.into())
}

async fn send(
    connector: &Connector,
    upstream: SocketAddr,
    request: SummaryRequest,
    authorization: HeaderValue,
) -> Result<Bytes, SummaryError> {
    let path = request
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let mut head = RequestHeader::build(Method::POST, path.as_bytes(), None).map_err(transport)?;
    for (name, value) in &request.headers {
        head.append_header(name.clone(), value.clone())
            .map_err(transport)?;
    }
    head.remove_header("x-api-key");
    head.insert_header(header::AUTHORIZATION, authorization)
        .map_err(transport)?;
    head.insert_header(header::HOST, upstream.to_string())
        .map_err(transport)?;
    head.insert_header(header::CONTENT_LENGTH, request.body.len())
        .map_err(transport)?;

    let peer = HttpPeer::new(upstream, false, String::new());
    let (mut http, _reused) = connector.get_http_session(&peer).await.map_err(transport)?;
    http.write_request_header(Box::new(head))
        .await
        .map_err(transport)?;
    http.write_request_body(request.body, true)
        .await
        .map_err(transport)?;
    http.finish_request_body().await.map_err(transport)?;
    http.read_response_header().await.map_err(transport)?;
    let status = http
        .response_header()
        .map(|h| h.status)
        .ok_or_else(|| transport("no response head"))?;
    let limit = if status.is_success() {
        MAX_SUMMARY_REPLY_BYTES
    } else {
        MAX_ERROR_BODY_BYTES
    };
    let mut body = BytesMut::new();
    let mut whole = true;
    while let Some(chunk) = http
        .read_response_body()
        .await
        .map_err(|e| SummaryError::Body(e.into()))?
    {
        if body.len() + chunk.len() > limit {
            body.extend_from_slice(&chunk[..limit - body.len()]);
            whole = false;
            break;
        }
        body.extend_from_slice(&chunk);
    }
    if whole {
        connector.release_http_session(http, &peer, None).await;
    }
    if !status.is_success() {
        return Err(SummaryError::Status {
            status,
            body: body.freeze(),
        });
    }
    if !whole {
        return Err(SummaryError::Body(
            format!("summary reply over {MAX_SUMMARY_REPLY_BYTES} bytes").into(),
        ));
    }
    Ok(body.freeze())
}
