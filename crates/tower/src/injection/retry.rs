//! Sending a request again, once, to the same account: what a repair needs of the request.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use context_relay_engine::injection::resend_headers;
use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use crate::request_body::RequestBody;

pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Sends a new body with the request's method, URI, headers and extensions to a fresh clone of
/// the inner service.
pub(crate) type Resend<B, E> = Box<dyn FnOnce(Bytes) -> BoxFuture<Result<Response<B>, E>> + Send>;

/// A [`Resend`] for the request whose head is `parts`, through a clone of `inner`.
pub(crate) fn resend<S, B, ResBody>(
    inner: S,
    parts: &http::request::Parts,
) -> Resend<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body + Send + 'static,
    B::Error: Send,
{
    let method = parts.method.clone();
    let uri = parts.uri.clone();
    let version = parts.version;
    let headers = parts.headers.clone();
    let extensions = parts.extensions.clone();
    Box::new(move |body: Bytes| {
        Box::pin(async move {
            let mut headers = headers;
            resend_headers(&mut headers, body.len());
            let mut req = Request::new(RequestBody::full(body));
            *req.method_mut() = method;
            *req.uri_mut() = uri;
            *req.version_mut() = version;
            *req.headers_mut() = headers;
            *req.extensions_mut() = extensions;
            let mut inner = inner;
            std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            inner.call(req).await
        }) as BoxFuture<_>
    })
}
