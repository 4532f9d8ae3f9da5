//! How a response body ended, told incrementally from its bytes: completed, failed in-band, or
//! not ended at all.
//!
//! A provider can answer `200 OK` and still fail: a Responses stream that ends in
//! `response.failed`, an Anthropic stream that carries `event: error`, or a stream that is cut
//! before its terminal event. The relay must only treat a response as a success (and, say, move
//! a session's account or delete a handoff that was delivered) when the body really ended the
//! way the API ends a finished answer. [`EndDetector`] watches the body as it streams by, fed
//! chunks split anywhere, and keeps no more than one SSE event (capped) in memory.
//!
//! The body is read as JSON when its first non-blank byte is `{` or `[`, otherwise as
//! server-sent events (lines ending in `\n`, `\r\n` or `\r`; a blank line ends an event).
//!
//! | Body | [`Ending::Completed`] | [`Ending::Failed`] |
//! |---|---|---|
//! | JSON (any API, Gemini's array stream) | the top-level value closed, only whitespace after it | — |
//! | Responses SSE | `response.completed` | `response.failed`, `response.incomplete`, `error` |
//! | Anthropic SSE | `message_stop` | `event: error` |
//! | Chat Completions SSE | `[DONE]` after a chunk with a `finish_reason` | a chunk with a top-level `error` |
//! | Gemini SSE | a candidate with a `finishReason` | a chunk with a top-level `error` |
//!
//! Anything else is [`Ending::Unfinished`]: an empty body, a cut stream, a `[DONE]` that no
//! finish reason preceded, a JSON value that never closed or has bytes after it.
//!
//! `response.incomplete` counts as a failure: the turn stopped short (output token limit,
//! content filter), and Codex treats that event as a stream error and sends the same turn
//! again, so that retry must still find whatever the relay kept for the turn. A Chat
//! `finish_reason: "length"` or an Anthropic `max_tokens` stop, by contrast, ends with the
//! API's normal terminal event and the client keeps the reply, so they are completions.
//!
//! A failure is final: nothing after it turns the body into a success. A success can still be
//! overturned by a later failure event.
//!
//! A complete JSON body is a completion whatever it holds: whether it is an error is the
//! status code's business, and the detector is only asked about 2xx bodies.
//!
//! ```
//! use context_relay_core::ending::{EndDetector, Ending};
//!
//! let mut end = EndDetector::new();
//! end.push(b"event: response.created\ndata: {\"type\":\"response.created\"}\n\nevent: resp");
//! assert_eq!(end.ending(), Ending::Unfinished);
//! assert!(!end.output_started());
//! end.push(b"onse.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"error\":");
//! end.push(b"{\"code\":\"invalid_encrypted_content\"}}}\n\n");
//! assert_eq!(end.finish(), Ending::Failed);
//! assert!(end.failure().unwrap().windows(7).any(|w| w == b"invalid"));
//!
//! let mut end = EndDetector::new();
//! end.push(b"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
//! assert_eq!(end.finish(), Ending::Completed);
//!
//! assert_eq!(EndDetector::of(br#"{"id":"msg_1","content":[]}"#), Ending::Completed);
//! assert_eq!(EndDetector::of(br#"{"id":"msg_1","content":["#), Ending::Unfinished);
//! ```

use std::borrow::Cow;
use std::sync::LazyLock;

use context_relay_json::{Doc, Kind, Needles, Object, decode_str};

use crate::sse::{Event, Splitter};

/// Largest event data kept for decoding, in bytes. Longer data (a `response.completed` that
/// repeats a long output) is still recognised by its leading `"type"` or its `event:` name.
pub const EVENT_DATA_LIMIT: usize = 1024 * 1024;

/// How a response body ended (see the module docs for what counts as what).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ending {
    /// The API's terminal success event, or a complete JSON value.
    Completed,
    /// An in-band failure event.
    Failed,
    /// No terminal event (yet): empty, cut, or still streaming.
    Unfinished,
}

/// Which grammar the body is read with, decided by its first non-blank byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Undecided,
    Json,
    Sse,
}

/// Incremental JSON completeness: bracket depth outside strings.
#[derive(Debug, Default, Clone)]
struct JsonState {
    depth: usize,
    in_string: bool,
    escaped: bool,
    closed: bool,
    trailing: bool,
}

/// Watches a response body and tells how it ended (see the module docs).
#[derive(Debug, Clone)]
pub struct EndDetector {
    mode: Mode,
    json: JsonState,
    sse: Splitter,
    verdict: Verdict,
}

/// What the SSE events seen so far say.
#[derive(Debug, Clone)]
struct Verdict {
    finish_reason_seen: bool,
    output_started: bool,
    ending: Ending,
    failure: Option<Vec<u8>>,
}

impl Default for EndDetector {
    fn default() -> Self {
        Self::new()
    }
}

impl EndDetector {
    /// A detector that has seen nothing.
    pub fn new() -> Self {
        Self {
            mode: Mode::Undecided,
            json: JsonState::default(),
            sse: Splitter::new(EVENT_DATA_LIMIT),
            verdict: Verdict {
                finish_reason_seen: false,
                output_started: false,
                ending: Ending::Unfinished,
                failure: None,
            },
        }
    }

    /// How a whole body ended.
    pub fn of(body: &[u8]) -> Ending {
        let mut detector = Self::new();
        detector.push(body);
        detector.finish()
    }

    /// Feeds the next bytes of the body.
    pub fn push(&mut self, chunk: &[u8]) {
        let mut rest = chunk;
        if self.mode == Mode::Undecided {
            let start = rest
                .iter()
                .position(|b| !b.is_ascii_whitespace() && !matches!(b, 0xEF | 0xBB | 0xBF));
            let Some(start) = start else { return };
            self.mode = if matches!(rest[start], b'{' | b'[') {
                self.verdict.output_started = true;
                Mode::Json
            } else {
                Mode::Sse
            };
            rest = &rest[start..];
        }
        match self.mode {
            Mode::Json => self.push_json(rest),
            Mode::Sse => self.push_sse(rest),
            Mode::Undecided => {}
        }
    }

    /// The verdict at the end of the body: dispatches an event the body did not close with a
    /// blank line, then tells how the body ended.
    pub fn finish(&mut self) -> Ending {
        if self.mode == Mode::Sse {
            let (sse, verdict) = (&mut self.sse, &mut self.verdict);
            sse.finish(|event| verdict.judge(&event));
        }
        self.ending()
    }

    /// The verdict so far, without treating the body as ended.
    pub fn ending(&self) -> Ending {
        match self.mode {
            Mode::Json if self.json.closed && !self.json.trailing => Ending::Completed,
            Mode::Json | Mode::Undecided => Ending::Unfinished,
            Mode::Sse => self.verdict.ending,
        }
    }

    /// The data of the event that failed the body (capped at [`EVENT_DATA_LIMIT`]), for
    /// telling what the failure was.
    pub fn failure(&self) -> Option<&[u8]> {
        self.verdict.failure.as_deref()
    }

    /// Whether the body has gone past its opening: true for a JSON body, and for a stream once
    /// an event other than `response.created` / `response.in_progress` (and other than a
    /// failure) was seen. Before that, nothing the client could act on has been sent, so a
    /// failure can still be handled without the client noticing.
    pub fn output_started(&self) -> bool {
        self.verdict.output_started
    }

    fn push_json(&mut self, bytes: &[u8]) {
        let j = &mut self.json;
        for &b in bytes {
            if j.closed {
                if !b.is_ascii_whitespace() {
                    j.trailing = true;
                }
                continue;
            }
            if j.in_string {
                if j.escaped {
                    j.escaped = false;
                } else if b == b'\\' {
                    j.escaped = true;
                } else if b == b'"' {
                    j.in_string = false;
                }
                continue;
            }
            match b {
                b'"' => j.in_string = true,
                b'{' | b'[' => j.depth += 1,
                b'}' | b']' => {
                    j.depth = j.depth.saturating_sub(1);
                    if j.depth == 0 {
                        j.closed = true;
                    }
                }
                _ => {}
            }
        }
    }

    fn push_sse(&mut self, bytes: &[u8]) {
        // Once output started, an event changes the verdict only by what `may_change` looks
        // for: a chunk of whole events without any of it is not split (`Splitter::skips`).
        // Most chunks of a Chat Completions or Gemini stream are one such event, a delta of
        // text; Anthropic and Responses events name their `type`, and after a few such chunks
        // in a row theirs are split without the search.
        if self.verdict.output_started && self.sse.skips(bytes, may_change) {
            return;
        }
        let (sse, verdict) = (&mut self.sse, &mut self.verdict);
        sse.push(bytes, |event| verdict.judge(&event));
    }
}

impl Verdict {
    fn judge(&mut self, event: &Event<'_>) {
        let (name, data) = (event.name, event.data);
        // Data cut at the limit is read by its leading `"type"` or its `event:` name only.
        let complete = !event.data_cut;
        let trimmed = data.trim_ascii();
        if trimmed == b"[DONE]" {
            if self.finish_reason_seen {
                self.succeed();
            }
            return;
        }
        let leading = leading_type(trimmed);
        // Depth 3: the top-level members, the items of `choices` / `candidates`, and their
        // members; read from an index of the event, not a tree of owned values, and only when
        // the event may hold one of the members read.
        let doc = match leading {
            Some(_) => None,
            None if complete && may_decide(trimmed) => Doc::parse_to_depth(trimmed, 3).ok(),
            None => None,
        };
        let root = doc.as_ref().and_then(|d| d.root_object().ok());
        let tag = match (&doc, &root) {
            (Some(d), Some(r)) if leading.is_none() => string_member(d, r, "type"),
            _ => None,
        };
        let kind: Option<&[u8]> = leading
            .or(tag.as_deref().map(str::as_bytes))
            .or((!name.is_empty()).then_some(name));
        match kind {
            Some(b"response.completed" | b"message_stop") => self.succeed(),
            Some(b"response.failed" | b"response.incomplete" | b"error") => self.fail(data),
            _ if name == b"error" => self.fail(data),
            Some(b"response.created" | b"response.in_progress") => {}
            _ => {
                if let (Some(d), Some(r)) = (&doc, &root) {
                    if r.get("error")
                        .is_some_and(|e| &d.body()[e.value.clone()] != b"null")
                    {
                        self.fail(data);
                        return;
                    }
                    if has_reason(d, r, "choices", "finish_reason") {
                        self.finish_reason_seen = true;
                    }
                    if has_reason(d, r, "candidates", "finishReason") {
                        self.output_started = true;
                        self.succeed();
                        return;
                    }
                }
                if !trimmed.is_empty() || !name.is_empty() {
                    self.output_started = true;
                }
            }
        }
    }

    fn succeed(&mut self) {
        self.output_started = true;
        if self.ending != Ending::Failed {
            self.ending = Ending::Completed;
        }
    }

    fn fail(&mut self, data: &[u8]) {
        if self.ending != Ending::Failed {
            self.ending = Ending::Failed;
            self.failure = Some(data.to_vec());
        }
    }
}

/// `"finish_reason"`, which a Chat Completions stream sends in every chunk (`null` in all but
/// the last).
const FINISH_REASON: &[u8] = b"\"finish_reason\"";

/// Whether event data may hold a member [`Verdict::judge`] reads: a `"type"`, an `"error"`, a
/// `"finishReason"`, or a `"finish_reason"` whose value is not `null`. A key is a string, and
/// a string holds a quote only escaped, so data without these literals (nor a `\u` escape,
/// which can spell any key) has none of those members at any depth, and reading it says only
/// that output started, which it says unread too. An ordinary Chat Completions chunk is such
/// data; reading its index cost about 6 000 instructions, this search a few hundred.
fn may_decide(data: &[u8]) -> bool {
    static READ: LazyLock<Needles> = LazyLock::new(|| Needles::new(&DECIDING));
    names_any(&READ, b"\"\\", data)
}

/// The literals of the members [`Verdict::judge`] reads (see [`may_decide`]).
const DECIDING: [&[u8]; 5] = [
    FINISH_REASON,
    b"\"type\"",
    b"\"error\"",
    b"\"finishReason\"",
    b"\\u",
];

/// Whether a chunk of whole events may hold one that changes a verdict whose output started:
/// an event [`may_decide`] would read (the same literals), an `event:` name (which can name a
/// terminal or failure event), or `[DONE]`. Any other event's reading only sets
/// `output_started`, already set.
fn may_change(chunk: &[u8]) -> bool {
    static CHANGE: LazyLock<Needles> =
        LazyLock::new(|| Needles::new(&[&DECIDING[..], &[b"event", b"[DONE]"]].concat()));
    names_any(&CHANGE, b"\"\\e[", chunk)
}

/// Whether `data` holds one of `needles`' literals, a `"finish_reason"` whose value is `null`
/// aside; `firsts` are the literals' first bytes.
fn names_any(needles: &Needles, firsts: &[u8], data: &[u8]) -> bool {
    let mut from = 0;
    while let Some(at) = data.get(from..).and_then(|rest| needles.find(rest)) {
        let at = from + at;
        let Some(after) = data[at..].strip_prefix(FINISH_REASON) else {
            return true;
        };
        let value = after
            .trim_ascii_start()
            .strip_prefix(b":")
            .map(<[u8]>::trim_ascii_start);
        if !value.is_some_and(|v| v.starts_with(b"null")) {
            return true;
        }
        from = at + FINISH_REASON.len();
        // A Chat Completions chunk names `finish_reason` last, so a few bytes (`:null}]}`) are
        // left: a short rest without any literal's first byte holds none of them, which a byte
        // loop tells for less than setting up the search.
        if let Some(rest) = data.get(from..).filter(|rest| rest.len() <= SHORT_REST)
            && !rest.iter().any(|b| firsts.contains(b))
        {
            return false;
        }
    }
    false
}

/// The longest rest of an event [`may_decide`] reads a byte at a time.
const SHORT_REST: usize = 32;

/// The value of a leading `"type"` key (`{"type":"…"`), read without decoding the event: the
/// Responses and Anthropic streams put it first, and their large events need no parse.
fn leading_type(data: &[u8]) -> Option<&[u8]> {
    let rest = data.strip_prefix(b"{")?.trim_ascii_start();
    let rest = rest.strip_prefix(b"\"type\"")?.trim_ascii_start();
    let rest = rest.strip_prefix(b":")?.trim_ascii_start();
    let rest = rest.strip_prefix(b"\"")?;
    let end = memchr::memchr2(b'"', b'\\', rest)?;
    (rest[end] == b'"').then(|| &rest[..end])
}

/// The string value of `obj`'s member `key` (the last one, as most parsers keep), decoded;
/// `None` when it is absent or not a string.
fn string_member<'a>(doc: &Doc<'a>, obj: &Object<'a>, key: &str) -> Option<Cow<'a, str>> {
    let value = obj.get(key)?.value.clone();
    if Kind::of(doc.body(), &value) != Some(Kind::String) {
        return None;
    }
    decode_str(doc.body(), value).ok()
}

/// Whether any element of the array `list` of `obj` carries a non-empty string `field`.
fn has_reason(doc: &Doc<'_>, obj: &Object<'_>, list: &str, field: &str) -> bool {
    let Some(items) = obj
        .get(list)
        .and_then(|l| doc.array_at(l.value.clone()).ok())
    else {
        return false;
    };
    items.items.into_iter().any(|item| {
        doc.object_at(item)
            .ok()
            .and_then(|c| string_member(doc, &c, field))
            .is_some_and(|r| !r.is_empty() && r != "FINISH_REASON_UNSPECIFIED")
    })
}

#[cfg(test)]
mod tests;
