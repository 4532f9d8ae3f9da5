//! An affinity look-up on the request path allocates nothing.
//!
//! A counting allocator (test-only, its own test binary): counts the allocations made on the
//! thread that asked for counting.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use context_relay_core::HandoffKey;
use context_relay_store::{Affinity, HandoffStore, MemoryStore};

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn allocations(f: impl FnOnce()) -> usize {
    COUNT.with(|c| c.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    COUNT.with(Cell::get)
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
