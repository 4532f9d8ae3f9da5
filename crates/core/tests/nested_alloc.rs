//! Hostile nesting costs no memory: the readers of untrusted bodies keep a few KiB whatever the
//! nesting of a 4 MB body (it used to be gigabytes: one scanner stack per level, each as deep
//! as the body).
//!
//! A counting allocator (test-only, `support`) tracks the peak of the bytes live on the thread
//! that asked for counting.

mod support;

use context_relay_core::ApiShape;
use context_relay_core::json;
use context_relay_core::portable::make_portable;
use context_relay_core::session::{SessionSources, fingerprint, session_id};
use http::HeaderMap;
use support::peak_of;

const SIZE: usize = 4 << 20;

/// `{"model":"m",<prefix>` + SIZE bytes of nested arrays + `<suffix>}`.
fn nested(prefix: &str, suffix: &str) -> Vec<u8> {
    let depth = SIZE / 2;
    let mut body = format!(r#"{{"model":"m",{prefix}"#).into_bytes();
    body.extend(std::iter::repeat_n(b'[', depth));
    body.extend(std::iter::repeat_n(b']', depth));
    body.extend_from_slice(suffix.as_bytes());
    body.push(b'}');
    body
}

const CEILING: usize = 64 << 10;

#[test]
fn nested_arrays_anywhere_cost_no_memory() {
    let shapes = [
        nested(r#""messages":[{"role":"user","content":"#, "}]"),
        nested(r#""messages":[{"role":"system","content":"#, "}]"),
        nested(r#""instructions":"#, r#","input":"hi""#),
        nested(
            r#""system":"#,
            r#","messages":[{"role":"user","content":"hi"}]"#,
        ),
        nested(r#""contents":[{"role":"user","parts":"#, "}]"),
        nested(
            r#""input":[{"role":"user","content":[{"type":"input_text","text":"#,
            "}]}]",
        ),
        nested(
            r#""messages":[{"role":"user","content":"hi","tools":"#,
            "}]",
        ),
    ];
    for body in &shapes {
        let shown = String::from_utf8_lossy(&body[..60]);
        let (fp, peak) = peak_of(|| fingerprint(body));
        assert!(
            peak <= CEILING,
            "fingerprint of {shown}… peaked at {peak} bytes"
        );
        assert_eq!(fp, None, "{shown}");
        let (_, peak) =
            peak_of(|| session_id(&HeaderMap::new(), Some(body), &SessionSources::default()));
        assert!(
            peak <= CEILING,
            "session id of {shown}… peaked at {peak} bytes"
        );
        let (valid, peak) = peak_of(|| json::validate(body));
        assert!(
            matches!(valid, Err(json::JsonError::TooDeep { .. })),
            "{valid:?}"
        );
        assert!(
            peak <= CEILING,
            "validating {shown}… peaked at {peak} bytes"
        );
        for shape in [
            ApiShape::Responses,
            ApiShape::AnthropicMessages,
            ApiShape::ChatCompletions,
            ApiShape::Gemini,
        ] {
            let (_, peak) = peak_of(|| make_portable(shape, body));
            assert!(
                peak <= CEILING,
                "{shape:?} scrub of {shown}… peaked at {peak} bytes"
            );
        }
    }
}

/// Nesting within the limit still reads: a text 100 arrays deep has its fingerprint.
#[test]
fn moderate_nesting_still_has_a_fingerprint() {
    let body = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":{}"hi"{}}}]}}"#,
        "[".repeat(100),
        "]".repeat(100)
    );
    let (fp, peak) = peak_of(|| fingerprint(body.as_bytes()));
    assert!(fp.is_some());
    assert!(peak <= CEILING, "{peak}");
}

/// A wide body costs memory in proportion to its size, and only within the depth the editors
/// read: the index records 20 bytes per value (twice that at most while its list grows), and a
/// body holds at most one value per two bytes.
#[test]
fn wide_bodies_cost_memory_in_proportion() {
    let values = format!("{}0", "0,".repeat(1 << 18));
    let shallow = format!(r#"{{"model":"m","input":[{values}]}}"#);
    let (doc, peak) = peak_of(|| json::Doc::parse(shallow.as_bytes()).map(|d| d.recorded()));
    assert_eq!(doc, Ok((1 << 18) + 4));
    assert!(
        peak <= 24 * shallow.len(),
        "indexing {} bytes peaked at {peak} bytes",
        shallow.len()
    );
    // Past the editors' depth nothing is recorded: the same values six levels down cost no
    // memory to a rewrite.
    let deep =
        format!(r#"{{"model":"m","messages":[],"contents":[],"tools":[[[[[[{values}]]]]]]}}"#);
    for shape in [
        ApiShape::Responses,
        ApiShape::AnthropicMessages,
        ApiShape::ChatCompletions,
        ApiShape::Gemini,
    ] {
        let (_, peak) = peak_of(|| make_portable(shape, deep.as_bytes()));
        assert!(peak <= CEILING, "{shape:?} scrub peaked at {peak} bytes");
    }
    let (doc, peak) = peak_of(|| json::Doc::parse(deep.as_bytes()).map(|d| d.recorded()));
    assert!(doc.is_ok_and(|n| n > 1 << 18));
    assert!(peak > CEILING && peak <= 24 * deep.len(), "{peak}");
}
