use proptest::prelude::*;

use super::*;

#[test]
fn errors() {
    assert_eq!(
        find_model(b""),
        Err(ModelError::NotJson("an empty body".into()))
    );
    for not_json in [&b"[\"m\"]"[..], b"{\"model\":", b"{\"a\":1} x"] {
        assert!(
            matches!(find_model(not_json), Err(ModelError::NotJson(_))),
            "{:?}",
            find_model(not_json)
        );
    }
    assert_eq!(find_model(b"{\"a\":1}"), Err(ModelError::Missing));
    assert_eq!(
        find_model(b"{\"model\":5}"),
        Err(ModelError::NotString("5".into()))
    );
    assert_eq!(
        find_model(b"{\"model\":\" \"}"),
        Err(ModelError::NotString("\" \"".into()))
    );
    // A second top-level `model`, plain or spelt with escapes, is refused.
    for dup in [
        &b"{\"model\":\"a\",\"model\":\"b\"}"[..],
        b"{\"model\":\"a\",\"mod\\u0065l\":\"b\"}",
    ] {
        assert!(
            matches!(find_model(dup), Err(ModelError::NotJson(ref e)) if e.contains("found 2")),
            "{:?}",
            find_model(dup)
        );
    }
    // Nested or quoted `model`s and escapes elsewhere are not duplicates.
    let nested = br#"{"model":"a","tools":[{"parameters":{"model":{"type":"string"}}}],"x":"model","t":"caf\u00e9"}"#;
    assert_eq!(find_model(nested).unwrap().value(nested), "a");
    // Without such a token the rest is not read.
    let cut = b"{\"model\":\"a\", oops}";
    assert_eq!(find_model(cut).unwrap().value(cut), "a");
    for not_json in [
        &b"{\"model\":\"a\", \"n\": 1"[..],
        b"{\"n\":1, oops, \"model\":\"a\"}",
    ] {
        assert!(
            matches!(find_model(not_json), Err(ModelError::NotJson(_))),
            "{:?}",
            find_model(not_json)
        );
    }
}

#[test]
fn escaped_values_and_nested_models() {
    let body = Bytes::from_static(br#"{"meta":{"model":"x"},"model":"a\/b\u0041"}"#);
    let f = find_model(&body).unwrap();
    assert_eq!(f.value(&body), "a/bA");
    let out = replace_model(&body, &f, "q\"z").unwrap();
    assert_eq!(&out[..], br#"{"meta":{"model":"x"},"model":"q\"z"}"#);
    // The target's name already: the same bytes, not copied.
    let same = replace_model(&body, &f, "a/bA").unwrap();
    assert_eq!(same.as_ptr(), body.as_ptr());
}

#[test]
fn a_field_of_another_body_is_not_written_over() {
    let body = Bytes::from_static(br#"{"model":"a-long-model-name","n":1}"#);
    let f = find_model(&body).unwrap();
    // Shorter than the span, and a body whose bytes there are no string literal.
    for other in [
        &br#"{"model":"a"}"#[..],
        br#"{"n":1,"model":"a-long-model-name"}"#,
    ] {
        let other = Bytes::copy_from_slice(other);
        assert_eq!(replace_model(&other, &f, "b"), None, "{other:?}");
    }
}

#[test]
fn a_joined_body_is_rewritten_without_copying_it() {
    let text = br#"{"model":"codex-relay","messages":[{"role":"user","content":"hi"}]}"#;
    let field = find_model(text).unwrap();
    for new in ["gpt-5.5", "a-much-longer-model-name-than-the-combo-name"] {
        let mut joined = vec![b' '; HEADROOM];
        joined.extend_from_slice(text);
        let range = joined.as_ptr_range();
        let (out, _) = rewrite_model(Buffered::Joined(joined), &field, &Arc::from(new));
        assert!(range.contains(&out.as_ptr()), "copied for {new}");
        let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(value["model"], new);
        assert_eq!(value["messages"][0]["content"], "hi");
    }
    // Longer than the spare bytes allow: copied once, still right.
    let long = "m".repeat(HEADROOM + 40);
    let mut joined = vec![b' '; HEADROOM];
    joined.extend_from_slice(text);
    let (out, _) = rewrite_model(Buffered::Joined(joined), &field, &Arc::from(&*long));
    let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(value["model"], long.as_str());
}

proptest! {
    /// Every byte but the model literal is kept, and the result parses to the same value
    /// with only `model` changed.
    #[test]
    fn rewrite_keeps_every_other_byte(
        before in "[a-z]{0,8}",
        model in "\\PC{1,20}",
        new in "\\PC{1,20}",
        num in any::<f64>().prop_filter("finite", |f| f.is_finite()),
        ws in "[ \t\n]{0,3}",
    ) {
        prop_assume!(!model.trim().is_empty());
        let model_lit = serde_json::Value::String(model.clone()).to_string();
        let text = format!(
            "{{{ws}\"{before}x\":{num:e},{ws}\"model\"{ws}:{ws}{model_lit}{ws},\"z\":[1,{{\"model\":2}}]}}"
        );
        let body = Bytes::from(text.clone());
        let f = find_model(&body).unwrap();
        prop_assert_eq!(f.value(&body), model.as_str());
        let out = replace_model(&body, &f, &new).unwrap();
        let new_lit = serde_json::Value::String(new.clone()).to_string();
        prop_assert_eq!(&out[..f.span.start], &body[..f.span.start]);
        prop_assert_eq!(&out[f.span.start + new_lit.len()..], &body[f.span.end..]);
        let mut a: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let b: serde_json::Value = serde_json::from_slice(&out).unwrap();
        a["model"] = serde_json::Value::String(new);
        prop_assert_eq!(a, b);
    }

    /// A joined body rewritten in place equals the copying splice, whether the new name is
    /// shorter, longer, or too long for the spare bytes.
    #[test]
    fn rewriting_a_joined_body_in_place_equals_the_splice(
        before in "[a-z ]{0,12}",
        model in "[a-z0-9.-]{1,20}|\\PC{1,8}",
        new in "[a-z0-9./-]{0,100}|\\PC{1,30}",
        tail in "[a-z\\\"]{0,40}",
    ) {
        prop_assume!(!model.trim().is_empty());
        let model_lit = serde_json::Value::String(model).to_string();
        let tail_lit = serde_json::Value::String(tail).to_string();
        let text = format!("{{\"a{before}\":1,\"model\":{model_lit},\"t\":{tail_lit}}}");
        let field = find_model(text.as_bytes()).unwrap();
        let spliced = replace_model(&Bytes::from(text.clone()), &field, &new).unwrap();
        let mut joined = vec![b' '; HEADROOM];
        joined.extend_from_slice(text.as_bytes());
        let name: Arc<str> = Arc::from(&*new);
        let (rewritten, in_place) = rewrite_model(Buffered::Joined(joined), &field, &name);
        prop_assert_eq!(&rewritten[..], &spliced[..]);
        let (chunk, copied) = rewrite_model(Buffered::Chunk(Bytes::from(text)), &field, &name);
        prop_assert_eq!(&chunk[..], &spliced[..]);
        prop_assert_eq!(&in_place, &copied);
    }

    /// `names` answers what comparing `value` would, for any span of any bytes.
    #[test]
    fn names_is_comparing_the_value(
        body in prop::collection::vec(prop_oneof![Just(b'a'), Just(b'"'), any::<u8>()], 0..12),
        span in (0usize..14, 0usize..14),
        decoded in prop::option::of("a{0,2}"),
        model in prop_oneof![Just(String::new()), "a{1,3}", "\\PC{1,2}"],
    ) {
        let field = ModelField { decoded, span: span.0..span.1 };
        prop_assert_eq!(field.names(&body, &model), field.value(&body) == model);
    }

    /// A later target's model written at the recorded place equals finding `model` in the
    /// rewritten body again and replacing it.
    #[test]
    fn retargeting_at_the_written_place_equals_finding_it_again(
        before in "[a-z ]{0,12}",
        model in "[a-z0-9.-]{1,20}|\\PC{1,8}",
        first in "[a-z0-9./-]{1,40}|\\PC{1,12}",
        later in "[a-z0-9./-]{1,40}|\\PC{1,12}",
        mode in 0..3u8,
        cuts in proptest::collection::vec(0usize..80, 0..4),
    ) {
        prop_assume!(!model.trim().is_empty() && !first.trim().is_empty());
        let model_lit = serde_json::Value::String(model).to_string();
        let text = format!("{{\"a{before}\":1,\"model\":{model_lit},\"t\":[1,{{\"model\":2}}]}}");
        let field = find_model(text.as_bytes()).unwrap();
        let first = Arc::from(&*first);
        let (out, written) = match mode {
            0 | 1 => {
                let body = if mode == 0 {
                    let mut buf = vec![b' '; HEADROOM];
                    buf.extend_from_slice(text.as_bytes());
                    Buffered::Joined(buf)
                } else {
                    Buffered::Chunk(Bytes::from(text.clone()))
                };
                let (out, written) = rewrite_model(body, &field, &first);
                (Chunks::from(out), written)
            }
            _ => {
                // Kept in chunks, cut anywhere after the `model` literal.
                let whole = Bytes::from(text.clone());
                let mut ends: Vec<usize> =
                    cuts.iter().map(|c| (field.span.end + c).min(whole.len())).collect();
                ends.push(whole.len());
                ends.sort_unstable();
                let mut chunks = Chunks::default();
                let mut from = 0;
                for end in ends {
                    chunks.push(whole.slice(from..end));
                    from = end;
                }
                rewrite_model_in_chunks(chunks, &field, &first)
            }
        };
        let out = out.to_bytes();
        let again = find_model(&out).unwrap();
        prop_assert_eq!(again.value(&out), &*first);
        let expected = replace_model(&out, &again, &later).unwrap();
        let retargeted = written.retarget(&Chunks::from(out), &later).unwrap();
        prop_assert_eq!(&retargeted.to_bytes()[..], &expected[..]);
    }

    #[test]
    fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = find_model(&data);
    }
}

#[test]
fn module_example() {
    use crate::model::{find_model, replace_model};
    use bytes::Bytes;
    let body = Bytes::from_static(br#"{"stream":true, "model" : "codex-relay","n":1.50}"#);
    let field = find_model(&body).unwrap();
    assert_eq!(field.value(&body), "codex-relay");
    let out = replace_model(&body, &field, "gpt-5.5").unwrap();
    assert_eq!(
        &out[..],
        br#"{"stream":true, "model" : "gpt-5.5","n":1.50}"#
    );
}
