//! Tool calls in Messages answers, for tool round trips: when configured with
//! [`SimBuilder::tool_call`], a Messages answer calls the named tool whenever the request
//! offers it and its last message answers no earlier call. With
//! [`SimBuilder::tool_loop`], the loop decides when to call instead (on every API).

use serde_json::{Value, json};

use super::SimBuilder;

/// The input every simulated call passes.
fn input() -> Value {
    json!({"cmd": ["ls", "-la"]})
}

impl SimBuilder {
    /// Messages answers call tool `name` (input `{"cmd":["ls","-la"]}`, id `toolu_sim_<n>`)
    /// after their text whenever the request offers that tool and its last message carries no
    /// `tool_result`; such an answer stops with `stop_reason: "tool_use"`.
    pub fn tool_call(mut self, name: impl Into<String>) -> Self {
        self.tool_call = Some(name.into());
        self
    }
}

/// The `(id, name, input)` of the call a Messages answer to `request` makes, if any.
pub(super) fn call(cfg: &SimBuilder, request: &Value, id: u64) -> Option<(String, String, Value)> {
    if cfg.tool_loop > 0 {
        return super::tool_loop::next_call(cfg, super::tool_loop::LoopApi::Messages, request, id);
    }
    let name = cfg.tool_call.as_ref()?;
    let offered = request["tools"]
        .as_array()?
        .iter()
        .any(|t| t["name"] == name.as_str());
    let answering = request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_array())
        .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"));
    (offered && !answering).then(|| (format!("toolu_sim_{id}"), name.clone(), input()))
}
