//! Tenant derivation with a memo: the tenant is a hash of the inbound credential, needed on
//! every relayed request, while a gateway sees few distinct credentials.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use context_relay_core::session;
use http::HeaderMap;

use crate::extensions::Tenant;

/// Distinct credentials remembered before the memo starts over.
const MAX_ENTRIES: usize = 4096;

/// Memoised [`session::tenant`], shared by every request of a relay. It is keyed on
/// [`session::credential`], exactly what the derivation reads, so two requests share a memo
/// entry only when they would derive the same tenant.
#[derive(Debug, Default)]
pub(crate) struct TenantMemo {
    // foldhash: SipHash's DoS resistance buys nothing here (the map is bounded and cleared)
    // and costs more than the rest of the look-up.
    map: RwLock<HashMap<Box<[u8]>, Arc<str>, foldhash::fast::RandomState>>,
}

impl TenantMemo {
    /// The request's tenant: its [`Tenant`] extension, else derived from its credential.
    pub(crate) fn tenant(&self, given: Option<&Tenant>, headers: &HeaderMap) -> Arc<str> {
        if let Some(t) = given {
            return t.0.clone();
        }
        // Never empty when present: the empty key stands for "no credential" (anonymous).
        let key = session::credential(headers).unwrap_or_default();
        if let Ok(map) = self.map.read()
            && let Some(t) = map.get(key)
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
            map.insert(Box::from(key), tenant.clone());
        }
        tenant
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

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
            vec![("x-goog-api-key", "AIza-one")],
            vec![("x-goog-api-key", "AIza-two")],
            vec![("authorization", "Bearer"), ("x-goog-api-key", "AIza-one")],
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
    fn gemini_keys_are_distinct_tenants() {
        let memo = TenantMemo::default();
        let mut a = HeaderMap::new();
        a.insert("x-goog-api-key", HeaderValue::from_static("AIza-one"));
        let mut b = HeaderMap::new();
        b.insert("x-goog-api-key", HeaderValue::from_static("AIza-two"));
        assert_eq!(&*memo.tenant(None, &a), session::tenant(&a));
        assert_eq!(&*memo.tenant(None, &b), session::tenant(&b));
        assert_ne!(memo.tenant(None, &a), memo.tenant(None, &b));
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
