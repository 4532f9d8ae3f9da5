//! Reading a provider's "unsupported parameter" 400, and taking that parameter out of a
//! request body, so a summary request can be retried in a form the model accepts.
//!
//! OpenAI-style providers name the parameter in `error.param` (with `code`
//! `unsupported_parameter` or `unsupported_value`) and in the message:
//!
//! - `Unsupported parameter: 'temperature' is not supported with this model.`
//! - `Unsupported parameter: 'max_tokens' is not supported with this model. Use
//!   'max_completion_tokens' instead.`
//! - `Unsupported value: 'temperature' does not support 0.1 with this model. Only the default
//!   (1) value is supported.`
//!
//! [`unsupported_param`] reads either form; [`drop_param`] removes the parameter (a dotted
//! name such as `reasoning.effort` reaches into objects), or renames it when the provider named
//! a replacement.
//!
//! ```
//! use context_relay_core::unsupported::{drop_param, unsupported_param};
//!
//! let body = br#"{"error":{"message":"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.","type":"invalid_request_error","param":"max_tokens","code":"unsupported_parameter"}}"#;
//! let u = unsupported_param(body).unwrap();
//! assert_eq!(u.param, "max_tokens");
//! assert_eq!(u.replacement.as_deref(), Some("max_completion_tokens"));
//!
//! let mut request = serde_json::json!({"model": "o3", "max_tokens": 800});
//! assert!(drop_param(&mut request, &u));
//! assert_eq!(request, serde_json::json!({"model": "o3", "max_completion_tokens": 800}));
//! ```

use serde_json::Value;

/// A parameter a provider refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UnsupportedParam {
    /// The parameter as named by the provider (`temperature`, `reasoning.effort`).
    pub param: String,
    /// The parameter the provider said to use instead, when it named one.
    pub replacement: Option<String>,
}

/// Longest parameter name accepted from an error body.
const MAX_PARAM_LEN: usize = 64;

/// The parameter a 400 body says is unsupported, or `None` when the body says no such thing.
pub fn unsupported_param(body: &[u8]) -> Option<UnsupportedParam> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let err = v.get("error").unwrap_or(&v);
    // The ChatGPT backend answers `{"detail": "Unsupported parameter: max_output_tokens"}`.
    let message = err
        .get("message")
        .or_else(|| v.get("detail"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let code = err.get("code").and_then(Value::as_str).unwrap_or("");
    let from_message = quoted_after(message, "Unsupported parameter: ")
        .or_else(|| quoted_after(message, "Unsupported value: "));
    let unsupported_code = matches!(code, "unsupported_parameter" | "unsupported_value");
    let param = match err.get("param").and_then(Value::as_str) {
        Some(p) if unsupported_code || from_message.is_some() => p.to_owned(),
        _ => from_message?.to_owned(),
    };
    if !valid_name(&param) {
        return None;
    }
    let replacement = message
        .find("Use '")
        .and_then(|i| quoted_after(&message[i..], "Use "))
        .filter(|r| valid_name(r) && *r != param)
        .map(str::to_owned);
    Some(UnsupportedParam { param, replacement })
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_PARAM_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
}

/// The `'quoted'` (or bare) word right after `prefix` in `text`.
fn quoted_after<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = &text[text.find(prefix)? + prefix.len()..];
    match rest.strip_prefix('\'') {
        Some(quoted) => Some(&quoted[..quoted.find('\'')?]),
        None => {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
                .unwrap_or(rest.len());
            Some(rest[..end].trim_end_matches('.'))
        }
    }
}

/// Removes (or renames to its replacement) `u.param` in `body`; whether anything changed.
pub fn drop_param(body: &mut Value, u: &UnsupportedParam) -> bool {
    let mut path: Vec<&str> = u.param.split('.').collect();
    let Some(last) = path.pop() else { return false };
    let mut target = &mut *body;
    for key in path {
        match target.get_mut(key) {
            Some(next) => target = next,
            None => return false,
        }
    }
    let Some(obj) = target.as_object_mut() else {
        return false;
    };
    let Some(value) = obj.remove(last) else {
        return false;
    };
    if let Some(r) = &u.replacement
        && !r.contains('.')
        && !obj.contains_key(r)
    {
        obj.insert(r.clone(), value);
    }
    true
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn real_error_bodies() {
        let t = br#"{"error":{"message":"Unsupported parameter: 'temperature' is not supported with this model.","type":"invalid_request_error","param":"temperature","code":"unsupported_parameter"}}"#;
        assert_eq!(
            unsupported_param(t),
            Some(UnsupportedParam {
                param: "temperature".into(),
                replacement: None
            })
        );
        let v = br#"{"error":{"message":"Unsupported value: 'temperature' does not support 0.1 with this model. Only the default (1) value is supported.","type":"invalid_request_error","param":"temperature","code":"unsupported_value"}}"#;
        assert_eq!(
            unsupported_param(v).map(|u| u.param).as_deref(),
            Some("temperature")
        );
        // The message alone is enough.
        let m = br#"{"error":{"message":"Unsupported parameter: 'top_p' is not supported with this model."}}"#;
        assert_eq!(
            unsupported_param(m).map(|u| u.param).as_deref(),
            Some("top_p")
        );
        let d = br#"{"detail":"Unsupported parameter: max_output_tokens"}"#;
        assert_eq!(
            unsupported_param(d).map(|u| u.param).as_deref(),
            Some("max_output_tokens")
        );
    }

    #[test]
    fn other_errors_name_nothing() {
        for body in [
            &br#"{"error":{"message":"Invalid 'input': empty.","param":"input","code":"invalid_value"}}"#[..],
            br#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}"#,
            b"not json",
            br#"{"error":{"message":"Unsupported parameter: 'a b' x","code":"unsupported_parameter"}}"#,
        ] {
            assert_eq!(unsupported_param(body), None, "{}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn dropping() {
        let mut b = json!({"temperature": 0.2, "reasoning": {"effort": "low"}});
        let u = |p: &str| UnsupportedParam {
            param: p.into(),
            replacement: None,
        };
        assert!(drop_param(&mut b, &u("temperature")));
        assert!(drop_param(&mut b, &u("reasoning.effort")));
        assert!(!drop_param(&mut b, &u("temperature")));
        assert!(!drop_param(&mut b, &u("missing.deep")));
        assert_eq!(b, json!({"reasoning": {}}));
    }
}
