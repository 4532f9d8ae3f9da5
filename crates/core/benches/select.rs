//! Selection plus prompt for a real-size Codex session of ~500 input items and ~800 KB
//! (budget: ≤ 2 ms). Reading the conversation out of the body is measured beside it.
//!
//! `cargo bench -p context-relay-core --bench select -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use context_relay_core::conversation::Conversation;
use context_relay_core::prompt::summary_prompt;
use context_relay_core::select::select;
use context_relay_core::{ApiShape, RelayMode};
use context_relay_testkit::sessions;
use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let (mut body, facts) = sessions::codex(55);
    // Grow the tool outputs until the body is ~800 KB, as long sessions are.
    let mut size = serde_json::to_vec(&body).expect("serialize").len();
    if let Some(items) = body["input"].as_array_mut() {
        for item in items.iter_mut() {
            if size >= 800 * 1024 {
                break;
            }
            if item["type"] == "function_call_output"
                && let Some(out) = item["output"].as_str()
            {
                size += out.len();
                item["output"] = serde_json::Value::String(out.repeat(2));
            }
        }
    }
    let bytes = serde_json::to_vec(&body).expect("serialize");
    let items = body["input"].as_array().map_or(0, Vec::len);
    eprintln!("session: {items} input items, {} KB", bytes.len() / 1024);
    let conv = Conversation::from_slice(ApiShape::Responses, &bytes).expect("conversation");

    let mut g = c.benchmark_group("select");
    g.bench_function("selection_and_prompt_500_items_800KB", |b| {
        b.iter(|| {
            let s = select(black_box(&conv), Some(facts.reply), RelayMode::Standard, 30);
            black_box(summary_prompt(&s.text, &s.touched_files))
        })
    });
    g.bench_function("read_conversation_800KB", |b| {
        b.iter(|| Conversation::from_slice(ApiShape::Responses, black_box(&bytes)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
