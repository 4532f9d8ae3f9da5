//! One-line renderings of tool calls and tool outputs, bounded in length whatever their size.

use std::io;

use serde_json::Value;

/// Longest one-line rendering of a tool call or tool output, in chars (ellipsis included).
pub const TOOL_LINE_MAX_CHARS: usize = 200;

/// `tool call NAME(ARGS)` on one line, at most [`TOOL_LINE_MAX_CHARS`] chars.
///
/// `args` is used as is when it is a string (Responses and Chat send arguments as a JSON
/// string), else as compact JSON.
///
/// ```
/// use context_relay_core::conversation::tool_call_line;
/// let line = tool_call_line("Bash", &serde_json::json!({"command": "ls\n-la"}));
/// assert_eq!(line, r#"tool call Bash({"command":"ls\n-la"})"#);
/// ```
pub fn tool_call_line(name: &str, args: &Value) -> String {
    let args = match args {
        Value::String(s) => std::borrow::Cow::Borrowed(s.as_str()),
        Value::Null => std::borrow::Cow::Borrowed(""),
        other => std::borrow::Cow::Owned(compact_json(other)),
    };
    let (mut line, cut) = fold(
        &["tool call ", name, "(", &args, ")"],
        TOOL_LINE_MAX_CHARS - 1,
    );
    if cut {
        line.push('…');
    }
    line
}

/// Chars of a long tool output's end kept after the ellipsis: where test runners, compilers
/// and linters print their verdict (`test result: FAILED. 13 passed; 1 failed`).
pub const TOOL_OUTPUT_TAIL_CHARS: usize = 80;

/// `tool output: OUTPUT` on one line, at most [`TOOL_LINE_MAX_CHARS`] chars. A longer output
/// keeps its beginning and its last [`TOOL_OUTPUT_TAIL_CHARS`] chars, joined by ` … `.
///
/// ```
/// use context_relay_core::conversation::{TOOL_LINE_MAX_CHARS, tool_output_line};
/// let output = format!("running 14 tests\n{}test result: FAILED. 13 passed; 1 failed\n",
///     "test a ... ok\n".repeat(40));
/// let line = tool_output_line(&output);
/// assert!(line.starts_with("tool output: running 14 tests test a ... ok"));
/// assert!(line.contains(" … ") && line.ends_with("ok test result: FAILED. 13 passed; 1 failed"));
/// assert!(line.chars().count() <= TOOL_LINE_MAX_CHARS);
/// ```
pub fn tool_output_line(output: &str) -> String {
    // The head, the ` … ` between, and the tail make the longest line.
    const HEAD: usize = TOOL_LINE_MAX_CHARS - 3 - TOOL_OUTPUT_TAIL_CHARS;
    let (mut line, cut) = fold(&["tool output: ", output], HEAD);
    if cut {
        line.truncate(line.trim_end().len());
        line.push_str(" … ");
        line.push_str(&tail(output, TOOL_OUTPUT_TAIL_CHARS));
    }
    line
}

/// Joins `pieces` and folds every whitespace run into one space, trimmed. When the result is
/// longer than [`TOOL_LINE_MAX_CHARS`] chars, its first `keep` chars and `true`. Stops
/// reading as soon as the limit is passed, so a megabyte of tool output costs no more than a
/// short one.
fn fold(pieces: &[&str], keep: usize) -> (String, bool) {
    let mut out = String::new();
    let mut count = 0usize;
    let mut pending_space = false;
    for c in pieces.iter().flat_map(|p| p.chars()) {
        if c.is_whitespace() {
            pending_space = count > 0;
            continue;
        }
        if pending_space {
            out.push(' ');
            count += 1;
            pending_space = false;
        }
        out.push(c);
        count += 1;
        if count > TOOL_LINE_MAX_CHARS {
            let cut = crate::parse::clamp_chars(&out, keep).len();
            out.truncate(cut);
            return (out, true);
        }
    }
    (out, false)
}

/// The last `max` chars of `text` with its whitespace runs folded as [`fold`] does (fewer
/// when a folded space would lead them). Reads from the end: the chars it keeps and the
/// whitespace between them.
fn tail(text: &str, max: usize) -> String {
    let mut reversed: Vec<char> = Vec::with_capacity(max);
    let mut pending_space = false;
    for c in text.chars().rev() {
        if c.is_whitespace() {
            pending_space = !reversed.is_empty();
            continue;
        }
        if pending_space {
            reversed.push(' ');
            pending_space = false;
        }
        if reversed.len() >= max {
            break;
        }
        reversed.push(c);
    }
    let kept: String = reversed.iter().rev().collect();
    kept.trim_start().to_owned()
}

/// Compact JSON of `v`, stopping early once longer than a tool line can show.
pub(super) fn compact_json(v: &Value) -> String {
    // A tool line shows at most 200 chars (≤ 800 bytes); 1 KiB always covers them, so the
    // serialisation of a large argument object is abandoned early instead of built in full.
    const LIMIT: usize = 1024;
    struct Bounded(Vec<u8>);
    impl io::Write for Bounded {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let room = LIMIT.saturating_sub(self.0.len());
            if room == 0 {
                return Err(io::Error::other("tool line long enough"));
            }
            let n = room.min(buf.len());
            self.0.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut w = Bounded(Vec::new());
    // An error only means the limit was reached: what was written is what we want.
    let _ = serde_json::to_writer(&mut w, v);
    String::from_utf8_lossy(&w.0).into_owned()
}
