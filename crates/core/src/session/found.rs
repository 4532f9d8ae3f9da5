//! The session id a request carries, as found: borrowed from the request where it stands as
//! sent, owned where it had to be decoded, or the hex of a fingerprint kept inline. Each
//! caller then makes the one owned copy it keeps (an `Arc<str>` for [`super::identify`], a
//! `String` for [`super::session_id`]), instead of a `String` first and its copy after.

use std::borrow::Cow;
use std::sync::Arc;

use http::HeaderMap;
use serde::Deserialize;

use super::body_ids::BodyIds;
use super::fingerprint::fingerprint_hex;
use super::lenient::Str;
use super::{SessionMatch, SessionSource, SessionSources, clean_session_id, header_session};
use crate::json::Found;

/// A session id as a request carries it (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FoundId<'a> {
    /// Text of the request: a header value, or a body string as sent or decoded.
    Text(Cow<'a, str>),
    /// A fingerprint.
    Hex(Hex16),
}

impl FoundId<'_> {
    /// The id.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            FoundId::Text(text) => text,
            FoundId::Hex(hex) => hex.as_str(),
        }
    }

    /// The id as a shared string: one allocation, whatever the source.
    pub(crate) fn to_arc(&self) -> Arc<str> {
        Arc::from(self.as_str())
    }

    /// The id as an owned string (a decoded id is moved, not copied).
    pub(crate) fn into_string(self) -> String {
        match self {
            FoundId::Text(text) => text.into_owned(),
            FoundId::Hex(hex) => hex.as_str().to_owned(),
        }
    }
}

/// The first 8 bytes of a digest as 16 lower-case hex characters, kept inline (no allocation
/// until a caller keeps them).
///
/// Hand-rolled rather than `write!("{:02x}")`: the tenant is derived on every relayed request,
/// and the formatting machinery cost more than the hash itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hex16([u8; 16]);

impl Hex16 {
    pub(crate) fn of(digest: &[u8]) -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [b'0'; 16];
        for (pair, b) in out.chunks_exact_mut(2).zip(digest.iter().take(8)) {
            pair[0] = HEX[usize::from(b >> 4)];
            pair[1] = HEX[usize::from(b & 0x0f)];
        }
        Self(out)
    }

    pub(crate) fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever written.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// [`super::session_id`] of a body with, optionally, where a caller's pass found
/// [`super::BODY_ID_LITERALS`] in it.
pub(crate) fn session_id_in<'a>(
    headers: &'a HeaderMap,
    body: Option<(&'a [u8], Option<&Found<'_>>)>,
    sources: &'a SessionSources,
) -> Option<(FoundId<'a>, SessionSource)> {
    if let Some((id, name)) = header_session(headers, sources) {
        let source = SessionSource::Header(name.clone());
        return Some((FoundId::Text(id), source));
    }
    let (body, found) = body?;
    if sources.metadata_user_id || sources.prompt_cache_key {
        // Wherever they stand at the top level (see `body_ids`); a body that is not a JSON
        // object gives none.
        let ids = BodyIds::read(body, found);
        let from_metadata = sources
            .metadata_user_id
            .then(|| ids.user_id.as_deref().and_then(session_of_user_id))
            .flatten();
        if let Some(id) = from_metadata {
            return Some((FoundId::Text(Cow::Owned(id)), SessionSource::MetadataUserId));
        }
        let from_cache_key = match ids.prompt_cache_key {
            Some(key) if sources.prompt_cache_key => clean(key),
            _ => None,
        };
        if let Some(id) = from_cache_key {
            return Some((FoundId::Text(id), SessionSource::PromptCacheKey));
        }
    }
    if sources.fingerprint {
        return fingerprint_hex(body).map(|id| (FoundId::Hex(id), SessionSource::Fingerprint));
    }
    None
}

/// [`session_id_in`] as the public [`SessionMatch`].
pub(crate) fn session_match(
    headers: &HeaderMap,
    body: Option<(&[u8], Option<&Found<'_>>)>,
    sources: &SessionSources,
) -> Option<SessionMatch> {
    session_id_in(headers, body, sources).map(|(id, source)| SessionMatch {
        id: id.into_string(),
        source,
    })
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct UserIdJson<'a> {
    #[serde(borrow)]
    session_id: Str<'a>,
}

/// The session part of an Anthropic `metadata.user_id`.
pub(super) fn session_of_user_id(user_id: &str) -> Option<String> {
    let trimmed = user_id.trim();
    if trimmed.starts_with('{') {
        let parsed: UserIdJson<'_> = serde_json::from_str(trimmed).ok()?;
        return parsed
            .session_id
            .as_deref()
            .and_then(clean_session_id)
            .map(Cow::into_owned);
    }
    // Legacy form `user_<hash>_account_<uuid>_session_<uuid>` (the account part may be empty,
    // giving `account__session_`): the session is whatever follows the last marker.
    let (_, session) = trimmed.rsplit_once("_session_")?;
    clean_session_id(session).map(Cow::into_owned)
}

/// [`clean_session_id`] of a body string, still borrowed from the body when it was.
fn clean(value: Cow<'_, str>) -> Option<Cow<'_, str>> {
    match value {
        Cow::Borrowed(text) => clean_session_id(text),
        Cow::Owned(text) => clean_session_id(&text).map(|id| Cow::Owned(id.into_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex16_is_lower_case_hex_of_the_first_eight_bytes() {
        let hex = Hex16::of(&[0xab, 0x01, 0xff, 0x00, 0x10, 0x9c, 0x7e, 0x42, 0x99]);
        assert_eq!(hex.as_str(), "ab01ff00109c7e42");
    }

    #[test]
    fn a_header_id_is_borrowed_and_a_fingerprint_kept_inline() {
        let sources = SessionSources::default();
        let mut headers = HeaderMap::new();
        headers.insert("x-session-id", " s-1 ".parse().unwrap());
        let (id, _) = session_id_in(&headers, None, &sources).unwrap();
        assert!(matches!(id, FoundId::Text(Cow::Borrowed("s-1"))));

        let body = br#"{"model":"m","prompt_cache_key":" k9 ","input":"hi"}"#;
        let bare = HeaderMap::new();
        let (id, source) = session_id_in(&bare, Some((body, None)), &sources).unwrap();
        assert!(matches!(id, FoundId::Text(Cow::Borrowed("k9"))));
        assert_eq!(source, SessionSource::PromptCacheKey);
        // Escaped: decoded, hence owned.
        let body = br#"{"model":"m","prompt_cache_key":"k\u0039","input":"hi"}"#;
        let (id, _) = session_id_in(&bare, Some((body, None)), &sources).unwrap();
        assert_eq!(id, FoundId::Text(Cow::Owned("k9".into())));

        let body = br#"{"model":"m","input":"hi"}"#;
        let (id, source) = session_id_in(&bare, Some((body, None)), &sources).unwrap();
        assert!(matches!(id, FoundId::Hex(_)));
        assert_eq!(source, SessionSource::Fingerprint);
        assert_eq!(
            Some(id.as_str().to_owned()),
            super::super::fingerprint(body)
        );
        assert_eq!(&*id.to_arc(), id.as_str());
    }
}
