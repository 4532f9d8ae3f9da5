//! Tenant derivation with a memo: the tenant is a hash of the inbound credential, needed on
//! every relayed request, while a gateway sees few distinct credentials.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use context_relay_core::session;
use http::{HeaderMap, HeaderValue, header};

use crate::extensions::Tenant;

/// Distinct credentials remembered before the memo starts over.
const MAX_ENTRIES: usize = 4096;

type Credentials = (Option<HeaderValue>, Option<HeaderValue>);

/// Memoised [`session::tenant`], shared by every request of a relay.
#[derive(Debug, Default)]
pub(crate) struct TenantMemo {
    // foldhash: SipHash's DoS resistance buys nothing here (the map is bounded and cleared)
    // and costs more than the rest of the look-up.
    map: RwLock<HashMap<Credentials, Arc<str>, foldhash::fast::RandomState>>,
}

impl TenantMemo {
    /// The request's tenant: its [`Tenant`] extension, else derived from its credential.
    pub(crate) fn tenant(&self, given: Option<&Tenant>, headers: &HeaderMap) -> Arc<str> {
        if let Some(t) = given {
            return t.0.clone();
        }
        let key = (
            headers.get(header::AUTHORIZATION).cloned(),
            headers.get("x-api-key").cloned(),
        );
        if let Ok(map) = self.map.read()
            && let Some(t) = map.get(&key)
        {
            return t.clone();
        }
        let tenant: Arc<str> = Arc::from(session::tenant(headers));
        if let Ok(mut map) = self.map.write() {
            // A bound, not an LRU: a gateway has few credentials, and a flood of new ones
            // only costs re-hashing.
            if map.len() >= MAX_ENTRIES {
                map.clear();
            }
            map.insert(key, tenant.clone());
        }
        tenant
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memo_agrees_with_derivation() {
        let memo = TenantMemo::default();
        for creds in [
            vec![("authorization", "Bearer sk-one")],
            vec![("x-api-key", "sk-one")],
            vec![("authorization", "Bearer sk-two")],
            vec![],
            vec![("authorization", " "), ("x-api-key", "sk-three")],
        ] {
            let mut h = HeaderMap::new();
            for (n, v) in creds {
                h.insert(n, HeaderValue::from_static(v));
            }
            for _ in 0..2 {
                assert_eq!(&*memo.tenant(None, &h), session::tenant(&h));
            }
        }
    }

    #[test]
    fn extension_wins() {
        let memo = TenantMemo::default();
        let team = Tenant::new("team-a");
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static("Bearer sk"));
        assert_eq!(&*memo.tenant(Some(&team), &h), "team-a");
    }
}
