use proptest::prelude::*;
use serde_json::{Value, json};

use super::super::{ForeignSet, Removed, Rewrite, Scope, digest, rewrite};
use super::FOREIGN_SIGNATURE;
use crate::api::ApiShape;
use crate::config::InjectionSlot;

fn run(body: &[u8], scope: Scope<'_>) -> Rewrite {
    rewrite(
        ApiShape::Gemini,
        body,
        scope,
        None,
        InjectionSlot::default(),
    )
    .unwrap()
}

fn out(r: &Rewrite) -> Value {
    serde_json::from_slice(r.body.as_deref().expect("changed")).expect("output is JSON")
}

/// A finished turn (thought, signed call, response, signed answer, signature-only part),
/// then a current turn whose signed call is still being answered.
fn history() -> Value {
    json!({
        "contents": [
            {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
            {"role": "model", "parts": [
                {"text": "**Thinking**", "thought": true},
                {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "SIG_A1"},
            ]},
            {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"c": 18}}}]},
            {"role": "model", "parts": [{"text": "18 °C.", "thoughtSignature": "SIG_A2"}]},
            {"role": "model", "parts": [{"text": "", "thoughtSignature": "SIG_A3"}]},
            {"role": "user", "parts": [{"text": "And Rome?"}]},
            {"role": "model", "parts": [
                {"text": "Let me look", "thought": true, "thoughtSignature": "SIG_A4"},
                {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}, "thoughtSignature": "SIG_A5"},
                {"functionCall": {"name": "get_time", "args": {"city": "Rome"}}},
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "get_weather", "response": {"c": 24}}},
                {"functionResponse": {"name": "get_time", "response": {"t": "15:00"}}},
            ]},
        ],
        "systemInstruction": {"parts": [{"text": "Be brief."}], "role": "user"},
        "generationConfig": {"thinkingConfig": {"include_thoughts": true}},
    })
}

fn token(s: &str) -> u64 {
    digest(s.as_bytes())
}

#[test]
fn switch_removes_every_signature() {
    let body = serde_json::to_vec(&history()).unwrap();
    let r = run(&body, Scope::All);
    assert_eq!(
        out(&r),
        json!({
            "contents": [
                {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
                {"role": "model", "parts": [
                    {"text": "**Thinking**", "thought": true},
                    {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
                ]},
                {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"c": 18}}}]},
                {"role": "model", "parts": [{"text": "18 °C."}]},
                {"role": "user", "parts": [{"text": "And Rome?"}]},
                {"role": "model", "parts": [
                    {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}, "thoughtSignature": FOREIGN_SIGNATURE},
                    {"functionCall": {"name": "get_time", "args": {"city": "Rome"}}},
                ]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "get_weather", "response": {"c": 24}}},
                    {"functionResponse": {"name": "get_time", "response": {"t": "15:00"}}},
                ]},
            ],
            "systemInstruction": {"parts": [{"text": "Be brief."}], "role": "user"},
            "generationConfig": {"thinkingConfig": {"include_thoughts": true}},
        })
    );
    assert_eq!(
        r.removed,
        Removed {
            thought_signatures: 5,
            thought_parts: 2,
            empty_messages: 1,
            ..Removed::default()
        }
    );
    assert_eq!(
        r.removed.iter().collect::<Vec<_>>(),
        [
            ("empty_message", 1),
            ("thought_signature", 5),
            ("thought_part", 2)
        ]
    );
    let seen: Vec<u64> = ["SIG_A1", "SIG_A2", "SIG_A3", "SIG_A4", "SIG_A5"]
        .map(token)
        .to_vec();
    assert_eq!(r.seen, seen);
}

#[test]
fn the_rest_of_the_body_keeps_its_bytes() {
    let body = br#"{ "contents" : [ {"role":"user","parts":[{"text":"a"}]} ,
 {"role":"model","parts":[ {"text":"b" , "thoughtSignature":"S1"} , {"text":"c","x":1.50} ]},
 {"role":"user","parts":[{"text":"d"}]} ], "z": 1e3 }"#;
    let r = run(body, Scope::All);
    assert_eq!(
        String::from_utf8(r.body.unwrap()).unwrap(),
        r#"{ "contents" : [ {"role":"user","parts":[{"text":"a"}]} ,
 {"role":"model","parts":[ {"text":"b"} , {"text":"c","x":1.50} ]},
 {"role":"user","parts":[{"text":"d"}]} ], "z": 1e3 }"#
    );
}

#[test]
fn foreign_scope_strips_only_the_old_accounts_signatures() {
    let body = json!({"contents": [
        {"role": "user", "parts": [{"text": "q1"}]},
        {"role": "model", "parts": [{"text": "a1", "thoughtSignature": "OLD+/A=="}]},
        {"role": "user", "parts": [{"text": "q2"}]},
        {"role": "model", "parts": [{"text": "a2", "thoughtSignature": "NEW_B"}]},
        {"role": "user", "parts": [{"text": "q3"}]},
    ]});
    let bytes = serde_json::to_vec(&body).unwrap();
    // The SDK resends a signature in the URL-safe alphabet: one signature, one digest.
    let foreign = ForeignSet::from_digests([token("OLD-_A")]);
    let r = run(&bytes, Scope::Foreign(&foreign));
    let parts = |v: &Value, i: usize| v["contents"][i]["parts"].clone();
    let got = out(&r);
    assert_eq!(parts(&got, 1), json!([{"text": "a1"}]));
    assert_eq!(
        parts(&got, 3),
        json!([{"text": "a2", "thoughtSignature": "NEW_B"}])
    );
    assert_eq!(r.seen, [token("OLD-_A"), token("NEW_B")]);
    assert_eq!(r.removed.thought_signatures, 1);
    // Nothing foreign is left: a second pass changes nothing, and neither does Nothing.
    let again = run(r.body.as_deref().unwrap(), Scope::Foreign(&foreign));
    assert_eq!(again.body, None);
    assert_eq!(run(&bytes, Scope::Nothing).body, None);
}

#[test]
fn placeholder_is_kept_by_the_lasting_scrub() {
    // The current turn's call got the placeholder; later turns of the same tool cycle resend
    // the old signature, which is replaced again, while the placeholder itself is not foreign.
    let body = json!({"contents": [
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": [{"function_call": {"name": "f", "args": {}}, "thought_signature": "OLD"}]},
        {"role": "user", "parts": [{"function_response": {"name": "f", "response": {}}}]},
    ]});
    let bytes = serde_json::to_vec(&body).unwrap();
    let foreign = ForeignSet::from_digests([token("OLD")]);
    let r = run(&bytes, Scope::Foreign(&foreign));
    let got = out(&r);
    assert_eq!(
        got["contents"][1]["parts"][0]["thought_signature"],
        json!(FOREIGN_SIGNATURE)
    );
    assert_eq!(
        run(r.body.as_deref().unwrap(), Scope::Foreign(&foreign)).body,
        None
    );
    // Nor is it state to remove on a later switch.
    let again = run(r.body.as_deref().unwrap(), Scope::All);
    assert_eq!((again.body, again.seen.len()), (None, 0));
}

#[test]
fn odd_shapes_pass_through() {
    for body in [
        json!({"contents": "hi"}),
        json!({"contents": [1, "x", null, {"parts": "p"}, {"parts": [2, {"thoughtSignature": 7}]}]}),
        json!({"model": "gemini-2.5-flash"}),
    ] {
        let bytes = serde_json::to_vec(&body).unwrap();
        let r = run(&bytes, Scope::All);
        // A non-string signature is still a signature: its part holds nothing else and goes.
        if body["contents"].is_array() {
            let got = out(&r);
            assert_eq!(got["contents"][4]["parts"], json!([2]));
        } else {
            assert_eq!(r.body, None, "{body}");
        }
    }
}

/// Gemini-shaped bodies without any signature.
fn unsigned_body() -> impl Strategy<Value = Value> {
    let part = prop_oneof![
        "[a-z \"<>]{0,12}".prop_map(|t| json!({"text": t})),
        "[a-z \"]{0,12}".prop_map(|t| json!({"text": t, "thought": true})),
        "[a-z]{1,6}".prop_map(|n| json!({"functionCall": {"name": n, "args": {"signature": n}}})),
        "[a-z]{1,6}"
            .prop_map(|n| json!({"functionResponse": {"name": n, "response": {"thought": n}}})),
    ];
    let content = (
        prop_oneof![Just("user"), Just("model")],
        proptest::collection::vec(part, 0..4),
    )
        .prop_map(|(role, parts)| json!({"role": role, "parts": parts}));
    (proptest::collection::vec(content, 0..6), any::<bool>()).prop_map(|(contents, system)| {
        let mut body = json!({"contents": contents});
        if system {
            body["systemInstruction"] = json!({"parts": [{"text": "sys"}]});
        }
        body
    })
}

proptest! {
    #[test]
    fn a_body_without_signatures_is_untouched(body in unsigned_body()) {
        let bytes = serde_json::to_vec_pretty(&body).unwrap();
        let r = run(&bytes, Scope::All);
        prop_assert_eq!(r.body, None);
        prop_assert!(r.removed.is_empty());
        prop_assert!(r.seen.is_empty());
    }

    #[test]
    fn signatures_go_and_nothing_else_changes(body in unsigned_body(), seed in any::<u64>()) {
        // Sign some parts that have data (text parts that are not thoughts, calls).
        let mut signed = body.clone();
        let mut n = 0;
        if let Some(contents) = signed["contents"].as_array_mut() {
            for (i, c) in contents.iter_mut().enumerate() {
                for (j, p) in c["parts"].as_array_mut().unwrap().iter_mut().enumerate() {
                    let data = p.get("functionResponse").is_some()
                        || p.get("text").is_some_and(|t| t != "") && p.get("thought").is_none();
                    if data && (seed >> ((i * 4 + j) % 64)) & 1 == 1 {
                        p["thoughtSignature"] = json!(format!("S{i}x{j}"));
                        n += 1;
                    }
                }
            }
        }
        let r = run(&serde_json::to_vec(&signed).unwrap(), Scope::All);
        prop_assert_eq!(r.removed.thought_signatures, n);
        prop_assert_eq!(r.removed.thought_parts, 0);
        if n == 0 {
            prop_assert_eq!(r.body, None);
        } else {
            prop_assert_eq!(out(&r), body);
        }
    }
}
