//! A circuit breaker for a remote store: after a failure the store is left alone for a
//! back-off (every call fails at once), so an unreachable server costs one short timeout, not
//! one per call.
//!
//! Closed → a call fails (timeout, refused or dropped connection) → open for `min` → the next
//! call after that is a trial: success closes the breaker, failure opens it again for twice as
//! long (at most `max`).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// See the [module docs](self).
#[derive(Debug)]
pub(crate) struct Breaker {
    state: Mutex<State>,
    min: Duration,
    max: Duration,
}

#[derive(Debug)]
struct State {
    open_until: Option<Instant>,
    backoff: Duration,
}

impl Breaker {
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        Self {
            state: Mutex::new(State {
                open_until: None,
                backoff: min,
            }),
            min,
            max: max.max(min),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `Err(remaining)` while open.
    pub(crate) fn check(&self, now: Instant) -> Result<(), Duration> {
        match self.lock().open_until {
            Some(until) if now < until => Err(until - now),
            _ => Ok(()),
        }
    }

    /// Whether calls are refused right now.
    pub(crate) fn is_open(&self, now: Instant) -> bool {
        self.check(now).is_err()
    }

    pub(crate) fn success(&self) {
        let mut s = self.lock();
        if s.open_until.is_some() {
            tracing::info!("redis reachable again; handoff store back in use");
        }
        s.open_until = None;
        s.backoff = self.min;
    }

    pub(crate) fn failure(&self, now: Instant) {
        let mut s = self.lock();
        if s.open_until.is_some_and(|until| now < until) {
            // Another call already opened it.
            return;
        }
        let backoff = s.backoff;
        s.open_until = Some(now + backoff);
        s.backoff = (backoff * 2).min(self.max);
        drop(s);
        metrics::counter!("context_relay_store_breaker_opened_total", "backend" => "redis")
            .increment(1);
        tracing::warn!(
            ?backoff,
            "redis unreachable; the relay passes requests through until it answers again"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_backs_off_and_closes() {
        let b = Breaker::new(Duration::from_millis(100), Duration::from_millis(300));
        let t0 = Instant::now();
        assert!(b.check(t0).is_ok());
        b.failure(t0);
        assert!(b.is_open(t0 + Duration::from_millis(99)));
        assert!(!b.is_open(t0 + Duration::from_millis(100)));
        // The trial fails: twice as long.
        let t1 = t0 + Duration::from_millis(100);
        b.failure(t1);
        assert!(b.is_open(t1 + Duration::from_millis(199)));
        assert!(!b.is_open(t1 + Duration::from_millis(200)));
        // Capped at max.
        let t2 = t1 + Duration::from_millis(200);
        b.failure(t2);
        let t3 = t2 + Duration::from_millis(300);
        assert!(!b.is_open(t3));
        b.failure(t3);
        assert!(!b.is_open(t3 + Duration::from_millis(300)));
        b.success();
        assert!(b.check(t3).is_ok());
        b.failure(t3);
        assert!(!b.is_open(t3 + Duration::from_millis(100)), "back to min");
    }
}
