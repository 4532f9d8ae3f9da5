//! The request-level rules of the Anthropic Messages API, beyond the conversation rules of
//! `messages`, with the real API's error messages:
//!
//! - `tool_use` or `tool_result` blocks need `tools`;
//! - a `tool_choice` of `{"type": "tool"}` names a tool of `tools`;
//! - at most four blocks carry `cache_control` (system, tools and messages together);
//! - `temperature` and `top_p` are not both given (current Claude models), and the
//!   temperature is within `0..=1`;
//! - no `system` text block is empty or only whitespace;
//! - `max_tokens` is within the model's output limit (for the models of [`OUTPUT_LIMITS`]).

use serde_json::Value;

/// The API's limit on cache breakpoints.
const MAX_CACHE_BREAKPOINTS: usize = 4;

/// The output limits of the Claude models whose limit is known here (name prefixes as the API
/// spells them, dated or aliased), first match wins; any other model (the tests' `claude`, a
/// later release) has none here.
const OUTPUT_LIMITS: [(&str, u64); 11] = [
    ("claude-3-5-", 8192),
    ("claude-3-7-", 64_000),
    ("claude-3-", 4096),
    ("claude-opus-4-0", 32_000),
    ("claude-opus-4-1", 32_000),
    ("claude-opus-4-2025", 32_000),
    ("claude-opus-4-5", 64_000),
    ("claude-sonnet-4-0", 64_000),
    ("claude-sonnet-4-2025", 64_000),
    ("claude-sonnet-4-5", 64_000),
    ("claude-haiku-4-5", 64_000),
];

/// The API's 400 to a `max_tokens` above the output limit of the body's model.
fn over_output_limit(body: &Value) -> Option<String> {
    let model = body.get("model").and_then(Value::as_str)?;
    let max = body.get("max_tokens").and_then(Value::as_u64)?;
    let (_, limit) = OUTPUT_LIMITS.iter().find(|(p, _)| model.starts_with(p))?;
    (max > *limit).then(|| {
        format!(
            "max_tokens: {max} > {limit}, which is the maximum allowed number of output tokens for {model}"
        )
    })
}

fn kind(b: &Value) -> &str {
    b.get("type").and_then(Value::as_str).unwrap_or("")
}

/// Blocks of `messages` (content arrays, tool results' content included).
fn blocks(body: &Value) -> impl Iterator<Item = &Value> {
    let messages = body.get("messages").and_then(Value::as_array);
    messages
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("content").and_then(Value::as_array))
        .flatten()
        .flat_map(|b| {
            let nested = b.get("content").and_then(Value::as_array);
            std::iter::once(b).chain(nested.into_iter().flatten())
        })
}

/// The number of blocks with a `cache_control`.
fn cache_breakpoints(body: &Value) -> usize {
    let marked = |v: &&Value| v.get("cache_control").is_some_and(|c| !c.is_null());
    let in_array = |key: &str| {
        body.get(key)
            .and_then(Value::as_array)
            .map_or(0, |a| a.iter().filter(marked).count())
    };
    in_array("system") + in_array("tools") + blocks(body).filter(marked).count()
}

/// The message of the 400 `invalid_request_error` the API answers to `body`, or `None`.
pub(crate) fn check(body: &Value) -> Option<String> {
    let tools = body
        .get("tools")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if tools.is_empty() && blocks(body).any(|b| matches!(kind(b), "tool_use" | "tool_result")) {
        return Some(
            "Requests which include `tool_use` or `tool_result` blocks must define tools.".into(),
        );
    }
    if let Some(choice) = body.get("tool_choice")
        && kind(choice) == "tool"
    {
        let name = choice.get("name").and_then(Value::as_str).unwrap_or("");
        if !tools.iter().any(|t| t["name"] == name) {
            return Some(format!("Tool '{name}' not found in provided tools"));
        }
    }
    let found = cache_breakpoints(body);
    if found > MAX_CACHE_BREAKPOINTS {
        return Some(format!(
            "A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. Found {found}."
        ));
    }
    let has = |k: &str| body.get(k).is_some_and(|v| !v.is_null());
    if has("temperature") && has("top_p") {
        return Some(
            "`temperature` and `top_p` cannot both be specified for this model. Please use only one."
                .into(),
        );
    }
    if let Some(t) = body.get("temperature").and_then(Value::as_f64) {
        if t > 1.0 {
            return Some("temperature: Input should be less than or equal to 1".into());
        }
        if t < 0.0 {
            return Some("temperature: Input should be greater than or equal to 0".into());
        }
    }
    if let Some(message) = over_output_limit(body) {
        return Some(message);
    }
    if let Some(Value::Array(system)) = body.get("system") {
        for b in system.iter().filter(|b| kind(b) == "text") {
            let text = b.get("text").and_then(Value::as_str).unwrap_or("");
            if text.is_empty() {
                return Some("system: text content blocks must be non-empty".into());
            }
            if text.trim().is_empty() {
                return Some("system: text content blocks must contain non-whitespace text".into());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::rules::{Backend, check as rules};

    fn message(body: Value) -> Option<String> {
        rules(Backend::Api, "/v1/messages", &body).map(|(status, e)| {
            assert_eq!(status, 400);
            let v: Value = serde_json::from_str(&e).unwrap();
            assert_eq!(v["error"]["type"], "invalid_request_error");
            v["error"]["message"].as_str().unwrap().to_owned()
        })
    }

    fn base() -> Value {
        json!({"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
    }

    fn with_tool_history(tools: Value) -> Value {
        let mut b = base();
        b["messages"] = json!([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}
        ]);
        b["tools"] = tools;
        b
    }

    #[test]
    fn tool_blocks_need_tools() {
        let tool = json!([{"name": "f", "input_schema": {"type": "object"}}]);
        assert_eq!(message(with_tool_history(tool)), None);
        assert_eq!(
            message(with_tool_history(json!([]))).as_deref(),
            Some("Requests which include `tool_use` or `tool_result` blocks must define tools.")
        );
    }

    #[test]
    fn tool_choice_names_a_listed_tool() {
        let mut b = base();
        b["tools"] = json!([{"name": "f", "input_schema": {"type": "object"}}]);
        b["tool_choice"] = json!({"type": "tool", "name": "f"});
        assert_eq!(message(b.clone()), None);
        b["tool_choice"] = json!({"type": "tool", "name": "g"});
        assert_eq!(
            message(b).as_deref(),
            Some("Tool 'g' not found in provided tools")
        );
    }

    #[test]
    fn at_most_four_cache_breakpoints() {
        let eph = json!({"type": "ephemeral"});
        let mut b = base();
        b["system"] = json!([{"type": "text", "text": "s", "cache_control": eph}]);
        b["tools"] =
            json!([{"name": "f", "input_schema": {"type": "object"}, "cache_control": eph}]);
        let block = json!({"type": "text", "text": "x", "cache_control": eph});
        b["messages"] = json!([{"role": "user", "content": [block, block]}]);
        assert_eq!(message(b.clone()), None);
        b["messages"][0]["content"] = json!([block, block, block]);
        assert_eq!(
            message(b).as_deref(),
            Some("A maximum of 4 blocks with cache_control may be provided. Found 5.")
        );
    }

    #[test]
    fn sampling() {
        let mut b = base();
        b["temperature"] = json!(0.5);
        assert_eq!(message(b.clone()), None);
        b["top_p"] = json!(0.9);
        assert!(
            message(b.clone())
                .unwrap()
                .contains("cannot both be specified")
        );
        let mut b = base();
        b["temperature"] = json!(1.5);
        assert_eq!(
            message(b).as_deref(),
            Some("temperature: Input should be less than or equal to 1")
        );
    }

    #[test]
    fn blank_system_text() {
        let mut b = base();
        b["system"] = json!([{"type": "text", "text": " \n"}]);
        assert!(message(b).unwrap().contains("non-whitespace"));
    }

    #[test]
    fn max_tokens_within_the_models_output_limit() {
        let with = |model: &str, max: u64| {
            let mut b = base();
            b["model"] = json!(model);
            b["max_tokens"] = json!(max);
            message(b)
        };
        assert_eq!(
            with("claude-3-5-sonnet-20241022", 32000).as_deref(),
            Some(
                "max_tokens: 32000 > 8192, which is the maximum allowed number of output tokens for claude-3-5-sonnet-20241022"
            )
        );
        assert_eq!(with("claude-3-5-sonnet-20241022", 8192), None);
        assert!(with("claude-3-haiku-20240307", 4097).is_some());
        assert_eq!(with("claude-3-7-sonnet-20250219", 32000), None);
        assert!(with("claude-opus-4-1", 32001).is_some());
        assert_eq!(with("claude-sonnet-4-5", 64000), None);
        assert_eq!(with("claude", 1_000_000), None);
        // A later release is not guessed at.
        assert_eq!(with("claude-opus-4-8", 64000), None);
    }
}
