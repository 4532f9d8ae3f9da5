use proptest::prelude::*;
use serde_json::Value;

use super::*;
use crate::tests::{arb_value, token};
use crate::{array_at, object_at, parse_object, validate};

/// `v` as JSON text with whitespace from `ws` (taken in turn) at every place it may go.
fn render(v: &Value, ws: &[&str], out: &mut String, n: &mut usize) {
    fn gap(out: &mut String, ws: &[&str], n: &mut usize) {
        if !ws.is_empty() {
            out.push_str(ws[*n % ws.len()]);
            *n += 1;
        }
    }
    match v {
        Value::Array(items) => {
            out.push('[');
            for (k, item) in items.iter().enumerate() {
                if k > 0 {
                    out.push(',');
                }
                gap(out, ws, n);
                render(item, ws, out, n);
                gap(out, ws, n);
            }
            if items.is_empty() {
                gap(out, ws, n);
            }
            out.push(']');
        }
        Value::Object(members) => {
            out.push('{');
            for (k, (key, value)) in members.iter().enumerate() {
                if k > 0 {
                    out.push(',');
                }
                gap(out, ws, n);
                out.push_str(&Value::String(key.clone()).to_string());
                gap(out, ws, n);
                out.push(':');
                gap(out, ws, n);
                render(value, ws, out, n);
                gap(out, ws, n);
            }
            if members.is_empty() {
                gap(out, ws, n);
            }
            out.push('}');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn arb_ws() -> impl Strategy<Value = Vec<&'static str>> {
    prop::collection::vec(
        prop::sample::select(vec!["", " ", "\n", "\t", "\r\n  ", "   "]),
        0..6,
    )
}

fn arb_text() -> impl Strategy<Value = String> {
    (arb_value(), arb_ws()).prop_map(|(v, ws)| {
        let mut out = String::from(ws.first().copied().unwrap_or(""));
        render(&v, &ws, &mut out, &mut 0);
        out.push_str(ws.last().copied().unwrap_or(""));
        out
    })
}

/// Every array and object of a valid body, with its depth, found by the scanning readers.
fn containers(body: &[u8]) -> Vec<(Span, usize)> {
    let mut out = Vec::new();
    let mut todo = vec![(validate(body).unwrap(), 0)];
    while let Some((span, depth)) = todo.pop() {
        let inner: Vec<Span> = match Kind::of(body, &span) {
            Some(Kind::Object) => object_at(body, span.clone())
                .unwrap()
                .fields
                .into_iter()
                .map(|f| f.value)
                .collect(),
            Some(Kind::Array) => array_at(body, span.clone()).unwrap().items,
            _ => continue,
        };
        out.push((span, depth));
        todo.extend(inner.into_iter().map(|s| (s, depth + 1)));
    }
    out
}

/// The index answers for `span` exactly what the scanning readers answer.
fn agrees(doc: &Doc<'_>, span: &Span) -> Result<(), TestCaseError> {
    let body = doc.body();
    prop_assert_eq!(doc.object_at(span.clone()), object_at(body, span.clone()));
    prop_assert_eq!(doc.array_at(span.clone()), array_at(body, span.clone()));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn reads_every_container_as_the_scanning_readers(text in arb_text(), limit in 0usize..6) {
        let body = text.as_bytes();
        let doc = Doc::parse(body).unwrap();
        prop_assert_eq!(doc.root(), validate(body).unwrap());
        prop_assert_eq!(doc.root_object(), parse_object(body));
        let limited = Doc::parse_to_depth(body, limit).unwrap();
        for (span, depth) in containers(body) {
            agrees(&doc, &span)?;
            let empty = body[span.start + 1..span.end - 1].iter().all(u8::is_ascii_whitespace);
            if depth < limit || depth == limit && empty {
                agrees(&limited, &span)?;
            } else {
                let refused = if Kind::of(body, &span) == Some(Kind::Object) {
                    limited.object_at(span.clone()).err()
                } else {
                    limited.array_at(span.clone()).err()
                };
                prop_assert!(
                    matches!(refused, Some(JsonError::NotIndexed { .. })),
                    "{:?} at depth {} of {}: {:?}", span, depth, text, refused
                );
            }
        }
    }

    #[test]
    fn refuses_what_validate_refuses_with_the_same_error(
        tokens in prop::collection::vec(token(), 0..24),
    ) {
        let text = tokens.concat();
        same_verdict(text.as_bytes())?;
    }

    #[test]
    fn refuses_arbitrary_bytes_as_validate(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        same_verdict(&bytes)?;
    }

    #[test]
    fn refuses_damaged_documents_as_validate(
        text in arb_text(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<bool>(),
    ) {
        let mut body = text.into_bytes();
        if !body.is_empty() {
            let at = at.index(body.len());
            if cut {
                body.truncate(at);
            } else {
                body[at] = byte;
            }
        }
        same_verdict(&body)?;
    }
}

/// The index accepts `body` exactly when [`validate`] does, with the same error, and its
/// root object is what [`parse_object`] gives.
fn same_verdict(body: &[u8]) -> Result<(), TestCaseError> {
    let doc = Doc::parse(body);
    prop_assert_eq!(
        doc.as_ref().map(Doc::root).map_err(Clone::clone),
        validate(body)
    );
    for limit in [0, 1, 3] {
        let limited = Doc::parse_to_depth(body, limit);
        prop_assert_eq!(limited.map(|d| d.root()), validate(body));
    }
    match doc {
        Ok(doc) => {
            prop_assert_eq!(doc.root_object(), parse_object(body));
            for (span, _) in containers(body) {
                agrees(&doc, &span)?;
            }
        }
        Err(_) => prop_assert!(parse_object(body).is_err()),
    }
    Ok(())
}

#[test]
fn refuses_spans_that_are_not_recorded_values() {
    let body = br#" {"a": [1, "two", {"b": null}], "c": {}} "#;
    let doc = Doc::parse(body).unwrap();
    let not_indexed = |span: Span| {
        let o = doc.object_at(span.clone());
        let a = doc.array_at(span.clone());
        assert!(
            matches!(o, Err(JsonError::NotIndexed { start, end }) if (start..end) == span),
            "{o:?}"
        );
        assert!(matches!(a, Err(JsonError::NotIndexed { .. })), "{a:?}");
    };
    // The array with the space before it, a key, two items together, the inside of a string,
    // a span starting at the object's start but ending early.
    not_indexed(6..30);
    not_indexed(2..5);
    not_indexed(8..17);
    not_indexed(12..15);
    not_indexed(1..10);
    // Out of the body, or empty.
    for span in [0..100, 5..5] {
        assert!(matches!(
            doc.object_at(span.clone()),
            Err(JsonError::OutOfBounds { .. })
        ));
        assert!(matches!(
            doc.array_at(span),
            Err(JsonError::OutOfBounds { .. })
        ));
    }
    // A recorded value of another kind.
    let a = doc.array_at(7..30).unwrap();
    assert_eq!(a.items, [8..9, 11..16, 18..29]);
    assert!(matches!(
        doc.object_at(7..30),
        Err(JsonError::WrongKind {
            at: 7,
            found: Kind::Array,
            ..
        })
    ));
    assert!(matches!(
        doc.array_at(11..16),
        Err(JsonError::WrongKind {
            found: Kind::String,
            ..
        })
    ));
    assert_eq!(doc.object_at(37..39).unwrap().fields, []);
}

#[test]
fn the_root_object_is_parse_objects() {
    for body in [&b"[1]"[..], b"  \"x\" ", b"{\"a\":1}", b"{}", b" 7"] {
        let doc = Doc::parse(body).unwrap();
        assert_eq!(doc.root_object(), parse_object(body), "{body:?}");
    }
}

#[test]
fn records_one_value_per_node_and_nothing_past_the_depth() {
    let body = br#"{"a":[1,[2,[3,[4]]]],"b":"x"}"#;
    assert_eq!(Doc::parse(body).unwrap().recorded(), 10);
    assert_eq!(Doc::parse_to_depth(body, 0).unwrap().recorded(), 1);
    assert_eq!(Doc::parse_to_depth(body, 1).unwrap().recorded(), 3);
    assert_eq!(Doc::parse_to_depth(body, 2).unwrap().recorded(), 5);
    let wide = format!("[{}0]", "0,".repeat(1000));
    assert_eq!(Doc::parse(wide.as_bytes()).unwrap().recorded(), 1002);
    assert_eq!(
        Doc::parse_to_depth(wide.as_bytes(), 0).unwrap().recorded(),
        1
    );
}

#[test]
fn refuses_deep_nesting_as_validate() {
    let body = format!("{}{}", "[".repeat(600), "]".repeat(600));
    let err = Doc::parse(body.as_bytes()).unwrap_err();
    assert_eq!(Err(err.clone()), validate(body.as_bytes()));
    assert!(matches!(err, JsonError::TooDeep { at: 512, .. }), "{err:?}");
    let body = format!("{}{}", "[".repeat(512), "]".repeat(512));
    assert!(Doc::parse(body.as_bytes()).is_ok());
}
