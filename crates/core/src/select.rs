//! History selection: which part of a conversation is summarised, and how it is written out
//! for the summary prompt (DESIGN §4.2).
//!
//! Source = the entries of the [`Conversation`] plus, when captured, the assistant reply of
//! this turn (appended as an `assistant` entry). Then:
//!
//! - entries without text (blank once trimmed) are left out before anything is counted, so they
//!   never take one of the N places and never show up as an empty `[i] ROLE:` block;
//! - system-like = role `system` or `developer` ([`Entry::is_system_like`]);
//! - [`RelayMode::Standard`]: all system-like entries, in their original order, followed by the
//!   last N others; [`RelayMode::SchemaLocked`]: the last N others only. N is
//!   `max_messages` (at least 1);
//! - the token estimate is `ceil(chars / 4)` of the formatted history ([`estimate_tokens`]);
//!   while it exceeds [`TOKEN_BUDGET`] and more than the minimum remain (standard: system
//!   count + 1; schema-locked: 1), the oldest non-system entry is dropped;
//! - still over budget: in standard mode with system entries, only the system entries are kept;
//!   otherwise the last non-system entry alone (already the state the loop ends in), so a
//!   conversation that had text never yields an empty selection. That lone entry is kept whole
//!   even when it alone exceeds the budget: cutting it would summarise a fragment.
//!
//! Formatting: entry `i` becomes `[i] ROLE:` + newline + its parts joined by newlines, with `i`
//! counted **from 1** over the selected entries and `ROLE` upper-cased (`UNKNOWN` when missing
//! or blank); entries are separated by one blank line.
//!
//! ```
//! use context_relay_core::{ApiShape, RelayMode};
//! use context_relay_core::conversation::{Conversation, Entry};
//! use context_relay_core::select::select;
//!
//! let conv = Conversation::new(ApiShape::ChatCompletions, vec![
//!     Entry::new(Some("system"), ["Be terse."]),
//!     Entry::new(Some("user"), ["Rename foo to bar."]),
//! ]);
//! let s = select(&conv, Some("Done: 3 files changed."), RelayMode::Standard, 30);
//! assert_eq!(s.text, "[1] SYSTEM:\nBe terse.\n\n[2] USER:\nRename foo to bar.\n\n[3] ASSISTANT:\nDone: 3 files changed.");
//! assert_eq!((s.source_count, s.selected), (3, 3));
//! ```

use std::fmt::Write as _;

use crate::config::RelayMode;
use crate::conversation::{Conversation, Entry};

/// Largest estimated size of the formatted history, in tokens.
pub const TOKEN_BUDGET: usize = 8000;
/// Chars per token in the size estimate.
pub const CHARS_PER_TOKEN: usize = 4;
/// Role given to the captured assistant reply of this turn.
pub const REPLY_ROLE: &str = "assistant";
/// Role label written for an entry without a role.
pub const UNKNOWN_ROLE: &str = "UNKNOWN";

/// The history chosen for a summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// The formatted history, ready for [`crate::prompt::summary_prompt`]; empty when nothing
    /// was selected.
    pub text: String,
    /// Number of source entries: the conversation's entries plus the captured reply, if any
    /// (the handoff's `message_count`).
    pub source_count: usize,
    /// Number of entries in `text`.
    pub selected: usize,
    /// How many of them are system-like.
    pub system_selected: usize,
    /// [`estimate_tokens`] of `text`.
    pub estimated_tokens: usize,
    /// Whether the budget fallback (system entries only, or one entry alone) was taken.
    pub over_budget: bool,
}

impl Selection {
    /// Whether there is nothing to summarise.
    pub fn is_empty(&self) -> bool {
        self.selected == 0
    }
}

/// `ceil(chars / 4)`: the token estimate of `text` (chars, not bytes).
pub fn estimate_tokens(text: &str) -> usize {
    text.chars().count().div_ceil(CHARS_PER_TOKEN)
}

struct Item {
    role: String,
    text: String,
    /// `role` + `text` in chars, so sizes are recomputed without re-reading the text.
    chars: usize,
    system: bool,
}

impl Item {
    fn new(role: Option<&str>, text: String, system: bool) -> Self {
        let role = match role.map(str::trim) {
            Some(r) if !r.is_empty() => r.to_uppercase(),
            _ => UNKNOWN_ROLE.to_owned(),
        };
        let chars = role.chars().count() + text.chars().count();
        Self {
            role,
            text,
            chars,
            system,
        }
    }

    fn from_entry(e: &Entry) -> Self {
        Self::new(e.role.as_deref(), e.text(), e.is_system_like())
    }
}

/// Chooses and formats the history to summarise (see the module docs for the rules).
pub fn select(
    conv: &Conversation,
    assistant_reply: Option<&str>,
    mode: RelayMode,
    max_messages: u32,
) -> Selection {
    let reply = assistant_reply.filter(|r| !r.trim().is_empty());
    let n = usize::try_from(max_messages.max(1)).unwrap_or(usize::MAX);
    let entries = conv.entries();

    let systems: Vec<Item> = match mode {
        RelayMode::Standard => entries
            .iter()
            .filter(|e| e.is_system_like() && !e.is_blank())
            .map(Item::from_entry)
            .collect(),
        RelayMode::SchemaLocked => Vec::new(),
    };
    // Only the last N others are ever formatted, so a long conversation costs N joins.
    let mut others: Vec<Item> = Vec::with_capacity(n.min(entries.len() + 1));
    let reply_slots = usize::from(reply.is_some());
    let from_conv = n - reply_slots.min(n);
    let mut picked: Vec<&Entry> = entries
        .iter()
        .rev()
        .filter(|e| !e.is_system_like() && !e.is_blank())
        .take(from_conv)
        .collect();
    picked.reverse();
    others.extend(picked.into_iter().map(Item::from_entry));
    if let Some(r) = reply {
        others.push(Item::new(Some(REPLY_ROLE), r.to_owned(), false));
    }

    let budget_chars = TOKEN_BUDGET * CHARS_PER_TOKEN;
    let size = |start: usize| formatted_chars(systems.iter().chain(&others[start..]));
    // `start` is the oldest kept non-system entry. Keeping at least one of them is the
    // minimum of both modes (standard: system count + 1 entries; schema-locked: 1).
    let mut start = 0;
    while others.len() - start > 1 && size(start) > budget_chars {
        start += 1;
    }
    let over_budget = size(start) > budget_chars;
    if over_budget && !systems.is_empty() {
        start = others.len();
    }
    let chosen: Vec<&Item> = systems.iter().chain(&others[start..]).collect();
    let mut text = String::with_capacity(chosen.iter().map(|i| i.text.len() + 16).sum());
    for (pos, item) in chosen.iter().enumerate() {
        if pos > 0 {
            text.push_str("\n\n");
        }
        // Writing into a String cannot fail.
        let _ = write!(text, "[{}] {}:\n{}", pos + 1, item.role, item.text);
    }
    Selection {
        estimated_tokens: estimate_tokens(&text),
        text,
        source_count: entries.len() + reply_slots,
        selected: chosen.len(),
        system_selected: chosen.iter().filter(|i| i.system).count(),
        over_budget,
    }
}

/// Char count of the formatted history of `items`, without building it.
fn formatted_chars<'a>(items: impl Iterator<Item = &'a Item>) -> usize {
    let mut total = 0usize;
    for (pos, item) in items.enumerate() {
        let index = pos + 1;
        // "[" index "] " role ":\n" text, plus the blank-line separator before all but the first.
        total += decimal_digits(index) + 5 + item.chars + if pos > 0 { 2 } else { 0 };
    }
    total
}

fn decimal_digits(mut n: usize) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

#[cfg(test)]
mod tests {
    use crate::api::ApiShape;

    use super::*;

    fn conv(entries: &[(&str, &str)]) -> Conversation {
        Conversation::new(
            ApiShape::ChatCompletions,
            entries
                .iter()
                .map(|(r, t)| Entry::new(Some(r), [*t]))
                .collect(),
        )
    }

    fn users(n: usize) -> Vec<(String, String)> {
        (0..n)
            .map(|i| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                (role.to_owned(), format!("m{i}"))
            })
            .collect()
    }

    fn owned(list: &[(String, String)]) -> Conversation {
        let v: Vec<(&str, &str)> = list.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        conv(&v)
    }

    #[test]
    fn standard_keeps_systems_and_last_n() {
        let mut list = vec![("system".to_owned(), "S1".to_owned())];
        list.extend(users(10));
        list.insert(4, ("developer".to_owned(), "D1".to_owned()));
        let s = select(&owned(&list), None, RelayMode::Standard, 5);
        assert_eq!(s.selected, 7);
        assert_eq!(s.system_selected, 2);
        assert_eq!(s.source_count, 12);
        assert!(
            s.text
                .starts_with("[1] SYSTEM:\nS1\n\n[2] DEVELOPER:\nD1\n\n[3] ASSISTANT:\nm5")
        );
        assert!(s.text.ends_with("[6] USER:\nm8\n\n[7] ASSISTANT:\nm9"));
        assert!(!s.text.contains("m4"));
    }

    #[test]
    fn schema_locked_drops_system_like() {
        let list = vec![
            ("system".to_owned(), "S".to_owned()),
            ("developer".to_owned(), "D".to_owned()),
            ("user".to_owned(), "u".to_owned()),
            ("Developer".to_owned(), "D2".to_owned()),
            ("assistant".to_owned(), "a".to_owned()),
        ];
        let s = select(&owned(&list), None, RelayMode::SchemaLocked, 30);
        assert_eq!(s.text, "[1] USER:\nu\n\n[2] ASSISTANT:\na");
        assert_eq!(s.system_selected, 0);
        assert_eq!(s.source_count, 5);
    }

    #[test]
    fn reply_is_appended_and_counts_towards_n() {
        let s = select(
            &owned(&users(10)),
            Some("the reply"),
            RelayMode::Standard,
            5,
        );
        assert_eq!(s.selected, 5);
        assert!(s.text.starts_with("[1] USER:\nm6"));
        assert!(s.text.ends_with("[5] ASSISTANT:\nthe reply"));
        assert_eq!(s.source_count, 11);
        let s = select(&owned(&users(2)), Some("  "), RelayMode::Standard, 5);
        assert_eq!(s.source_count, 2, "a blank reply is no entry");
    }

    #[test]
    fn blank_entries_and_missing_roles() {
        let c = Conversation::new(
            ApiShape::ChatCompletions,
            vec![
                Entry::new(None, ["who?"]),
                Entry::new(Some("assistant"), Vec::<String>::new()),
                Entry::new(Some(" "), ["  "]),
                Entry::new(Some(""), ["blank role"]),
                Entry::new(Some("user"), ["a", "b"]),
            ],
        );
        let s = select(&c, None, RelayMode::Standard, 30);
        assert_eq!(
            s.text,
            "[1] UNKNOWN:\nwho?\n\n[2] UNKNOWN:\nblank role\n\n[3] USER:\na\nb"
        );
        assert_eq!(s.source_count, 5);
    }

    #[test]
    fn empty_conversation_selects_nothing() {
        let s = select(&conv(&[]), None, RelayMode::Standard, 30);
        assert!(s.is_empty());
        assert_eq!(s.text, "");
        let s = select(&conv(&[("system", "S")]), None, RelayMode::SchemaLocked, 30);
        assert!(s.is_empty());
    }

    #[test]
    fn trimming_drops_oldest_non_system_first() {
        let chunk = "x".repeat(12_000); // 3 000 tokens each
        let list = [
            ("system", "sys"),
            ("user", chunk.as_str()),
            ("assistant", chunk.as_str()),
            ("user", chunk.as_str()),
            ("assistant", "last"),
        ];
        let s = select(&conv(&list), None, RelayMode::Standard, 30);
        assert!(!s.over_budget);
        assert!(s.estimated_tokens <= TOKEN_BUDGET);
        assert_eq!(s.selected, 4, "one 12k entry had to go");
        assert!(
            s.text
                .starts_with("[1] SYSTEM:\nsys\n\n[2] ASSISTANT:\nxxx")
        );
        assert!(s.text.ends_with("[4] ASSISTANT:\nlast"));
        assert_eq!(s.source_count, 5);
    }

    #[test]
    fn oversized_single_message_is_still_selected() {
        let huge = "y".repeat(100_000);
        for mode in [RelayMode::Standard, RelayMode::SchemaLocked] {
            let s = select(&conv(&[("user", "old"), ("user", &huge)]), None, mode, 30);
            assert!(s.over_budget);
            assert_eq!(s.selected, 1);
            assert!(s.text.starts_with("[1] USER:\nyyy"));
            assert_eq!(s.text.chars().count(), 100_000 + "[1] USER:\n".len());
        }
        // With system entries, standard mode falls back to them alone.
        let s = select(
            &conv(&[("system", "rules"), ("user", &huge)]),
            None,
            RelayMode::Standard,
            30,
        );
        assert!(s.over_budget);
        assert_eq!(s.text, "[1] SYSTEM:\nrules");
        // Schema-locked never keeps system entries, so the big one stays alone.
        let s = select(
            &conv(&[("system", "rules"), ("user", &huge)]),
            None,
            RelayMode::SchemaLocked,
            30,
        );
        assert_eq!(s.selected, 1);
        assert!(s.text.starts_with("[1] USER:\n"));
    }

    #[test]
    fn size_arithmetic_matches_the_text() {
        let mut list = vec![("system".to_owned(), "é".repeat(30))];
        list.extend(users(120));
        let c = owned(&list);
        for n in [1, 5, 9, 10, 11, 99, 100] {
            let s = select(&c, Some("réply"), RelayMode::Standard, n);
            let items: Vec<Item> = c
                .entries()
                .iter()
                .filter(|e| e.is_system_like())
                .map(Item::from_entry)
                .chain(
                    c.entries()
                        .iter()
                        .filter(|e| !e.is_system_like())
                        .rev()
                        .take(usize::try_from(n).expect("small") - 1)
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .map(Item::from_entry),
                )
                .chain([Item::new(Some("assistant"), "réply".into(), false)])
                .collect();
            assert_eq!(
                formatted_chars(items.iter()),
                s.text.chars().count(),
                "n={n}"
            );
            assert_eq!(s.estimated_tokens, s.text.chars().count().div_ceil(4));
        }
    }

    #[test]
    fn token_estimate_counts_chars() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(estimate_tokens("日本語日"), 1);
        assert_eq!(decimal_digits(9), 1);
        assert_eq!(decimal_digits(10), 2);
        assert_eq!(decimal_digits(100), 3);
    }
}
