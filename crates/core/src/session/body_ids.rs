//! The session ids a body may name (`metadata.user_id`, `prompt_cache_key`), read wherever
//! they stand among the top-level members.
//!
//! Clients put these members anywhere: the OpenAI SDK writes `prompt_cache_key` after a
//! Responses `input`, Claude Code writes `metadata` after `messages`. Missing them would fold
//! two conversations of one tenant with the same opening into one session (the fingerprint
//! cannot tell them apart), so they count wherever they stand at the top level.
//!
//! What keeps this cheap on a long history resent every turn:
//! - a byte search for the two key literals first (`"prompt_cache_key"`, `"metadata"`): a
//!   body holding neither is not walked at all;
//! - the walk over the top-level members skips every other value (the conversation array
//!   included) with the scanner, without decoding or copying it, and stops past the last
//!   place where either literal occurs, since no later member can be one of them.
//!
//! A key spelled with escapes (`"prompt\u005fcache_key"`) is not recognised; no client writes
//! one. A member repeated counts once, the last one read. A body that turns out malformed
//! keeps the ids read before the fault.

use super::lenient::{Object, Str};
use crate::json::Members;

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

/// Where the last possible start of either key is: one past the opening quote of the last
/// occurrence of either literal, or `None` when neither occurs.
fn last_candidate(body: &[u8]) -> Option<usize> {
    use std::sync::LazyLock;
    static FINDERS: LazyLock<[memchr::memmem::FinderRev<'static>; 2]> = LazyLock::new(|| {
        [
            memchr::memmem::FinderRev::new(b"\"prompt_cache_key\""),
            memchr::memmem::FinderRev::new(b"\"metadata\""),
        ]
    });
    FINDERS.iter().filter_map(|f| f.rfind(body)).max()
}

impl<'a> BodyIds<'a> {
    /// The ids among the top-level members of `body`; none when the body is not a JSON
    /// object. A member repeated counts once, the last one read.
    pub(super) fn read(body: &'a [u8]) -> Self {
        let mut ids = Self::default();
        if let Some(last) = last_candidate(body) {
            // A malformed body keeps what was read before the fault.
            let _ = ids.walk(body, last);
        }
        ids
    }

    /// Reads members until the one whose key starts after `last`: no key of interest can
    /// start there.
    fn walk(&mut self, body: &'a [u8], last: usize) -> Option<()> {
        let mut members = Members::root(body).ok()?;
        while let Some(key) = members.next() {
            let key = key.ok()?;
            if key.key_span.start > last {
                break;
            }
            match key.key.as_ref() {
                "metadata" => {
                    let span = members.value(&key).ok()?;
                    let meta: Object<Metadata<'a>> =
                        serde_json::from_slice(body.get(span)?).ok()?;
                    self.user_id = meta.0.and_then(|m| m.user_id.0);
                }
                "prompt_cache_key" => {
                    let span = members.value(&key).ok()?;
                    let s: Str<'a> = serde_json::from_slice(body.get(span)?).ok()?;
                    self.prompt_cache_key = s.0;
                }
                _ => {}
            }
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(body: &str) -> (Option<String>, Option<String>) {
        let ids = BodyIds::read(body.as_bytes());
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
}
