use proptest::prelude::*;
use serde_json::{Value, json};

use super::sequence::check;
use super::*;

fn translate(body: &Value) -> Value {
    let t = responses_to_messages(
        body.to_string().as_bytes(),
        &RequestOptions::new("claude-x"),
    )
    .expect("translates");
    serde_json::from_slice(&t.body).expect("JSON")
}

fn events(sse: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(sse)
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).expect("event JSON"))
        .collect()
}

#[test]
fn codex_shaped_request() {
    let body = json!({
        "model": "gpt-5.5", "stream": true, "store": false, "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "s", "reasoning": {"effort": "medium"}, "text": {"verbosity": "low"},
        "parallel_tool_calls": true, "tool_choice": "auto", "previous_response_id": "resp_1",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<context_handoff>h</context_handoff>"}]},
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA"},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "shell", "arguments": "{\"cmd\":[\"ls\"]}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "a.rs"},
            {"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch", "input": "*** Begin Patch"},
            {"type": "custom_tool_call_output", "call_id": "call_2", "output": "ok"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}
        ],
        "tools": [
            {"type": "function", "name": "shell", "description": "run", "parameters": {"type": "object", "properties": {"cmd": {"type": "array"}}}},
            {"type": "custom", "name": "apply_patch", "description": "patch", "format": {"type": "grammar"}},
            {"type": "web_search", "external_web_access": false},
            {"type": "namespace", "name": "multi_agent_v1", "tools": []}
        ]
    });
    let t = responses_to_messages(
        body.to_string().as_bytes(),
        &RequestOptions::new("claude-x"),
    )
    .unwrap();
    let v: Value = serde_json::from_slice(&t.body).unwrap();
    assert_eq!(v["model"], "claude-x");
    assert_eq!(v["stream"], true);
    assert!(
        v["system"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("<context_handoff>h</context_handoff>\n\nYou are Codex.")
    );
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    for k in keys {
        assert!(
            [
                "model",
                "max_tokens",
                "system",
                "messages",
                "tools",
                "tool_choice",
                "stream"
            ]
            .contains(&k.as_str()),
            "{k}"
        );
    }
    assert!(!t.body.windows(9).any(|w| w == b"encrypted"));
    check(v["messages"].as_array().unwrap()).unwrap();
    let m = &v["messages"];
    assert_eq!(m[1]["content"][0]["type"], "tool_use");
    assert_eq!(m[1]["content"][0]["input"], json!({"cmd": ["ls"]}));
    assert_eq!(m[2]["content"][0]["tool_use_id"], "call_1");
    assert_eq!(
        m[3]["content"][0]["input"],
        json!({"input": "*** Begin Patch"})
    );
    assert_eq!(v["tools"].as_array().unwrap().len(), 2);
    assert_eq!(v["tools"][1]["input_schema"]["required"], json!(["input"]));
    check_request(&v).unwrap();
    assert_eq!(v["tool_choice"], json!({"type": "auto"}));
    assert_eq!(t.custom_tools, vec!["apply_patch".to_owned()]);
    assert!(t.dropped.iter().any(|d| d == "item:reasoning"));
    assert!(t.dropped.iter().any(|d| d == "previous_response_id"));
    assert!(t.dropped.iter().any(|d| d.starts_with("tool:web_search")));
}

#[test]
fn max_tokens_and_tool_choice() {
    let v = translate(
        &json!({"input": "hi", "max_output_tokens": 100, "tool_choice": "required",
        "parallel_tool_calls": false, "tools": [{"type": "function", "name": "f"}]}),
    );
    assert_eq!(v["max_tokens"], 100);
    assert_eq!(
        v["tool_choice"],
        json!({"type": "any", "disable_parallel_tool_use": true})
    );
    assert_eq!(v["tools"][0]["input_schema"]["type"], "object");
    let v = translate(&json!({"input": [], "tool_choice": "none"}));
    assert!(v.get("tool_choice").is_none());
    check(v["messages"].as_array().unwrap()).unwrap();
}

/// The request-level rules of the Messages API beyond the conversation ones of
/// [`check`]: tool blocks need tools, tool choice names a listed tool, at most four cache
/// breakpoints, and sampling parameters the current models take.
fn check_request(v: &Value) -> Result<(), String> {
    check(v["messages"].as_array().ok_or("no messages")?)?;
    let text = v.to_string();
    let tools = v["tools"].as_array().cloned().unwrap_or_default();
    if tools.is_empty() && (text.contains("\"tool_use\"") || text.contains("\"tool_result\"")) {
        return Err("tool blocks without tools".into());
    }
    if v["tool_choice"]["type"] == "tool"
        && !tools.iter().any(|t| t["name"] == v["tool_choice"]["name"])
    {
        return Err("tool_choice names an unknown tool".into());
    }
    let breakpoints = text.matches("\"cache_control\"").count();
    if breakpoints > 4 {
        return Err(format!("{breakpoints} cache breakpoints"));
    }
    if v.get("temperature").is_some() && v.get("top_p").is_some() {
        return Err("temperature and top_p".into());
    }
    for k in ["temperature", "top_p"] {
        if let Some(t) = v.get(k) {
            let t = t.as_f64().ok_or("not a number")?;
            if !(0.0..=1.0).contains(&t) {
                return Err(format!("{k} {t}"));
            }
        }
    }
    if let Some(system) = v.get("system") {
        for b in system.as_array().ok_or("system is not blocks")? {
            if b["text"].as_str().unwrap_or("").trim().is_empty() {
                return Err("blank system block".into());
            }
        }
    }
    Ok(())
}

fn translate_t(body: &Value) -> (Value, Translated) {
    let t = responses_to_messages(
        body.to_string().as_bytes(),
        &RequestOptions::new("claude-x"),
    )
    .expect("translates");
    (serde_json::from_slice(&t.body).expect("JSON"), t)
}

#[test]
fn max_tokens_default_and_per_provider() {
    let v = translate(&json!({"input": "hi"}));
    assert_eq!(v["max_tokens"], 32000);
    let options = RequestOptions {
        default_max_tokens: 64000,
        ..RequestOptions::new("claude-x")
    };
    let t = responses_to_messages(br#"{"input":"hi"}"#, &options).unwrap();
    let v: Value = serde_json::from_slice(&t.body).unwrap();
    assert_eq!(v["max_tokens"], 64000);
    let t = responses_to_messages(br#"{"input":"hi","max_output_tokens":50}"#, &options).unwrap();
    let v: Value = serde_json::from_slice(&t.body).unwrap();
    assert_eq!(v["max_tokens"], 50);
}

#[test]
fn the_target_model_or_else_the_one_the_body_names() {
    let body = br#"{"model":"claude-body","input":"hi"}"#;
    let t = responses_to_messages(body, &RequestOptions::new("claude-target")).unwrap();
    let v: Value = serde_json::from_slice(&t.body).unwrap();
    assert_eq!(v["model"], "claude-target");
    assert_eq!(t.client_model.as_deref(), Some("claude-body"));
    let t = responses_to_messages(body, &RequestOptions::new("")).unwrap();
    let v: Value = serde_json::from_slice(&t.body).unwrap();
    assert_eq!(v["model"], "claude-body");
}

#[test]
fn tool_output_arrays_keep_their_images() {
    let (v, t) = translate_t(
        &json!({"tools": [{"type": "function", "name": "view_image"}], "input": [
            {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": [
                {"type": "input_text", "text": "the screenshot"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBOR"},
                {"type": "input_image", "image_url": "https://example.com/a.png"},
                {"type": "input_file", "file_id": "file_1"}
            ]}
        ]}),
    );
    check_request(&v).unwrap();
    let result = &v["messages"][2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(
        result["content"][0],
        json!({"type": "text", "text": "the screenshot"})
    );
    assert_eq!(
        result["content"][1]["source"],
        json!({"type": "base64", "media_type": "image/png", "data": "iVBOR"})
    );
    assert_eq!(
        result["content"][2]["source"],
        json!({"type": "url", "url": "https://example.com/a.png"})
    );
    assert_eq!(result["content"].as_array().unwrap().len(), 3);
    assert!(
        t.dropped.contains(&"part:input_file".to_owned()),
        "{:?}",
        t.dropped
    );
}

#[test]
fn cache_breakpoints_on_tools_system_and_last_user_block() {
    let v = translate(&json!({"instructions": "Be terse.", "tools": [
        {"type": "function", "name": "a"}, {"type": "function", "name": "b"}],
    "input": [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": [{"type": "input_text", "text": "three"}, {"type": "input_text", "text": "four"}]},
        {"role": "assistant", "content": "five"}
    ]}));
    check_request(&v).unwrap();
    let eph = json!({"type": "ephemeral"});
    assert_eq!(v["system"][0]["cache_control"], eph);
    assert!(v["tools"][0].get("cache_control").is_none());
    assert_eq!(v["tools"][1]["cache_control"], eph);
    assert_eq!(v["messages"][2]["content"][1]["cache_control"], eph);
    assert_eq!(v.to_string().matches("cache_control").count(), 3);
}

#[test]
fn sampling_obeys_the_claude_rules() {
    let (v, t) = translate_t(&json!({"input": "hi", "temperature": 1.7, "top_p": 0.9}));
    assert_eq!(v["temperature"], 1.0);
    assert!(v.get("top_p").is_none());
    assert!(
        t.dropped.iter().any(|d| d.starts_with("temperature:1.7")),
        "{:?}",
        t.dropped
    );
    assert!(
        t.dropped.iter().any(|d| d.starts_with("top_p")),
        "{:?}",
        t.dropped
    );
    let (v, t) = translate_t(&json!({"input": "hi", "top_p": 0.5}));
    assert_eq!(v["top_p"], 0.5);
    assert!(t.dropped.is_empty(), "{:?}", t.dropped);
    let v = translate(&json!({"input": "hi", "temperature": -1}));
    assert_eq!(v["temperature"], 0.0);
    check_request(&v).unwrap();
}

#[test]
fn calls_read_as_text_when_no_tool_is_left() {
    let (v, t) = translate_t(
        &json!({"tools": [{"type": "web_search"}], "tool_choice": "auto", "input": [
            {"role": "user", "content": "search"},
            {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{\"cmd\":\"ls\"}"},
            {"type": "function_call_output", "call_id": "c1", "output": "a.rs"},
            {"role": "user", "content": "next"}
        ]}),
    );
    check_request(&v).unwrap();
    assert!(v.get("tools").is_none() && v.get("tool_choice").is_none());
    let m = &v["messages"];
    assert!(
        m[1]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("shell")
    );
    assert!(
        m[2]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("a.rs")
    );
    assert!(t.dropped.iter().any(|d| d.starts_with("tool:web_search")));
}

#[test]
fn tool_choice_of_an_unknown_tool_is_auto() {
    let (v, t) = translate_t(
        &json!({"input": "hi", "tools": [{"type": "function", "name": "f"}],
        "tool_choice": {"type": "function", "name": "gone"}}),
    );
    assert_eq!(v["tool_choice"], json!({"type": "auto"}));
    assert!(
        t.dropped.contains(&"tool_choice:function:gone".to_owned()),
        "{:?}",
        t.dropped
    );
    let v = translate(
        &json!({"input": "hi", "tools": [{"type": "function", "name": "f"}],
        "tool_choice": {"type": "function", "name": "f"}}),
    );
    assert_eq!(v["tool_choice"], json!({"type": "tool", "name": "f"}));
}

#[test]
fn colliding_call_ids_stay_distinct() {
    let v = translate(
        &json!({"tools": [{"type": "function", "name": "f"}], "input": [
            {"role": "user", "content": "go"},
            {"type": "function_call", "call_id": "a.b", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "a:b", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "a:b", "output": "second"},
            {"type": "function_call_output", "call_id": "a.b", "output": "first"}
        ]}),
    );
    check_request(&v).unwrap();
    let m = &v["messages"];
    assert_eq!(m[1]["content"][0]["id"], "a_b");
    assert_eq!(m[1]["content"][1]["id"], "a_b_2");
    let results = m[2]["content"].as_array().unwrap();
    let answer =
        |id: &str| results.iter().find(|r| r["tool_use_id"] == id).unwrap()["content"].clone();
    assert_eq!(answer("a_b"), "first");
    assert_eq!(answer("a_b_2"), "second");
}

#[test]
fn instruction_items_and_custom_tool_grammar() {
    let v = translate(&json!({"input": "hi",
        "instructions": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Rule one."}]},
                         {"role": "system", "content": "Rule two."}],
        "tools": [{"type": "custom", "name": "apply_patch", "description": "Patch files.",
                   "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch hunk+ end_patch"}}]}));
    assert_eq!(v["system"][0]["text"], "Rule one.\n\nRule two.");
    let d = v["tools"][0]["description"].as_str().unwrap();
    assert!(d.starts_with("Patch files.\n\n"), "{d}");
    assert!(
        d.contains("lark grammar") && d.contains("start: begin_patch hunk+ end_patch"),
        "{d}"
    );
}

#[test]
fn no_blank_text_and_no_trailing_whitespace_at_the_end() {
    let v = translate(&json!({"instructions": "  \n", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": " \n\t"}, {"type": "input_text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "partial answer \n"}, {"type": "output_text", "text": "  "}]}
    ]}));
    check_request(&v).unwrap();
    assert!(v.get("system").is_none());
    assert_eq!(
        v["messages"][1]["content"],
        json!([{"type": "text", "text": "partial answer"}])
    );
    assert_eq!(v["messages"][0]["content"][0]["text"], "hi");
}

#[test]
fn bad_bodies_are_errors() {
    let o = RequestOptions::new("m");
    assert!(matches!(
        responses_to_messages(b"[1]", &o),
        Err(TranslateError::NotAnObject(_))
    ));
    assert!(matches!(
        responses_to_messages(b"{\"input\":3}", &o),
        Err(TranslateError::BadField { field: "input", .. })
    ));
    assert!(responses_to_messages(b"{\"inp", &o).is_err());
}

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
