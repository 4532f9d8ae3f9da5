//! Reading and rewriting the top-level `model` of a JSON request body without touching any
//! other byte.
//!
//! The value is located with the core's raw JSON scanner, so the body is scanned once and never
//! re-serialized: key order, number formatting and unknown fields reach the provider exactly as
//! the client sent them.

use std::ops::Range;

use bytes::{Bytes, BytesMut};
use context_relay_core::json::{self, JsonError, Kind};

/// Why no model could be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum ModelError {
    /// The body is not a JSON object.
    #[error("expected a JSON object as request body, found {0}")]
    NotJson(String),
    /// The object has no `model` key.
    #[error("expected a \"model\" field in the request body, found none")]
    Missing,
    /// `model` is not a non-empty string.
    #[error("expected \"model\" to be a non-empty string, found {0}")]
    NotString(String),
}

/// The `model` value of a body and where its JSON text sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ModelField {
    /// The decoded string.
    pub value: String,
    /// Byte range of the JSON string literal (quotes included).
    pub span: Range<usize>,
}

/// Finds the top-level `model` string of `body`.
///
/// The body is validated whole by the core's raw JSON scanner (several times faster than a
/// serde pass over 100 KB coding-session bodies, which every request pays), so a malformed
/// body is answered here with a 400 instead of reaching a provider.
pub(crate) fn find_model(body: &[u8]) -> Result<ModelField, ModelError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ModelError::NotJson("an empty body".into()));
    }
    let object = json::parse_object(body).map_err(|e| match e {
        JsonError::WrongKind { found, .. } => {
            ModelError::NotJson(format!("{} instead of an object", found.described()))
        }
        e => ModelError::NotJson(format!("invalid JSON ({e})")),
    })?;
    // Duplicate keys are ambiguous: providers disagree on which one wins.
    let index = object
        .unique("model")
        .map_err(|e| ModelError::NotJson(format!("invalid JSON ({e})")))?
        .ok_or(ModelError::Missing)?;
    let span = object.fields[index].value.clone();
    let text = String::from_utf8_lossy(&body[span.clone()]);
    if Kind::of(body, &span) != Some(Kind::String) {
        return Err(ModelError::NotString(truncate(&text)));
    }
    match json::decode_str(body, span.clone()) {
        Ok(v) if !v.trim().is_empty() => Ok(ModelField {
            value: v.into_owned(),
            span,
        }),
        _ => Err(ModelError::NotString(truncate(&text))),
    }
}

/// `body` with the string at `field.span` replaced by the JSON string `model`; `None` when the
/// span does not lie within `body` (a field found in another body).
pub(crate) fn replace_model(body: &Bytes, field: &ModelField, model: &str) -> Option<Bytes> {
    let (head, tail) = (body.get(..field.span.start)?, body.get(field.span.end..)?);
    let literal = serde_json::Value::String(model.to_owned()).to_string();
    let mut out = BytesMut::with_capacity(head.len() + literal.len() + tail.len());
    out.extend_from_slice(head);
    out.extend_from_slice(literal.as_bytes());
    out.extend_from_slice(tail);
    Some(out.freeze())
}

fn truncate(text: &str) -> String {
    let mut s: String = text.chars().take(60).collect();
    if s.len() < text.len() {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn errors() {
        assert_eq!(
            find_model(b""),
            Err(ModelError::NotJson("an empty body".into()))
        );
        assert!(matches!(
            find_model(b"[\"m\"]"),
            Err(ModelError::NotJson(_))
        ));
        assert!(matches!(
            find_model(b"{\"model\":"),
            Err(ModelError::NotJson(_))
        ));
        assert!(matches!(
            find_model(b"{\"a\":1} x"),
            Err(ModelError::NotJson(_))
        ));
        assert_eq!(find_model(b"{\"a\":1}"), Err(ModelError::Missing));
        assert_eq!(
            find_model(b"{\"model\":5}"),
            Err(ModelError::NotString("5".into()))
        );
        assert_eq!(
            find_model(b"{\"model\":\" \"}"),
            Err(ModelError::NotString("\" \"".into()))
        );
        // Duplicate keys are ambiguous: providers disagree on which one wins.
        assert!(matches!(
            find_model(b"{\"model\":\"a\",\"model\":\"b\"}"),
            Err(ModelError::NotJson(_))
        ));
    }

    #[test]
    fn escaped_values_and_nested_models() {
        let body = Bytes::from_static(br#"{"meta":{"model":"x"},"model":"a\/b\u0041"}"#);
        let f = find_model(&body).unwrap();
        assert_eq!(f.value, "a/bA");
        let out = replace_model(&body, &f, "q\"z").unwrap();
        assert_eq!(&out[..], br#"{"meta":{"model":"x"},"model":"q\"z"}"#);
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
            prop_assert_eq!(&f.value, &model);
            let out = replace_model(&body, &f, &new).unwrap();
            let new_lit = serde_json::Value::String(new.clone()).to_string();
            prop_assert_eq!(&out[..f.span.start], &body[..f.span.start]);
            prop_assert_eq!(&out[f.span.start + new_lit.len()..], &body[f.span.end..]);
            let mut a: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let b: serde_json::Value = serde_json::from_slice(&out).unwrap();
            a["model"] = serde_json::Value::String(new);
            prop_assert_eq!(a, b);
        }

        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = find_model(&data);
        }
    }
}

#[cfg(test)]
mod examples {
    #[test]
    fn module_example() {
        use crate::model::{find_model, replace_model};
        use bytes::Bytes;
        let body = Bytes::from_static(br#"{"stream":true, "model" : "codex-relay","n":1.50}"#);
        let field = find_model(&body).unwrap();
        assert_eq!(field.value, "codex-relay");
        let out = replace_model(&body, &field, "gpt-5.5").unwrap();
        assert_eq!(
            &out[..],
            br#"{"stream":true, "model" : "gpt-5.5","n":1.50}"#
        );
    }
}
