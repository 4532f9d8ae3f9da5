//! An affinity look-up on the request path allocates nothing.
//!
//! Counted with an instrumented system allocator (test-only, its own test binary). The counts
//! are process-wide: the test runs alone in this binary, on a current-thread runtime, so every
//! allocation counted is one made by the look-ups.

use std::alloc::System;

use context_relay_core::HandoffKey;
use context_relay_store::{Affinity, HandoffStore, MemoryStore};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Allocations and reallocations made while `f` runs.
fn allocations(f: impl FnOnce()) -> usize {
    let region = Region::new(GLOBAL);
    f();
    let change = region.change();
    change.allocations + change.reallocations
}

#[tokio::test(flavor = "current_thread")]
async fn cached_affinity_allocates_nothing() {
    let store = MemoryStore::new();
    let known = HandoffKey::new("tenant-1", "session-with-a-long-id-0001", "codex-relay");
    let unknown = HandoffKey::new("tenant-1", "session-with-a-long-id-0002", "codex-relay");
    store
        .set_affinity(&known, Affinity::new("codex", "acct-a"))
        .await
        .expect("memory store");
    // Warm up (the per-thread key buffer grows once).
    assert!(store.cached_affinity(&known).is_some_and(|a| a.is_some()));
    let n = allocations(|| {
        for _ in 0..100 {
            assert!(matches!(store.cached_affinity(&known), Some(Some(_))));
            assert!(matches!(store.cached_affinity(&unknown), Some(None)));
        }
    });
    assert_eq!(n, 0, "allocations in 200 affinity look-ups");
}
