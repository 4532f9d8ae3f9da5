//! The writer's wait before it reopens a broken file: what each outcome does to it.
//!
//! The first failed commit waits the configured first back-off; each failed reopen doubles the
//! wait, up to [`MAX_REOPEN_BACKOFF`]. A reopen that passes its probe puts the store on
//! probation: a disk that is still full can pass the probe (the file has a few free pages)
//! and then fail the next real write, and that failure doubles the wait too, so such a disk
//! is not retried at the first back-off for ever. The first commit after a reopen ends the
//! probation and brings the wait back to the first back-off.

use std::time::Duration;

use super::MAX_REOPEN_BACKOFF;

/// The writer's reopen wait and whether it is on probation (see the [module docs](self)).
#[derive(Debug, Clone)]
pub(super) struct ReopenBackoff {
    first: Duration,
    current: Duration,
    on_probation: bool,
}

impl ReopenBackoff {
    /// A store that works, whose first wait after a failure is `first`.
    pub(super) fn new(first: Duration) -> Self {
        Self {
            first,
            current: first,
            on_probation: false,
        }
    }

    /// A commit failed: the wait before the file is reopened (doubled on probation).
    pub(super) fn commit_failed(&mut self) -> Duration {
        if self.on_probation {
            self.double();
        }
        self.current
    }

    /// A reopen (or its probe) failed: the doubled wait before the next attempt.
    pub(super) fn reopen_failed(&mut self) -> Duration {
        self.double();
        self.current
    }

    /// The file was reopened and passed its probe: on probation until a commit succeeds.
    pub(super) fn reopened(&mut self) {
        self.on_probation = true;
    }

    /// A commit succeeded: after a reopen, the probation ends and the wait starts over.
    pub(super) fn committed(&mut self) {
        if self.on_probation {
            self.on_probation = false;
            self.current = self.first;
        }
    }

    fn double(&mut self) {
        self.current = (self.current * 2).clamp(Duration::from_millis(1), MAX_REOPEN_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const FIRST: Duration = Duration::from_secs(1);

    #[test]
    fn a_disk_that_passes_the_probe_but_fails_the_write_waits_longer_each_time() {
        let mut b = ReopenBackoff::new(FIRST);
        assert_eq!(b.commit_failed(), FIRST);
        // Still full: the probe fails.
        assert_eq!(b.reopen_failed(), 2 * FIRST);
        // The probe passes (a few free pages), the next real write does not: doubled.
        b.reopened();
        assert_eq!(b.commit_failed(), 4 * FIRST);
        b.reopened();
        assert_eq!(b.commit_failed(), 8 * FIRST);
        // Room at last: a commit after the reopen starts the wait over.
        b.reopened();
        b.committed();
        assert_eq!(b.commit_failed(), FIRST);
    }

    #[test]
    fn a_commit_on_a_store_that_works_changes_nothing() {
        let mut b = ReopenBackoff::new(FIRST);
        b.committed();
        assert_eq!(b.commit_failed(), FIRST);
        // A failure outside probation does not double: the store had been working.
        b.committed();
        assert_eq!(b.commit_failed(), FIRST);
    }

    #[derive(Debug, Clone, Copy)]
    enum Event {
        CommitFailed,
        ReopenFailed,
        Reopened,
        Committed,
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            Just(Event::CommitFailed),
            Just(Event::ReopenFailed),
            Just(Event::Reopened),
            Just(Event::Committed),
        ]
    }

    proptest! {
        /// Every wait stays between the first back-off and the ceiling, and a commit after a
        /// reopen always brings the next wait back to the first back-off.
        #[test]
        fn waits_stay_bounded_and_start_over(
            first_ms in 1u64..5_000,
            events in proptest::collection::vec(event(), 0..200),
        ) {
            let first = Duration::from_millis(first_ms);
            let mut b = ReopenBackoff::new(first);
            let mut reset = false;
            for e in events {
                let wait = match e {
                    Event::CommitFailed => Some(b.commit_failed()),
                    Event::ReopenFailed => Some(b.reopen_failed()),
                    Event::Reopened => { b.reopened(); reset = false; None }
                    Event::Committed => { reset = b.on_probation; b.committed(); None }
                };
                if let Some(wait) = wait {
                    prop_assert!(wait >= first && wait <= MAX_REOPEN_BACKOFF.max(first));
                    if reset && matches!(e, Event::CommitFailed) {
                        prop_assert_eq!(wait, first);
                    }
                    reset = false;
                }
            }
        }
    }
}
