//! Tenant and header session derivation with memos: both are needed on every relayed request,
//! while a gateway sees few distinct credentials and sessions. A hit costs a hash and a
//! reference count, no allocation.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use context_relay_core::session::{self, SessionSource, SessionSources};
use http::{HeaderMap, Uri};

use crate::extensions::{SessionId, Tenant};

/// Distinct credentials (or sessions) remembered before a memo starts over.
const MAX_ENTRIES: usize = 4096;
/// Longest credential the tenant memo keeps (API keys are well under it).
const MAX_KEY: usize = 256;

/// Memoised [`session::tenant_of`], shared by every request of a relay. It is keyed on
/// [`session::request_credential`], exactly what the derivation reads, so two requests share
/// a memo entry only when they would derive the same tenant. Credentials longer than
/// [`MAX_KEY`] bytes are hashed each time, never kept, so the memo's memory stays bounded.
#[derive(Debug, Default)]
pub(crate) struct TenantMemo {
    // foldhash: SipHash's DoS resistance buys nothing here (the map is bounded and cleared)
    // and costs more than the rest of the look-up.
    map: RwLock<HashMap<Box<[u8]>, Arc<str>, foldhash::fast::RandomState>>,
}

impl TenantMemo {
    /// The request's tenant: its [`Tenant`] extension, else derived from its credential.
    ///
    /// The credential is [`session::request_credential`]: a header, else a Gemini `?key=`.
    pub(crate) fn tenant(
        &self,
        given: Option<&Tenant>,
        headers: &HeaderMap,
        uri: &Uri,
    ) -> Arc<str> {
        if let Some(t) = given {
            return t.0.clone();
        }
        // Never empty when present: the empty key stands for "no credential" (anonymous).
        let credential = session::request_credential(headers, uri);
        let key: &[u8] = credential.as_deref().unwrap_or_default();
        if let Ok(map) = self.map.read()
            && let Some(t) = map.get(key)
        {
            return t.clone();
        }
        let tenant: Arc<str> = Arc::from(session::tenant_of(credential.as_deref()));
        if key.len() > MAX_KEY {
            return tenant;
        }
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

/// Whether a request has no tenant of its own: none given and no credential to derive one
/// from (every such caller is tenant `anonymous`). Its session must then be named (given, in a
/// header, or in the body's `prompt_cache_key` or `metadata.user_id`): told apart by its
/// conversation's opening alone, one caller's handoff would reach another whose conversation
/// opens the same way, so the relay leaves such a request alone. An application whose callers
/// send no key gives each its [`Tenant`] (or its [`SessionId`]).
pub(crate) fn keyless(tenant: Option<&Tenant>, headers: &HeaderMap, uri: &Uri) -> bool {
    tenant.is_none() && session::request_credential(headers, uri).is_none()
}

/// Whether `source` may key a handoff of a request that is [`keyless`] or not.
pub(crate) fn may_key(source: Option<&SessionSource>, keyless: bool) -> bool {
    !(keyless && source == Some(&SessionSource::Fingerprint))
}

/// Interned session ids: the id an explicit [`SessionId`] or a session header gives, as an
/// `Arc<str>` shared by every request of the session.
#[derive(Debug, Default)]
pub(crate) struct SessionMemo {
    set: RwLock<HashSet<Arc<str>, foldhash::fast::RandomState>>,
}

impl SessionMemo {
    /// The session of a request known without its body: an explicit [`SessionId`] (cleaned;
    /// blank counts as absent), else the first session header of `sources` ([`session::header_session`]).
    pub(crate) fn session(
        &self,
        given: Option<&SessionId>,
        headers: &HeaderMap,
        sources: &SessionSources,
    ) -> Option<Arc<str>> {
        // A blank explicit id counts as absent, as in `session::identify`.
        if let Some(given) = given
            && let Some(clean) = session::clean_session_id(&given.0)
        {
            // A borrowed id as long as the given one is the given one.
            if matches!(clean, std::borrow::Cow::Borrowed(c) if c.len() == given.0.len()) {
                return Some(given.0.clone());
            }
            return Some(self.intern(&clean));
        }
        let (id, _) = session::header_session(headers, sources)?;
        Some(self.intern(&id))
    }

    fn intern(&self, id: &str) -> Arc<str> {
        if let Ok(set) = self.set.read()
            && let Some(found) = set.get(id)
        {
            return found.clone();
        }
        let id: Arc<str> = Arc::from(id);
        if let Ok(mut set) = self.set.write() {
            if set.len() >= MAX_ENTRIES {
                set.clear();
            }
            set.insert(id.clone());
        }
        id
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
                assert_eq!(
                    &*memo.tenant(None, &h, &Uri::default()),
                    session::tenant(&h)
                );
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
        assert_eq!(
            &*memo.tenant(None, &a, &Uri::default()),
            session::tenant(&a)
        );
        assert_eq!(
            &*memo.tenant(None, &b, &Uri::default()),
            session::tenant(&b)
        );
        assert_ne!(
            memo.tenant(None, &a, &Uri::default()),
            memo.tenant(None, &b, &Uri::default())
        );
    }

    #[test]
    fn a_gemini_query_key_is_the_tenant_of_that_key() {
        let memo = TenantMemo::default();
        let none = HeaderMap::new();
        let mut header = HeaderMap::new();
        header.insert("x-goog-api-key", HeaderValue::from_static("AIza-one"));
        let q = |s: &str| -> Uri { s.parse().unwrap() };
        let one = q("/v1beta/models/m:generateContent?key=AIza-one");
        let two = q("/v1beta/models/m:streamGenerateContent?alt=sse&key=AIza-two");
        assert_eq!(
            memo.tenant(None, &none, &one),
            memo.tenant(None, &header, &Uri::default())
        );
        assert_ne!(
            memo.tenant(None, &none, &one),
            memo.tenant(None, &none, &two)
        );
        assert_ne!(&*memo.tenant(None, &none, &two), "anonymous");
        // A header wins over the query; an empty key is no key.
        assert_eq!(
            memo.tenant(None, &header, &two),
            memo.tenant(None, &header, &one)
        );
        assert_eq!(
            &*memo.tenant(None, &none, &q("/v1/models/m:generateContent?key=")),
            "anonymous"
        );
        // Only the first `key` counts, as in the gateway, which moves it into a header.
        let second = q("/v1/models/m:generateContent?key=&key=AIza-one");
        assert_eq!(&*memo.tenant(None, &none, &second), "anonymous");
        // A credential longer than a key is derived, not kept.
        let long: Uri = format!(
            "/v1/models/m:generateContent?key={}",
            "k".repeat(MAX_KEY + 1)
        )
        .parse()
        .unwrap();
        assert_eq!(
            memo.tenant(None, &none, &long),
            memo.tenant(None, &none, &long)
        );
        assert!(memo.map.read().unwrap().keys().all(|k| k.len() <= MAX_KEY));
    }

    #[test]
    fn sessions_agree_with_identify() {
        let memo = SessionMemo::default();
        let sources = SessionSources::default();
        for (explicit, headers) in [
            (None, vec![("x-session-id", " s-1 ")]),
            (None, vec![("x-session-id", " "), ("thread-id", "t-1")]),
            (None, vec![("authorization", "Bearer k")]),
            (Some(" e-1 "), vec![("x-session-id", "s-1")]),
            (Some("e-2"), vec![]),
            (Some("  "), vec![("x-session-id", "s-1")]),
        ] {
            let mut h = HeaderMap::new();
            for (n, v) in headers {
                h.insert(n, HeaderValue::from_static(v));
            }
            let given = explicit.map(SessionId::new);
            let expected = session::identify(
                &h,
                None,
                &sources,
                given.as_ref().map(|s| s.0.clone()),
                None,
            )
            .session;
            for _ in 0..2 {
                assert_eq!(memo.session(given.as_ref(), &h, &sources), expected);
            }
        }
        // One allocation per session: later requests share it.
        let mut h = HeaderMap::new();
        h.insert("x-session-id", HeaderValue::from_static("shared"));
        let a = memo.session(None, &h, &sources).unwrap();
        let b = memo.session(None, &h, &sources).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }

    #[test]
    fn extension_wins() {
        let memo = TenantMemo::default();
        let team = Tenant::new("team-a");
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static("Bearer sk"));
        assert_eq!(&*memo.tenant(Some(&team), &h, &Uri::default()), "team-a");
    }
}
