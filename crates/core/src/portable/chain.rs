//! Tool outputs left without their call when a Responses chain is dropped.
//!
//! A client that chains its turns (`previous_response_id`, or a `conversation`) sends only the
//! new items: in a tool loop, the `function_call_output` whose `function_call` lives in the
//! stored response it names. When the switch drops the chain (the new account cannot read the
//! old one's responses), such an output answers a call the new account never saw, and the
//! provider refuses the request ("No tool call found for function call output with call_id
//! …"). Each such output becomes a user message that says what it answers and carries its
//! text, so that the turn goes on and the result is not lost.

use std::collections::HashSet;

use super::{Cx, string_member};
use crate::inject::{self, Plan};
use crate::json::{self, Kind, Span};

/// The text that opens the message replacing an output whose call was in the dropped chain.
pub const ORPHAN_OUTPUT_NOTE: &str = "Result of a tool call made earlier in this \
conversation (the call itself is in history that could not move to this account)";

/// Replaces, in the `input` array at `items`, every tool output (`…_call_output`) whose
/// `call_id` no call of the array has (see the module docs); the items replaced.
pub(super) fn answer_orphans(
    plan: &mut Plan<'_>,
    cx: &mut Cx<'_>,
    items: &[Span],
) -> Result<Vec<Span>, json::JsonError> {
    let body = plan.body;
    let mut calls: HashSet<&[u8]> = HashSet::new();
    let mut outputs: Vec<(Span, Span)> = Vec::new();
    for item in items {
        if plan.kind(item) != Kind::Object {
            continue;
        }
        let object = plan.doc.object_at(item.clone())?;
        let (Some(ty), Some(call_id)) =
            (string_member(body, &object, "type"), object.get("call_id"))
        else {
            continue;
        };
        let id = call_id.value.clone();
        if ty.ends_with("_call_output") {
            outputs.push((item.clone(), id));
        } else if ty.ends_with("_call") {
            calls.insert(&body[id]);
        }
    }
    let mut replaced = Vec::new();
    for (item, id) in outputs {
        if calls.contains(&body[id.clone()]) {
            continue;
        }
        let object = plan.doc.object_at(item.clone())?;
        let call_id = json::decode_str(body, id).unwrap_or_default();
        let mut text = format!("{ORPHAN_OUTPUT_NOTE}, call_id {call_id}:\n");
        if let Some(output) = object.get("output") {
            push_output(&mut text, body, &output.value);
        }
        let note = format!(
            r#"{{"type":"message","role":"user","content":[{{"type":"input_text","text":{}}}]}}"#,
            inject::json_string(&text)
        );
        plan.edits.replace(item.clone(), note.into_bytes());
        replaced.push(item);
        cx.removed.orphan_outputs += 1;
    }
    Ok(replaced)
}

/// The text of a tool output: a string as it is, the text parts of an array of parts (other
/// parts named), anything else as its JSON.
fn push_output(text: &mut String, body: &[u8], span: &Span) {
    let raw = &body[span.clone()];
    if let Ok(s) = json::decode_str(body, span.clone()) {
        text.push_str(&s);
        return;
    }
    let Ok(serde_json::Value::Array(parts)) = serde_json::from_slice::<serde_json::Value>(raw)
    else {
        text.push_str(&String::from_utf8_lossy(raw));
        return;
    };
    for part in parts {
        match part.get("text").and_then(|t| t.as_str()) {
            Some(t) => text.push_str(t),
            None => {
                let kind = part.get("type").and_then(|t| t.as_str()).unwrap_or("part");
                text.push_str(&format!("[{kind} not carried over]"));
            }
        }
        text.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::ORPHAN_OUTPUT_NOTE;
    use crate::api::ApiShape;
    use crate::portable::{ForeignSet, Scope, digest, make_portable, rewrite};

    fn out(body: &Value) -> (Value, u32) {
        let p = make_portable(ApiShape::Responses, &serde_json::to_vec(body).unwrap()).unwrap();
        let body = p.body.map(|b| serde_json::from_slice(&b).unwrap());
        (body.unwrap_or(Value::Null), p.removed.orphan_outputs)
    }

    #[test]
    fn an_output_whose_call_went_with_the_chain_becomes_a_user_message() {
        let body = json!({
            "previous_response_id": "resp_1",
            "input": [
                {"type": "function_call_output", "call_id": "call_w1", "output": "sunny, 21 C"},
                {"type": "custom_tool_call_output", "call_id": "call_p", "output": [
                    {"type": "input_text", "text": "patched"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]},
            ],
        });
        let (body, orphans) = out(&body);
        assert_eq!(orphans, 2);
        let input = body["input"].as_array().unwrap();
        assert!(body.get("previous_response_id").is_none());
        for (item, words) in input.iter().zip([
            ["call_w1", "sunny, 21 C"],
            ["call_p", "patched\n[input_image not carried over]"],
        ]) {
            assert_eq!(item["type"], "message");
            assert_eq!(item["role"], "user");
            let text = item["content"][0]["text"].as_str().unwrap();
            assert!(text.starts_with(ORPHAN_OUTPUT_NOTE), "{text}");
            for w in words {
                assert!(text.contains(w), "{text}");
            }
        }
    }

    #[test]
    fn an_output_whose_call_is_sent_or_whose_chain_stays_is_kept() {
        let call =
            json!({"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"});
        let output = json!({"type": "function_call_output", "call_id": "c1", "output": "ok"});
        // The call comes along: nothing to answer for.
        let (body, orphans) = out(&json!({
            "previous_response_id": "resp_1", "input": [call.clone(), output.clone()],
        }));
        assert_eq!(orphans, 0);
        assert_eq!(body["input"], json!([call, output]));
        // The chain is the serving account's own: kept, and its outputs with it.
        let own = json!({"previous_response_id": "resp_B", "input": [output.clone()]});
        let foreign = ForeignSet::from_digests([digest(b"\"resp_A\"")]);
        let r = rewrite(
            ApiShape::Responses,
            &serde_json::to_vec(&own).unwrap(),
            Scope::Foreign(&foreign),
            None,
            crate::config::InjectionSlot::default(),
        )
        .unwrap();
        assert_eq!(r.removed.orphan_outputs, 0);
        assert!(r.body.is_none());
    }
}
