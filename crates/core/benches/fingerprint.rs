//! The session fingerprint reads a bounded prefix of the body: its cost at 1 KB and at 100 KB
//! should be the same, next to a whole-body validation (`json::validate`) that grows with the
//! body. Bodies are Chat Completions requests in the OpenAI SDK's key order (`model`,
//! `messages`, …) and Codex requests (`model`, …, `input` with its developer prompt and
//! `<environment_context>` first); the history grows, the first turn stays.
//!
//! The `session-ids` group prices the contract that `prompt_cache_key` counts wherever it stands
//! at the top level: a 1 MiB Codex body with the key before `input`, the same body with the key
//! after it (as the OpenAI SDK writes it), each read by [`session_id`], next to one validation
//! of the body.
//!
//! `cargo bench -p context-relay-core --bench fingerprint -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use context_relay_core::json;
use context_relay_core::session::{SessionSources, fingerprint, session_id};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};

/// `items` as a JSON array, with entries added until the body reaches `target` bytes.
fn history(target: usize, mut items: Vec<Value>, next: impl Fn(usize) -> Value) -> String {
    let mut size = 300 + items.iter().map(|v| v.to_string().len()).sum::<usize>();
    while size < target {
        let v = next(items.len());
        size += v.to_string().len() + 1;
        items.push(v);
    }
    Value::Array(items).to_string()
}

fn turn_text(i: usize) -> String {
    format!("Step {i}: edit src/lib.rs and run the tests.\n").repeat(6)
}

fn chat(target: usize) -> Vec<u8> {
    let first = vec![
        json!({"role": "system", "content": "You are a coding agent. Keep answers short."}),
        json!({"role": "user", "content": "Port the config loader from YAML to TOML."}),
    ];
    let messages = history(target, first, |i| {
        let role = if i % 2 == 0 { "assistant" } else { "user" };
        json!({"role": role, "content": turn_text(i)})
    });
    format!(r#"{{"model":"gpt-5","messages":{messages},"stream":true,"tools":[{{"type":"function","function":{{"name":"shell"}}}}]}}"#)
        .into_bytes()
}

fn codex(target: usize) -> Vec<u8> {
    let developer = "You are Codex, a coding agent. ".repeat(30);
    let first = vec![
        json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": developer}]}),
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context>\n  <cwd>/w</cwd>\n</environment_context>"}]}),
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Port the config loader from YAML to TOML."}]}),
    ];
    let input = history(
        target,
        first,
        |i| json!({"type": "function_call_output", "call_id": format!("c{i}"), "output": turn_text(i)}),
    );
    format!(r#"{{"model":"gpt-5.5","stream":true,"input":{input},"tools":[],"store":false,"prompt_cache_key":"k"}}"#)
        .into_bytes()
}

fn bench(c: &mut Criterion) {
    for (name, make) in [("chat", chat as fn(usize) -> Vec<u8>), ("codex", codex)] {
        let mut group = c.benchmark_group(format!("fingerprint/{name}"));
        for (label, size) in [("1KB", 1_000), ("100KB", 100_000)] {
            let body = make(size);
            assert!(fingerprint(&body).is_some());
            group.throughput(Throughput::Bytes(body.len() as u64));
            group.bench_with_input(BenchmarkId::new("fingerprint", label), &body, |b, body| {
                b.iter(|| fingerprint(black_box(body)))
            });
            group.bench_with_input(BenchmarkId::new("validate", label), &body, |b, body| {
                b.iter(|| json::validate(black_box(body)))
            });
        }
        group.finish();
    }
    let after = codex(1 << 20);
    let text = String::from_utf8(after.clone()).expect("UTF-8");
    let before = text
        .replacen(r#","prompt_cache_key":"k""#, "", 1)
        .replacen(r#"{"model""#, r#"{"prompt_cache_key":"k","model""#, 1)
        .into_bytes();
    let headers = http::HeaderMap::new();
    let sources = SessionSources::default();
    let mut group = c.benchmark_group("session-ids/codex-1MiB");
    group.throughput(Throughput::Bytes(after.len() as u64));
    for (label, body) in [("key-first", &before), ("key-after-input", &after)] {
        let found = session_id(&headers, Some(body), &sources).expect("a session");
        assert_eq!(found.id, "k");
        group.bench_with_input(BenchmarkId::new("session_id", label), body, |b, body| {
            b.iter(|| session_id(&headers, Some(black_box(body)), &sources))
        });
    }
    group.bench_with_input(BenchmarkId::new("validate", "1MiB"), &after, |b, body| {
        b.iter(|| json::validate(black_box(body)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
