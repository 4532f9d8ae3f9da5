//! The shape rules of the Anthropic Messages API, with the real API's error messages: no
//! unknown top-level field, the first conversation message from `user`, roles `user` or
//! `assistant`, every `tool_use` answered by a `tool_result` in the next turn, and every
//! `tool_result` first in its turn and answering a `tool_use` of the turn before; `tool_use`
//! ids unique, no empty or whitespace-only text block, and no trailing whitespace at the end
//! of a final assistant message (the API reads it as a prefill). (`max_tokens` is checked by
//! [`crate::rules`], the request-level rules by `message_params`.)
//!
//! Like the real API, consecutive messages of one role are one turn (the API combines them),
//! so the tool rules apply to the combined turns. `system` entries inside `messages` (Claude
//! Code's mid-conversation system beta) are not turns: the role rules skip them.

use serde_json::Value;

/// Top-level fields the Messages API takes (beta fields Claude Code sends included).
const KNOWN: [&str; 18] = [
    "model",
    "messages",
    "system",
    "max_tokens",
    "metadata",
    "stop_sequences",
    "stream",
    "temperature",
    "top_k",
    "top_p",
    "tools",
    "tool_choice",
    "thinking",
    "service_tier",
    "container",
    "mcp_servers",
    "context_management",
    "output_config",
];

fn kind(b: &Value) -> &str {
    b.get("type").and_then(Value::as_str).unwrap_or("")
}

fn ids<'a>(blocks: &'a [Value], of: &str, key: &str) -> Vec<&'a str> {
    blocks
        .iter()
        .filter(|b| kind(b) == of)
        .filter_map(|b| b.get(key).and_then(Value::as_str))
        .collect()
}

/// The message of the 400 `invalid_request_error` the Messages API answers to `body`, or
/// `None` when its shape is accepted.
///
/// ```
/// # // The module is private; its rules are reached through `rules::check`.
/// use context_relay_sim::rules::{Backend, check};
/// let body = serde_json::json!({"model": "claude", "max_tokens": 5, "input": "hi"});
/// let (status, e) = check(Backend::Api, "/v1/messages", &body).unwrap();
/// assert_eq!(status, 400);
/// assert!(e.contains("input: Extra inputs are not permitted"));
/// ```
pub(crate) fn check(body: &Value) -> Option<String> {
    let obj = body.as_object()?;
    if let Some(extra) = obj.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Some(format!("{extra}: Extra inputs are not permitted"));
    }
    let messages = obj.get("messages")?.as_array()?;
    let role = |m: &Value| {
        m.get("role")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let blocks = |m: &Value| -> Vec<Value> {
        match m.get("content") {
            Some(Value::Array(b)) => b.clone(),
            Some(Value::String(s)) => vec![serde_json::json!({"type": "text", "text": s})],
            _ => Vec::new(),
        }
    };
    // (index of the turn's first message, role, combined blocks)
    let mut turns: Vec<(usize, String, Vec<Value>)> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let r = role(m);
        if r == "system" {
            continue;
        }
        if r != "user" && r != "assistant" {
            return Some(format!(
                "messages.{i}.role: Input should be 'user' or 'assistant'"
            ));
        }
        match turns.last_mut() {
            Some(last) if last.1 == r => last.2.extend(blocks(m)),
            _ => turns.push((i, r, blocks(m))),
        }
    }
    if turns.first().is_some_and(|t| t.1 != "user") {
        return Some("messages: first message must use the \"user\" role".into());
    }
    if let Some(e) = text_and_ids(messages, &blocks) {
        return Some(e);
    }
    for (k, (i, _, own)) in turns.iter().enumerate() {
        let asked: Vec<&str> = k
            .checked_sub(1)
            .map_or_else(Vec::new, |p| ids(&turns[p].2, "tool_use", "id"));
        let mut other_seen = false;
        for (j, b) in own.iter().enumerate() {
            if kind(b) != "tool_result" {
                other_seen = true;
                continue;
            }
            let id = b.get("tool_use_id").and_then(Value::as_str).unwrap_or("");
            if other_seen || !asked.contains(&id) {
                return Some(format!(
                    "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                ));
            }
        }
        // The tool_use ids of this turn need answers in the next one.
        let asks = ids(own, "tool_use", "id");
        if !asks.is_empty() {
            let next = turns.get(k + 1).map(|t| t.2.as_slice()).unwrap_or_default();
            let answered = ids(next, "tool_result", "tool_use_id");
            let missing: Vec<&str> = asks.into_iter().filter(|a| !answered.contains(a)).collect();
            if !missing.is_empty() {
                return Some(format!(
                    "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                    missing.join(", ")
                ));
            }
        }
    }
    None
}

/// The block-level rules: unique `tool_use` ids, no blank text block, no trailing whitespace
/// at the end of a final assistant message.
fn text_and_ids(messages: &[Value], blocks: &dyn Fn(&Value) -> Vec<Value>) -> Option<String> {
    let mut seen = std::collections::HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        for (j, b) in blocks(m).iter().enumerate() {
            match kind(b) {
                "text" => {
                    let text = b.get("text").and_then(Value::as_str).unwrap_or("");
                    if text.is_empty() {
                        return Some("messages: text content blocks must be non-empty".into());
                    }
                    if text.trim().is_empty() {
                        return Some(
                            "messages: text content blocks must contain non-whitespace text".into(),
                        );
                    }
                }
                "tool_use" => {
                    let id = b.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
                    if !seen.insert(id) {
                        return Some(format!(
                            "messages.{i}.content.{j}: `tool_use` ids must be unique"
                        ));
                    }
                }
                _ => {}
            }
        }
    }
    let last = messages.last()?;
    let ends_blank = blocks(last).last().is_some_and(|b| {
        kind(b) == "text"
            && b.get("text")
                .and_then(Value::as_str)
                .is_some_and(|t| t.ends_with(char::is_whitespace))
    });
    (last.get("role").and_then(Value::as_str) == Some("assistant") && ends_blank)
        .then(|| "messages: final assistant content cannot end with trailing whitespace".into())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::rules::{Backend, check as rules};

    fn refused(body: serde_json::Value) -> String {
        let (status, e) = rules(Backend::Api, "/v1/messages", &body).expect("refused");
        assert_eq!(status, 400);
        let v: serde_json::Value = serde_json::from_str(&e).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        v["error"]["message"].as_str().unwrap().to_owned()
    }

    fn accepted(body: serde_json::Value) {
        assert!(
            rules(Backend::Api, "/v1/messages", &body).is_none(),
            "{body}"
        );
    }

    #[test]
    fn responses_fields_are_refused() {
        for f in [
            "input",
            "instructions",
            "reasoning",
            "store",
            "previous_response_id",
            "include",
        ] {
            let mut b = json!({"model": "claude", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]});
            b[f] = json!(true);
            assert_eq!(refused(b), format!("{f}: Extra inputs are not permitted"));
        }
    }

    #[test]
    fn roles() {
        let m = |msgs: serde_json::Value| json!({"model": "c", "max_tokens": 5, "messages": msgs});
        assert!(
            refused(m(json!([{"role": "assistant", "content": "x"}]))).contains("first message")
        );
        // Consecutive messages of one role are one turn, as the real API combines them.
        accepted(m(
            json!([{"role": "user", "content": "x"}, {"role": "user", "content": "y"}]),
        ));
        assert!(refused(m(json!([{"role": "tool", "content": "x"}]))).contains("Input should be"));
        accepted(m(
            json!([{"role": "user", "content": "x"}, {"role": "system", "content": "s"}, {"role": "assistant", "content": "y"}]),
        ));
    }

    #[test]
    fn tool_pairing() {
        // Tool blocks need tools (checked by `message_params`).
        let m = |msgs: serde_json::Value| {
            json!({"model": "c", "max_tokens": 5, "messages": msgs,
            "tools": [{"name": "f", "input_schema": {"type": "object"}}]})
        };
        let asked = json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]});
        let user = json!({"role": "user", "content": "go"});
        accepted(m(
            json!([user, asked, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}, {"type": "text", "text": "more"}]}]),
        ));
        let e = refused(m(
            json!([user, asked, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}, {"type": "tool_result", "tool_use_id": "t2"}]}]),
        ));
        assert!(e.contains("unexpected `tool_use_id`"), "{e}");
        let e = refused(m(
            json!([user, asked, {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "tool_result", "tool_use_id": "t1"}]}]),
        ));
        assert!(e.contains("unexpected `tool_use_id`"), "{e}");
        let e = refused(m(
            json!([user, asked, {"role": "user", "content": "no answer"}]),
        ));
        assert!(e.contains("without `tool_result`"), "{e}");
        let e = refused(m(json!([user, asked])));
        assert!(e.contains("without `tool_result`"), "{e}");
        let twice = json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}, {"type": "tool_use", "id": "t1", "name": "f", "input": {}}]});
        let e = refused(m(
            json!([user, twice, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]}]),
        ));
        assert_eq!(e, "messages.1.content.1: `tool_use` ids must be unique");
    }

    #[test]
    fn blank_text_and_trailing_whitespace() {
        let m = |msgs: serde_json::Value| json!({"model": "c", "max_tokens": 5, "messages": msgs});
        let e = refused(m(
            json!([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": " \n"}]}]),
        ));
        assert_eq!(
            e,
            "messages: text content blocks must contain non-whitespace text"
        );
        assert!(refused(m(json!([{"role": "user", "content": ""}]))).contains("non-empty"));
        let e = refused(m(
            json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure \n"}]),
        ));
        assert_eq!(
            e,
            "messages: final assistant content cannot end with trailing whitespace"
        );
        accepted(m(
            json!([{"role": "user", "content": "hi "}, {"role": "assistant", "content": "Sure"}]),
        ));
    }
}
