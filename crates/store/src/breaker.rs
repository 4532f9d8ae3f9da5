//! A circuit breaker for a store: after a failure the store is left alone for a back-off
//! (every call fails at once), so an unreachable server (or a store that stopped answering)
//! costs one timeout, not one per call. The Redis store keeps one for its server; the relay
//! keeps one over any store for the calls a request waits for.
//!
//! Closed → a call fails (timeout, refused or dropped connection) → open for `min` → the next
//! call after that is the one trial: success closes the breaker, failure opens it again for
//! twice as long (at most `max`). While the trial runs (up to its own time limit) every other
//! call still fails at once, so only one request waits on a server that may still be down.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// See the [module docs](self).
///
/// ```
/// use std::time::{Duration, Instant};
/// use context_relay_store::breaker::{Breaker, Pass};
///
/// let b = Breaker::new("redb", Duration::from_secs(1), Duration::from_secs(60));
/// let t0 = Instant::now();
/// assert_eq!(b.check(t0, Duration::from_secs(3)), Ok(Pass::Closed));
/// b.failure(t0, Pass::Closed);
/// assert!(b.check(t0, Duration::from_secs(3)).is_err(), "left alone for a second");
/// let later = t0 + Duration::from_secs(1);
/// assert_eq!(b.check(later, Duration::from_secs(3)), Ok(Pass::Trial));
/// b.success(Pass::Trial);
/// assert_eq!(b.check(later, Duration::from_secs(3)), Ok(Pass::Closed));
/// ```
#[derive(Debug)]
pub struct Breaker {
    state: Mutex<State>,
    /// Whether a failure opened it since the last success: a closed breaker is checked and
    /// told of successes without taking the lock.
    tripped: AtomicBool,
    /// The store's name, in the log and the metric's `backend` label.
    name: &'static str,
    min: Duration,
    max: Duration,
}

#[derive(Debug)]
struct State {
    open_until: Option<Instant>,
    backoff: Duration,
}

/// What [`Breaker::check`] lets a call do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// The breaker is closed.
    Closed,
    /// The back-off is over and this call is the one trial.
    Trial,
}

impl Breaker {
    /// A closed breaker for the store `name`, whose back-off starts at `min` and doubles up to
    /// `max`.
    pub fn new(name: &'static str, min: Duration, max: Duration) -> Self {
        Self {
            state: Mutex::new(State {
                open_until: None,
                backoff: min,
            }),
            tripped: AtomicBool::new(false),
            name,
            min,
            max: max.max(min),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `Err(remaining)` while open. The first call after the back-off gets [`Pass::Trial`] and
    /// keeps the breaker open for the others for `trial_limit` (the trial's time limit), after
    /// which, should the trial end neither in success nor in failure, another call gets a trial.
    pub fn check(&self, now: Instant, trial_limit: Duration) -> Result<Pass, Duration> {
        if !self.tripped.load(Ordering::Acquire) {
            return Ok(Pass::Closed);
        }
        let mut s = self.lock();
        match s.open_until {
            None => Ok(Pass::Closed),
            Some(until) if now < until => Err(until - now),
            Some(_) => {
                s.open_until = Some(now + trial_limit);
                Ok(Pass::Trial)
            }
        }
    }

    /// Whether calls are refused right now (a trial running counts as open).
    pub fn is_open(&self, now: Instant) -> bool {
        self.tripped.load(Ordering::Acquire)
            && self.lock().open_until.is_some_and(|until| now < until)
    }

    /// Whether the breaker is closed (no failure since the last success), without the lock or
    /// the clock: the common case of [`check`](Self::check).
    pub fn is_closed(&self) -> bool {
        !self.tripped.load(Ordering::Acquire)
    }

    /// A call the breaker let through as `pass` was answered: a trial's answer closes it (a
    /// call let through before it opened says nothing of the store since).
    pub fn success(&self, pass: Pass) {
        if self.is_closed() || pass == Pass::Closed {
            return;
        }
        let mut s = self.lock();
        if s.open_until.is_some() {
            tracing::info!(
                store = self.name,
                "handoff store answers again; back in use"
            );
        }
        s.open_until = None;
        s.backoff = self.min;
        self.tripped.store(false, Ordering::Release);
    }

    /// A call that [`check`](Self::check) let through as `pass` failed for the connection's sake
    /// (or was not answered in time).
    pub fn failure(&self, now: Instant, pass: Pass) {
        let mut s = self.lock();
        if pass == Pass::Closed && s.open_until.is_some_and(|until| now < until) {
            // Another call already opened it, or the trial is running.
            return;
        }
        let backoff = s.backoff;
        s.open_until = Some(now + backoff);
        s.backoff = (backoff * 2).min(self.max);
        self.tripped.store(true, Ordering::Release);
        drop(s);
        metrics::counter!("context_relay_store_breaker_opened_total", "backend" => self.name)
            .increment(1);
        tracing::warn!(
            store = self.name,
            ?backoff,
            "handoff store unreachable; the relay passes requests through until it answers again"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Runs the trial the breaker grants at `now` and fails it.
    fn failed_trial(b: &Breaker, now: Instant) {
        assert_eq!(b.check(now, 10 * MS), Ok(Pass::Trial));
        b.failure(now + MS, Pass::Trial);
    }

    #[test]
    fn opens_backs_off_and_closes() {
        let b = Breaker::new("test", 100 * MS, 300 * MS);
        let t0 = Instant::now();
        assert_eq!(b.check(t0, 10 * MS), Ok(Pass::Closed));
        b.failure(t0, Pass::Closed);
        assert!(b.is_open(t0 + 99 * MS));
        assert!(!b.is_open(t0 + 100 * MS));
        // The trial fails: twice as long.
        let t1 = t0 + 100 * MS;
        failed_trial(&b, t1);
        assert!(b.is_open(t1 + MS + 199 * MS));
        assert!(!b.is_open(t1 + MS + 200 * MS));
        // Capped at max.
        let t2 = t1 + MS + 200 * MS;
        failed_trial(&b, t2);
        let t3 = t2 + MS + 300 * MS;
        assert!(!b.is_open(t3));
        failed_trial(&b, t3);
        assert!(!b.is_open(t3 + MS + 300 * MS));
        b.success(Pass::Trial);
        assert_eq!(b.check(t3, 10 * MS), Ok(Pass::Closed));
        b.failure(t3, Pass::Closed);
        assert!(!b.is_open(t3 + 100 * MS), "back to min");
    }

    #[test]
    fn one_trial_after_the_backoff() {
        let b = Breaker::new("test", 100 * MS, 300 * MS);
        let t0 = Instant::now();
        b.failure(t0, Pass::Closed);
        // A call let through before it opened and answered now does not close it.
        b.success(Pass::Closed);
        assert!(b.is_open(t0 + 50 * MS) && !b.is_closed());
        let t1 = t0 + 100 * MS;
        assert_eq!(b.check(t1, 40 * MS), Ok(Pass::Trial));
        // Everyone else fails at once while the trial runs.
        for i in 0..5 {
            assert_eq!(b.check(t1 + i * MS, 40 * MS), Err((40 - i) * MS));
        }
        // A call that started before the breaker opened and fails now does not end the trial.
        b.failure(t1 + 5 * MS, Pass::Closed);
        assert_eq!(b.check(t1 + 6 * MS, 40 * MS), Err(34 * MS));
        b.success(Pass::Trial);
        assert_eq!(b.check(t1 + 7 * MS, 40 * MS), Ok(Pass::Closed));
    }

    #[test]
    fn a_trial_failing_fast_doubles_the_backoff() {
        let b = Breaker::new("test", 100 * MS, 1000 * MS);
        let t0 = Instant::now();
        b.failure(t0, Pass::Closed);
        let t1 = t0 + 100 * MS;
        assert_eq!(b.check(t1, 40 * MS), Ok(Pass::Trial));
        // Refused at once, well inside the trial's time limit.
        b.failure(t1 + MS, Pass::Trial);
        assert!(b.is_open(t1 + MS + 199 * MS));
        assert!(!b.is_open(t1 + MS + 200 * MS));
    }

    #[test]
    fn a_trial_that_never_reports_is_followed_by_another() {
        let b = Breaker::new("test", 100 * MS, 300 * MS);
        let t0 = Instant::now();
        b.failure(t0, Pass::Closed);
        let t1 = t0 + 100 * MS;
        assert_eq!(b.check(t1, 40 * MS), Ok(Pass::Trial));
        // The trial ends in an error that says nothing about the connection.
        assert!(b.check(t1 + 39 * MS, 40 * MS).is_err());
        assert_eq!(b.check(t1 + 40 * MS, 40 * MS), Ok(Pass::Trial));
    }
}
