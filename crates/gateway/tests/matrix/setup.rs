//! One strict simulated provider and one gateway per cell.
//!
//! The gateway has a provider of the cell's shape with accounts `p1`, `p2`, `p3` (filled in
//! that order), a backup provider with account `q1` and another model, combo `relay` (the
//! first provider only) and combo `fallback` (first provider, then the backup). The simulator
//! runs a tool loop (each plain ask is answered by a few tool calls, then text), uses 5 % of an
//! account per request, and answers the relay's summary requests with a handoff naming what it
//! can read of the conversation: the task markers and facts found in the request, including
//! what the serving account can read of its own `compaction` items.

use context_relay_sim::{SimProvider, SimQuotaHeaders, SummaryRequest};
use serde_json::json;

use super::{Cause, Cell};
use context_relay_testkit::agents::Shape;
use context_relay_testkit::clients::contains;
use context_relay_testkit::handoff::SUMMARY_NEEDLE;
use context_relay_testkit::harness::{Harness, key_of};

/// The accounts of the first provider, in fill order, and the backup's account.
pub const PRIMARY: [&str; 3] = ["p1", "p2", "p3"];
pub const BACKUP: &str = "q1";

/// Provider names and models of a shape: (first provider, its model, backup, its model).
pub fn targets(shape: Shape) -> (&'static str, &'static str, &'static str, &'static str) {
    match shape {
        Shape::Codex => ("codex", "gpt-5.5", "codex-b", "gpt-5.4"),
        Shape::Claude => (
            "anthropic",
            "claude-opus-4-8",
            "anthropic-b",
            "claude-sonnet-4-5",
        ),
        Shape::ClaudeBudget => (
            "anthropic",
            "claude-sonnet-4-5",
            "anthropic-b",
            "claude-opus-4-8",
        ),
        Shape::Chat => ("openai", "gpt-4.1", "openai-b", "gpt-4.1-mini"),
        Shape::Gemini => ("gemini", "gemini-3-pro", "gemini-b", "gemini-3-flash"),
    }
}

/// What the session asks for: the combo, or `provider/model` for a direct route.
pub fn model(cell: &Cell) -> String {
    let (p, m, _, _) = targets(cell.shape);
    match cell.cause {
        Cause::FallThrough => "fallback".into(),
        Cause::DirectRoute => format!("{p}/{m}"),
        _ => "relay".into(),
    }
}

/// The sim's summary reply: a handoff naming the `markers` (task markers and facts) found in
/// the summary request or in what its account can read of its compaction items.
fn summary(markers: &[String], r: &SummaryRequest<'_>) -> String {
    let found: Vec<&str> = markers
        .iter()
        .filter(|m| contains(r.body, m) || r.compacted.iter().any(|c| c.contains(m.as_str())))
        .map(String::as_str)
        .collect();
    json!({
        "summary": format!("Model-written summary of the work on {}.", found.join(", ")),
        "keyDecisions": found,
        "taskProgress": "loop in progress",
        "activeEntities": ["src/step_1.rs"]
    })
    .to_string()
}

/// The phrase every model-written handoff of the matrix carries.
pub const MODEL_WRITTEN: &str = "Model-written summary of the work on";

/// Starts the simulator (tool loop of `calls` calls per ask) and the gateway of `cell`.
pub async fn start(cell: &Cell, calls: usize, markers: Vec<String>) -> Harness {
    let headers = match (cell.cause, cell.shape) {
        (Cause::NoQuotaHeaders, _) => SimQuotaHeaders::None,
        (_, Shape::Claude | Shape::ClaudeBudget) => SimQuotaHeaders::Anthropic,
        _ => SimQuotaHeaders::Codex,
    };
    let mut sim = SimProvider::builder()
        .quota_step(5.0)
        .quota_headers(headers)
        .tool_loop(calls)
        .summary_reply_with(
            |body| contains(body, SUMMARY_NEEDLE),
            move |r| summary(&markers, r),
        );
    for id in PRIMARY.iter().chain([&BACKUP]) {
        sim = sim.account(*id, key_of(id));
    }
    let sim = sim.start().await.expect("sim");
    let text = config(cell, &sim.base_url());
    Harness::single(sim, &text).await
}

fn config(cell: &Cell, base_url: &str) -> String {
    let (p, m, b, bm) = targets(cell.shape);
    let auth = match cell.shape {
        Shape::Claude | Shape::ClaudeBudget => "auth = \"x-api-key\"\n",
        Shape::Gemini => "auth = \"x-goog-api-key\"\n",
        _ => "",
    };
    let quota = if cell.cause == Cause::NoQuotaHeaders {
        "quota = \"none\"\n"
    } else {
        ""
    };
    let accounts = |ids: &[&str]| -> String {
        ids.iter()
            .map(|id| {
                format!(
                    "  [[providers.accounts]]\n  id = \"{id}\"\n  api_key = \"{}\"\n",
                    key_of(id)
                )
            })
            .collect()
    };
    format!(
        "[store]\nbackend = \"memory\"\n[relay]\nhandoff_providers = [\"*\"]\n\
         [[providers]]\nname = \"{p}\"\nbase_url = \"{base_url}\"\n{auth}{quota}{primary}\
         [[providers]]\nname = \"{b}\"\nbase_url = \"{base_url}\"\n{auth}{quota}{backup}\
         [[combos]]\nname = \"relay\"\ntargets = [\"{p}/{m}\"]\n\
         [[combos]]\nname = \"fallback\"\ntargets = [\"{p}/{m}\", \"{b}/{bm}\"]\n",
        primary = accounts(&PRIMARY),
        backup = accounts(&[BACKUP]),
    )
}
