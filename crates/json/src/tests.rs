use super::*;
use proptest::prelude::*;

fn err(body: &str) -> JsonError {
    validate(body.as_bytes()).expect_err(body)
}

#[test]
fn accepts_well_formed_documents() {
    for ok in [
        "{}",
        " [ ] ",
        "0",
        "-0.5e+10",
        "1E-2",
        r#""a\"\\\/\b\f\n\r\t\u00e9\uD83D\uDE00""#,
        "\"caf\u{e9} \u{1f600}\"",
        r#"{"a":[1,{"b":null},true,false,"x"],"c":{}}"#,
        "\t\n\r {\"k\" :\n[ 1 , 2 ]\n}\n",
    ] {
        assert!(validate(ok.as_bytes()).is_ok(), "{ok}");
    }
}

#[test]
fn typed_errors() {
    assert!(matches!(
        err(r#"{"a":"abc"#),
        JsonError::UnterminatedString { start: 5 }
    ));
    assert!(matches!(
        err(r#""ab\"#),
        JsonError::UnterminatedString { start: 0 }
    ));
    assert!(matches!(
        err(r#"{"a":[1,2}"#),
        JsonError::Unexpected {
            at: 9,
            found: b'}',
            ..
        }
    ));
    assert!(matches!(
        err(r#"{"a":[1,2]"#),
        JsonError::Unclosed {
            open_at: 0,
            open: b'{'
        }
    ));
    assert!(matches!(
        err("[[1]"),
        JsonError::Unclosed {
            open_at: 0,
            open: b'['
        }
    ));
    assert!(matches!(err("[1,"), JsonError::Unclosed { open_at: 0, .. }));
    assert!(matches!(
        err(r#"{"a":1} x"#),
        JsonError::TrailingData { at: 8 }
    ));
    assert!(matches!(err("{} {}"), JsonError::TrailingData { at: 3 }));
    assert!(matches!(err("[tru]"), JsonError::BadLiteral { at: 1 }));
    assert!(matches!(err("nul"), JsonError::BadLiteral { at: 0 }));
    assert!(matches!(
        err("[truex]"),
        JsonError::Unexpected { at: 5, .. }
    ));
    assert!(matches!(
        err("\"a\u{1}b\""),
        JsonError::ControlCharacter { at: 2, byte: 1 }
    ));
    assert!(matches!(
        err("\"a\nb\""),
        JsonError::ControlCharacter { at: 2, byte: b'\n' }
    ));
    assert!(matches!(
        err(r#""a\x""#),
        JsonError::InvalidEscape { at: 2 }
    ));
    assert!(matches!(
        err(r#""\u12G4""#),
        JsonError::InvalidEscape { at: 1 }
    ));
    for bad in ["01", "1.", "-", "1e", "1e+", ".5", "+1", "-a"] {
        assert!(
            matches!(
                err(bad),
                JsonError::BadNumber { .. }
                    | JsonError::TrailingData { .. }
                    | JsonError::Unexpected { .. }
            ),
            "{bad}"
        );
    }
    assert!(matches!(err("01"), JsonError::TrailingData { at: 1 }));
    assert!(matches!(err("1."), JsonError::BadNumber { at: 0 }));
    assert!(matches!(err(""), JsonError::UnexpectedEnd { at: 0, .. }));
    assert!(matches!(err("   "), JsonError::UnexpectedEnd { at: 3, .. }));
    assert!(matches!(
        err(r#"{"a" 1}"#),
        JsonError::Unexpected {
            at: 5,
            found: b'1',
            ..
        }
    ));
    assert!(matches!(
        err(r#"{"a":1,}"#),
        JsonError::Unexpected {
            at: 7,
            found: b'}',
            ..
        }
    ));
    assert!(matches!(
        err(r#"{a:1}"#),
        JsonError::Unexpected {
            at: 1,
            found: b'a',
            ..
        }
    ));
    assert!(matches!(err("[1 2]"), JsonError::Unexpected { at: 3, .. }));
    assert!(matches!(
        validate(b"\"\xff\"").unwrap_err(),
        JsonError::InvalidUtf8 { at: 1 }
    ));
    assert!(matches!(
        validate(b"\"ab\xe2\x82\"").unwrap_err(),
        JsonError::InvalidUtf8 { at: 3 }
    ));
    // Error messages say what was expected and what was found.
    assert_eq!(
        err("[1 2]").to_string(),
        "expected `,` or `]` at byte 3, found `2`"
    );
}

#[test]
fn nesting_is_bounded_and_never_overflows_the_stack() {
    let nested = |depth: usize| format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
    assert!(validate(nested(MAX_NESTING).as_bytes()).is_ok());
    assert_eq!(
        validate(nested(MAX_NESTING + 1).as_bytes()),
        Err(JsonError::TooDeep {
            at: MAX_NESTING,
            limit: MAX_NESTING
        })
    );
    assert!(matches!(
        err(&"[".repeat(200_000)),
        JsonError::TooDeep { .. }
    ));
    assert!(matches!(
        validate(nested(200_000).as_bytes()),
        Err(JsonError::TooDeep { .. })
    ));
    let object = |depth: usize| {
        format!(
            r#"{{"a":{}1{}}}"#,
            r#"{"b":"#.repeat(depth),
            "}".repeat(depth)
        )
    };
    assert!(parse_object(object(MAX_NESTING - 1).as_bytes()).is_ok());
    assert!(matches!(
        parse_object(object(50_000).as_bytes()),
        Err(JsonError::TooDeep { .. })
    ));
}

#[test]
fn strings_are_gathered_in_one_pass() {
    let body = br#"{"content":[{"text":"a","x":{"text":"no"}},"b\n",[["c"]],{"parts":[{"text":"d"}]},1,null]}"#;
    let mut out = Vec::new();
    let follow = |k: &str| matches!(k, "text" | "content" | "parts");
    let end = strings(body, 0, 8, follow, &mut out).unwrap();
    assert_eq!(end, body.len());
    let found: Vec<&[u8]> = out.iter().map(|s| &body[s.clone()]).collect();
    assert_eq!(found, [&b"a"[..], br"b\n", b"c", b"d"]);
    // Depth: the string inside three followed containers needs a limit of 3.
    let mut out = Vec::new();
    assert!(strings(br#"[[["x"]]]"#, 0, 3, follow, &mut out).is_ok());
    assert_eq!(
        strings(br#"[[["x"]]]"#, 0, 2, follow, &mut out),
        Err(JsonError::TooDeep { at: 3, limit: 2 })
    );
    // Malformed input is refused as the full scan refuses it.
    for bad in [
        &br#"[1,]"#[..],
        br#"{"text":"a",}"#,
        br#"{"text" "a"}"#,
        br#"["a""#,
        br#"{"x":[1 2],"text":"a"}"#,
        b"[\"\xff\"]",
        br#"{"text":["a"}"#,
    ] {
        assert!(
            strings(bad, 0, 8, follow, &mut Vec::new()).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
        assert!(validate(bad).is_err());
    }
}

#[test]
fn object_fields_and_spans() {
    let body = br#" { "a" : 1 , "b\u0063" :{"x":[]},"a":"z" } "#;
    let o = parse_object(body).unwrap();
    assert_eq!(o.span, 1..body.len() - 1);
    let keys: Vec<&str> = o.fields.iter().map(|f| f.key.as_ref()).collect();
    assert_eq!(keys, ["a", "bc", "a"]);
    assert_eq!(&body[o.fields[0].key_span.clone()], br#""a""#);
    assert_eq!(&body[o.fields[1].value.clone()], br#"{"x":[]}"#);
    assert_eq!(&body[o.get("a").unwrap().value.clone()], br#""z""#);
    assert_eq!(o.unique("a"), Err(DuplicateKey { key: "a", count: 2 }));
    assert_eq!(o.unique("bc"), Ok(Some(1)));
    assert_eq!(o.unique("q"), Ok(None));
    let inner = object_at(body, o.fields[1].value.clone()).unwrap();
    assert_eq!(inner.fields[0].key, "x");
    assert_eq!(
        array_at(body, inner.fields[0].value.clone()).unwrap().items,
        Vec::<Span>::new()
    );
}

#[test]
fn kinds_and_wrong_kinds() {
    assert!(matches!(
        parse_object(b" [1] ").unwrap_err(),
        JsonError::WrongKind {
            found: Kind::Array,
            ..
        }
    ));
    assert!(matches!(
        parse_object(b"\"s\"").unwrap_err(),
        JsonError::WrongKind {
            found: Kind::String,
            ..
        }
    ));
    // Not JSON at all stays a syntax error, not a kind error.
    assert!(matches!(
        parse_object(b"[1,"),
        Err(JsonError::Unclosed { .. })
    ));
    assert!(matches!(
        parse_object(b"hello"),
        Err(JsonError::Unexpected { .. })
    ));
    let body = br#"[1,"a",{}]"#;
    assert!(matches!(
        object_at(body, 1..2),
        Err(JsonError::WrongKind {
            found: Kind::Number,
            ..
        })
    ));
    assert!(matches!(
        array_at(body, 0..4),
        Err(JsonError::UnterminatedString { start: 3 })
    ));
    assert!(matches!(
        array_at(body, 0..99),
        Err(JsonError::OutOfBounds { .. })
    ));
    assert!(object_at(body, 7..9).is_ok());
}

#[test]
fn decoding_strings() {
    let d = |s: &str| decode_str(s.as_bytes(), 0..s.len()).unwrap().into_owned();
    assert_eq!(d(r#""plain""#), "plain");
    assert!(matches!(
        decode_str(br#""plain""#, 0..7).unwrap(),
        Cow::Borrowed(_)
    ));
    assert_eq!(d(r#""a\"b\\c\/\b\f\n\r\t""#), "a\"b\\c/\u{8}\u{c}\n\r\t");
    assert_eq!(d(r#""\u00e9\uD83D\uDE00x""#), "\u{e9}\u{1f600}x");
    assert_eq!(d(r#""\uD83Dx\uDE00""#), "\u{fffd}x\u{fffd}");
    assert!(decode_str(br#""a"#, 0..2).is_err());
    assert!(decode_str(b"12", 0..2).is_err());
}

/// RFC 8259's grammar sets no range on numbers; `serde_json` refuses one beyond `f64`'s. This
/// crate checks the grammar: the provider the body goes to decides what a number means.
#[test]
fn numbers_of_any_magnitude_are_json() {
    for doc in [
        "-0.5e311",
        "1e400",
        "[1E+99999, -0.0e-99999]",
        r#"{"t": 123456789e999}"#,
    ] {
        assert!(
            serde_json::from_str::<serde_json::Value>(doc).is_err(),
            "{doc}"
        );
        assert_eq!(validate(doc.as_bytes()), Ok(0..doc.len()), "{doc}");
    }
    let object = br#"{"t": 1e400}"#;
    assert_eq!(parse_object(object).unwrap().fields.len(), 1);
    for bad in ["1e", "-e5", "1e+", ".5e400"] {
        assert!(validate(bad.as_bytes()).is_err(), "{bad}");
    }
}

/// Fragments that combine into well-formed and malformed documents.
pub(crate) fn token() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        " ",
        "\n",
        r#""k""#,
        r#""a\"b""#,
        r#""\u00e9""#,
        r#""\x""#,
        "\"\u{e9}\"",
        "\"raw\ttab\"",
        "1",
        "-0.5e3",
        "01",
        "1.",
        "true",
        "nul",
        "null",
        "\"",
        "\\",
    ])
}

proptest! {
    #[test]
    fn agrees_with_serde_json(tokens in prop::collection::vec(token(), 0..24)) {
        let doc = tokens.concat();
        let theirs = serde_json::from_str::<serde_json::Value>(&doc);
        // serde_json refuses a number beyond `f64`'s range (`-0.5e311`), which the grammar
        // allows: it stops there, so its verdict on the rest is unknown
        // (`numbers_of_any_magnitude_are_json` holds what this crate answers).
        if theirs.as_ref().is_err_and(|e| e.to_string().starts_with("number out of range")) {
            return Ok(());
        }
        let ours = validate(doc.as_bytes()).is_ok();
        prop_assert_eq!(ours, theirs.is_ok(), "{}", doc);
        let ours = parse_object(doc.as_bytes()).is_ok();
        let theirs = theirs.is_ok_and(|v| v.is_object());
        prop_assert_eq!(ours, theirs, "{}", doc);
    }

    #[test]
    fn never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = validate(&bytes);
        if let Ok(o) = parse_object(&bytes) {
            for f in &o.fields {
                let _ = object_at(&bytes, f.value.clone());
                let _ = array_at(&bytes, f.value.clone());
                let _ = decode_str(&bytes, f.value.clone());
            }
        }
    }

    #[test]
    fn serde_values_scan_with_exact_spans(v in crate::tests::arb_value()) {
        let doc = serde_json::to_vec_pretty(&serde_json::json!({"v": v, "w": [v, 1]})).unwrap();
        let o = parse_object(&doc).unwrap();
        let got: serde_json::Value = serde_json::from_slice(&doc[o.fields[0].value.clone()]).unwrap();
        prop_assert_eq!(got, v);
    }
}

pub(crate) fn arb_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        // Quarters are exact in binary, so they survive serde_json's float formatting.
        any::<i32>().prop_map(|i| Value::from(f64::from(i) / 4.0)),
        ".*".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

#[test]
fn string_scan_finds_every_position_in_both_modes() {
    // With a newline outside the string the scanner cannot take the control-free path.
    for outside in ["", "\n"] {
        for len in 0..80 {
            for (special, want_ok) in [
                ("\\n", true),
                ("\\\"", true),
                ("\\\\", true),
                ("\\\\\\\\\\\"", true),
                ("\\u00e9", true),
                ("\u{1}", false),
                ("\\q", false),
                ("\\u12x", false),
            ] {
                for tail in ["b".repeat(80 - len), String::new(), "b".repeat(200)] {
                    let s = format!("[{outside}\"{}{special}{tail}\"]", "a".repeat(len));
                    assert_eq!(validate(s.as_bytes()).is_ok(), want_ok, "{s:?}");
                    assert_eq!(
                        serde_json::from_str::<serde_json::Value>(&s).is_ok(),
                        want_ok
                    );
                }
            }
            let s = format!("[{outside}\"{}\", 1]", "é".repeat(len));
            let o = validate(s.as_bytes()).unwrap();
            assert_eq!(o, 0..s.len());
            let cut = format!("[{outside}\"{}", "x".repeat(len));
            assert!(matches!(
                validate(cut.as_bytes()),
                Err(JsonError::UnterminatedString { .. })
            ));
        }
    }
}
