//! Tools of a translated request: the tool list, `tool_choice`, and the ids of tool calls.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Anthropic tool names match `^[a-zA-Z0-9_-]{1,64}$`.
fn valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The Responses `tools` as Messages tools: functions keep their JSON schema; freeform
/// `custom` tools (names pushed to `custom`) take one string, `input`, and their `format`
/// (Codex's `apply_patch` Lark grammar) is appended to the description, since the model
/// must still write input the tool can parse. Everything else is listed in `dropped`.
pub(super) fn translate_tools(
    tools: &[Value],
    custom: &mut Vec<String>,
    dropped: &mut Vec<String>,
) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for tool in tools {
        let kind = str_of(tool, "type");
        let name = str_of(tool, "name");
        if !valid_tool_name(name) || out.iter().any(|t| t["name"] == name) {
            dropped.push(format!("tool:{kind}:{name}"));
            continue;
        }
        let mut description = str_of(tool, "description").trim_end().to_owned();
        let schema = match kind {
            "function" => match tool.get("parameters") {
                Some(Value::Object(p)) => {
                    let mut p = p.clone();
                    p.insert("type".into(), Value::String("object".into()));
                    Value::Object(p)
                }
                _ => json!({"type": "object", "properties": {}}),
            },
            "custom" => {
                custom.push(name.to_owned());
                if let Some(format) = format_text(tool.get("format")) {
                    if !description.is_empty() {
                        description.push_str("\n\n");
                    }
                    description.push_str(&format);
                }
                json!({
                    "type": "object",
                    "properties": {"input": {"type": "string", "description": "The raw input of the tool, as its description says."}},
                    "required": ["input"]
                })
            }
            _ => {
                dropped.push(format!("tool:{kind}:{name}"));
                continue;
            }
        };
        let mut t = json!({"name": name, "input_schema": schema});
        if !description.trim().is_empty() {
            t["description"] = Value::String(description);
        }
        out.push(t);
    }
    out
}

/// The `format` of a `custom` tool as description text: a grammar with its syntax, or
/// nothing for free text.
fn format_text(format: Option<&Value>) -> Option<String> {
    let format = format?;
    if str_of(format, "type") != "grammar" {
        return None;
    }
    let definition = str_of(format, "definition").trim();
    if definition.is_empty() {
        return None;
    }
    let syntax = match str_of(format, "syntax") {
        "" => "formal",
        s => s,
    };
    Some(format!(
        "The `input` string must match this {syntax} grammar:\n```\n{definition}\n```"
    ))
}

/// The Messages `tool_choice` of the Responses `tool_choice` and `parallel_tool_calls`, for a
/// request whose tools are `tools`. A choice naming a tool that is not among them (one that
/// was dropped) becomes `auto`, listed in `dropped`: the API refuses a choice of an unknown
/// tool.
pub(super) fn tool_choice(
    choice: Option<&Value>,
    parallel: Option<bool>,
    tools: &[Value],
    dropped: &mut Vec<String>,
) -> Value {
    let mut out = match choice {
        None | Some(Value::Null) => json!({"type": "auto"}),
        Some(Value::String(s)) => match s.as_str() {
            "none" => json!({"type": "none"}),
            "required" => json!({"type": "any"}),
            _ => json!({"type": "auto"}),
        },
        Some(v) => {
            let name = str_of(v, "name");
            let known = tools.iter().any(|t| t["name"] == name);
            match str_of(v, "type") {
                "function" | "custom" if known => json!({"type": "tool", "name": name}),
                kind => {
                    dropped.push(format!("tool_choice:{kind}:{name}"));
                    json!({"type": "auto"})
                }
            }
        }
    };
    if parallel == Some(false) && out["type"] != "none" {
        out["disable_parallel_tool_use"] = Value::Bool(true);
    }
    out
}

/// Anthropic tool ids match `^[a-zA-Z0-9_-]+$`: other characters become `_`.
fn clean_id(call_id: &str) -> String {
    let id: String = call_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if id.is_empty() { "call".into() } else { id }
}

/// The Messages ids of the tool calls of one request. Cleaning alone could give two calls
/// one id (`a.b` and `a:b` both clean to `a_b`) and the API refuses a repeated `tool_use`
/// id, so every call gets an id no other call of the request has (a `_2`, `_3`, … suffix on
/// a collision), and an output takes the id of the latest call with its `call_id`.
#[derive(Debug, Default)]
pub(super) struct CallIds {
    /// Original `call_id` → the id of its latest call.
    calls: HashMap<String, String>,
    /// Every id handed out.
    used: HashSet<String>,
    /// Cleaned id → the last suffix it took: the next collision starts there, not at `_2`
    /// (ids handed out stay taken), so a request repeating one id n times costs n look-ups,
    /// not n².
    suffix: HashMap<String, u64>,
}

impl CallIds {
    fn fresh(&mut self, call_id: &str) -> String {
        let base = clean_id(call_id);
        if self.used.insert(base.clone()) {
            return base;
        }
        let n = self.suffix.entry(base.clone()).or_insert(1);
        loop {
            *n += 1;
            let id = format!("{base}_{n}");
            if self.used.insert(id.clone()) {
                return id;
            }
        }
    }

    /// The id of a new call with `call_id`.
    pub(super) fn call(&mut self, call_id: &str) -> String {
        let id = self.fresh(call_id);
        self.calls.insert(call_id.to_owned(), id.clone());
        id
    }

    /// The id an output for `call_id` answers: its call's, or, for an output of no call, an
    /// id of no call (the output then reads as text).
    pub(super) fn output(&mut self, call_id: &str) -> String {
        match self.calls.get(call_id) {
            Some(id) => id.clone(),
            None => self.fresh(call_id),
        }
    }
}
