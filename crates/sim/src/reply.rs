//! The simulated provider's replies: JSON bodies and SSE event sequences per API.

use std::convert::Infallible;

use axum::body::Body;
use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderValue, Response, header};
use http_body::Frame;
use http_body_util::StreamBody;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use super::{calls, unix_now};

#[derive(Default)]
pub(super) struct Reply {
    pub(super) id: u64,
    pub(super) model: String,
    pub(super) text: String,
    /// Every input token, the cached ones included.
    pub(super) input_tokens: u64,
    /// Of `input_tokens`, those read from the prompt cache.
    pub(super) cached_tokens: u64,
    /// Every output token, the reasoning ones included.
    pub(super) output_tokens: u64,
    /// Of `output_tokens`, reasoning (reported by the OpenAI APIs only).
    pub(super) reasoning_tokens: u64,
    pub(super) include_usage: bool,
    /// A reasoning item (id, `encrypted_content`) before the message (Responses).
    pub(super) reasoning: Option<(String, String)>,
    /// The signature of a thinking block before the text (Messages).
    pub(super) thinking: Option<String>,
    /// A tool call: after the text (Messages), instead of the text (Responses, Chat, Gemini):
    /// id, tool name, input.
    pub(super) tool_use: Option<(String, String, Value)>,
}

impl Reply {
    /// The usage of this reply in the Chat Completions shape.
    fn chat_usage(&self) -> Value {
        json!({"prompt_tokens": self.input_tokens, "completion_tokens": self.output_tokens,
               "total_tokens": self.input_tokens + self.output_tokens,
               "prompt_tokens_details": {"cached_tokens": self.cached_tokens, "audio_tokens": 0},
               "completion_tokens_details": {"reasoning_tokens": self.reasoning_tokens,
                                             "audio_tokens": 0}})
    }

    /// The usage of this reply in the Responses shape.
    fn responses_usage(&self) -> Value {
        json!({"input_tokens": self.input_tokens,
               "input_tokens_details": {"cached_tokens": self.cached_tokens},
               "output_tokens": self.output_tokens,
               "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
               "total_tokens": self.input_tokens + self.output_tokens})
    }

    /// The usage of this reply in the Messages shape, with `output` output tokens: Anthropic's
    /// `input_tokens` leaves the cache reads out.
    fn messages_usage(&self, output: u64) -> Value {
        json!({"input_tokens": self.input_tokens - self.cached_tokens.min(self.input_tokens),
               "cache_read_input_tokens": self.cached_tokens,
               "cache_creation_input_tokens": 0, "output_tokens": output})
    }

    /// The text in two deltas, so that streams carry more than one.
    fn halves(&self) -> (&str, &str) {
        let mid = self.text.char_indices().nth(self.text.chars().count() / 2);
        self.text.split_at(mid.map_or(self.text.len(), |(i, _)| i))
    }
}

pub(super) fn chat_json(r: &Reply) -> Value {
    let (message, finish) = match &r.tool_use {
        Some(call) => (calls::chat_message(call), "tool_calls"),
        None => (json!({"role": "assistant", "content": r.text}), "stop"),
    };
    json!({
        "id": format!("chatcmpl-sim-{}", r.id), "object": "chat.completion", "created": unix_now(),
        "model": r.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": r.chat_usage()
    })
}

pub(super) fn chat_events(r: &Reply) -> Vec<Bytes> {
    chat_events_in(r, 2)
}

/// The Chat Completions stream with the text in `deltas` content deltas (at least two).
pub(super) fn chat_events_in(r: &Reply, deltas: usize) -> Vec<Bytes> {
    let id = format!("chatcmpl-sim-{}", r.id);
    let chunk = |delta: Value, finish: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": unix_now(), "model": r.model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let pieces: Vec<String> = if deltas <= 2 {
        let (a, b) = r.halves();
        vec![a.to_owned(), b.to_owned()]
    } else {
        let chars: Vec<char> = r.text.chars().collect();
        (0..deltas)
            .map(|i| {
                let (from, to) = (i * chars.len() / deltas, (i + 1) * chars.len() / deltas);
                chars[from..to].iter().collect()
            })
            .collect()
    };
    let mut out = Vec::new();
    if let Some(call) = &r.tool_use {
        out.push(chunk(
            json!({"role": "assistant", "content": null}),
            Value::Null,
        ));
        out.extend(
            calls::chat_deltas(call)
                .into_iter()
                .map(|d| chunk(d, Value::Null)),
        );
        out.push(chunk(json!({}), json!("tool_calls")));
    } else {
        out.push(chunk(
            json!({"role": "assistant", "content": ""}),
            Value::Null,
        ));
        out.extend(
            pieces
                .into_iter()
                .map(|p| chunk(json!({ "content": p }), Value::Null)),
        );
        out.push(chunk(json!({}), json!("stop")));
    }
    if r.include_usage {
        out.push(
            json!({"id": id, "object": "chat.completion.chunk", "created": unix_now(),
            "model": r.model, "choices": [], "usage": r.chat_usage()}),
        );
    }
    let mut events: Vec<Bytes> = out
        .into_iter()
        .map(|v| Bytes::from(format!("data: {v}\n\n")))
        .collect();
    events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    events
}

fn responses_message(r: &Reply, text: &str, status: &str) -> Value {
    json!({"type": "message", "id": format!("msg_sim_{}", r.id), "status": status,
           "role": "assistant",
           "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

/// The reasoning item of a reply, with its account-bound blob.
fn responses_reasoning(r: &Reply) -> Option<Value> {
    let (id, blob) = r.reasoning.as_ref()?;
    Some(json!({"type": "reasoning", "id": id,
                "summary": [{"type": "summary_text", "text": "Considered the request."}],
                "encrypted_content": blob}))
}

fn responses_output(r: &Reply) -> Value {
    let mut out: Vec<Value> = responses_reasoning(r).into_iter().collect();
    out.push(match &r.tool_use {
        Some(call) => calls::responses_item(call, true),
        None => responses_message(r, &r.text, "completed"),
    });
    Value::Array(out)
}

pub(super) fn responses_json(r: &Reply) -> Value {
    json!({
        "id": format!("resp_sim_{}", r.id), "object": "response", "created_at": unix_now(),
        "status": "completed", "model": r.model,
        "output": responses_output(r),
        "usage": r.responses_usage()
    })
}

fn responses_base(r: &Reply, status: &str, output: Value, usage: Value) -> Value {
    json!({"id": format!("resp_sim_{}", r.id), "object": "response", "created_at": unix_now(),
           "status": status, "model": r.model, "output": output, "usage": usage})
}

fn numbered(events: Vec<Value>) -> Vec<Bytes> {
    events
        .into_iter()
        .enumerate()
        .map(|(i, mut v)| {
            v["sequence_number"] = json!(i);
            let kind = v["type"].as_str().unwrap_or("message").to_owned();
            Bytes::from(format!("event: {kind}\ndata: {v}\n\n"))
        })
        .collect()
}

pub(super) fn responses_events(r: &Reply) -> Vec<Bytes> {
    let mut events = vec![
        json!({"type": "response.created", "response": responses_base(r, "in_progress", json!([]), Value::Null)}),
        json!({"type": "response.in_progress", "response": responses_base(r, "in_progress", json!([]), Value::Null)}),
    ];
    let mut index = 0;
    if let Some(item) = responses_reasoning(r) {
        let mut added = item.clone();
        added["summary"] = json!([]);
        events
            .push(json!({"type": "response.output_item.added", "output_index": 0, "item": added}));
        events.push(json!({"type": "response.output_item.done", "output_index": 0, "item": item}));
        index = 1;
    }
    if let Some(call) = &r.tool_use {
        events.extend(calls::responses_events(call, index));
    } else {
        events.extend(responses_message_events(r, index));
    }
    events.push(
        json!({"type": "response.completed", "response": responses_base(
            r,
            "completed",
            responses_output(r),
            r.responses_usage(),
        )}),
    );
    numbered(events)
}

/// The stream events of the assistant message of a Responses reply at `index`.
fn responses_message_events(r: &Reply, index: usize) -> Vec<Value> {
    let item_id = format!("msg_sim_{}", r.id);
    let (a, b) = r.halves();
    let part = |text: &str| json!({"type": "output_text", "text": text, "annotations": []});
    vec![
        json!({"type": "response.output_item.added", "output_index": index,
               "item": responses_message(r, "", "in_progress")}),
        json!({"type": "response.content_part.added", "item_id": item_id, "output_index": index,
               "content_index": 0, "part": part("")}),
        json!({"type": "response.output_text.delta", "item_id": item_id, "output_index": index,
               "content_index": 0, "delta": a}),
        json!({"type": "response.output_text.delta", "item_id": item_id, "output_index": index,
               "content_index": 0, "delta": b}),
        json!({"type": "response.output_text.done", "item_id": item_id, "output_index": index,
               "content_index": 0, "text": r.text}),
        json!({"type": "response.content_part.done", "item_id": item_id, "output_index": index,
               "content_index": 0, "part": part(&r.text)}),
        json!({"type": "response.output_item.done", "output_index": index,
               "item": responses_message(r, &r.text, "completed")}),
    ]
}

/// A Responses stream that fails before any output: `response.created`,
/// `response.in_progress`, then `response.failed` carrying `error` (`{code, message}`).
pub(super) fn responses_failed_events(r: &Reply, error: Value) -> Vec<Bytes> {
    let mut failed = responses_base(r, "failed", json!([]), Value::Null);
    failed["error"] = error;
    numbered(vec![
        json!({"type": "response.created", "response": responses_base(r, "in_progress", json!([]), Value::Null)}),
        json!({"type": "response.in_progress", "response": responses_base(r, "in_progress", json!([]), Value::Null)}),
        json!({"type": "response.failed", "response": failed}),
    ])
}

pub(super) fn messages_json(r: &Reply) -> Value {
    let mut content = Vec::new();
    if let Some(signature) = &r.thinking {
        content.push(
            json!({"type": "thinking", "thinking": "Considering the request.",
                            "signature": signature}),
        );
    }
    content.push(json!({"type": "text", "text": r.text}));
    if let Some((id, name, input)) = &r.tool_use {
        content.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
    }
    json!({
        "id": format!("msg_sim_{}", r.id), "type": "message", "role": "assistant",
        "model": r.model, "content": content,
        "stop_reason": stop_reason(r), "stop_sequence": null,
        "usage": r.messages_usage(r.output_tokens)
    })
}

fn messages_start(r: &Reply) -> Value {
    json!({"type": "message_start", "message": {
        "id": format!("msg_sim_{}", r.id), "type": "message", "role": "assistant",
        "model": r.model, "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": r.messages_usage(1)}})
}

fn named(events: Vec<Value>) -> Vec<Bytes> {
    events
        .into_iter()
        .map(|v| {
            let kind = v["type"].as_str().unwrap_or("message").to_owned();
            Bytes::from(format!("event: {kind}\ndata: {v}\n\n"))
        })
        .collect()
}

pub(super) fn messages_events(r: &Reply) -> Vec<Bytes> {
    let (a, b) = r.halves();
    let mut events = vec![messages_start(r)];
    let mut index = 0;
    if let Some(signature) = &r.thinking {
        events.extend([
            json!({"type": "content_block_start", "index": 0,
                   "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "thinking_delta", "thinking": "Considering the request."}}),
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "signature_delta", "signature": signature}}),
            json!({"type": "content_block_stop", "index": 0}),
        ]);
        index = 1;
    }
    let delta = |t: &str| {
        json!({"type": "content_block_delta", "index": index,
               "delta": {"type": "text_delta", "text": t}})
    };
    events.extend([
        json!({"type": "content_block_start", "index": index,
               "content_block": {"type": "text", "text": ""}}),
        json!({"type": "ping"}),
        delta(a),
        delta(b),
        json!({"type": "content_block_stop", "index": index}),
    ]);
    if let Some((id, name, input)) = &r.tool_use {
        let at = index + 1;
        let args = input.to_string();
        let (a, b) = args.split_at(args.len() / 2);
        let part = |p: &str| {
            json!({"type": "content_block_delta", "index": at,
                   "delta": {"type": "input_json_delta", "partial_json": p}})
        };
        events.extend([
            json!({"type": "content_block_start", "index": at,
                   "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
            part(a),
            part(b),
            json!({"type": "content_block_stop", "index": at}),
        ]);
    }
    events.extend([
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason(r), "stop_sequence": null},
               "usage": {"output_tokens": r.output_tokens}}),
        json!({"type": "message_stop"}),
    ]);
    named(events)
}

fn stop_reason(r: &Reply) -> &'static str {
    if r.tool_use.is_some() {
        "tool_use"
    } else {
        "end_turn"
    }
}

/// A Messages stream that fails before any content: `message_start`, then an `error` event
/// holding `error` (Anthropic sends `overloaded_error` this way, and `rate_limit_error`).
pub(super) fn messages_failed_events(r: &Reply, error: Value) -> Vec<Bytes> {
    named(vec![
        messages_start(r),
        json!({"type": "error", "error": error}),
    ])
}

/// Whether an SSE event only opens the stream (no output yet): a relay may hold these back
/// until it knows the stream succeeds.
fn opening(event: &[u8]) -> bool {
    const OPENING: [&[u8]; 4] = [
        b"event: response.created\n",
        b"event: response.in_progress\n",
        b"event: message_start\n",
        b"event: ping\n",
    ];
    OPENING.iter().any(|o| event.starts_with(o))
}

/// An SSE response sending `events` one frame each; with a hold, the events up to the first
/// output event go out, then the rest waits until the hold is released.
pub(super) fn sse(events: Vec<Bytes>, hold: Option<watch::Receiver<bool>>) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    tokio::spawn(async move {
        let mut hold = hold;
        let mut output_sent = false;
        for e in events {
            if output_sent && let Some(h) = hold.as_mut() {
                // A dropped hold counts as released.
                let _ = h.wait_for(|released| *released).await;
                hold = None;
            }
            output_sent |= !opening(&e);
            if tx.send(e).await.is_err() {
                return;
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    let mut res = Response::new(Body::new(StreamBody::new(stream.boxed())));
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    res.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply() -> Reply {
        Reply {
            id: 1,
            model: "m".into(),
            text: "héllo world".into(),
            input_tokens: 3,
            output_tokens: 2,
            include_usage: true,
            ..Reply::default()
        }
    }

    fn parse(events: &[Bytes]) -> Vec<(Option<String>, Value)> {
        events
            .iter()
            .filter_map(|e| {
                let s = std::str::from_utf8(e).unwrap();
                let event = s
                    .lines()
                    .find_map(|l| l.strip_prefix("event: "))
                    .map(str::to_owned);
                let data = s.lines().find_map(|l| l.strip_prefix("data: "))?;
                serde_json::from_str(data).ok().map(|v| (event, v))
            })
            .collect()
    }

    #[test]
    fn responses_stream_has_the_sequence_sdks_need() {
        let ev = parse(&responses_events(&reply()));
        let types: Vec<&str> = ev
            .iter()
            .map(|(_, v)| v["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types[..4],
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added"
            ]
        );
        assert_eq!(types.last(), Some(&"response.completed"));
        let done = &ev.last().unwrap().1["response"];
        assert!(done["id"].is_string());
        assert_eq!(done["usage"]["total_tokens"], 5);
        let text: String = ev
            .iter()
            .filter(|(_, v)| v["type"] == "response.output_text.delta")
            .map(|(_, v)| v["delta"].as_str().unwrap())
            .collect();
        assert_eq!(text, "héllo world");
        assert!(ev.iter().all(|(e, v)| e.as_deref() == v["type"].as_str()));
    }

    #[test]
    fn messages_stream_has_event_lines() {
        let ev = parse(&messages_events(&reply()));
        assert_eq!(ev[0].0.as_deref(), Some("message_start"));
        assert_eq!(ev[1].0.as_deref(), Some("content_block_start"));
        assert!(ev.iter().any(|(_, v)| v["usage"]["output_tokens"] == 2));
    }

    #[test]
    fn chat_stream_ends_with_done_and_usage() {
        let ev = chat_events(&reply());
        assert_eq!(&ev.last().unwrap()[..], b"data: [DONE]\n\n");
        let parsed = parse(&ev);
        assert_eq!(parsed.last().unwrap().1["usage"]["total_tokens"], 5);
    }

    #[test]
    fn chat_stream_in_more_deltas_keeps_the_text() {
        let ev = chat_events_in(&reply(), 16);
        // Role, 16 deltas, the finish reason, usage, [DONE].
        assert_eq!(ev.len(), 20);
        let text: String = parse(&ev)
            .iter()
            .filter_map(|(_, v)| {
                v["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect();
        assert_eq!(text, "héllo world");
    }
}
