//! [`SharedService`]: a type-erased service whose clones share one instance.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use tower::ServiceExt;
use tower_service::Service;

/// The one call every clone of a [`SharedService`] shares.
type Serve<Req, Res, E> = dyn Fn(Req) -> BoxFuture<'static, Result<Res, E>> + Send + Sync;

/// A cloneable, type-erased [`Service`] whose clones share one instance.
///
/// [`tower::util::BoxCloneSyncService`] erases a stack's type too, but its `clone` boxes a
/// clone of the stack, and hyper's and the gateway's adapters clone a service for every
/// request they serve (a tower service is called through `&mut self`). [`SharedService`]
/// keeps the stack once behind an [`Arc`]: a clone is a reference-count increment, and each
/// call clones the stack (its parts are reference counts too) into the one boxed future it
/// returns. Per request that is one allocation where the boxed clone and the boxed future
/// made two.
///
/// ```
/// use std::convert::Infallible;
///
/// use context_relay_gateway::SharedService;
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let double = SharedService::new(tower::service_fn(|n: u32| async move {
///     Ok::<_, Infallible>(n * 2)
/// }));
/// // Clones share the stack; each serves on its own.
/// assert_eq!(double.clone().oneshot(21).await, Ok(42));
/// assert_eq!(double.serve(4).await, Ok(8));
/// # }
/// ```
///
/// Always ready: readiness is awaited on the stack's own clone, inside the returned future,
/// as [`ServiceExt::oneshot`] does.
pub struct SharedService<Req, Res, E> {
    serve: Arc<Serve<Req, Res, E>>,
}

impl<Req, Res, E> SharedService<Req, Res, E> {
    /// Erases `service`'s type; every call is served by a clone of it.
    pub fn new<S>(service: S) -> Self
    where
        S: Service<Req, Response = Res, Error = E> + Clone + Send + Sync + 'static,
        S::Future: Send + 'static,
        Req: Send + 'static,
    {
        Self {
            serve: Arc::new(move |req| Box::pin(service.clone().oneshot(req))),
        }
    }

    /// Serves `req` through `&self`: no clone of this handle is needed to call it.
    pub fn serve(&self, req: Req) -> BoxFuture<'static, Result<Res, E>> {
        (self.serve)(req)
    }
}

impl<Req, Res, E> Clone for SharedService<Req, Res, E> {
    fn clone(&self) -> Self {
        Self {
            serve: Arc::clone(&self.serve),
        }
    }
}

impl<Req, Res, E> fmt::Debug for SharedService<Req, Res, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedService").finish_non_exhaustive()
    }
}

impl<Req, Res, E> Service<Req> for SharedService<Req, Res, E> {
    type Response = Res;
    type Error = E;
    type Future = BoxFuture<'static, Result<Res, E>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), E>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.serve(req)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll};

    use futures_util::future::{Ready, ready};

    use super::*;

    /// Ready only on every other `poll_ready` of the same instance, and counts its calls:
    /// a wrapper that skipped readiness or served through one instance would show.
    #[derive(Clone)]
    struct Picky {
        ready: bool,
        calls: Arc<AtomicUsize>,
    }

    impl Service<u32> for Picky {
        type Response = u32;
        type Error = Infallible;
        type Future = Ready<Result<u32, Infallible>>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            if self.ready {
                return Poll::Ready(Ok(()));
            }
            self.ready = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }

        fn call(&mut self, n: u32) -> Self::Future {
            assert!(self.ready, "called before it was ready");
            self.calls.fetch_add(1, Ordering::SeqCst);
            ready(Ok(n + 1))
        }
    }

    #[tokio::test]
    async fn each_call_awaits_the_readiness_of_its_own_clone() {
        let calls = Arc::new(AtomicUsize::new(0));
        let shared = SharedService::new(Picky {
            ready: false,
            calls: calls.clone(),
        });
        let mut handle = shared.clone();
        assert_eq!(handle.ready().await.unwrap().call(1).await, Ok(2));
        assert_eq!(shared.serve(2).await, Ok(3));
        assert_eq!(shared.clone().oneshot(3).await, Ok(4));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn clones_share_one_stack() {
        let shared = SharedService::new(tower::service_fn(|n: u32| ready(Ok::<_, ()>(n))));
        let clone = shared.clone();
        assert!(Arc::ptr_eq(&shared.serve, &clone.serve));
        assert_eq!(Arc::strong_count(&shared.serve), 2);
    }
}
