//! The router a running server serves, replaceable while it runs: a configuration reload
//! ([`Gateway::reload`](crate::Gateway::reload)) swaps in the router of the new configuration
//! and every request from then on, on new and open connections alike, is served by it.
//!
//! Each request reads the current router and client body timeout under a read lock (a
//! reference count and a copy of the duration; a request for the proxy stack starts its call
//! under the lock instead of copying the stack's handle); a request already running keeps the
//! router it started with.

use std::convert::Infallible;
use std::sync::{Arc, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::future::RouteFuture;
use futures_util::future::{BoxFuture, Either};
use http::{Method, Request, Response};
use hyper::body::Incoming;
use tower_service::Service;

use crate::app::ProxyService;
use crate::idle::IdleTimeoutBody;
use crate::routes::is_proxy_path;

/// The client body timeout of a [`Live`] not yet [set](Live::set).
const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// What a request is served with.
struct Current {
    router: Router,
    /// The proxy stack the router mounts on the API paths, called directly for a `POST` to one
    /// of them ([`is_proxy_path`]): the same service, without the router's matching, its path
    /// parameters extension (which every attempt would copy) and its boxed future.
    proxy: Option<ProxyService>,
    /// `client_body_timeout_secs`: longest wait between two chunks of a request body.
    body_timeout: Duration,
}

/// The replaceable router of a gateway; clones share it.
#[derive(Clone)]
pub(crate) struct Live(Arc<RwLock<Option<Current>>>);

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Live")
    }
}

impl Default for Live {
    fn default() -> Self {
        Self(Arc::new(RwLock::new(None)))
    }
}

impl Live {
    /// Serves `router` (with `body_timeout`) from now on; `proxy`, when given, is the service
    /// `router` mounts on the API paths.
    pub(crate) fn set(&self, router: Router, proxy: Option<ProxyService>, body_timeout: Duration) {
        let mut current = self.0.write().unwrap_or_else(PoisonError::into_inner);
        *current = Some(Current {
            router,
            proxy,
            body_timeout,
        });
    }
}

impl Service<Request<Incoming>> for Live {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future =
        Either<RouteFuture<Infallible>, BoxFuture<'static, Result<Response<Body>, Infallible>>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // An axum router is always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        let current = self.0.read().unwrap_or_else(PoisonError::into_inner);
        // Set before the service is handed out; an empty router answers 404 otherwise.
        let Some(Current {
            router,
            proxy,
            body_timeout,
        }) = current.as_ref()
        else {
            drop(current);
            let req = req.map(|b| Body::new(IdleTimeoutBody::new(b, DEFAULT_BODY_TIMEOUT)));
            return Either::Left(Router::new().call(req));
        };
        // Armed only while the body waits for the client: a body already received costs no
        // timer.
        let body = |b| IdleTimeoutBody::new(b, *body_timeout);
        match proxy {
            Some(proxy) if req.method() == Method::POST && is_proxy_path(req.uri().path()) => {
                Either::Right(proxy.serve(req.map(|b| http_body_util::Either::Left(body(b)))))
            }
            _ => {
                let req = req.map(|b| Body::new(body(b)));
                let mut router = router.clone();
                drop(current);
                Either::Left(router.call(req))
            }
        }
    }
}
