//! Coding agents of the four API shapes, continuing tool loops the way the real clients do:
//! each reply is appended to the history, each tool call answered with its result, and the
//! whole history resent.
//!
//! | shape | request | how it continues |
//! |---|---|---|
//! | Codex CLI | `POST /v1/responses`, `store: false`, `include: ["reasoning.encrypted_content"]`, real-sized (capture 11) | the reply's `reasoning` and `function_call` items, then a `function_call_output` per call |
//! | Claude Code | `POST /v1/messages?beta=true`, adaptive thinking (or, with `claude-sonnet-4-5`, thinking with a budget), `clear_thinking` edits, real-sized (capture 13) | the assistant message (signed `thinking` first, text, `tool_use`), then a user turn of `tool_result`s |
//! | Chat agent | `POST /v1/chat/completions`, streamed, function tools | the assistant message with `tool_calls`, then a `tool` message per call |
//! | Gemini | `POST /v1beta/models/{model}:streamGenerateContent?alt=sse`, thoughts included | the model content (signatures re-encoded URL-safe, as `google-genai` does), then a user turn of `functionResponse`s |
//!
//! Every request names its session the client's way (Codex `session-id` and
//! `prompt_cache_key`, Claude Code `x-claude-code-session-id` and `metadata.user_id`, the
//! others `x-session-id`).

use bytes::Bytes;
use http::StatusCode;
use serde_json::{Value, json};

use crate::clients::{claude_first_turn, codex_first_turn, messages_blocks, sse_events};
use crate::harness::Harness;

/// The API shape of an agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Codex CLI (Responses, `store: false`).
    Codex,
    /// Claude Code's default: adaptive thinking (`claude-opus-4-8`).
    Claude,
    /// Claude Code with `--model claude-sonnet-4-5`: thinking with a budget, whose tool loops
    /// must start each assistant turn with a thinking block.
    ClaudeBudget,
    /// A Chat Completions agent with function tools.
    Chat,
    /// A Gemini agent with function calls.
    Gemini,
}

impl Shape {
    /// Every shape.
    pub const ALL: [Shape; 5] = [
        Shape::Codex,
        Shape::Claude,
        Shape::ClaudeBudget,
        Shape::Chat,
        Shape::Gemini,
    ];

    /// The shape's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Codex => "Codex (Responses, store false)",
            Shape::Claude => "Claude Code (Messages, adaptive thinking)",
            Shape::ClaudeBudget => "Claude Code (Messages, thinking budget)",
            Shape::Chat => "Chat agent (tools)",
            Shape::Gemini => "Gemini (function calls)",
        }
    }
}

/// What a reply did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// It called tools; their results are appended: the next request continues the loop.
    Called,
    /// It answered with text: the turn is over.
    Answered,
}

/// One conversation of one agent.
pub struct Agent {
    /// The agent's API shape.
    pub shape: Shape,
    /// The headers of every request (the session named the client's way).
    pub headers: Vec<(String, String)>,
    /// The history, resent whole each request.
    pub body: Value,
    /// The combo or `provider/model` asked for.
    pub model: String,
    /// Text every tool output carries (a test changes it to tell turns apart).
    pub note: String,
}

/// A long system prompt of about `bytes` bytes.
fn prompt(bytes: usize) -> String {
    let mut s = String::from("You are a coding agent working in the user's repository. ");
    while s.len() < bytes {
        s.push_str(
            "Read before you edit, keep changes small, run the tests, and explain each change. ",
        );
    }
    s
}

impl Agent {
    /// A conversation opening with `task`, in session `session`, asking for `model`.
    pub fn new(shape: Shape, session: &str, model: &str, task: &str) -> Self {
        let (headers, body) = match shape {
            Shape::Codex => {
                let (h, mut b) = codex_first_turn(model, session);
                if let Some(last) = b["input"].as_array_mut().and_then(|i| i.last_mut()) {
                    last["content"][0]["text"] = json!(task);
                }
                (h, b)
            }
            Shape::Claude | Shape::ClaudeBudget => {
                let (h, mut b) = claude_first_turn(model, session);
                b["messages"][0]["content"][1]["text"] = json!(task);
                if shape == Shape::ClaudeBudget {
                    // What Claude Code sends with `--model claude-sonnet-4-5`.
                    b["max_tokens"] = json!(32000);
                    b["thinking"] = json!({"type": "enabled", "budget_tokens": 31999});
                    if let Some(o) = b.as_object_mut() {
                        o.remove("output_config");
                    }
                }
                (h, b)
            }
            Shape::Chat => (
                session_headers(session, ("authorization", "Bearer sk-chat-agent")),
                json!({"model": model, "stream": true,
                       "stream_options": {"include_usage": true},
                       "messages": [{"role": "system", "content": prompt(16_000)},
                                    {"role": "user", "content": task}],
                       "tools": [tool("read_file", "Read a file of the repository."),
                                 tool("run_shell", "Run a shell command.")]}),
            ),
            Shape::Gemini => (
                session_headers(session, ("x-goog-api-key", "gemini-agent-key")),
                json!({"contents": [{"role": "user", "parts": [{"text": task}]}],
                       "systemInstruction": {"role": "user", "parts": [{"text": prompt(27_000)}]},
                       "tools": [{"functionDeclarations": [{
                           "name": "run_shell_command", "description": "Run a shell command.",
                           "parameters": {"type": "OBJECT", "required": ["command"],
                               "properties": {"command": {"type": "STRING"}}}}]}],
                       "generationConfig": {"thinkingConfig": {"include_thoughts": true}}}),
            ),
        };
        Self {
            shape,
            headers,
            body,
            model: model.to_owned(),
            note: String::new(),
        }
    }

    /// The gateway path of the agent's requests.
    pub fn path(&self) -> String {
        match self.shape {
            Shape::Codex => "/v1/responses".into(),
            Shape::Claude | Shape::ClaudeBudget => "/v1/messages?beta=true".into(),
            Shape::Chat => "/v1/chat/completions".into(),
            Shape::Gemini => format!(
                "/v1beta/models/{}:streamGenerateContent?alt=sse",
                self.model
            ),
        }
    }

    /// Sends the history to gateway `gw` of `h`.
    pub async fn send(&self, h: &Harness, gw: usize) -> (StatusCode, Bytes) {
        let (status, _, reply) = h.send(gw, &self.path(), &self.headers, &self.body).await;
        (status, reply)
    }

    /// Appends a complete reply (and the results of the tools it called) to the history;
    /// `None` when the reply did not complete.
    pub fn absorb(&mut self, reply: &[u8]) -> Option<Step> {
        let events = sse_events(reply);
        match self.shape {
            Shape::Codex => self.absorb_responses(&events),
            Shape::Claude | Shape::ClaudeBudget => self.absorb_messages(&events),
            Shape::Chat => self.absorb_chat(&events),
            Shape::Gemini => self.absorb_gemini(reply),
        }
    }

    /// The next plain user ask.
    pub fn ask(&mut self, prompt: &str) {
        let (key, entry) = match self.shape {
            Shape::Codex => (
                "input",
                json!({"type": "message", "role": "user",
                       "content": [{"type": "input_text", "text": prompt}]}),
            ),
            Shape::Claude | Shape::ClaudeBudget => (
                "messages",
                json!({"role": "user", "content": [{"type": "text", "text": prompt}]}),
            ),
            Shape::Chat => ("messages", json!({"role": "user", "content": prompt})),
            Shape::Gemini => (
                "contents",
                json!({"role": "user", "parts": [{"text": prompt}]}),
            ),
        };
        if let Some(entries) = self.body[key].as_array_mut() {
            entries.push(entry);
        }
    }

    /// Codex's remote compaction: the history becomes the compacted one the gateway returned
    /// from `/v1/responses/compact` (`false` when the reply is no compacted history).
    pub fn compacted(&mut self, reply: &[u8]) -> bool {
        let Ok(v) = serde_json::from_slice::<Value>(reply) else {
            return false;
        };
        let Some(output) = v["output"].as_array() else {
            return false;
        };
        if !output.iter().any(|i| i["type"] == "compaction") {
            return false;
        }
        self.body["input"] = Value::Array(output.clone());
        true
    }

    fn output(&self, call: &str) -> String {
        format!("$ {call}\nfn step() {{}} // {}", self.note)
    }

    fn absorb_responses(&mut self, events: &[Value]) -> Option<Step> {
        if events.last()?["type"] != "response.completed" {
            return None;
        }
        let items: Vec<Value> = events
            .iter()
            .filter(|e| e["type"] == "response.output_item.done")
            .map(|e| e["item"].clone())
            .collect();
        let outputs: Vec<Value> = items
            .iter()
            .filter(|i| i["type"] == "function_call")
            .map(|i| {
                json!({"type": "function_call_output",
                       "id": format!("fco_{}", i["call_id"].as_str().unwrap_or("")),
                       "call_id": i["call_id"],
                       "output": self.output(i["arguments"].as_str().unwrap_or(""))})
            })
            .collect();
        let input = self.body["input"].as_array_mut()?;
        input.extend(items);
        Some(step(&outputs, |o| input.extend(o)))
    }

    fn absorb_messages(&mut self, events: &[Value]) -> Option<Step> {
        if !events.iter().any(|e| e["type"] == "message_stop") {
            return None;
        }
        let blocks = messages_blocks(events);
        let results: Vec<Value> = blocks
            .iter()
            .filter(|b| b["type"] == "tool_use")
            .map(|b| {
                json!({"type": "tool_result", "tool_use_id": b["id"],
                       "content": self.output(&b["input"].to_string())})
            })
            .collect();
        let messages = self.body["messages"].as_array_mut()?;
        messages.push(json!({"role": "assistant", "content": blocks}));
        Some(step(&results, |r| {
            messages.push(json!({"role": "user", "content": r}));
        }))
    }

    fn absorb_chat(&mut self, events: &[Value]) -> Option<Step> {
        let finished = events
            .iter()
            .any(|e| e["choices"][0]["finish_reason"].is_string());
        if !finished {
            return None;
        }
        let mut text = String::new();
        let mut calls: Vec<Value> = Vec::new();
        for e in events {
            let delta = &e["choices"][0]["delta"];
            text.push_str(delta["content"].as_str().unwrap_or(""));
            for c in delta["tool_calls"].as_array().into_iter().flatten() {
                let i = c["index"].as_u64().unwrap_or(0) as usize;
                if calls.len() <= i {
                    calls.resize(
                        i + 1,
                        json!({"type": "function",
                        "function": {"name": "", "arguments": ""}}),
                    );
                }
                let call = &mut calls[i];
                if let Some(id) = c["id"].as_str() {
                    call["id"] = json!(id);
                }
                if let Some(name) = c["function"]["name"].as_str() {
                    call["function"]["name"] = json!(name);
                }
                let args = format!(
                    "{}{}",
                    call["function"]["arguments"].as_str().unwrap_or(""),
                    c["function"]["arguments"].as_str().unwrap_or("")
                );
                call["function"]["arguments"] = json!(args);
            }
        }
        let results: Vec<Value> = calls
            .iter()
            .map(|c| {
                json!({"role": "tool", "tool_call_id": c["id"],
                       "content": self.output(c["function"]["arguments"].as_str().unwrap_or(""))})
            })
            .collect();
        let messages = self.body["messages"].as_array_mut()?;
        if calls.is_empty() {
            messages.push(json!({"role": "assistant", "content": text}));
        } else {
            let content = if text.is_empty() {
                Value::Null
            } else {
                json!(text)
            };
            messages.push(json!({"role": "assistant", "content": content, "tool_calls": calls}));
        }
        Some(step(&results, |r| messages.extend(r)))
    }

    fn absorb_gemini(&mut self, reply: &[u8]) -> Option<Step> {
        let chunks: Vec<Value> = String::from_utf8_lossy(reply)
            .split("\r\n\r\n")
            .filter_map(|e| e.trim().strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect();
        if !chunks
            .last()?
            .pointer("/candidates/0/finishReason")
            .is_some_and(Value::is_string)
        {
            return None;
        }
        let mut parts: Vec<Value> = chunks
            .iter()
            .flat_map(|c| {
                c.pointer("/candidates/0/content/parts")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            })
            .collect();
        for part in &mut parts {
            // The SDK decodes the signature's bytes and encodes them again, URL-safe.
            if let Some(sig) = part.get_mut("thoughtSignature")
                && let Some(s) = sig.as_str()
            {
                *sig = json!(s.replace('+', "-").replace('/', "_"));
            }
        }
        let responses: Vec<Value> = parts
            .iter()
            .filter_map(|p| p.get("functionCall"))
            .map(|c| {
                json!({"functionResponse": {"name": c["name"],
                    "response": {"output": self.output(&c["args"].to_string())}}})
            })
            .collect();
        let contents = self.body["contents"].as_array_mut()?;
        contents.push(json!({"role": "model", "parts": parts}));
        Some(step(&responses, |r| {
            contents.push(json!({"role": "user", "parts": r}));
        }))
    }
}

/// `Called` after appending `results` with `push`, or `Answered` when there are none.
fn step(results: &[Value], push: impl FnOnce(Vec<Value>)) -> Step {
    if results.is_empty() {
        Step::Answered
    } else {
        push(results.to_vec());
        Step::Called
    }
}

fn tool(name: &str, description: &str) -> Value {
    json!({"type": "function", "function": {"name": name, "description": description,
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                       "required": ["command"]}}})
}

/// The headers of a client naming its `session`, with its `credential` (a request without
/// one is a tenant of its own).
fn session_headers(session: &str, credential: (&str, &str)) -> Vec<(String, String)> {
    vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        (credential.0.to_owned(), credential.1.to_owned()),
        ("x-session-id".to_owned(), session.to_owned()),
    ]
}
