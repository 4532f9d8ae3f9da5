//! The router a running server serves, replaceable while it runs: a configuration reload
//! ([`Gateway::reload`](crate::Gateway::reload)) swaps in the router of the new configuration
//! and every request from then on, on new and open connections alike, is served by it.
//!
//! Each request reads the current router and client body timeout under a read lock (a
//! reference count and a copy of the duration); a request already running keeps the router it
//! started with.

use std::convert::Infallible;
use std::sync::{Arc, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::future::RouteFuture;
use futures_util::future::Either;
use http::{Method, Request, Response};
use hyper::body::Incoming;
use tower::ServiceExt;
use tower::util::Oneshot;
use tower_service::Service;

use crate::app::ProxyService;
use crate::idle::IdleTimeoutBody;
use crate::routes::is_proxy_path;

/// What a request is served with.
#[derive(Clone)]
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

    fn current(&self) -> Current {
        let current = self.0.read().unwrap_or_else(PoisonError::into_inner);
        // Set before the service is handed out; an empty router answers 404 otherwise.
        current.clone().unwrap_or_else(|| Current {
            router: Router::new(),
            proxy: None,
            body_timeout: Duration::from_secs(60),
        })
    }
}

impl Service<Request<Incoming>> for Live {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Either<RouteFuture<Infallible>, Oneshot<ProxyService, Request<Body>>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // An axum router is always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        let Current {
            mut router,
            proxy,
            body_timeout,
        } = self.current();
        // Armed only while the body waits for the client: a body already received costs no
        // timer.
        let req = req.map(|b| Body::new(IdleTimeoutBody::new(b, body_timeout)));
        match proxy {
            Some(proxy) if req.method() == Method::POST && is_proxy_path(req.uri().path()) => {
                Either::Right(proxy.oneshot(req))
            }
            _ => Either::Left(router.call(req)),
        }
    }
}
