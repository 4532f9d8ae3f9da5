//! Tool loops, faults and summaries of the simulated provider, driven through its handler the
//! way clients drive the real APIs.

use axum::body::Body;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};

use crate::{SimFault, SimProvider, SummaryRequest};

async fn sim(calls: usize) -> SimProvider {
    SimProvider::builder()
        .account("a", "key-a")
        .account("b", "key-b")
        .tool_loop(calls)
        .summary_reply_with(
            |body| body.windows(7).any(|w| w == b"SUMMARY"),
            |r: &SummaryRequest<'_>| format!("{} read {}", r.account, r.compacted.join("|")),
        )
        .start()
        .await
        .unwrap()
}

async fn post(sim: &SimProvider, path: &str, key: &str, body: &Value) -> (StatusCode, Bytes) {
    let req = Request::post(path)
        .header("authorization", format!("Bearer {key}"))
        .header("x-api-key", key)
        .header("x-goog-api-key", key)
        .body(Body::from(body.to_string()))
        .unwrap();
    let res = crate::handle(sim.state.clone(), req).await;
    let status = res.status();
    (status, res.into_body().collect().await.unwrap().to_bytes())
}

fn events(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(bytes)
        .split("\n\n")
        .flat_map(|e| e.split("\r\n\r\n"))
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

#[tokio::test]
async fn responses_loop_with_reasoning_then_text() {
    let sim = sim(2).await;
    let mut body = json!({"model": "gpt-5.5", "stream": true, "store": false,
        "include": ["reasoning.encrypted_content"],
        "tools": [{"type": "function", "name": "exec_command"}],
        "input": [{"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": "go"}]}]});
    for step in 1..=3 {
        let (status, reply) = post(&sim, "/v1/responses", "key-a", &body).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
        let items: Vec<Value> = events(&reply)
            .into_iter()
            .filter(|e| e["type"] == "response.output_item.done")
            .map(|e| e["item"].clone())
            .collect();
        assert_eq!(items[0]["type"], "reasoning", "reasoning first");
        let input = body["input"].as_array_mut().unwrap();
        input.extend(items.iter().cloned());
        if step < 3 {
            assert_eq!(items[1]["type"], "function_call");
            assert_eq!(
                items[1]["arguments"],
                json!({"cmd": format!("cat src/step_{step}.rs")}).to_string()
            );
            input.push(json!({"type": "function_call_output",
                              "call_id": items[1]["call_id"], "output": "fn main() {}"}));
        } else {
            assert_eq!(items[1]["type"], "message", "the loop ends with text");
        }
    }
    // A result without its call is refused as the API refuses it.
    let mut broken = body.clone();
    let input = broken["input"].as_array_mut().unwrap();
    let at = input
        .iter()
        .position(|i| i["type"] == "function_call")
        .unwrap();
    input.remove(at);
    let (status, reply) = post(&sim, "/v1/responses", "key-a", &broken).await;
    assert_eq!(status, 400);
    let v: Value = serde_json::from_slice(&reply).unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("No tool call found for function call output with call_id call_sim_")
    );
    assert_eq!(v["error"]["param"], "input");
    assert_eq!(
        sim.requests().last().unwrap().rejected.as_deref(),
        Some("tool_pairing")
    );
}

#[tokio::test]
async fn messages_loop_keeps_the_thinking_rule_at_every_step() {
    let sim = sim(2).await;
    // Budgeted thinking: the API requires the block at every step (adaptive thinking may
    // answer a step without thinking).
    let mut body = json!({"model": "claude-sonnet-4-5", "max_tokens": 2048, "stream": false,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "tools": [{"name": "Agent", "input_schema": {}}, {"name": "Bash", "input_schema": {}}],
        "messages": [{"role": "user", "content": "go"}]});
    for step in 1..=2 {
        let (status, reply) = post(&sim, "/v1/messages", "key-a", &body).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
        let v: Value = serde_json::from_slice(&reply).unwrap();
        assert_eq!(v["content"][0]["type"], "thinking", "step {step}");
        assert_eq!(v["stop_reason"], "tool_use");
        let call = v["content"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(call["name"], "Bash");
        let messages = body["messages"].as_array_mut().unwrap();
        messages.push(json!({"role": "assistant", "content": v["content"]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call["id"], "content": "ok"}]}));
    }
    // The second step's answer without its thinking block: refused, although the first
    // step's thinking is there.
    let mut stripped = body.clone();
    let messages = stripped["messages"].as_array_mut().unwrap();
    let last_assistant = messages.len() - 2;
    messages[last_assistant]["content"]
        .as_array_mut()
        .unwrap()
        .remove(0);
    let (status, reply) = post(&sim, "/v1/messages", "key-a", &stripped).await;
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&reply).contains(
        "When `thinking` is enabled, a final `assistant` message must start with a thinking block"
    ));
    // Whole, the loop ends with text on the next request.
    let (status, reply) = post(&sim, "/v1/messages", "key-a", &body).await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_slice(&reply).unwrap();
    assert_eq!(v["stop_reason"], "end_turn");
}

#[tokio::test]
async fn chat_loop_and_pairing() {
    let sim = sim(1).await;
    let mut body = json!({"model": "gpt-4.1", "stream": true,
        "tools": [{"type": "function", "function": {"name": "read_file", "parameters": {}}}],
        "messages": [{"role": "user", "content": "go"}]});
    let (status, reply) = post(&sim, "/v1/chat/completions", "key-a", &body).await;
    assert_eq!(status, 200);
    let chunks = events(&reply);
    let id = chunks
        .iter()
        .find_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["id"].as_str())
        .unwrap()
        .to_owned();
    let args: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(args, json!({"command": "cat src/step_1.rs"}).to_string());
    assert!(
        chunks
            .iter()
            .any(|c| c["choices"][0]["finish_reason"] == "tool_calls")
    );
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": id, "type": "function", "function": {"name": "read_file", "arguments": args}}]}));
    // Asked again before the result: refused.
    let mut early = body.clone();
    early["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "user", "content": "and?"}));
    let (status, _) = post(&sim, "/v1/chat/completions", "key-a", &early).await;
    assert_eq!(status, 400);
    body["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "tool", "tool_call_id": id, "content": "fn main() {}"}));
    let (status, reply) = post(&sim, "/v1/chat/completions", "key-a", &body).await;
    assert_eq!(status, 200);
    assert!(
        events(&reply)
            .iter()
            .any(|c| c["choices"][0]["finish_reason"] == "stop")
    );
}

#[tokio::test]
async fn gemini_loop_signs_every_step() {
    let sim = sim(2).await;
    let path = "/v1beta/models/gemini-3-pro:generateContent";
    let mut body = json!({
        "tools": [{"functionDeclarations": [{"name": "run_shell_command"}]}],
        "contents": [{"role": "user", "parts": [{"text": "go"}]}]});
    for step in 1..=2 {
        let (status, reply) = post(&sim, path, "key-a", &body).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
        let v: Value = serde_json::from_slice(&reply).unwrap();
        let content = v["candidates"][0]["content"].clone();
        let part = &content["parts"][0];
        assert_eq!(part["functionCall"]["name"], "run_shell_command", "{v}");
        assert!(part["thoughtSignature"].is_string(), "step {step}");
        let contents = body["contents"].as_array_mut().unwrap();
        contents.push(content);
        contents.push(json!({"role": "user", "parts": [{"functionResponse": {
            "name": "run_shell_command", "response": {"output": "ok"}}}]}));
    }
    // Another account cannot read the signatures; without them, the current turn's calls
    // are refused on a Gemini 3 model.
    let (status, reply) = post(&sim, path, "key-b", &body).await;
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&reply).contains("Corrupted thought signature."));
    let mut unsigned = body.clone();
    for c in unsigned["contents"].as_array_mut().unwrap() {
        for p in c["parts"].as_array_mut().unwrap() {
            p.as_object_mut().unwrap().remove("thoughtSignature");
        }
    }
    let (status, reply) = post(&sim, path, "key-b", &unsigned).await;
    assert_eq!(status, 400);
    assert!(
        String::from_utf8_lossy(&reply).contains("Function call is missing a thought_signature")
    );
    let (status, reply) = post(&sim, path, "key-a", &body).await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_slice(&reply).unwrap();
    assert!(v["candidates"][0]["content"]["parts"][0]["text"].is_string());
}

#[tokio::test]
async fn overloaded_in_each_api_s_words() {
    let sim = sim(0).await;
    let cases = [
        (
            "/v1/responses",
            json!({"model": "m", "input": "x"}),
            503,
            "server_error",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": []}),
            503,
            "server_error",
        ),
        (
            "/v1/messages",
            json!({"model": "m", "max_tokens": 5,
            "messages": [{"role": "user", "content": "x"}]}),
            529,
            "overloaded_error",
        ),
        (
            "/v1/models/m:generateContent",
            json!({"contents": [{"role": "user",
            "parts": [{"text": "x"}]}]}),
            503,
            "UNAVAILABLE",
        ),
    ];
    for (path, body, status, words) in cases {
        sim.fail_next(Some("a"), SimFault::Overloaded);
        let (got, reply) = post(&sim, path, "key-a", &body).await;
        assert_eq!(got.as_u16(), status, "{path}");
        assert!(String::from_utf8_lossy(&reply).contains(words), "{path}");
        assert_eq!(
            sim.requests().last().unwrap().rejected.as_deref(),
            Some("overloaded")
        );
    }
    // A used-up account's 429 is recorded too.
    sim.set_used("a", 100.0);
    let (status, _) = post(
        &sim,
        "/v1/responses",
        "key-a",
        &json!({"model": "m", "input": "x"}),
    )
    .await;
    assert_eq!(status, 429);
    assert_eq!(
        sim.requests().last().unwrap().rejected.as_deref(),
        Some("usage_limit_reached")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnect_closes_the_connection_without_a_response() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sim = sim(0).await;
    sim.fail_next(Some("a"), SimFault::Disconnect);
    let body = r#"{"model":"m","input":"x"}"#;
    let request = format!(
        "POST /v1/responses HTTP/1.1\r\nhost: sim\r\nauthorization: Bearer key-a\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut tcp = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tcp.read_to_end(&mut got),
    )
    .await
    .expect("the connection is closed");
    assert!(read.is_ok() || got.is_empty(), "{read:?}");
    assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
    assert_eq!(
        sim.requests().last().unwrap().rejected.as_deref(),
        Some("disconnect")
    );
    // The next request is served.
    let mut tcp = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut head = [0u8; 12];
    tcp.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
}

#[tokio::test]
async fn a_summary_reads_the_compaction_of_its_own_account_only() {
    let sim = sim(0).await;
    let history = json!([
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "FACT-42 in src/a.rs"},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Found it."}]}]);
    let (status, reply) = post(
        &sim,
        "/v1/responses/compact",
        "key-a",
        &json!({"model": "m", "input": history}),
    )
    .await;
    assert_eq!(status, 200);
    let compacted: Value = serde_json::from_slice(&reply).unwrap();
    let mut input = compacted["output"].as_array().unwrap().clone();
    assert_eq!(input.len(), 2, "the user message and the compaction item");
    input.push(json!({"type": "message", "role": "user",
                      "content": [{"type": "input_text", "text": "SUMMARY please"}]}));
    let summary = json!({"model": "m", "input": input});
    let (_, reply) = post(&sim, "/v1/responses", "key-a", &summary).await;
    let v: Value = serde_json::from_slice(&reply).unwrap();
    let text = v["output"][0]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("a read "), "{text}");
    assert!(
        text.contains("FACT-42 in src/a.rs") && text.contains("Found it."),
        "{text}"
    );
    assert!(
        !text.contains("go\n"),
        "user messages stay in the compacted history: {text}"
    );
    // Another account cannot read it (and refuses it).
    let (status, _) = post(&sim, "/v1/responses", "key-b", &summary).await;
    assert_eq!(status, 400);
}
