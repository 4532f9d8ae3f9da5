use super::*;
use serde_json::{Value, json};

const MSG: &str = "HAND<off> & \"quoted\"\nline";

fn run(shape: ApiShape, body: &str, slot: InjectionSlot) -> String {
    let out = inject(shape, body.as_bytes(), MSG, slot).expect(body);
    String::from_utf8(out).unwrap()
}

fn chat(body: &str) -> String {
    run(ApiShape::ChatCompletions, body, InjectionSlot::InputItem)
}

fn parsed(s: &str) -> Value {
    serde_json::from_str(s).expect(s)
}

#[test]
fn chat_handoff_goes_first_and_the_original_system_message_follows() {
    let body = r#"{"model":"gpt-5","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"say hi"}]}"#;
    let out = chat(body);
    let v = parsed(&out);
    assert_eq!(v["messages"][0], json!({"role": "system", "content": MSG}));
    assert_eq!(v["messages"][1]["content"], "You are terse.");
    assert_eq!(v["messages"].as_array().unwrap().len(), 3);
    // Byte-exact: one inserted span right after `[`.
    let at = body.find('[').unwrap() + 1;
    let inserted = format!(
        r#"{{"role":"system","content":{}}},"#,
        serde_json::to_string(MSG).unwrap()
    );
    assert_eq!(out, format!("{}{inserted}{}", &body[..at], &body[at..]));
}

#[test]
fn chat_into_empty_and_spaced_arrays() {
    assert_eq!(
        chat(r#"{"messages":[]}"#),
        format!(
            r#"{{"messages":[{{"role":"system","content":{}}}]}}"#,
            serde_json::to_string(MSG).unwrap()
        )
    );
    let out = chat("{\n  \"messages\" : [ \n ] , \"n\": 1.50 }");
    assert!(out.ends_with("}] \n ] , \"n\": 1.50 }") || out.contains("1.50"));
    assert_eq!(parsed(&out)["messages"].as_array().unwrap().len(), 1);
}

#[test]
fn responses_input_item_first_and_other_items_unchanged() {
    let body = r#"{"model":"gpt-5.5","input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"sys"}],"id":"msg_1"},  {"type":"function_call_output","call_id":"c","output":"x"}],"store":false}"#;
    let out = run(ApiShape::Responses, body, InjectionSlot::InputItem);
    let at = body.find('[').unwrap() + 1;
    assert_eq!(&out[..at], &body[..at]);
    let tail = &body[at..];
    assert!(
        out.ends_with(tail),
        "everything after the insertion is unchanged"
    );
    let v = parsed(&out);
    assert_eq!(
        v["input"][0],
        json!({"type":"message","role":"developer","content":[{"type":"input_text","text":MSG}]})
    );
    assert_eq!(v["input"].as_array().unwrap().len(), 3);
}

#[test]
fn responses_string_input_becomes_developer_and_user_items() {
    let body = r#"{"model":"gpt-5","input":"say \u0068i","instructions":"You are terse."}"#;
    let out = run(ApiShape::Responses, body, InjectionSlot::InputItem);
    // The client's own string bytes are reused, escapes included.
    assert!(out.contains(r#""text":"say \u0068i""#));
    let v = parsed(&out);
    assert_eq!(
        v["input"],
        json!([
            {"type":"message","role":"developer","content":[{"type":"input_text","text":MSG}]},
            {"type":"message","role":"user","content":[{"type":"input_text","text":"say hi"}]},
        ])
    );
    assert_eq!(v["instructions"], "You are terse.");
}

#[test]
fn responses_instructions_slot() {
    let body = r#"{"model":"gpt-5","input":"say hi","instructions":"You are \"terse\"."}"#;
    let out = run(ApiShape::Responses, body, InjectionSlot::Instructions);
    let v = parsed(&out);
    assert_eq!(v["instructions"], format!("{MSG}\n\nYou are \"terse\"."));
    assert_eq!(v["input"], "say hi");
    assert!(out.ends_with(r#"You are \"terse\"."}"#));
    // Created when missing, kept as the first member.
    let out = run(
        ApiShape::Responses,
        r#"{"input":[]}"#,
        InjectionSlot::Instructions,
    );
    assert_eq!(
        out,
        format!(
            r#"{{"instructions":{},"input":[]}}"#,
            serde_json::to_string(MSG).unwrap()
        )
    );
    for empty in [r#""""#, "null"] {
        let out = run(
            ApiShape::Responses,
            &format!(r#"{{"input":[],"instructions":{empty}}}"#),
            InjectionSlot::Instructions,
        );
        assert_eq!(parsed(&out)["instructions"], MSG);
    }
    let e = inject(
        ApiShape::Responses,
        br#"{"input":[],"instructions":5}"#,
        MSG,
        InjectionSlot::Instructions,
    );
    assert!(matches!(
        e,
        Err(InjectError::WrongType {
            field: "instructions",
            ..
        })
    ));
}

#[test]
fn responses_empty_messages_member_is_removed() {
    for slot in [InjectionSlot::InputItem, InjectionSlot::Instructions] {
        for body in [
            r#"{"messages":[],"input":[{"role":"user","content":"x"}]}"#,
            r#"{"input":[{"role":"user","content":"x"}], "messages" : [ ] }"#,
            r#"{"model":"m","messages":[],"input":"x"}"#,
        ] {
            let out = run(ApiShape::Responses, body, slot);
            let v = parsed(&out);
            assert!(v.get("messages").is_none(), "{out}");
            assert!(v.get("input").is_some());
        }
    }
    // A non-empty `messages` is not ours to drop.
    let out = run(
        ApiShape::Responses,
        r#"{"messages":[1],"input":[]}"#,
        InjectionSlot::InputItem,
    );
    assert_eq!(parsed(&out)["messages"], json!([1]));
}

#[test]
fn anthropic_string_system_becomes_blocks() {
    let body = r#"{"max_tokens":64,"messages":[{"role":"user","content":"say hi"}],"model":"claude-sonnet-4-5","system":"You are terse."}"#;
    let out = run(ApiShape::AnthropicMessages, body, InjectionSlot::InputItem);
    assert_eq!(
        parsed(&out)["system"],
        json!([{"type":"text","text":"You are terse."},{"type":"text","text":MSG}])
    );
}

#[test]
fn anthropic_block_goes_after_cache_control_blocks() {
    let body = r#"{"system":[{"type":"text","text":"billing"},{"type":"text","text":"prompt","cache_control":{"type":"ephemeral"}}
 ],"messages":[]}"#;
    let out = run(ApiShape::AnthropicMessages, body, InjectionSlot::InputItem);
    let v = parsed(&out);
    let system = v["system"].as_array().unwrap();
    assert_eq!(system.len(), 3);
    assert_eq!(system[1]["cache_control"]["type"], "ephemeral");
    assert_eq!(system[2], json!({"type":"text","text":MSG}));
    // The cached prefix (everything up to the end of the last block) is unchanged.
    let end = body.find("}}\n").unwrap() + 2;
    assert_eq!(&out[..end], &body[..end]);
}

#[test]
fn anthropic_missing_null_and_empty_system() {
    for body in [
        r#"{"messages":[]}"#,
        r#"{"system":null,"messages":[]}"#,
        r#"{"system":"","messages":[]}"#,
        r#"{"system":[],"messages":[]}"#,
    ] {
        let out = run(ApiShape::AnthropicMessages, body, InjectionSlot::InputItem);
        assert_eq!(
            parsed(&out)["system"],
            json!([{"type":"text","text":MSG}]),
            "{body}"
        );
    }
    let e = inject(
        ApiShape::AnthropicMessages,
        br#"{"system":{},"messages":[]}"#,
        MSG,
        InjectionSlot::InputItem,
    );
    assert!(matches!(
        e,
        Err(InjectError::WrongType {
            field: "system",
            ..
        })
    ));
}

#[test]
fn gemini_part_appended_to_system_instruction() {
    let g = |body: &str| parsed(&run(ApiShape::Gemini, body, InjectionSlot::InputItem));
    let part = json!({"text": MSG});
    let v = g(r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#);
    assert_eq!(v["systemInstruction"], json!({"parts":[part]}));
    let v =
        g(r#"{"systemInstruction":{"role":"system","parts":[{"text":"be brief"}]},"contents":[]}"#);
    assert_eq!(
        v["systemInstruction"],
        json!({"role":"system","parts":[{"text":"be brief"}, part]})
    );
    let v = g(r#"{"system_instruction":{"role":"system"},"contents":[]}"#);
    assert_eq!(
        v["system_instruction"],
        json!({"parts":[part],"role":"system"})
    );
    assert!(v.get("systemInstruction").is_none());
    let v = g(r#"{"systemInstruction":{},"contents":[]}"#);
    assert_eq!(v["systemInstruction"], json!({"parts":[part]}));
    let v = g(r#"{"systemInstruction":{"parts":null},"contents":[]}"#);
    assert_eq!(v["systemInstruction"], json!({"parts":[part]}));
    let e = inject(
        ApiShape::Gemini,
        br#"{"systemInstruction":{"parts":"x"},"contents":[]}"#,
        MSG,
        InjectionSlot::InputItem,
    );
    assert!(matches!(
        e,
        Err(InjectError::WrongType {
            field: "systemInstruction.parts",
            ..
        })
    ));
    let e = inject(
        ApiShape::Gemini,
        br#"{"systemInstruction":{},"system_instruction":{},"contents":[]}"#,
        MSG,
        InjectionSlot::InputItem,
    );
    assert!(matches!(e, Err(InjectError::DuplicateKey(_))));
}

#[test]
fn bad_bodies_are_typed_errors() {
    let all = [
        ApiShape::ChatCompletions,
        ApiShape::Responses,
        ApiShape::AnthropicMessages,
        ApiShape::Gemini,
    ];
    for shape in all {
        let i = |b: &[u8]| inject(shape, b, MSG, InjectionSlot::InputItem);
        assert!(matches!(i(b"not json"), Err(InjectError::NotJson(_))));
        assert!(matches!(i(b""), Err(InjectError::NotJson(_))));
        assert!(matches!(
            i(br#"[{"messages":[]}]"#),
            Err(InjectError::NotAnObject { found: "an array" })
        ));
        assert!(matches!(
            i(b"42"),
            Err(InjectError::NotAnObject { found: "a number" })
        ));
        assert!(matches!(i(b"{}"), Err(InjectError::MissingField { .. })));
        // Truncated bodies of every length are rejected, never half-rewritten.
        let full = br#"{"messages":[{"role":"user","content":"hi"}],"input":[],"contents":[],"system":"s"}"#;
        assert!(i(full).is_ok());
        for cut in 0..full.len() {
            assert!(i(&full[..cut]).is_err(), "{shape} cut at {cut}");
        }
        // Trailing garbage after a valid body.
        let mut extra = full.to_vec();
        extra.extend_from_slice(b" x");
        assert!(matches!(
            i(&extra),
            Err(InjectError::NotJson(JsonError::TrailingData { .. }))
        ));
    }
    let wrong = inject(
        ApiShape::ChatCompletions,
        br#"{"messages":"hello"}"#,
        MSG,
        InjectionSlot::InputItem,
    );
    assert_eq!(
        wrong,
        Err(InjectError::WrongType {
            field: "messages",
            expected: "an array",
            found: "a string"
        })
    );
    assert_eq!(
        wrong.unwrap_err().to_string(),
        "expected `messages` to be an array, found a string"
    );
    assert!(matches!(
        inject(
            ApiShape::Responses,
            br#"{"input":{}}"#,
            MSG,
            InjectionSlot::InputItem
        ),
        Err(InjectError::WrongType { field: "input", .. })
    ));
    assert!(matches!(
        inject(
            ApiShape::ChatCompletions,
            br#"{"messages":[],"messages":[]}"#,
            MSG,
            InjectionSlot::InputItem
        ),
        Err(InjectError::DuplicateKey(_))
    ));
}

#[test]
fn numbers_whitespace_and_unknown_fields_survive() {
    let body = "{ \"messages\":[\n\t{\"role\":\"user\",\"content\":\"x\"}\n],\n \"temperature\": 1.0E+0, \"x-unknown\": {\"a\": [1, 2.50]} }";
    let out = chat(body);
    assert!(out.contains("\"temperature\": 1.0E+0, \"x-unknown\": {\"a\": [1, 2.50]} }"));
    assert!(out.starts_with("{ \"messages\":[{\"role\":\"system\""));
}
