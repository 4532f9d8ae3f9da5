//! Tool loops ([`SimBuilder::tool_loop`]): the model answers each plain user ask by calling a
//! tool a configured number of times, one call per answer, and only then answers with text, on
//! every API. The client returns each call's result and asks again, as coding clients do:
//!
//! | API | the model calls | the client answers with |
//! |---|---|---|
//! | Responses | a `function_call` item (after the reasoning item, when one is minted) | a `function_call_output` item |
//! | Chat Completions | `tool_calls` on the assistant message | `tool` messages |
//! | Messages | a `tool_use` block (after the signed thinking block, when thinking is on) | a user turn of `tool_result` blocks |
//! | Gemini | a `functionCall` part carrying this account's `thoughtSignature` | a user turn of `functionResponse` parts |
//!
//! The position in the loop is read from the request, as the real model reads its context:
//! the number of tool-result steps after the last plain user ask (a user entry that is not
//! only tool results). The tool called is the first offered of the usual shell tools
//! (`exec_command`, `shell`, `Bash`, `run_shell_command`), else the first offered tool.

use serde_json::{Value, json};

use super::{Api, SimBuilder};

/// Shell tools of real clients, preferred when offered: Codex CLI, its older name, Claude
/// Code, Gemini CLI.
const SHELL_TOOLS: [&str; 4] = ["exec_command", "shell", "Bash", "run_shell_command"];

impl SimBuilder {
    /// Answers each plain user ask with `calls` tool calls (one per answer) before the text
    /// answer, on every API (see the module docs of `tool_loop`). `0` (the default) calls no
    /// tool; [`tool_call`](Self::tool_call) still names the tool to call when offered.
    pub fn tool_loop(mut self, calls: usize) -> Self {
        self.tool_loop = calls;
        self
    }
}

/// The API whose loop position is read.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum LoopApi {
    Chat,
    Responses,
    Messages,
    Gemini,
}

impl From<Api> for LoopApi {
    fn from(api: Api) -> Self {
        match api {
            Api::Chat => Self::Chat,
            Api::Responses => Self::Responses,
            Api::Messages => Self::Messages,
        }
    }
}

/// One tool call of an answer: its id (`call_id`, `tool_use` id), the tool, its arguments.
pub(super) type Call = (String, String, Value);

fn kind(v: &Value) -> &str {
    v.get("type").and_then(Value::as_str).unwrap_or("")
}

fn role(v: &Value) -> &str {
    v.get("role").and_then(Value::as_str).unwrap_or("")
}

/// Whether a Messages user turn or a Gemini user content carries only tool results.
fn only_results(parts: Option<&Vec<Value>>, is_result: impl Fn(&Value) -> bool) -> bool {
    parts.is_some_and(|p| !p.is_empty() && p.iter().any(&is_result))
}

/// The number of tool-result steps after the last plain user ask of `request`.
pub(super) fn steps_since_ask(api: LoopApi, request: &Value) -> usize {
    let entries = match api {
        LoopApi::Responses => request.get("input"),
        LoopApi::Chat | LoopApi::Messages => request.get("messages"),
        LoopApi::Gemini => request.get("contents"),
    };
    let Some(entries) = entries.and_then(Value::as_array) else {
        return 0;
    };
    let step = |e: &Value| match api {
        LoopApi::Responses => kind(e) == "function_call_output",
        LoopApi::Chat => role(e) == "tool",
        LoopApi::Messages => {
            role(e) == "user"
                && only_results(e.get("content").and_then(Value::as_array), |b| {
                    kind(b) == "tool_result"
                })
        }
        LoopApi::Gemini => {
            role(e) == "user"
                && only_results(e.get("parts").and_then(Value::as_array), |p| {
                    p.get("functionResponse").is_some()
                })
        }
    };
    let ask = |e: &Value| match api {
        LoopApi::Responses => kind(e) == "message" && role(e) == "user",
        LoopApi::Chat => role(e) == "user",
        LoopApi::Messages | LoopApi::Gemini => role(e) == "user" && !step(e),
    };
    let start = entries.iter().rposition(ask).map_or(0, |i| i + 1);
    entries[start..].iter().filter(|e| step(e)).count()
}

/// The names of the tools `request` offers, in order.
fn offered(api: LoopApi, request: &Value) -> Vec<&str> {
    let tools = request.get("tools").and_then(Value::as_array);
    let tools = tools.into_iter().flatten();
    match api {
        LoopApi::Responses => tools
            .filter(|t| kind(t) == "function")
            .filter_map(|t| t.get("name").and_then(Value::as_str))
            .collect(),
        LoopApi::Chat => tools
            .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
            .collect(),
        LoopApi::Messages => tools
            .filter_map(|t| t.get("name").and_then(Value::as_str))
            .collect(),
        LoopApi::Gemini => tools
            .filter_map(|t| {
                t.get("functionDeclarations")
                    .or_else(|| t.get("function_declarations"))
                    .and_then(Value::as_array)
            })
            .flatten()
            .filter_map(|d| d.get("name").and_then(Value::as_str))
            .collect(),
    }
}

/// The arguments of call number `step` (from 1) to `tool`: a command reading a file.
fn arguments(tool: &str, step: usize) -> Value {
    let command = format!("cat src/step_{step}.rs");
    if tool == "exec_command" {
        json!({ "cmd": command })
    } else {
        json!({ "command": command })
    }
}

/// The tool call an answer to `request` makes (answer number `id`), if the loop is not done:
/// fewer than the configured calls since the last plain ask, and a tool offered.
pub(super) fn next_call(cfg: &SimBuilder, api: LoopApi, request: &Value, id: u64) -> Option<Call> {
    if cfg.tool_loop == 0 {
        return None;
    }
    let steps = steps_since_ask(api, request);
    if steps >= cfg.tool_loop {
        return None;
    }
    let tools = offered(api, request);
    let name = cfg
        .tool_call
        .as_deref()
        .filter(|n| tools.contains(n))
        .or_else(|| SHELL_TOOLS.into_iter().find(|n| tools.contains(n)))
        .or_else(|| tools.first().copied())?;
    let call_id = match api {
        LoopApi::Messages => format!("toolu_sim_{id}"),
        _ => format!("call_sim_{id}"),
    };
    Some((call_id, name.to_owned(), arguments(name, steps + 1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sim(calls: usize) -> SimBuilder {
        SimBuilder::default().tool_loop(calls)
    }

    #[test]
    fn each_api_counts_the_steps_since_the_last_ask() {
        let responses = json!({"tools": [{"type": "custom", "name": "apply_patch"},
                                          {"type": "function", "name": "exec_command"}],
            "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]},
            {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "x"}]});
        assert_eq!(steps_since_ask(LoopApi::Responses, &responses), 1);
        let call = next_call(&sim(2), LoopApi::Responses, &responses, 7).unwrap();
        assert_eq!(call.0, "call_sim_7");
        assert_eq!(call.1, "exec_command");
        assert_eq!(call.2, json!({"cmd": "cat src/step_2.rs"}));
        assert!(next_call(&sim(1), LoopApi::Responses, &responses, 7).is_none());
        assert!(next_call(&sim(0), LoopApi::Responses, &responses, 7).is_none());

        let messages = json!({"tools": [{"name": "Agent"}, {"name": "Bash"}], "messages": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "u", "name": "Bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "u", "content": "x"}]}]});
        assert_eq!(steps_since_ask(LoopApi::Messages, &messages), 2);
        let call = next_call(&sim(3), LoopApi::Messages, &messages, 9).unwrap();
        assert_eq!((call.0.as_str(), call.1.as_str()), ("toolu_sim_9", "Bash"));
        // A new ask starts a new loop.
        let mut asked = messages.clone();
        asked["messages"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "user", "content": [{"type": "text", "text": "b"}]}));
        assert_eq!(steps_since_ask(LoopApi::Messages, &asked), 0);

        let chat = json!({"tools": [{"type": "function", "function": {"name": "read_file"}}],
            "messages": [{"role": "user", "content": "a"},
                         {"role": "assistant", "tool_calls": [{"id": "c"}]},
                         {"role": "tool", "tool_call_id": "c", "content": "x"}]});
        assert_eq!(steps_since_ask(LoopApi::Chat, &chat), 1);
        assert_eq!(
            next_call(&sim(2), LoopApi::Chat, &chat, 1).unwrap().1,
            "read_file"
        );

        let gemini = json!({"tools": [{"functionDeclarations": [{"name": "run_shell_command"}]}],
            "contents": [{"role": "user", "parts": [{"text": "a"}]},
                         {"role": "model", "parts": [{"functionCall": {"name": "run_shell_command"}}]},
                         {"role": "user", "parts": [{"functionResponse": {"name": "run_shell_command"}}]}]});
        assert_eq!(steps_since_ask(LoopApi::Gemini, &gemini), 1);
        assert!(next_call(&sim(1), LoopApi::Gemini, &gemini, 1).is_none());
        // No tool offered: no call.
        assert!(next_call(&sim(3), LoopApi::Gemini, &json!({"contents": []}), 1).is_none());
    }
}
