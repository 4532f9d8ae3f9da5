use super::*;
use serde_json::{Value, json};

fn portable(shape: ApiShape, body: &Value) -> (Option<Value>, Removed) {
    let bytes = serde_json::to_vec(body).unwrap();
    let p = make_portable(shape, &bytes).unwrap();
    (
        p.body
            .map(|b| serde_json::from_slice(&b).expect("output is JSON")),
        p.removed,
    )
}

fn note() -> Value {
    json!({"type":"message","role":"developer","content":[{"type":"input_text","text":COMPACTION_NOTE}]})
}

#[test]
fn responses_drops_account_bound_state() {
    let body = json!({
        "model": "gpt-5.5",
        "previous_response_id": "resp_1",
        "conversation": {"id": "conv_1"},
        "input": [
            {"type": "reasoning", "id": "rs_0", "encrypted_content": "blob"},
            {"type": "message", "role": "user", "content": "hi"},
            {"type": "compaction", "encrypted_content": "blob"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "c", "name": "shell", "arguments": "{}"},
            {"type": "reasoning", "id": "rs_2"},
        ],
        "store": false,
    });
    let (out, removed) = portable(ApiShape::Responses, &body);
    assert_eq!(
        out.unwrap(),
        json!({
            "model": "gpt-5.5",
            "input": [
                {"type": "message", "role": "user", "content": "hi"},
                note(),
                {"type": "function_call", "call_id": "c", "name": "shell", "arguments": "{}"},
            ],
            "store": false,
        })
    );
    assert_eq!(
        removed,
        Removed {
            previous_response_id: 1,
            conversation: 1,
            reasoning_items: 3,
            compaction_items: 1,
            ..Removed::default()
        }
    );
    assert_eq!(
        removed.iter().collect::<Vec<_>>(),
        [
            ("previous_response_id", 1),
            ("conversation", 1),
            ("reasoning", 3),
            ("compaction", 1)
        ]
    );
}

#[test]
fn responses_only_reasoning_leaves_an_empty_input() {
    let (out, r) = portable(
        ApiShape::Responses,
        &json!({"input": [{"type": "reasoning"}, {"type": "reasoning"}]}),
    );
    assert_eq!(out.unwrap(), json!({"input": []}));
    assert_eq!(r.reasoning_items, 2);
}

#[test]
fn nothing_to_do_is_none() {
    for (shape, body) in [
        (ApiShape::Responses, json!({"input": "hi", "store": false})),
        (
            ApiShape::Responses,
            json!({"input": [{"role": "user", "content": "x"}, 1, "s"]}),
        ),
        (
            ApiShape::ChatCompletions,
            json!({"messages": [{"role": "user", "content": "x"}]}),
        ),
        (ApiShape::Gemini, json!({"contents": []})),
        (
            ApiShape::AnthropicMessages,
            json!({"messages": [{"role": "assistant", "content": [{"type": "text", "text": "x"}]}]}),
        ),
    ] {
        let (out, r) = portable(shape, &body);
        assert!(out.is_none(), "{body}");
        assert!(r.is_empty());
        assert_eq!(r.iter().count(), 0);
    }
}

#[test]
fn anthropic_drops_thinking_and_empty_messages() {
    let body = json!({
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"}]},
            {"role": "user", "content": [{"type": "thinking", "thinking": "user side is not ours"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "a"},
                {"type": "thinking", "thinking": "t", "signature": "s"},
            ]},
            {"role": "user", "content": "next"},
        ],
    });
    let (out, removed) = portable(ApiShape::AnthropicMessages, &body);
    let out = out.unwrap();
    assert_eq!(
        out["messages"],
        json!([
            {"role": "user", "content": "q"},
            {"role": "user", "content": [{"type": "thinking", "thinking": "user side is not ours"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
            {"role": "user", "content": "next"},
        ])
    );
    // A plain next user turn needs no thinking block: thinking stays on.
    assert_eq!(out["thinking"], body["thinking"]);
    assert_eq!(
        removed,
        Removed {
            thinking_blocks: 1,
            redacted_thinking_blocks: 1,
            empty_messages: 1,
            ..Removed::default()
        }
    );
}

fn tool_cycle(thinking: &str, first_block: Value) -> Value {
    json!({
        "thinking": {"type": thinking},
        "messages": [
            {"role": "user", "content": "run it"},
            {"role": "assistant", "content": [
                first_block,
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}},
            ]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
        ],
    })
}

#[test]
fn anthropic_tool_cycle_that_began_with_thinking_disables_thinking() {
    for mode in ["enabled", "adaptive"] {
        let body = tool_cycle(
            mode,
            json!({"type": "thinking", "thinking": "t", "signature": "s"}),
        );
        let (out, removed) = portable(ApiShape::AnthropicMessages, &body);
        let out = out.unwrap();
        assert_eq!(out["thinking"], json!({"type": "disabled"}));
        assert_eq!(out["messages"][1]["content"].as_array().unwrap().len(), 1);
        assert_eq!(removed.thinking_disabled, 1);
        assert_eq!(removed.thinking_blocks, 1);
    }
    // Thinking off already: nothing to disable.
    let body = tool_cycle("disabled", json!({"type": "thinking", "thinking": "t"}));
    let (out, removed) = portable(ApiShape::AnthropicMessages, &body);
    assert_eq!(out.unwrap()["thinking"], json!({"type": "disabled"}));
    assert_eq!(removed.thinking_disabled, 0);
    // The assistant turn began with text: the client's body was valid as is and stays so.
    let body = tool_cycle("enabled", json!({"type": "text", "text": "x"}));
    let (out, removed) = portable(ApiShape::AnthropicMessages, &body);
    assert!(out.is_none());
    assert!(removed.is_empty());
}

#[test]
fn anthropic_prefill_that_lost_its_thinking_disables_thinking() {
    let body = json!({
        "thinking": {"type": "enabled", "budget_tokens": 2000},
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "t", "signature": "s"},
                {"type": "text", "text": "The answer is"},
            ]},
        ],
    });
    let (out, removed) = portable(ApiShape::AnthropicMessages, &body);
    let out = out.unwrap();
    assert_eq!(out["thinking"], json!({"type": "disabled"}));
    assert_eq!(
        out["messages"][1],
        json!({"role": "assistant", "content": [{"type": "text", "text": "The answer is"}]})
    );
    assert_eq!(removed.thinking_disabled, 1);
}

#[test]
fn rewrite_for_switch_does_both_in_one_pass() {
    let body = br#"{"previous_response_id":"r","input":[{"type":"reasoning"},{"type":"message","role":"user","content":"hi"}]}"#;
    let r = rewrite_for_switch(
        ApiShape::Responses,
        body,
        Some("H"),
        InjectionSlot::InputItem,
    )
    .unwrap();
    assert!(r.injected);
    assert_eq!(
        String::from_utf8(r.body.unwrap()).unwrap(),
        r#"{"input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"H"}]},{"type":"message","role":"user","content":"hi"}]}"#
    );
    assert_eq!(r.removed.reasoning_items, 1);
    // Everything removed from `input`: the new item stands alone.
    let r = rewrite_for_switch(
        ApiShape::Responses,
        br#"{"input":[{"type":"reasoning"}]}"#,
        Some("H"),
        InjectionSlot::InputItem,
    )
    .unwrap();
    let v: Value = serde_json::from_slice(&r.body.unwrap()).unwrap();
    assert_eq!(v["input"].as_array().unwrap().len(), 1);
    // No message and nothing to remove: no new body.
    let r = rewrite_for_switch(
        ApiShape::ChatCompletions,
        br#"{"messages":[]}"#,
        None,
        InjectionSlot::InputItem,
    )
    .unwrap();
    assert_eq!(r.body, None);
}

#[test]
fn rewrite_keeps_portability_when_injection_fails() {
    let body = br#"{"thinking":{"type":"enabled"},"system":42,"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"t"},{"type":"text","text":"x"}]},{"role":"user","content":"y"}]}"#;
    let r = rewrite_for_switch(
        ApiShape::AnthropicMessages,
        body,
        Some("H"),
        InjectionSlot::InputItem,
    )
    .unwrap();
    assert!(matches!(
        r.inject_error,
        Some(InjectError::WrongType {
            field: "system",
            ..
        })
    ));
    assert!(!r.injected);
    let v: Value = serde_json::from_slice(&r.body.unwrap()).unwrap();
    assert_eq!(v["system"], 42);
    assert_eq!(
        v["messages"][0]["content"],
        json!([{"type":"text","text":"x"}])
    );
}

#[test]
fn bad_bodies_are_typed_errors() {
    for shape in [
        ApiShape::Responses,
        ApiShape::AnthropicMessages,
        ApiShape::ChatCompletions,
    ] {
        assert!(matches!(
            make_portable(shape, b"{\"input\":["),
            Err(PortableError::NotJson(_))
        ));
        assert!(matches!(
            make_portable(shape, b"[]"),
            Err(PortableError::NotAnObject { found: "an array" })
        ));
    }
    assert!(matches!(
        make_portable(ApiShape::Responses, br#"{"input":[],"input":[]}"#),
        Err(PortableError::DuplicateKey(_))
    ));
}
