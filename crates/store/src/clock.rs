//! Where the stores read the time, so that expiry and lease tests can move time by hand.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use context_relay_core::time::{from_unix_millis, to_unix_millis};

/// A source of the current wall-clock time.
///
/// Stores compare record expiries and lease ends (stored as Unix milliseconds) against it.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> SystemTime;
}

/// The system clock ([`SystemTime::now`]); the default of every store.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that moves only when told to: lease and expiry tests run without sleeping.
///
/// Millisecond resolution, like the stored times.
#[derive(Debug)]
pub struct ManualClock {
    millis: AtomicU64,
}

impl ManualClock {
    /// A clock standing at `start` (truncated to the millisecond).
    pub fn new(start: SystemTime) -> Self {
        Self {
            millis: AtomicU64::new(to_unix_millis(start)),
        }
    }

    /// A clock standing at the current system time.
    pub fn starting_now() -> Self {
        Self::new(SystemTime::now())
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.millis
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |m| {
                Some(m.saturating_add(ms))
            })
            .ok();
    }

    /// Sets the clock to `to`.
    pub fn set(&self, to: SystemTime) {
        self.millis.store(to_unix_millis(to), Ordering::Release);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        from_unix_millis(self.millis.load(Ordering::Acquire))
    }
}

/// `now` in Unix milliseconds, the unit records and leases are kept in.
pub(crate) fn now_ms(clock: &dyn Clock) -> u64 {
    to_unix_millis(clock.now())
}

/// `now + d` in Unix milliseconds, saturating.
pub(crate) fn after_ms(now_ms: u64, d: Duration) -> u64 {
    now_ms.saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let clock = ManualClock::new(start);
        assert_eq!(clock.now(), start);
        clock.advance(Duration::from_millis(1_500));
        assert_eq!(clock.now(), start + Duration::from_millis(1_500));
        clock.set(start);
        assert_eq!(clock.now(), start);
    }

    #[test]
    fn after_ms_saturates() {
        assert_eq!(after_ms(u64::MAX - 1, Duration::from_secs(10)), u64::MAX);
        assert_eq!(after_ms(5, Duration::from_millis(7)), 12);
    }
}
