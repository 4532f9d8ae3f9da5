//! The files a session touched, read deterministically from its tool-call arguments, so that a
//! handoff names them even when the summary model forgets to.
//!
//! A file is named by a tool call when its arguments hold:
//!
//! - a `file_path`, `path` or `notebook_path` string (Claude Code `Read` / `Edit` / `Write` /
//!   `NotebookEdit`, most editor tools), a `filePath` (OpenCode's `read` / `edit` / `write`),
//!   or a `paths` array of strings;
//! - an `apply_patch` envelope (Codex): every `*** Update File: P`, `*** Add File: P`,
//!   `*** Delete File: P` and `*** Move to: P` line, whether the patch is the whole argument
//!   (the custom `apply_patch` tool) or a string inside it (a shell command running
//!   `apply_patch`).
//!
//! Arguments sent as a JSON string (Chat Completions and Responses function calls) are parsed
//! first. [`touched_files`] lists the files the session edited, newest first, then those the
//! last [`RECENT_CALLS`] tool calls named, without duplicates, at most [`MAX_TOUCHED_FILES`];
//! [`merge_entities`] adds them to the entities a model named.
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
//! // The edited file first, then what the latest calls read.
//! assert_eq!(touched_files(&conv), ["src/lib.rs", "README.md"]);
//! ```

use serde_json::Value;

use crate::conversation::{Conversation, PartKind};
use crate::handoff::{MAX_ACTIVE_ENTITIES, MAX_ITEM_CHARS};

/// Most touched files listed: a long session edits a few dozen files at most, and each costs
/// one short line of the summary prompt.
pub const MAX_TOUCHED_FILES: usize = 40;

/// The latest tool calls whose files are listed after the edited ones, whatever the calls did.
pub const RECENT_CALLS: usize = 10;

/// Words in a tool's name that say it writes the files it names (ASCII case ignored):
/// Claude Code's `Edit`, `MultiEdit`, `Write` and `NotebookEdit`, `write_file`, `apply_patch`,
/// `str_replace_based_edit_tool`, `create_file`, `delete_file`, …
const EDIT_WORDS: [&str; 9] = [
    "edit", "write", "patch", "create", "replace", "insert", "delete", "rename", "move",
];

/// Headers of an `apply_patch` envelope that name a file.
const PATCH_HEADERS: [&str; 4] = [
    "*** Update File:",
    "*** Add File:",
    "*** Delete File:",
    "*** Move to:",
];

/// Appends the files named by one tool call's arguments to `out`, in the order they appear;
/// whether an `apply_patch` envelope named any of them (the call edits them).
pub fn files_in_args(args: &Value, out: &mut Vec<String>) -> bool {
    match args {
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => files_in_object(&v, out),
            _ => files_in_patch(s, out),
        },
        Value::Object(_) => files_in_object(args, out),
        _ => false,
    }
}

/// Whether a tool's name says it writes the files it names: it holds `edit`, `write`, `patch`,
/// `create`, `replace`, `insert`, `delete`, `rename` or `move` (ASCII case ignored).
///
/// ```
/// use context_relay_core::touched::is_edit_tool;
/// assert!(is_edit_tool("MultiEdit") && is_edit_tool("write_file") && is_edit_tool("apply_patch"));
/// assert!(!is_edit_tool("Read") && !is_edit_tool("Grep") && !is_edit_tool("exec_command"));
/// ```
pub fn is_edit_tool(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    EDIT_WORDS.iter().any(|w| name.contains(w))
}

fn files_in_object(v: &Value, out: &mut Vec<String>) -> bool {
    let Some(obj) = v.as_object() else {
        return false;
    };
    let mut patched = false;
    for (key, value) in obj {
        match (key.as_str(), value) {
            // OpenCode spells it `filePath`.
            ("file_path" | "filePath" | "path" | "notebook_path", Value::String(p)) => {
                push_path(p, out)
            }
            ("paths", Value::Array(items)) => {
                for p in items.iter().filter_map(Value::as_str) {
                    push_path(p, out);
                }
            }
            (_, Value::String(s)) => patched |= files_in_patch(s, out),
            (_, Value::Array(items)) => {
                for s in items.iter().filter_map(Value::as_str) {
                    patched |= files_in_patch(s, out);
                }
            }
            _ => {}
        }
    }
    patched
}

/// The file headers of an `apply_patch` envelope inside `text`; whether there was any.
fn files_in_patch(text: &str, out: &mut Vec<String>) -> bool {
    // Cheap rejection: almost no argument is a patch.
    if memchr::memmem::find(text.as_bytes(), b"*** ").is_none() {
        return false;
    }
    let before = out.len();
    for line in text.lines() {
        let line = line.trim_start();
        if let Some(path) = PATCH_HEADERS.iter().find_map(|h| line.strip_prefix(h)) {
            push_path(path, out);
        }
    }
    out.len() > before
}

fn push_path(path: &str, out: &mut Vec<String>) {
    let path = path.trim();
    if path.is_empty() || path.contains('\n') || path.chars().count() > MAX_ITEM_CHARS {
        return;
    }
    out.push(path.to_owned());
}

/// The files the conversation's tool calls edited, newest first, then the other files the
/// last [`RECENT_CALLS`] tool calls named (those of the entries that hold them), each once, at
/// most [`MAX_TOUCHED_FILES`].
pub fn touched_files(conv: &Conversation) -> Vec<String> {
    fn push(out: &mut Vec<String>, file: &String) {
        if out.len() < MAX_TOUCHED_FILES && !out.iter().any(|f| f == file) {
            out.push(file.clone());
        }
    }
    let mut out: Vec<String> = Vec::new();
    let entries = conv.entries();
    for entry in entries.iter().rev() {
        for file in entry.edited.iter().rev() {
            push(&mut out, file);
        }
    }
    let mut calls = 0;
    for entry in entries.iter().rev() {
        if calls >= RECENT_CALLS {
            break;
        }
        calls += entry
            .kinds
            .iter()
            .filter(|k| **k == PartKind::ToolCall)
            .count();
        for file in entry.files.iter().rev() {
            push(&mut out, file);
        }
    }
    out
}

/// Room of the merged entities kept for the touched files when a model names more entities
/// than fit: the files a session edited are where its work is (they lead the touched files;
/// a session that edited fewer gives the rest of the room to the files its last calls read),
/// and a model's list of identifiers (functions, types, test names) would otherwise push
/// every one of them out.
pub const TOUCHED_ROOM: usize = MAX_ACTIVE_ENTITIES / 2;

/// The first [`TOUCHED_ROOM`] touched files (the files edited most recently lead the list),
/// then the entities a model named, then the other touched files; no duplicates (exact match
/// after trimming), at most [`MAX_ACTIVE_ENTITIES`].
///
/// ```
/// use context_relay_core::touched::merge_entities;
/// let merged = merge_entities(&["src/a.rs".into(), "parser".into()], &["src/b.rs".into(), "src/a.rs".into()]);
/// assert_eq!(merged, ["src/b.rs", "src/a.rs", "parser"]);
/// ```
pub fn merge_entities(named: &[String], touched: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(MAX_ACTIVE_ENTITIES);
    let push = |out: &mut Vec<String>, item: &String| {
        let item = item.trim();
        if !item.is_empty() && !out.iter().any(|o| o == item) {
            out.push(item.to_owned());
        }
    };
    let mut touched = touched.iter();
    while out.len() < TOUCHED_ROOM {
        let Some(item) = touched.next() else { break };
        push(&mut out, item);
    }
    for item in named.iter().chain(touched) {
        if out.len() == MAX_ACTIVE_ENTITIES {
            break;
        }
        push(&mut out, item);
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
        let _ = files_in_args(&args, &mut out);
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
            files(json!({"filePath": "/w/e.py", "oldString": "a", "newString": "b"})),
            ["/w/e.py"]
        );
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
        for i in 0..(MAX_TOUCHED_FILES + 5) {
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
        let newest = format!("f{}.rs", MAX_TOUCHED_FILES + 4);
        assert_eq!(got[..2], ["f3.rs".to_owned(), newest]);
        assert!(!got[1..].contains(&"f3.rs".to_owned()));
    }

    /// A session that reads far more files than it edits: every edited file is listed, first,
    /// then the files the latest calls read, and no older read.
    #[test]
    fn edits_come_first_and_reads_do_not_crowd_them_out() {
        let mut input = Vec::new();
        let call = |name: &str, id: String, path: String| {
            json!({"type": "function_call", "name": name, "call_id": id,
                   "arguments": json!({"path": path}).to_string()})
        };
        for i in 0..12 {
            input.push(call("write_file", format!("w{i}"), format!("src/e{i}.rs")));
            for j in 0..4 {
                input.push(call(
                    "read_file",
                    format!("r{i}_{j}"),
                    format!("docs/r{i}_{j}.md"),
                ));
            }
        }
        let conv = Conversation::from_value(ApiShape::Responses, &json!({"input": input}))
            .expect("conversation");
        let got = touched_files(&conv);
        let edited: Vec<String> = (0..12).rev().map(|i| format!("src/e{i}.rs")).collect();
        assert_eq!(got[..12], edited[..]);
        // The last ten calls: the edits and reads of rounds 11 and 10.
        assert!(got.contains(&"docs/r11_0.md".to_owned()));
        assert!(got.contains(&"docs/r10_0.md".to_owned()));
        assert!(!got.contains(&"docs/r9_3.md".to_owned()));
        assert!(!got.contains(&"docs/r0_0.md".to_owned()));
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
    fn merge_keeps_room_for_the_touched_files() {
        // A model that names more than fit leaves the newest touched files their room.
        let named: Vec<String> = (0..12).map(|i| format!("e{i}")).collect();
        let touched: Vec<String> = (0..8).map(|i| format!("t{i}")).collect();
        let merged = merge_entities(&named, &touched);
        assert_eq!(
            merged,
            ["t0", "t1", "t2", "t3", "t4", "e0", "e1", "e2", "e3", "e4"]
        );
        // Fewer touched files: the model's entities fill the rest.
        let merged = merge_entities(&named, &touched[..2]);
        assert_eq!(&merged[..3], ["t0", "t1", "e0"]);
        assert_eq!(merged.len(), MAX_ACTIVE_ENTITIES);
        // A model naming a touched file does not make it count twice.
        let named = vec!["t5".to_owned(), "t0".to_owned(), "x".to_owned()];
        assert_eq!(
            merge_entities(&named, &touched),
            ["t0", "t1", "t2", "t3", "t4", "t5", "x", "t6", "t7"]
        );
        assert_eq!(
            merge_entities(&[" a ".into(), "".into()], &["a".into()]),
            ["a"]
        );
    }

    proptest::proptest! {
        /// Within the limit, without duplicates, nothing lost that fits: the first touched
        /// files up to their room always, then every distinct item while room is left.
        #[test]
        fn merged_entities_keep_the_touched_room(
            named in proptest::collection::vec("[a-e ]{0,3}", 0..16),
            touched in proptest::collection::vec("[c-h]{1,2}", 0..16),
        ) {
            let merged = merge_entities(&named, &touched);
            proptest::prop_assert!(merged.len() <= MAX_ACTIVE_ENTITIES);
            for (i, m) in merged.iter().enumerate() {
                proptest::prop_assert!(!m.is_empty() && !merged[..i].contains(m));
            }
            let mut distinct_touched: Vec<&str> = Vec::new();
            for t in &touched {
                if !distinct_touched.contains(&t.as_str()) {
                    distinct_touched.push(t);
                }
            }
            for t in distinct_touched.iter().take(TOUCHED_ROOM) {
                proptest::prop_assert!(merged.iter().any(|m| m == t), "{t} lost");
            }
            let mut all: Vec<&str> = Vec::new();
            for item in named.iter().chain(&touched).map(|i| i.trim()).filter(|i| !i.is_empty()) {
                if !all.contains(&item) {
                    all.push(item);
                }
            }
            proptest::prop_assert_eq!(merged.len(), all.len().min(MAX_ACTIVE_ENTITIES));
        }
    }
}
