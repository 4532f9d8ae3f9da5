//! The session ids a body may name (`metadata.user_id`, `prompt_cache_key`), read wherever
//! they stand among the top-level members.
//!
//! Clients put these members anywhere: the OpenAI SDK writes `prompt_cache_key` after a
//! Responses `input`, Claude Code writes `metadata` after `messages`. Missing them would fold
//! two conversations of one tenant with the same opening into one session (the fingerprint
//! cannot tell them apart), so they count wherever they stand at the top level.
//!
//! What keeps this cheap on a long history resent every turn:
//! - a forward byte search for the two key literals first (`"prompt_cache_key"`,
//!   `"metadata"`): a body holding neither is not walked at all;
//! - the walk over the top-level members skips every other value (the conversation array
//!   included) with the scanner, without decoding or copying it; once it passes the next
//!   place where a literal occurs, it searches for the one after, and stops when there is
//!   none, since no later member can be one of them. A key written first costs one walk step
//!   and one search over the rest of the body.
//!
//! A key spelled with escapes (`"prompt\u005fcache_key"`) is not recognised; no client writes
//! one. A member repeated counts once, the last one read. A body that turns out malformed
//! keeps the ids read before the fault.

use super::BODY_ID_LITERALS;
use super::lenient::{Object, Str};
use crate::json::{Found, Members};

/// The raw ids found; `None` members were absent (or of another type).
#[derive(Default)]
pub(super) struct BodyIds<'a> {
    pub(super) user_id: Option<std::borrow::Cow<'a, str>>,
    pub(super) prompt_cache_key: Option<std::borrow::Cow<'a, str>>,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Metadata<'a> {
    #[serde(borrow)]
    user_id: Str<'a>,
}

/// Forward searchers for the quoted key literals of `keys`, built once per call site. One
/// `memchr` pass per literal: for two long literals that is fewer instructions than one packed
/// pass for both ([`crate::json::Needles`]), measured on the perf harness's 100 KB body (95 000
/// against 114 000).
type Finders = [memchr::memmem::Finder<'static>];

/// Where the literals are found: searched here, or looked up in a caller's one pass over the
/// body ([`Found`], built from a set that includes them), which searches only past its cap.
#[derive(Clone, Copy)]
struct Candidates<'f> {
    finders: &'f Finders,
    literals: &'f [&'static [u8]],
    found: Option<&'f Found<'f>>,
}

impl Candidates<'_> {
    /// The start of the first occurrence at or after `from` of any of the literals, or `None`.
    fn next(&self, body: &[u8], from: usize) -> Option<usize> {
        let from = match self.found.map(|f| f.next_of(self.literals, from)) {
            Some(Ok(known)) => return known,
            Some(Err(resume)) => resume,
            None => from,
        };
        let rest = body.get(from..)?;
        self.finders
            .iter()
            .filter_map(|f| f.find(rest))
            .min()
            .map(|i| from + i)
    }
}

/// Calls `found` with each top-level member whose key is one of `keys` (unquoted), in body
/// order, and the span of its value; only bodies holding one of the key literals are walked,
/// and the walk stops past the last of them. Stops early when `found` returns `false`.
fn top_level_members(
    body: &[u8],
    candidates: Candidates<'_>,
    keys: &[&str],
    mut found: impl FnMut(&str, crate::json::Span) -> bool,
) {
    let Some(mut next) = candidates.next(body, 0) else {
        return;
    };
    let Ok(mut members) = Members::root(body) else {
        return;
    };
    while let Some(Ok(key)) = members.next() {
        if key.key_span.start > next {
            // The occurrence was inside an earlier value: look for the next one from here.
            match candidates.next(body, key.key_span.start) {
                Some(n) => next = n,
                None => return,
            }
        }
        if keys.contains(&key.key.as_ref()) {
            // A malformed value ends the walk; what was found before it counts.
            let Ok(span) = members.value(&key) else {
                return;
            };
            if !found(key.key.as_ref(), span) {
                return;
            }
        }
    }
}

/// Whether `body` continues a conversation kept by the provider: a top-level
/// `previous_response_id` or `conversation` member (Responses API), wherever it stands.
pub(super) fn chained(body: &[u8]) -> bool {
    use std::sync::LazyLock;
    static FINDERS: LazyLock<[memchr::memmem::Finder<'static>; 2]> = LazyLock::new(|| {
        [
            memchr::memmem::Finder::new(b"\"previous_response_id\""),
            memchr::memmem::Finder::new(b"\"conversation\""),
        ]
    });
    let mut chained = false;
    let candidates = Candidates {
        finders: &*FINDERS,
        literals: &[b"\"previous_response_id\"", b"\"conversation\""],
        found: None,
    };
    top_level_members(
        body,
        candidates,
        &["previous_response_id", "conversation"],
        |_, span| {
            // `null` continues nothing.
            chained = body.get(span).is_some_and(|v| v != b"null");
            !chained
        },
    );
    chained
}

impl<'a> BodyIds<'a> {
    /// The ids among the top-level members of `body`; none when the body is not a JSON
    /// object. A member repeated counts once, the last one read. `found`: where the caller's
    /// own pass found [`BODY_ID_LITERALS`] in `body`, if it made one.
    pub(super) fn read(body: &'a [u8], found: Option<&Found<'_>>) -> Self {
        use std::sync::LazyLock;
        static FINDERS: LazyLock<[memchr::memmem::Finder<'static>; 2]> =
            LazyLock::new(|| BODY_ID_LITERALS.map(memchr::memmem::Finder::new));
        let mut ids = Self::default();
        let candidates = Candidates {
            finders: &*FINDERS,
            literals: &BODY_ID_LITERALS,
            found,
        };
        top_level_members(
            body,
            candidates,
            &["metadata", "prompt_cache_key"],
            |key, span| {
                let Some(value) = body.get(span) else {
                    return false;
                };
                if key == "metadata" {
                    let meta: Option<Object<Metadata<'a>>> = serde_json::from_slice(value).ok();
                    ids.user_id = meta.and_then(|m| m.0).and_then(|m| m.user_id.0);
                } else {
                    let s: Option<Str<'a>> = serde_json::from_slice(value).ok();
                    ids.prompt_cache_key = s.and_then(|s| s.0);
                }
                true
            },
        );
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(body: &str) -> (Option<String>, Option<String>) {
        let ids = BodyIds::read(body.as_bytes(), None);
        (
            ids.user_id.map(|s| s.into_owned()),
            ids.prompt_cache_key.map(|s| s.into_owned()),
        )
    }

    #[test]
    fn read_wherever_they_stand() {
        assert_eq!(
            ids(r#"{"prompt_cache_key":"k","metadata":{"user_id":"u"},"messages":[1]}"#),
            (Some("u".into()), Some("k".into()))
        );
        // After the conversation, as the OpenAI SDK and Claude Code send them.
        assert_eq!(
            ids(r#"{"model":"m","input":"hi","prompt_cache_key":"k"}"#),
            (None, Some("k".into()))
        );
        assert_eq!(
            ids(r#"{"messages":[{"role":"user"}],"metadata":{"user_id":"u"}}"#),
            (Some("u".into()), None)
        );
        assert_eq!(
            ids(r#"{"messages":[],"prompt_cache_key":"k","input":[1]}"#),
            (None, Some("k".into()))
        );
        // Members of another type count as absent; the walk goes on.
        assert_eq!(
            ids(r#"{"prompt_cache_key":5,"metadata":{"user_id":"u"},"messages":"x"}"#),
            (Some("u".into()), None)
        );
        // Repeated: the last one.
        assert_eq!(
            ids(r#"{"prompt_cache_key":"a","input":[],"prompt_cache_key":"b"}"#),
            (None, Some("b".into()))
        );
    }

    #[test]
    fn only_top_level_members_count() {
        // The literals inside the history (a message quoting a body, a tool's arguments).
        assert_eq!(
            ids(
                r#"{"input":[{"role":"user","content":"{\"prompt_cache_key\":\"x\"}","metadata":{"user_id":"v"},"prompt_cache_key":"y"}]}"#
            ),
            (None, None)
        );
        assert_eq!(
            ids(r#"{"input":[{"prompt_cache_key":"y"}],"prompt_cache_key":"k"}"#),
            (None, Some("k".into()))
        );
    }

    #[test]
    fn malformed_bodies() {
        // Malformed after an id: the ids before the fault still count.
        assert_eq!(
            ids(r#"{"prompt_cache_key":"k","messages":[ oops"#),
            (None, Some("k".into()))
        );
        // Malformed before it: none.
        assert_eq!(
            ids(r#"{"messages":[ oops ],"prompt_cache_key":"k"}"#),
            (None, None)
        );
        assert_eq!(
            ids(r#"{"prompt_cache_key":"k", oops"#),
            (None, Some("k".into()))
        );
        assert_eq!(ids("not json"), (None, None));
        assert_eq!(ids(r#"["prompt_cache_key"]"#), (None, None));
        assert_eq!(ids(r#"{"a":"\"prompt_cache_key\""}"#), (None, None));
    }

    #[test]
    fn the_walk_stops_past_the_last_literal() {
        // What follows the last possible key is never read: a malformed tail does not matter.
        assert_eq!(
            ids(r#"{"prompt_cache_key":"k","input":[1], "tail": oops"#),
            (None, Some("k".into()))
        );
    }

    proptest::proptest! {
        /// Whatever the order of the members and wherever the literal also occurs inside
        /// values, the key read is the last top-level string one, as a full parse reads it.
        #[test]
        fn agrees_with_a_full_parse(
            members in proptest::collection::vec((0u8..5, "[a-z]{0,6}"), 0..8),
        ) {
            let parts: Vec<String> = members
                .iter()
                .map(|(kind, v)| match kind {
                    0 => format!(r#""prompt_cache_key":"{v}""#),
                    1 => format!(r#""input":[{{"prompt_cache_key":"n{v}"}},"\"prompt_cache_key\""]"#),
                    2 => format!(r#""prompt_cache_key":{}"#, v.len()),
                    3 => format!(r#""note":"prompt_cache_key {v}""#),
                    _ => format!(r#""m{v}":{{"a":[1,2,{{"b":"c"}}]}}"#),
                })
                .collect();
            let body = format!("{{{}}}", parts.join(","));
            // The oracle: the last top-level member of that name, when it is a string.
            let mut expected = None;
            for (kind, v) in &members {
                match kind {
                    0 => expected = Some(v.clone()),
                    2 => expected = None,
                    _ => {}
                }
            }
            proptest::prop_assert_eq!(ids(&body).1, expected, "{}", body);
        }

        /// Reading with a caller's pass over the body (whatever its cap, and after the body
        /// was spliced, as the gateway writes `model`) finds what searching finds.
        #[test]
        fn a_callers_pass_reads_the_same_ids(
            members in proptest::collection::vec((0u8..6, "[a-z]{0,6}"), 0..8),
            cap in proptest::prop_oneof![proptest::strategy::Just(usize::MAX), 0usize..4],
            model in "[a-z\\\\\"]{0,8}",
        ) {
            let parts: Vec<String> = members
                .iter()
                .map(|(kind, v)| match kind {
                    0 => format!(r#""prompt_cache_key":"{v}""#),
                    1 => format!(r#""metadata":{{"user_id":"{v}"}}"#),
                    2 => format!(r#""input":[{{"metadata":"n{v}"}},"\"prompt_cache_key\""]"#),
                    3 => format!(r#""model":"\u00{v}""#),
                    _ => format!(r#""m{v}":{{"a":[1,2,{{"b":"c"}}]}}"#),
                })
                .collect();
            let body = format!("{{\"model\":\"x\",{}}}", parts.join(","));
            let needles = crate::json::Needles::new(&[
                b"\"model\"",
                b"\\u",
                BODY_ID_LITERALS[0],
                BODY_ID_LITERALS[1],
            ]);
            let own = |b: &[u8], found: Option<&Found<'_>>| {
                let ids = BodyIds::read(b, found);
                (ids.user_id.map(|s| s.into_owned()), ids.prompt_cache_key.map(|s| s.into_owned()))
            };
            let found = needles.find_all(body.as_bytes(), cap);
            proptest::prop_assert_eq!(own(body.as_bytes(), Some(&found)), own(body.as_bytes(), None));
            // `model`'s value (bytes 9..12) replaced, as the gateway writes the target's name.
            let literal = serde_json::to_string(&model).unwrap();
            let spliced = format!("{}{}{}", &body[..9], literal, &body[12..]);
            let found = found.spliced(spliced.as_bytes(), 9..12, literal.len());
            proptest::prop_assert_eq!(
                own(spliced.as_bytes(), Some(&found)),
                own(spliced.as_bytes(), None)
            );
        }
    }
}
