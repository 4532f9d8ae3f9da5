use super::*;
use crate::api::ApiShape;
use crate::conversation::Entry;

fn conv(entries: Vec<Entry>) -> Conversation {
    Conversation::new(ApiShape::ChatCompletions, entries)
}

fn e(role: &str, text: &str) -> Entry {
    Entry::new(Some(role), [text])
}

fn tool(role: &str, kind: PartKind, text: &str) -> Entry {
    let mut entry = Entry::new(Some(role), [text]);
    entry.kinds = vec![kind];
    entry
}

fn fits(s: &Selection) {
    assert!(
        s.estimated_tokens <= TOKEN_BUDGET,
        "{} tokens",
        s.estimated_tokens
    );
    assert_eq!(s.estimated_tokens, estimate_tokens(&s.text));
}

#[test]
fn boilerplate_is_clipped_to_its_share() {
    let dev = "You are Codex. ".repeat(1800); // ~27 KB, like Codex's developer prompt
    let mut list = vec![
        e("developer", &dev),
        e(
            "developer",
            "<skills_instructions>\n## Skills\nlots of skills",
        ),
        Entry::new(
            Some("user"),
            ["<environment_context>\n  <cwd>/w</cwd>\n</environment_context>"],
        ),
        e("user", "Port the parser to nom."),
    ];
    for i in 0..40 {
        list.push(e("assistant", &format!("step {i}: {}", "done ".repeat(60))));
        list.push(e("user", &format!("ok, continue with part {i}")));
    }
    let s = select(
        &conv(list),
        Some("All parts ported."),
        RelayMode::Standard,
        30,
    );
    fits(&s);
    assert!(s.boilerplate_chars * 10 <= s.text.chars().count());
    assert!(s.text.contains("[1] DEVELOPER:\nYou are Codex."));
    assert!(s.text.contains("chars clipped …]"));
    assert!(s.text.contains("Port the parser to nom."));
    assert!(s.text.ends_with("[85] ASSISTANT:\nAll parts ported."));
    assert_eq!(s.task.as_deref(), Some("Port the parser to nom."));
    assert_eq!(s.latest_ask.as_deref(), Some("ok, continue with part 39"));
}

#[test]
fn schema_locked_writes_no_boilerplate() {
    let list = vec![
        e("system", "S"),
        e("user", "<system-reminder>x</system-reminder>"),
        e("user", "u"),
    ];
    let s = select(&conv(list), None, RelayMode::SchemaLocked, 30);
    assert_eq!(s.text, "[… 2 entries omitted …]\n\n[3] USER:\nu");
    assert_eq!(s.boilerplate_chars, 0);
}

#[test]
fn only_boilerplate_still_gives_a_history() {
    let s = select(
        &conv(vec![e("system", "rules of the house")]),
        None,
        RelayMode::Standard,
        30,
    );
    assert_eq!(s.text, "[1] SYSTEM:\nrules of the house");
    assert!(s.task.is_none());
}

#[test]
fn must_keep_items_survive_huge_sizes() {
    let huge = "y".repeat(100_000);
    let list = vec![
        e("user", &huge),
        e("assistant", &huge),
        e("user", &format!("LATEST{huge}")),
    ];
    let s = select(
        &conv(list),
        Some(&format!("REPLY{huge}")),
        RelayMode::Standard,
        30,
    );
    fits(&s);
    assert!(s.text.starts_with("[1] USER:\nyyy"));
    assert!(s.text.contains("[3] USER:\nLATESTyyy"));
    assert!(s.text.contains("[4] ASSISTANT:\nREPLYyyy"));
    assert!(s.text.contains("chars clipped …]"));
}

#[test]
fn priority_drops_tool_output_before_assistant_text() {
    let mut list = vec![e("user", "task")];
    for i in 0..60 {
        list.push(e("assistant", &format!("thought {i} {}", "a".repeat(600))));
        list.push(tool(
            "assistant",
            PartKind::ToolCall,
            &format!("tool call shell(cmd{i})"),
        ));
        list.push(tool(
            "tool",
            PartKind::ToolOutput,
            &format!("tool output: {}", "o".repeat(190)),
        ));
    }
    list.push(e("user", "latest"));
    let s = select(&conv(list), None, RelayMode::Standard, 100);
    fits(&s);
    // 60 assistant texts of ~620 chars exceed the budget: no tool line makes it.
    assert!(!s.text.contains("tool output:"));
    assert!(s.text.contains("thought 59"));
    assert!(!s.text.contains("thought 0 "));
    assert!(s.text.contains("entries omitted"));
}

#[test]
fn max_messages_caps_tool_entries() {
    let mut list = vec![e("user", "task")];
    for i in 0..20 {
        list.push(tool(
            "assistant",
            PartKind::ToolCall,
            &format!("tool call edit(f{i})"),
        ));
    }
    let s = select(&conv(list), None, RelayMode::Standard, 5);
    assert!(s.text.contains("edit(f19)") && s.text.contains("edit(f15)"));
    assert!(!s.text.contains("edit(f14)"));
    assert!(s.text.contains("[… 15 entries omitted …]"));
}

#[test]
fn omission_markers_and_conversation_order() {
    let list = vec![
        e("user", "first"),
        tool("assistant", PartKind::ToolCall, "tool call a()"),
        e("assistant", "   "),
        e("user", "second"),
    ];
    let s = select(&conv(list), None, RelayMode::Standard, 30);
    assert_eq!(
        s.text,
        "[1] USER:\nfirst\n\n[2] ASSISTANT:\ntool call a()\n\n[… 1 entry omitted …]\n\n[4] USER:\nsecond"
    );
    assert_eq!(s.selected, 3);
    assert_eq!(s.source_count, 4);
}

#[test]
fn claude_code_reminders_inside_a_user_message() {
    let entry = Entry::new(
        Some("user"),
        [
            "<system-reminder>\nToday is Monday.\n</system-reminder>",
            "fix the login bug",
        ],
    );
    let s = select(&conv(vec![entry]), None, RelayMode::Standard, 30);
    assert_eq!(s.task.as_deref(), Some("fix the login bug"));
    // The reminder is boilerplate: it gets at most a ninth of the work written, here nothing.
    assert_eq!(s.text, "[1] USER:\nfix the login bug");
}

#[test]
fn empty_and_blank() {
    assert!(select(&conv(vec![]), None, RelayMode::Standard, 30).is_empty());
    let s = select(
        &conv(vec![e("user", "  ")]),
        Some(" "),
        RelayMode::Standard,
        30,
    );
    assert!(s.is_empty());
    assert_eq!(s.source_count, 1);
}

#[test]
fn clip_marks_the_cut() {
    assert_eq!(clip("short", 10), "short");
    let long = "é".repeat(500);
    let c = clip(&long, 100);
    assert!(c.chars().count() <= 100);
    assert!(c.ends_with("[… 432 chars clipped …]"), "{c}");
    assert_eq!(decimal_digits(9), 1);
    assert_eq!(decimal_digits(10), 2);
    assert_eq!(estimate_tokens("日本語日"), 1);
}

/// A streamed reply a client keeps as one part per chunk (the Gemini SDKs), or as one entry
/// per chunk, is one reply: not a last reply and an earlier one made of its halves.
#[test]
fn a_reply_kept_in_chunks_is_one_reply() {
    let chunked_parts = Entry::new(Some("model"), ["Reply 3 from", " account g1."]);
    for history in [
        vec![
            e("user", "hello"),
            e("model", "Reply 1."),
            e("user", "go on"),
            chunked_parts,
        ],
        vec![
            e("user", "hello"),
            e("model", "Reply 1."),
            e("user", "go on"),
            e("model", "Reply 3 from"),
            e("model", " account g1."),
        ],
    ] {
        let s = select(&conv(history), None, RelayMode::Standard, 30);
        assert_eq!(
            s.last_assistant.as_deref(),
            Some("Reply 3 from account g1.")
        );
        assert_eq!(s.earlier_replies, ["Reply 1."]);
    }
    // Parts cut inside a word, and two finished sentences.
    assert_eq!(reply_joint("Hel", "lo"), "");
    assert_eq!(reply_joint("Done.", "Next"), "\n");
    assert_eq!(reply_joint("one\n", "two"), "\n");
    // A tool call between two texts: two replies.
    let mut call = Entry::new(
        Some("assistant"),
        ["Looking.", "read_file(a.rs)", "Found it."],
    );
    call.kinds = vec![PartKind::Text, PartKind::ToolCall, PartKind::Text];
    let s = select(
        &conv(vec![e("user", "fix it"), call]),
        None,
        RelayMode::Standard,
        30,
    );
    assert_eq!(s.last_assistant.as_deref(), Some("Found it."));
    assert_eq!(s.earlier_replies, ["Looking."]);
}

/// A reply in tens of thousands of chunks is one reply, joined in one pass (the switch builds
/// its handoff on the request's path): a join that copied the reply so far at each chunk took
/// seconds on this body, minutes unoptimised.
#[test]
fn a_reply_in_forty_thousand_chunks_is_one_reply() {
    let chunks: Vec<String> = (0..40_000).map(|i| format!("w{i} ")).collect();
    let entry = Entry::new(Some("model"), chunks.iter().map(String::as_str));
    let s = select(
        &conv(vec![e("user", "write it"), entry]),
        None,
        RelayMode::Standard,
        30,
    );
    let last = s.last_assistant.expect("a reply");
    assert!(last.starts_with("w0 w1 w2"), "{last}");
    assert!(
        last.chars().count() <= ASK_CHARS + 1,
        "clipped: {}",
        last.len()
    );
    assert!(s.earlier_replies.is_empty(), "{:?}", s.earlier_replies);
}
