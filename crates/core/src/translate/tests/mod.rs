use proptest::prelude::*;
use serde_json::{Value, json};

use super::sequence::check;
use super::*;

mod answers;

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

/// A turn of tens of thousands of parallel calls (or of outputs all naming one id) is
/// translated in time linear in its items: a hostile client's 2.6 MB body took about two
/// minutes of CPU when each output scanned the results before it. The bound is far above the
/// linear cost (about a second unoptimised) and far below the quadratic one (minutes for
/// either half: the outputs of one id alone took 80 s at half this count).
#[test]
fn thousands_of_calls_translate_in_linear_time() {
    const N: usize = 40_000;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut input = vec![json!({"type": "message", "role": "user", "content": "go"})];
        for i in 0..N {
            input.push(json!({"type": "function_call", "call_id": format!("c{i}"), "name": "f", "arguments": "{}"}));
        }
        for i in 0..N {
            input.push(
                json!({"type": "function_call_output", "call_id": format!("c{i}"), "output": "ok"}),
            );
        }
        // Outputs of no call, all naming one id: each needs an id of its own.
        for _ in 0..N {
            input.push(json!({"type": "function_call_output", "call_id": "x", "output": "?"}));
        }
        let tools = json!([{"type": "function", "name": "f", "parameters": {"type": "object"}}]);
        let v = translate(&json!({"model": "m", "input": input, "tools": tools}));
        let _ = tx.send(v);
    });
    let v = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("translated in linear time");
    let messages = v["messages"].as_array().expect("messages");
    let results = messages[2]["content"].as_array().expect("results");
    let answered = results
        .iter()
        .filter(|b| b["type"] == "tool_result")
        .count();
    assert_eq!(answered, N, "every call answered by its own output");
    assert_eq!(check_request(&v), Ok(()));
}
