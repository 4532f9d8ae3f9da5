//! The session ids a body may name (`metadata.user_id`, `prompt_cache_key`), read from the
//! members before its conversation.
//!
//! A conversation body resends the whole history every turn, so reading past it to find two
//! small members costs time in proportion to the history on every request. These ids are read
//! from the top-level members that come **before the conversation array** (`messages`,
//! `input` or `contents`, unless it is an empty array) and nowhere else; the walk stops at the
//! conversation. The rule is the same on every turn of a conversation (a client keeps its key
//! order), so a session is told the same way on its first and its hundredth turn.
//!
//! The real clients that send these members after the history (Codex: `prompt_cache_key`;
//! Claude Code: `metadata`) send the same id in a session header, which is read first; a body
//! without that header falls back to the fingerprint, which is stable across turns too.

use super::lenient::{Object, Str};
use crate::json::{Kind, Members};

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

impl<'a> BodyIds<'a> {
    /// The ids among the members before the conversation of `body`; none when what is read is
    /// not well-formed JSON or the body is not an object. A member repeated counts once, the
    /// last one read.
    pub(super) fn read(body: &'a [u8]) -> Self {
        Self::walk(body).unwrap_or_default()
    }

    fn walk(body: &'a [u8]) -> Option<Self> {
        let mut ids = Self::default();
        let mut members = Members::root(body).ok()?;
        while let Some(key) = members.next() {
            let key = key.ok()?;
            match key.key.as_ref() {
                "metadata" => {
                    let span = members.value(&key).ok()?;
                    let meta: Object<Metadata<'a>> =
                        serde_json::from_slice(body.get(span)?).ok()?;
                    ids.user_id = meta.0.and_then(|m| m.user_id.0);
                }
                "prompt_cache_key" => {
                    let span = members.value(&key).ok()?;
                    let s: Str<'a> = serde_json::from_slice(body.get(span)?).ok()?;
                    ids.prompt_cache_key = s.0;
                }
                "messages" | "input" | "contents" => match Kind::at(body, key.value_start) {
                    Some(Kind::Array)
                        if super::fingerprint::is_empty_array(body, key.value_start) => {}
                    Some(Kind::Array | Kind::String) => return Some(ids),
                    _ => {}
                },
                _ => {}
            }
        }
        Some(ids)
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
    fn read_before_the_conversation_only() {
        assert_eq!(
            ids(r#"{"prompt_cache_key":"k","metadata":{"user_id":"u"},"messages":[1]}"#),
            (Some("u".into()), Some("k".into()))
        );
        assert_eq!(
            ids(r#"{"model":"m","input":"hi","prompt_cache_key":"k"}"#),
            (None, None)
        );
        assert_eq!(
            ids(r#"{"messages":[{"role":"user"}],"metadata":{"user_id":"u"}}"#),
            (None, None)
        );
        // An empty conversation array is passed over, as the fingerprint does.
        assert_eq!(
            ids(r#"{"messages":[],"prompt_cache_key":"k","input":[1]}"#),
            (None, Some("k".into()))
        );
        // Members of another type count as absent; the walk goes on.
        assert_eq!(
            ids(r#"{"prompt_cache_key":5,"metadata":{"user_id":"u"},"messages":"x"}"#),
            (Some("u".into()), None)
        );
    }

    #[test]
    fn nothing_after_the_conversation_is_read() {
        // Malformed after the conversation started: the ids before it still count.
        assert_eq!(
            ids(r#"{"prompt_cache_key":"k","messages":[ oops"#),
            (None, Some("k".into()))
        );
        // Malformed before it: none.
        assert_eq!(ids(r#"{"prompt_cache_key":"k", oops"#), (None, None));
        assert_eq!(ids("not json"), (None, None));
        assert_eq!(ids(r#"["prompt_cache_key"]"#), (None, None));
    }
}
