//! Record versions, lease tokens and generation tokens: numbers no other write of the same key
//! is given, made by the writer instead of a shared counter in Redis (on a cluster a script may
//! touch only the slot of its key, so one counter for every key cannot exist).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::StoreError;

/// Distinct numbers: a random start for this process, then one more each time. Two processes
/// collide only when their ranges overlap, about once in 2^64 / (numbers drawn) starts.
pub(super) struct Ids {
    start: u64,
    next: AtomicU64,
}

impl Ids {
    pub(super) fn new() -> Result<Self, StoreError> {
        let start = getrandom::u64().map_err(|e| StoreError::Redis {
            op: "connect",
            reason: format!("no random numbers for record versions: {e}"),
        })?;
        Ok(Self {
            start,
            next: AtomicU64::new(0),
        })
    }

    /// A number this process never gave before.
    pub(super) fn fresh(&self) -> u64 {
        self.start
            .wrapping_add(self.next.fetch_add(1, Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_distinct_in_a_process_and_across_processes() {
        let (a, b) = (Ids::new().unwrap(), Ids::new().unwrap());
        let (x, y) = (a.fresh(), a.fresh());
        assert_ne!(x, y);
        // Two starts are random: equal ones are a one-in-2^64 event.
        assert_ne!(a.start, b.start);
    }
}
