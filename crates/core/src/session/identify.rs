//! [`identify`]: the session and tenant of one request, in one place.

use std::borrow::Cow;
use std::sync::Arc;

use http::HeaderMap;

use super::found::session_id_in;
use super::{SessionSource, SessionSources, clean_session_id, tenant_arc};
use crate::HandoffKey;
use crate::json::Found;

/// Who a request belongs to: its session (which conversation it continues), where that was
/// found, and its tenant (whose conversation it is).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    /// The session id, cleaned by [`clean_session_id`]; `None` when no source gave one (the
    /// relay then has nothing to key a handoff by and passes the request through).
    pub session: Option<Arc<str>>,
    /// Where [`Identity::session`] came from; `Some` exactly when the session is.
    pub source: Option<SessionSource>,
    /// The tenant: the explicit one, else the hash of the request's credential (see
    /// [`tenant`](super::tenant)).
    pub tenant: Arc<str>,
}

impl Identity {
    /// The handoff key of this identity for `combo`, `None` without a session.
    pub fn key(&self, combo: impl Into<Arc<str>>) -> Option<HandoffKey> {
        let session = self.session.clone()?;
        Some(HandoffKey {
            tenant: self.tenant.clone(),
            session,
            combo: combo.into(),
        })
    }
}

/// The [`Identity`] of a request: the one derivation of session and tenant that the gateway
/// and both relay layers share.
///
/// - `headers`: the inbound request headers, before any rewriting;
/// - `body`: the decoded request body (see [`crate::decode`]), or `None` when it is not read
///   (not yet, too large, undecodable): then only the headers and an explicit session count;
/// - `sources`: where session ids are looked for (see [`SessionSources`]);
/// - `explicit_session`: a session id set by the embedding application (a `SessionId`
///   request extension); it is cleaned like any other;
/// - `explicit_tenant`: a tenant (a `Tenant` extension set by an auth layer), used as given.
///
/// Precedence of the session: the explicit session when it cleans to a non-empty id
/// ([`SessionSource::Explicit`]); then the configured sources in their order, the headers
/// first, then (only when `body` is given) `metadata.user_id`, `prompt_cache_key` and the
/// [`fingerprint`](super::fingerprint) — exactly [`session_id`](super::session_id). A blank
/// explicit session counts as absent, so the sources are tried.
///
/// The tenant is the explicit one when given, else [`tenant`](super::tenant) of the headers.
/// A caller that memoises the credential hash passes its memoised value as the explicit
/// tenant.
///
/// Since headers win over the body, a caller can identify a request from its headers first
/// and read the body only when that gave no session: identifying again with the body and
/// the first tenant gives the same result as identifying with the body at once.
///
/// ```
/// use std::sync::Arc;
/// use context_relay_core::session::{identify, SessionSource, SessionSources};
///
/// let sources = SessionSources::default();
/// let mut headers = http::HeaderMap::new();
/// headers.insert("authorization", "Bearer sk-one".parse().unwrap());
/// headers.insert("x-session-id", " s-1 ".parse().unwrap());
///
/// let id = identify(&headers, None, &sources, None, None);
/// assert_eq!(id.session.as_deref(), Some("s-1"));
/// assert_eq!(id.source, Some(SessionSource::Header(http::HeaderName::from_static("x-session-id"))));
/// assert_eq!(id.tenant.len(), 16);
///
/// // An explicit session wins, and is cleaned the same way; an explicit tenant is used as is.
/// let id = identify(&headers, None, &sources, Some(Arc::from("  mine ")), Some(Arc::from("team-a")));
/// assert_eq!((id.session.as_deref(), id.source), (Some("mine"), Some(SessionSource::Explicit)));
/// assert_eq!(&*id.tenant, "team-a");
///
/// // No header: the body is read only when given.
/// let body = br#"{"model":"m","prompt_cache_key":"k9","input":"hi"}"#;
/// let bare = http::HeaderMap::new();
/// assert_eq!(identify(&bare, None, &sources, None, None).session, None);
/// let id = identify(&bare, Some(body), &sources, None, None);
/// assert_eq!((id.session.as_deref(), &*id.tenant), (Some("k9"), "anonymous"));
/// ```
pub fn identify(
    headers: &HeaderMap,
    body: Option<&[u8]>,
    sources: &SessionSources,
    explicit_session: Option<Arc<str>>,
    explicit_tenant: Option<Arc<str>>,
) -> Identity {
    identify_in(
        headers,
        body.map(|b| (b, None)),
        sources,
        explicit_session,
        explicit_tenant,
    )
}

/// [`identify`] of a request whose body the caller already searched in one pass
/// ([`Needles::find_all`](crate::json::Needles::find_all)) for literals that include
/// [`BODY_ID_LITERALS`](super::BODY_ID_LITERALS): where they occur is taken from `found`
/// instead of searching `body` again. The result is the same as [`identify`]'s with
/// `Some(body)`. `found` must come from `body` itself (another body's positions would mislead
/// the reading); one of a set without those literals only costs the search it was to save.
///
/// ```
/// use context_relay_core::json::Needles;
/// use context_relay_core::session::{BODY_ID_LITERALS, SessionSources, identify, identify_found};
///
/// let needles = Needles::new(&[b"\"model\"", BODY_ID_LITERALS[0], BODY_ID_LITERALS[1]]);
/// let body = br#"{"model":"m","input":"hi","prompt_cache_key":"k9"}"#;
/// let found = needles.find_all(body, 16);
/// let (headers, sources) = (http::HeaderMap::new(), SessionSources::default());
/// let id = identify_found(&headers, body, &found, &sources, None, None);
/// assert_eq!(id, identify(&headers, Some(body), &sources, None, None));
/// assert_eq!(id.session.as_deref(), Some("k9"));
/// ```
pub fn identify_found(
    headers: &HeaderMap,
    body: &[u8],
    found: &Found<'_>,
    sources: &SessionSources,
    explicit_session: Option<Arc<str>>,
    explicit_tenant: Option<Arc<str>>,
) -> Identity {
    identify_in(
        headers,
        Some((body, Some(found))),
        sources,
        explicit_session,
        explicit_tenant,
    )
}

fn identify_in(
    headers: &HeaderMap,
    body: Option<(&[u8], Option<&Found<'_>>)>,
    sources: &SessionSources,
    explicit_session: Option<Arc<str>>,
    explicit_tenant: Option<Arc<str>>,
) -> Identity {
    let tenant = explicit_tenant.unwrap_or_else(|| tenant_arc(headers));
    if let Some(explicit) = explicit_session.and_then(cleaned) {
        return Identity {
            session: Some(explicit),
            source: Some(SessionSource::Explicit),
            tenant,
        };
    }
    match session_id_in(headers, body, sources) {
        Some((id, source)) => Identity {
            session: Some(id.to_arc()),
            source: Some(source),
            tenant,
        },
        None => Identity {
            session: None,
            source: None,
            tenant,
        },
    }
}

/// Whether [`identify`] finds the session without reading the body: `explicit_session` is a
/// valid session id, or a session header names one (the two sources it reads before the
/// body). When this says yes, [`identify`] gives the same session with or without the body,
/// so a caller may skip work it does only to read the body.
///
/// ```
/// use context_relay_core::session::{SessionSources, session_in_head};
///
/// let sources = SessionSources::default();
/// let mut headers = http::HeaderMap::new();
/// assert!(!session_in_head(&headers, &sources, Some(" ")));
/// assert!(session_in_head(&headers, &sources, Some("ext")));
/// headers.insert("x-session-id", "s1".parse().unwrap());
/// assert!(session_in_head(&headers, &sources, None));
/// ```
pub fn session_in_head(
    headers: &HeaderMap,
    sources: &SessionSources,
    explicit_session: Option<&str>,
) -> bool {
    explicit_session.is_some_and(|id| clean_session_id(id).is_some())
        || super::header_session(headers, sources).is_some()
}

/// [`clean_session_id`] of an owned id, reusing it when it is already clean.
fn cleaned(id: Arc<str>) -> Option<Arc<str>> {
    let clean = clean_session_id(&id)?;
    // A borrowed id as long as the given one is the given one.
    if matches!(clean, Cow::Borrowed(c) if c.len() == id.len()) {
        Some(id)
    } else {
        Some(Arc::from(clean))
    }
}

#[cfg(test)]
mod tests;
