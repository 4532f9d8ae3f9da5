//! [`forward_handoff_store!`](crate::forward_handoff_store): the methods of a
//! `HandoffStore` a test's wrapper does not change, forwarded to the store it wraps.
//!
//! A test double that changes one or two operations (fails them, stalls them, notes them)
//! writes those and forwards the rest by name:
//!
//! ```ignore
//! struct OfferStalls(MemoryStore);
//!
//! impl HandoffStore for OfferStalls {
//!     fn offer(&self, _: HandoffRecord) -> StoreFuture<'_, bool> {
//!         Box::pin(std::future::pending())
//!     }
//!     context_relay_testkit::forward_handoff_store!(0: upsert, get, contains, may_contain,
//!         claim, complete, release, delete, purge_expired, list, affinity, cached_affinity,
//!         set_affinity, backend);
//! }
//! ```
//!
//! The expansion names `context_relay_core` and `context_relay_store`, which the calling
//! crate has (this crate does not depend on the store).

/// Forwards the named `HandoffStore` methods to the field `$field` (see the module docs).
#[macro_export]
macro_rules! forward_handoff_store {
    ($field:tt: $($method:ident),* $(,)?) => {
        $( $crate::forward_handoff_store!(@ $field $method); )*
    };
    (@ $f:tt upsert) => {
        fn upsert(
            &self,
            record: context_relay_core::HandoffRecord,
        ) -> context_relay_store::StoreFuture<'_, ()> {
            self.$f.upsert(record)
        }
    };
    (@ $f:tt offer) => {
        fn offer(
            &self,
            record: context_relay_core::HandoffRecord,
        ) -> context_relay_store::StoreFuture<'_, bool> {
            self.$f.offer(record)
        }
    };
    (@ $f:tt offer_at_switch) => {
        fn offer_at_switch(
            &self,
            record: context_relay_core::HandoffRecord,
        ) -> context_relay_store::StoreFuture<'_, bool> {
            self.$f.offer_at_switch(record)
        }
    };
    (@ $f:tt get) => {
        fn get<'a>(
            &'a self,
            key: &'a context_relay_core::HandoffKey,
        ) -> context_relay_store::StoreFuture<'a, Option<context_relay_core::HandoffRecord>> {
            self.$f.get(key)
        }
    };
    (@ $f:tt contains) => {
        fn contains<'a>(
            &'a self,
            key: &'a context_relay_core::HandoffKey,
        ) -> context_relay_store::StoreFuture<'a, bool> {
            self.$f.contains(key)
        }
    };
    (@ $f:tt may_contain) => {
        fn may_contain(&self, key: &context_relay_core::HandoffKey) -> bool {
            self.$f.may_contain(key)
        }
    };
    (@ $f:tt claim) => {
        fn claim<'a>(
            &'a self,
            key: &'a context_relay_core::HandoffKey,
            lease: std::time::Duration,
        ) -> context_relay_store::StoreFuture<'a, Option<context_relay_store::Claim>> {
            self.$f.claim(key, lease)
        }
    };
    (@ $f:tt complete) => {
        fn complete<'a>(
            &'a self,
            claim: &'a context_relay_store::Claim,
        ) -> context_relay_store::StoreFuture<'a, bool> {
            self.$f.complete(claim)
        }
    };
    (@ $f:tt release) => {
        fn release<'a>(
            &'a self,
            claim: &'a context_relay_store::Claim,
        ) -> context_relay_store::StoreFuture<'a, ()> {
            self.$f.release(claim)
        }
    };
    (@ $f:tt delete) => {
        fn delete<'a>(
            &'a self,
            key: &'a context_relay_core::HandoffKey,
        ) -> context_relay_store::StoreFuture<'a, bool> {
            self.$f.delete(key)
        }
    };
    (@ $f:tt purge_expired) => {
        fn purge_expired(&self) -> context_relay_store::StoreFuture<'_, usize> {
            self.$f.purge_expired()
        }
    };
    (@ $f:tt list) => {
        fn list<'a>(
            &'a self,
            tenant: Option<&'a str>,
            session: Option<&'a str>,
        ) -> context_relay_store::StoreFuture<'a, Vec<context_relay_core::HandoffRecord>> {
            self.$f.list(tenant, session)
        }
    };
    (@ $f:tt affinity) => {
        fn affinity<'a>(
            &'a self,
            key: &'a context_relay_core::HandoffKey,
        ) -> context_relay_store::StoreFuture<'a, Option<context_relay_store::Affinity>> {
            self.$f.affinity(key)
        }
    };
    (@ $f:tt cached_affinity) => {
        fn cached_affinity(
            &self,
            key: &context_relay_core::HandoffKey,
        ) -> Option<Option<context_relay_store::Affinity>> {
            self.$f.cached_affinity(key)
        }
    };
    (@ $f:tt set_affinity) => {
        fn set_affinity<'a>(
            &'a self,
            key: &'a context_relay_core::HandoffKey,
            affinity: context_relay_store::Affinity,
        ) -> context_relay_store::StoreFuture<'a, ()> {
            self.$f.set_affinity(key, affinity)
        }
    };
    (@ $f:tt backend) => {
        fn backend(&self) -> &'static str {
            self.$f.backend()
        }
    };
    (@ $f:tt secret) => {
        fn secret<'a>(
            &'a self,
            name: &'a str,
            candidate: [u8; 32],
        ) -> context_relay_store::StoreFuture<'a, [u8; 32]> {
            self.$f.secret(name, candidate)
        }
    };
}
