//! Property tests of injection and portability over generated request bodies.

use context_relay_core::ApiShape;
use context_relay_core::config::InjectionSlot;
use context_relay_core::inject::{InjectError, inject};
use context_relay_core::json;
use context_relay_core::portable::{make_portable, rewrite_for_switch};
use proptest::prelude::*;
use serde_json::{Value, json};

/// A JSON tree that keeps its own number spelling, printed with odd whitespace.
#[derive(Debug, Clone)]
enum J {
    Null,
    Bool(bool),
    Num(String),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

const WS: [&str; 6] = ["", " ", "\n", "\t", "\r\n  ", "   "];

fn print(j: &J, ws: &[usize], k: &mut usize, out: &mut String) {
    fn space(ws: &[usize], k: &mut usize, out: &mut String) {
        let w = ws.get(*k % ws.len().max(1)).copied().unwrap_or(0);
        *k += 1;
        out.push_str(WS[w % WS.len()]);
    }
    match j {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Num(n) => out.push_str(n),
        J::Str(s) => out.push_str(&serde_json::to_string(s).unwrap()),
        J::Arr(items) => {
            out.push('[');
            space(ws, k, out);
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                    space(ws, k, out);
                }
                print(item, ws, k, out);
                space(ws, k, out);
            }
            out.push(']');
        }
        J::Obj(members) => {
            out.push('{');
            space(ws, k, out);
            for (i, (key, value)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                    space(ws, k, out);
                }
                out.push_str(&serde_json::to_string(key).unwrap());
                space(ws, k, out);
                out.push(':');
                space(ws, k, out);
                print(value, ws, k, out);
                space(ws, k, out);
            }
            out.push('}');
        }
    }
}

fn number() -> impl Strategy<Value = String> {
    "-?(0|[1-9][0-9]{0,5})(\\.[0-9]{1,4})?([eE][+-]?[0-9]{1,2})?"
}

fn value() -> impl Strategy<Value = J> {
    let leaf = prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        number().prop_map(J::Num),
        "(?s).{0,12}".prop_map(J::Str),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(J::Arr),
            prop::collection::vec(("[a-z_]{1,6}", inner), 0..4).prop_map(J::Obj),
        ]
    })
}

fn message() -> impl Strategy<Value = J> {
    (
        prop::sample::select(vec!["system", "user", "assistant", "developer"]),
        "(?s).{0,40}",
        prop::collection::vec(("x_[a-z]{1,4}", value()), 0..2),
    )
        .prop_map(|(role, content, extra)| {
            let mut m = vec![
                ("role".to_owned(), J::Str(role.to_owned())),
                ("content".to_owned(), J::Str(content)),
            ];
            m.extend(extra);
            J::Obj(m)
        })
}

/// A request body: the conversation member at a random position among extra members.
fn body(
    conversation_key: &'static str,
    conversation: impl Strategy<Value = J>,
) -> impl Strategy<Value = String> {
    (
        conversation,
        prop::collection::vec(("extra_[a-z]{1,5}", value()), 0..5),
        any::<prop::sample::Index>(),
        prop::collection::vec(0..WS.len(), 1..16),
    )
        .prop_map(move |(conv, mut extra, at, ws)| {
            // Unique keys: duplicate members are refused by design.
            extra.sort_by(|a, b| a.0.cmp(&b.0));
            extra.dedup_by(|a, b| a.0 == b.0);
            let pos = at.index(extra.len() + 1);
            extra.insert(pos, (conversation_key.to_owned(), conv));
            let mut out = String::new();
            let mut k = 0;
            out.push_str(WS[ws[0]]);
            print(&J::Obj(extra), &ws, &mut k, &mut out);
            out.push_str(WS[ws[ws.len() - 1]]);
            out
        })
}

fn messages() -> impl Strategy<Value = J> {
    prop::collection::vec(message(), 0..6).prop_map(J::Arr)
}

/// `out` is `body` with exactly one span inserted.
fn one_insertion(body: &[u8], out: &[u8]) -> bool {
    let prefix = body.iter().zip(out).take_while(|(a, b)| a == b).count();
    let suffix = body
        .iter()
        .rev()
        .zip(out.iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    out.len() > body.len() && prefix + suffix >= body.len()
}

fn parse(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).expect("valid JSON")
}

const MSG: &str = "<context_handoff>\n<session_summary>a & \"b\" 'c' </session_summary>\u{1f600}\\";

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn chat_adds_exactly_one_leading_system_message(body in body("messages", messages())) {
        let out = inject(ApiShape::ChatCompletions, body.as_bytes(), MSG, InjectionSlot::InputItem).unwrap();
        prop_assert!(one_insertion(body.as_bytes(), &out));
        let mut got = parse(&out);
        let first = got["messages"].as_array_mut().unwrap().remove(0);
        prop_assert_eq!(first, json!({"role": "system", "content": MSG}));
        prop_assert_eq!(got, parse(body.as_bytes()));
    }

    #[test]
    fn responses_array_adds_exactly_one_leading_item(body in body("input", messages())) {
        let out = inject(ApiShape::Responses, body.as_bytes(), MSG, InjectionSlot::InputItem).unwrap();
        prop_assert!(one_insertion(body.as_bytes(), &out));
        let mut got = parse(&out);
        let first = got["input"].as_array_mut().unwrap().remove(0);
        prop_assert_eq!(first["role"].as_str(), Some("developer"));
        prop_assert_eq!(first["content"][0]["text"].as_str(), Some(MSG));
        prop_assert_eq!(got, parse(body.as_bytes()));
    }

    #[test]
    fn responses_string_input_keeps_the_text(body in body("input", "(?s).{0,30}".prop_map(J::Str))) {
        let out = inject(ApiShape::Responses, body.as_bytes(), MSG, InjectionSlot::InputItem).unwrap();
        let mut got = parse(&out);
        let mut want = parse(body.as_bytes());
        let text = want["input"].take();
        want["input"] = json!([
            {"type":"message","role":"developer","content":[{"type":"input_text","text":MSG}]},
            {"type":"message","role":"user","content":[{"type":"input_text","text":text}]},
        ]);
        prop_assert_eq!(got.take(), want);
    }

    #[test]
    fn responses_instructions_slot_prepends(
        body in body("input", messages()),
        existing in proptest::option::of("(?s).{1,20}"),
    ) {
        let mut v = parse(body.as_bytes());
        let body = match &existing {
            Some(text) => {
                // Put `instructions` last, after the generated members.
                let trimmed = body.trim_end();
                let close = trimmed.len() - 1;
                let sep = if v.as_object().unwrap().is_empty() { "" } else { "," };
                format!("{}{sep}\"instructions\" :{}}}", &trimmed[..close], serde_json::to_string(text).unwrap())
            }
            None => body,
        };
        let out = inject(ApiShape::Responses, body.as_bytes(), MSG, InjectionSlot::Instructions).unwrap();
        let got = parse(&out);
        v["instructions"] = match existing {
            Some(text) => Value::String(format!("{MSG}\n\n{text}")),
            None => Value::String(MSG.to_owned()),
        };
        prop_assert_eq!(got, v);
    }

    #[test]
    fn anthropic_appends_one_system_block(
        body in body("messages", messages()),
        system in prop_oneof![
            Just(None),
            "(?s).{1,20}".prop_map(|s| Some(J::Str(s))),
            prop::collection::vec("(?s).{1,20}", 0..3).prop_map(|b| Some(J::Arr(
                b.into_iter().map(|t| J::Obj(vec![
                    ("type".into(), J::Str("text".into())),
                    ("text".into(), J::Str(t)),
                    ("cache_control".into(), J::Obj(vec![("type".into(), J::Str("ephemeral".into()))])),
                ])).collect()))),
        ],
    ) {
        let body = match &system {
            Some(j) => {
                let mut s = String::new();
                print(j, &[1], &mut 0, &mut s);
                let start = body.find('{').unwrap();
                format!("{}{{\"system\": {s},{}", &body[..start], &body[start + 1..])
            }
            None => body,
        };
        let out = inject(ApiShape::AnthropicMessages, body.as_bytes(), MSG, InjectionSlot::InputItem).unwrap();
        let mut got = parse(&out);
        let mut want = parse(body.as_bytes());
        let blocks = got["system"].as_array_mut().unwrap();
        let last = blocks.pop().unwrap();
        prop_assert_eq!(last, json!({"type":"text","text":MSG}));
        match want["system"].take() {
            Value::String(s) => want["system"] = json!([{"type":"text","text":s}]),
            Value::Null => want["system"] = json!([]),
            other => want["system"] = other,
        }
        prop_assert_eq!(got, want);
    }

    #[test]
    fn gemini_appends_one_part(body in body("contents", messages()), existing in 0..3u8) {
        let body = match existing {
            0 => body,
            1 => body.replacen('{', "{\"systemInstruction\":{\"parts\":[{\"text\":\"be brief\"}]},", 1),
            _ => body.replacen('{', "{\"systemInstruction\" : { } ,", 1),
        };
        let out = inject(ApiShape::Gemini, body.as_bytes(), MSG, InjectionSlot::InputItem).unwrap();
        let mut got = parse(&out);
        let mut want = parse(body.as_bytes());
        let parts = got["systemInstruction"]["parts"].as_array_mut().unwrap();
        prop_assert_eq!(parts.pop().unwrap(), json!({"text": MSG}));
        if existing != 1 {
            want["systemInstruction"] = json!({"parts": []});
        }
        prop_assert_eq!(got, want);
    }

    #[test]
    fn nothing_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        for shape in [ApiShape::ChatCompletions, ApiShape::Responses, ApiShape::AnthropicMessages, ApiShape::Gemini] {
            let _ = inject(shape, &bytes, MSG, InjectionSlot::InputItem);
            let _ = inject(shape, &bytes, MSG, InjectionSlot::Instructions);
            let _ = make_portable(shape, &bytes);
            let _ = rewrite_for_switch(shape, &bytes, Some(MSG), InjectionSlot::InputItem);
        }
        let _ = json::validate(&bytes);
    }

    #[test]
    fn damaged_bodies_are_refused_or_stay_valid(
        body in body("messages", messages()),
        cut in any::<prop::sample::Index>(),
        flip in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        truncate in any::<bool>(),
    ) {
        let mut bytes = body.into_bytes();
        if truncate {
            bytes.truncate(cut.index(bytes.len()));
        } else {
            let i = flip.index(bytes.len());
            bytes[i] = byte;
        }
        let serde_ok = serde_json::from_slice::<Value>(&bytes).is_ok();
        for shape in [ApiShape::ChatCompletions, ApiShape::Responses, ApiShape::AnthropicMessages, ApiShape::Gemini] {
            match inject(shape, &bytes, MSG, InjectionSlot::InputItem) {
                Ok(out) => prop_assert!(serde_json::from_slice::<Value>(&out).is_ok() || !serde_ok),
                Err(InjectError::NotJson(_)) => prop_assert!(!serde_ok),
                Err(_) => {}
            }
            for r in [
                make_portable(shape, &bytes).map(|p| p.body),
                rewrite_for_switch(shape, &bytes, Some(MSG), InjectionSlot::InputItem).map(|r| r.body),
            ] {
                if let Ok(Some(out)) = r {
                    prop_assert!(serde_json::from_slice::<Value>(&out).is_ok() || !serde_ok);
                }
            }
        }
    }

    #[test]
    fn portable_responses_removes_only_account_bound_items(
        items in prop::collection::vec(prop::sample::select(vec!["message", "reasoning", "compaction", "function_call"]), 0..8),
        prev in any::<bool>(),
        msg in any::<bool>(),
    ) {
        let input: Vec<Value> = items.iter().enumerate().map(|(i, t)| json!({"type": t, "id": i})).collect();
        let mut body = json!({"model": "m", "input": input});
        if prev {
            body["previous_response_id"] = json!("resp_x");
        }
        let bytes = serde_json::to_vec_pretty(&body).unwrap();
        let r = rewrite_for_switch(ApiShape::Responses, &bytes, msg.then_some(MSG), InjectionSlot::InputItem).unwrap();
        let changed = prev || msg || items.iter().any(|t| *t == "reasoning" || *t == "compaction");
        prop_assert_eq!(r.body.is_some(), changed);
        let out = r.body.map(|b| parse(&b)).unwrap_or(body.clone());
        prop_assert!(out.get("previous_response_id").is_none());
        let mut got = out["input"].as_array().unwrap().clone();
        if msg {
            let first = got.remove(0);
            prop_assert_eq!(first["role"].as_str(), Some("developer"));
        }
        let want: Vec<Value> = items.iter().enumerate().filter(|(_, t)| **t != "reasoning").map(|(i, t)| {
            if *t == "compaction" { got.iter().find(|g| g["role"] == "developer").cloned().unwrap_or(Value::Null) } else { json!({"type": t, "id": i}) }
        }).collect();
        prop_assert_eq!(got, want);
        prop_assert_eq!(r.removed.reasoning_items as usize, items.iter().filter(|t| **t == "reasoning").count());
    }
}
