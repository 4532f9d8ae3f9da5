//! The default summarizer of [`GenerationLayer`](crate::GenerationLayer): the summary request
//! goes through a clone of the stack below the layer, marked [`SummaryCall`] and carrying the
//! triggering request's combo, tenant and session, and the [`ResolvedAccount`] and
//! [`ServingModel`] that served the turn, so that the account resolver sends it to that
//! account (the request may carry state only it can read).
//!
//! [`SummaryCall`]: context_relay_engine::SummaryCall
//! [`ResolvedAccount`]: context_relay_engine::ResolvedAccount
//! [`ServingModel`]: context_relay_engine::ServingModel

use std::marker::PhantomData;
use std::sync::Mutex;

use bytes::Bytes;
use context_relay_engine::{
    BoxError, MAX_ERROR_BODY_BYTES, MAX_SUMMARY_REPLY_BYTES, Summarizer, SummaryCall, SummaryError,
    SummaryFuture, SummaryRequest,
};
use http::{Method, Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use tower_service::Service;

use crate::RequestBody;

/// The default summarizer: sends the request through a clone of the inner service.
pub(crate) struct InnerSummarizer<S, B> {
    // A Mutex makes a `Send` but not `Sync` service shareable; it is only held to clone.
    service: Mutex<S>,
    _body: PhantomData<fn(B)>,
}

impl<S, B> InnerSummarizer<S, B> {
    pub(crate) fn new(service: S) -> Self {
        Self {
            service: Mutex::new(service),
            _body: PhantomData,
        }
    }
}

impl<S, B, ResBody> Summarizer for InnerSummarizer<S, B>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Send,
    ResBody: Body + Send + 'static,
    ResBody::Data: Send,
    ResBody::Error: Into<BoxError>,
{
    fn summarize(&self, request: SummaryRequest) -> SummaryFuture {
        let service = match self.service.lock() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        Box::pin(send(service, request))
    }
}

async fn send<S, B, ResBody>(mut service: S, request: SummaryRequest) -> Result<Bytes, SummaryError>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
    S::Error: Into<BoxError>,
    B: Body,
    ResBody: Body,
    ResBody::Error: Into<BoxError>,
{
    let SummaryRequest {
        body,
        uri,
        headers,
        combo,
        tenant,
        session,
        account,
        serving,
        ..
    } = request;
    let mut req = Request::new(RequestBody::full(body));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    let ext = req.extensions_mut();
    ext.insert(SummaryCall);
    // Each on its own, as an application's services below may read them (one request per
    // summary: the boxes do not matter).
    ext.insert(combo);
    ext.insert(tenant);
    ext.insert(session);
    ext.insert(account);
    if let Some(serving) = serving {
        ext.insert(serving);
    }

    std::future::poll_fn(|cx| service.poll_ready(cx))
        .await
        .map_err(|e| SummaryError::Transport(e.into()))?;
    let response = service
        .call(req)
        .await
        .map_err(|e| SummaryError::Transport(e.into()))?;
    let status = response.status();
    if !status.is_success() {
        // The body may say which parameter the model refused; a body that cannot be read
        // within the limit says nothing.
        let body = Limited::new(response.into_body(), MAX_ERROR_BODY_BYTES)
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        return Err(SummaryError::Status { status, body });
    }
    let collected = Limited::new(response.into_body(), MAX_SUMMARY_REPLY_BYTES)
        .collect()
        .await
        .map_err(SummaryError::Body)?;
    Ok(collected.to_bytes())
}
