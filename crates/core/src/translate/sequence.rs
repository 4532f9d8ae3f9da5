//! The Messages conversation rules, enforced on a list of messages: the first message is
//! `user`, roles alternate, every `tool_use` is answered in the next message, and that
//! message's `tool_result` blocks come first and answer only those `tool_use` blocks; no
//! text block is empty or only whitespace, and a final assistant message does not end with
//! whitespace.

use std::collections::HashSet;

use serde_json::{Value, json};

/// A message author of the Messages API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    User,
    Assistant,
}

impl Role {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Assistant => "assistant",
        }
    }
}

/// One message under construction: its role and content blocks.
#[derive(Debug, Clone)]
pub(super) struct Msg {
    pub(super) role: Role,
    pub(super) blocks: Vec<Value>,
}

/// The text a model reads in place of a `tool_use` whose answer the history lacks.
const NO_RESULT: &str = "(no result of this call was recorded)";

/// A user message opening a conversation that started with the assistant or had no message.
const OPENING: &str = "(the conversation continues)";

fn block_type(b: &Value) -> &str {
    b.get("type").and_then(Value::as_str).unwrap_or("")
}

fn block_id<'a>(b: &'a Value, key: &str) -> &'a str {
    b.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The ids of the `tool_use` blocks among `blocks`.
fn tool_use_ids(blocks: &[Value]) -> Vec<String> {
    blocks
        .iter()
        .filter(|b| block_type(b) == "tool_use")
        .map(|b| block_id(b, "id").to_owned())
        .collect()
}

/// Content that is a string or a list of parts with `text`, as text (parts joined by lines);
/// any other JSON value as its JSON text.
pub(super) fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// Merges and repairs `msgs` into a sequence the Messages API accepts (see the module docs).
pub(super) fn normalize(msgs: Vec<Msg>) -> Vec<Msg> {
    let mut out: Vec<Msg> = Vec::with_capacity(msgs.len() + 1);
    for m in msgs {
        if m.blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.role == m.role => last.blocks.extend(m.blocks),
            _ => out.push(m),
        }
    }
    if out.first().is_none_or(|m| m.role != Role::User) {
        out.insert(
            0,
            Msg {
                role: Role::User,
                blocks: vec![json!({"type": "text", "text": OPENING})],
            },
        );
    }
    // Tool pairing, walking assistant turns and the user turn after each.
    let mut i = 0;
    while i < out.len() {
        if out[i].role == Role::Assistant {
            if !tool_use_ids(&out[i].blocks).is_empty() && i + 1 == out.len() {
                out.push(Msg {
                    role: Role::User,
                    blocks: Vec::new(),
                });
            }
            i += 1;
            continue;
        }
        // A user message: `asked` is what the assistant message before it asked.
        let prev_asked = match i.checked_sub(1) {
            Some(p) => tool_use_ids(&out[p].blocks),
            None => Vec::new(),
        };
        // Sets, not scans: a turn of thousands of parallel calls stays linear.
        let asked: HashSet<&str> = prev_asked.iter().map(String::as_str).collect();
        let mut answered: HashSet<String> = HashSet::new();
        let blocks = std::mem::take(&mut out[i].blocks);
        let mut results: Vec<Value> = Vec::new();
        let mut rest: Vec<Value> = Vec::new();
        for b in blocks {
            if block_type(&b) != "tool_result" {
                rest.push(b);
                continue;
            }
            let id = block_id(&b, "tool_use_id");
            if asked.contains(id) && !answered.contains(id) {
                answered.insert(id.to_owned());
                results.push(b);
            } else {
                rest.extend(result_as_text(&b));
            }
        }
        for id in &prev_asked {
            if answered.insert(id.clone()) {
                results.push(json!({
                    "type": "tool_result", "tool_use_id": id, "content": NO_RESULT, "is_error": true
                }));
            }
        }
        results.extend(rest);
        out[i].blocks = results;
        i += 1;
    }
    trim_final_assistant(&mut out);
    out
}

/// A `tool_result` block as user content the API takes without a `tool_use` before it: its
/// text after a line naming the call, then its images.
fn result_as_text(b: &Value) -> Vec<Value> {
    let id = block_id(b, "tool_use_id");
    let content = b.get("content");
    let text = content_text(content);
    let mut out = vec![
        json!({"type": "text", "text": format!("Output of the earlier tool call {id}:\n{text}")}),
    ];
    if let Some(Value::Array(blocks)) = content {
        out.extend(blocks.iter().filter(|b| block_type(b) == "image").cloned());
    }
    out
}

/// Rewrites the `tool_use` and `tool_result` blocks of `m` as text, for a request that
/// defines no tools (the API refuses such blocks then).
pub(super) fn calls_as_text(m: &mut Msg) {
    if !m
        .blocks
        .iter()
        .any(|b| matches!(block_type(b), "tool_use" | "tool_result"))
    {
        return;
    }
    let blocks = std::mem::take(&mut m.blocks);
    for b in blocks {
        match block_type(&b) {
            "tool_use" => {
                let input = b.get("input").cloned().unwrap_or(Value::Null);
                let text = format!(
                    "(called the tool {} as call {} with input {input})",
                    block_id(&b, "name"),
                    block_id(&b, "id")
                );
                m.blocks.push(json!({"type": "text", "text": text}));
            }
            "tool_result" => m.blocks.extend(result_as_text(&b)),
            _ => m.blocks.push(b),
        }
    }
}

/// Trims the trailing whitespace of a final assistant message, which the API refuses (it
/// reads such a message as a prefill of the answer).
fn trim_final_assistant(out: &mut Vec<Msg>) {
    let Some(last) = out.last_mut().filter(|m| m.role == Role::Assistant) else {
        return;
    };
    while let Some(b) = last.blocks.last_mut() {
        if block_type(b) != "text" {
            return;
        }
        let text = block_id(b, "text");
        let trimmed = text.trim_end();
        if trimmed.is_empty() {
            last.blocks.pop();
            continue;
        }
        if trimmed.len() != text.len() {
            b["text"] = Value::String(trimmed.to_owned());
        }
        return;
    }
    if last.blocks.is_empty() {
        out.pop();
    }
}

/// Whether `messages` (a Messages API `messages` array) obeys the rules of the module docs;
/// the first rule broken otherwise. Used by tests of the translation.
#[cfg(test)]
pub(super) fn check(messages: &[Value]) -> Result<(), String> {
    let role = |m: &Value| m["role"].as_str().unwrap_or("").to_owned();
    if messages.is_empty() {
        return Err("no message".into());
    }
    if role(&messages[0]) != "user" {
        return Err("the first message is not user".into());
    }
    let empty = Vec::new();
    let mut seen_ids = std::collections::HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        let blocks = m["content"].as_array().unwrap_or(&empty);
        if blocks.is_empty() {
            return Err(format!("message {i} is empty"));
        }
        if i > 0 && role(&messages[i - 1]) == role(m) {
            return Err(format!("message {i} repeats the role {}", role(m)));
        }
        for b in blocks {
            if block_type(b) == "text" && block_id(b, "text").trim().is_empty() {
                return Err(format!("message {i} has a blank text block"));
            }
            if block_type(b) == "tool_use" {
                let id = block_id(b, "id");
                if !seen_ids.insert(id) {
                    return Err(format!("message {i} repeats the tool_use id {id}"));
                }
            }
        }
        if role(m) == "assistant"
            && i + 1 == messages.len()
            && blocks.last().is_some_and(|b| {
                block_type(b) == "text" && block_id(b, "text").ends_with(char::is_whitespace)
            })
        {
            return Err("the final assistant message ends with whitespace".into());
        }
        let asked: HashSet<&str> = if i > 0 {
            messages[i - 1]["content"]
                .as_array()
                .unwrap_or(&empty)
                .iter()
                .filter(|b| block_type(b) == "tool_use")
                .map(|b| block_id(b, "id"))
                .collect()
        } else {
            HashSet::new()
        };
        let mut seen_other = false;
        let mut answered = HashSet::new();
        for b in blocks {
            if block_type(b) == "tool_result" {
                if seen_other {
                    return Err(format!("message {i}: a tool_result follows other content"));
                }
                let id = block_id(b, "tool_use_id");
                if !asked.contains(&id) {
                    return Err(format!("message {i}: tool_result {id} answers no tool_use"));
                }
                answered.insert(id);
            } else {
                seen_other = true;
            }
        }
        if role(m) == "user" && asked.iter().any(|a| !answered.contains(a)) {
            return Err(format!("message {i} leaves a tool_use unanswered"));
        }
        if role(m) == "assistant"
            && i + 1 == messages.len()
            && blocks.iter().any(|b| block_type(b) == "tool_use")
        {
            return Err("the last message asks a tool_use nobody answers".into());
        }
    }
    Ok(())
}
