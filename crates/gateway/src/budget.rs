//! The global budget of buffered request bytes (`[limits] max_buffered_bytes`).
//!
//! Every request body the gateway buffers (to route it, read its session, rewrite it) takes
//! its bytes from one shared budget while it is held, so that many large bodies at once cannot
//! exhaust memory: 500 concurrent 8 MiB bodies would otherwise hold 4 GiB, and more once
//! decompressed. A request that finds the budget spent gets a 503 with `retry-after`.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// See the [module docs](self). Clones share the budget.
#[derive(Debug, Clone)]
pub(crate) struct ByteBudget {
    bytes: Option<Arc<Semaphore>>,
    /// The whole budget: what a request could hold if it were alone.
    total: usize,
}

impl ByteBudget {
    /// A budget of `bytes` (capped at what a semaphore can count, about 2^61).
    pub(crate) fn new(bytes: u64) -> Self {
        let permits = usize::try_from(bytes)
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        Self {
            bytes: Some(Arc::new(Semaphore::new(permits))),
            total: permits,
        }
    }

    /// No budget: every take succeeds.
    pub(crate) fn unlimited() -> Self {
        Self {
            bytes: None,
            total: usize::MAX,
        }
    }

    /// An empty hold on this budget; bytes taken through it return when it drops.
    pub(crate) fn hold(&self) -> BudgetHold {
        BudgetHold {
            budget: self.bytes.clone(),
            permit: None,
            total: self.total,
            never: false,
        }
    }
}

impl Default for ByteBudget {
    fn default() -> Self {
        Self::unlimited()
    }
}

/// Bytes held from a [`ByteBudget`] by one request.
#[derive(Debug)]
pub(crate) struct BudgetHold {
    budget: Option<Arc<Semaphore>>,
    permit: Option<OwnedSemaphorePermit>,
    /// The whole budget.
    total: usize,
    /// A take failed that no wait could satisfy: what the request holds and asked for is
    /// more than the whole budget.
    never: bool,
}

impl BudgetHold {
    /// The bytes this hold has taken.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.permit
            .as_ref()
            .map_or(0, OwnedSemaphorePermit::num_permits)
    }

    /// Gives `n` of the bytes taken back to the budget (all of them when fewer are held).
    pub(crate) fn release(&mut self, n: usize) {
        let Some(held) = &mut self.permit else {
            return;
        };
        if n >= held.num_permits() {
            self.permit = None;
        } else {
            drop(held.split(n));
        }
    }

    /// Whether the last refused [`take`](Self::take) could never succeed: the request would
    /// hold more than the whole budget, so waiting for other requests' bytes cannot help.
    pub(crate) fn never_fits(&self) -> bool {
        self.never
    }

    /// Takes `n` more bytes; `false` (and nothing taken) when the budget has not that many left.
    pub(crate) fn take(&mut self, n: usize) -> bool {
        self.take_within(n, n)
    }

    /// [`take`](Self::take) of `n` bytes of which the request needs only `needed` (a buffer's
    /// capacity and its length): only what it needs decides whether it could ever fit.
    pub(crate) fn take_within(&mut self, n: usize, needed: usize) -> bool {
        let Some(budget) = &self.budget else {
            return true;
        };
        if n == 0 {
            return true;
        }
        let held = self
            .permit
            .as_ref()
            .map_or(0, OwnedSemaphorePermit::num_permits);
        let Ok(n) = u32::try_from(n) else {
            self.never = true;
            return false;
        };
        match budget.clone().try_acquire_many_owned(n) {
            Ok(p) => {
                match &mut self.permit {
                    Some(held) => held.merge(p),
                    None => self.permit = Some(p),
                }
                true
            }
            Err(_) => {
                self.never = held.saturating_add(needed.min(n as usize)) > self.total;
                metrics::counter!("context_relay_gateway_budget_exhausted_total").increment(1);
                false
            }
        }
    }
}

#[cfg(test)]
mod examples {
    #[test]
    fn module_example() {
        use crate::budget::ByteBudget;
        let budget = ByteBudget::new(100);
        let mut a = budget.hold();
        assert!(a.take(60));
        let mut b = budget.hold();
        assert!(!b.take(60), "only 40 bytes are left");
        assert!(!b.never_fits(), "60 bytes fit once the others are back");
        drop(a);
        assert!(b.take(60));
        // 60 held and 50 more: more than the whole budget, whoever else holds what.
        assert!(!b.take(50));
        assert!(b.never_fits());
        // A buffer of 100 bytes' capacity holding 30: refused now, but what it needs fits.
        let mut c = budget.hold();
        assert!(!c.take_within(100, 30));
        assert!(!c.never_fits());
    }
}
