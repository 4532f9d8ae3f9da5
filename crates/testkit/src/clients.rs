//! Real-sized client requests rebuilt from the captures in `shared/fixtures/clients/`, the way
//! Codex and Claude Code continue a conversation from a reply, and the reading of streamed
//! replies.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// `shared/fixtures/clients/` beside the nearest ancestor of this crate that has it (the
/// captures are kept beside the workspace, not in it).
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|d| d.join("shared/fixtures/clients/"))
        .find(|d| d.is_dir())
        .expect("shared/fixtures/clients/ beside the workspace")
}

/// Expands every `...[N chars]` marker of the captures back to a string of N characters.
fn expand(v: &mut Value) {
    match v {
        Value::String(s) => {
            if let Some(start) = s.rfind("...[")
                && let Some(n) = s[start + 4..]
                    .strip_suffix(" chars]")
                    .and_then(|n| n.parse::<usize>().ok())
            {
                let head = s[..start].to_owned();
                let mut out = head.clone();
                let filler = if head.is_empty() {
                    "lorem ipsum "
                } else {
                    &head
                };
                while out.chars().count() < n {
                    out.push(' ');
                    out.push_str(filler);
                }
                *s = out.chars().take(n).collect();
            }
        }
        Value::Array(a) => a.iter_mut().for_each(expand),
        Value::Object(o) => o.values_mut().for_each(expand),
        _ => {}
    }
}

/// A captured request with its long texts rebuilt, padded to the size the client really sent
/// (`content-length` of the capture) by growing `pad_pointer`'s string.
fn real_sized(file: &str, pad_pointer: &str) -> (Vec<(String, String)>, Value) {
    let text = std::fs::read_to_string(fixtures_dir().join(file)).expect("fixture");
    let capture: Value = serde_json::from_str(&text).expect("fixture JSON");
    let mut body = capture["body"].clone();
    expand(&mut body);
    let mut headers = Vec::new();
    let mut length = 0usize;
    for (k, v) in capture["headers"].as_object().expect("headers") {
        let v = v.as_str().unwrap_or_default().to_owned();
        match k.to_ascii_lowercase().as_str() {
            "content-length" => length = v.parse().unwrap_or(0),
            "host" | "connection" | "accept-encoding" => {}
            _ => headers.push((k.clone(), v)),
        }
    }
    let size = serde_json::to_vec(&body).unwrap().len();
    if size < length
        && let Some(Value::String(s)) = body.pointer_mut(pad_pointer)
    {
        let deficit = length - size;
        let words = "Keep edits minimal and explain each change. ";
        let mut pad = String::with_capacity(deficit + words.len());
        while pad.len() < deficit {
            pad.push_str(words);
        }
        pad.truncate(deficit);
        s.push_str(&pad);
    }
    (headers, body)
}

/// A Codex CLI first turn (store false, reasoning.encrypted_content, ~38 KB), for combo `model`.
pub fn codex_first_turn(model: &str, session: &str) -> (Vec<(String, String)>, Value) {
    let (mut headers, mut body) =
        real_sized("11-codex_exec-v1_responses.json", "/input/0/content/0/text");
    body["model"] = json!(model);
    body["prompt_cache_key"] = json!(session);
    for (k, v) in headers.iter_mut() {
        if matches!(
            k.as_str(),
            "session-id" | "thread-id" | "x-client-request-id"
        ) {
            *v = session.to_owned();
        }
    }
    if let Some(last) = body["input"].as_array_mut().and_then(|i| i.last_mut()) {
        last["content"][0]["text"] =
            json!("Add a --json flag to the CLI and cover it with a test.");
    }
    (headers, body)
}

/// A Claude Code first turn (adaptive thinking, clear_thinking edits, ~76 KB), for `model`.
pub fn claude_first_turn(model: &str, session: &str) -> (Vec<(String, String)>, Value) {
    let (mut headers, mut body) = real_sized(
        "13-claude_cli-v1_messages_beta_true.json",
        "/tools/0/description",
    );
    body["model"] = json!(model);
    for (k, v) in headers.iter_mut() {
        if k.eq_ignore_ascii_case("x-claude-code-session-id") {
            *v = session.to_owned();
        }
    }
    let user_id = json!({"device_id": "0".repeat(64), "account_uuid": "", "session_id": session});
    body["metadata"]["user_id"] = json!(user_id.to_string());
    (headers, body)
}

/// The Codex way of continuing: the reply's output items (reasoning with its
/// `encrypted_content`, the assistant message) are appended, then the next user message.
pub fn codex_next_turn(body: &mut Value, reply_sse: &[u8], prompt: &str) {
    let input = body["input"].as_array_mut().expect("input array");
    for event in sse_events(reply_sse) {
        if event["type"] == "response.output_item.done" {
            input.push(event["item"].clone());
        }
    }
    input.push(json!({"type": "message", "role": "user",
                      "content": [{"type": "input_text", "text": prompt}]}));
}

/// The Claude Code way of continuing: the streamed assistant content (signed thinking, text)
/// becomes an assistant message, then the next user message.
pub fn claude_next_turn(body: &mut Value, reply_sse: &[u8], prompt: &str) {
    let blocks = messages_blocks(&sse_events(reply_sse));
    let messages = body["messages"].as_array_mut().expect("messages array");
    messages.push(json!({"role": "assistant", "content": blocks}));
    messages.push(json!({"role": "user", "content": [{"type": "text", "text": prompt}]}));
}

/// The content blocks of a streamed Messages reply, rebuilt from its events as Claude Code
/// rebuilds them: text, thinking and its signature joined from their deltas, a `tool_use`
/// block's `input` parsed from its `input_json_delta` pieces.
pub fn messages_blocks(events: &[Value]) -> Vec<Value> {
    let mut blocks: Vec<Value> = Vec::new();
    let mut partial: Vec<String> = Vec::new();
    for event in events {
        match event["type"].as_str() {
            Some("content_block_start") => {
                blocks.push(event["content_block"].clone());
                partial.push(String::new());
            }
            Some("content_block_delta") => {
                let (Some(block), Some(json)) = (blocks.last_mut(), partial.last_mut()) else {
                    continue;
                };
                let d = &event["delta"];
                let (field, piece) = match d["type"].as_str() {
                    Some("text_delta") => ("text", &d["text"]),
                    Some("thinking_delta") => ("thinking", &d["thinking"]),
                    Some("signature_delta") => ("signature", &d["signature"]),
                    Some("input_json_delta") => {
                        json.push_str(d["partial_json"].as_str().unwrap_or(""));
                        continue;
                    }
                    _ => continue,
                };
                let joined = format!(
                    "{}{}",
                    block[field].as_str().unwrap_or(""),
                    piece.as_str().unwrap_or("")
                );
                block[field] = json!(joined);
            }
            _ => {}
        }
    }
    for (block, json) in blocks.iter_mut().zip(&partial) {
        if block["type"] == "tool_use" && !json.is_empty() {
            block["input"] = serde_json::from_str(json).unwrap_or(Value::Null);
        }
    }
    blocks
}

/// The body Codex sends to `/responses/compact`: the turn's `model`, `instructions`, `input`,
/// `tools`, `parallel_tool_calls`, `reasoning` and `text`, no `stream` or `store`.
pub fn compact_body(turn: &Value) -> Value {
    const KEEP: [&str; 7] = [
        "model",
        "instructions",
        "input",
        "tools",
        "parallel_tool_calls",
        "reasoning",
        "text",
    ];
    let fields = turn.as_object().into_iter().flatten();
    Value::Object(
        fields
            .filter(|(k, _)| KEEP.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    )
}

/// The headers of a plain JSON request (no credential, no session header).
pub fn json_headers() -> Vec<(String, String)> {
    vec![("content-type".to_owned(), "application/json".to_owned())]
}

/// The JSON data of every SSE event in `bytes`.
pub fn sse_events(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(bytes)
        .split("\n\n")
        .filter_map(|e| {
            let data = e.lines().find_map(|l| l.strip_prefix("data: "))?;
            serde_json::from_str(data).ok()
        })
        .collect()
}

/// Whether a streamed reply ended with its API's terminal success event.
pub fn completed(bytes: &[u8]) -> bool {
    sse_events(bytes)
        .last()
        .is_some_and(|e| e["type"] == "response.completed" || e["type"] == "message_stop")
}

/// Whether `needle` occurs in `hay`.
pub fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}
