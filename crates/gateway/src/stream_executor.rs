//! The executor hyper's HTTP/2 server spawns each stream's task on (the task that sends a
//! response): every such task is bounded by `request_timeout_secs`, plus a second.
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
use std::time::Duration;

/// Spawns hyper's HTTP/2 stream tasks on tokio, each bounded in time (see the module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamExecutor {
    limit: Duration,
}

impl StreamExecutor {
    /// An executor whose tasks end at `request_timeout` plus a second of grace.
    pub(crate) fn new(request_timeout: Duration) -> Self {
        Self {
            limit: request_timeout.saturating_add(GRACE),
        }
    }
}

/// How long after the request deadline a stream that was never cut by its body is dropped.
const GRACE: Duration = Duration::from_secs(1);

impl<F> hyper::rt::Executor<F> for StreamExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        let limit = self.limit;
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
    }
}
