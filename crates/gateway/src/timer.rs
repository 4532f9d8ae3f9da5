//! A timer for body wrappers that wait on every frame: it is polled only when it may have fired.
//!
//! A streamed response body is pending once or twice per event, and each wrapper that bounds
//! it ([`IdleTimeoutBody`](crate::idle::IdleTimeoutBody), the request deadline's body) polls
//! its timer every time so that the task is woken at the deadline. Polling a tokio [`Sleep`]
//! checks the task's budget and registers the waker again, about 130 instructions; two wrappers
//! did it about 40 times per 20-event stream. Once the timer is registered with a waker that
//! wakes the same task, polling it again learns nothing until it has fired, and whether it has
//! fired is one atomic load ([`Sleep::is_elapsed`]). [`Timer`] polls the sleep only then, or
//! when the waker changed.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::time::{Instant, Sleep, sleep_until};

pin_project_lite::pin_project! {
    /// A [`Sleep`] that remembers the waker it is registered with (see the
    /// [module docs](self)).
    #[derive(Debug)]
    pub(crate) struct Timer {
        #[pin]
        sleep: Sleep,
        // The waker of the last poll that left the sleep pending; `None` until then, after a
        // reset and once the sleep fired.
        armed: Option<Waker>,
    }
}

impl Timer {
    /// A timer due at `deadline`.
    pub(crate) fn at(deadline: Instant) -> Self {
        Self {
            sleep: sleep_until(deadline),
            armed: None,
        }
    }

    /// When the timer is due.
    pub(crate) fn deadline(&self) -> Instant {
        self.sleep.deadline()
    }

    /// Moves the timer to `deadline`; the next poll registers it again.
    pub(crate) fn reset(self: Pin<&mut Self>, deadline: Instant) {
        let this = self.project();
        *this.armed = None;
        this.sleep.reset(deadline);
    }

    /// `Ready` once the deadline has passed; otherwise the task of `cx` is woken when it does.
    // Inlined into the body wrappers that poll it on every pending poll.
    #[inline(always)]
    pub(crate) fn poll_elapsed(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        if let Some(armed) = this.armed.as_ref()
            && armed.will_wake(cx.waker())
            && !this.sleep.is_elapsed()
        {
            // Registered with this task's waker and still in the runtime's timer wheel: the
            // runtime wakes the task when it fires.
            return Poll::Pending;
        }
        match this.sleep.poll(cx) {
            Poll::Ready(()) => {
                *this.armed = None;
                Poll::Ready(())
            }
            Poll::Pending => {
                if !this.armed.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *this.armed = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

/// `fut`'s output, or `None` once `limit` has passed first: [`tokio::time::timeout`] with its
/// delay polled as a [`Timer`] (the upstream call's head waits on it a few times per request).
pub(crate) fn within<F: Future>(limit: std::time::Duration, fut: F) -> Within<F> {
    // A limit past what an `Instant` holds waits as long as tokio's own `timeout` would.
    let now = Instant::now();
    let deadline = now
        .checked_add(limit)
        .unwrap_or_else(|| now + std::time::Duration::from_secs(86_400 * 365 * 30));
    Within {
        fut,
        timer: Timer::at(deadline),
    }
}

pin_project_lite::pin_project! {
    /// The future of [`within`]: a named type, so that a future holding it need not be boxed.
    #[derive(Debug)]
    pub(crate) struct Within<F> {
        #[pin]
        fut: F,
        #[pin]
        timer: Timer,
    }
}

impl<F: Future> Future for Within<F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(out) = this.fut.poll(cx) {
            return Poll::Ready(Some(out));
        }
        this.timer.poll_elapsed(cx).map(|()| None)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;
    use std::time::Duration;

    use super::*;

    /// A waker that counts its wake-ups.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn waker() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count::default());
        (count.clone(), Waker::from(count))
    }

    /// Yields to the runtime so that its timer fires what is due.
    async fn settle() {
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_timer_polled_again_and_again_fires_once_due() {
        let (count, w) = waker();
        let mut cx = Context::from_waker(&w);
        let mut timer = std::pin::pin!(Timer::at(Instant::now() + Duration::from_secs(5)));
        for _ in 0..3 {
            assert!(timer.as_mut().poll_elapsed(&mut cx).is_pending());
        }
        tokio::time::advance(Duration::from_secs(4)).await;
        settle().await;
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        assert!(timer.as_mut().poll_elapsed(&mut cx).is_pending());
        tokio::time::advance(Duration::from_secs(2)).await;
        settle().await;
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "woken at the deadline");
        assert!(timer.as_mut().poll_elapsed(&mut cx).is_ready());
        assert!(
            timer.as_mut().poll_elapsed(&mut cx).is_ready(),
            "and stays elapsed"
        );
    }

    /// A poll from another task moves the registration to that task: the first one is no
    /// longer woken, the second is.
    #[tokio::test(start_paused = true)]
    async fn a_new_waker_is_registered() {
        let (first, w1) = waker();
        let (second, w2) = waker();
        let mut timer = std::pin::pin!(Timer::at(Instant::now() + Duration::from_secs(5)));
        assert!(
            timer
                .as_mut()
                .poll_elapsed(&mut Context::from_waker(&w1))
                .is_pending()
        );
        assert!(
            timer
                .as_mut()
                .poll_elapsed(&mut Context::from_waker(&w2))
                .is_pending()
        );
        tokio::time::advance(Duration::from_secs(6)).await;
        settle().await;
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
    }

    /// `within` gives the output of a future that ends in time, `None` for one that does not,
    /// at the limit and not before.
    #[tokio::test(start_paused = true)]
    async fn within_a_limit() {
        let limit = Duration::from_secs(5);
        assert_eq!(within(limit, async { 7 }).await, Some(7));
        let late = async {
            tokio::time::sleep(Duration::from_secs(6)).await;
            7
        };
        let start = Instant::now();
        assert_eq!(within(limit, late).await, None);
        assert_eq!(start.elapsed(), limit);
        let in_time = async {
            tokio::time::sleep(Duration::from_secs(4)).await;
            8
        };
        assert_eq!(within(limit, in_time).await, Some(8));
        // No limit an `Instant` cannot hold panics.
        assert_eq!(within(Duration::MAX, async { 9 }).await, Some(9));
    }

    /// A reset timer is due at its new deadline, not its old one, even when it was armed.
    #[tokio::test(start_paused = true)]
    async fn a_reset_timer_is_due_at_its_new_deadline() {
        let (count, w) = waker();
        let mut cx = Context::from_waker(&w);
        let start = Instant::now();
        let mut timer = std::pin::pin!(Timer::at(start + Duration::from_secs(5)));
        assert!(timer.as_mut().poll_elapsed(&mut cx).is_pending());
        timer.as_mut().reset(start + Duration::from_secs(2));
        assert_eq!(timer.deadline(), start + Duration::from_secs(2));
        assert!(timer.as_mut().poll_elapsed(&mut cx).is_pending());
        tokio::time::advance(Duration::from_secs(3)).await;
        settle().await;
        assert!(count.0.load(Ordering::SeqCst) >= 1);
        assert!(timer.as_mut().poll_elapsed(&mut cx).is_ready());
    }
}
