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
    json!({"type":"message","role":"developer","content":[{"type":"input_text","text":COMPACTION_NOTE_ALONE}]})
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
    let body = tool_cycle(
        "enabled",
        json!({"type": "thinking", "thinking": "t", "signature": "s"}),
    );
    let (out, removed) = portable(ApiShape::AnthropicMessages, &body);
    let out = out.unwrap();
    assert_eq!(out["thinking"], json!({"type": "disabled"}));
    assert_eq!(out["messages"][1]["content"].as_array().unwrap().len(), 1);
    assert_eq!(removed.thinking_disabled, 1);
    assert_eq!(removed.thinking_blocks, 1);
    // Adaptive thinking takes a loop step without thinking back as it is: it stays on.
    let body = tool_cycle(
        "adaptive",
        json!({"type": "thinking", "thinking": "t", "signature": "s"}),
    );
    let (out, removed) = portable(ApiShape::AnthropicMessages, &body);
    let out = out.unwrap();
    assert_eq!(out["thinking"], json!({"type": "adaptive"}));
    assert_eq!(out["messages"][1]["content"].as_array().unwrap().len(), 1);
    assert_eq!(removed.thinking_disabled, 0);
    assert_eq!(removed.thinking_blocks, 1);
    // Thinking off already: nothing to disable.
    let body = tool_cycle("disabled", json!({"type": "thinking", "thinking": "t"}));
    let (out, removed) = portable(ApiShape::AnthropicMessages, &body);
    assert_eq!(out.unwrap()["thinking"], json!({"type": "disabled"}));
    assert_eq!(removed.thinking_disabled, 0);
    // The assistant turn began with text (an account that got this tool loop with thinking
    // off answered it without thinking): with thinking on the API requires a thinking block
    // first, so thinking stays off until the next plain user turn.
    let body = tool_cycle("enabled", json!({"type": "text", "text": "x"}));
    let (out, removed) = portable(ApiShape::AnthropicMessages, &body);
    assert_eq!(out.unwrap()["thinking"], json!({"type": "disabled"}));
    assert_eq!(removed.thinking_disabled, 1);
    assert_eq!(removed.thinking_blocks, 0);
}

#[test]
fn a_tool_loop_that_keeps_its_own_thinking_keeps_thinking_on() {
    // The lasting scrub on the new account: the loop's assistant turn starts with that
    // account's own thinking, which stays; only the old account's block goes.
    let mut body = tool_cycle(
        "enabled",
        json!({"type": "thinking", "thinking": "mine", "signature": "sig-B"}),
    );
    body["messages"].as_array_mut().unwrap().insert(
        1,
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "old", "signature": "sig-A"},
            {"type": "text", "text": "earlier"}]}),
    );
    body["messages"]
        .as_array_mut()
        .unwrap()
        .insert(2, json!({"role": "user", "content": "go on"}));
    let foreign = ForeignSet::from_digests([d("sig-A")]);
    let (out, r) = scoped(
        ApiShape::AnthropicMessages,
        &body,
        Scope::Foreign(&foreign),
        None,
    );
    assert_eq!(out["thinking"], body["thinking"]);
    assert_eq!(r.removed.thinking_disabled, 0);
    assert_eq!(r.removed.thinking_blocks, 1);
    // A prefill that never had thinking, with thinking on, is continued without it.
    let body = json!({"thinking": {"type": "enabled", "budget_tokens": 1024}, "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "text", "text": "{"}]}]});
    let (out, removed) = portable(ApiShape::AnthropicMessages, &body);
    assert_eq!(out.unwrap()["thinking"], json!({"type": "disabled"}));
    assert_eq!(removed.thinking_disabled, 1);
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

fn scoped(
    shape: ApiShape,
    body: &Value,
    scope: Scope<'_>,
    message: Option<&str>,
) -> (Value, Rewrite) {
    let bytes = serde_json::to_vec(body).unwrap();
    let r = rewrite(shape, &bytes, scope, message, InjectionSlot::InputItem).unwrap();
    let out = match &r.body {
        Some(b) => serde_json::from_slice(b).expect("output is JSON"),
        None => body.clone(),
    };
    (out, r)
}

fn d(token: &str) -> u64 {
    digest(serde_json::to_string(token).unwrap().as_bytes())
}

#[test]
fn foreign_scope_strips_only_the_recorded_state() {
    let body = json!({
        "previous_response_id": "resp_B",
        "input": [
            {"type": "reasoning", "id": "rs_a", "encrypted_content": "A-1"},
            {"type": "message", "role": "user", "content": "hi"},
            {"type": "reasoning", "id": "rs_b", "encrypted_content": "B-1"},
            {"type": "compaction", "encrypted_content": "A-2"},
            {"type": "reasoning", "id": "rs_a2", "summary": []},
        ],
    });
    let foreign = ForeignSet::from_digests([d("A-1"), d("A-2"), d("rs_a2"), d("resp_A")]);
    let (out, r) = scoped(ApiShape::Responses, &body, Scope::Foreign(&foreign), None);
    assert_eq!(
        out,
        json!({
            "previous_response_id": "resp_B",
            "input": [
                {"type": "message", "role": "user", "content": "hi"},
                {"type": "reasoning", "id": "rs_b", "encrypted_content": "B-1"},
                {"type":"message","role":"developer","content":[{"type":"input_text","text":COMPACTION_NOTE_ALONE}]},
            ],
        })
    );
    assert_eq!(
        r.seen,
        [d("resp_B"), d("A-1"), d("B-1"), d("A-2"), d("rs_a2")]
    );
    assert_eq!(r.removed.reasoning_items, 2);
    assert_eq!(r.removed.previous_response_id, 0);

    let body = json!({
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "a", "signature": "sig-A"},
                {"type": "text", "text": "x"}]},
            {"role": "user", "content": "q2"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "b", "signature": "sig-B"},
                {"type": "redacted_thinking", "data": "red-A"},
                {"type": "text", "text": "y"}]},
            {"role": "user", "content": "q3"},
        ],
    });
    let foreign = ForeignSet::from_digests([d("sig-A"), d("red-A")]);
    let (out, r) = scoped(
        ApiShape::AnthropicMessages,
        &body,
        Scope::Foreign(&foreign),
        None,
    );
    assert_eq!(
        out["messages"][1]["content"],
        json!([{"type": "text", "text": "x"}])
    );
    assert_eq!(
        out["messages"][3]["content"],
        json!([{"type": "thinking", "thinking": "b", "signature": "sig-B"}, {"type": "text", "text": "y"}])
    );
    assert_eq!(
        out["thinking"], body["thinking"],
        "a plain user turn needs no disabling"
    );
    assert_eq!(
        (
            r.removed.thinking_blocks,
            r.removed.redacted_thinking_blocks
        ),
        (1, 1)
    );
    // Nothing in scope: the body is untouched, but what it carries is still reported.
    let (_, r) = scoped(ApiShape::AnthropicMessages, &body, Scope::Nothing, None);
    assert_eq!(r.body, None);
    assert_eq!(r.seen, [d("sig-A"), d("sig-B"), d("red-A")]);
}

#[test]
fn encrypted_outputs_and_agent_messages_become_plain_notes() {
    let body = json!({
        "input": [
            {"type": "function_call", "call_id": "c1", "name": "spawn_agent", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "encrypted_content": "enc-out"},
            {"type": "custom_tool_call_output", "call_id": "c2", "output": "", "encrypted_content": "enc-2"},
            {"type": "agent_message", "role": "assistant", "encrypted_content": "enc-msg"},
            {"type": "message", "role": "user", "content": "next"},
        ],
    });
    let (out, r) = scoped(ApiShape::Responses, &body, Scope::All, None);
    assert_eq!(
        out["input"],
        json!([
            {"type": "function_call", "call_id": "c1", "name": "spawn_agent", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": FOREIGN_OUTPUT_NOTE},
            {"type": "custom_tool_call_output", "call_id": "c2", "output": FOREIGN_OUTPUT_NOTE},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": FOREIGN_OUTPUT_NOTE}]},
            {"type": "message", "role": "user", "content": "next"},
        ])
    );
    assert_eq!(r.removed.encrypted_items, 3);
}

#[test]
fn the_compaction_note_says_what_is_true_of_the_request() {
    let body = json!({"input": [{"type": "compaction", "encrypted_content": "c"}, {"type":"message","role":"user","content":"u"}]});
    let text = |out: &Value| {
        out["input"]
            .as_array()
            .unwrap()
            .iter()
            .find_map(|i| {
                i["content"][0]["text"]
                    .as_str()
                    .filter(|t| t.starts_with("Earlier"))
            })
            .unwrap()
            .to_owned()
    };
    // A handoff that summarises the compacted context: the note says so.
    let r = rewrite_noting(
        ApiShape::Responses,
        body.to_string().as_bytes(),
        Scope::All,
        Some("HANDOFF"),
        true,
        InjectionSlot::InputItem,
    )
    .unwrap();
    assert!(r.injected);
    let out: Value = serde_json::from_slice(&r.body.unwrap()).unwrap();
    assert_eq!(text(&out), COMPACTION_NOTE);
    // A handoff that does not (an extractive one, or one written without the items), or none.
    let (out, r) = scoped(ApiShape::Responses, &body, Scope::All, Some("HANDOFF"));
    assert!(r.injected);
    assert_eq!(text(&out), COMPACTION_NOTE_ALONE);
    let (out, _) = scoped(ApiShape::Responses, &body, Scope::All, None);
    assert_eq!(text(&out), COMPACTION_NOTE_ALONE);
}

#[test]
fn disabling_thinking_drops_the_edits_that_need_it() {
    let cycle = |context: Value| {
        json!({
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "context_management": context,
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "t", "signature": "s"},
                    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
            ],
        })
    };
    let only = cycle(json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}));
    let (out, r) = scoped(ApiShape::AnthropicMessages, &only, Scope::All, None);
    assert_eq!(out["thinking"], json!({"type": "disabled"}));
    assert!(out.get("context_management").is_none(), "{out}");
    assert_eq!(r.removed.context_edits, 1);

    let mixed = cycle(json!({"edits": [
        {"type": "clear_thinking_20251015", "keep": "all"},
        {"type": "clear_tool_uses_20250919"}]}));
    let (out, _) = scoped(ApiShape::AnthropicMessages, &mixed, Scope::All, None);
    assert_eq!(
        out["context_management"],
        json!({"edits": [{"type": "clear_tool_uses_20250919"}]})
    );

    // Thinking stays on (nothing continues a thinking turn): the edits stay too.
    let mut plain = only.clone();
    plain["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "assistant", "content": "a"}));
    plain["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "user", "content": "next"}));
    let (out, r) = scoped(ApiShape::AnthropicMessages, &plain, Scope::All, None);
    assert_eq!(out["context_management"], only["context_management"]);
    assert_eq!(r.removed.context_edits, 0);
}

mod props {
    use super::*;
    use proptest::prelude::*;

    /// `(minted by the old account?, kind)` for each history item.
    fn history() -> impl Strategy<Value = Vec<(bool, u8)>> {
        proptest::collection::vec((any::<bool>(), 0u8..4), 0..24)
    }

    fn item(i: usize, old: bool, kind: u8) -> Value {
        let owner = if old { "A" } else { "B" };
        match kind {
            0 => {
                json!({"type": "reasoning", "id": format!("rs_{i}"), "encrypted_content": format!("{owner}-{i}")})
            }
            1 => {
                json!({"type": "function_call_output", "call_id": format!("c{i}"), "encrypted_content": format!("{owner}-{i}")})
            }
            2 => json!({"type": "compaction", "encrypted_content": format!("{owner}-{i}")}),
            _ => json!({"type": "message", "role": "user", "content": format!("{owner} says {i}")}),
        }
    }

    proptest! {
        #[test]
        fn the_old_accounts_state_goes_and_the_new_ones_stays(items in history()) {
            let body = json!({
                "input": items.iter().enumerate().map(|(i, (old, k))| item(i, *old, *k)).collect::<Vec<_>>(),
            });
            // What the first request after the switch carried: the old account's state.
            let at_switch = json!({
                "input": items.iter().enumerate().filter(|(_, (old, _))| *old)
                    .map(|(i, (old, k))| item(i, *old, *k)).collect::<Vec<_>>(),
            });
            let (_, first) = scoped(ApiShape::Responses, &at_switch, Scope::All, None);
            // A body the byte scan calls free of account-bound state has nothing to remove.
            let bytes = serde_json::to_vec(&body).unwrap();
            let (_, all) = scoped(ApiShape::Responses, &body, Scope::All, None);
            prop_assert!(may_carry_bound_state(&bytes) || all.removed.is_empty());
            let foreign = ForeignSet::from_digests(first.seen.iter().copied());
            let (out, _) = scoped(ApiShape::Responses, &body, Scope::Foreign(&foreign), None);
            let text = out.to_string();
            for (i, (old, kind)) in items.iter().enumerate() {
                let owner = if *old { "A" } else { "B" };
                let token = format!("\"{owner}-{i}\"");
                if *kind < 3 {
                    prop_assert_eq!(text.contains(&token), !*old, "{} in {}", token, text);
                } else {
                    let said = format!("{owner} says {i}");
                    prop_assert!(text.contains(&said));
                }
            }
        }
    }
}
