//! Tool calls in the simulated provider's replies, in each API's shape (the Messages `tool_use`
//! block is rendered with the rest of a Messages reply in `reply`):
//!
//! - Responses: a `function_call` item (`id` `fc_…`, `call_id`, `name`, `arguments` as a JSON
//!   string, `status`); streamed as `response.output_item.added` (empty arguments),
//!   `response.function_call_arguments.delta` ×2, `response.function_call_arguments.done`,
//!   `response.output_item.done`;
//! - Chat Completions: an assistant message with `content: null` and `tool_calls`, finish
//!   reason `tool_calls`; streamed as a first `tool_calls` delta with the id and the name, then
//!   argument pieces;
//! - Gemini: a `functionCall` part with the step's `thoughtSignature` (Gemini 3 signs the
//!   first call of each step).

use serde_json::{Value, json};

use super::tool_loop::Call;

fn split(args: &str) -> (&str, &str) {
    let mut mid = args.len() / 2;
    while !args.is_char_boundary(mid) {
        mid -= 1;
    }
    args.split_at(mid)
}

/// The `function_call` item of a Responses reply, `done` or with empty arguments.
pub(super) fn responses_item(call: &Call, done: bool) -> Value {
    let (call_id, name, args) = call;
    let item_id = format!("fc_{}", call_id.trim_start_matches("call_"));
    let (arguments, status) = if done {
        (args.to_string(), "completed")
    } else {
        (String::new(), "in_progress")
    };
    json!({"type": "function_call", "id": item_id, "call_id": call_id, "name": name,
           "arguments": arguments, "status": status})
}

/// The stream events of a Responses `function_call` item at `index` (without
/// `sequence_number`).
pub(super) fn responses_events(call: &Call, index: usize) -> Vec<Value> {
    let done = responses_item(call, true);
    let item_id = done["id"].clone();
    let args = call.2.to_string();
    let (a, b) = split(&args);
    let delta = |d: &str| {
        json!({"type": "response.function_call_arguments.delta", "item_id": item_id,
               "output_index": index, "delta": d})
    };
    vec![
        json!({"type": "response.output_item.added", "output_index": index,
               "item": responses_item(call, false)}),
        delta(a),
        delta(b),
        json!({"type": "response.function_call_arguments.done", "item_id": item_id,
               "output_index": index, "arguments": args}),
        json!({"type": "response.output_item.done", "output_index": index, "item": done}),
    ]
}

/// The assistant message of a Chat Completions reply that calls a tool.
pub(super) fn chat_message(call: &Call) -> Value {
    let (id, name, args) = call;
    json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}
    ]})
}

/// The `delta`s of a streamed Chat Completions call, after the role delta.
pub(super) fn chat_deltas(call: &Call) -> Vec<Value> {
    let (id, name, args) = call;
    let args = args.to_string();
    let (a, b) = split(&args);
    let piece = |p: &str| json!({"tool_calls": [{"index": 0, "function": {"arguments": p}}]});
    vec![
        json!({"tool_calls": [{"index": 0, "id": id, "type": "function",
                               "function": {"name": name, "arguments": ""}}]}),
        piece(a),
        piece(b),
    ]
}

/// The `functionCall` part of a Gemini reply, signed with `signature`.
pub(super) fn gemini_part(call: &Call, signature: &str) -> Value {
    let (_, name, args) = call;
    json!({"functionCall": {"name": name, "args": args}, "thoughtSignature": signature})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call() -> Call {
        (
            "call_sim_3".into(),
            "exec_command".into(),
            json!({"cmd": "cat src/é.rs"}),
        )
    }

    #[test]
    fn streamed_arguments_join_to_the_whole() {
        let events = responses_events(&call(), 1);
        let joined: String = events
            .iter()
            .filter(|e| e["type"] == "response.function_call_arguments.delta")
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        assert_eq!(joined, call().2.to_string());
        assert_eq!(events[4]["item"]["id"], "fc_sim_3");
        assert_eq!(events[4]["item"]["call_id"], "call_sim_3");
        let chat: String = chat_deltas(&call())
            .iter()
            .map(|d| {
                d["tool_calls"][0]["function"]["arguments"]
                    .as_str()
                    .unwrap()
            })
            .collect();
        assert_eq!(chat, call().2.to_string());
    }
}
