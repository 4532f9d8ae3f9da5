//! Token usage out of provider answers, in one shape whatever the API: what an answer cost.
//!
//! Every API reports the tokens an answer used, in its own words:
//!
//! | API | where | input | cached input | cache writes | output | reasoning |
//! |---|---|---|---|---|---|---|
//! | Chat Completions | `usage` (JSON; the last SSE chunk with `stream_options.include_usage`) | `prompt_tokens` | `prompt_tokens_details.cached_tokens` | — | `completion_tokens` | `completion_tokens_details.reasoning_tokens` |
//! | Responses | `usage` (JSON), `response.usage` of `response.completed` / `.incomplete` / `.failed` | `input_tokens` | `input_tokens_details.cached_tokens` | — | `output_tokens` | `output_tokens_details.reasoning_tokens` |
//! | Anthropic Messages | `usage` (JSON), `message.usage` of `message_start`, `usage` of `message_delta` | `input_tokens` + `cache_read_input_tokens` + `cache_creation_input_tokens` | `cache_read_input_tokens` | `cache_creation_input_tokens` | `output_tokens` | — |
//! | Gemini | `usageMetadata` (JSON, each SSE chunk, each element of a JSON array stream) | `promptTokenCount` | `cachedContentTokenCount` | — | `candidatesTokenCount` + `thoughtsTokenCount` | `thoughtsTokenCount` |
//!
//! [`Usage`] holds them normalised: `input` counts every input token (cached ones included),
//! `output` every output token (reasoning included). Anthropic's `input_tokens` leaves cache
//! reads and writes out, so they are added back; Gemini's `candidatesTokenCount` leaves the
//! thoughts out, so they are added back.
//!
//! [`UsageReader`] reads a response body as it streams by, fed chunks split anywhere. A stream
//! reports usage in several events (Anthropic's input in `message_start`, its output in
//! `message_delta`; Gemini's running totals in every chunk): each field keeps the last value
//! seen, so a stream cut half way still gives what arrived (Anthropic's input tokens without
//! the output). A whole JSON body is read when it is complete; one that never closed reported
//! nothing.
//!
//! ```
//! use context_relay_core::usage::{Usage, UsageReader};
//!
//! let mut reader = UsageReader::new("");
//! reader.push(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":");
//! reader.push(b"{\"input_tokens\":10,\"cache_read_input_tokens\":90,\"output_tokens\":1}}}\n\n");
//! // Cut here: the input arrived, the output did not.
//! assert_eq!(reader.finish(), Some(Usage { input: 100, cached_input: 90, output: 1, ..Usage::default() }));
//!
//! let json = br#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,
//!     "completion_tokens_details":{"reasoning_tokens":2}}}"#;
//! let usage = UsageReader::of(json).unwrap();
//! assert_eq!((usage.input, usage.output, usage.reasoning_output), (7, 3, 2));
//! ```

mod places;
mod raw;

use bytes::Bytes;

use crate::sse::Splitter;
use raw::Raw;

/// Largest SSE event data, and largest whole JSON body (as sent, compressed or not), read for
/// usage. A `response.completed` event repeats the whole output and can be long; beyond this
/// its usage is not read.
pub const USAGE_READ_LIMIT: usize = 4 * 1024 * 1024;

/// Tokens one answer used (see the module docs for where each comes from).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Usage {
    /// Input tokens, all of them: read from the prompt cache, written to it, and the rest.
    pub input: u64,
    /// Of [`input`](Self::input), those read from the provider's prompt cache.
    pub cached_input: u64,
    /// Of [`input`](Self::input), those written to the prompt cache (Anthropic bills them
    /// apart).
    pub cache_write_input: u64,
    /// Output tokens, reasoning included.
    pub output: u64,
    /// Of [`output`](Self::output), reasoning (thinking) tokens, where the provider tells them
    /// apart.
    pub reasoning_output: u64,
}

impl Usage {
    /// The usage object of any API (`usage` or `usageMetadata`), or `None` when it holds no
    /// count this module knows.
    ///
    /// ```
    /// use context_relay_core::usage::Usage;
    /// let v = serde_json::json!({"promptTokenCount": 12, "candidatesTokenCount": 5, "thoughtsTokenCount": 4});
    /// let u = Usage::from_value(&v).unwrap();
    /// assert_eq!((u.input, u.output, u.reasoning_output), (12, 9, 4));
    /// assert_eq!(Usage::from_value(&serde_json::json!({"other": 1})), None);
    /// ```
    pub fn from_value(v: &serde_json::Value) -> Option<Self> {
        Raw::of(v).usage()
    }

    /// Adds `other` to this usage, saturating.
    pub fn add(&mut self, other: &Usage) {
        self.input = self.input.saturating_add(other.input);
        self.cached_input = self.cached_input.saturating_add(other.cached_input);
        self.cache_write_input = self
            .cache_write_input
            .saturating_add(other.cache_write_input);
        self.output = self.output.saturating_add(other.output);
        self.reasoning_output = self.reasoning_output.saturating_add(other.reasoning_output);
    }
}

/// Reads the usage of a response body as it streams by (see the module docs).
#[derive(Debug)]
pub struct UsageReader {
    mode: Mode,
    seen: Raw,
    /// The data of the last event of a stream that may be a failure (see
    /// [`may_be_failure`](crate::quota::may_be_failure)): rare, and short but for a failed
    /// response's whole object.
    failure: Option<Vec<u8>>,
}

#[derive(Debug)]
enum Mode {
    /// Nothing but whitespace yet.
    Undecided,
    /// A JSON body, gathered whole (until it outgrows the limit).
    Json(Whole),
    /// Server-sent events, read event by event.
    Sse(Box<Splitter>),
    /// A compressed body, gathered as sent and decoded at the end.
    Encoded { raw: Whole, encoding: String },
}

/// A whole body gathered for reading at its end. A body that comes as one [`Bytes`] chunk
/// (the usual JSON answer) is held as it came, without a copy; a second chunk starts a buffer.
#[derive(Debug, Default)]
struct Whole {
    held: Bytes,
    buf: Vec<u8>,
    gave_up: bool,
}

impl Whole {
    /// Appends `chunk` (`shared`: the same bytes as a [`Bytes`], when the caller has one), or
    /// gives up (and frees what was kept) once the body outgrows [`USAGE_READ_LIMIT`].
    fn push(&mut self, chunk: &[u8], shared: Option<Bytes>) {
        if self.gave_up {
            return;
        }
        if self.held.len() + self.buf.len() + chunk.len() > USAGE_READ_LIMIT {
            *self = Whole {
                gave_up: true,
                ..Whole::default()
            };
            return;
        }
        match shared {
            Some(bytes) if self.held.is_empty() && self.buf.is_empty() => self.held = bytes,
            _ => {
                if !self.held.is_empty() {
                    self.buf.extend_from_slice(&std::mem::take(&mut self.held));
                }
                self.buf.extend_from_slice(chunk);
            }
        }
    }

    /// The body, or `None` when it outgrew the limit.
    fn bytes(&self) -> Option<&[u8]> {
        match (self.gave_up, self.held.is_empty()) {
            (true, _) => None,
            (false, false) => Some(&self.held),
            (false, true) => Some(&self.buf),
        }
    }
}

impl UsageReader {
    /// A reader for a body sent with `content-encoding: encoding` (empty or `identity`: not
    /// compressed).
    pub fn new(encoding: &str) -> Self {
        let encoding = encoding.trim();
        let mode = if encoding.is_empty() || encoding.eq_ignore_ascii_case("identity") {
            Mode::Undecided
        } else {
            Mode::Encoded {
                raw: Whole::default(),
                encoding: encoding.to_owned(),
            }
        };
        Self {
            mode,
            seen: Raw::default(),
            failure: None,
        }
    }

    /// The usage of a whole, uncompressed body.
    pub fn of(body: &[u8]) -> Option<Usage> {
        let mut reader = Self::new("");
        reader.push(body);
        reader.finish()
    }

    /// Feeds the next bytes of the body.
    ///
    /// An event stream's chunk that holds whole events (read between two events, ending in a
    /// blank line) and does not name `sage` is not split into events: none of them carries
    /// usage (an event's data is made of its lines, and `sage` holds no line break), and the
    /// stream stands between events after it as before it. One search of the chunk then
    /// stands for a split and a search per event; most chunks of a stream are one such
    /// event, a delta of text (a stream that names usage in chunk after chunk is split
    /// without the search after eight).
    pub fn push(&mut self, chunk: &[u8]) {
        self.push_in(chunk, None);
    }

    /// [`push`](Self::push) of a chunk the caller holds as [`Bytes`]: a whole body that comes
    /// as one chunk is then read at the end without being copied.
    pub fn push_bytes(&mut self, chunk: &Bytes) {
        self.push_in(chunk, Some(chunk));
    }

    fn push_in(&mut self, chunk: &[u8], shared: Option<&Bytes>) {
        let mut rest = chunk;
        let mut skipped = 0;
        if let Mode::Undecided = self.mode {
            let Some(start) = rest
                .iter()
                .position(|b| !b.is_ascii_whitespace() && !matches!(b, 0xEF | 0xBB | 0xBF))
            else {
                return;
            };
            self.mode = if matches!(rest[start], b'{' | b'[') {
                Mode::Json(Whole::default())
            } else {
                Mode::Sse(Box::new(Splitter::new(USAGE_READ_LIMIT)))
            };
            rest = &rest[start..];
            skipped = start;
        }
        match &mut self.mode {
            Mode::Undecided => {}
            Mode::Json(whole) | Mode::Encoded { raw: whole, .. } => {
                whole.push(rest, shared.map(|b| b.slice(skipped..)));
            }
            Mode::Sse(splitter) => {
                if splitter.skips(rest, may_carry_usage) {
                    return;
                }
                let (seen, failure) = (&mut self.seen, &mut self.failure);
                splitter.push(rest, |event| {
                    if event.is_whole() {
                        read_event(seen, failure, event.data);
                    }
                });
            }
        }
    }

    /// The data of the last event of an event stream that may be a failure (an error event, a
    /// failed response: see [`may_be_failure`](crate::quota::may_be_failure)), read with the
    /// usage in the same pass: whether the account ran out of quota in the middle of a stream
    /// that began with a `200` ([`limit_in_band`](crate::quota::limit_in_band)). Only events
    /// that name `sage` are read, as for usage: the providers' failure events carry a
    /// `message`. Complete after [`finish`](Self::finish).
    ///
    /// ```
    /// use context_relay_core::usage::UsageReader;
    /// let mut reader = UsageReader::new("");
    /// reader.push(b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"slow\"}}\n\n");
    /// reader.finish();
    /// assert!(reader.failure().is_some_and(|f| f.starts_with(br#"{"type":"error""#)));
    /// ```
    pub fn failure(&self) -> Option<&[u8]> {
        self.failure.as_deref()
    }

    /// The usage the body reported, as far as it arrived; `None` when it reported none.
    pub fn finish(&mut self) -> Option<Usage> {
        match std::mem::replace(&mut self.mode, Mode::Undecided) {
            Mode::Undecided => {}
            Mode::Json(whole) => {
                if let Some(body) = whole.bytes() {
                    read_json(&mut self.seen, body);
                }
            }
            Mode::Sse(mut splitter) => {
                let (seen, failure) = (&mut self.seen, &mut self.failure);
                splitter.finish(|event| {
                    if event.is_whole() {
                        read_event(seen, failure, event.data);
                    }
                });
            }
            Mode::Encoded { raw, encoding } => {
                let decoded = raw
                    .bytes()
                    // A stream cut short still reports what arrived (an Anthropic stream
                    // cut before `message_delta` counts its input).
                    .map(|raw| crate::decode::decode_prefix(&encoding, raw, USAGE_READ_LIMIT));
                if let Some(Ok(plain)) = decoded {
                    let mut reader = Self::new("");
                    reader.push(&plain);
                    let usage = reader.finish();
                    self.failure = reader.failure;
                    return usage;
                }
            }
        }
        self.seen.usage()
    }
}

/// Reads the usage an SSE event's data carries, if it may carry any, and keeps the event when
/// it may be a failure.
fn read_event(seen: &mut Raw, failure: &mut Option<Vec<u8>>, data: &[u8]) {
    // Most events carry no usage: only those that name it are decoded. The failures the
    // providers send carry a `message` (see `UsageReader::failure`).
    if !may_carry_usage(data) {
        return;
    }
    if crate::quota::may_be_failure(data) {
        *failure = Some(data.to_vec());
    }
    places::read_carrier(data, seen);
}

/// Whether `json` holds the text `sage` (of `usage`, `usageMetadata`, `usage_metadata`): a
/// body or event without it carries no usage and is not decoded. The searcher is built once:
/// building one costs more than searching a stream event.
fn may_carry_usage(json: &[u8]) -> bool {
    static SAGE: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"sage"));
    SAGE.find(json).is_some()
}

/// Reads the usage of a whole JSON body: an object, or an array of them (Gemini's stream
/// without SSE).
fn read_json(seen: &mut Raw, body: &[u8]) {
    if may_carry_usage(body) {
        places::whole_body(body, seen);
    }
}

#[cfg(test)]
mod tests;
