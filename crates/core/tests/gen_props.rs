//! Property tests of the generation side: nothing panics on any input, and the limits hold.

use context_relay_core::conversation::{
    Conversation, Entry, PartKind, TOOL_LINE_MAX_CHARS, tool_call_line, tool_output_line,
};
use context_relay_core::handoff::{
    MAX_ACTIVE_ENTITIES, MAX_ITEM_CHARS, MAX_KEY_DECISIONS, MAX_SUMMARY_CHARS,
    MAX_TASK_PROGRESS_CHARS,
};
use context_relay_core::parse::{clamp_chars, parse_handoff};
use context_relay_core::reply::{ReplyCapture, summary_text};
use context_relay_core::select::{TOKEN_BUDGET, estimate_tokens, select};
use context_relay_core::{ApiShape, Handoff, RelayMode};
use proptest::prelude::*;
use serde_json::{Map, Value};

const SHAPES: [ApiShape; 4] = [
    ApiShape::ChatCompletions,
    ApiShape::Responses,
    ApiShape::AnthropicMessages,
    ApiShape::Gemini,
];

/// Words that steer random JSON into the shapes the readers look for.
const WORDS: &[&str] = &[
    "role",
    "content",
    "type",
    "text",
    "name",
    "arguments",
    "input",
    "output",
    "messages",
    "contents",
    "parts",
    "tool_calls",
    "function",
    "system",
    "instructions",
    "systemInstruction",
    "functionCall",
    "functionResponse",
    "args",
    "response",
    "thought",
    "choices",
    "message",
    "delta",
    "candidates",
    "summary",
    "keyDecisions",
    "taskProgress",
    "activeEntities",
    "index",
    "partial_json",
    "content_block",
    "item",
    "user",
    "assistant",
    "developer",
    "tool",
    "function_call",
    "function_call_output",
    "tool_use",
    "tool_result",
    "thinking",
    "reasoning",
    "output_text",
    "input_text",
    "text_delta",
    "input_json_delta",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "response.output_text.delta",
    "response.output_item.done",
    "response.completed",
    "output_item",
    "custom_tool_call",
];

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(WORDS).prop_map(str::to_owned),
        1 => "\\PC{0,12}",
    ]
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        word().prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 96, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((word(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Bytes that look like SSE often enough to reach the event decoder.
fn sse_like() -> impl Strategy<Value = Vec<u8>> {
    let line = prop_oneof![
        arb_json().prop_map(|v| format!("data: {v}")),
        Just("data: [DONE]".to_owned()),
        word().prop_map(|w| format!("event: {w}")),
        Just(String::new()),
        Just(":".to_owned()),
        "\\PC{0,20}",
    ];
    let eol = prop::sample::select(vec!["\n", "\r\n", "\r", "\n\n"]);
    prop::collection::vec((line, eol), 0..12).prop_map(|lines| {
        lines
            .into_iter()
            .flat_map(|(l, e)| [l, e.to_owned()])
            .collect::<String>()
            .into_bytes()
    })
}

/// Well-formed provider events carrying random text, in random SSE framings.
fn sse_events() -> impl Strategy<Value = Vec<u8>> {
    let event = ("\\PC{0,12}", 0u8..6).prop_map(|(t, kind)| match kind {
        0 => serde_json::json!({"type": "response.output_text.delta", "delta": t}),
        1 => serde_json::json!({"choices": [{"delta": {"content": t}}]}),
        2 => serde_json::json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}),
        3 => serde_json::json!({"candidates": [{"content": {"parts": [{"text": t}]}}]}),
        4 => serde_json::json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": t}}]}}]}),
        _ => serde_json::json!({"type": "response.output_item.done", "item": {"type": "function_call", "name": t, "arguments": "{}"}}),
    });
    let eol = prop::sample::select(vec!["\n", "\r\n", "\r"]);
    prop::collection::vec((event, eol, any::<bool>()), 0..16).prop_map(|events| {
        let mut out = String::new();
        for (e, eol, named) in events {
            if named {
                out.push_str(&format!("event: x{eol}"));
            }
            out.push_str(&format!("data: {e}{eol}{eol}"));
        }
        out.into_bytes()
    })
}

fn any_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        arb_json().prop_map(|v| v.to_string().into_bytes()),
        sse_like(),
        sse_events(),
    ]
}

fn chunked(body: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    points.sort_unstable();
    let mut out = Vec::new();
    let mut last = 0;
    for p in points {
        out.push(body[last..p].to_vec());
        last = p;
    }
    out.push(body[last..].to_vec());
    out
}

fn capture(is_sse: bool, cap: usize, chunks: &[Vec<u8>]) -> Option<String> {
    let mut c = ReplyCapture::new(is_sse, cap);
    for chunk in chunks {
        c.push(chunk);
    }
    c.finish()
}

fn check_limits(h: &Handoff) {
    assert!(!h.summary.is_empty());
    assert_eq!(h.summary, h.summary.trim());
    assert!(h.summary.chars().count() <= MAX_SUMMARY_CHARS);
    assert!(h.task_progress.chars().count() <= MAX_TASK_PROGRESS_CHARS);
    assert!(h.key_decisions.len() <= MAX_KEY_DECISIONS);
    assert!(h.active_entities.len() <= MAX_ACTIVE_ENTITIES);
    for item in h.key_decisions.iter().chain(&h.active_entities) {
        assert!(!item.is_empty());
        assert_eq!(item, item.trim());
        assert!(item.chars().count() <= MAX_ITEM_CHARS);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn parse_handoff_never_panics_and_respects_limits(text in "\\PC*") {
        if let Some(h) = parse_handoff(&text) {
            check_limits(&h);
        }
    }

    #[test]
    fn parse_handoff_on_json_like_text(v in arb_json(), fence in any::<bool>(), noise in "\\PC{0,8}") {
        let text = if fence { format!("```json\n{v}\n```") } else { format!("{noise}{v}{noise}") };
        if let Some(h) = parse_handoff(&text) {
            check_limits(&h);
        }
    }

    #[test]
    fn parse_handoff_keeps_any_non_blank_summary(
        // A short random piece repeated: long summaries without slow long-regex generation.
        summary in ("\\PC{0,40}", 1usize..120).prop_map(|(s, k)| s.repeat(k)),
        decisions in prop::collection::vec(("\\PC{0,30}", 1usize..12).prop_map(|(s, k)| s.repeat(k)), 0..12),
        fence in any::<bool>(),
    ) {
        let json = serde_json::json!({"summary": summary, "keyDecisions": decisions}).to_string();
        let text = if fence { format!("```\n{json}\n```") } else { json };
        let h = parse_handoff(&text);
        let trimmed = summary.trim();
        prop_assert_eq!(h.is_some(), !trimmed.is_empty());
        if let Some(h) = h {
            check_limits(&h);
            prop_assert!(trimmed.starts_with(&h.summary));
            let kept = decisions.iter().filter(|d| !d.trim().is_empty()).count();
            prop_assert_eq!(h.key_decisions.len(), kept.min(MAX_KEY_DECISIONS));
        }
    }

    #[test]
    fn clamp_chars_is_a_char_prefix(s in "\\PC{0,64}", max in 0usize..80) {
        let out = clamp_chars(&s, max);
        prop_assert!(s.starts_with(out));
        prop_assert_eq!(out.chars().count(), s.chars().count().min(max));
    }

    #[test]
    fn summary_text_never_panics(body in any_body()) {
        if let Some(t) = summary_text(&body) {
            prop_assert!(!t.is_empty());
            prop_assert_eq!(t.trim(), t.as_str());
        }
    }

    #[test]
    fn reply_capture_is_bounded_and_split_independent(
        body in any_body(),
        cuts_a in prop::collection::vec(any::<usize>(), 0..8),
        cuts_b in prop::collection::vec(any::<usize>(), 0..8),
        is_sse in any::<bool>(),
        cap in 0usize..64,
    ) {
        let a = capture(is_sse, cap, &chunked(&body, &cuts_a));
        let b = capture(is_sse, cap, &chunked(&body, &cuts_b));
        if let Some(t) = &a {
            prop_assert!(t.len() <= cap);
            prop_assert!(!t.is_empty());
        }
        prop_assert_eq!(a, b);
    }

    #[test]
    fn reply_capture_reassembles_deltas(
        deltas in prop::collection::vec("\\PC{0,10}", 0..12),
        cuts in prop::collection::vec(any::<usize>(), 0..10),
    ) {
        let body: String = deltas
            .iter()
            .map(|d| format!("data: {}\n\n", serde_json::json!({"type": "response.output_text.delta", "delta": d})))
            .collect();
        let want = deltas.concat();
        let want = want.trim();
        let want = (!want.is_empty()).then_some(want);
        let got = capture(true, usize::MAX, &chunked(body.as_bytes(), &cuts));
        prop_assert_eq!(got.as_deref(), want);
        let whole = summary_text(body.as_bytes());
        prop_assert_eq!(whole.as_deref(), want);
    }

    #[test]
    fn conversation_never_panics_on_bytes(body in prop::collection::vec(any::<u8>(), 0..256)) {
        for shape in SHAPES {
            let _ = Conversation::from_slice(shape, &body);
        }
    }

    #[test]
    fn conversation_and_selection_on_any_json(
        v in arb_json(),
        wrap in prop::sample::select(vec!["messages", "input", "contents", ""]),
        n in 0u32..8,
    ) {
        let body = if wrap.is_empty() { v } else { serde_json::json!({ wrap: v }) };
        for shape in SHAPES {
            let bytes = body.to_string().into_bytes();
            let Ok(conv) = Conversation::from_slice(shape, &bytes) else { continue };
            for entry in conv.entries() {
                for part in &entry.parts {
                    if part.starts_with("tool call ") || part.starts_with("tool output: ") {
                        prop_assert!(part.chars().count() <= TOOL_LINE_MAX_CHARS);
                    }
                }
            }
            for mode in [RelayMode::Standard, RelayMode::SchemaLocked] {
                let s = select(&conv, None, mode, n);
                prop_assert_eq!(s.source_count, conv.len());
                prop_assert_eq!(s.estimated_tokens, estimate_tokens(&s.text));
                let eligible = conv.entries().iter().any(|e| {
                    !e.is_blank() && (mode == RelayMode::Standard || !e.is_system_like())
                });
                prop_assert_eq!(s.selected > 0, eligible);
            }
        }
    }

    #[test]
    fn selection_budget_holds_and_must_keep_items_are_present(
        entries in prop::collection::vec(
            (
                prop::sample::select(vec!["system", "developer", "user", "assistant", "tool", ""]),
                prop_oneof![Just(0usize), 1usize..50, 5_000usize..40_000],
                0u8..4,
            ),
            0..60,
        ),
        n in 1u32..20,
        locked in any::<bool>(),
        reply in prop::option::of(prop_oneof!["[a-z ]{0,30}", (1usize..30_000).prop_map(|k| "r".repeat(k))]),
    ) {
        let conv = Conversation::new(
            ApiShape::ChatCompletions,
            entries
                .iter()
                .enumerate()
                .map(|(i, (role, len, kind))| {
                    let role = (!role.is_empty()).then_some(*role);
                    // Some user parts are client context, some parts are tool lines.
                    let text = match kind {
                        1 if role == Some("user") => format!("<environment_context>{i}:{}", "é".repeat(*len)),
                        _ => format!("{i}:{}", "é".repeat(*len)),
                    };
                    let mut e = Entry::new(role, [text]);
                    e.kinds = vec![match kind { 2 => PartKind::ToolCall, 3 => PartKind::ToolOutput, _ => PartKind::Text }];
                    e
                })
                .collect(),
        );
        let mode = if locked { RelayMode::SchemaLocked } else { RelayMode::Standard };
        let s = select(&conv, reply.as_deref(), mode, n);
        prop_assert!(s.estimated_tokens <= TOKEN_BUDGET, "{} tokens", s.estimated_tokens);
        prop_assert_eq!(s.estimated_tokens, estimate_tokens(&s.text));
        let asks: Vec<usize> = entries
            .iter()
            .enumerate()
            .filter(|(_, (role, _, kind))| *role == "user" && (*kind == 0 || *kind > 3))
            .map(|(i, _)| i)
            .collect();
        // The task and the latest ask, clipped, start their entry's text.
        for i in [asks.first(), asks.last()].into_iter().flatten() {
            let needle = format!("] USER:\n{i}:");
            prop_assert!(s.text.contains(&needle), "ask {} missing", i);
        }
        if let Some(r) = reply.as_deref().map(str::trim).filter(|r| !r.is_empty()) {
            let head: String = r.chars().take(40).collect();
            let needle = format!("] ASSISTANT:\n{head}");
            prop_assert!(s.text.contains(&needle), "reply missing");
        }
        if locked {
            prop_assert!(!s.text.contains("] SYSTEM:") && !s.text.contains("] DEVELOPER:"));
            prop_assert!(!s.text.contains("<environment_context>"));
        }
        // The 10 % rule holds whenever work was written: text other than boilerplate and the
        // omission markers (with no work at all, boilerplate may take its whole share, so that
        // a conversation with text never yields an empty selection).
        let written: usize = s
            .text
            .split("\n\n")
            .filter(|block| !(block.starts_with("[… ") && block.ends_with(" omitted …]")))
            .map(|block| block.chars().count())
            .sum();
        if written > s.boilerplate_chars {
            prop_assert!(s.boilerplate_chars * 10 <= s.text.chars().count());
        }
        let any_text = entries.iter().any(|(role, _, kind)| {
            !(locked && (*role == "system" || *role == "developer" || (*role == "user" && *kind == 1)))
        }) || reply.as_deref().is_some_and(|r| !r.trim().is_empty());
        prop_assert_eq!(s.selected > 0, any_text);
    }

    #[test]
    fn tool_lines_are_single_bounded_lines(
        name in ("\\PC{0,20}", 1usize..20).prop_map(|(s, k)| s.repeat(k)),
        args in arb_json(),
        out in ("[a-z \\n\\t\\r]{0,20}\\PC{0,10}", 1usize..40).prop_map(|(s, k)| s.repeat(k)),
    ) {
        for line in [tool_call_line(&name, &args), tool_output_line(&out)] {
            prop_assert!(line.chars().count() <= TOOL_LINE_MAX_CHARS);
            prop_assert!(!line.contains('\n'));
        }
    }
}
