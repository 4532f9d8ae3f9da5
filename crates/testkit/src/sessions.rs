//! Long, real-size sessions built from the real client captures in `shared/fixtures/clients/`:
//! the captures' shortened texts (`...[N chars]`) are grown back to their true sizes, and the
//! turns of a 40-turn coding session are added in each client's own shapes (core's tests and
//! its selection bench).

use serde_json::{Value, json};

use crate::clients::fixtures_dir;

/// The facts a good summary prompt must carry.
pub struct Facts {
    /// The task the session opened with ([`TASK`]).
    pub task: &'static str,
    /// The decisions the user stated along the way ([`DECISION_A`], [`DECISION_B`]).
    pub decisions: [&'static str; 2],
    /// The user's latest ask ([`LATEST`]).
    pub latest: &'static str,
    /// The assistant's last reply ([`REPLY`]).
    pub reply: &'static str,
    /// Files edited, oldest first (a file edited twice is here twice).
    pub edited: Vec<String>,
    /// Files named by the last ten tool calls.
    pub recent: Vec<String>,
}

/// The user's ask of the first turn.
pub const TASK: &str =
    "Port the config loader in crates/config from YAML to TOML and keep the public API unchanged.";
/// A decision the user states on turn 3.
pub const DECISION_A: &str =
    "Decision: use the toml crate with serde derive, not toml_edit; we never write files back.";
/// A decision the user states on turn 7.
pub const DECISION_B: &str =
    "Decision: keep YAML behind a `yaml` cargo feature for one more release, off by default.";
/// The user's ask of the last turn.
pub const LATEST: &str =
    "Run the whole test suite once more and fix the failing doc test in loader.rs.";
/// The assistant's last reply.
pub const REPLY: &str =
    "All 212 tests pass now; the doc test in loader.rs parses its example with toml::from_str.";

/// The facts of a session whose tool calls named `calls` (one list of files per call, oldest
/// first) and edited `edited`.
pub fn facts(edited: Vec<String>, calls: &[Vec<String>]) -> Facts {
    let recent = calls.iter().rev().take(10).flatten().cloned().collect();
    Facts {
        task: TASK,
        decisions: [DECISION_A, DECISION_B],
        latest: LATEST,
        reply: REPLY,
        edited,
        recent,
    }
}

/// A capture's body, relative to `shared/fixtures/clients/`, with its shortened texts grown
/// back to their true sizes.
pub fn fixture_body(name: &str) -> Value {
    let path = fixtures_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut v: Value = serde_json::from_str(&text).expect("fixture is JSON");
    let mut body = v["body"].take();
    grow(&mut body);
    body
}

/// The top-level keys of a capture's body in the order the client sent them (a
/// `serde_json::Value` sorts them).
pub fn key_order(name: &str) -> Vec<String> {
    let path = fixtures_dir().join(name);
    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let body = context_relay_core::json::find_member(&text, "body")
        .expect("capture is JSON")
        .expect("capture has a body");
    let members = context_relay_core::json::Members::root(&text[body.value]).expect("object");
    members
        .map(|key| key.expect("well-formed").key.into_owned())
        .collect()
}

/// `body` serialized with its top-level keys in `order` (keys not named there follow, sorted).
pub fn to_bytes_in_order(body: &Value, order: &[String]) -> Vec<u8> {
    let map = body.as_object().expect("an object body");
    let mut keys: Vec<&String> = order.iter().filter(|k| map.contains_key(*k)).collect();
    keys.extend(map.keys().filter(|k| !order.contains(k)));
    let members: Vec<String> = keys
        .iter()
        .map(|k| format!("{}:{}", Value::String((*k).clone()), map[*k]))
        .collect();
    format!("{{{}}}", members.join(",")).into_bytes()
}

/// Replaces every `…...[N chars]` string by its first part padded to N chars.
fn grow(v: &mut Value) {
    match v {
        Value::String(s) => {
            if let Some(start) = s.rfind("...[")
                && s.ends_with(" chars]")
                && let Ok(n) = s[start + 4..s.len() - 7].parse::<usize>()
            {
                let mut out = s[..start].to_owned();
                let filler = " Follow the repository conventions and explain changes briefly.";
                while out.chars().count() < n {
                    out.push_str(filler);
                }
                *s = out.chars().take(n).collect();
            }
        }
        Value::Array(items) => items.iter_mut().for_each(grow),
        Value::Object(map) => map.values_mut().for_each(grow),
        _ => {}
    }
}

/// The user's ask of turn `t` (1-based): the task, the decisions, the latest ask.
fn ask(t: usize, turns: usize) -> String {
    match t {
        1 => TASK.to_owned(),
        3 => DECISION_A.to_owned(),
        7 => DECISION_B.to_owned(),
        t if t == turns => LATEST.to_owned(),
        t => format!("Continue with step {t}: handle the next section of the loader."),
    }
}

/// The `k`th file edited in turn `t`: a realistic session comes back to the same files, here
/// 15 of them.
fn file(t: usize, k: usize) -> String {
    format!("crates/config/src/part_{:02}.rs", (t * 2 + k) % 15)
}

/// A file read (never edited) in turn `t`: one new file per turn.
fn read_file(t: usize) -> String {
    format!("crates/config/tests/case_{t:02}.rs")
}

fn tool_output(t: usize, k: usize) -> String {
    let line = format!("{t}:{k} let value = table.get(\"key\").and_then(|v| v.as_str());\n");
    line.repeat(90)
}

fn assistant_text(t: usize) -> String {
    format!(
        "Turn {t}: I updated the section, adjusted the error type and kept the public API. {}",
        "The loader now maps TOML tables onto the same structs. ".repeat(6)
    )
}

/// A Codex CLI session (Responses API, `store: false`): its real 27 KB developer prompt,
/// skills and permissions, `<environment_context>`, then per turn the ask, a reasoning item,
/// shell reads, two `apply_patch` edits and their outputs, and the assistant's message.
pub fn codex(turns: usize) -> (Value, Facts) {
    let mut body = fixture_body("codex-tool-roundtrip/02-codex_exec-v1_responses.json");
    let input = body["input"].as_array_mut().expect("input");
    // Keep the client context items, drop the captured one-turn exchange.
    input.truncate(3);
    let mut edited = Vec::new();
    let mut calls = Vec::new();
    for t in 1..=turns {
        input.push(json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": ask(t, turns)}]}));
        input.push(
            json!({"type": "reasoning", "summary": [], "encrypted_content": "gAAAA".repeat(200)}),
        );
        for k in 0..3 {
            let id = format!("c{t}_{k}");
            if k == 0 {
                calls.push(Vec::new());
                input.push(json!({"type": "function_call", "name": "exec_command", "call_id": id,
                    "arguments": json!({"cmd": format!("sed -n 1,200p {}", file(t, 1))}).to_string()}));
                input.push(json!({"type": "function_call_output", "call_id": id, "output": tool_output(t, k)}));
            } else {
                let f = file(t, k);
                edited.push(f.clone());
                calls.push(vec![f.clone()]);
                let patch = format!(
                    "*** Begin Patch\n*** Update File: {f}\n@@\n{}*** End Patch",
                    "-let v = yaml::from_str(s)?;\n+let v = toml::from_str(s)?;\n".repeat(25)
                );
                input.push(json!({"type": "custom_tool_call", "name": "apply_patch", "call_id": id, "input": patch}));
                input.push(json!({"type": "custom_tool_call_output", "call_id": id, "output": "Success. Updated the following files:\nM ".to_owned() + &f}));
            }
        }
        if t < turns {
            input.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": assistant_text(t)}]}));
        }
    }
    (body, facts(edited, &calls))
}

/// A Claude Code session (Messages API): its real system blocks and agent list, then per turn
/// a `<system-reminder>` and the ask, the assistant's text with `Read`, `Edit` and `Bash` tool
/// uses, and their results.
pub fn claude_code(turns: usize) -> (Value, Facts) {
    let mut body = fixture_body("claude-tool-roundtrip/02-claude_cli-v1_messages_beta_true.json");
    let reminder = body["messages"][0]["content"][0]["text"].clone();
    let agents = body["messages"][1].clone();
    let messages = body["messages"].as_array_mut().expect("messages");
    messages.clear();
    let mut edited = Vec::new();
    let mut calls = Vec::new();
    for t in 1..=turns {
        messages.push(json!({"role": "user", "content": [
            {"type": "text", "text": reminder},
            {"type": "text", "text": ask(t, turns)}
        ]}));
        if t == 1 {
            messages.push(agents.clone());
        }
        if t == turns {
            break;
        }
        let (a, b, r) = (file(t, 1), file(t, 2), read_file(t));
        edited.push(a.clone());
        edited.push(b.clone());
        calls.extend([
            vec![r.clone()],
            vec![a.clone()],
            vec![b.clone()],
            Vec::new(),
        ]);
        messages.push(json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Planning.", "signature": "sig".repeat(100)},
            {"type": "text", "text": assistant_text(t)},
            {"type": "tool_use", "id": format!("r{t}"), "name": "Read", "input": {"file_path": r}},
            {"type": "tool_use", "id": format!("e{t}"), "name": "Edit", "input": {"file_path": a, "old_string": "yaml::from_str", "new_string": "toml::from_str"}},
            {"type": "tool_use", "id": format!("w{t}"), "name": "Edit", "input": {"file_path": b, "old_string": "serde_yaml", "new_string": "toml"}},
            {"type": "tool_use", "id": format!("b{t}"), "name": "Bash", "input": {"command": "cargo test -p config", "description": "tests"}}
        ]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("r{t}"), "content": tool_output(t, 0)},
            {"type": "tool_result", "tool_use_id": format!("e{t}"), "content": "The file has been updated."},
            {"type": "tool_result", "tool_use_id": format!("w{t}"), "content": "The file has been updated."},
            {"type": "tool_result", "tool_use_id": format!("b{t}"), "content": tool_output(t, 3)}
        ]}));
    }
    (body, facts(edited, &calls))
}

/// A Chat Completions agent (OpenAI SDK shape): a long system prompt, then per turn the ask,
/// an assistant message with text and `write_file` / `run` tool calls, and the tool messages.
pub fn chat_agent(turns: usize) -> (Value, Facts) {
    let mut body = fixture_body("02-openai-v1_chat_completions.json");
    let system = format!(
        "You are a coding agent.{}",
        " Use the tools to read and edit files; keep answers short.".repeat(150)
    );
    let mut messages = vec![json!({"role": "system", "content": system})];
    let mut edited = Vec::new();
    let mut calls = Vec::new();
    for t in 1..=turns {
        messages.push(json!({"role": "user", "content": ask(t, turns)}));
        if t == turns {
            break;
        }
        let (a, b, r) = (file(t, 1), file(t, 2), read_file(t));
        edited.push(a.clone());
        edited.push(b.clone());
        calls.extend([
            vec![r.clone()],
            vec![a.clone()],
            vec![b.clone()],
            Vec::new(),
        ]);
        messages.push(json!({"role": "assistant", "content": assistant_text(t), "tool_calls": [
            {"id": format!("q{t}"), "type": "function", "function": {"name": "read_file", "arguments": json!({"path": r}).to_string()}},
            {"id": format!("w{t}"), "type": "function", "function": {"name": "write_file", "arguments": json!({"path": a, "content": tool_output(t, 1)}).to_string()}},
            {"id": format!("v{t}"), "type": "function", "function": {"name": "write_file", "arguments": json!({"path": b, "content": tool_output(t, 2)}).to_string()}},
            {"id": format!("r{t}"), "type": "function", "function": {"name": "run", "arguments": "{\"cmd\":\"cargo test\"}"}}
        ]}));
        for id in [format!("q{t}"), format!("w{t}"), format!("v{t}")] {
            messages.push(json!({"role": "tool", "tool_call_id": id, "content": "written"}));
        }
        messages.push(
            json!({"role": "tool", "tool_call_id": format!("r{t}"), "content": tool_output(t, 3)}),
        );
    }
    body["messages"] = Value::Array(messages);
    (body, facts(edited, &calls))
}
