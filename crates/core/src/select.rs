//! History selection: which part of a conversation is summarised, and how it is written out
//! for the summary prompt.
//!
//! Source = the entries of the [`Conversation`] plus, when captured, the assistant reply of
//! this turn (one more `assistant` entry at the end). Each text part is put in a class:
//!
//! - **boilerplate**: every part of a `system` / `developer` entry, and user text that is client
//!   context ([`crate::boilerplate`]). The next account receives the client's system prompt
//!   anyway, so boilerplate gets at most [`BOILERPLATE_SHARE`] of the budget (and never more than
//!   a ninth of the work written, so it stays ≤ 10 % of the history), each piece clipped to
//!   [`BOILERPLATE_PIECE_CHARS`] with a visible marker; nothing in
//!   [`RelayMode::SchemaLocked`];
//! - **work**, filled by priority, newest first inside a class: the session's first user ask
//!   (the task), the latest user ask, this turn's reply, earlier user asks, assistant text,
//!   tool calls, tool outputs (one line each, see [`crate::conversation`]). Only the tool entries
//!   among the last `max_messages` entries holding tool calls or outputs are considered; user and
//!   assistant text is looked for across the whole conversation. Each piece is clipped
//!   ([`TASK_CHARS`], [`REPLY_CHARS`], [`ASK_CHARS`]) so that the task, the latest ask and the
//!   reply always fit together; a piece that does not fit the rest of the budget is left out.
//!
//! The chosen pieces are written in conversation order: `[i] ROLE:` and a newline, then the
//! entry's kept pieces joined by newlines, with `i` the entry's position in the conversation
//! (from 1; the reply is `len + 1`) and `ROLE` upper-cased (`UNKNOWN` when missing); entries are
//! separated by a blank line, and every run of left-out entries is marked
//! `[… N entries omitted …]`. The written history never exceeds [`TOKEN_BUDGET`] estimated
//! tokens, and is never empty when the conversation had text.
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
//! // The system prompt is boilerplate: it may take a ninth of the work written, too little here.
//! assert_eq!(s.text, "[… 1 entry omitted …]\n\n[2] USER:\nRename foo to bar.\n\n[3] ASSISTANT:\nDone: 3 files changed.");
//! assert_eq!(s.task.as_deref(), Some("Rename foo to bar."));
//! assert_eq!((s.source_count, s.selected), (3, 2));
//! ```

use std::borrow::Cow;
use std::fmt::Write as _;

use crate::boilerplate::is_client_context;
use crate::config::RelayMode;
use crate::conversation::{Conversation, PartKind, TOOL_LINE_MAX_CHARS, tool_output_line};
use crate::parse::clamp_chars;
use crate::touched::touched_files;

/// Largest estimated size of the formatted history, in tokens.
pub const TOKEN_BUDGET: usize = 8000;
/// Chars per token in the size estimate.
pub const CHARS_PER_TOKEN: usize = 4;
/// Share of the budget boilerplate may take, in percent.
pub const BOILERPLATE_SHARE: usize = 10;
/// Longest boilerplate piece kept, in chars (marker included).
pub const BOILERPLATE_PIECE_CHARS: usize = 600;
/// Longest first or latest user ask kept, in chars (marker included).
pub const TASK_CHARS: usize = 6000;
/// Longest captured reply of this turn kept, in chars (marker included).
pub const REPLY_CHARS: usize = 8000;
/// Longest earlier user ask or assistant text kept, in chars (marker included).
pub const ASK_CHARS: usize = 2000;
/// Most user asks kept in [`Selection::recent_asks`].
pub const RECENT_ASKS: usize = 3;
/// Most assistant texts kept in [`Selection::earlier_replies`].
pub const RECENT_REPLIES: usize = 8;
/// Role given to the captured assistant reply of this turn.
pub const REPLY_ROLE: &str = "assistant";
/// Role label written for an entry without a role.
pub const UNKNOWN_ROLE: &str = "UNKNOWN";

/// Chars of the whole budget.
const BUDGET_CHARS: usize = TOKEN_BUDGET * CHARS_PER_TOKEN;
/// Smallest boilerplate piece worth writing.
const MIN_PIECE_CHARS: usize = 80;

/// The history chosen for a summary, and the facts an extractive handoff is built from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// The formatted history, ready for [`crate::prompt::summary_prompt`]; empty when the
    /// conversation had no text.
    pub text: String,
    /// Number of source entries: the conversation's entries plus the captured reply, if any
    /// (the handoff's `message_count`).
    pub source_count: usize,
    /// Number of entries written in `text`.
    pub selected: usize,
    /// Chars of `text` spent on boilerplate (pieces and the headers of entries holding only
    /// boilerplate).
    pub boilerplate_chars: usize,
    /// [`estimate_tokens`] of `text`.
    pub estimated_tokens: usize,
    /// The session's first user ask (clipped), when there is one.
    pub task: Option<String>,
    /// The latest user ask (clipped), when there is one.
    pub latest_ask: Option<String>,
    /// The newest user asks, newest first: at most [`RECENT_ASKS`], each clipped to
    /// [`ASK_CHARS`].
    pub recent_asks: Vec<String>,
    /// The latest assistant text: this turn's reply when captured, else the last assistant
    /// text of the conversation (clipped).
    pub last_assistant: Option<String>,
    /// The assistant texts before [`last_assistant`](Self::last_assistant) among the selected
    /// entries, newest first: at most [`RECENT_REPLIES`], each clipped to [`ASK_CHARS`] (where
    /// an extractive handoff finds what was decided).
    pub earlier_replies: Vec<String>,
    /// Files the session's tool calls touched, newest first ([`crate::touched`]).
    pub touched_files: Vec<String>,
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

/// Classes of pieces, in priority order (lower first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    Task,
    Latest,
    Reply,
    Ask,
    Assistant,
    ToolCall,
    ToolOutput,
    Boilerplate,
}

/// One piece of an entry that can be selected.
struct Piece<'a> {
    entry: usize,
    /// Order inside the entry.
    order: usize,
    class: Class,
    text: Cow<'a, str>,
    /// For an assistant text that continues the one before it with nothing in between (a
    /// reply a client keeps as one part, or one entry, per streamed chunk): what joins them
    /// into one reply ([`reply_joint`]).
    continues: Option<&'static str>,
}

/// Chars of `s`, without counting when the byte length already bounds it.
fn chars_of(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        s.chars().count()
    }
}

/// `text` cut to at most `max` chars, the cut marked visibly.
fn clip(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max || chars_of(text) <= max {
        return Cow::Borrowed(text);
    }
    let total = chars_of(text);
    // The marker names the cut size; reserve its longest form.
    let marker_room = 32;
    let keep = max.saturating_sub(marker_room);
    let head = clamp_chars(text, keep).trim_end();
    let cut = total - chars_of(head);
    Cow::Owned(format!("{head} [… {cut} chars clipped …]"))
}

fn decimal_digits(mut n: usize) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

/// What goes between two parts of one assistant reply, `prev` and `next` as sent: nothing
/// where a stream cut a word or a sentence in two, a space where the cut fell on one, a line
/// break after a finished sentence or where the client put one.
fn reply_joint(prev: &str, next: &str) -> &'static str {
    let (end, start) = (prev.chars().next_back(), next.chars().next());
    if end == Some('\n') || start == Some('\n') {
        "\n"
    } else if end.is_some_and(char::is_whitespace) || start.is_some_and(char::is_whitespace) {
        " "
    } else if prev.trim_end().ends_with(['.', '!', '?', ':']) {
        "\n"
    } else {
        ""
    }
}

fn role_label(role: Option<&str>) -> String {
    match role.map(str::trim) {
        Some(r) if !r.is_empty() => r.to_uppercase(),
        _ => UNKNOWN_ROLE.to_owned(),
    }
}

/// Length of an omission marker for `n` entries, with its separator.
fn marker_chars(n: usize) -> usize {
    // "[… N entries omitted …]" + "\n\n"
    22 + decimal_digits(n) + 2
}

/// Chooses and formats the history to summarise (see the module docs for the rules).
pub fn select(
    conv: &Conversation,
    assistant_reply: Option<&str>,
    mode: RelayMode,
    max_messages: u32,
) -> Selection {
    let entries = conv.entries();
    let reply = assistant_reply.map(str::trim).filter(|r| !r.is_empty());
    let source_count = entries.len() + usize::from(reply.is_some());
    let max_tools = usize::try_from(max_messages.max(1)).unwrap_or(usize::MAX);

    // Tool entries considered: the last `max_messages` entries holding tool pieces.
    let mut tool_entries_left = max_tools;
    let mut tools_from = entries.len();
    for (i, e) in entries.iter().enumerate().rev() {
        if tool_entries_left == 0 {
            break;
        }
        // A system or developer entry is boilerplate whatever its parts: it takes no place in
        // the window.
        if !e.is_system_like()
            && (e.kinds.iter().any(|k| *k != PartKind::Text) || is_tool_role(e.role.as_deref()))
        {
            tool_entries_left -= 1;
            tools_from = i;
        }
    }

    let mut pieces: Vec<Piece<'_>> = Vec::new();
    let mut asks: Vec<usize> = Vec::new();
    // The raw text of the assistant part just taken, while nothing else has come since: the
    // next assistant part continues the same reply (a streamed reply a client keeps as one
    // part per chunk, or as one entry per chunk).
    let mut reply_tail: Option<&str> = None;
    for (i, e) in entries.iter().enumerate() {
        let system = e.is_system_like();
        let user = e
            .role
            .as_deref()
            .is_some_and(|r| r.eq_ignore_ascii_case("user"));
        let tool_role = is_tool_role(e.role.as_deref());
        let mut ask_text: Vec<&str> = Vec::new();
        let mut first_ask_part = 0;
        for (p, part) in e.parts.iter().enumerate() {
            if part.trim().is_empty() {
                continue;
            }
            let kind = e.kind(p);
            let tail = reply_tail.take();
            let class = if system {
                Class::Boilerplate
            } else if kind == PartKind::ToolCall {
                Class::ToolCall
            } else if kind == PartKind::ToolOutput || tool_role {
                Class::ToolOutput
            } else if user && is_client_context(part) {
                Class::Boilerplate
            } else if user {
                if ask_text.is_empty() {
                    first_ask_part = p;
                }
                ask_text.push(part.trim());
                continue;
            } else {
                Class::Assistant
            };
            if matches!(class, Class::ToolCall | Class::ToolOutput) && i < tools_from {
                continue;
            }
            let text = match class {
                Class::ToolOutput if kind == PartKind::Text => Cow::Owned(tool_output_line(part)),
                Class::Assistant => {
                    reply_tail = Some(part.as_str());
                    Cow::Borrowed(part.trim())
                }
                _ => Cow::Borrowed(part.as_str()),
            };
            let continues = match class {
                Class::Assistant => tail.map(|prev| reply_joint(prev, part)),
                _ => None,
            };
            pieces.push(Piece {
                entry: i,
                order: p,
                class,
                text,
                continues,
            });
        }
        if !ask_text.is_empty() {
            asks.push(pieces.len());
            let text = if ask_text.len() == 1 {
                Cow::Borrowed(ask_text[0])
            } else {
                Cow::Owned(ask_text.join("\n"))
            };
            pieces.push(Piece {
                entry: i,
                order: first_ask_part,
                class: Class::Ask,
                text,
                continues: None,
            });
        }
    }
    if let (Some(&first), Some(&last)) = (asks.first(), asks.last()) {
        pieces[first].class = Class::Task;
        if last != first {
            pieces[last].class = Class::Latest;
        }
    }
    if let Some(r) = reply {
        pieces.push(Piece {
            entry: entries.len(),
            order: 0,
            class: Class::Reply,
            text: Cow::Borrowed(r),
            continues: None,
        });
    }
    // Clip each piece to its class limit.
    for piece in &mut pieces {
        let max = match piece.class {
            Class::Task | Class::Latest => TASK_CHARS,
            Class::Reply => REPLY_CHARS,
            Class::Ask | Class::Assistant => ASK_CHARS,
            Class::ToolCall | Class::ToolOutput => TOOL_LINE_MAX_CHARS,
            Class::Boilerplate => continue,
        };
        let clipped = match clip(&piece.text, max) {
            Cow::Owned(s) => Some(s),
            Cow::Borrowed(_) => None,
        };
        if let Some(s) = clipped {
            piece.text = Cow::Owned(s);
        }
    }

    let roles: Vec<String> = entries
        .iter()
        .map(|e| role_label(e.role.as_deref()))
        .chain(reply.map(|_| role_label(Some(REPLY_ROLE))))
        .collect();
    let mut plan = Plan::new(roles.len());
    // Header, separator and a possible omission marker before it, charged per opened entry;
    // one more marker may follow the last entry.
    let open_cost = |entry: usize| {
        // "[" i "] " ROLE ":\n", the blank line before it, and a marker before that.
        decimal_digits(entry + 1) + roles[entry].chars().count() + 5 + 2 + marker_chars(roles.len())
    };
    let boilerplate_budget = match mode {
        RelayMode::Standard => BUDGET_CHARS * BOILERPLATE_SHARE / 100,
        RelayMode::SchemaLocked => 0,
    };
    let work_budget =
        BUDGET_CHARS - BUDGET_CHARS * BOILERPLATE_SHARE / 100 - marker_chars(roles.len());

    // Work, by class then newest first.
    let mut order: Vec<usize> = (0..pieces.len())
        .filter(|&i| pieces[i].class != Class::Boilerplate)
        .collect();
    order.sort_by_key(|&i| (pieces[i].class, std::cmp::Reverse(pieces[i].entry)));
    let mut used = 0usize;
    for i in order {
        let piece = &pieces[i];
        let cost = chars_of(&piece.text)
            + 1
            + if plan.open[piece.entry] {
                0
            } else {
                open_cost(piece.entry)
            };
        if used + cost <= work_budget {
            used += cost;
            plan.take(piece.entry, i);
        }
    }
    let header = |entry: usize| decimal_digits(entry + 1) + roles[entry].chars().count() + 5;
    // The work as it will be written, markers aside.
    let work_chars = {
        let mut per_entry = vec![0usize; roles.len()];
        let mut total = 0usize;
        for &k in &plan.kept {
            let p = &pieces[k];
            total += chars_of(p.text.trim());
            per_entry[p.entry] += 1;
        }
        let opened: Vec<usize> = (0..roles.len()).filter(|&e| per_entry[e] > 0).collect();
        total += opened
            .iter()
            .map(|&e| header(e) + per_entry[e] - 1)
            .sum::<usize>();
        total + 2 * opened.len().saturating_sub(1)
    };

    // Boilerplate, in conversation order, within its share (≤ a ninth of the work, so ≤ 10 %
    // of the whole; all of its share when there is no work at all).
    let allowance = if plan.kept.is_empty() {
        boilerplate_budget
    } else {
        boilerplate_budget.min(work_chars / 9)
    };
    let mut boilerplate_used = 0usize;
    let mut clipped: Vec<(usize, String)> = Vec::new();
    for (i, piece) in pieces.iter().enumerate() {
        if piece.class != Class::Boilerplate {
            continue;
        }
        let opened = plan.open[piece.entry];
        // What the piece adds to the text beyond its own chars: a newline inside an open
        // entry, else a header and a blank line (the first entry of all has no blank line,
        // which only over-counts).
        let exact_extra = if opened { 1 } else { header(piece.entry) + 2 };
        let charged_extra = if opened { 1 } else { open_cost(piece.entry) };
        let by_share = allowance.saturating_sub(boilerplate_used + exact_extra);
        let by_budget =
            (BUDGET_CHARS - marker_chars(roles.len())).saturating_sub(used + charged_extra);
        let max = by_share.min(by_budget).min(BOILERPLATE_PIECE_CHARS);
        if max < MIN_PIECE_CHARS {
            continue;
        }
        let text = clip(piece.text.trim(), max).into_owned();
        let chars = chars_of(&text);
        boilerplate_used += chars + exact_extra;
        used += chars + charged_extra;
        clipped.push((i, text));
        plan.take(piece.entry, i);
    }
    for (i, text) in clipped {
        pieces[i].text = Cow::Owned(text);
    }

    let text = render(&pieces, &plan, &roles);
    let boilerplate_chars = boilerplate_used.min(text.chars().count());
    // The conversation's last assistant reply is `last_assistant` when no reply was captured.
    let mut replies = last_replies(&pieces, RECENT_REPLIES + 1).into_iter();
    let last_assistant = match reply {
        Some(r) => Some(clip(r, ASK_CHARS).into_owned()),
        None => replies.next(),
    };
    let find = |class: Class| {
        pieces
            .iter()
            .find(|p| p.class == class)
            .map(|p| p.text.clone().into_owned())
    };
    let task = find(Class::Task);
    let latest_ask = find(Class::Latest).or_else(|| task.clone());
    let recent_asks = asks
        .iter()
        .rev()
        .take(RECENT_ASKS)
        .map(|&i| clip(&pieces[i].text, ASK_CHARS).into_owned())
        .collect();
    let earlier_replies = replies.take(RECENT_REPLIES).collect();
    Selection {
        estimated_tokens: estimate_tokens(&text),
        text,
        source_count,
        selected: plan.open.iter().filter(|o| **o).count(),
        boilerplate_chars,
        task,
        latest_ask,
        recent_asks,
        last_assistant,
        earlier_replies,
        touched_files: touched_files(conv),
    }
}

/// The last `n` assistant replies of `pieces`, newest first, each the texts that continue one
/// another joined into one ([`Piece::continues`]) and clipped to [`ASK_CHARS`]. Read from the
/// end, each piece once.
fn last_replies(pieces: &[Piece<'_>], n: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut run: Vec<&Piece<'_>> = Vec::new();
    let assistant = pieces.iter().rev().filter(|p| p.class == Class::Assistant);
    for piece in assistant {
        run.push(piece);
        if piece.continues.is_some() {
            continue;
        }
        let mut reply = String::new();
        for (k, p) in run.iter().rev().enumerate() {
            if k > 0 {
                reply.push_str(p.continues.unwrap_or_default());
            }
            reply.push_str(&p.text);
        }
        run.clear();
        out.push(clip(&reply, ASK_CHARS).into_owned());
        if out.len() == n {
            break;
        }
    }
    out
}

fn is_tool_role(role: Option<&str>) -> bool {
    role.is_some_and(|r| r.eq_ignore_ascii_case("tool") || r.eq_ignore_ascii_case("function"))
}

/// Which entries are opened and which pieces are kept.
struct Plan {
    open: Vec<bool>,
    kept: Vec<usize>,
}

impl Plan {
    fn new(entries: usize) -> Self {
        Self {
            open: vec![false; entries],
            kept: Vec::new(),
        }
    }

    fn take(&mut self, entry: usize, piece: usize) {
        self.open[entry] = true;
        self.kept.push(piece);
    }
}

/// `[… N entries omitted …]` (`entry` when one).
fn omitted(out: &mut String, n: usize) {
    let noun = if n == 1 { "entry" } else { "entries" };
    // Writing into a String cannot fail.
    let _ = write!(out, "[… {n} {noun} omitted …]");
}

fn render(pieces: &[Piece<'_>], plan: &Plan, roles: &[String]) -> String {
    let mut kept: Vec<&Piece<'_>> = plan.kept.iter().map(|&i| &pieces[i]).collect();
    kept.sort_by_key(|p| (p.entry, p.order));
    let mut out = String::with_capacity(
        kept.iter().map(|p| p.text.len() + 1).sum::<usize>() + 32 * (kept.len() + 1),
    );
    let mut next = 0usize; // first entry not yet written or skipped
    let mut current: Option<usize> = None;
    let separate = |out: &mut String| {
        if !out.is_empty() {
            out.push_str("\n\n");
        }
    };
    for piece in kept {
        if current == Some(piece.entry) {
            out.push('\n');
        } else {
            if piece.entry > next {
                separate(&mut out);
                omitted(&mut out, piece.entry - next);
            }
            separate(&mut out);
            // Writing into a String cannot fail.
            let _ = writeln!(out, "[{}] {}:", piece.entry + 1, roles[piece.entry]);
            current = Some(piece.entry);
            next = piece.entry + 1;
        }
        out.push_str(piece.text.trim());
    }
    if !out.is_empty() && next < roles.len() {
        separate(&mut out);
        omitted(&mut out, roles.len() - next);
    }
    out
}

#[cfg(test)]
mod tests;
