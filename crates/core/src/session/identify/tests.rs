use super::*;
use crate::session::{DEFAULT_SESSION_HEADERS, MAX_SESSION_ID_CHARS};
use crate::session::{session_id, tenant};
use http::{HeaderName, HeaderValue};
use proptest::prelude::*;
use serde_json::{Value, json};

/// The derivation the layers, the combo service and generation used before [`identify`]: the
/// extensions as given, else [`session_id`] and [`tenant`].
fn layers_before(
    headers: &HeaderMap,
    body: Option<&[u8]>,
    sources: &SessionSources,
    session: Option<Arc<str>>,
    explicit_tenant: Option<Arc<str>>,
) -> (Option<Arc<str>>, Arc<str>) {
    let session = session.or_else(|| session_id(headers, body, sources).map(|m| Arc::from(m.id)));
    let tenant = explicit_tenant.unwrap_or_else(|| Arc::from(tenant(headers)));
    (session, tenant)
}

/// Header-safe text: visible ASCII, spaces and tabs, sometimes past the length cap.
fn header_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ \t!-~]{0,20}",
        "[ -~]{120,140}",
        "[a-z0-9-]{1,12}",
        Just(String::new()),
        Just(" \t ".to_owned()),
    ]
}

/// Any text, including Unicode whitespace and multi-byte characters.
fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,20}",
        "[ \u{3000}\u{a0}éa-c\t\n]{0,150}",
        "\\PC{120,140}",
    ]
}

fn headers_of(ids: &[(usize, String)], credential: &Option<(usize, String)>) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (i, v) in ids {
        let name =
            HeaderName::from_static(DEFAULT_SESSION_HEADERS[i % DEFAULT_SESSION_HEADERS.len()]);
        if let Ok(v) = HeaderValue::from_str(v) {
            h.append(name, v);
        }
    }
    if let Some((i, v)) = credential {
        let name = ["authorization", "x-api-key", "x-goog-api-key"][i % 3];
        if let Ok(v) = HeaderValue::from_str(v) {
            h.insert(name, v);
        }
    }
    h
}

fn body_strategy() -> impl Strategy<Value = Option<Vec<u8>>> {
    let user_id = prop_oneof![
        Just(Value::Null),
        any_text().prop_map(|s| json!(format!("user_ab_account__session_{s}"))),
        any_text().prop_map(|s| json!(json!({"session_id": s}).to_string())),
        "[a-z]{0,8}".prop_map(|s| json!(s)),
    ];
    let cache_key = prop_oneof![Just(Value::Null), any_text().prop_map(|s| json!(s))];
    let text = "[a-z ]{1,30}";
    (user_id, cache_key, text, any::<bool>(), any::<u8>()).prop_map(
        |(user_id, cache_key, text, chat, shape)| {
            if shape % 7 == 0 {
                return None;
            }
            if shape % 7 == 1 {
                return Some(b"not json".to_vec());
            }
            let mut body = if chat {
                json!({"model": "m", "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": text}]})
            } else {
                json!({"model": "m", "instructions": "be brief", "input": text})
            };
            if !user_id.is_null() {
                body["metadata"] = json!({"user_id": user_id});
            }
            if !cache_key.is_null() {
                body["prompt_cache_key"] = cache_key;
            }
            Some(serde_json::to_vec(&body).expect("json"))
        },
    )
}

fn sources_strategy() -> impl Strategy<Value = SessionSources> {
    (
        any::<[bool; 4]>(),
        proptest::collection::vec(0..7usize, 0..4),
    )
        .prop_map(|([default, meta, key, fp], headers)| {
            if default {
                return SessionSources::default();
            }
            SessionSources::none()
                .headers(
                    headers
                        .into_iter()
                        .map(|i| HeaderName::from_static(DEFAULT_SESSION_HEADERS[i])),
                )
                .metadata_user_id(meta)
                .prompt_cache_key(key)
                .fingerprint(fp)
        })
}

fn request() -> impl Strategy<Value = (HeaderMap, Option<Vec<u8>>, SessionSources)> {
    (
        proptest::collection::vec((0..7usize, header_text()), 0..3),
        proptest::option::of((0..3usize, header_text())),
        body_strategy(),
        sources_strategy(),
    )
        .prop_map(|(ids, cred, body, sources)| (headers_of(&ids, &cred), body, sources))
}

proptest! {
    #[test]
    fn cleaning_is_idempotent(raw in any_text()) {
        let once = clean_session_id(&raw);
        let twice = once.as_deref().and_then(clean_session_id);
        prop_assert_eq!(twice.as_deref(), once.as_deref());
        if let Some(id) = once {
            prop_assert!(id.chars().count() <= MAX_SESSION_ID_CHARS);
            prop_assert!(!id.chars().any(char::is_control), "{id:?}");
            prop_assert_eq!(&*id, id.trim());
            prop_assert!(!id.is_empty());
        }
    }

    /// An id within the cap is kept as it is (trimmed); a longer one keeps its beginning and
    /// a digest of the whole, so two long ids that share a beginning stay two sessions. The
    /// byte-length shortcut decides as counting characters does.
    #[test]
    fn cleaning_keeps_short_ids_and_tells_long_ones_apart(
        raw in any_text(),
        pad in "[é€😀a ]{0,140}",
        tail in "[a-z]{1,4}",
    ) {
        for raw in [raw.clone(), format!("{pad}{raw}"), format!("{raw}{pad}{raw}")] {
            // Control characters are written as their escapes first.
            let escaped: String = raw
                .trim()
                .chars()
                .flat_map(|c| {
                    let escape = c.is_control().then(|| c.escape_default());
                    escape.into_iter().flatten().chain((!c.is_control()).then_some(c))
                })
                .collect();
            let trimmed = escaped.as_str();
            let cleaned = clean_session_id(&raw);
            if trimmed.chars().count() <= MAX_SESSION_ID_CHARS {
                prop_assert_eq!(cleaned.as_deref(), (!trimmed.is_empty()).then_some(trimmed));
                continue;
            }
            let cleaned = cleaned.expect("a long id");
            prop_assert_eq!(cleaned.chars().count(), MAX_SESSION_ID_CHARS);
            let head: String = trimmed.chars().take(MAX_SESSION_ID_CHARS - 17).collect();
            prop_assert!(cleaned.starts_with(&format!("{head}~")), "{cleaned:?}");
            let longer = format!("{trimmed}{tail}");
            let other = clean_session_id(&longer);
            prop_assert_ne!(other.as_deref(), Some(&*cleaned));
        }
    }

    #[test]
    fn agrees_with_the_derivations_it_replaces((headers, body, sources) in request()) {
        let id = identify(&headers, body.as_deref(), &sources, None, None);
        let (session, tenant) = layers_before(&headers, body.as_deref(), &sources, None, None);
        prop_assert_eq!(&id.session, &session);
        prop_assert_eq!(&id.tenant, &tenant);
        let found = session_id(&headers, body.as_deref(), &sources);
        prop_assert_eq!(id.source, found.map(|m| m.source));
    }

    #[test]
    fn headers_first_then_body_is_the_same_as_both_at_once(
        (headers, body, sources) in request(),
    ) {
        let at_once = identify(&headers, body.as_deref(), &sources, None, None);
        let first = identify(&headers, None, &sources, None, None);
        let then = match first.session {
            Some(_) => first,
            None => identify(&headers, body.as_deref(), &sources, None, Some(first.tenant)),
        };
        prop_assert_eq!(then, at_once);
    }

    #[test]
    fn an_explicit_session_is_cleaned_like_a_header(raw in header_text()) {
        let Ok(value) = HeaderValue::from_str(&raw) else { return Ok(()) };
        let mut headers = HeaderMap::new();
        headers.insert("x-session-id", value);
        let sources = SessionSources::default();
        let from_header = identify(&headers, None, &sources, None, None);
        let explicit = identify(&HeaderMap::new(), None, &sources, Some(Arc::from(raw.as_str())), None);
        prop_assert_eq!(&from_header.session, &explicit.session);
        prop_assert_eq!(
            explicit.source,
            explicit.session.as_ref().map(|_| SessionSource::Explicit)
        );
    }

    #[test]
    fn an_explicit_session_wins_and_agrees_with_the_gateway_before(
        raw in any_text(),
        (headers, body, sources) in request(),
        team in proptest::option::of("[a-z]{0,6}"),
    ) {
        let team: Option<Arc<str>> = team.map(Arc::from);
        let id = identify(&headers, body.as_deref(), &sources, Some(Arc::from(raw.as_str())), team.clone());
        match clean_session_id(&raw) {
            Some(s) => {
                prop_assert_eq!(id.session.as_deref(), Some(&*s));
                prop_assert_eq!(&id.source, &Some(SessionSource::Explicit));
            }
            // Blank: as if there were none.
            None => prop_assert_eq!(
                &id,
                &identify(&headers, body.as_deref(), &sources, None, team.clone())
            ),
        }
        // The layers used a clean explicit session as given.
        if clean_session_id(&raw).as_deref() == Some(raw.as_str()) {
            let (session, tenant) =
                layers_before(&headers, body.as_deref(), &sources, Some(Arc::from(raw.as_str())), team.clone());
            prop_assert_eq!(&id.session, &session);
            prop_assert_eq!(&id.tenant, &tenant);
        }
        if let Some(t) = team {
            prop_assert_eq!(id.tenant, t);
        }
    }
}

#[test]
fn a_clean_explicit_session_is_not_copied() {
    let s: Arc<str> = Arc::from("s-1");
    let id = identify(
        &HeaderMap::new(),
        None,
        &SessionSources::none(),
        Some(s.clone()),
        None,
    );
    assert!(Arc::ptr_eq(id.session.as_ref().expect("session"), &s));
}

#[test]
fn two_long_explicit_sessions_that_share_their_beginning_stay_two() {
    // Before, both were cut to their first 128 characters: one session, whose handoff one
    // conversation could receive from the other.
    let shared = "a".repeat(130);
    let session = |tail: &str| {
        identify(
            &HeaderMap::new(),
            None,
            &SessionSources::none(),
            Some(Arc::from(format!("{shared}{tail}"))),
            None,
        )
        .session
        .expect("a session")
    };
    let (x, y) = (session("-x"), session("-y"));
    assert_ne!(x, y);
    for id in [&x, &y] {
        assert_eq!(id.len(), MAX_SESSION_ID_CHARS);
        assert!(id.starts_with(&shared[..MAX_SESSION_ID_CHARS - 17]));
    }
    assert_eq!(session("-x"), x, "the same id, the same session");
}

#[test]
fn key_needs_a_session() {
    let none = identify(&HeaderMap::new(), None, &SessionSources::none(), None, None);
    assert_eq!(none.key("c"), None);
    let some = identify(
        &HeaderMap::new(),
        None,
        &SessionSources::none(),
        Some(Arc::from("s")),
        None,
    );
    assert_eq!(some.key("c"), Some(HandoffKey::new("anonymous", "s", "c")));
}
