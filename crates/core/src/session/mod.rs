//! Session id and tenant derivation.
//!
//! A handoff is keyed by `(tenant, session, combo)`. The session id says which conversation a
//! request continues; the tenant says whose it is, so that two callers who happen to send
//! the same session id never see each other's handoffs. Both are derived here from the
//! inbound request, before any rewriting, by [`identify`], the one derivation the gateway and
//! the relay layers share. An explicit session or tenant (the `SessionId` / `Tenant` request
//! extensions) wins; an explicit session is cleaned by [`clean_session_id`] like any other.
//!
//! Otherwise the session id is the first present of the configured [`SessionSources`], by
//! default:
//! 1. the headers `x-session-id`, `x-claude-code-session-id`, `session-id`, `session_id`,
//!    `conversation_id`, `x-opencode-session`, `thread-id`;
//! 2. Anthropic `metadata.user_id`: the `session_id` of its JSON-string form (Claude Code) or
//!    the part after `_session_` of its legacy `user_…_account_…_session_<uuid>` form (a plain
//!    user id names a user, not a conversation, and is not used);
//! 3. the body's `prompt_cache_key` (Codex sets it to the session id);
//! 4. a [`fingerprint`] of the conversation's stable parts.
//!
//! Values are trimmed and capped at [`MAX_SESSION_ID_CHARS`] characters; a blank value counts
//! as absent and the next source is tried. The body is only read when no header gave an id.
//! `metadata` and `prompt_cache_key` count wherever they stand among the top-level members
//! (the OpenAI SDK writes `prompt_cache_key` after `input`, Claude Code `metadata` after
//! `messages`): a byte search for their keys comes first, and only a body holding one is
//! walked, its other values (the history) skipped by the scanner without being decoded. The
//! fingerprint reads up to the first user message and no further.
//!
//! ```
//! use context_relay_core::session::{session_id, SessionSource, SessionSources};
//!
//! let mut headers = http::HeaderMap::new();
//! headers.insert("session-id", " 01a22e1a-2c39 ".parse().unwrap());
//! let found = session_id(&headers, None, &SessionSources::default()).unwrap();
//! assert_eq!(found.id, "01a22e1a-2c39");
//! assert_eq!(found.source, SessionSource::Header(http::HeaderName::from_static("session-id")));
//!
//! let body = br#"{"model":"m","prompt_cache_key":"abc","input":"hi"}"#;
//! let found = session_id(&http::HeaderMap::new(), Some(body), &SessionSources::default()).unwrap();
//! assert_eq!((found.id.as_str(), found.source), ("abc", SessionSource::PromptCacheKey));
//! ```

use std::borrow::Cow;

use http::{HeaderMap, HeaderName};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[macro_use]
mod lenient;
mod body_ids;
mod fingerprint;
mod found;
mod headers;
mod identify;

pub use fingerprint::{Opening, fingerprint, opening};
use found::Hex16;
pub use headers::header_session;
pub use identify::{Identity, identify, identify_found, session_in_head};

/// Longest session id kept, in characters; a longer one keeps its beginning and a digest of
/// the whole (see [`clean_session_id`]).
pub const MAX_SESSION_ID_CHARS: usize = 128;

/// The default session headers, in the order they are tried.
pub const DEFAULT_SESSION_HEADERS: [&str; 7] = [
    "x-session-id",
    "x-claude-code-session-id",
    "session-id",
    "session_id",
    "conversation_id",
    "x-opencode-session",
    "thread-id",
];

/// Where session ids are looked for, in order: the headers, then `metadata.user_id`, then
/// `prompt_cache_key`, then the fingerprint; each body source can be switched off.
///
/// Its serde form is `{"headers": [..], "metadata_user_id": bool, "prompt_cache_key": bool,
/// "fingerprint": bool}`, every field optional (defaults as in [`Default`]).
///
/// ```
/// use context_relay_core::session::SessionSources;
///
/// let sources = SessionSources::default()
///     .headers([http::HeaderName::from_static("x-my-session")])
///     .fingerprint(false);
/// assert_eq!(sources.header_names().len(), 1);
/// assert!(!sources.uses_fingerprint());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionSources {
    #[serde(with = "header_names")]
    headers: Vec<HeaderName>,
    metadata_user_id: bool,
    prompt_cache_key: bool,
    fingerprint: bool,
}

impl Default for SessionSources {
    fn default() -> Self {
        Self {
            headers: DEFAULT_SESSION_HEADERS
                .into_iter()
                .map(HeaderName::from_static)
                .collect(),
            metadata_user_id: true,
            prompt_cache_key: true,
            fingerprint: true,
        }
    }
}

impl SessionSources {
    /// No source at all: [`session_id`] always gives `None`. A start for an explicit list.
    pub fn none() -> Self {
        Self {
            headers: Vec::new(),
            metadata_user_id: false,
            prompt_cache_key: false,
            fingerprint: false,
        }
    }

    /// Replaces the header list (tried in the order given).
    pub fn headers(mut self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        self.headers = names.into_iter().collect();
        self
    }

    /// Whether Anthropic `metadata.user_id` is read.
    pub fn metadata_user_id(mut self, on: bool) -> Self {
        self.metadata_user_id = on;
        self
    }

    /// Whether the body's `prompt_cache_key` is read.
    pub fn prompt_cache_key(mut self, on: bool) -> Self {
        self.prompt_cache_key = on;
        self
    }

    /// Whether the [`fingerprint`] is the last resort.
    pub fn fingerprint(mut self, on: bool) -> Self {
        self.fingerprint = on;
        self
    }

    /// The headers tried, in order.
    pub fn header_names(&self) -> &[HeaderName] {
        &self.headers
    }

    /// Whether Anthropic `metadata.user_id` is read.
    pub fn uses_metadata_user_id(&self) -> bool {
        self.metadata_user_id
    }

    /// Whether the body's `prompt_cache_key` is read.
    pub fn uses_prompt_cache_key(&self) -> bool {
        self.prompt_cache_key
    }

    /// Whether the [`fingerprint`] is the last resort.
    pub fn uses_fingerprint(&self) -> bool {
        self.fingerprint
    }
}

/// Where a session id came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SessionSource {
    /// Given explicitly by the embedding application (a `SessionId` request extension), see
    /// [`identify`].
    Explicit,
    /// This request header.
    Header(HeaderName),
    /// Anthropic `metadata.user_id`.
    MetadataUserId,
    /// The body's `prompt_cache_key`.
    PromptCacheKey,
    /// The conversation [`fingerprint`].
    Fingerprint,
}

/// A session id and where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionMatch {
    /// The id: trimmed, non-empty, at most [`MAX_SESSION_ID_CHARS`] characters.
    pub id: String,
    /// Its source.
    pub source: SessionSource,
}

/// The session id of a request, from the first source in `sources` that has one.
///
/// `body` is the decoded request body (see [`crate::decode`]), or `None` when it is not
/// available (too large, undecodable): then only headers are read.
pub fn session_id(
    headers: &HeaderMap,
    body: Option<&[u8]>,
    sources: &SessionSources,
) -> Option<SessionMatch> {
    found::session_match(headers, body.map(|b| (b, None)), sources)
}

/// The quoted key literals of the session ids a body may carry (`"prompt_cache_key"`,
/// `"metadata"`). A caller that searches the body anyway can look for them in the same pass
/// ([`Needles::find_all`](crate::json::Needles::find_all)) and hand the result to
/// [`identify_found`]: the session reading then does not search the body again.
pub const BODY_ID_LITERALS: [&[u8]; 2] = [b"\"prompt_cache_key\"", b"\"metadata\""];

/// A raw session id as the relay keys it: trimmed, its control characters written as escapes
/// (`\n`, `\u{1b}`: an id reaches log lines, and a body can put a line break in one), at most
/// [`MAX_SESSION_ID_CHARS`] characters, `None` when nothing is left. A longer id keeps its
/// first 111 characters (cut on a character boundary) followed by `~` and 16 hex digits of the
/// SHA-256 of the whole id, so that two long ids that share a beginning stay two sessions.
///
/// Every session id goes through it, whatever its source (a header, a body field, an explicit
/// value set by the embedding application), so that one conversation gets one key. Cleaning a
/// clean id gives it back unchanged.
///
/// ```
/// use context_relay_core::session::clean_session_id;
///
/// assert_eq!(clean_session_id("  s-1 \t").as_deref(), Some("s-1"));
/// assert_eq!(clean_session_id(" \n "), None);
/// let long = "x".repeat(300);
/// let capped = clean_session_id(&long).unwrap();
/// assert_eq!(capped.len(), 128);
/// assert!(capped.starts_with(&long[..111]));
/// let other = format!("{}y", "x".repeat(299));
/// assert_ne!(clean_session_id(&other).unwrap(), capped);
/// assert_eq!(clean_session_id("a\nWARN forged").as_deref(), Some("a\\nWARN forged"));
/// ```
pub fn clean_session_id(value: &str) -> Option<Cow<'_, str>> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return None;
    }
    if trimmed.chars().any(char::is_control) {
        let escaped = escape_controls(trimmed);
        return Some(Cow::Owned(match capped(&escaped) {
            Cow::Borrowed(_) => escaped,
            Cow::Owned(capped) => capped,
        }));
    }
    Some(capped(trimmed))
}

/// `id` (trimmed, without control characters) within [`MAX_SESSION_ID_CHARS`].
fn capped(id: &str) -> Cow<'_, str> {
    // At most that many bytes is at most that many characters: none to count.
    if id.len() <= MAX_SESSION_ID_CHARS || id.chars().nth(MAX_SESSION_ID_CHARS).is_none() {
        return Cow::Borrowed(id);
    }
    Cow::Owned(capped_with_digest(id))
}

/// `id` with each control character written as its escape (`\n`, `\u{1b}`).
fn escape_controls(id: &str) -> String {
    let mut out = String::with_capacity(id.len() + 8);
    for c in id.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The first characters of `id` and a digest of all of it, [`MAX_SESSION_ID_CHARS`] in all.
fn capped_with_digest(id: &str) -> String {
    const DIGEST: usize = 1 + 16;
    let end = id
        .char_indices()
        .nth(MAX_SESSION_ID_CHARS - DIGEST)
        .map_or(id.len(), |(i, _)| i);
    let mut out = String::with_capacity(end + DIGEST);
    out.push_str(&id[..end]);
    out.push('~');
    out.push_str(Hex16::of(&Sha256::digest(id.as_bytes())).as_str());
    out
}

/// The client credential of a request: the `authorization` value with a `Bearer ` scheme
/// removed, else `x-api-key`, else `x-goog-api-key`, trimmed; `None` when all are absent or
/// blank.
///
/// Removing the scheme makes one key the same credential whichever header a client puts it in
/// (Anthropic SDKs 0.x send `x-api-key`, 2.x `Authorization: Bearer`; Gemini clients send
/// `x-goog-api-key`). Other schemes (`Basic …`) are kept whole; a `Bearer` scheme without a
/// token is no credential.
///
/// ```
/// use context_relay_core::session::credential;
///
/// let mut h = http::HeaderMap::new();
/// h.insert("x-goog-api-key", "AIza-one".parse().unwrap());
/// assert_eq!(credential(&h), Some(&b"AIza-one"[..]));
/// h.insert("authorization", "Bearer  sk-one ".parse().unwrap());
/// assert_eq!(credential(&h), Some(&b"sk-one"[..]));
/// assert_eq!(credential(&http::HeaderMap::new()), None);
/// ```
pub fn credential(headers: &HeaderMap) -> Option<&[u8]> {
    // Named by `HeaderName` constants, not strings: a string is parsed on every look-up, and
    // this runs on every relayed request.
    const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
    const X_GOOG_API_KEY: HeaderName = HeaderName::from_static("x-goog-api-key");
    let value = |name: &HeaderName| {
        let v = headers.get(name)?.as_bytes().trim_ascii();
        (!v.is_empty()).then_some(v)
    };
    let bearer = value(&http::header::AUTHORIZATION).map(|v| {
        match v.iter().position(|b| *b == b' ' || *b == b'\t') {
            Some(i) if v[..i].eq_ignore_ascii_case(b"bearer") => v[i..].trim_ascii(),
            None if v.eq_ignore_ascii_case(b"bearer") => b"",
            _ => v,
        }
    });
    bearer
        .filter(|v| !v.is_empty())
        .or_else(|| value(&X_API_KEY))
        .or_else(|| value(&X_GOOG_API_KEY))
}

/// The tenant of a request without a `Tenant` extension: 16 hex characters of the SHA-256 of
/// its [`credential`], or `"anonymous"` when it has none.
///
/// ```
/// use context_relay_core::session::tenant;
///
/// let mut a = http::HeaderMap::new();
/// a.insert("authorization", "Bearer sk-one".parse().unwrap());
/// let mut b = http::HeaderMap::new();
/// b.insert("x-api-key", "sk-one".parse().unwrap());
/// assert_eq!(tenant(&a), tenant(&b));
/// assert_eq!(tenant(&a).len(), 16);
/// assert_eq!(tenant(&http::HeaderMap::new()), "anonymous");
/// ```
pub fn tenant(headers: &HeaderMap) -> String {
    tenant_of(credential(headers))
}

/// The tenant of a request whose credential is `credential` (see [`tenant`]):
/// [`request_credential`] with it gives the tenant of a request whose key is in its query.
///
/// ```
/// use context_relay_core::session::{request_credential, tenant, tenant_of};
///
/// let mut h = http::HeaderMap::new();
/// h.insert("x-goog-api-key", "AIza-one".parse().unwrap());
/// let uri: http::Uri = "/v1beta/models/m:generateContent?key=AIza-one".parse().unwrap();
/// let none = http::HeaderMap::new();
/// let from_query = request_credential(&none, &uri);
/// assert_eq!(tenant_of(from_query.as_deref()), tenant(&h));
/// ```
pub fn tenant_of(credential: Option<&[u8]>) -> String {
    credential.map_or_else(
        || ANONYMOUS.to_owned(),
        |c| credential_hash(c).as_str().to_owned(),
    )
}

/// The tenant of a request whose credential is `secret`: the one derivation [`tenant_of`] and
/// [`tenant_arc`] share.
fn credential_hash(secret: &[u8]) -> Hex16 {
    Hex16::of(&Sha256::digest(secret))
}

/// The tenant of a request without a credential.
const ANONYMOUS: &str = "anonymous";

/// [`tenant`] as the shared string [`identify`] keeps: one allocation for a credential's hash,
/// none for `"anonymous"` (one string shared by every such request).
pub(crate) fn tenant_arc(headers: &HeaderMap) -> std::sync::Arc<str> {
    static SHARED: std::sync::LazyLock<std::sync::Arc<str>> =
        std::sync::LazyLock::new(|| std::sync::Arc::from(ANONYMOUS));
    match credential(headers) {
        Some(secret) => std::sync::Arc::from(credential_hash(secret).as_str()),
        None => SHARED.clone(),
    }
}

/// The query parameter a Gemini client may carry its key in (`?key=…`), as Google's API
/// accepts it. It is read on any path: a request carrying no credential header but a `key`
/// parameter is told apart by it.
pub const QUERY_CREDENTIAL: &str = "key";

/// The credential of a request: [`credential`] from its headers, else the first
/// [`QUERY_CREDENTIAL`] parameter of its query, percent-decoded and trimmed (empty: none), as
/// the gateway reads it when it moves the key into `x-goog-api-key`.
///
/// ```
/// use context_relay_core::session::request_credential;
///
/// let uri: http::Uri = "/v1/models/m:generateContent?alt=sse&key=ck%2B1".parse().unwrap();
/// let none = http::HeaderMap::new();
/// assert_eq!(request_credential(&none, &uri).as_deref(), Some(&b"ck+1"[..]));
/// let mut h = http::HeaderMap::new();
/// h.insert("x-goog-api-key", "hk".parse().unwrap());
/// assert_eq!(request_credential(&h, &uri).as_deref(), Some(&b"hk"[..]));
/// ```
pub fn request_credential<'a>(
    headers: &'a HeaderMap,
    uri: &'a http::Uri,
) -> Option<std::borrow::Cow<'a, [u8]>> {
    if let Some(c) = credential(headers) {
        return Some(std::borrow::Cow::Borrowed(c));
    }
    let query = uri.query()?;
    form_urlencoded::parse(query.as_bytes())
        .find(|(name, _)| name == QUERY_CREDENTIAL)
        .filter(|(_, value)| !value.trim().is_empty())
        .map(|(_, value)| match value {
            std::borrow::Cow::Borrowed(v) => std::borrow::Cow::Borrowed(v.trim().as_bytes()),
            std::borrow::Cow::Owned(v) => std::borrow::Cow::Owned(v.trim().as_bytes().to_vec()),
        })
}

/// `serde(with)` for a list of header names as strings.
mod header_names {
    use http::HeaderName;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(names: &[HeaderName], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(names.iter().map(HeaderName::as_str))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<HeaderName>, D::Error> {
        Vec::<String>::deserialize(d)?
            .into_iter()
            .map(|name| {
                HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
                    serde::de::Error::custom(format!(
                        "expected an HTTP header name, found `{name}`"
                    ))
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::found::session_of_user_id;
    use super::*;

    #[test]
    fn legacy_and_json_user_ids() {
        assert_eq!(
            session_of_user_id("user_abc_account__session_6f1c-22").as_deref(),
            Some("6f1c-22")
        );
        assert_eq!(
            session_of_user_id("user_abc_account_9a8b_session_xyz").as_deref(),
            Some("xyz")
        );
        assert_eq!(
            session_of_user_id(r#"{"device_id":"d","account_uuid":"","session_id":"s-1"}"#)
                .as_deref(),
            Some("s-1")
        );
        assert_eq!(session_of_user_id("customer-42"), None);
        assert_eq!(session_of_user_id("user_abc_session_   "), None);
        assert_eq!(session_of_user_id(r#"{"session_id":7}"#), None);
        assert_eq!(session_of_user_id("{broken"), None);
    }

    #[test]
    fn the_shared_tenant_is_the_tenant() {
        let mut keyed = HeaderMap::new();
        keyed.insert("x-api-key", "sk-one".parse().unwrap());
        assert_eq!(*tenant_arc(&keyed), tenant(&keyed));
        let bare = HeaderMap::new();
        assert_eq!(*tenant_arc(&bare), tenant(&bare));
        // Every request without a credential shares one string.
        assert!(std::sync::Arc::ptr_eq(
            &tenant_arc(&bare),
            &tenant_arc(&bare)
        ));
    }

    #[test]
    fn clean_caps_on_char_boundary() {
        let long = "é".repeat(200);
        let id = clean_session_id(&long).unwrap();
        assert_eq!(id.chars().count(), MAX_SESSION_ID_CHARS);
        assert_eq!(clean_session_id("   "), None);
        assert_eq!(clean_session_id(" a ").as_deref(), Some("a"));
    }

    #[test]
    fn sources_serde_and_defaults() {
        let parsed: SessionSources =
            serde_json::from_str(r#"{"headers":["X-Trace-Session"],"fingerprint":false}"#).unwrap();
        assert_eq!(
            parsed.header_names(),
            &[HeaderName::from_static("x-trace-session")]
        );
        assert!(parsed.uses_prompt_cache_key() && !parsed.uses_fingerprint());
        let err =
            serde_json::from_str::<SessionSources>(r#"{"headers":["bad header"]}"#).unwrap_err();
        assert!(err.to_string().contains("`bad header`"));
        assert!(serde_json::from_str::<SessionSources>(r#"{"fingerprnt":false}"#).is_err());
        let round: SessionSources =
            serde_json::from_str(&serde_json::to_string(&SessionSources::default()).unwrap())
                .unwrap();
        assert_eq!(round, SessionSources::default());
    }

    #[test]
    fn disabled_sources_are_skipped() {
        let body = br#"{"metadata":{"user_id":"u_session_m"},"prompt_cache_key":"k","input":"hi"}"#;
        let h = HeaderMap::new();
        let only_key = SessionSources::none().prompt_cache_key(true);
        assert_eq!(session_id(&h, Some(body), &only_key).unwrap().id, "k");
        let only_fp = SessionSources::none().fingerprint(true);
        assert_eq!(
            session_id(&h, Some(body), &only_fp).unwrap().source,
            SessionSource::Fingerprint
        );
        assert_eq!(session_id(&h, Some(body), &SessionSources::none()), None);
        let d = SessionSources::default();
        assert_eq!(session_id(&h, Some(body), &d).unwrap().id, "m");
    }
}
