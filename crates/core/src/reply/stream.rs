//! Text and tool-call lines out of a streamed (SSE) reply, event by event, in bounded memory.

use serde_json::Value;

use super::SSE_EVENT_LIMIT;
use super::body::{part_text, responses_output_text, text_of};
use crate::conversation::{responses_item, tool_call_line};
use crate::parse::clamp_bytes;
use crate::sse::{Event, Splitter};

/// Most tool calls of one streamed reply that are assembled at once.
const MAX_TOOL_CALLS: usize = 32;
/// Bytes of streamed tool-call arguments kept per call: more than a tool line shows.
const TOOL_ARGS_LIMIT: usize = 1024;

/// An incremental SSE reader feeding a [`Sink`]: events whose data is whole are decoded,
/// longer ones (past [`SSE_EVENT_LIMIT`]) are skipped.
#[derive(Debug)]
pub(super) struct SseReader {
    sse: Splitter,
    sink: Sink,
}

impl SseReader {
    pub(super) fn new(tools: bool, cap: usize) -> Self {
        Self {
            sse: Splitter::new(SSE_EVENT_LIMIT),
            sink: Sink::new(tools, cap),
        }
    }

    /// Whether the text cap was reached: pushing more changes nothing.
    pub(super) fn is_full(&self) -> bool {
        self.sink.full
    }

    pub(super) fn push(&mut self, chunk: &[u8]) {
        if self.sink.full {
            return;
        }
        let sink = &mut self.sink;
        self.sse.push(chunk, |event| sink.sse_event(&event));
    }

    pub(super) fn finish(mut self) -> Option<String> {
        // A body that ends without a final blank line still delivers its last event.
        let sink = &mut self.sink;
        self.sse.finish(|event| sink.sse_event(&event));
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

    /// Reads one SSE event. `event:` names repeat the JSON `type` of every provider read here,
    /// so only the data is read; an event cut at the limit cannot be decoded and is skipped.
    fn sse_event(&mut self, event: &Event<'_>) {
        if event.has_data && event.is_whole() {
            self.event(event.data);
        }
    }

    fn event(&mut self, data: &[u8]) {
        if self.full {
            return;
        }
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
