//! A handoff built without any model call, from the selection alone: what a switch carries
//! when the summary model could not give one (the call was rejected, its reply unparseable,
//! or the provider unavailable).
//!
//! It holds the task (the session's first user ask), the latest ask, the last assistant text
//! and the touched files, each clipped to the handoff limits. A model-written handoff replaces
//! it as soon as one is generated.
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

use crate::handoff::{Handoff, MAX_SUMMARY_CHARS, MAX_TASK_PROGRESS_CHARS};
use crate::parse::clamp_chars;
use crate::select::Selection;
use crate::touched::merge_entities;

/// Longest share of the summary given to each of the task and the last assistant text.
const PIECE_CHARS: usize = 900;

/// The extractive handoff of `selection`, or `None` when it has neither a user ask nor
/// assistant text.
pub fn extractive_handoff(selection: &Selection) -> Option<Handoff> {
    let one_line = |s: &str, max: usize| -> String {
        let folded = s.split_whitespace().collect::<Vec<_>>().join(" ");
        let cut = clamp_chars(&folded, max);
        if cut.len() < folded.len() {
            format!("{cut}…")
        } else {
            cut.to_owned()
        }
    };
    if selection.task.is_none() && selection.last_assistant.is_none() {
        return None;
    }
    let mut summary =
        String::from("No model summary was available; these are the session's own words. ");
    if let Some(task) = &selection.task {
        summary.push_str("Task: ");
        summary.push_str(&one_line(task, PIECE_CHARS));
        summary.push('\n');
    }
    if let Some(last) = &selection.last_assistant {
        summary.push_str("Last assistant reply: ");
        summary.push_str(&one_line(last, PIECE_CHARS));
    }
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
        key_decisions: Vec::new(),
        task_progress,
        active_entities: merge_entities(&[], &selection.touched_files),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handoff::MAX_ACTIVE_ENTITIES;

    #[test]
    fn nothing_to_extract() {
        assert!(extractive_handoff(&Selection::default()).is_none());
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
