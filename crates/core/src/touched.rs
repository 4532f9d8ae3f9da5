//! The files a session touched, read deterministically from its tool-call arguments, so that a
//! handoff names them even when the summary model forgets to.
//!
//! A file is named by a tool call when its arguments hold:
//!
//! - a `file_path`, `path` or `notebook_path` string (Claude Code `Read` / `Edit` / `Write` /
//!   `NotebookEdit`, most editor tools), or a `paths` array of strings;
//! - an `apply_patch` envelope (Codex): every `*** Update File: P`, `*** Add File: P`,
//!   `*** Delete File: P` and `*** Move to: P` line, whether the patch is the whole argument
//!   (the custom `apply_patch` tool) or a string inside it (a shell command running
//!   `apply_patch`).
//!
//! Arguments sent as a JSON string (Chat Completions and Responses function calls) are parsed
//! first. [`touched_files`] lists them newest first, without duplicates, at most
//! [`MAX_TOUCHED_FILES`]; [`merge_entities`] adds them to the entities a model named.
//!
//! ```
//! use context_relay_core::{ApiShape, conversation::Conversation, touched::touched_files};
//!
//! let body = serde_json::json!({"input": [
//!     {"type": "custom_tool_call", "name": "apply_patch", "call_id": "a",
//!      "input": "*** Begin Patch\n*** Update File: src/lib.rs\n@@\n-a\n+b\n*** End Patch"},
//!     {"type": "function_call", "name": "read", "call_id": "b",
//!      "arguments": "{\"path\":\"README.md\"}"}
//! ]});
//! let conv = Conversation::from_value(ApiShape::Responses, &body).unwrap();
//! assert_eq!(touched_files(&conv), ["README.md", "src/lib.rs"]);
//! ```

use serde_json::Value;

use crate::conversation::Conversation;
use crate::handoff::{MAX_ACTIVE_ENTITIES, MAX_ITEM_CHARS};

/// Most touched files listed.
pub const MAX_TOUCHED_FILES: usize = 10;

/// Headers of an `apply_patch` envelope that name a file.
const PATCH_HEADERS: [&str; 4] = [
    "*** Update File:",
    "*** Add File:",
    "*** Delete File:",
    "*** Move to:",
];

/// Appends the files named by one tool call's arguments to `out`, in the order they appear.
pub fn files_in_args(args: &Value, out: &mut Vec<String>) {
    match args {
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => files_in_object(&v, out),
            _ => files_in_patch(s, out),
        },
        Value::Object(_) => files_in_object(args, out),
        _ => {}
    }
}

fn files_in_object(v: &Value, out: &mut Vec<String>) {
    let Some(obj) = v.as_object() else { return };
    for (key, value) in obj {
        match (key.as_str(), value) {
            ("file_path" | "path" | "notebook_path", Value::String(p)) => push_path(p, out),
            ("paths", Value::Array(items)) => {
                for p in items.iter().filter_map(Value::as_str) {
                    push_path(p, out);
                }
            }
            (_, Value::String(s)) => files_in_patch(s, out),
            (_, Value::Array(items)) => {
                for s in items.iter().filter_map(Value::as_str) {
                    files_in_patch(s, out);
                }
            }
            _ => {}
        }
    }
}

/// The file headers of an `apply_patch` envelope inside `text`.
fn files_in_patch(text: &str, out: &mut Vec<String>) {
    // Cheap rejection: almost no argument is a patch.
    if memchr::memmem::find(text.as_bytes(), b"*** ").is_none() {
        return;
    }
    for line in text.lines() {
        let line = line.trim_start();
        if let Some(path) = PATCH_HEADERS.iter().find_map(|h| line.strip_prefix(h)) {
            push_path(path, out);
        }
    }
}

fn push_path(path: &str, out: &mut Vec<String>) {
    let path = path.trim();
    if path.is_empty() || path.contains('\n') || path.chars().count() > MAX_ITEM_CHARS {
        return;
    }
    out.push(path.to_owned());
}

/// The files the conversation's tool calls touched, newest first, each once, at most
/// [`MAX_TOUCHED_FILES`].
pub fn touched_files(conv: &Conversation) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for entry in conv.entries().iter().rev() {
        for file in entry.files.iter().rev() {
            if out.len() == MAX_TOUCHED_FILES {
                return out;
            }
            if !out.iter().any(|f| f == file) {
                out.push(file.clone());
            }
        }
    }
    out
}

/// The entities a model named first, then the touched files it did not name; no duplicates
/// (exact match after trimming), at most [`MAX_ACTIVE_ENTITIES`].
///
/// ```
/// use context_relay_core::touched::merge_entities;
/// let merged = merge_entities(&["src/a.rs".into(), "parser".into()], &["src/b.rs".into(), "src/a.rs".into()]);
/// assert_eq!(merged, ["src/a.rs", "parser", "src/b.rs"]);
/// ```
pub fn merge_entities(named: &[String], touched: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(MAX_ACTIVE_ENTITIES);
    for item in named.iter().chain(touched) {
        let item = item.trim();
        if out.len() == MAX_ACTIVE_ENTITIES {
            break;
        }
        if !item.is_empty() && !out.iter().any(|o| o == item) {
            out.push(item.to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::ApiShape;

    fn files(args: Value) -> Vec<String> {
        let mut out = Vec::new();
        files_in_args(&args, &mut out);
        out
    }

    #[test]
    fn argument_forms() {
        assert_eq!(
            files(json!({"file_path": "/w/a.rs", "old_string": "x"})),
            ["/w/a.rs"]
        );
        assert_eq!(files(json!("{\"path\": \"b.rs\"}")), ["b.rs"]);
        assert_eq!(
            files(json!({"paths": ["c.rs", 3, "d.rs"]})),
            ["c.rs", "d.rs"]
        );
        assert_eq!(
            files(json!(
                "*** Begin Patch\n*** Add File: n.rs\n+x\n*** Update File: o.rs\n*** Move to: p.rs\n*** Delete File: q.rs\n*** End Patch"
            )),
            ["n.rs", "o.rs", "p.rs", "q.rs"]
        );
        // A shell command running apply_patch, as Codex sends it through exec tools.
        assert_eq!(
            files(
                json!({"command": ["apply_patch", "*** Begin Patch\n*** Update File: src/x.rs\n*** End Patch"]})
            ),
            ["src/x.rs"]
        );
        assert!(files(json!({"cmd": "cargo test"})).is_empty());
        assert!(files(json!({"path": "  "})).is_empty());
        assert!(files(json!({"path": "a\nb"})).is_empty());
        assert!(files(json!(3)).is_empty());
    }

    #[test]
    fn newest_first_deduplicated_bounded() {
        let mut input = Vec::new();
        for i in 0..15 {
            input.push(
                json!({"type": "function_call", "name": "edit", "call_id": i.to_string(),
                "arguments": format!("{{\"path\":\"f{i}.rs\"}}")}),
            );
        }
        input.push(
            json!({"type": "function_call", "name": "edit", "call_id": "x",
            "arguments": "{\"path\":\"f3.rs\"}"}),
        );
        let conv = Conversation::from_value(ApiShape::Responses, &json!({"input": input}))
            .expect("conversation");
        let got = touched_files(&conv);
        assert_eq!(got.len(), MAX_TOUCHED_FILES);
        assert_eq!(&got[..3], ["f3.rs", "f14.rs", "f13.rs"]);
        assert!(!got[1..].contains(&"f3.rs".to_owned()));
    }

    #[test]
    fn chat_and_anthropic_calls_name_files() {
        let chat = json!({"messages": [{"role": "assistant", "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "write", "arguments": "{\"file_path\":\"a.py\"}"}}
        ]}]});
        let conv = Conversation::from_value(ApiShape::ChatCompletions, &chat).expect("chat");
        assert_eq!(touched_files(&conv), ["a.py"]);
        let anthropic = json!({"messages": [{"role": "assistant", "content": [
            {"type": "tool_use", "id": "t", "name": "Edit", "input": {"file_path": "/r/b.ts"}}
        ]}]});
        let conv =
            Conversation::from_value(ApiShape::AnthropicMessages, &anthropic).expect("anthropic");
        assert_eq!(touched_files(&conv), ["/r/b.ts"]);
    }

    #[test]
    fn merge_keeps_model_entities_first() {
        let named: Vec<String> = (0..9).map(|i| format!("e{i}")).collect();
        let touched = vec!["e1".to_owned(), "t1".to_owned(), "t2".to_owned()];
        let merged = merge_entities(&named, &touched);
        assert_eq!(merged.len(), MAX_ACTIVE_ENTITIES);
        assert_eq!(merged[9], "t1");
        assert_eq!(
            merge_entities(&[" a ".into(), "".into()], &["a".into()]),
            ["a"]
        );
    }
}
