//! An Anthropic Messages SSE stream as a Responses SSE stream, translated incrementally.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::error::responses_error_code;
use super::response::{ResponseContext, call_item, message_item, response_object, usage};
use crate::sse::{Event, Splitter};

/// The largest SSE line or event data read whole (a Messages event is far smaller).
const EVENT_LIMIT: usize = 8 * 1024 * 1024;

/// Translates a Messages SSE body, fed in chunks split anywhere, into the Responses events a
/// Responses client reads: `response.created`, `response.in_progress`,
/// `response.output_item.added`, `response.content_part.added`, `response.output_text.delta`,
/// `response.function_call_arguments.delta`, their `.done` events,
/// `response.output_item.done` with the whole item, and `response.completed` (with `usage` and
/// every output item) at `message_stop`, or `response.incomplete` when the model ran out of
/// tokens. An `error` event, or a body that ends before `message_stop`, gives
/// `response.failed` (its `code` as [`responses_error_code`](super::responses_error_code)
/// says). Every event carries an `event:` line and a `sequence_number`. A `ping` becomes
/// the SSE comment `: ping`, which SSE readers skip but which keeps a client's idle timer
/// from firing while the first token is slow to come.
///
/// ```
/// use context_relay_core::translate::{ResponseContext, StreamTranslator};
/// let mut t = StreamTranslator::new(ResponseContext::default());
/// let mut out = t.push(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"usage\":{\"input_tokens\":5}}}\n\n");
/// out.extend(t.push(b"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"));
/// out.extend(t.push(b"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n"));
/// out.extend(t.push(b"data: {\"type\":\"content_block_stop\",\"index\":0}\n\ndata: {\"type\":\"message_stop\"}\n\n"));
/// out.extend(t.finish());
/// let text = String::from_utf8(out).unwrap();
/// assert!(text.contains("\"type\":\"response.output_text.delta\""));
/// assert!(text.contains("event: response.completed"));
/// assert!(t.is_done());
/// ```
#[derive(Debug)]
pub struct StreamTranslator {
    splitter: Splitter,
    state: State,
}

#[derive(Debug)]
enum Block {
    Text {
        item_id: String,
        output_index: usize,
        text: String,
    },
    Call {
        item_id: String,
        output_index: usize,
        call_id: String,
        name: String,
        args: String,
        initial: Value,
        custom: bool,
    },
    Other,
}

#[derive(Debug, Default)]
struct State {
    ctx: ResponseContext,
    id: String,
    model: Option<String>,
    started: bool,
    done: bool,
    seq: u64,
    blocks: HashMap<u64, Block>,
    next_output: usize,
    output: Vec<(usize, Value)>,
    start_usage: Option<Value>,
    output_tokens: Option<u64>,
    stop_reason: Option<String>,
}

impl StreamTranslator {
    /// A translator for one response.
    pub fn new(ctx: ResponseContext) -> Self {
        Self {
            splitter: Splitter::new(EVENT_LIMIT),
            state: State {
                model: ctx.model.clone(),
                ctx,
                id: "resp".into(),
                ..State::default()
            },
        }
    }

    /// Feeds the next bytes of the Messages stream; returns the Responses SSE bytes they
    /// complete (possibly none).
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let state = &mut self.state;
        self.splitter.push(chunk, |e| state.on_event(&e, &mut out));
        out
    }

    /// Ends the stream: reads a last unterminated event, and answers `response.failed` when
    /// the stream ended before `message_stop`.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        let state = &mut self.state;
        self.splitter.finish(|e| state.on_event(&e, &mut out));
        if !state.done {
            state.fail(
                "api_error",
                "the provider's stream ended before message_stop",
                &mut out,
            );
        }
        out
    }

    /// The whole translated stream of a request the provider refused before streaming:
    /// `response.created`, then `response.failed` with `code` and `message`. A Responses
    /// client reads some errors only there (Codex CLI reads `context_length_exceeded` as a
    /// full context window only in `response.failed`).
    ///
    /// ```
    /// use context_relay_core::translate::{ResponseContext, StreamTranslator};
    /// let mut t = StreamTranslator::new(ResponseContext::default());
    /// let text = String::from_utf8(t.fail("context_length_exceeded", "prompt is too long")).unwrap();
    /// assert!(text.starts_with("event: response.created\n"));
    /// assert!(text.contains("\"code\":\"context_length_exceeded\""));
    /// assert!(t.is_done() && t.finish().is_empty());
    /// ```
    pub fn fail(&mut self, code: &str, message: &str) -> Vec<u8> {
        let mut out = Vec::new();
        if !self.state.done {
            self.state.fail(code, message, &mut out);
        }
        out
    }

    /// Whether the translated stream reached its last event (completed, incomplete or failed).
    pub fn is_done(&self) -> bool {
        self.state.done
    }
}

impl State {
    fn emit(&mut self, out: &mut Vec<u8>, mut v: Value) {
        v["sequence_number"] = json!(self.seq);
        self.seq += 1;
        let kind = v["type"].as_str().unwrap_or("").to_owned();
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\ndata: ");
        out.extend_from_slice(v.to_string().as_bytes());
        out.extend_from_slice(b"\n\n");
    }

    fn response(&self, status: &str, output: Vec<Value>) -> Value {
        let mut r = response_object(
            &self.id,
            self.model.as_deref(),
            self.ctx.created_at,
            output,
            None,
            None,
        );
        r["status"] = json!(status);
        r
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let r = self.response("in_progress", Vec::new());
        self.emit(out, json!({"type": "response.created", "response": r}));
        let r = self.response("in_progress", Vec::new());
        self.emit(out, json!({"type": "response.in_progress", "response": r}));
    }

    fn fail(&mut self, code: &str, message: &str, out: &mut Vec<u8>) {
        self.start(out);
        self.done = true;
        let mut r = self.response(
            "failed",
            self.output.iter().map(|(_, v)| v.clone()).collect(),
        );
        r["error"] = json!({"code": code, "message": message});
        self.emit(out, json!({"type": "response.failed", "response": r}));
    }

    fn on_event(&mut self, e: &Event<'_>, out: &mut Vec<u8>) {
        if self.done || !e.has_data || !e.is_whole() {
            return;
        }
        let Ok(v) = serde_json::from_slice::<Value>(e.data) else {
            return;
        };
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        match v.get("type").and_then(Value::as_str).unwrap_or("") {
            "message_start" => {
                let m = &v["message"];
                if let Some(id) = m.get("id").and_then(Value::as_str) {
                    self.id = format!("resp_{id}");
                }
                if self.model.is_none() {
                    self.model = m.get("model").and_then(Value::as_str).map(str::to_owned);
                }
                self.start_usage = m.get("usage").cloned();
                self.start(out);
            }
            "content_block_start" => {
                self.start(out);
                self.block_start(index, &v["content_block"], out);
            }
            "content_block_delta" => self.block_delta(index, &v["delta"], out),
            "content_block_stop" => self.block_stop(index, out),
            "message_delta" => {
                if let Some(r) = v["delta"].get("stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(r.to_owned());
                }
                if let Some(n) = v["usage"].get("output_tokens").and_then(Value::as_u64) {
                    self.output_tokens = Some(n);
                }
                if let Some(u) = v.get("usage").filter(|u| u.get("input_tokens").is_some()) {
                    self.start_usage = Some(u.clone());
                }
            }
            "message_stop" => self.complete(out),
            "ping" => out.extend_from_slice(b": ping\n\n"),
            "error" => {
                let err = &v["error"];
                let kind = err
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("api_error");
                let message = err.get("message").and_then(Value::as_str).unwrap_or(kind);
                let code = responses_error_code(kind, message).to_owned();
                let message = message.to_owned();
                self.fail(&code, &message, out);
            }
            _ => {}
        }
    }

    fn block_start(&mut self, index: u64, b: &Value, out: &mut Vec<u8>) {
        let output_index = self.next_output;
        let block = match b.get("type").and_then(Value::as_str) {
            Some("text") => {
                let item_id = format!("msg_{}_{index}", self.id);
                let item = json!({"type": "message", "id": item_id, "status": "in_progress", "role": "assistant", "content": []});
                self.emit(out, json!({"type": "response.output_item.added", "output_index": output_index, "item": item}));
                self.emit(out, json!({"type": "response.content_part.added", "item_id": item_id, "output_index": output_index, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}));
                let text = b
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                Block::Text {
                    item_id,
                    output_index,
                    text,
                }
            }
            Some("tool_use") => {
                let call_id = b
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or("call")
                    .to_owned();
                let name = b
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("tool")
                    .to_owned();
                let custom = self.ctx.custom_tools.contains(&name);
                let (item_id, item) = if custom {
                    let id = format!("ctc_{call_id}");
                    (
                        id.clone(),
                        json!({"type": "custom_tool_call", "id": id, "status": "in_progress", "call_id": call_id, "name": name, "input": ""}),
                    )
                } else {
                    let id = format!("fc_{call_id}");
                    (
                        id.clone(),
                        json!({"type": "function_call", "id": id, "status": "in_progress", "call_id": call_id, "name": name, "arguments": ""}),
                    )
                };
                self.emit(out, json!({"type": "response.output_item.added", "output_index": output_index, "item": item}));
                let initial = b.get("input").cloned().unwrap_or(Value::Null);
                Block::Call {
                    item_id,
                    output_index,
                    call_id,
                    name,
                    args: String::new(),
                    initial,
                    custom,
                }
            }
            // Thinking blocks are the provider's state: a Responses client cannot send them back.
            _ => Block::Other,
        };
        if !matches!(block, Block::Other) {
            self.next_output += 1;
        }
        self.blocks.insert(index, block);
    }

    fn block_delta(&mut self, index: u64, d: &Value, out: &mut Vec<u8>) {
        let mut event = None;
        match self.blocks.get_mut(&index) {
            Some(Block::Text {
                item_id,
                output_index,
                text,
            }) => {
                if let Some(t) = d.get("text").and_then(Value::as_str) {
                    text.push_str(t);
                    event = Some(
                        json!({"type": "response.output_text.delta", "item_id": item_id, "output_index": output_index, "content_index": 0, "delta": t}),
                    );
                }
            }
            Some(Block::Call {
                item_id,
                output_index,
                args,
                custom,
                ..
            }) => {
                if let Some(p) = d.get("partial_json").and_then(Value::as_str) {
                    args.push_str(p);
                    if !*custom {
                        event = Some(
                            json!({"type": "response.function_call_arguments.delta", "item_id": item_id, "output_index": output_index, "delta": p}),
                        );
                    }
                }
            }
            _ => {}
        }
        if let Some(e) = event {
            self.emit(out, e);
        }
    }

    fn block_stop(&mut self, index: u64, out: &mut Vec<u8>) {
        match self.blocks.remove(&index) {
            Some(Block::Text {
                item_id,
                output_index,
                text,
            }) => {
                self.emit(out, json!({"type": "response.output_text.done", "item_id": item_id, "output_index": output_index, "content_index": 0, "text": text}));
                self.emit(out, json!({"type": "response.content_part.done", "item_id": item_id, "output_index": output_index, "content_index": 0, "part": {"type": "output_text", "text": text, "annotations": []}}));
                let item = message_item(&item_id, &text);
                self.emit(out, json!({"type": "response.output_item.done", "output_index": output_index, "item": item}));
                self.output.push((output_index, item));
            }
            Some(Block::Call {
                item_id,
                output_index,
                call_id,
                name,
                args,
                initial,
                custom,
            }) => {
                let input = if args.trim().is_empty() {
                    match initial {
                        Value::Object(o) => Value::Object(o),
                        _ => json!({}),
                    }
                } else {
                    serde_json::from_str(&args).unwrap_or_else(|_| json!({}))
                };
                let mut item = call_item(&call_id, &name, &input, &self.ctx);
                if !custom {
                    if !args.trim().is_empty() {
                        item["arguments"] = json!(args);
                    }
                    self.emit(out, json!({"type": "response.function_call_arguments.done", "item_id": item_id, "output_index": output_index, "arguments": item["arguments"]}));
                }
                self.emit(out, json!({"type": "response.output_item.done", "output_index": output_index, "item": item}));
                self.output.push((output_index, item));
            }
            _ => {}
        }
    }

    fn complete(&mut self, out: &mut Vec<u8>) {
        self.start(out);
        self.done = true;
        self.output.sort_by_key(|(i, _)| *i);
        let output: Vec<Value> = self.output.iter().map(|(_, v)| v.clone()).collect();
        let usage = usage(self.start_usage.as_ref(), self.output_tokens);
        let r = response_object(
            &self.id,
            self.model.as_deref(),
            self.ctx.created_at,
            output,
            self.stop_reason.as_deref(),
            Some(usage),
        );
        let kind = if r["status"] == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        self.emit(out, json!({"type": kind, "response": r}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: &str =
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\"}}\n\n";
    const PING: &str = "event: ping\ndata: {\"type\": \"ping\"}\n\n";

    #[test]
    fn pings_become_sse_comments() {
        let mut t = StreamTranslator::new(ResponseContext::default());
        let head = t.push(START.as_bytes());
        assert!(head.starts_with(b"event: response.created"));
        assert_eq!(t.push(PING.as_bytes()), b": ping\n\n");
        // Split anywhere, still one comment once the event is whole.
        let (a, b) = PING.as_bytes().split_at(9);
        assert!(t.push(a).is_empty());
        assert_eq!(t.push(b), b": ping\n\n");
        // A ping before message_start too.
        let mut t = StreamTranslator::new(ResponseContext::default());
        assert_eq!(t.push(PING.as_bytes()), b": ping\n\n");
    }

    #[test]
    fn error_events_carry_the_responses_code() {
        for (kind, message, code) in [
            ("overloaded_error", "Overloaded", "server_is_overloaded"),
            (
                "invalid_request_error",
                "prompt is too long: 9 tokens > 5 maximum",
                "context_length_exceeded",
            ),
            ("api_error", "Internal server error", "api_error"),
        ] {
            let mut t = StreamTranslator::new(ResponseContext::default());
            let err = format!(
                "event: error\ndata: {}\n\n",
                json!({"type": "error", "error": {"type": kind, "message": message}})
            );
            let mut out = t.push(START.as_bytes());
            out.extend(t.push(err.as_bytes()));
            out.extend(t.finish());
            let text = String::from_utf8(out).unwrap();
            let last = text
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .next_back()
                .unwrap();
            let v: Value = serde_json::from_str(last).unwrap();
            assert_eq!(v["type"], "response.failed");
            assert_eq!(v["response"]["error"]["code"], code);
            assert_eq!(v["response"]["error"]["message"], message);
        }
    }

    #[test]
    fn a_refusal_is_created_then_failed() {
        let mut t = StreamTranslator::new(ResponseContext::default());
        let out = t.fail(
            "context_length_exceeded",
            "prompt is too long: 9 tokens > 5 maximum",
        );
        let text = String::from_utf8(out).unwrap();
        let types: Vec<Value> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str::<Value>(d).unwrap()["type"].clone())
            .collect();
        assert_eq!(
            types,
            [
                "response.created",
                "response.in_progress",
                "response.failed"
            ]
        );
        assert!(t.is_done());
        assert!(t.fail("x", "y").is_empty(), "one terminal event");
        assert!(t.push(START.as_bytes()).is_empty());
    }
}
