use bytes::Bytes;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::parse_object;
use crate::tests::arb_value;

/// Objects whose keys often repeat and often are `model`, with values of every kind.
fn arb_object() -> impl Strategy<Value = Vec<(String, Value)>> {
    let key = prop_oneof![
        Just("model".to_owned()),
        Just("mod\\u0065l".to_owned()),
        "[a-z]{0,3}".prop_map(|s| s),
    ];
    prop::collection::vec((key, arb_value()), 0..6)
}

/// The object's JSON text with the keys as written (escapes kept), in `style`.
fn render(members: &[(String, Value)], pretty: bool) -> String {
    let sep = if pretty { ",\n  " } else { "," };
    let inner: Vec<String> = members
        .iter()
        .map(|(k, v)| {
            let v = if pretty {
                serde_json::to_string_pretty(v).unwrap()
            } else {
                v.to_string()
            };
            format!("\"{k}\"{}{v}", if pretty { " : " } else { ":" })
        })
        .collect();
    format!("{{{}}}", inner.join(sep))
}

proptest! {
    #[test]
    fn find_member_agrees_with_the_full_parser(members in arb_object(), pretty in any::<bool>()) {
        let text = render(&members, pretty);
        let body = text.as_bytes();
        let full = parse_object(body).unwrap();
        let first = full.fields.iter().find(|f| f.key == "model").cloned();
        prop_assert_eq!(find_member(body, "model").unwrap(), first.clone());
        // Every member, in order, as the full parse sees them.
        let walked: Vec<_> = {
            let mut m = Members::root(body).unwrap();
            let mut out = Vec::new();
            while let Some(k) = m.next() {
                let k = k.unwrap();
                let value = m.value(&k).unwrap();
                out.push((k.key.into_owned(), k.key_span, value));
            }
            out
        };
        let expected: Vec<_> = full
            .fields
            .iter()
            .map(|f| (f.key.to_string(), f.key_span.clone(), f.value.clone()))
            .collect();
        prop_assert_eq!(walked, expected);
        // Whatever follows the member is not read.
        if let Some(f) = first {
            let mut cut = body[..f.value.end].to_vec();
            cut.extend_from_slice(b", \"broken\": [tru");
            prop_assert_eq!(find_member(&cut, "model").unwrap(), Some(f));
        }
    }

    #[test]
    fn walks_never_panic(data in prop::collection::vec(any::<u8>(), 0..256), tokens in prop::collection::vec(prop::sample::select(vec!["{", "}", "[", "]", ",", ":", "\"model\"", "\"m\"", "1", " ", "\"\\", "null"]), 0..24)) {
        let _ = find_member(&data, "model");
        let text = tokens.concat();
        let found = find_member(text.as_bytes(), "model");
        // A member is found only in a well-formed prefix, and a well-formed body always answers.
        if let Ok(Some(f)) = &found {
            prop_assert_eq!(&text.as_bytes()[f.key_span.clone()], b"\"model\"");
        }
        if serde_json::from_str::<Value>(&text).is_ok_and(|v| v.is_object()) {
            prop_assert!(found.is_ok());
        }
        for body in [&data[..], text.as_bytes()] {
            if let Ok(mut m) = Members::root(body) {
                while let Some(Ok(k)) = m.next() {
                    if Kind::at(body, k.value_start) == Some(Kind::Array) {
                        for item in m.items(&k).unwrap() {
                            if item.is_err() {
                                break;
                            }
                        }
                        break;
                    }
                }
            }
        }
    }

    #[test]
    fn splice_keeps_every_other_byte(model in "\\PC{1,12}", new in "\\PC{1,12}", tail in arb_value()) {
        let body = Bytes::from(serde_json::to_vec(&json!({"a": 1, "model": model, "z": tail})).unwrap());
        let f = find_member(&body, "model").unwrap().unwrap();
        let out = splice_str(&body, f.value.clone(), &new).unwrap();
        let mut expected: Value = serde_json::from_slice(&body).unwrap();
        expected["model"] = json!(new);
        prop_assert_eq!(serde_json::from_slice::<Value>(&out).unwrap(), expected);
        prop_assert_eq!(&out[..f.value.start], &body[..f.value.start]);
        prop_assert!(out.ends_with(&body[f.value.end..]));
        prop_assert_eq!(out.as_ptr() == body.as_ptr(), model == new);
    }
}

#[test]
fn errors_and_edges() {
    assert_eq!(find_member(b" {} ", "model"), Ok(None));
    assert!(matches!(
        find_member(b"[1]", "model"),
        Err(JsonError::WrongKind { .. })
    ));
    assert!(matches!(
        find_member(b"{} x", "model"),
        Err(JsonError::TrailingData { at: 3 })
    ));
    assert!(find_member(b"", "model").is_err());
    assert!(find_member(br#"{"model":"#, "model").is_err());
    // Invalid UTF-8 before the member is refused; after it, not read.
    assert!(matches!(
        find_member(b"{\"a\":\"\xff\",\"model\":\"m\"}", "model"),
        Err(JsonError::InvalidUtf8 { at: 6 })
    ));
    assert!(find_member(b"{\"model\":\"m\",\"a\":\"\xff\"}", "model").is_ok_and(|f| f.is_some()));
    // The key is compared decoded, and the first of two wins.
    let body = br#"{"mod\u0065l":"a","model":"b"}"#;
    let f = find_member(body, "model").unwrap().unwrap();
    assert_eq!(&body[f.value], br#""a""#);
    // Splicing a span that is not a string is an error.
    let body = Bytes::from_static(br#"{"model":5}"#);
    let f = find_member(&body, "model").unwrap().unwrap();
    assert!(splice_str(&body, f.value, "x").is_err());
    assert!(splice_str(&body, 0..99, "x").is_err());
    // Equal once decoded: nothing to copy.
    let body = Bytes::from_static(br#"{"model":"gpt\u002d5"}"#);
    let f = find_member(&body, "model").unwrap().unwrap();
    assert_eq!(
        splice_str(&body, f.value, "gpt-5").unwrap().as_ptr(),
        body.as_ptr()
    );
}

#[test]
fn items_read_only_what_is_asked() {
    let body = br#"{"messages":[{"role":"user"}, [1,2] ,"x"], "after": nonsense"#;
    let mut m = Members::root(body).unwrap();
    let k = m.next().unwrap().unwrap();
    let items: Vec<_> = m.items(&k).unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(items.len(), 3);
    assert_eq!(&body[items[1].clone()], b"[1,2]");
    let mut m = Members::root(br#"{"messages":{}}"#).unwrap();
    let k = m.next().unwrap().unwrap();
    assert!(matches!(m.items(&k), Err(JsonError::WrongKind { .. })));
    let body = br#"{"m":[1 2]}"#;
    let mut m = Members::root(body).unwrap();
    let k = m.next().unwrap().unwrap();
    let mut items = m.items(&k).unwrap();
    assert_eq!(items.next(), Some(Ok(6..7)));
    assert!(matches!(
        items.next(),
        Some(Err(JsonError::Unexpected { at: 8, .. }))
    ));
    assert_eq!(items.next(), None);
}
