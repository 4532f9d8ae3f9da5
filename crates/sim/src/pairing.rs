//! The pairing of tool calls and tool results the Responses, Chat Completions and Gemini APIs
//! enforce, with the real APIs' 400s (the Messages API's own rules are in `messages`):
//!
//! | API | rule | the real answer |
//! |---|---|---|
//! | Responses | every `function_call_output` answers an earlier `function_call` of the input, or of the stored response chain a `previous_response_id` names (the double keeps no stored items: with a `previous_response_id`, which `bound` checks the account stored, an output answering no call of the input is taken as answering one of the chain) | `No tool call found for function call output with call_id {id}.` (`param: "input"`) |
//! | Responses | every `function_call` of the input has its `function_call_output` | `No tool output found for function call {id}.` |
//! | Chat | a `tool` message answers a `tool_calls` id of the assistant message before it | `Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.` (`param: "messages.[i].role"`) |
//! | Chat | an assistant message's `tool_calls` are all answered by the `tool` messages after it | `An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {ids}` |
//! | Gemini | a model turn with `functionCall` parts follows a user turn or a function response turn | `Please ensure that function call turn comes immediately after a user turn or after a function response turn.` |
//! | Gemini | a turn of `functionResponse` parts follows a function call turn, with as many parts | `Please ensure that function response turn comes immediately after a function call turn.` / `Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.` |
//!
//! A relay that drops or reorders history items breaks these pairs: the double refuses what the
//! real provider refuses.

use serde_json::{Value, json};

fn kind(v: &Value) -> &str {
    v.get("type").and_then(Value::as_str).unwrap_or("")
}

fn role(v: &Value) -> &str {
    v.get("role").and_then(Value::as_str).unwrap_or("")
}

fn call_id(v: &Value) -> &str {
    v.get("call_id").and_then(Value::as_str).unwrap_or("")
}

/// An OpenAI `invalid_request_error` without a code.
fn openai(message: String, param: String) -> Value {
    json!({"error": {"message": message, "type": "invalid_request_error", "param": param,
                     "code": null}})
}

/// The 400 body the Responses API answers to unpaired calls in `request`.
pub(super) fn responses(request: &Value) -> Option<Value> {
    let items = request.get("input").and_then(Value::as_array)?;
    let chained = request
        .get("previous_response_id")
        .is_some_and(Value::is_string);
    for (i, item) in items.iter().enumerate() {
        match kind(item) {
            "function_call_output" => {
                let id = call_id(item);
                let called = chained
                    || items[..i]
                        .iter()
                        .any(|c| kind(c) == "function_call" && call_id(c) == id);
                if !called {
                    return Some(openai(
                        format!("No tool call found for function call output with call_id {id}."),
                        "input".into(),
                    ));
                }
            }
            "function_call" => {
                let id = call_id(item);
                let answered = items[i + 1..]
                    .iter()
                    .any(|o| kind(o) == "function_call_output" && call_id(o) == id);
                if !answered {
                    return Some(openai(
                        format!("No tool output found for function call {id}."),
                        "input".into(),
                    ));
                }
            }
            _ => {}
        }
    }
    None
}

/// The 400 body the Chat Completions API answers to unpaired calls in `request`.
pub(super) fn chat(request: &Value) -> Option<Value> {
    let messages = request.get("messages").and_then(Value::as_array)?;
    // The ids of the last assistant message's calls not answered yet, and its index.
    let mut pending: Option<(usize, Vec<&str>)> = None;
    for (i, m) in messages.iter().enumerate() {
        if role(m) == "tool" {
            let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
            match pending.as_mut() {
                Some((_, ids)) if ids.contains(&id) => ids.retain(|p| *p != id),
                _ => {
                    return Some(openai(
                        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.".into(),
                        format!("messages.[{i}].role"),
                    ));
                }
            }
            continue;
        }
        if let Some((at, ids)) = pending.take()
            && !ids.is_empty()
        {
            return Some(unanswered(at, &ids));
        }
        if role(m) == "assistant"
            && let Some(calls) = m.get("tool_calls").and_then(Value::as_array)
            && !calls.is_empty()
        {
            let ids = calls
                .iter()
                .map(|c| c.get("id").and_then(Value::as_str).unwrap_or(""))
                .collect();
            pending = Some((i, ids));
        }
    }
    match pending {
        Some((at, ids)) if !ids.is_empty() => Some(unanswered(at, &ids)),
        _ => None,
    }
}

fn unanswered(at: usize, ids: &[&str]) -> Value {
    openai(
        format!(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
            ids.join(", ")
        ),
        format!("messages.[{at}].role"),
    )
}

/// The message of the 400 `INVALID_ARGUMENT` the Gemini API answers to unpaired calls in
/// `request`.
pub(super) fn gemini(request: &Value) -> Option<&'static str> {
    let contents = request.get("contents").and_then(Value::as_array)?;
    let count = |c: &Value, key: &str| {
        c.get("parts")
            .and_then(Value::as_array)
            .map_or(0, |ps| ps.iter().filter(|p| p.get(key).is_some()).count())
    };
    for (i, c) in contents.iter().enumerate() {
        let previous = i.checked_sub(1).map(|p| &contents[p]);
        if role(c) == "model" && count(c, "functionCall") > 0 {
            let after_user = previous.is_some_and(|p| role(p) == "user");
            if !after_user {
                return Some(
                    "Please ensure that function call turn comes immediately after a user turn or after a function response turn.",
                );
            }
        }
        let responses = count(c, "functionResponse");
        if role(c) == "user" && responses > 0 {
            let calls = previous
                .filter(|p| role(p) == "model")
                .map_or(0, |p| count(p, "functionCall"));
            if calls == 0 {
                return Some(
                    "Please ensure that function response turn comes immediately after a function call turn.",
                );
            }
            if calls != responses {
                return Some(
                    "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.",
                );
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_pairs() {
        let call =
            json!({"type": "function_call", "call_id": "c1", "name": "x", "arguments": "{}"});
        let output = json!({"type": "function_call_output", "call_id": "c1", "output": "ok"});
        assert_eq!(
            responses(&json!({"input": [call.clone(), output.clone()]})),
            None
        );
        let e = responses(&json!({"input": [output.clone()]})).unwrap();
        assert_eq!(
            e,
            json!({"error": {"message": "No tool call found for function call output with call_id c1.",
                             "type": "invalid_request_error", "param": "input", "code": null}})
        );
        // Chained: the call may be in the stored response (whose owner `bound` checks).
        assert_eq!(
            responses(&json!({"previous_response_id": "resp_1", "input": [output.clone()]})),
            None
        );
        let e = responses(&json!({"input": [call]})).unwrap();
        assert_eq!(
            e["error"]["message"],
            "No tool output found for function call c1."
        );
    }

    #[test]
    fn chat_pairs() {
        let asks = json!({"role": "user", "content": "a"});
        let calls = json!({"role": "assistant", "content": null,
                           "tool_calls": [{"id": "c1"}, {"id": "c2"}]});
        let r1 = json!({"role": "tool", "tool_call_id": "c1", "content": "x"});
        let r2 = json!({"role": "tool", "tool_call_id": "c2", "content": "y"});
        let ok = json!({"messages": [asks, calls, r1, r2, asks]});
        assert_eq!(chat(&ok), None);
        let e = chat(&json!({"messages": [asks, calls, r1, asks]})).unwrap();
        assert_eq!(
            e["error"]["message"],
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: c2"
        );
        assert_eq!(e["error"]["param"], "messages.[1].role");
        let e = chat(&json!({"messages": [asks, r1]})).unwrap();
        assert_eq!(e["error"]["param"], "messages.[1].role");
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("Invalid parameter: messages with role 'tool'")
        );
    }

    #[test]
    fn gemini_pairs() {
        let ask = json!({"role": "user", "parts": [{"text": "a"}]});
        let call = json!({"role": "model", "parts": [{"functionCall": {"name": "f"}}]});
        let answer = json!({"role": "user", "parts": [{"functionResponse": {"name": "f"}}]});
        assert_eq!(
            gemini(&json!({"contents": [ask, call, answer, call, answer]})),
            None
        );
        assert!(
            gemini(&json!({"contents": [call, answer]}))
                .unwrap()
                .starts_with("Please ensure that function call turn")
        );
        assert!(
            gemini(&json!({"contents": [ask, answer]}))
                .unwrap()
                .starts_with("Please ensure that function response turn")
        );
        let two = json!({"role": "user", "parts": [{"functionResponse": {"name": "f"}},
                                                   {"functionResponse": {"name": "f"}}]});
        assert!(
            gemini(&json!({"contents": [ask, call, two]}))
                .unwrap()
                .contains("number of function response parts")
        );
    }
}
