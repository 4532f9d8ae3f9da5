//! Text out of model replies: the summary text of a summary call ([`summary_text`]) and the
//! assistant reply of a user turn, collected while the response streams by
//! ([`ReplyCapture`]).
//!
//! Both read the same forms:
//!
//! - **JSON**, first match with text wins: Chat `choices[0].message.content` (string or parts),
//!   Responses `output[].content[]` text parts, Anthropic `content[]` text blocks, Gemini
//!   `candidates[0].content.parts[].text`. A JSON array (Gemini's non-SSE stream) is read
//!   element by element. Parts and blocks are joined by newlines (Gemini parts, which are
//!   pieces of one text, are concatenated).
//! - **SSE** (the first non-blank line starts with `data:`, `event:`, `id:`, `retry:` or `:`):
//!   Chat `choices[0].delta.content`, Responses `response.output_text.delta` (when a stream
//!   has none, the text of `response.output_item.done` message items, else of
//!   `response.completed`'s output), Anthropic `content_block_delta` / `text_delta`, Gemini
//!   `candidates[0].content.parts[].text`. Lines may end in `\n`, `\r\n` or `\r`; `[DONE]`
//!   and undecodable events are skipped.
//! - anything else: the body as text, trimmed; a body that is not valid UTF-8 has no text. A JSON body of no
//!   known shape is also returned as text, so that a bare handoff object still parses.
//!
//! The result is trimmed; blank is `None`.
//!
//! ```
//! use context_relay_core::reply::{ReplyCapture, REPLY_CAP, summary_text};
//!
//! let json = br#"{"choices":[{"message":{"role":"assistant","content":"{\"summary\":\"s\"}"}}]}"#;
//! assert_eq!(summary_text(json).as_deref(), Some(r#"{"summary":"s"}"#));
//!
//! let mut capture = ReplyCapture::new(true, REPLY_CAP);
//! capture.push(b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,");
//! capture.push(b"\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\ndata: {\"type\":\"content_block_delta\",");
//! capture.push(b"\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"lo\"}}\n\n");
//! assert_eq!(capture.finish().as_deref(), Some("Hello"));
//! ```

mod body;
mod stream;

use serde_json::Value;

use crate::ending::{EndDetector, Ending};
use crate::parse::clamp_bytes;
use body::json_text;
use stream::SseReader;

/// Largest assistant reply text kept by [`ReplyCapture`], in bytes (16 KiB).
pub const REPLY_CAP: usize = 16 * 1024;
/// Largest non-streamed reply body [`ReplyCapture`] buffers; a longer body gives `None`
/// rather than a cut JSON document that could not be read.
pub const RAW_JSON_LIMIT: usize = 1024 * 1024;
/// Largest SSE line, and largest data of one SSE event, that is decoded; longer events are
/// skipped (a Responses `response.completed` repeats the whole output and can be large).
pub const SSE_EVENT_LIMIT: usize = 1024 * 1024;

/// The summary text of a summary call's reply body (see the module docs), or `None` when
/// there is no text.
pub fn summary_text(body: &[u8]) -> Option<String> {
    extract(body, false, usize::MAX)
}

/// Text (and, with `tools`, one line per tool call) of a reply body, cut to `cap` bytes.
fn extract(body: &[u8], tools: bool, cap: usize) -> Option<String> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        let text = match &v {
            Value::Array(items) => {
                let texts: Vec<String> = items
                    .iter()
                    .filter_map(|item| json_text(item, tools))
                    .collect();
                (!texts.is_empty()).then(|| texts.concat())
            }
            other => json_text(other, tools),
        };
        if let Some(text) = text.filter(|t| !t.trim().is_empty()) {
            return clamped(&text, cap);
        }
    } else if looks_like_sse(body) {
        let mut reader = SseReader::new(tools, cap);
        reader.push(body);
        return reader.finish();
    }
    // Never lossy: a body that is not UTF-8 is no text (replacement characters would reach the
    // summary prompt).
    clamped(std::str::from_utf8(body).ok()?, cap)
}

/// `text` trimmed and cut to `cap` bytes, or `None` when nothing but blanks is left (tested
/// after the cut: a cap may leave nothing, or only blanks).
fn clamped(text: &str, cap: usize) -> Option<String> {
    let text = clamp_bytes(text.trim(), cap).trim_end();
    (!text.is_empty()).then(|| text.to_owned())
}

fn looks_like_sse(body: &[u8]) -> bool {
    let body = body.strip_prefix("\u{feff}".as_bytes()).unwrap_or(body);
    let first = body
        .split(|b| *b == b'\n' || *b == b'\r')
        .find(|line| !line.trim_ascii().is_empty());
    first.is_some_and(|line| {
        [&b"data:"[..], b"event:", b"id:", b"retry:", b":"]
            .iter()
            .any(|p| line.starts_with(p))
    })
}

/// Collects the assistant reply of a user turn from its response body, chunk by chunk, with
/// bounded memory whatever is pushed.
///
/// - SSE (`is_sse`): lines are decoded as they arrive (across chunk boundaries) and only the
///   delta text is kept, plus one `tool call NAME(ARGS)` line per tool call the reply makes
///   (Chat `delta.tool_calls`, Responses `output_item.done` tool items, Anthropic `tool_use`
///   blocks, Gemini `functionCall` parts). Collection stops at `cap_bytes` of text, cut on a
///   char boundary; after that, pushes cost nothing.
/// - otherwise: the body is buffered up to [`RAW_JSON_LIMIT`] bytes (beyond that the capture
///   gives up and [`finish`](Self::finish) returns `None`) and read at the end by the rules
///   of the module docs (a body mislabelled as JSON that is really SSE is still read), with
///   tool call lines, cut to `cap_bytes`.
///
/// A compressed reply ([`encoded`](Self::encoded)) is buffered as sent, up to
/// [`RAW_JSON_LIMIT`] bytes, and decoded at the end (at most [`DECODED_LIMIT`] bytes); one
/// that cannot be decoded has no text. Alongside the text, the capture tells how the body
/// ended so far ([`ending`](Self::ending)), so a caller can count a streamed reply complete at
/// its terminal event even when the client hangs up right after it.
#[derive(Debug)]
pub struct ReplyCapture {
    mode: Mode,
    end: EndDetector,
}

/// Largest decoded size of a compressed reply.
pub const DECODED_LIMIT: usize = 4 * RAW_JSON_LIMIT;

#[derive(Debug)]
enum Mode {
    Sse(SseReader),
    Json {
        buf: Vec<u8>,
        cap: usize,
        gave_up: bool,
    },
    Encoded {
        raw: Vec<u8>,
        encoding: String,
        is_sse: bool,
        cap: usize,
        gave_up: bool,
    },
}

impl ReplyCapture {
    /// A capture for a streamed (`is_sse`) or a whole reply, keeping at most `cap_bytes`
    /// bytes of text (use [`REPLY_CAP`]).
    pub fn new(is_sse: bool, cap_bytes: usize) -> Self {
        let mode = if is_sse {
            Mode::Sse(SseReader::new(true, cap_bytes))
        } else {
            Mode::Json {
                buf: Vec::new(),
                cap: cap_bytes,
                gave_up: false,
            }
        };
        Self {
            mode,
            end: EndDetector::new(),
        }
    }

    /// A capture for a reply sent with `content-encoding: encoding` (gzip, br, zstd, deflate;
    /// `identity` or an empty value is no encoding).
    pub fn encoded(is_sse: bool, cap_bytes: usize, encoding: &str) -> Self {
        let encoding = encoding.trim();
        if encoding.is_empty() || encoding.eq_ignore_ascii_case("identity") {
            return Self::new(is_sse, cap_bytes);
        }
        Self {
            mode: Mode::Encoded {
                raw: Vec::new(),
                encoding: encoding.to_owned(),
                is_sse,
                cap: cap_bytes,
                gave_up: false,
            },
            end: EndDetector::new(),
        }
    }

    /// How the body ended so far (see [`crate::ending`]). A compressed body is decoded to
    /// tell, once; call this when the body will not grow any more.
    pub fn ending(&mut self) -> Ending {
        if let Mode::Encoded {
            raw,
            encoding,
            is_sse,
            cap,
            gave_up,
        } = &mut self.mode
        {
            if *gave_up {
                return Ending::Unfinished;
            }
            let Ok(decoded) = crate::decode::decode(encoding, raw, DECODED_LIMIT) else {
                return Ending::Unfinished;
            };
            let mut plain = Self::new(*is_sse, *cap);
            plain.push(&decoded);
            *self = plain;
        }
        self.end.ending()
    }

    /// Feeds the next chunk of the response body.
    pub fn push(&mut self, chunk: &[u8]) {
        if !matches!(self.mode, Mode::Encoded { .. }) {
            self.end.push(chunk);
        }
        match &mut self.mode {
            Mode::Sse(reader) => reader.push(chunk),
            Mode::Json { buf, gave_up, .. }
            | Mode::Encoded {
                raw: buf, gave_up, ..
            } => buffer(buf, gave_up, chunk),
        }
    }
}

/// Appends `chunk` to a whole-body buffer, or gives up (and frees the buffer) once the body
/// outgrows [`RAW_JSON_LIMIT`].
fn buffer(buf: &mut Vec<u8>, gave_up: &mut bool, chunk: &[u8]) {
    if *gave_up {
        return;
    }
    if buf.len() + chunk.len() > RAW_JSON_LIMIT {
        *gave_up = true;
        *buf = Vec::new();
    } else {
        buf.extend_from_slice(chunk);
    }
}

impl ReplyCapture {
    /// Whether pushing more can no longer change the result (the text cap was reached, or a
    /// whole body outgrew [`RAW_JSON_LIMIT`]): a caller may stop copying chunks.
    pub fn is_done(&self) -> bool {
        match &self.mode {
            Mode::Sse(reader) => reader.is_full(),
            Mode::Json { gave_up, .. } | Mode::Encoded { gave_up, .. } => *gave_up,
        }
    }

    /// The collected reply, trimmed, or `None` when there is no text.
    pub fn finish(self) -> Option<String> {
        match self.mode {
            Mode::Sse(reader) => reader.finish(),
            Mode::Json { gave_up: true, .. } | Mode::Encoded { gave_up: true, .. } => None,
            Mode::Json { buf, cap, .. } => extract(&buf, true, cap),
            Mode::Encoded {
                raw,
                encoding,
                is_sse,
                cap,
                ..
            } => {
                let decoded = match crate::decode::decode(&encoding, &raw, DECODED_LIMIT) {
                    Ok(d) => d,
                    // Never fall back to the raw bytes: an undecodable reply is no reply.
                    Err(_) => return None,
                };
                let mut plain = Self::new(is_sse, cap);
                plain.push(&decoded);
                plain.finish()
            }
        }
    }
}

#[cfg(test)]
mod tests;
