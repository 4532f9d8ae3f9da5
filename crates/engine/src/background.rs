//! Tracking of the relay's background work (summaries, claim completions, affinity writes), so
//! that tests and operators can wait for it instead of sleeping.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// A cheap, cloneable handle on the background tasks a relay spawned.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use context_relay_engine::Background;
///
/// let background = Background::new();
/// background.spawn(async { /* store a handoff */ });
/// background.idle().await; // returns once every spawned task has finished
/// assert_eq!(background.in_flight(), 0);
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Background {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    running: AtomicUsize,
    idle: Notify,
}

impl Background {
    /// A tracker with nothing running.
    pub fn new() -> Self {
        Self::default()
    }

    /// Spawns `task` on the current tokio runtime and tracks it until it ends (also when it
    /// panics or the runtime drops it).
    ///
    /// Outside a tokio runtime the task cannot run: it is dropped with a warning, and `false`
    /// is returned (the relay fails open rather than panicking in the caller's thread).
    pub fn spawn<F>(&self, task: F) -> bool
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("context-relay background task dropped: no tokio runtime");
            return false;
        };
        let token = Token::new(self.inner.clone());
        runtime.spawn(async move {
            let _token = token;
            task.await;
        });
        true
    }

    /// Number of tracked tasks still running.
    pub fn in_flight(&self) -> usize {
        self.inner.running.load(Ordering::Acquire)
    }

    /// [`idle`](Self::idle), giving up after `limit`: `true` when it became idle.
    pub async fn idle_within(&self, limit: std::time::Duration) -> bool {
        tokio::time::timeout(limit, self.idle()).await.is_ok()
    }

    /// Waits until no tracked task is running.
    ///
    /// Tasks spawned while waiting are waited for too.
    pub async fn idle(&self) {
        loop {
            let notified = self.inner.idle.notified();
            tokio::pin!(notified);
            // Register before checking, so a task ending in between is not missed.
            notified.as_mut().enable();
            if self.in_flight() == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// Counts one running task; its drop (normal end, panic or cancellation) uncounts it.
struct Token(Arc<Inner>);

impl Token {
    fn new(inner: Arc<Inner>) -> Self {
        inner.running.fetch_add(1, Ordering::AcqRel);
        Self(inner)
    }
}

impl Drop for Token {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_waits_for_every_task() {
        let bg = Background::new();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        bg.spawn(async move {
            let _ = rx.await;
        });
        assert_eq!(bg.in_flight(), 1);
        let waiter = {
            let bg = bg.clone();
            tokio::spawn(async move { bg.idle().await })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        tx.send(()).expect("task is waiting");
        waiter.await.expect("idle returns");
        assert_eq!(bg.in_flight(), 0);
    }

    #[tokio::test]
    async fn work_started_by_work_is_counted_once_and_waited_for() {
        let bg = Background::new();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let inner = bg.clone();
        bg.spawn(async move {
            // Work that starts more work before it ends.
            inner.spawn(async move {
                let _ = rx.await;
            });
        });
        let waiter = tokio::spawn({
            let bg = bg.clone();
            async move { bg.idle().await }
        });
        tokio::task::yield_now().await;
        assert_eq!(bg.in_flight(), 1, "one task, counted once");
        assert!(!bg.idle_within(std::time::Duration::from_millis(1)).await);
        tx.send(()).expect("the inner task waits");
        waiter.await.expect("idle returns");
        assert_eq!(bg.in_flight(), 0);
    }

    #[tokio::test]
    async fn panicking_task_is_uncounted() {
        let bg = Background::new();
        bg.spawn(async { panic!("boom") });
        bg.idle().await;
        assert_eq!(bg.in_flight(), 0);
    }
}
