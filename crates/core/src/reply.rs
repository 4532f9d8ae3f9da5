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

use serde_json::Value;

use crate::conversation::{Parts, message_parts, push_content, responses_item, tool_call_line};
use crate::ending::{EndDetector, Ending};
use crate::parse::clamp_bytes;

/// Largest assistant reply text kept by [`ReplyCapture`], in bytes (16 KiB).
pub const REPLY_CAP: usize = 16 * 1024;
/// Largest non-streamed reply body [`ReplyCapture`] buffers; a longer body gives `None`
/// rather than a cut JSON document that could not be read.
pub const RAW_JSON_LIMIT: usize = 1024 * 1024;
/// Largest SSE line, and largest data of one SSE event, that is decoded; longer events are
/// skipped (a Responses `response.completed` repeats the whole output and can be large).
pub const SSE_EVENT_LIMIT: usize = 1024 * 1024;
/// Most tool calls of one streamed reply that are assembled at once.
const MAX_TOOL_CALLS: usize = 32;
/// Bytes of streamed tool-call arguments kept per call: more than a tool line shows.
const TOOL_ARGS_LIMIT: usize = 1024;

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
        if let Some(text) = text.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
            return Some(clamp_bytes(text, cap).to_owned());
        }
    } else if looks_like_sse(body) {
        let mut reader = SseReader::new(tools, cap);
        reader.push(body);
        return reader.finish();
    }
    // Never lossy: a body that is not UTF-8 is no text (replacement characters would reach the
    // summary prompt).
    let raw = std::str::from_utf8(body).ok()?;
    let raw = clamp_bytes(raw.trim(), cap).trim_end();
    (!raw.is_empty()).then(|| raw.to_owned())
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

/// Text of one non-streamed reply object, by the first shape that has some.
fn json_text(v: &Value, tools: bool) -> Option<String> {
    let non_empty = |s: String| (!s.trim().is_empty()).then_some(s);
    let chat = || {
        let msg = v.get("choices")?.get(0)?.get("message")?;
        let text = if tools {
            message_parts(msg.as_object()?).into_texts().join("\n")
        } else {
            text_of(msg.get("content")?, "\n")
        };
        non_empty(text)
    };
    let responses = || {
        let items = v.get("output")?.as_array()?;
        let text = if tools {
            items
                .iter()
                .filter_map(responses_item)
                .flat_map(|e| e.parts)
                .collect::<Vec<_>>()
                .join("\n")
        } else {
            responses_output_text(items)
        };
        non_empty(text)
    };
    let anthropic = || {
        let content = v.get("content")?;
        let text = if tools {
            let mut parts = Parts::default();
            push_content(&mut parts, content);
            parts.into_texts().join("\n")
        } else {
            text_of(content, "\n")
        };
        non_empty(text)
    };
    let gemini = || {
        let parts = v.get("candidates")?.get(0)?.get("content")?.get("parts")?;
        let text = if tools {
            let mut out = Parts::default();
            push_content(&mut out, parts);
            out.into_texts().join("\n")
        } else {
            text_of(parts, "")
        };
        non_empty(text)
    };
    chat().or_else(responses).or_else(anthropic).or_else(gemini)
}

/// The text of a content value: a string, or the text parts of an array joined by `sep`.
/// Reasoning parts (Anthropic `thinking`, Gemini `thought`) and tool parts are not text.
fn text_of(content: &Value, sep: &str) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(part_text)
            .collect::<Vec<_>>()
            .join(sep),
        _ => String::new(),
    }
}

fn part_text(part: &Value) -> Option<&str> {
    if part.get("thought").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    match part.get("type").and_then(Value::as_str) {
        None | Some("text" | "output_text" | "input_text") => part.get("text")?.as_str(),
        Some(_) => None,
    }
}

/// Text of the message items of a Responses `output` array.
fn responses_output_text(items: &[Value]) -> String {
    items
        .iter()
        .filter(|i| i.get("type").and_then(Value::as_str).unwrap_or("message") == "message")
        .filter_map(|i| i.get("content"))
        .map(|c| text_of(c, "\n"))
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
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
            Mode::Json { buf, gave_up, .. } => {
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
            Mode::Encoded { raw, gave_up, .. } => {
                if *gave_up {
                    return;
                }
                if raw.len() + chunk.len() > RAW_JSON_LIMIT {
                    *gave_up = true;
                    *raw = Vec::new();
                } else {
                    raw.extend_from_slice(chunk);
                }
            }
        }
    }

    /// Whether pushing more can no longer change the result (the text cap was reached, or a
    /// whole body outgrew [`RAW_JSON_LIMIT`]): a caller may stop copying chunks.
    pub fn is_done(&self) -> bool {
        match &self.mode {
            Mode::Sse(reader) => reader.sink.full,
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

/// An incremental SSE decoder feeding a [`Sink`]. Holds at most one line and one event's
/// data, each bounded by [`SSE_EVENT_LIMIT`].
#[derive(Debug)]
struct SseReader {
    line: Vec<u8>,
    /// The current line outgrew the limit: its bytes are skipped up to the line end.
    line_too_long: bool,
    /// The previous chunk ended with `\r`; a `\n` starting the next one belongs to it.
    after_cr: bool,
    data: Vec<u8>,
    has_data: bool,
    data_too_long: bool,
    sink: Sink,
}

impl SseReader {
    fn new(tools: bool, cap: usize) -> Self {
        Self {
            line: Vec::new(),
            line_too_long: false,
            after_cr: false,
            data: Vec::new(),
            has_data: false,
            data_too_long: false,
            sink: Sink::new(tools, cap),
        }
    }

    fn push(&mut self, mut rest: &[u8]) {
        while !rest.is_empty() && !self.sink.full {
            if self.after_cr {
                self.after_cr = false;
                if rest[0] == b'\n' {
                    rest = &rest[1..];
                    continue;
                }
            }
            match memchr::memchr2(b'\n', b'\r', rest) {
                Some(i) => {
                    self.append(&rest[..i]);
                    self.after_cr = rest[i] == b'\r';
                    self.end_line();
                    rest = &rest[i + 1..];
                }
                None => {
                    self.append(rest);
                    rest = &[];
                }
            }
        }
    }

    fn append(&mut self, bytes: &[u8]) {
        if self.line_too_long {
            return;
        }
        if self.line.len() + bytes.len() > SSE_EVENT_LIMIT {
            self.line_too_long = true;
            self.line = Vec::new();
        } else {
            self.line.extend_from_slice(bytes);
        }
    }

    fn end_line(&mut self) {
        if std::mem::take(&mut self.line_too_long) {
            // The lost line may have been a data line: the event can no longer be decoded.
            self.data_too_long = true;
            self.has_data = true;
            return;
        }
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            self.dispatch();
        } else if line[0] != b':' {
            let (field, value) = match memchr::memchr(b':', &line) {
                Some(i) => (&line[..i], &line[i + 1..]),
                None => (&line[..], &[][..]),
            };
            if field == b"data" {
                let value = value.strip_prefix(b" ").unwrap_or(value);
                if self.data.len() + value.len() + 1 > SSE_EVENT_LIMIT {
                    self.data_too_long = true;
                    self.data = Vec::new();
                } else if !self.data_too_long {
                    if self.has_data {
                        self.data.push(b'\n');
                    }
                    self.data.extend_from_slice(value);
                }
                self.has_data = true;
            }
            // `event:` names repeat the JSON `type` of every provider read here; `id:` and
            // `retry:` do not matter for text.
        }
        // Reuse the line's allocation for the next line.
        self.line = line;
        self.line.clear();
    }

    fn dispatch(&mut self) {
        let data = std::mem::take(&mut self.data);
        if self.has_data && !self.data_too_long {
            self.sink.event(&data);
        }
        self.data = data;
        self.data.clear();
        self.has_data = false;
        self.data_too_long = false;
    }

    fn finish(mut self) -> Option<String> {
        // A body that ends without a final blank line still delivers its last event.
        if !self.line.is_empty() || self.line_too_long {
            self.end_line();
        }
        self.dispatch();
        self.sink.finish()
    }
}

/// A tool call being assembled from stream deltas.
#[derive(Debug, Default)]
struct ToolAcc {
    key: u64,
    name: String,
    args: String,
}

impl ToolAcc {
    fn add(&mut self, name: Option<&str>, args: Option<&str>) {
        if let Some(n) = name {
            append_bounded(&mut self.name, n, TOOL_ARGS_LIMIT);
        }
        if let Some(a) = args {
            append_bounded(&mut self.args, a, TOOL_ARGS_LIMIT);
        }
    }

    fn line(&self) -> String {
        tool_call_line(&self.name, &Value::String(self.args.clone()))
    }
}

fn append_bounded(s: &mut String, piece: &str, max_bytes: usize) {
    let room = max_bytes.saturating_sub(s.len());
    s.push_str(clamp_bytes(piece, room));
}

/// Where decoded SSE events go: the reply text, bounded by `cap` bytes.
#[derive(Debug)]
struct Sink {
    out: String,
    cap: usize,
    full: bool,
    tools: bool,
    /// Any text was collected (Responses fallbacks apply only when none was).
    saw_text: bool,
    /// A Responses `output_text.delta` was seen: `output_item.done` texts repeat it.
    saw_delta: bool,
    chat_calls: Vec<ToolAcc>,
    anthropic_calls: Vec<ToolAcc>,
}

impl Sink {
    fn new(tools: bool, cap: usize) -> Self {
        Self {
            out: String::new(),
            cap,
            full: false,
            tools,
            saw_text: false,
            saw_delta: false,
            chat_calls: Vec::new(),
            anthropic_calls: Vec::new(),
        }
    }

    fn text(&mut self, s: &str) {
        if self.full || s.is_empty() {
            return;
        }
        self.saw_text = true;
        let room = self.cap.saturating_sub(self.out.len());
        if s.len() <= room {
            self.out.push_str(s);
        } else {
            self.out.push_str(clamp_bytes(s, room));
            self.full = true;
        }
    }

    /// A block of its own: starts on a new line.
    fn block(&mut self, s: &str) {
        if s.is_empty() {
            return;
        }
        if !self.out.is_empty() && !self.out.ends_with('\n') {
            self.text("\n");
        }
        self.text(s);
    }

    fn tool_line(&mut self, line: &str) {
        self.block(line);
        self.text("\n");
    }

    fn event(&mut self, data: &[u8]) {
        let data = data.trim_ascii();
        if data.is_empty() || data == b"[DONE]" {
            return;
        }
        let Ok(v) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        if let Some(choice) = v.get("choices").and_then(|c| c.get(0)) {
            self.chat_chunk(choice);
        } else if let Some(parts) = v
            .get("candidates")
            .and_then(|c| c.get(0))
            .and_then(|c| c.get("content"))
            .and_then(|c| c.get("parts"))
            .and_then(Value::as_array)
        {
            self.gemini_chunk(parts);
        } else {
            self.typed_event(&v);
        }
    }

    fn chat_chunk(&mut self, choice: &Value) {
        let Some(delta) = choice.get("delta") else {
            return;
        };
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            self.text(text);
        }
        if !self.tools {
            return;
        }
        let calls = delta.get("tool_calls").and_then(Value::as_array);
        for (pos, call) in calls.into_iter().flatten().enumerate() {
            let key = call
                .get("index")
                .and_then(Value::as_u64)
                .unwrap_or(pos as u64);
            let f = call.get("function");
            let name = f.and_then(|f| f.get("name")).and_then(Value::as_str);
            let args = f.and_then(|f| f.get("arguments")).and_then(Value::as_str);
            if let Some(acc) = accumulator(&mut self.chat_calls, key) {
                acc.add(name, args);
            }
        }
    }

    fn gemini_chunk(&mut self, parts: &[Value]) {
        for part in parts {
            if let Some(text) = part_text(part) {
                self.text(text);
            } else if self.tools
                && let Some(call) = part.get("functionCall")
            {
                let name = call.get("name").and_then(Value::as_str).unwrap_or("");
                let line = tool_call_line(name, call.get("args").unwrap_or(&Value::Null));
                self.tool_line(&line);
            }
        }
    }

    fn typed_event(&mut self, v: &Value) {
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "response.output_text.delta" => {
                self.saw_delta = true;
                if let Some(d) = v.get("delta").and_then(Value::as_str) {
                    self.text(d);
                }
            }
            "response.output_item.done" => {
                let Some(item) = v.get("item") else { return };
                let item_type = item
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("message");
                if item_type == "message" {
                    if !self.saw_delta {
                        let text = item
                            .get("content")
                            .map(|c| text_of(c, "\n"))
                            .unwrap_or_default();
                        self.block(&text);
                    }
                } else if self.tools
                    && let Some(entry) = responses_item(item)
                    && entry.role.as_deref() == Some("assistant")
                {
                    for line in &entry.parts {
                        self.tool_line(line);
                    }
                }
            }
            "response.completed" | "response.done" => {
                if !self.saw_text
                    && let Some(items) = v
                        .get("response")
                        .and_then(|r| r.get("output"))
                        .and_then(Value::as_array)
                {
                    self.block(&responses_output_text(items));
                }
            }
            "content_block_start" => {
                let Some(block) = v.get("content_block") else {
                    return;
                };
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        if let Some(t) = block.get("text").and_then(Value::as_str) {
                            self.text(t);
                        }
                    }
                    Some("tool_use" | "server_tool_use") if self.tools => {
                        let key = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                        if let Some(acc) = accumulator(&mut self.anthropic_calls, key) {
                            acc.add(block.get("name").and_then(Value::as_str), None);
                        }
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let Some(delta) = v.get("delta") else { return };
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        if let Some(t) = delta.get("text").and_then(Value::as_str) {
                            self.text(t);
                        }
                    }
                    Some("input_json_delta") if self.tools => {
                        let key = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                        let json = delta.get("partial_json").and_then(Value::as_str);
                        if let Some(acc) = self.anthropic_calls.iter_mut().find(|a| a.key == key) {
                            acc.add(None, json);
                        }
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let key = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                if let Some(pos) = self.anthropic_calls.iter().position(|a| a.key == key) {
                    let acc = self.anthropic_calls.remove(pos);
                    self.tool_line(&acc.line());
                }
            }
            _ => {}
        }
    }

    fn finish(mut self) -> Option<String> {
        let pending: Vec<ToolAcc> = std::mem::take(&mut self.chat_calls)
            .into_iter()
            .chain(std::mem::take(&mut self.anthropic_calls))
            .collect();
        for acc in pending {
            self.tool_line(&acc.line());
        }
        let text = self.out.trim();
        (!text.is_empty()).then(|| text.to_owned())
    }
}

/// The accumulator for `key`, created when there is room for one more.
fn accumulator(calls: &mut Vec<ToolAcc>, key: u64) -> Option<&mut ToolAcc> {
    match calls.iter().position(|a| a.key == key) {
        Some(pos) => calls.get_mut(pos),
        None if calls.len() < MAX_TOOL_CALLS => {
            calls.push(ToolAcc {
                key,
                ..ToolAcc::default()
            });
            calls.last_mut()
        }
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn st(v: Value) -> Option<String> {
        summary_text(v.to_string().as_bytes())
    }

    #[test]
    fn json_shapes() {
        assert_eq!(
            st(json!({"choices": [{"message": {"content": " hi "}}]})).as_deref(),
            Some("hi")
        );
        assert_eq!(
            st(json!({"choices": [{"message": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}]})).as_deref(),
            Some("a\nb")
        );
        assert_eq!(
            st(json!({"output": [
                {"type": "reasoning", "summary": []},
                {"type": "message", "content": [{"type": "output_text", "text": "one"}, {"type": "refusal", "refusal": "no"}]},
                {"type": "message", "content": [{"type": "output_text", "text": "two"}]}
            ]}))
            .as_deref(),
            Some("one\ntwo")
        );
        assert_eq!(
            st(json!({"content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "ant"}]})).as_deref(),
            Some("ant")
        );
        assert_eq!(
            st(json!({"candidates": [{"content": {"parts": [{"text": "x", "thought": true}, {"text": "ge"}, {"text": "mini"}]}}]})).as_deref(),
            Some("gemini")
        );
        assert_eq!(
            st(json!([
                {"candidates": [{"content": {"parts": [{"text": "a"}]}}]},
                {"candidates": [{"content": {"parts": [{"text": "b"}]}}]}
            ]))
            .as_deref(),
            Some("ab")
        );
    }

    #[test]
    fn unknown_json_and_plain_text_fall_back_to_raw() {
        assert_eq!(
            st(json!({"summary": "bare"})).as_deref(),
            Some(r#"{"summary":"bare"}"#)
        );
        assert_eq!(
            st(json!({"choices": [{"message": {"content": null}}]})).as_deref(),
            Some(r#"{"choices":[{"message":{"content":null}}]}"#)
        );
        assert_eq!(
            summary_text(b"  plain words \n").as_deref(),
            Some("plain words")
        );
        assert_eq!(summary_text(b"  \n\t"), None);
        assert_eq!(summary_text(b""), None);
        // Never lossy: invalid UTF-8 is no text.
        assert_eq!(summary_text(b"ab\xffcd"), None);
    }

    #[test]
    fn sse_chat() {
        let body = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n\
                    data: {\"choices\":[{\"delta\":{\"content\":\"{\\\"sum\"}}]}\n\n\
                    data: {\"choices\":[{\"delta\":{\"content\":\"mary\\\":1}\"}}]}\n\n\
                    data: {\"choices\":[]}\n\n\
                    data: [DONE]\n\n";
        assert_eq!(
            summary_text(body.as_bytes()).as_deref(),
            Some(r#"{"summary":1}"#)
        );
    }

    #[test]
    fn sse_responses_deltas_and_fallbacks() {
        let with_deltas = "event: response.output_text.delta\r\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"A\"}\r\n\r\n\
            event: response.output_text.delta\r\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"B\"}\r\n\r\n\
            data: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"AB\"}]}}\r\n\r\n\
            data: {\"type\":\"response.completed\",\"response\":{\"output\":[{\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"AB\"}]}]}}\r\n\r\n";
        assert_eq!(summary_text(with_deltas.as_bytes()).as_deref(), Some("AB"));
        let item_only = "data: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"from item\"}]}}\n\n\
            data: {\"type\":\"response.completed\",\"response\":{\"output\":[{\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"from item\"}]}]}}\n\n";
        assert_eq!(
            summary_text(item_only.as_bytes()).as_deref(),
            Some("from item")
        );
        let completed_only = "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"output\":[{\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"late\"}]}]}}";
        assert_eq!(
            summary_text(completed_only.as_bytes()).as_deref(),
            Some("late")
        );
    }

    #[test]
    fn sse_anthropic_and_gemini() {
        let body = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n\
            event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"secret\"}}\n\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"vis\"}}\n\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"ible\"}}\n\n\
            event: ping\ndata: {\"type\":\"ping\"}\n\n";
        assert_eq!(summary_text(body.as_bytes()).as_deref(), Some("visible"));
        let gemini = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"gem\"}]}}]}\n\ndata: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"ini\"}]}}]}\n\n";
        assert_eq!(summary_text(gemini.as_bytes()).as_deref(), Some("gemini"));
        assert_eq!(summary_text(b": keep-alive\n\ndata: [DONE]\n\n"), None);
    }

    #[test]
    fn multi_line_data_fields_join_with_newline() {
        let body = "data: {\"type\":\"response.output_text.delta\",\ndata: \"delta\":\"x\"}\n\n";
        assert_eq!(summary_text(body.as_bytes()).as_deref(), Some("x"));
    }

    fn capture(is_sse: bool, body: &[u8], split: usize, cap: usize) -> Option<String> {
        let mut c = ReplyCapture::new(is_sse, cap);
        for chunk in body.chunks(split.max(1)) {
            c.push(chunk);
        }
        c.finish()
    }

    #[test]
    fn capture_sse_is_split_independent() {
        let body = "event: response.output_text.delta\r\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"héllo \"}\r\n\r\n\
            data: {\"type\":\"response.output_text.delta\",\"delta\":\"wörld\"}\r\n\r\n\
            data: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"function_call\",\"name\":\"shell\",\"arguments\":\"{\\\"cmd\\\":\\\"ls\\\"}\",\"call_id\":\"c\"}}\r\n\r\n";
        for split in 1..40 {
            assert_eq!(
                capture(true, body.as_bytes(), split, REPLY_CAP).as_deref(),
                Some("héllo wörld\ntool call shell({\"cmd\":\"ls\"})"),
                "split {split}"
            );
        }
    }

    #[test]
    fn capture_chat_and_anthropic_tool_calls() {
        let chat = "data: {\"choices\":[{\"delta\":{\"content\":\"Let me look.\"}}]}\n\n\
            data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":\"\"}}]}}]}\n\n\
            data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"p\\\":\"}}]}}]}\n\n\
            data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"1}\"}}]}}]}\n\n\
            data: [DONE]\n\n";
        assert_eq!(
            capture(true, chat.as_bytes(), 7, REPLY_CAP).as_deref(),
            Some("Let me look.\ntool call read({\"p\":1})")
        );
        let anthropic = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Running it.\"}}\n\n\
            event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"Bash\",\"input\":{}}}\n\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"command\\\":\"}}\n\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"ls\\\"}\"}}\n\n\
            event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n";
        assert_eq!(
            capture(true, anthropic.as_bytes(), 5, REPLY_CAP).as_deref(),
            Some("Running it.\ntool call Bash({\"command\":\"ls\"})")
        );
        // Summary text never carries tool lines.
        assert_eq!(
            summary_text(anthropic.as_bytes()).as_deref(),
            Some("Running it.")
        );
    }

    #[test]
    fn capture_is_capped_on_a_char_boundary() {
        let delta = json!({"type": "response.output_text.delta", "delta": "é".repeat(100)});
        let body = format!("data: {delta}\n\n").repeat(1000);
        let text = capture(true, body.as_bytes(), 4096, 1001).expect("text");
        assert_eq!(text.len(), 1000);
        let mut c = ReplyCapture::new(true, 10);
        c.push(format!("data: {delta}\n\n").as_bytes());
        assert!(c.is_done());
    }

    #[test]
    fn capture_json_reply() {
        let body = json!({"choices": [{"message": {"content": "done", "tool_calls": [
            {"type": "function", "function": {"name": "grep", "arguments": "{}"}}
        ]}}]})
        .to_string();
        assert_eq!(
            capture(false, body.as_bytes(), 3, REPLY_CAP).as_deref(),
            Some("done\ntool call grep({})")
        );
        let body = json!({"output": [
            {"type": "reasoning", "summary": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
            {"type": "function_call", "name": "shell", "arguments": "{}"}
        ]})
        .to_string();
        assert_eq!(
            capture(false, body.as_bytes(), 100, REPLY_CAP).as_deref(),
            Some("ok\ntool call shell({})")
        );
        let body = json!({"content": [{"type": "text", "text": "x".repeat(50)}]}).to_string();
        assert_eq!(
            capture(false, body.as_bytes(), 100, 10).as_deref(),
            Some("xxxxxxxxxx")
        );
    }

    #[test]
    fn capture_json_gives_up_beyond_the_raw_limit() {
        let mut c = ReplyCapture::new(false, REPLY_CAP);
        let chunk = vec![b' '; 64 * 1024];
        for _ in 0..17 {
            c.push(&chunk);
        }
        assert!(c.is_done());
        assert_eq!(c.finish(), None);
    }

    #[test]
    fn overlong_lines_and_events_are_skipped() {
        let mut c = ReplyCapture::new(true, REPLY_CAP);
        c.push(b"data: ");
        let junk = vec![b'x'; 256 * 1024];
        for _ in 0..5 {
            c.push(&junk);
        }
        c.push(b"\n\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"after\"}\n\n");
        assert_eq!(c.finish().as_deref(), Some("after"));
    }
}
