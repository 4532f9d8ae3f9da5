//! A waker that counts its wakes, for tests that poll a future or a body by hand.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Wake, Waker};

/// Counts the wakes of the [`Waker`] it makes.
#[derive(Debug, Default)]
pub struct CountingWaker(AtomicUsize);

impl CountingWaker {
    /// A waker and the count of its wakes.
    ///
    /// ```
    /// let (waker, woken) = context_relay_testkit::waker::CountingWaker::new();
    /// waker.wake_by_ref();
    /// assert_eq!(woken.wakes(), 1);
    /// ```
    pub fn new() -> (Waker, Arc<Self>) {
        let counter = Arc::new(Self::default());
        (Waker::from(counter.clone()), counter)
    }

    /// How many times the waker was woken.
    pub fn wakes(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}
