//! The fingerprint's reading against a reference model of its rules, and its edge cases.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

/// The documented reading, on decoded values: each text as its parts decoded and joined
/// by `\n` (the reference model of what [`Parts::read`] finds).
#[derive(Debug, PartialEq)]
struct Decoded {
    model: Option<String>,
    instructions: String,
    entries: Vec<String>,
    user: Option<String>,
}

fn reference_text(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| reference_text(v, out)),
        Value::Object(map) => {
            for (key, v) in map {
                if matches!(key.as_str(), "text" | "content" | "parts") {
                    reference_text(v, out);
                }
            }
        }
        _ => {}
    }
}

fn reference_block(parts: &[String]) -> bool {
    let mut parts = parts
        .iter()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .peekable();
    parts.peek().is_some()
        && parts.all(|p| {
            let tagged = p.strip_prefix('<').and_then(|rest| rest.chars().next());
            tagged.is_some_and(|c| c.is_ascii_alphabetic()) && p.ends_with('>')
        })
}

fn reference(model: &str, instructions: &Value, messages: &[Value]) -> Decoded {
    let mut text = Vec::new();
    reference_text(instructions, &mut text);
    let (mut entries, mut user, mut context) = (Vec::new(), None, None);
    for entry in messages {
        let Some(entry) = entry.as_object() else {
            continue;
        };
        let mut parts = Vec::new();
        entry
            .get("content")
            .inspect(|v| reference_text(v, &mut parts));
        entry
            .get("parts")
            .inspect(|v| reference_text(v, &mut parts));
        match entry.get("role").and_then(Value::as_str) {
            Some("system" | "developer") if context.is_none() => entries.push(parts.join("\n")),
            Some("user") if !reference_block(&parts) => {
                user = Some(parts.join("\n"));
                break;
            }
            Some("user") => {
                context.get_or_insert(parts.join("\n"));
            }
            _ => {}
        }
    }
    Decoded {
        model: Some(model.to_owned()),
        instructions: text.join("\n"),
        entries,
        user: user.or(context),
    }
}

fn decoded(body: &[u8]) -> Decoded {
    let parts = Parts::read(body).expect("a well-formed body");
    let join = |t: &Text| {
        t.decoded(body)
            .map(|p| p.expect("decodable").into_owned())
            .collect::<Vec<_>>()
            .join("\n")
    };
    Decoded {
        model: parts.model.map(|m| {
            json::decode_str(body, m.start - 1..m.end + 1)
                .expect("a string")
                .into_owned()
        }),
        instructions: join(&parts.instructions),
        entries: parts.entries.iter().map(join).collect(),
        user: parts.user.as_ref().map(join),
    }
}

/// Strings with what JSON escapes, what a context block looks like, and what trimming
/// passes over.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-c <>\n\t\"\\/é\u{1}\u{a0}]{0,10}",
        "[ \n\u{a0}]{0,2}<[a-z]{1,4}>[a-z \n]{0,4}</[a-z]{1,4}>[ \n]{0,2}",
        Just(String::new()),
    ]
}

fn content() -> impl Strategy<Value = Value> {
    let part = prop_oneof![
        text().prop_map(Value::String),
        text().prop_map(|t| json!({"type": "text", "text": t})),
        text().prop_map(|t| json!({"type": "image", "source": {"data": t}})),
        text().prop_map(|t| json!({"parts": [{"text": t}], "cache_control": {"type": "x"}})),
        text().prop_map(|t| json!([[t]])),
        Just(json!(7)),
    ];
    prop_oneof![
        text().prop_map(Value::String),
        prop::collection::vec(part, 0..4).prop_map(Value::Array),
        Just(Value::Null),
    ]
}

fn entry() -> impl Strategy<Value = Value> {
    let role = prop_oneof![
        Just(json!("system")),
        Just(json!("developer")),
        Just(json!("user")),
        Just(json!("assistant")),
        Just(json!(3)),
    ];
    prop_oneof![
        4 => (role, content(), prop::option::of(content())).prop_map(|(role, content, parts)| {
            let mut entry = json!({"role": role, "content": content});
            if let Some(parts) = parts {
                entry["parts"] = parts;
            }
            entry
        }),
        1 => Just(json!("not an entry")),
    ]
}

proptest! {
    /// What is read from the bytes as sent, decoded, is what the documented rules pick
    /// from the decoded body.
    #[test]
    fn reads_what_the_rules_pick(
        model in text(),
        instructions in content(),
        messages in prop::collection::vec(entry(), 0..6),
    ) {
        let body = format!(
            r#"{{"model":{},"instructions":{},"messages":{},"tools":[]}}"#,
            Value::String(model.clone()),
            instructions,
            Value::Array(messages.clone()),
        );
        let expected = reference(&model, &instructions, &messages);
        prop_assert_eq!(decoded(body.as_bytes()), expected);
    }

    /// The id is a function of those texts' bytes: the same texts in another key order,
    /// with other members around them, give the same id.
    #[test]
    fn other_members_do_not_count(
        instructions in content(),
        messages in prop::collection::vec(entry(), 1..5),
    ) {
        let messages = Value::Array(messages);
        let a = format!(r#"{{"model":"m","instructions":{instructions},"messages":{messages}}}"#);
        let b = format!(
            r#"{{"stream":true,"instructions":{instructions},"temperature":0.2,"model":"m","messages":{messages},"tools":[{{"name":"x"}}]}}"#
        );
        prop_assert_eq!(fingerprint(a.as_bytes()), fingerprint(b.as_bytes()));
    }
}

#[test]
fn an_escaped_role_is_read_decoded() {
    let plain = fp(r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#);
    let escaped = fp(r#"{"model":"m","messages":[{"role":"us\u0065r","content":"hi"}]}"#);
    assert!(plain.is_some());
    assert_eq!(plain, escaped);
}

#[test]
fn text_is_hashed_as_sent() {
    let a = fp(r#"{"model":"m","messages":[{"role":"user","content":"café"}]}"#);
    let b = fp(r#"{"model":"m","messages":[{"role":"user","content":"caf\u00e9"}]}"#);
    assert!(a.is_some() && b.is_some());
    assert_ne!(a, b);
}

#[test]
fn deep_nesting_in_a_text_gives_no_fingerprint() {
    let nested = |depth: usize| {
        format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":{}"hi"{}}}]}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        )
    };
    assert!(fp(&nested(100)).is_some());
    assert_eq!(fp(&nested(MAX_DEPTH + 10)), None);
    assert_eq!(fp(&nested(100_000)), None);
}

fn fp(json: &str) -> Option<String> {
    fingerprint(json.as_bytes())
}

/// v1 hashed the sorted tool names; v2 does not read them (they follow the history).
#[test]
fn tools_do_not_count_and_keys_before_the_history_may_move() {
    let a = fp(
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"b"}},{"type":"function","function":{"name":"a"}}]}"#,
    );
    let b = fp(
        r#"{"tools":[{"type":"function","function":{"name":"a"}}],"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#,
    );
    assert!(a.is_some());
    assert_eq!(a, b);
    // `model` after the history is not read.
    let c = fp(r#"{"messages":[{"role":"user","content":"hi"}],"model":"m"}"#);
    assert_ne!(a, c);
    assert_eq!(
        c,
        fp(r#"{"messages":[{"role":"user","content":"hi"}],"model":"x"}"#)
    );
}

#[test]
fn keys_before_the_history_count_in_any_order() {
    let keys = [
        r#""model":"m""#,
        r#""instructions":"be brief""#,
        r#""system":[{"type":"text","text":"sys"}]"#,
        r#""systemInstruction":{"parts":[{"text":"g"}]}"#,
    ];
    let body = |order: &[usize]| {
        let head: Vec<&str> = order.iter().map(|&i| keys[i]).collect();
        fp(&format!(
            r#"{{{},"messages":[{{"role":"user","content":"hi"}}],"tools":[]}}"#,
            head.join(",")
        ))
    };
    let reference = body(&[0, 1, 2, 3]);
    for order in [[3, 2, 1, 0], [1, 3, 0, 2], [2, 0, 3, 1]] {
        assert_eq!(body(&order), reference);
    }
    // Each of them counts.
    for drop in 0..4 {
        let rest: Vec<usize> = (0..4).filter(|&i| i != drop).collect();
        assert_ne!(body(&rest), reference);
    }
    // A repeated key: the last one counts.
    let twice = fp(
        r#"{"model":"x","model":"m","instructions":"be brief","system":[{"type":"text","text":"sys"}],"systemInstruction":{"parts":[{"text":"g"}]},"messages":[{"role":"user","content":"hi"}]}"#,
    );
    assert_eq!(twice, reference);
}

#[test]
fn gemini_and_responses_string_input() {
    let g = fp(
        r#"{"systemInstruction":{"parts":[{"text":"be brief"}]},"contents":[{"role":"user","parts":[{"text":"hi"}]},{"role":"model","parts":[{"text":"yo"}]}],"tools":[{"functionDeclarations":[{"name":"f"},{"name":"e"}]}]}"#,
    );
    let g2 = fp(
        r#"{"systemInstruction":{"parts":[{"text":"be brief"}]},"contents":[{"role":"user","parts":[{"text":"hi"}]}],"tools":[{"functionDeclarations":[{"name":"e"},{"name":"f"}]}]}"#,
    );
    assert!(g.is_some());
    assert_eq!(g, g2);
    let r = fp(r#"{"model":"m","instructions":"be brief","input":"hi"}"#);
    let r2 = fp(
        r#"{"model":"m","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]},{"type":"function_call","name":"x"}]}"#,
    );
    assert_eq!(r, r2);
}

#[test]
fn an_empty_conversation_array_is_passed_over() {
    let input = r#""input":[{"role":"user","content":"hi"}]"#;
    let alone = fp(&format!(r#"{{"model":"m",{input}}}"#));
    assert!(alone.is_some());
    assert_eq!(
        fp(&format!(r#"{{"model":"m","messages":[ ],{input}}}"#)),
        alone
    );
    assert_eq!(fp(r#"{"model":"m","messages":[]}"#), None);
}

#[test]
fn context_blocks_are_passed_over() {
    let env = r#"{"role":"user","content":[{"type":"input_text","text":"<environment_context>\n<cwd>/w</cwd>\n</environment_context>"}]}"#;
    let a = fp(&format!(
        r#"{{"model":"m","input":[{env},{{"role":"user","content":"task one"}}]}}"#
    ));
    let b = fp(&format!(
        r#"{{"model":"m","input":[{env},{{"role":"user","content":"task two"}}]}}"#
    ));
    assert_ne!(a, b);
    let only_env = fp(&format!(r#"{{"model":"m","input":[{env}]}}"#));
    assert!(only_env.is_some());
}

#[test]
fn no_conversation_no_fingerprint() {
    assert_eq!(fp(r#"{"model":"m"}"#), None);
    assert_eq!(fp("[]"), None);
    assert_eq!(fp("not json"), None);
    assert_eq!(
        fp(r#"{"model":"m","messages":5,"input":{"role":"user"}}"#),
        None
    );
}

#[test]
fn fields_do_not_run_together() {
    // Without length prefixes these two would hash the same bytes.
    let a = fp(r#"{"model":"ab","messages":[{"role":"user","content":"c"}]}"#);
    let b = fp(r#"{"model":"a","messages":[{"role":"user","content":"bc"}]}"#);
    assert_ne!(a, b);
}

proptest! {
    /// A conversation is continued when an answer follows its first ask: any entry but the
    /// client's own (`user`, `system`, `developer`) and a non-object.
    #[test]
    fn continued_means_an_answer_follows_the_ask(
        later in prop::collection::vec(
            prop_oneof![
                Just(json!({"role": "system", "content": "agents"})),
                Just(json!({"role": "developer", "content": "rules"})),
                Just(json!({"role": "user", "content": "more"})),
                Just(json!({"role": "assistant", "content": "done"})),
                Just(json!({"role": "model", "parts": [{"text": "done"}]})),
                Just(json!({"role": "tool", "tool_call_id": "c", "content": "ok"})),
                Just(json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"})),
                Just(json!("not an entry")),
            ],
            0..5,
        ),
        context_first in any::<bool>(),
    ) {
        let mut messages = Vec::new();
        if context_first {
            messages.push(json!({"role": "user", "content": "<system-reminder>ctx</system-reminder>"}));
        }
        messages.push(json!({"role": "user", "content": "fix the bug"}));
        messages.extend(later.iter().cloned());
        let body = json!({ "messages": messages }).to_string();
        let expected = later.iter().any(|e| {
            e.is_object()
                && !matches!(e.get("role").and_then(Value::as_str), Some("user" | "system" | "developer"))
        });
        prop_assert_eq!(opening(body.as_bytes()).map(|o| o.continued), Some(expected));
    }
}

/// An entry after the ask that cannot be read (not well-formed) counts as an answer: the
/// request keeps its opening, continued, as before the reading went past the ask. One nested
/// deeper than the text reader goes is read for its role alone.
#[test]
fn an_unreadable_entry_after_the_ask_counts_as_an_answer() {
    let first = br#"{"messages":[{"role":"user","content":"fix the bug"}]}"#;
    let broken = br#"{"messages":[{"role":"user","content":"fix the bug"},{"role":"system","content":[1,}]}"#;
    let open = opening(broken).expect("an opening");
    assert!(open.continued);
    assert_eq!(open.digest, opening(first).unwrap().digest);
    let deep = format!(
        "{}1{}",
        "[".repeat(MAX_DEPTH + 8),
        "]".repeat(MAX_DEPTH + 8)
    );
    let system = format!(
        r#"{{"messages":[{{"role":"user","content":"fix the bug"}},{{"role":"system","content":{deep}}}]}}"#
    );
    assert!(!opening(system.as_bytes()).expect("an opening").continued);
    let answer = system.replace(r#""role":"system""#, r#""role":"assistant""#);
    assert!(opening(answer.as_bytes()).expect("an opening").continued);
}
