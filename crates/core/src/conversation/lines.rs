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
    one_line(&["tool call ", name, "(", &args, ")"])
}

/// `tool output: OUTPUT` on one line, at most [`TOOL_LINE_MAX_CHARS`] chars.
pub fn tool_output_line(output: &str) -> String {
    one_line(&["tool output: ", output])
}

/// Joins `pieces`, folds every whitespace run into one space, trims, and cuts the result to
/// [`TOOL_LINE_MAX_CHARS`] chars with a trailing `…` when longer. Stops reading as soon as the
/// limit is passed, so a megabyte of tool output costs no more than a short one.
fn one_line(pieces: &[&str]) -> String {
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
            break;
        }
    }
    if count > TOOL_LINE_MAX_CHARS {
        let cut = crate::parse::clamp_chars(&out, TOOL_LINE_MAX_CHARS - 1).len();
        out.truncate(cut);
        out.push('…');
    }
    out
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
