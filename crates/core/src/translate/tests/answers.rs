//! Answers translated back: a JSON answer with a tool call, streamed events, errors and cut
//! streams, and property tests over generated streams, chunkings and inputs.

use super::*;

#[test]
fn json_answer_with_a_tool_call() {
    let body = br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-x",
      "content":[{"type":"thinking","thinking":"x","signature":"s"},{"type":"text","text":"let me look"},
      {"type":"tool_use","id":"toolu_1","name":"shell","input":{"cmd":["ls"]}},
      {"type":"tool_use","id":"toolu_2","name":"apply_patch","input":{"input":"*** Begin"}}],
      "stop_reason":"tool_use","usage":{"input_tokens":10,"cache_read_input_tokens":90,"output_tokens":5}}"#;
    let ctx = ResponseContext {
        model: Some("gpt-5.5".into()),
        custom_tools: vec!["apply_patch".into()],
        created_at: 7,
    };
    let v: Value = serde_json::from_slice(&messages_to_response(body, &ctx).unwrap()).unwrap();
    assert_eq!(v["model"], "gpt-5.5");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["output"][0]["type"], "message");
    assert_eq!(v["output"][1]["type"], "function_call");
    assert_eq!(v["output"][1]["call_id"], "toolu_1");
    let args: Value = serde_json::from_str(v["output"][1]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"cmd": ["ls"]}));
    assert_eq!(v["output"][2]["type"], "custom_tool_call");
    assert_eq!(v["output"][2]["input"], "*** Begin");
    assert_eq!(v["usage"]["input_tokens"], 100);
    assert_eq!(v["usage"]["input_tokens_details"]["cached_tokens"], 90);
    assert_eq!(v["usage"]["total_tokens"], 105);
    assert!(messages_to_response(b"{\"type\":\"error\"}", &ctx).is_none());
}

const STREAM: &str = concat!(
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_9\",\"model\":\"claude-x\",\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n",
    "event: ping\ndata: {\"type\":\"ping\"}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"sig\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: content_block_start\r\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\r\n\r\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\u{e9}\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"lo\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_7\",\"name\":\"shell\",\"input\":{}}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"cmd\\\":\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"[\\\"ls\\\"]}\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":30}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
);

fn run(chunks: &[&[u8]]) -> Vec<u8> {
    let mut t = StreamTranslator::new(ResponseContext {
        model: Some("gpt-5.5".into()),
        ..Default::default()
    });
    let mut out = Vec::new();
    for c in chunks {
        out.extend(t.push(c));
    }
    out.extend(t.finish());
    out
}

#[test]
fn stream_events() {
    let ev = events(&run(&[STREAM.as_bytes()]));
    let types: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types[0], "response.created");
    assert_eq!(*types.last().unwrap(), "response.completed");
    let text: String = ev
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Hel\u{e9}lo");
    let done: Vec<&Value> = ev
        .iter()
        .filter(|e| e["type"] == "response.output_item.done")
        .collect();
    assert_eq!(done.len(), 2);
    assert_eq!(done[0]["item"]["content"][0]["text"], "Hel\u{e9}lo");
    assert_eq!(done[1]["item"]["type"], "function_call");
    assert_eq!(done[1]["item"]["arguments"], "{\"cmd\":[\"ls\"]}");
    let completed = ev.last().unwrap();
    assert_eq!(completed["response"]["id"], "resp_msg_9");
    assert_eq!(completed["response"]["usage"]["total_tokens"], 42);
    assert_eq!(completed["response"]["output"].as_array().unwrap().len(), 2);
    assert_eq!(completed["response"]["model"], "gpt-5.5");
    // Every item delta follows its item.added.
    let added = types
        .iter()
        .position(|t| *t == "response.output_item.added")
        .unwrap();
    let first_delta = types
        .iter()
        .position(|t| *t == "response.output_text.delta")
        .unwrap();
    assert!(added < first_delta);
}

#[test]
fn stream_errors_and_truncation() {
    let err = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\"}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let ev = events(&run(&[err.as_bytes()]));
    let last = ev.last().unwrap();
    assert_eq!(last["type"], "response.failed");
    assert_eq!(last["response"]["error"]["message"], "Overloaded");
    assert_eq!(
        ev.iter().filter(|e| e["type"] == "response.failed").count(),
        1
    );
    let cut = &STREAM.as_bytes()[..STREAM.len() / 2];
    let ev = events(&run(&[cut]));
    assert_eq!(ev.last().unwrap()["type"], "response.failed");
    let max = STREAM.replace(
        "\"stop_reason\":\"tool_use\"",
        "\"stop_reason\":\"max_tokens\"",
    );
    let ev = events(&run(&[max.as_bytes()]));
    assert_eq!(ev.last().unwrap()["type"], "response.incomplete");
}

#[test]
fn error_bodies() {
    assert!(messages_error_to_responses(b"{\"error\":\"x\"}").is_none());
    assert!(messages_error_to_responses(b"not json").is_none());
    let v: Value = serde_json::from_slice(
        &messages_error_to_responses(br#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}"#).unwrap(),
    ).unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
}

fn item() -> impl Strategy<Value = Value> {
    let id = prop::sample::select(vec!["c1", "c2", "c3", "c.4", "c:4", "c_4"]);
    let text = prop::sample::select(vec!["", " ", "hi", "more text", "ends in space \n"]);
    prop_oneof![
        text.clone().prop_map(|t| json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": t}]})),
        text.clone().prop_map(|t| json!({"role": "user", "content": t})),
        text.clone().prop_map(|t| json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": t}]})),
        text.prop_map(|t| json!({"type": "message", "role": "developer", "content": t})),
        id.clone().prop_map(|c| json!({"type": "function_call", "call_id": c, "name": "shell", "arguments": "{\"a\":1}"})),
        id.clone().prop_map(|c| json!({"type": "function_call", "call_id": c, "name": "shell", "arguments": "not json"})),
        id.clone().prop_map(|c| json!({"type": "function_call_output", "call_id": c, "output": "out"})),
        id.clone().prop_map(|c| json!({"type": "custom_tool_call", "call_id": c, "name": "apply_patch", "input": "p"})),
        id.clone().prop_map(|c| json!({"type": "custom_tool_call_output", "call_id": c, "output": ""})),
        Just(json!({"type": "reasoning", "encrypted_content": "x", "summary": []})),
        id.clone().prop_map(|c| json!({"type": "function_call_output", "call_id": c, "output": [
            {"type": "input_text", "text": " "}, {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]})),
        id.prop_map(|c| json!({"type": "function_call_output", "call_id": c, "output": [{"type": "input_text", "text": "t"}]})),
        Just(json!({"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]})),
    ]
}

/// One content block of a generated Messages stream.
#[derive(Debug, Clone)]
enum GenBlock {
    Text(Vec<String>),
    Tool(String),
    Thinking,
}

fn gen_block() -> impl Strategy<Value = GenBlock> {
    prop_oneof![
        prop::collection::vec("[a-z \u{e9}\u{1f600}\n\"]{0,6}", 0..4).prop_map(GenBlock::Text),
        prop::sample::select(vec!["shell", "apply_patch"])
            .prop_map(|n| GenBlock::Tool(n.to_owned())),
        Just(GenBlock::Thinking),
    ]
}

/// A Messages stream of `blocks`, ended by `end` (0: message_stop, 1: an error event, 2: cut).
fn gen_stream(blocks: &[GenBlock], end: u8) -> String {
    let mut out = String::from(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":3}}}\n\n",
    );
    let mut ev = |v: Value| {
        out.push_str(&format!(
            "event: {}\ndata: {v}\n\n",
            v["type"].as_str().unwrap()
        ))
    };
    for (i, b) in blocks.iter().enumerate() {
        match b {
            GenBlock::Text(parts) => {
                ev(
                    json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}),
                );
                for p in parts {
                    ev(
                        json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": p}}),
                    );
                }
            }
            GenBlock::Tool(name) => {
                ev(
                    json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": format!("t{i}"), "name": name, "input": {}}}),
                );
                for p in ["{\"input\":", "\"x\"}"] {
                    ev(
                        json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": p}}),
                    );
                }
            }
            GenBlock::Thinking => {
                ev(
                    json!({"type": "content_block_start", "index": i, "content_block": {"type": "thinking", "thinking": ""}}),
                );
                ev(
                    json!({"type": "content_block_delta", "index": i, "delta": {"type": "signature_delta", "signature": "s"}}),
                );
            }
        }
        ev(json!({"type": "content_block_stop", "index": i}));
    }
    match end {
        0 => {
            ev(
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4}}),
            );
            ev(json!({"type": "message_stop"}));
        }
        1 => ev(
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
        _ => {}
    }
    out
}

fn split_at(bytes: &[u8], cuts: Vec<usize>) -> Vec<&[u8]> {
    let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut chunks = Vec::new();
    let mut at = 0;
    for c in cuts {
        chunks.push(&bytes[at..c]);
        at = c;
    }
    chunks.push(&bytes[at..]);
    chunks
}

proptest! {
    #[test]
    fn any_stream_translates_the_same_in_any_chunks(
        blocks in prop::collection::vec(gen_block(), 0..6),
        end in 0u8..3,
        cuts in prop::collection::vec(any::<usize>(), 0..16),
    ) {
        let stream = gen_stream(&blocks, end);
        let bytes = stream.as_bytes();
        let whole = run(&[bytes]);
        prop_assert_eq!(&run(&split_at(bytes, cuts)), &whole);
        let ev = events(&whole);
        let terminal = |e: &Value| ["response.completed", "response.failed", "response.incomplete"].contains(&e["type"].as_str().unwrap_or(""));
        prop_assert_eq!(ev.iter().filter(|e| terminal(e)).count(), 1);
        prop_assert!(terminal(ev.last().unwrap()));
        prop_assert_eq!(ev.last().unwrap()["type"] == "response.completed", end == 0);
        // Every event about an item follows that item's output_item.added.
        let mut added = Vec::new();
        for e in &ev {
            if e["type"] == "response.output_item.added" {
                added.push(e["output_index"].as_u64().unwrap());
            } else if let Some(i) = e.get("output_index").and_then(Value::as_u64) {
                prop_assert!(added.contains(&i), "{} before its item", e["type"]);
            }
        }
        // The text of each finished message item is its deltas joined.
        let texts: Vec<String> = blocks.iter().filter_map(|b| match b { GenBlock::Text(p) => Some(p.concat()), _ => None }).collect();
        let done: Vec<String> = ev.iter().filter(|e| e["type"] == "response.output_item.done" && e["item"]["type"] == "message")
            .map(|e| e["item"]["content"][0]["text"].as_str().unwrap().to_owned()).collect();
        if end == 0 {
            prop_assert_eq!(done, texts);
        }
    }

    #[test]
    fn any_input_gives_a_valid_conversation(
        items in prop::collection::vec(item(), 0..24),
        with_tools in any::<bool>(),
        choice in prop::sample::select(vec!["auto", "f", "web_search", "shell"]),
        temperature in prop::option::of(-1.0f64..3.0),
        top_p in prop::option::of(-0.5f64..1.5),
        instructions in prop::sample::select(vec!["", " ", "Be terse. "]),
    ) {
        let tools = if with_tools {
            json!([{"type": "function", "name": "shell"}, {"type": "custom", "name": "apply_patch"}, {"type": "web_search"}])
        } else {
            json!([{"type": "web_search"}])
        };
        let mut body = json!({"model": "gpt-5.5", "input": items, "tools": tools, "instructions": instructions,
            "tool_choice": if choice == "auto" { json!("auto") } else { json!({"type": "function", "name": choice}) }});
        if let Some(t) = temperature { body["temperature"] = json!(t); }
        if let Some(p) = top_p { body["top_p"] = json!(p); }
        let v = translate(&body);
        prop_assert!(check_request(&v).is_ok(), "{:?}\n{}", check_request(&v), serde_json::to_string_pretty(&v).unwrap());
        prop_assert!(v["max_tokens"].as_u64().is_some());
    }

    #[test]
    fn chunk_splitting_never_changes_the_output(cuts in prop::collection::vec(0usize..STREAM.len(), 0..12)) {
        let bytes = STREAM.as_bytes();
        let mut cuts = cuts;
        cuts.sort_unstable();
        cuts.dedup();
        let mut chunks: Vec<&[u8]> = Vec::new();
        let mut at = 0;
        for c in cuts {
            chunks.push(&bytes[at..c]);
            at = c;
        }
        chunks.push(&bytes[at..]);
        prop_assert_eq!(run(&chunks), run(&[bytes]));
    }
}
