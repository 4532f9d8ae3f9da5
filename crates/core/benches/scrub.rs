//! The lasting scrub against the one-shot portability pass, on a switched Codex session's later
//! request: 1 MiB of history holding 200 account-bound items, half minted by the old account
//! (foreign, recorded at the switch) and half by the serving one (kept). The same for a Gemini
//! session: 1 MiB of `contents` with 200 signed function calls, half of them foreign.
//!
//! Budget: the scrub (`Scope::Foreign`) within 2× of the one-shot pass (`Scope::All`).
//!
//! `cargo bench -p context-relay-core --bench scrub -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use context_relay_core::ApiShape;
use context_relay_core::config::InjectionSlot;
use context_relay_core::portable::{ForeignSet, Scope, rewrite};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};

/// A base64-looking blob of `len` bytes, distinct per `seed`.
fn blob(seed: usize, len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut x = seed as u64 ^ 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(ALPHABET[(x % 64) as usize])
        })
        .collect()
}

fn code(i: usize, len: usize) -> String {
    let chunk = format!(
        "    let value_{i} = parse(\"field\", &input[{i}..])?; // checked\n\tif value_{i}.is_empty() {{ return Err(Error::Empty); }}\n"
    );
    chunk.repeat(len / chunk.len() + 1)
}

/// The body, and the digests the switch recorded (the old account's items).
fn session(target: usize, bound: usize) -> (Vec<u8>, ForeignSet) {
    let mut input = vec![json!({
        "type": "message", "role": "developer",
        "content": [{"type": "input_text", "text": "You are Codex, a coding agent."}],
    })];
    let mut old = Vec::new();
    for i in 0..bound {
        let account = if i < bound / 2 { "a" } else { "b" };
        let item = json!({
            "type": "reasoning", "id": format!("rs_{account}_{i}"), "summary": [],
            "encrypted_content": format!("gAAAA{}", blob(i, 1500)),
        });
        if account == "a" {
            old.push(item.clone());
        }
        input.push(item);
        input.push(json!({
            "type": "function_call", "call_id": format!("call_{i}"), "name": "shell",
            "arguments": "{\"command\":[\"cargo\",\"test\"]}",
        }));
        input.push(json!({"type": "function_call_output", "call_id": format!("call_{i}"), "output": code(i, 400)}));
    }
    let mut size = serde_json::to_vec(&input).unwrap().len();
    let mut i = 0;
    while size < target {
        let v = json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": code(i, 2000)}]});
        size += serde_json::to_vec(&v).unwrap().len() + 1;
        input.insert(1 + (i * 7) % input.len(), v);
        i += 1;
    }
    let body = |input: Vec<Value>| {
        serde_json::to_vec(&json!({
            "model": "gpt-5.5", "stream": true, "store": false, "input": input,
            "include": ["reasoning.encrypted_content"],
        }))
        .unwrap()
    };
    // What the first request after the switch carried: the old account's items.
    let at_switch = rewrite(
        ApiShape::Responses,
        &body(old),
        Scope::All,
        None,
        InjectionSlot::InputItem,
    )
    .unwrap();
    (body(input), ForeignSet::from_digests(at_switch.seen))
}

fn bench(c: &mut Criterion) {
    let (body, foreign) = session(1 << 20, 200);
    let scrubbed = rewrite(
        ApiShape::Responses,
        &body,
        Scope::Foreign(&foreign),
        None,
        InjectionSlot::InputItem,
    )
    .unwrap();
    assert_eq!(
        scrubbed.removed.reasoning_items, 100,
        "half the items are foreign"
    );
    let mut group = c.benchmark_group("scrub/responses-1MiB-200-bound");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("one_shot_portable", |b| {
        b.iter(|| {
            rewrite(
                ApiShape::Responses,
                black_box(&body),
                Scope::All,
                None,
                InjectionSlot::InputItem,
            )
            .unwrap()
        })
    });
    group.bench_function("lasting_scrub", |b| {
        b.iter(|| {
            rewrite(
                ApiShape::Responses,
                black_box(&body),
                Scope::Foreign(&foreign),
                None,
                InjectionSlot::InputItem,
            )
            .unwrap()
        })
    });
    group.finish();
}

/// A Gemini session of about `target` bytes with `bound` signed tool calls (the first half
/// minted by the old account), ending with a user prompt; and the old account's digests.
fn gemini_session(target: usize, bound: usize) -> (Vec<u8>, ForeignSet) {
    let mut contents = vec![json!({"role": "user", "parts": [{"text": "Fix the failing test."}]})];
    let mut old = Vec::new();
    for i in 0..bound {
        let call = json!({"role": "model", "parts": [
            {"text": "**Planning**", "thought": true},
            {"functionCall": {"name": "shell", "args": {"command": "cargo test"}},
             "thoughtSignature": blob(i, 1500).replace('+', "-").replace('/', "_")},
        ]});
        if i < bound / 2 {
            old.push(call.clone());
        }
        contents.push(call);
        contents.push(json!({"role": "user", "parts": [
            {"functionResponse": {"name": "shell", "response": {"output": code(i, 400)}}},
        ]}));
    }
    let mut size = serde_json::to_vec(&contents).unwrap().len();
    let mut i = 0;
    while size < target {
        let v = json!({"role": "user", "parts": [{"text": code(i, 2000)}]});
        size += serde_json::to_vec(&v).unwrap().len() + 1;
        contents.insert(1 + (i * 7) % contents.len(), v);
        i += 1;
    }
    contents.push(json!({"role": "user", "parts": [{"text": "Go on."}]}));
    let body = |contents: Vec<Value>| {
        serde_json::to_vec(&json!({
            "contents": contents,
            "systemInstruction": {"parts": [{"text": "You are a coding agent."}]},
        }))
        .unwrap()
    };
    let at_switch = rewrite(
        ApiShape::Gemini,
        &body(old),
        Scope::All,
        None,
        InjectionSlot::default(),
    )
    .unwrap();
    (body(contents), ForeignSet::from_digests(at_switch.seen))
}

fn bench_gemini(c: &mut Criterion) {
    let (body, foreign) = gemini_session(1 << 20, 200);
    let scrubbed = rewrite(
        ApiShape::Gemini,
        &body,
        Scope::Foreign(&foreign),
        None,
        InjectionSlot::default(),
    )
    .unwrap();
    assert_eq!(
        scrubbed.removed.thought_signatures, 100,
        "half the signatures are foreign"
    );
    let mut group = c.benchmark_group("scrub/gemini-1MiB-200-bound");
    group.throughput(Throughput::Bytes(body.len() as u64));
    for (name, scope) in [
        ("one_shot_portable", Scope::All),
        ("lasting_scrub", Scope::Foreign(&foreign)),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                rewrite(
                    ApiShape::Gemini,
                    black_box(&body),
                    scope,
                    None,
                    InjectionSlot::default(),
                )
                .unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench, bench_gemini);
criterion_main!(benches);
