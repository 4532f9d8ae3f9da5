//! 40-turn sessions at real size (Codex CLI, Claude Code, a Chat Completions agent): the
//! summary prompt carries the task, the decisions, the latest ask, this turn's reply and the
//! files (at least 80 % of those it edited and of those its last ten tool calls named), and
//! boilerplate stays within 10 % of it.

use context_relay_core::conversation::Conversation;
use context_relay_core::prompt::summary_prompt;
use context_relay_core::select::{TOKEN_BUDGET, select};
use context_relay_core::{ApiShape, RelayMode};
use context_relay_testkit::sessions::{self, Facts};
use serde_json::Value;

const TURNS: usize = 40;

fn check(name: &str, shape: ApiShape, body: &Value, facts: &Facts) {
    let bytes = serde_json::to_vec(body).expect("serialize");
    let conv = Conversation::from_slice(shape, &bytes).expect("conversation");
    let asks = conv
        .entries()
        .iter()
        .filter(|e| e.role.as_deref() == Some("user"))
        .count();
    assert!(asks >= TURNS, "{name}: {asks} user entries");
    let s = select(&conv, Some(facts.reply), RelayMode::Standard, 30);
    let prompt = summary_prompt(&s.text, &s.touched_files);
    eprintln!(
        "{name}: {} KB body, {} entries, history {} tokens, prompt {} chars, boilerplate {} chars",
        bytes.len() / 1024,
        conv.len(),
        s.estimated_tokens,
        prompt.chars().count(),
        s.boilerplate_chars
    );
    assert!(s.estimated_tokens <= TOKEN_BUDGET, "{name}");
    for (what, text) in [
        ("task", facts.task),
        ("decision 1", facts.decisions[0]),
        ("decision 2", facts.decisions[1]),
        ("latest ask", facts.latest),
        ("reply", facts.reply),
    ] {
        assert!(prompt.contains(text), "{name}: {what} missing");
    }
    // At least 80 % of the files the session edited, and of those its last ten tool calls
    // named, each counted once.
    for (what, files) in [("edited", &facts.edited), ("recent", &facts.recent)] {
        let mut distinct: Vec<&String> = files.iter().collect();
        distinct.sort();
        distinct.dedup();
        let found = distinct
            .iter()
            .filter(|f| prompt.contains(f.as_str()))
            .count();
        eprintln!("{name}: {found} of {} {what} files", distinct.len());
        assert!(!distinct.is_empty(), "{name}: no {what} files");
        assert!(
            found * 10 >= distinct.len() * 8,
            "{name}: {found}/{} {what} files",
            distinct.len()
        );
    }
    // Boilerplate: the selection's own count, and every system/developer block of the history.
    let total = prompt.chars().count();
    assert!(
        s.boilerplate_chars * 10 <= total,
        "{name}: {} of {total}",
        s.boilerplate_chars
    );
    let system_blocks: usize = s
        .text
        .split("\n\n[")
        .filter(|b| b.contains("] SYSTEM:\n") || b.contains("] DEVELOPER:\n"))
        .map(|b| b.chars().count())
        .sum();
    assert!(
        system_blocks * 10 <= total,
        "{name}: system blocks {system_blocks} of {total}"
    );
    assert!(
        !prompt.contains("gAAAA"),
        "{name}: reasoning blobs are not text"
    );
}

#[test]
fn codex_session() {
    let (body, facts) = sessions::codex(TURNS);
    check("codex", ApiShape::Responses, &body, &facts);
}

#[test]
fn claude_code_session() {
    let (body, facts) = sessions::claude_code(TURNS);
    check("claude code", ApiShape::AnthropicMessages, &body, &facts);
}

#[test]
fn chat_agent_session() {
    let (body, facts) = sessions::chat_agent(TURNS);
    check("chat agent", ApiShape::ChatCompletions, &body, &facts);
}
