//! Every backend: an offered handoff never replaces one a request is carrying (leased), so a
//! second handoff of a conversation built at the same moment is dropped, not injected too.

#[macro_use]
mod common;

use std::time::Duration;

use common::Harness;
use context_relay_core::HandoffKey;

const HOUR: Duration = Duration::from_secs(3600);
const LEASE: Duration = Duration::from_secs(30);

mod cases {
    use super::*;

    pub(super) async fn an_offer_never_replaces_a_leased_record(h: &Harness) {
        let k = HandoffKey::new("acme", "s1", "codex-relay");
        assert!(h.store.offer(h.record(&k, "first", HOUR)).await.unwrap());
        let second = h.record(&k, "second", HOUR);
        assert!(h.store.offer(second.clone()).await.unwrap(), "not leased");
        assert_eq!(h.store.get(&k).await.unwrap(), Some(second.clone()));

        let claim = h.store.claim(&k, LEASE).await.unwrap().expect("live");
        assert!(!h.store.offer(h.record(&k, "third", HOUR)).await.unwrap());
        assert_eq!(h.store.get(&k).await.unwrap(), Some(second));
        assert!(h.store.complete(&claim).await.unwrap(), "the carried one");
        assert_eq!(h.store.get(&k).await.unwrap(), None);

        // Given back, or its lease run out: an offer replaces it again.
        assert!(h.store.offer(h.record(&k, "fourth", HOUR)).await.unwrap());
        let claim = h.store.claim(&k, LEASE).await.unwrap().expect("live");
        h.store.release(&claim).await.unwrap();
        assert!(h.store.offer(h.record(&k, "fifth", HOUR)).await.unwrap());
        h.store.claim(&k, LEASE).await.unwrap().expect("live");
        h.clock.advance(LEASE + Duration::from_secs(1));
        let sixth = h.record(&k, "sixth", HOUR);
        assert!(h.store.offer(sixth.clone()).await.unwrap());
        assert_eq!(h.store.get(&k).await.unwrap(), Some(sixth));

        // A lease that outlives its record: the record is gone, the offer stores.
        let short = HandoffKey::new("acme", "s2", "codex-relay");
        let brief = h.record(&short, "brief", Duration::from_secs(10));
        assert!(h.store.offer(brief).await.unwrap());
        h.store.claim(&short, LEASE).await.unwrap().expect("live");
        h.clock.advance(Duration::from_secs(11));
        assert!(
            h.store
                .offer(h.record(&short, "after", HOUR))
                .await
                .unwrap()
        );
    }
}

conformance!(an_offer_never_replaces_a_leased_record);
