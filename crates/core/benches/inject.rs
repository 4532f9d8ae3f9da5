//! Injection into raw request bodies against a `serde_json::Value` round trip and a plain copy
//! (the target: at 1 MiB, injection ≥ 5× faster than the round trip and within 3× of a copy).
//!
//! `cargo bench -p context-relay-core --bench inject -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use context_relay_core::config::InjectionSlot;
use context_relay_core::inject::inject;
use context_relay_core::render::render_handoff;
use context_relay_core::{ApiShape, Handoff};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};

/// Message text of a coding session: prose paragraphs (an escaped newline every ~100
/// bytes) and source code (escaped newlines, tabs and quotes every ~20 bytes), alternating
/// by `i`; `dense` gives code only, the worst case for the scanner.
fn text(i: usize, len: usize, dense: bool) -> String {
    let chunk = if dense || i % 2 == 1 {
        format!(
            "    let value_{i} = parse(\"field\", &input[{i}..])?; // naïve → checked\n\tif value_{i}.is_empty() {{ return Err(Error::Empty); }}\n"
        )
    } else {
        format!(
            "The parser in src/parse_{i}.rs stops at the first comma, so a trailing comma is \
             rejected before the closing bracket is seen.\nI will change `parse_list` to \
             accept one, then add a test that covers both arrays and objects — café.\n"
        )
    };
    chunk.repeat(len / chunk.len() + 1)
}

/// Adds items made by `item` until the serialised body reaches `target` bytes.
fn grow(target: usize, mut item: impl FnMut(usize) -> Value) -> Vec<Value> {
    let mut items = Vec::new();
    let mut size = 200;
    while size < target {
        let v = item(items.len());
        size += serde_json::to_vec(&v).unwrap().len() + 1;
        items.push(v);
    }
    items
}

fn chat_body(target: usize, dense: bool) -> Vec<u8> {
    let len = (target / 8).clamp(40, 4000);
    let mut messages = vec![json!({"role": "system", "content": "You are a coding agent."})];
    messages.extend(grow(target, |i| {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        json!({"role": role, "content": text(i, len, dense)})
    }));
    serde_json::to_vec(&json!({
        "model": "gpt-5",
        "messages": messages,
        "stream": true,
        "temperature": 0.2,
    }))
    .unwrap()
}

fn responses_body(target: usize, dense: bool) -> Vec<u8> {
    let len = (target / 8).clamp(40, 4000);
    let mut input = vec![json!({
        "type": "message", "role": "developer",
        "content": [{"type": "input_text", "text": "You are Codex, a coding agent."}],
    })];
    input.extend(grow(target, |i| match i % 3 {
        0 => json!({
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": text(i, len, dense)}],
        }),
        1 => json!({
            "type": "function_call", "call_id": format!("call_{i}"), "name": "shell",
            "arguments": serde_json::to_string(&json!({"command": ["rg", "-n", text(i, 60, dense)]})).unwrap(),
        }),
        _ => json!({
            "type": "function_call_output", "call_id": format!("call_{}", i - 1),
            "output": text(i, len, dense),
        }),
    }));
    serde_json::to_vec(&json!({
        "model": "gpt-5.5",
        "stream": true,
        "input": input,
        "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}],
        "store": false,
        "include": ["reasoning.encrypted_content"],
    }))
    .unwrap()
}

fn message() -> String {
    render_handoff(
        &Handoff {
            summary: "Adding a --json flag to the CLI; parser done, tests pending. ".repeat(8),
            key_decisions: vec!["Use serde for output".into(); 4],
            task_progress: "Done: flag parsing. Pending: tests. Next: tests/cli.rs".into(),
            active_entities: vec!["src/cli.rs".into(), "tests/cli.rs".into()],
        },
        42,
    )
}

/// Shape, body maker, code-only text, sizes.
type Case = (
    ApiShape,
    fn(usize, bool) -> Vec<u8>,
    bool,
    &'static [(&'static str, usize)],
);

fn bench(c: &mut Criterion) {
    let message = message();
    let cases: [Case; 3] = [
        (
            ApiShape::ChatCompletions,
            chat_body,
            false,
            &[("1KiB", 1 << 10), ("100KiB", 100 << 10), ("1MiB", 1 << 20)],
        ),
        (
            ApiShape::Responses,
            responses_body,
            false,
            &[("1KiB", 1 << 10), ("100KiB", 100 << 10), ("1MiB", 1 << 20)],
        ),
        // Worst case: nothing but code, an escape every ~20 bytes.
        (
            ApiShape::ChatCompletions,
            chat_body,
            true,
            &[("1MiB", 1 << 20)],
        ),
    ];
    for (shape, make, dense, sizes) in cases {
        let name = if dense {
            format!("inject/{shape}-code-only")
        } else {
            format!("inject/{shape}")
        };
        let mut group = c.benchmark_group(name);
        for &(label, size) in sizes {
            let body = make(size, dense);
            group.throughput(Throughput::Bytes(body.len() as u64));
            group.bench_with_input(BenchmarkId::new("inject", label), &body, |b, body| {
                b.iter(|| {
                    inject(shape, black_box(body), &message, InjectionSlot::InputItem).unwrap()
                })
            });
            group.bench_with_input(
                BenchmarkId::new("value_roundtrip", label),
                &body,
                |b, body| {
                    b.iter(|| {
                        let v: Value = serde_json::from_slice(black_box(body)).unwrap();
                        serde_json::to_vec(&v).unwrap()
                    })
                },
            );
            group.bench_with_input(BenchmarkId::new("copy", label), &body, |b, body| {
                b.iter(|| Vec::from(&black_box(body)[..]))
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
