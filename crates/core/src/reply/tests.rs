use serde_json::json;

use super::*;

fn st(v: Value) -> Option<String> {
    summary_text(v.to_string().as_bytes())
}

#[test]
fn json_shapes() {
    assert_eq!(
        st(json!({"choices": [{"message": {"content": " hi "}}]})).as_deref(),
        Some("hi")
    );
    assert_eq!(
        st(json!({"choices": [{"message": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}]})).as_deref(),
        Some("a\nb")
    );
    assert_eq!(
        st(json!({"output": [
            {"type": "reasoning", "summary": []},
            {"type": "message", "content": [{"type": "output_text", "text": "one"}, {"type": "refusal", "refusal": "no"}]},
            {"type": "message", "content": [{"type": "output_text", "text": "two"}]}
        ]}))
        .as_deref(),
        Some("one\ntwo")
    );
    assert_eq!(
        st(json!({"content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "ant"}]})).as_deref(),
        Some("ant")
    );
    assert_eq!(
        st(json!({"candidates": [{"content": {"parts": [{"text": "x", "thought": true}, {"text": "ge"}, {"text": "mini"}]}}]})).as_deref(),
        Some("gemini")
    );
    assert_eq!(
        st(json!([
            {"candidates": [{"content": {"parts": [{"text": "a"}]}}]},
            {"candidates": [{"content": {"parts": [{"text": "b"}]}}]}
        ]))
        .as_deref(),
        Some("ab")
    );
}

#[test]
fn unknown_json_and_plain_text_fall_back_to_raw() {
    assert_eq!(
        st(json!({"summary": "bare"})).as_deref(),
        Some(r#"{"summary":"bare"}"#)
    );
    assert_eq!(
        st(json!({"choices": [{"message": {"content": null}}]})).as_deref(),
        Some(r#"{"choices":[{"message":{"content":null}}]}"#)
    );
    assert_eq!(
        summary_text(b"  plain words \n").as_deref(),
        Some("plain words")
    );
    assert_eq!(summary_text(b"  \n\t"), None);
    assert_eq!(summary_text(b""), None);
    // Never lossy: invalid UTF-8 is no text.
    assert_eq!(summary_text(b"ab\xffcd"), None);
}

#[test]
fn sse_chat() {
    let body = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n\
                data: {\"choices\":[{\"delta\":{\"content\":\"{\\\"sum\"}}]}\n\n\
                data: {\"choices\":[{\"delta\":{\"content\":\"mary\\\":1}\"}}]}\n\n\
                data: {\"choices\":[]}\n\n\
                data: [DONE]\n\n";
    assert_eq!(
        summary_text(body.as_bytes()).as_deref(),
        Some(r#"{"summary":1}"#)
    );
}

#[test]
fn sse_responses_deltas_and_fallbacks() {
    let with_deltas = "event: response.output_text.delta\r\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"A\"}\r\n\r\n\
        event: response.output_text.delta\r\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"B\"}\r\n\r\n\
        data: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"AB\"}]}}\r\n\r\n\
        data: {\"type\":\"response.completed\",\"response\":{\"output\":[{\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"AB\"}]}]}}\r\n\r\n";
    assert_eq!(summary_text(with_deltas.as_bytes()).as_deref(), Some("AB"));
    let item_only = "data: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"from item\"}]}}\n\n\
        data: {\"type\":\"response.completed\",\"response\":{\"output\":[{\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"from item\"}]}]}}\n\n";
    assert_eq!(
        summary_text(item_only.as_bytes()).as_deref(),
        Some("from item")
    );
    let completed_only = "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"output\":[{\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"late\"}]}]}}";
    assert_eq!(
        summary_text(completed_only.as_bytes()).as_deref(),
        Some("late")
    );
}

#[test]
fn sse_anthropic_and_gemini() {
    let body = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n\
        event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n\
        event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"secret\"}}\n\n\
        event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"vis\"}}\n\n\
        event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"ible\"}}\n\n\
        event: ping\ndata: {\"type\":\"ping\"}\n\n";
    assert_eq!(summary_text(body.as_bytes()).as_deref(), Some("visible"));
    let gemini = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"gem\"}]}}]}\n\ndata: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"ini\"}]}}]}\n\n";
    assert_eq!(summary_text(gemini.as_bytes()).as_deref(), Some("gemini"));
    assert_eq!(summary_text(b": keep-alive\n\ndata: [DONE]\n\n"), None);
}

#[test]
fn multi_line_data_fields_join_with_newline() {
    let body = "data: {\"type\":\"response.output_text.delta\",\ndata: \"delta\":\"x\"}\n\n";
    assert_eq!(summary_text(body.as_bytes()).as_deref(), Some("x"));
}

fn capture(is_sse: bool, body: &[u8], split: usize, cap: usize) -> Option<String> {
    let mut c = ReplyCapture::new(is_sse, cap);
    for chunk in body.chunks(split.max(1)) {
        c.push(chunk);
    }
    c.finish()
}

#[test]
fn capture_sse_is_split_independent() {
    let body = "event: response.output_text.delta\r\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"héllo \"}\r\n\r\n\
        data: {\"type\":\"response.output_text.delta\",\"delta\":\"wörld\"}\r\n\r\n\
        data: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"function_call\",\"name\":\"shell\",\"arguments\":\"{\\\"cmd\\\":\\\"ls\\\"}\",\"call_id\":\"c\"}}\r\n\r\n";
    for split in 1..40 {
        assert_eq!(
            capture(true, body.as_bytes(), split, REPLY_CAP).as_deref(),
            Some("héllo wörld\ntool call shell({\"cmd\":\"ls\"})"),
            "split {split}"
        );
    }
}

#[test]
fn capture_chat_and_anthropic_tool_calls() {
    let chat = "data: {\"choices\":[{\"delta\":{\"content\":\"Let me look.\"}}]}\n\n\
        data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":\"\"}}]}}]}\n\n\
        data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"p\\\":\"}}]}}]}\n\n\
        data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"1}\"}}]}}]}\n\n\
        data: [DONE]\n\n";
    assert_eq!(
        capture(true, chat.as_bytes(), 7, REPLY_CAP).as_deref(),
        Some("Let me look.\ntool call read({\"p\":1})")
    );
    let anthropic = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
        event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Running it.\"}}\n\n\
        event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"Bash\",\"input\":{}}}\n\n\
        event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"command\\\":\"}}\n\n\
        event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"ls\\\"}\"}}\n\n\
        event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n";
    assert_eq!(
        capture(true, anthropic.as_bytes(), 5, REPLY_CAP).as_deref(),
        Some("Running it.\ntool call Bash({\"command\":\"ls\"})")
    );
    // Summary text never carries tool lines.
    assert_eq!(
        summary_text(anthropic.as_bytes()).as_deref(),
        Some("Running it.")
    );
}

#[test]
fn capture_is_capped_on_a_char_boundary() {
    let delta = json!({"type": "response.output_text.delta", "delta": "é".repeat(100)});
    let body = format!("data: {delta}\n\n").repeat(1000);
    let text = capture(true, body.as_bytes(), 4096, 1001).expect("text");
    assert_eq!(text.len(), 1000);
    let mut c = ReplyCapture::new(true, 10);
    c.push(format!("data: {delta}\n\n").as_bytes());
    assert!(c.is_done());
}

#[test]
fn capture_json_reply() {
    let body = json!({"choices": [{"message": {"content": "done", "tool_calls": [
        {"type": "function", "function": {"name": "grep", "arguments": "{}"}}
    ]}}]})
    .to_string();
    assert_eq!(
        capture(false, body.as_bytes(), 3, REPLY_CAP).as_deref(),
        Some("done\ntool call grep({})")
    );
    let body = json!({"output": [
        {"type": "reasoning", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        {"type": "function_call", "name": "shell", "arguments": "{}"}
    ]})
    .to_string();
    assert_eq!(
        capture(false, body.as_bytes(), 100, REPLY_CAP).as_deref(),
        Some("ok\ntool call shell({})")
    );
    let body = json!({"content": [{"type": "text", "text": "x".repeat(50)}]}).to_string();
    assert_eq!(
        capture(false, body.as_bytes(), 100, 10).as_deref(),
        Some("xxxxxxxxxx")
    );
}

#[test]
fn capture_json_cut_to_nothing_is_no_text() {
    // A cap that leaves no bytes, or only blanks, of a whole reply's text is no text.
    let body = br#"[{"content":"role"}]"#;
    assert_eq!(capture(false, body, 3, 0), None);
    assert_eq!(capture(false, body, 3, 4).as_deref(), Some("role"));
    let body = json!({"content": [{"type": "text", "text": "a  b"}]}).to_string();
    assert_eq!(capture(false, body.as_bytes(), 3, 2).as_deref(), Some("a"));
    let body = json!({"content": [{"type": "text", "text": "é"}]}).to_string();
    assert_eq!(capture(false, body.as_bytes(), 3, 1), None);
}

#[test]
fn capture_json_gives_up_beyond_the_raw_limit() {
    let mut c = ReplyCapture::new(false, REPLY_CAP);
    let chunk = vec![b' '; 64 * 1024];
    for _ in 0..17 {
        c.push(&chunk);
    }
    assert!(c.is_done());
    assert_eq!(c.finish(), None);
}

#[test]
fn overlong_lines_and_events_are_skipped() {
    let mut c = ReplyCapture::new(true, REPLY_CAP);
    c.push(b"data: ");
    let junk = vec![b'x'; 256 * 1024];
    for _ in 0..5 {
        c.push(&junk);
    }
    c.push(b"\n\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"after\"}\n\n");
    assert_eq!(c.finish().as_deref(), Some("after"));
}
