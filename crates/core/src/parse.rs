//! The structured [`Handoff`] out of a summary model's reply text, clamped to its limits.
//!
//! Models wrap JSON in a markdown fence or chat around it despite being told not to, so the
//! reader is lenient about the envelope and strict about the content:
//!
//! 1. one markdown fence around the whole text (```` ``` ```` with an optional language tag)
//!    is removed, then the text is trimmed;
//! 2. if that is not a JSON object, the substring from the first `{` to the last `}` is tried;
//! 3. `summary` must be a string that is not blank once trimmed, else there is no handoff;
//! 4. the other fields are optional and cleaned: see [`parse_handoff`].
//!
//! Every cut is made on a char boundary ([`clamp_chars`]), so a multi-byte character is never
//! split.
//!
//! ```
//! use context_relay_core::parse::parse_handoff;
//!
//! let reply = "```json\n{\"summary\": \" Adding a --json flag. \", \"keyDecisions\": [\"use serde\", \"\"]}\n```";
//! let h = parse_handoff(reply).unwrap();
//! assert_eq!(h.summary, "Adding a --json flag.");
//! assert_eq!(h.key_decisions, ["use serde"]);
//! assert!(parse_handoff("sorry, I cannot help with that").is_none());
//! ```

use serde_json::{Map, Value};

use crate::handoff::{
    Handoff, MAX_ACTIVE_ENTITIES, MAX_ITEM_CHARS, MAX_KEY_DECISIONS, MAX_SUMMARY_CHARS,
    MAX_TASK_PROGRESS_CHARS,
};

/// The longest prefix of `s` with at most `max_chars` chars (never splits a UTF-8 sequence).
///
/// ```
/// use context_relay_core::parse::clamp_chars;
/// assert_eq!(clamp_chars("héllo", 2), "hé");
/// assert_eq!(clamp_chars("hi", 10), "hi");
/// ```
pub fn clamp_chars(s: &str, max_chars: usize) -> &str {
    match s.char_indices().nth(max_chars) {
        Some((cut, _)) => &s[..cut],
        None => s,
    }
}

/// Longest name a log line writes of a value a client chose (a direct route's
/// `provider/model`, a combo), in chars: a model name can be a megabyte long.
pub const LOGGED_NAME_MAX_CHARS: usize = 200;

/// `s` cut to [`LOGGED_NAME_MAX_CHARS`] chars for a log line (as it is when shorter, which
/// its length in bytes tells without reading it).
///
/// ```
/// use context_relay_core::parse::{LOGGED_NAME_MAX_CHARS, clamp_logged};
/// assert_eq!(clamp_logged("codex-relay"), "codex-relay");
/// assert_eq!(clamp_logged(&"é".repeat(1000)).chars().count(), LOGGED_NAME_MAX_CHARS);
/// ```
pub fn clamp_logged(s: &str) -> &str {
    if s.len() <= LOGGED_NAME_MAX_CHARS {
        s
    } else {
        clamp_chars(s, LOGGED_NAME_MAX_CHARS)
    }
}

/// The longest prefix of `s` of at most `max_bytes` bytes that ends on a char boundary.
pub(crate) fn clamp_bytes(s: &str, max_bytes: usize) -> &str {
    if s.len() <= max_bytes {
        return s;
    }
    let mut cut = max_bytes;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    &s[..cut]
}

/// Reads a handoff out of a summary reply, or `None` when the reply is unparseable.
///
/// Fields (camelCase as the prompt asks; the snake_case spelling is accepted too, since models
/// drift to it):
/// - `summary`: a string, trimmed, at most [`MAX_SUMMARY_CHARS`] chars; required and not blank.
/// - `taskProgress`: a string, trimmed, at most [`MAX_TASK_PROGRESS_CHARS`] chars. Models often
///   answer with an object (`{"done": …, "pending": …, "next": …}`) or a list instead; an
///   object becomes `key: value; key: value` (list values joined by `, `), a list becomes its
///   items joined by `; `. Anything else is left empty.
/// - `keyDecisions` (≤ [`MAX_KEY_DECISIONS`]) and `activeEntities` (≤ [`MAX_ACTIVE_ENTITIES`]):
///   arrays whose string items are trimmed and cut to [`MAX_ITEM_CHARS`] chars; non-strings and
///   blank strings are dropped before counting. A lone string counts as a one-item list.
pub fn parse_handoff(text: &str) -> Option<Handoff> {
    let obj = json_object(strip_fence(text.trim()).trim())?;
    let summary = field(&obj, "summary", "summary")
        .and_then(Value::as_str)
        .map(|s| clamp_trimmed(s, MAX_SUMMARY_CHARS))?;
    if summary.is_empty() {
        return None;
    }
    let task_progress = field(&obj, "taskProgress", "task_progress")
        .map(|v| clamp_trimmed(&progress_text(v), MAX_TASK_PROGRESS_CHARS))
        .unwrap_or_default();
    Some(Handoff {
        summary,
        key_decisions: string_list(
            field(&obj, "keyDecisions", "key_decisions"),
            MAX_KEY_DECISIONS,
        ),
        task_progress,
        active_entities: string_list(
            field(&obj, "activeEntities", "active_entities"),
            MAX_ACTIVE_ENTITIES,
        ),
    })
}

fn field<'a>(obj: &'a Map<String, Value>, camel: &str, snake: &str) -> Option<&'a Value> {
    obj.get(camel).or_else(|| obj.get(snake))
}

/// Removes one markdown fence enclosing the whole text; anything else is returned unchanged.
fn strip_fence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let Some(inner) = rest.strip_suffix("```") else {
        return text;
    };
    // The opening line may carry a language tag (`json`, `JSON`, …); the body starts after it.
    match inner.find('\n') {
        Some(nl) => &inner[nl + 1..],
        None => inner,
    }
}

fn json_object(text: &str) -> Option<Map<String, Value>> {
    if let Ok(Value::Object(obj)) = serde_json::from_str(text) {
        return Some(obj);
    }
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    if end <= start {
        return None;
    }
    match serde_json::from_str(&text[start..=end]) {
        Ok(Value::Object(obj)) => Some(obj),
        _ => None,
    }
}

fn clamp_trimmed(s: &str, max_chars: usize) -> String {
    clamp_chars(s.trim(), max_chars).trim_end().to_owned()
}

fn string_list(v: Option<&Value>, max_items: usize) -> Vec<String> {
    let items: &[Value] = match v {
        Some(Value::Array(items)) => items,
        Some(one @ Value::String(_)) => std::slice::from_ref(one),
        _ => return Vec::new(),
    };
    items
        .iter()
        .filter_map(Value::as_str)
        .map(|s| clamp_trimmed(s, MAX_ITEM_CHARS))
        .filter(|s| !s.is_empty())
        .take(max_items)
        .collect()
}

/// `taskProgress` as text (see [`parse_handoff`]).
fn progress_text(v: &Value) -> String {
    fn scalar(v: &Value) -> String {
        match v {
            Value::String(s) => s.trim().to_owned(),
            Value::Null => String::new(),
            Value::Array(items) => items
                .iter()
                .map(scalar)
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(", "),
            other => other.to_string(),
        }
    }
    // serde_json maps are sorted by key; a progress report reads best in its natural order.
    const FIRST: [&str; 7] = [
        "done",
        "completed",
        "pending",
        "remaining",
        "next",
        "nextStep",
        "next_step",
    ];
    match v {
        Value::Object(obj) => FIRST
            .iter()
            .filter_map(|k| obj.get_key_value(*k))
            .chain(obj.iter().filter(|(k, _)| !FIRST.contains(&k.as_str())))
            .filter_map(|(k, v)| {
                let v = scalar(v);
                (!v.is_empty()).then(|| format!("{k}: {v}"))
            })
            .collect::<Vec<_>>()
            .join("; "),
        Value::Array(items) => items
            .iter()
            .map(scalar)
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("; "),
        Value::String(s) => s.clone(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_fenced_json() {
        let body = r#"{"summary":"s","keyDecisions":["a"],"taskProgress":"p","activeEntities":["src/x.rs"]}"#;
        let want = Handoff {
            summary: "s".into(),
            key_decisions: vec!["a".into()],
            task_progress: "p".into(),
            active_entities: vec!["src/x.rs".into()],
        };
        assert_eq!(parse_handoff(body), Some(want.clone()));
        assert_eq!(
            parse_handoff(&format!("```json\n{body}\n```")),
            Some(want.clone())
        );
        assert_eq!(
            parse_handoff(&format!("```\n{body}\n```")),
            Some(want.clone())
        );
        assert_eq!(
            parse_handoff(&format!("  ```JSON\n{body}```  \n")),
            Some(want.clone())
        );
        assert_eq!(parse_handoff(&format!("```{body}```")), Some(want.clone()));
    }

    #[test]
    fn json_inside_prose_is_found() {
        let h = parse_handoff("Here you go:\n{\"summary\": \"ok {braces} inside\"}\nThanks!")
            .expect("handoff");
        assert_eq!(h.summary, "ok {braces} inside");
    }

    #[test]
    fn unparseable_replies() {
        for bad in [
            "",
            "no json here",
            "{not json}",
            "} backwards {",
            r#"{"summary": ""}"#,
            r#"{"summary": "   "}"#,
            r#"{"summary": 42}"#,
            r#"{"keyDecisions": ["a"]}"#,
            r#"["summary"]"#,
            "```json\n```",
        ] {
            assert_eq!(parse_handoff(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn long_summary_is_cut() {
        let text = serde_json::json!({"summary": "é".repeat(5000)}).to_string();
        let h = parse_handoff(&text).expect("handoff");
        assert_eq!(h.summary.chars().count(), MAX_SUMMARY_CHARS);
        let text =
            serde_json::json!({"summary": "s", "taskProgress": "p".repeat(3000)}).to_string();
        let h = parse_handoff(&text).expect("handoff");
        assert_eq!(h.task_progress.chars().count(), MAX_TASK_PROGRESS_CHARS);
    }

    #[test]
    fn lists_keep_strings_only() {
        let h =
            parse_handoff(r#"{"summary":"s","keyDecisions":["valid","",123,null,"also valid"]}"#)
                .expect("handoff");
        assert_eq!(h.key_decisions, ["valid", "also valid"]);
    }

    #[test]
    fn lists_are_bounded() {
        let many: Vec<String> = (0..20).map(|i| format!(" item {i} ")).collect();
        let long = "x".repeat(500);
        let text = serde_json::json!({
            "summary": "s",
            "keyDecisions": many,
            "activeEntities": [long, "", "   ", "a"],
        })
        .to_string();
        let h = parse_handoff(&text).expect("handoff");
        assert_eq!(h.key_decisions.len(), MAX_KEY_DECISIONS);
        assert_eq!(h.key_decisions[0], "item 0");
        assert_eq!(h.active_entities.len(), 2);
        assert_eq!(h.active_entities[0].chars().count(), MAX_ITEM_CHARS);
        let text = serde_json::json!({"summary": "s", "activeEntities": (0..30).map(|i| i.to_string()).collect::<Vec<_>>()}).to_string();
        assert_eq!(
            parse_handoff(&text).expect("handoff").active_entities.len(),
            MAX_ACTIVE_ENTITIES
        );
    }

    #[test]
    fn structured_task_progress_is_rendered() {
        let h = parse_handoff(
            r#"{"summary":"s","taskProgress":{"next":"ship","done":["parser","tests"],"pending":"docs","blockers":null,"eta":3}}"#,
        )
        .expect("handoff");
        assert_eq!(
            h.task_progress,
            "done: parser, tests; pending: docs; next: ship; eta: 3"
        );
        let h = parse_handoff(r#"{"summary":"s","taskProgress":["a","b"]}"#).expect("handoff");
        assert_eq!(h.task_progress, "a; b");
        let h = parse_handoff(r#"{"summary":"s","taskProgress":7}"#).expect("handoff");
        assert_eq!(h.task_progress, "");
    }

    #[test]
    fn snake_case_and_lone_strings() {
        let h = parse_handoff(
            r#"{"summary":"s","key_decisions":"one","task_progress":"tp","active_entities":["e"]}"#,
        )
        .expect("handoff");
        assert_eq!(h.key_decisions, ["one"]);
        assert_eq!(h.task_progress, "tp");
        assert_eq!(h.active_entities, ["e"]);
    }

    #[test]
    fn clamping() {
        assert_eq!(clamp_chars("", 3), "");
        assert_eq!(clamp_chars("abc", 0), "");
        assert_eq!(clamp_chars("日本語", 2), "日本");
        assert_eq!(clamp_bytes("日本語", 4), "日");
        assert_eq!(clamp_bytes("日本語", 100), "日本語");
        assert_eq!(clamp_bytes("日本語", 2), "");
    }
}
