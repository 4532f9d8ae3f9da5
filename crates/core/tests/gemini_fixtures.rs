//! Portability, injection, quota and stream endings on the requests the `google-genai` SDK
//! sends, captured over loopback in `tests/fixtures/gemini/` (with the replies served).

use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use context_relay_core::ApiShape;
use context_relay_core::config::InjectionSlot;
use context_relay_core::ending::{EndDetector, Ending};
use context_relay_core::portable::{
    FOREIGN_SIGNATURE, ForeignSet, Scope, make_portable, may_carry_bound_state, rewrite,
    rewrite_for_switch,
};
use context_relay_core::quota::{self, QuotaKind};
use serde_json::{Value, json};

fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/gemini")
        .join(name);
    serde_json::from_slice(&std::fs::read(&path).expect("fixture")).expect("fixture JSON")
}

/// `(shape, body bytes)` of a captured request.
fn request(name: &str) -> (ApiShape, Vec<u8>, Value) {
    let f = fixture(name);
    let shape = ApiShape::from_path(f["path"].as_str().expect("path")).expect("a Gemini path");
    let body = f["body"].clone();
    (shape, serde_json::to_vec(&body).expect("serialize"), body)
}

/// Every `thoughtSignature` string of a body, in order.
fn signatures(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for c in body["contents"].as_array().into_iter().flatten() {
        for p in c["parts"].as_array().into_iter().flatten() {
            if let Some(s) = p["thoughtSignature"].as_str() {
                out.push(s.to_owned());
            }
        }
    }
    out
}

#[test]
fn captures_are_gemini_requests() {
    for name in [
        "01-generate_content.json",
        "02-generate_content-function_response.json",
        "03-generate_content-next_turn.json",
        "04-stream_generate_content.json",
        "05-generate_content-429.json",
        "06-generate_content-v1beta.json",
    ] {
        let (shape, _, _) = request(name);
        assert_eq!(shape, ApiShape::Gemini, "{name}");
    }
    // The SDK's default version path, and the beta one.
    assert!(
        fixture("01-generate_content.json")["path"]
            .as_str()
            .unwrap()
            .starts_with("/v1/models/")
    );
    assert!(
        fixture("06-generate_content-v1beta.json")["path"]
            .as_str()
            .unwrap()
            .starts_with("/v1beta/models/")
    );
    assert_eq!(
        fixture("04-stream_generate_content.json")["query"],
        json!({"alt": "sse"})
    );
}

#[test]
fn first_request_has_nothing_account_bound() {
    let (shape, bytes, _) = request("01-generate_content.json");
    assert!(!may_carry_bound_state(&bytes));
    let p = make_portable(shape, &bytes).unwrap();
    assert_eq!(p.body, None);
    assert!(p.removed.is_empty());
}

#[test]
fn tool_cycle_in_progress_keeps_a_placeholder_on_its_call() {
    // The function response answers a call of the current turn: Gemini 3 needs a signature
    // on that call, so the foreign one becomes the documented placeholder.
    let (shape, bytes, body) = request("02-generate_content-function_response.json");
    assert!(may_carry_bound_state(&bytes));
    let p = make_portable(shape, &bytes).unwrap();
    let out: Value = serde_json::from_slice(&p.body.unwrap()).unwrap();
    assert_eq!(signatures(&out), [FOREIGN_SIGNATURE]);
    let mut want = body.clone();
    want["contents"][1]["parts"][1]["thoughtSignature"] = json!(FOREIGN_SIGNATURE);
    assert_eq!(out, want);
    assert_eq!(
        p.removed.iter().collect::<Vec<_>>(),
        [("thought_signature", 1)]
    );
}

#[test]
fn finished_turns_lose_their_signatures_and_nothing_else() {
    let (shape, bytes, body) = request("04-stream_generate_content.json");
    assert_eq!(signatures(&body).len(), 3);
    let p = make_portable(shape, &bytes).unwrap();
    let out: Value = serde_json::from_slice(&p.body.unwrap()).unwrap();
    // Expected: the signature members removed, the signature-only part dropped; the thought
    // summary without a signature and everything outside `contents` untouched.
    let mut want = body.clone();
    let contents = want["contents"].as_array_mut().unwrap();
    contents[1]["parts"][1]
        .as_object_mut()
        .unwrap()
        .remove("thoughtSignature");
    contents[3]["parts"][0]
        .as_object_mut()
        .unwrap()
        .remove("thoughtSignature");
    let parts = contents[5]["parts"].as_array_mut().unwrap();
    assert_eq!(parts[1]["text"], "");
    parts.remove(1);
    assert_eq!(contents[1]["parts"][0]["thought"], true);
    assert_eq!(out, want);
    assert_eq!(
        p.removed.iter().collect::<Vec<_>>(),
        [("thought_signature", 3), ("thought_part", 1)]
    );
}

#[test]
fn lasting_scrub_across_the_captured_turns() {
    // The switch happens on request 03: what it carries is foreign from then on.
    let (shape, bytes3, _) = request("03-generate_content-next_turn.json");
    let at_switch = rewrite_for_switch(shape, &bytes3, None, InjectionSlot::default()).unwrap();
    assert_eq!(at_switch.seen.len(), 2);
    let foreign = ForeignSet::default().merged(&at_switch.seen);
    // Request 04 resends them plus the signature the new account minted in reply 03.
    let (_, bytes4, body4) = request("04-stream_generate_content.json");
    let later = rewrite(
        shape,
        &bytes4,
        Scope::Foreign(&foreign),
        None,
        InjectionSlot::default(),
    )
    .unwrap();
    let out: Value = serde_json::from_slice(&later.body.unwrap()).unwrap();
    let kept = signatures(&out);
    assert_eq!(kept, [signatures(&body4)[2].clone()]);
    assert_eq!(later.removed.thought_signatures, 2);
}

#[test]
fn switch_injects_into_the_system_instruction() {
    let (shape, bytes, body) = request("03-generate_content-next_turn.json");
    let r = rewrite_for_switch(
        shape,
        &bytes,
        Some("<context_handoff>x</context_handoff>"),
        InjectionSlot::default(),
    )
    .unwrap();
    assert!(r.injected, "{:?}", r.inject_error);
    let out: Value = serde_json::from_slice(&r.body.unwrap()).unwrap();
    assert_eq!(
        out["systemInstruction"]["parts"],
        json!([
            body["systemInstruction"]["parts"][0],
            {"text": "<context_handoff>x</context_handoff>"},
        ])
    );
    assert_eq!(out["systemInstruction"]["role"], "user");
    assert!(signatures(&out).is_empty());
}

#[test]
fn quota_from_the_served_429() {
    let f = fixture("05-generate_content-429.json");
    assert_eq!(f["reply"]["status"], 429);
    assert_eq!(f["sdk_error"]["status"], "RESOURCE_EXHAUSTED");
    let body = serde_json::to_vec(&f["reply"]["body"]).unwrap();
    let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let signal = quota::from_response(
        QuotaKind::Auto,
        http::StatusCode::TOO_MANY_REQUESTS,
        &http::HeaderMap::new(),
        Some(&body),
        now,
    )
    .unwrap();
    assert_eq!(signal.percent_used, 1.0);
    assert_eq!(signal.resets_at, Some(now + Duration::from_secs(37)));
}

#[test]
fn served_replies_end_as_completed() {
    let sse = fixture("04-stream_generate_content.json")["reply"]["sse"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(sse.contains("\r\n\r\n"));
    // Fed in small chunks, as a socket delivers it.
    let mut d = EndDetector::new();
    for chunk in sse.as_bytes().chunks(7) {
        d.push(chunk);
    }
    assert_eq!(d.finish(), Ending::Completed);
    // Cut before the last event: not a completed answer.
    let cut = &sse[..sse.find("\r\n\r\n").unwrap() + 4];
    assert_eq!(EndDetector::of(cut.as_bytes()), Ending::Unfinished);
    let json = serde_json::to_vec(&fixture("03-generate_content-next_turn.json")["reply"]["body"])
        .unwrap();
    assert_eq!(EndDetector::of(&json), Ending::Completed);
}

#[test]
fn fingerprint_is_stable_across_the_captured_turns() {
    let ids: Vec<_> = [
        "01-generate_content.json",
        "02-generate_content-function_response.json",
        "03-generate_content-next_turn.json",
        "04-stream_generate_content.json",
    ]
    .map(|name| context_relay_core::session::fingerprint(&request(name).1))
    .to_vec();
    assert!(ids[0].is_some());
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
}

#[test]
fn reply_text_skips_thoughts_and_signature_only_parts() {
    use context_relay_core::reply::summary_text;
    let reply = |name: &str| fixture(name)["reply"].clone();
    let sse = reply("04-stream_generate_content.json")["sse"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        summary_text(sse.as_bytes()).as_deref(),
        Some("Rome is sunny, 24 °C this afternoon.")
    );
    let json = serde_json::to_vec(&reply("03-generate_content-next_turn.json")["body"]).unwrap();
    assert_eq!(
        summary_text(&json).as_deref(),
        Some("Take an umbrella: showers are expected this evening.")
    );
}
