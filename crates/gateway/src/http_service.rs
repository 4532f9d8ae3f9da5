//! [`HttpService`]: the whole HTTP service of a gateway, as the accept loop serves it.
//!
//! The tower-http stack around the router of the current configuration (`routes.rs` builds
//! it), by its type: the accept loop calls it through a clone (its parts are reference counts)
//! and holds its future as it is, where a type-erased service returns each future boxed. The
//! router's own proxy stack stays erased ([`SharedService`](crate::SharedService)): a reload
//! replaces it while the server runs.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response};
use hyper::body::Incoming;
use tower::util::MapRequest;
use tower_http::sensitive_headers::SetSensitiveRequestHeaders;
use tower_service::Service;

use crate::ResponseBody;
use crate::catch_panic::CatchPanic;
use crate::live::Live;
use crate::telemetry::RequestMetrics;

/// The stack's type: sensitive headers marked, a request id ensured, metrics, the panic
/// catcher, the live router.
pub(crate) type Stack = SetSensitiveRequestHeaders<
    MapRequest<
        RequestMetrics<CatchPanic<Live, axum::body::Body>>,
        fn(Request<Incoming>) -> Request<Incoming>,
    >,
>;

/// The whole HTTP service of a gateway (see the [module docs](self)); a clone shares the
/// gateway's state.
#[derive(Clone)]
pub struct HttpService {
    stack: Stack,
}

impl HttpService {
    pub(crate) fn new(stack: Stack) -> Self {
        Self { stack }
    }
}

impl std::fmt::Debug for HttpService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpService").finish_non_exhaustive()
    }
}

impl Service<Request<Incoming>> for HttpService {
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = ResponseFuture;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.stack.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, req: Request<Incoming>) -> ResponseFuture {
        ResponseFuture {
            inner: self.stack.call(req),
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`HttpService`].
    pub struct ResponseFuture {
        #[pin]
        inner: <Stack as Service<Request<Incoming>>>::Future,
    }
}

impl std::fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl Future for ResponseFuture {
    type Output = Result<Response<ResponseBody>, Infallible>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx)
    }
}
