use serde_json::json;

use super::*;

fn conv(shape: ApiShape, body: Value) -> Vec<Entry> {
    Conversation::from_value(shape, &body)
        .expect("conversation")
        .into_entries()
}

#[test]
fn errors_are_typed() {
    assert!(matches!(
        Conversation::from_slice(ApiShape::ChatCompletions, b"{nope"),
        Err(ConversationError::NotJson(_))
    ));
    assert!(matches!(
        Conversation::from_slice(ApiShape::ChatCompletions, b"[1]"),
        Err(ConversationError::NotObject { found: "an array" })
    ));
    assert!(matches!(
        Conversation::from_slice(ApiShape::ChatCompletions, b"{}"),
        Err(ConversationError::MissingField { field: "messages" })
    ));
    let err =
        Conversation::from_slice(ApiShape::Responses, br#"{"input": 3}"#).expect_err("wrong type");
    assert_eq!(
        err.to_string(),
        "expected `input` to be a string or an array, found a number"
    );
    assert!(matches!(
        Conversation::from_slice(ApiShape::Gemini, br#"{"contents": {}}"#),
        Err(ConversationError::WrongType {
            field: "contents",
            ..
        })
    ));
}

#[test]
fn chat_messages_parts_and_tool_calls() {
    let e = conv(
        ApiShape::ChatCompletions,
        json!({"messages": [
            {"role": "system", "content": "be terse"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "read", "arguments": "{\"path\": \"src/lib.rs\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "1", "content": "fn main() {}"},
            42,
            {"content": "no role"}
        ]}),
    );
    assert_eq!(e.len(), 5, "the number is dropped");
    assert!(e[0].is_system_like());
    assert_eq!(e[1].text(), "a\nb");
    assert_eq!(e[2].parts, [r#"tool call read({"path": "src/lib.rs"})"#]);
    assert_eq!(e[3].parts, ["tool output: fn main() {}"]);
    assert_eq!(e[3].kinds, [PartKind::ToolOutput]);
    assert_eq!(e[2].kinds, [PartKind::ToolCall]);
    assert_eq!(e[2].files, ["src/lib.rs"]);
    assert_eq!(e[4].role, None);
}

#[test]
fn responses_string_input_and_instructions() {
    let e = conv(
        ApiShape::Responses,
        json!({"input": "say hi", "instructions": "You are terse."}),
    );
    assert_eq!(
        e,
        [
            Entry::new(Some("system"), ["You are terse."]),
            Entry::new(Some("user"), ["say hi"]),
        ]
    );
}

#[test]
fn responses_items() {
    let e = conv(
        ApiShape::Responses,
        json!({"input": [
            {"role": "user", "content": "typeless message"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "hidden"}]},
            {"type": "compaction", "encrypted_content": "x"},
            {"type": "custom_tool_call", "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch", "call_id": "c"},
            {"type": "custom_tool_call_output", "call_id": "c", "output": "Success"},
            {"type": "local_shell_call", "action": {"command": ["ls"]}},
            {"type": "function_call_output", "call_id": "d", "output": [{"type": "input_text", "text": "part"}]},
            "not an object"
        ]}),
    );
    assert_eq!(e.len(), 6);
    assert_eq!(e[0].parts, ["typeless message"]);
    assert_eq!(e[1].role.as_deref(), Some("assistant"));
    assert_eq!(
        e[2].parts,
        ["tool call apply_patch(*** Begin Patch *** End Patch)"]
    );
    assert_eq!(e[2].role.as_deref(), Some("assistant"));
    assert_eq!(e[3].parts, ["tool output: Success"]);
    assert_eq!(e[3].role.as_deref(), Some("tool"));
    assert_eq!(e[4].parts, [r#"tool call local_shell({"command":["ls"]})"#]);
    assert_eq!(e[5].parts, ["tool output: part"]);
}

#[test]
fn anthropic_blocks_and_system() {
    let e = conv(
        ApiShape::AnthropicMessages,
        json!({
            "system": [{"type": "text", "text": "sys one"}, {"type": "text", "text": "sys two", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "fix it"},
                {"role": "system", "content": "mid-conversation system"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "secret", "signature": "s"},
                    {"type": "text", "text": "on it"},
                    {"type": "tool_use", "id": "t", "name": "Edit", "input": {"file": "a.rs"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "edited"}]},
                    {"type": "tool_result", "tool_use_id": "u", "content": "plain"}
                ]},
                {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"}]}
            ]
        }),
    );
    assert_eq!(e.len(), 6);
    assert_eq!(e[0], Entry::new(Some("system"), ["sys one", "sys two"]));
    assert!(e[2].is_system_like());
    assert_eq!(e[3].parts, ["on it", r#"tool call Edit({"file":"a.rs"})"#]);
    assert_eq!(e[4].parts, ["tool output: edited", "tool output: plain"]);
    assert!(e[3].files.is_empty(), "`file` is no file argument");
    assert!(e[5].is_blank());
}

#[test]
fn anthropic_string_system_and_no_system() {
    let e = conv(
        ApiShape::AnthropicMessages,
        json!({"system": "terse", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(e[0], Entry::new(Some("system"), ["terse"]));
    let e = conv(
        ApiShape::AnthropicMessages,
        json!({"system": "", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(e.len(), 1, "an empty system prompt is no entry");
}

#[test]
fn gemini_contents() {
    let e = conv(
        ApiShape::Gemini,
        json!({
            "systemInstruction": {"parts": [{"text": "be brief"}]},
            "contents": [
                {"role": "user", "parts": [{"text": "weather?"}]},
                {"role": "model", "parts": [
                    {"text": "pondering", "thought": true},
                    {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}
                ]},
                {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"temp": 21}}}]}
            ]
        }),
    );
    assert_eq!(e[0], Entry::new(Some("system"), ["be brief"]));
    assert_eq!(e[2].parts, [r#"tool call get_weather({"city":"Paris"})"#]);
    assert_eq!(e[3].parts, [r#"tool output: {"temp":21}"#]);
    assert_eq!(e[2].role.as_deref(), Some("model"));
}

#[test]
fn tool_lines_are_one_line_and_bounded() {
    let big = "x y\n".repeat(10_000);
    let line = tool_output_line(&big);
    // A space either side of the ` … ` is not doubled.
    assert!((TOOL_LINE_MAX_CHARS - 2..=TOOL_LINE_MAX_CHARS).contains(&line.chars().count()));
    assert!(!line.contains('\n'));
    // The beginning and the end of a long output, the end where its verdict is.
    let big = format!("{}\n\n  verdict: 1 failed  \n", "é line\n".repeat(10_000));
    let line = tool_output_line(&big);
    assert!(line.starts_with("tool output: é line é line"), "{line}");
    assert!(line.ends_with("é line é line verdict: 1 failed"), "{line}");
    assert_eq!(line.matches(" … ").count(), 1, "{line}");
    let tail = line.rsplit(" … ").next().unwrap();
    assert!(tail.chars().count() >= TOOL_OUTPUT_TAIL_CHARS - 1, "{tail}");
    let args = json!({"content": "é".repeat(5000)});
    let line = tool_call_line("Write", &args);
    assert_eq!(line.chars().count(), TOOL_LINE_MAX_CHARS);
    assert!(line.starts_with("tool call Write({\"content\":\"éé"));
    // Short lines are untouched apart from whitespace folding.
    assert_eq!(tool_output_line("  a \t b  "), "tool output: a b");
    assert_eq!(tool_call_line("f", &Value::Null), "tool call f()");
}

#[test]
fn detection() {
    let d = |v: Value| detect(None, &v);
    assert_eq!(d(json!({"contents": []})), Some(ApiShape::Gemini));
    assert_eq!(d(json!({"input": "x"})), Some(ApiShape::Responses));
    assert_eq!(
        d(json!({"messages": [], "max_tokens": 5})),
        Some(ApiShape::ChatCompletions)
    );
    assert_eq!(
        d(json!({"messages": [], "anthropic_version": "bedrock-2023-05-31"})),
        Some(ApiShape::AnthropicMessages)
    );
    assert_eq!(
        d(
            json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]})
        ),
        Some(ApiShape::AnthropicMessages)
    );
    assert_eq!(d(json!({"model": "x"})), None);
    assert_eq!(d(json!([1])), None);
    assert_eq!(
        detect(Some("/v1/responses"), &json!({"messages": []})),
        Some(ApiShape::Responses)
    );
    assert_eq!(
        detect(Some("/v1/models"), &json!({"messages": []})),
        Some(ApiShape::ChatCompletions),
        "an unknown path falls back to the body"
    );
}

proptest::proptest! {
    /// A tool output's line is one line within the limit: the whole output folded when it
    /// fits, else a beginning and the end of the folded output.
    #[test]
    fn a_tool_output_line_keeps_its_beginning_and_its_end(output in "[a-cé \n\t]{0,400}") {
        let line = tool_output_line(&output);
        let folded = format!("tool output: {}", output.split_whitespace().collect::<Vec<_>>().join(" "));
        let folded = folded.trim_end();
        proptest::prop_assert!(line.chars().count() <= TOOL_LINE_MAX_CHARS && !line.contains('\n'));
        if folded.chars().count() <= TOOL_LINE_MAX_CHARS {
            proptest::prop_assert_eq!(line.as_str(), folded);
        } else {
            let (head, tail) = line.split_once(" … ").expect("cut");
            proptest::prop_assert!(folded.starts_with(head) && folded.ends_with(tail), "{line}");
            proptest::prop_assert!(tail.chars().count() >= TOOL_OUTPUT_TAIL_CHARS - 1);
            proptest::prop_assert!(head.chars().count() >= TOOL_LINE_MAX_CHARS - 4 - TOOL_OUTPUT_TAIL_CHARS);
        }
    }
}
