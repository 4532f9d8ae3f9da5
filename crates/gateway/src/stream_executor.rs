//! The executor hyper's HTTP/2 server spawns each stream's task on (the task that sends a
//! response): every such task is bounded by `request_timeout_secs`, plus a second. The bound
//! follows a configuration reload, as the request deadline does: a stream takes the value in
//! force when it starts.
//!
//! The request deadline is otherwise kept by the response body ([`crate::deadline`]), which
//! sees time pass only when it is polled. A stream whose flow-control window the client keeps
//! shut is never polled: without this bound it would hold its provider stream (and the
//! provider account's concurrency) until the client closed the connection. Dropping the task
//! resets the stream (`RST_STREAM`) and drops its body, hence the provider's stream. The
//! second of grace lets the body's own deadline cut a stream that is being polled first, as
//! on HTTP/1. HTTP/1 connections spawn nothing: their response is written by the connection
//! itself, whose writes are bounded by `client_write_timeout_secs`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Spawns hyper's HTTP/2 stream tasks on tokio, each bounded in time (see the module docs).
/// Clones share the bound: [`set`](Self::set) on one applies to the streams all of them start
/// from then on.
#[derive(Debug, Clone)]
pub(crate) struct StreamExecutor {
    /// `request_timeout_secs` in milliseconds.
    request_timeout_ms: Arc<AtomicU64>,
}

impl StreamExecutor {
    /// An executor whose tasks end at `request_timeout` plus a second of grace.
    pub(crate) fn new(request_timeout: Duration) -> Self {
        let executor = Self {
            request_timeout_ms: Arc::new(AtomicU64::new(0)),
        };
        executor.set(request_timeout);
        executor
    }

    /// Bounds the streams started from now on by `request_timeout` plus a second.
    pub(crate) fn set(&self, request_timeout: Duration) {
        let ms = u64::try_from(request_timeout.as_millis()).unwrap_or(u64::MAX);
        self.request_timeout_ms.store(ms, Ordering::Relaxed);
    }

    fn limit(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms.load(Ordering::Relaxed)).saturating_add(GRACE)
    }
}

/// Clones are equal: they share one bound.
impl PartialEq for StreamExecutor {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.request_timeout_ms, &other.request_timeout_ms)
    }
}

impl Eq for StreamExecutor {}

/// How long after the request deadline a stream that was never cut by its body is dropped.
const GRACE: Duration = Duration::from_secs(1);

impl<F> hyper::rt::Executor<F> for StreamExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        let limit = self.limit();
        tokio::spawn(async move {
            if tokio::time::timeout(limit, fut).await.is_err() {
                tracing::warn!(
                    after = ?limit,
                    "an HTTP/2 stream outlived request_timeout_secs without its response being read (its flow-control window stayed shut); it was reset"
                );
                metrics::counter!("context_relay_gateway_request_deadline_total", "phase" => "body")
                    .increment(1);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use hyper::rt::Executor;

    use super::*;

    /// A task past its bound is dropped (what resets its stream); one that ends in time runs
    /// to its end.
    #[tokio::test(start_paused = true)]
    async fn a_task_is_dropped_at_its_bound() {
        let executor = StreamExecutor::new(Duration::from_secs(2));
        let (finished, dropped) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        struct OnDrop(Arc<AtomicBool>);
        impl Drop for OnDrop {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let guard = OnDrop(dropped.clone());
        executor.execute(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        let done = finished.clone();
        executor.execute(async move {
            tokio::time::sleep(Duration::from_millis(2_500)).await;
            done.store(true, Ordering::SeqCst);
        });
        tokio::time::sleep(Duration::from_millis(2_900)).await;
        assert!(
            !dropped.load(Ordering::SeqCst),
            "dropped before the grace ran out"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(dropped.load(Ordering::SeqCst), "kept past its bound");
        assert!(
            finished.load(Ordering::SeqCst),
            "a task within its bound was cut"
        );

        // A new bound applies to the streams started after it, through every clone.
        let clone = executor.clone();
        executor.set(Duration::from_secs(10));
        let kept = Arc::new(AtomicBool::new(false));
        let guard = OnDrop(kept.clone());
        clone.execute(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!kept.load(Ordering::SeqCst), "the old bound was applied");
        tokio::time::sleep(Duration::from_secs(7)).await;
        assert!(kept.load(Ordering::SeqCst), "kept past the new bound");
    }
}
