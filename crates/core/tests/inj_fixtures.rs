//! Portability and injection on the captured client requests in `shared/fixtures/clients/`.

use std::path::{Path, PathBuf};

use context_relay_core::ApiShape;
use context_relay_core::config::InjectionSlot;
use context_relay_core::inject::inject;
use context_relay_core::portable::{
    COMPACTION_NOTE_ALONE, TURN_STATE_HEADER, make_portable, rewrite_for_switch,
};
use serde_json::{Value, json};

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/clients/")
}

fn json_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("fixtures directory") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            json_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "json") {
            out.push(path);
        }
    }
    out.sort();
}

fn load(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("fixture")).expect("fixture JSON")
}

/// `(shape, body bytes)` of a capture, when it is a conversation request.
fn request(fixture: &Value) -> Option<(ApiShape, Vec<u8>)> {
    let shape = ApiShape::from_path(fixture["path"].as_str()?)?;
    let body = fixture.get("body").filter(|b| b.is_object())?;
    Some((shape, serde_json::to_vec(body).expect("serialize")))
}

fn synthetic(name: &str) -> Value {
    load(&fixtures_dir().join("synthetic").join(name))
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn real_captures_are_already_portable_and_accept_injection() {
    let mut files = Vec::new();
    json_files(&fixtures_dir(), &mut files);
    let real: Vec<_> = files
        .iter()
        .filter(|p| !p.components().any(|c| c.as_os_str() == "synthetic"))
        .collect();
    let mut checked = 0;
    for path in real {
        let fixture = load(path);
        let Some((shape, body)) = request(&fixture) else {
            continue;
        };
        let p = make_portable(shape, &body).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        assert_eq!(p.body, None, "{path:?} changed");
        assert!(p.removed.is_empty(), "{path:?}: {:?}", p.removed);
        for slot in [InjectionSlot::InputItem, InjectionSlot::Instructions] {
            let out =
                inject(shape, &body, "HANDOFF", slot).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            let out: Value = serde_json::from_slice(&out).expect("output is JSON");
            assert!(
                out.to_string().contains("HANDOFF"),
                "{path:?}: message missing"
            );
        }
        checked += 1;
    }
    // Chat ×3, Responses ×5, Anthropic ×6 (count_tokens and HEAD captures are not turns).
    assert!(checked >= 12, "only {checked} captures checked");
}

#[test]
fn codex_continuation_loses_exactly_what_the_note_says() {
    let fixture = synthetic("codex-continuation-account-bound.json");
    let expect = &fixture["expect_after_portable"];
    let (shape, body) = request(&fixture).expect("a Responses request");
    assert_eq!(shape, ApiShape::Responses);
    let p = make_portable(shape, &body).expect("portable");
    let out: Value = serde_json::from_slice(&p.body.expect("changed")).expect("JSON");
    let before = &fixture["body"];

    for field in strings(&expect["removed_fields"]) {
        assert!(before.get(field).is_some());
        assert!(out.get(field).is_none(), "{field} kept");
    }
    assert_eq!(p.removed.previous_response_id, 1);
    // Every other top-level member is unchanged.
    for (k, v) in before.as_object().unwrap() {
        if k != "input" && !strings(&expect["removed_fields"]).contains(&k.as_str()) {
            assert_eq!(&out[k], v, "{k}");
        }
    }

    let removed_types = strings(&expect["removed_input_types"]);
    assert_eq!(
        p.removed.reasoning_items as usize,
        removed_types.iter().filter(|t| **t == "reasoning").count()
    );
    let replaced = strings(&expect["replaced_input_types"]);
    assert_eq!(
        p.removed.compaction_items as usize,
        replaced.iter().filter(|t| **t == "compaction").count()
    );

    let note = json!({"type":"message","role":"developer","content":[{"type":"input_text","text":COMPACTION_NOTE_ALONE}]});
    let input = out["input"].as_array().unwrap();
    // The note sits where the compaction item was; the other items keep their order and bytes.
    let original_position = before["input"]
        .as_array()
        .unwrap()
        .iter()
        .position(|i| i["type"] == "compaction")
        .unwrap();
    assert_eq!(input[original_position], note);
    let kept: Vec<&Value> = input.iter().filter(|i| **i != note).collect();
    let kept_types: Vec<&str> = kept.iter().filter_map(|i| i["type"].as_str()).collect();
    assert_eq!(kept_types, strings(&expect["kept_input_types_in_order"]));
    let originals: Vec<&Value> = before["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| !["reasoning", "compaction"].contains(&i["type"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(kept, originals);

    // The header is the caller's to drop; the constant names it.
    assert!(strings(&expect["removed_headers"]).contains(&TURN_STATE_HEADER));
    assert!(fixture["headers"].get(TURN_STATE_HEADER).is_some());
}

#[test]
fn claude_thinking_blocks_go_and_the_handoff_is_the_last_system_block() {
    let fixture = synthetic("claude-code-thinking-account-bound.json");
    let expect = &fixture["expect_after_portable"];
    let (shape, body) = request(&fixture).expect("a Messages request");
    assert_eq!(shape, ApiShape::AnthropicMessages);
    let r = rewrite_for_switch(shape, &body, Some("HANDOFF"), InjectionSlot::InputItem)
        .expect("rewrite");
    assert!(r.injected);
    let out: Value = serde_json::from_slice(&r.body.expect("changed")).expect("JSON");
    let before = &fixture["body"];

    for block in strings(&expect["removed_blocks"]) {
        let count = |v: &Value| {
            v["messages"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
                .filter(|b| b["type"] == block)
                .count()
        };
        assert!(count(before) > 0);
        assert_eq!(count(&out), 0, "{block} kept");
    }
    assert_eq!(r.removed.thinking_blocks, 1);
    assert_eq!(r.removed.redacted_thinking_blocks, 1);
    assert_eq!(
        out["messages"].as_array().unwrap().len() as u64,
        expect["kept_messages"].as_u64().unwrap()
    );
    // The conversation ends with a plain user turn: thinking stays as the client set it.
    assert_eq!(out["thinking"], before["thinking"]);
    assert_eq!(r.removed.thinking_disabled, 0);

    assert_eq!(
        expect["system_handoff_position"],
        "last block, after the cache_control block"
    );
    let system = out["system"].as_array().unwrap();
    let original = before["system"].as_array().unwrap();
    assert_eq!(&system[..original.len()], &original[..]);
    assert_eq!(system.len(), original.len() + 1);
    assert!(system[system.len() - 2].get("cache_control").is_some());
    assert_eq!(
        system[system.len() - 1],
        json!({"type":"text","text":"HANDOFF"})
    );
}
