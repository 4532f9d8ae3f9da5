//! Handoffs built without any model call.
//!
//! - [`extractive_handoff`]: from the selection of a summary job, when the summary model gave
//!   none (the call was rejected, its reply unparseable, or the provider unavailable). It
//!   holds the task (the session's first user ask), the latest ask, the last assistant text
//!   and the touched files, each clipped to the handoff limits.
//! - [`switch_handoff`]: at a switch that finds no stored handoff, from the request being
//!   sent: the same, the latest asks, and the readable text of the reasoning the switch
//!   removes. A switch never lands with nothing.
//!
//! A model-written handoff replaces either as soon as one is generated.
//!
//! ```
//! use context_relay_core::{ApiShape, RelayMode};
//! use context_relay_core::conversation::{Conversation, Entry};
//! use context_relay_core::{extractive::extractive_handoff, select::select};
//!
//! let conv = Conversation::new(ApiShape::ChatCompletions, vec![
//!     Entry::new(Some("user"), ["Add a --json flag to the CLI."]),
//!     Entry::new(Some("assistant"), ["Parsing works; tests next."]),
//!     Entry::new(Some("user"), ["Now write the tests."]),
//! ]);
//! let h = extractive_handoff(&select(&conv, None, RelayMode::Standard, 30)).unwrap();
//! assert!(h.summary.contains("Add a --json flag to the CLI."));
//! assert!(h.task_progress.contains("Now write the tests."));
//! ```

use serde_json::Value;

use crate::api::ApiShape;
use crate::config::RelayMode;
use crate::conversation::{Conversation, PartKind};
use crate::handoff::{
    Handoff, MAX_ITEM_CHARS, MAX_KEY_DECISIONS, MAX_SUMMARY_CHARS, MAX_TASK_PROGRESS_CHARS,
};
use crate::parse::clamp_chars;
use crate::reasoning::readable_reasoning;
use crate::select::{Selection, select};
use crate::touched::merge_entities;

/// Longest share of the summary given to each of the task and the last assistant text.
const PIECE_CHARS: usize = 900;
/// Longest share of a switch-time summary given to the newest reasoning.
const REASONING_PIECE_CHARS: usize = 600;

/// `s` on one line (whitespace runs folded), clipped to `max` chars with an ellipsis.
fn one_line(s: &str, max: usize) -> String {
    let folded = s.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut = clamp_chars(&folded, max);
    if cut.len() < folded.len() {
        format!("{cut}…")
    } else {
        cut.to_owned()
    }
}

/// The assistant's earlier texts, newest first, one line each within a handoff item.
fn earlier_replies(selection: &Selection) -> impl Iterator<Item = String> + '_ {
    selection
        .earlier_replies
        .iter()
        .take(MAX_KEY_DECISIONS)
        .map(|r| one_line(&format!("Earlier reply: {r}"), MAX_ITEM_CHARS - 1))
}

/// Appends the session's task and last assistant reply, one line each, to `summary`.
fn push_own_words(summary: &mut String, selection: &Selection) {
    if let Some(task) = &selection.task {
        summary.push_str("Task: ");
        summary.push_str(&one_line(task, PIECE_CHARS));
        summary.push('\n');
    }
    if let Some(last) = &selection.last_assistant {
        summary.push_str("Last assistant reply: ");
        summary.push_str(&one_line(last, PIECE_CHARS));
        summary.push('\n');
    }
}

/// The extractive handoff of `selection`, or `None` when it has neither a user ask nor
/// assistant text.
pub fn extractive_handoff(selection: &Selection) -> Option<Handoff> {
    if selection.task.is_none() && selection.last_assistant.is_none() {
        return None;
    }
    let mut summary =
        String::from("No model summary was available; these are the session's own words. ");
    push_own_words(&mut summary, selection);
    let summary = clamp_chars(summary.trim(), MAX_SUMMARY_CHARS).to_owned();
    let task_progress = selection
        .latest_ask
        .as_deref()
        .map(|ask| {
            let text = format!("Latest request: {}", one_line(ask, MAX_TASK_PROGRESS_CHARS));
            clamp_chars(&text, MAX_TASK_PROGRESS_CHARS).to_owned()
        })
        .unwrap_or_default();
    Some(Handoff {
        summary,
        key_decisions: earlier_replies(selection).collect(),
        task_progress,
        active_entities: merge_entities(&[], &selection.touched_files),
    })
}

/// Whether any account answered `conversation`: it holds an assistant (or `model`) turn, a
/// tool call or a tool output.
fn answered(conversation: &Conversation) -> bool {
    conversation.entries().iter().any(|e| {
        matches!(
            e.role.as_deref(),
            Some("assistant" | "model" | "tool" | "function")
        ) || e.kinds.iter().any(|k| *k != PartKind::Text)
    })
}

/// A handoff built at a switch from the request being sent, and what it was built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchHandoff {
    /// The handoff.
    pub handoff: Handoff,
    /// Number of conversation entries it was built from.
    pub message_count: u32,
}

/// What a handoff built from a chained Responses turn says of the turns it cannot see.
pub const CHAINED_NOTE: &str = "The conversation continued a response chain stored by the \
earlier account (previous_response_id); its earlier turns could not be read when it moved.";

/// Number of entries of the conversation request `body` holds: the unit of a handoff's
/// `message_count` (a summary counts the entries it read and the reply). `None` when the body
/// holds no conversation of `shape`.
///
/// ```
/// use context_relay_core::ApiShape;
/// use context_relay_core::extractive::entry_count;
///
/// let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"},
///                 {"role":"assistant","content":"hello"},{"role":"user","content":"go on"}]}"#;
/// assert_eq!(entry_count(ApiShape::ChatCompletions, body), Some(3));
/// assert_eq!(entry_count(ApiShape::ChatCompletions, b"not json"), None);
/// ```
pub fn entry_count(shape: ApiShape, body: &[u8]) -> Option<usize> {
    let value: Value = serde_json::from_slice(body).ok()?;
    Conversation::from_value(shape, &value)
        .ok()
        .map(|c| c.entries().len())
}

/// The handoff a switch carries when none is stored: built from the request being sent,
/// without a model call.
///
/// It holds the task (the first user ask), the latest asks (newest first), the last
/// assistant text, the assistant's earlier texts (newest first, in `key_decisions`: where its
/// decisions are), the files the tool calls touched, and the readable text of the reasoning
/// the switch removes ([`readable_reasoning`]: only the blobs and signatures are bound to the
/// account; their summaries and thinking text are not). Newest reasoning goes into the
/// summary, earlier pieces into what room `key_decisions` has left, each clipped: the whole stays within the
/// handoff limits (a few KB), whatever the size of the body. `None` when the body is not a
/// conversation of `shape`, holds no text at all, or holds no answer yet (no assistant turn,
/// tool call, tool output or reasoning, and no chain): the first request of a conversation,
/// such as a sub-agent's that meets its session's switch, has nothing to hand off.
///
/// ```
/// use context_relay_core::{ApiShape, RelayMode, extractive::switch_handoff};
///
/// let body = br#"{"messages": [
///   {"role": "user", "content": "Add a --json flag to the CLI."},
///   {"role": "assistant", "content": [
///     {"type": "thinking", "thinking": "The parser lives in src/cli.rs.", "signature": "s"},
///     {"type": "tool_use", "id": "t1", "name": "Edit", "input": {"file_path": "src/cli.rs"}}]},
///   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}
/// ]}"#;
/// let h = switch_handoff(ApiShape::AnthropicMessages, body, RelayMode::Standard, 30).unwrap();
/// assert!(h.handoff.summary.contains("Add a --json flag to the CLI."));
/// assert!(h.handoff.summary.contains("The parser lives in src/cli.rs."));
/// assert_eq!(h.handoff.active_entities, ["src/cli.rs"]);
/// assert_eq!(h.message_count, 3);
/// ```
pub fn switch_handoff(
    shape: ApiShape,
    body: &[u8],
    mode: RelayMode,
    max_messages: u32,
) -> Option<SwitchHandoff> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let conversation = Conversation::from_value(shape, &value).ok()?;
    let selection = select(&conversation, None, mode, max_messages);
    let reasoning = readable_reasoning(shape, &value);
    // A chained turn (`previous_response_id`, `conversation`) sends only its new items: the
    // earlier ones are in the old account's stored responses, which the new one cannot read.
    let names = |k: &str| value.get(k).is_some_and(|v| !v.is_null());
    let chained =
        shape == ApiShape::Responses && (names("previous_response_id") || names("conversation"));
    // Items the conversation leaves out that an account made: a compaction, a reference to
    // a stored item.
    let folded = value
        .get("input")
        .and_then(Value::as_array)
        .is_some_and(|items| {
            items.iter().any(|i| {
                matches!(
                    i.get("type").and_then(Value::as_str),
                    Some("compaction" | "item_reference")
                )
            })
        });
    drop(value);
    // A conversation no account has answered yet (a sub-agent's first request, a client's
    // own compacted restart) has nothing to hand off: its request holds all there is.
    if !chained && !folded && reasoning.is_empty() && !answered(&conversation) {
        return None;
    }
    let nothing_said =
        selection.task.is_none() && selection.last_assistant.is_none() && reasoning.is_empty();
    // Only a chained turn's tool results, with nothing else, still make a handoff.
    let results_alone = chained && !selection.text.trim().is_empty();
    if nothing_said && !results_alone {
        return None;
    }
    let mut summary = String::from(
        "No model summary was available; this handoff was built from the conversation itself when it moved. ",
    );
    if chained {
        summary.push_str(CHAINED_NOTE);
        summary.push(' ');
    }
    if nothing_said {
        // Tool results alone: what they said is all there is.
        summary.push_str("Latest input: ");
        summary.push_str(&one_line(&selection.text, MAX_TASK_PROGRESS_CHARS));
        summary.push(' ');
    }
    push_own_words(&mut summary, &selection);
    if let Some(newest) = reasoning.first() {
        summary.push_str("Latest reasoning: ");
        summary.push_str(&one_line(newest, REASONING_PIECE_CHARS));
    }
    let summary = clamp_chars(summary.trim(), MAX_SUMMARY_CHARS).to_owned();
    let mut task_progress = String::new();
    for (i, ask) in selection.recent_asks.iter().enumerate() {
        let label = if i == 0 {
            "Latest request: "
        } else {
            "\nEarlier request: "
        };
        task_progress.push_str(label);
        task_progress.push_str(&one_line(ask, MAX_TASK_PROGRESS_CHARS));
    }
    let task_progress = clamp_chars(&task_progress, MAX_TASK_PROGRESS_CHARS).to_owned();
    // What the assistant said before its last reply is where its decisions are; the
    // reasoning the switch removes fills what room is left.
    // Each once: a model that says the same thing at every step fills no room twice.
    let mut key_decisions: Vec<String> = Vec::with_capacity(MAX_KEY_DECISIONS);
    let pieces = earlier_replies(&selection).chain(
        reasoning
            .iter()
            .skip(1)
            .map(|r| one_line(&format!("Reasoning: {r}"), MAX_ITEM_CHARS - 1)),
    );
    for piece in pieces {
        if key_decisions.len() == MAX_KEY_DECISIONS {
            break;
        }
        if !key_decisions.contains(&piece) {
            key_decisions.push(piece);
        }
    }
    Some(SwitchHandoff {
        handoff: Handoff {
            summary,
            key_decisions,
            task_progress,
            active_entities: merge_entities(&[], &selection.touched_files),
        },
        message_count: u32::try_from(selection.source_count).unwrap_or(u32::MAX),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handoff::MAX_ACTIVE_ENTITIES;

    #[test]
    fn a_chained_turn_of_tool_results_alone_says_what_it_has() {
        let body = br#"{"previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"call_w1","output":"Paris: sunny, 21 C"}]}"#;
        let h = switch_handoff(ApiShape::Responses, body, RelayMode::Standard, 30).unwrap();
        assert!(
            h.handoff.summary.contains(CHAINED_NOTE),
            "{}",
            h.handoff.summary
        );
        assert!(h.handoff.summary.contains("Paris: sunny, 21 C"));
        // Not chained: the client sent its history, and tool results alone are no handoff.
        let unchained =
            br#"{"input":[{"type":"function_call_output","call_id":"call_w1","output":"ok"}]}"#;
        assert!(switch_handoff(ApiShape::Responses, unchained, RelayMode::Standard, 30).is_none());
        let null = br#"{"previous_response_id":null,"input":[{"type":"function_call_output","call_id":"c","output":"ok"}]}"#;
        assert!(switch_handoff(ApiShape::Responses, null, RelayMode::Standard, 30).is_none());
        // Chained with an ask: the ask as usual, and the note.
        let asked = br#"{"previous_response_id":"resp_1","input":"and now the tests"}"#;
        let h = switch_handoff(ApiShape::Responses, asked, RelayMode::Standard, 30).unwrap();
        assert!(h.handoff.summary.contains(CHAINED_NOTE));
        assert!(h.handoff.task_progress.contains("and now the tests"));
    }

    /// A conversation's first request (a sub-agent's, met by its session's switch) gets no
    /// handoff: no account answered it, and the request holds everything there is.
    #[test]
    fn a_conversation_no_account_answered_gets_none() {
        let firsts: [(ApiShape, &[u8]); 4] = [
            (
                ApiShape::AnthropicMessages,
                br#"{"system":"You are a sub-agent.","messages":[{"role":"user","content":"List every file that opens a transaction."}]}"#,
            ),
            (
                ApiShape::Responses,
                br#"{"instructions":"You are Codex.","input":[{"type":"message","role":"developer","content":"rules"},{"type":"message","role":"user","content":"Fix the tests."}]}"#,
            ),
            (
                ApiShape::ChatCompletions,
                br#"{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}"#,
            ),
            (
                ApiShape::Gemini,
                br#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#,
            ),
        ];
        for (shape, body) in firsts {
            assert!(
                switch_handoff(shape, body, RelayMode::Standard, 30).is_none(),
                "{shape:?}"
            );
        }
        // Answered once (a reply, or a tool call alone): a handoff.
        let replied = br#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hello."},{"role":"user","content":"go on"}]}"#;
        assert!(
            switch_handoff(ApiShape::ChatCompletions, replied, RelayMode::Standard, 30).is_some()
        );
        let called = br#"{"input":[{"type":"message","role":"user","content":"Fix it."},{"type":"function_call","name":"shell","call_id":"c","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"ok"}]}"#;
        assert!(switch_handoff(ApiShape::Responses, called, RelayMode::Standard, 30).is_some());
        // An account's compaction stands for the answers it folded away.
        let compacted = br#"{"input":[{"type":"message","role":"user","content":"Fix it."},{"type":"compaction","encrypted_content":"c"},{"type":"message","role":"user","content":"go on"}]}"#;
        assert!(switch_handoff(ApiShape::Responses, compacted, RelayMode::Standard, 30).is_some());
    }

    #[test]
    fn nothing_to_extract() {
        assert!(extractive_handoff(&Selection::default()).is_none());
    }

    /// What the assistant said along the way (where its decisions are) comes before the
    /// reasoning pieces, newest first; its last reply is the summary's, not repeated.
    #[test]
    fn key_decisions_hold_the_assistants_earlier_replies_first() {
        let built = |messages: Vec<serde_json::Value>| {
            let body = serde_json::json!({ "messages": messages }).to_string();
            let mode = RelayMode::Standard;
            switch_handoff(ApiShape::AnthropicMessages, body.as_bytes(), mode, 30)
                .unwrap()
                .handoff
        };
        let mut messages =
            vec![serde_json::json!({"role": "user", "content": "Rename the crate."})];
        for i in 1..=12 {
            messages.push(serde_json::json!({"role": "assistant", "content": [
                {"type": "thinking", "thinking": format!("THINKING-{i}"), "signature": "s"},
                {"type": "text", "text": format!("DECISION-{i}: keep step {i}.")}]}));
            messages.push(serde_json::json!({"role": "user", "content": format!("go on {i}")}));
        }
        let h = built(messages);
        assert!(h.summary.contains("DECISION-12"), "{}", h.summary);
        assert_eq!(h.key_decisions.len(), MAX_KEY_DECISIONS);
        assert!(
            h.key_decisions[0].starts_with("Earlier reply: DECISION-11"),
            "{:?}",
            h.key_decisions
        );
        assert!(h.key_decisions.iter().all(|d| !d.contains("DECISION-12")));
        assert!(
            h.key_decisions
                .iter()
                .all(|d| d.chars().count() < MAX_ITEM_CHARS)
        );
        // The same reasoning at every step is one decision.
        let mut same = vec![serde_json::json!({"role": "user", "content": "Go."})];
        for _ in 0..4 {
            same.push(serde_json::json!({"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Considered the request.", "signature": "s"},
                {"type": "tool_use", "id": "t", "name": "Bash", "input": {}}]}));
            same.push(serde_json::json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}));
        }
        assert_eq!(
            built(same).key_decisions,
            ["Reasoning: Considered the request."]
        );
    }

    #[test]
    fn bounded_and_carries_files() {
        let long = "word ".repeat(5000);
        let s = Selection {
            task: Some(long.clone()),
            latest_ask: Some(long.clone()),
            last_assistant: Some(long),
            touched_files: (0..12).map(|i| format!("f{i}.rs")).collect(),
            ..Selection::default()
        };
        let h = extractive_handoff(&s).expect("handoff");
        assert!(h.summary.chars().count() <= MAX_SUMMARY_CHARS);
        assert!(h.task_progress.chars().count() <= MAX_TASK_PROGRESS_CHARS);
        assert_eq!(h.active_entities.len(), MAX_ACTIVE_ENTITIES);
        assert!(h.summary.contains("Task: word word"));
        assert!(h.summary.contains("Last assistant reply: word"));
    }
}
