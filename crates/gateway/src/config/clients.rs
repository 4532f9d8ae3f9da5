//! `[[clients]]`: who may use the gateway, with which key, and for which combos.
//!
//! ```toml
//! [[clients]]
//! name = "alice"              # the tenant of her sessions (admin API, logs)
//! key_env = "ALICE_KEY"       # or key = "…", or key_sha256 = "<64 hex>"
//! combos = ["codex-relay"]    # optional allow-list; without it every combo and target
//! ```

use http::HeaderValue;
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// `[[clients]]`: one client allowed to call the gateway.
///
/// Exactly one of `key`, `key_env` or `key_sha256` is given; after loading, `key` holds the
/// value of `key_env`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// Unique name: the tenant of this client's sessions.
    pub name: String,
    /// The key itself.
    #[serde(default)]
    pub key: Option<String>,
    /// The environment variable holding the key.
    #[serde(default)]
    pub key_env: Option<String>,
    /// The SHA-256 of the key, 64 hex digits (the key then appears nowhere in the file).
    #[serde(default)]
    pub key_sha256: Option<String>,
    /// Combos this client may ask for; `None` allows every combo and `provider/model`
    /// target. With a list, direct `provider/model` targets are refused too.
    #[serde(default)]
    pub combos: Option<Vec<String>>,
}

impl ClientConfig {
    /// The SHA-256 of the client's key (`None` before the key is resolved, or for a malformed
    /// `key_sha256`, which loading rejects).
    pub fn key_digest(&self) -> Option<[u8; 32]> {
        if let Some(key) = &self.key {
            return Some(Sha256::digest(key.as_bytes()).into());
        }
        parse_hex32(self.key_sha256.as_deref()?)
    }
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("name", &self.name)
            .field("key", &self.key.as_ref().map(|_| "<redacted>"))
            .field("key_env", &self.key_env)
            .field(
                "key_sha256",
                &self.key_sha256.as_ref().map(|_| "<redacted>"),
            )
            .field("combos", &self.combos)
            .finish()
    }
}

/// What keeps `key` from being a credential, if anything (the key itself is never named): it
/// must be a header value (no control character) that neither starts nor ends with a space or
/// a tab. A header value may, but the credential read from it never does (it is trimmed), so
/// such a key could never match: refused at load, not at every request.
pub(crate) fn key_fault(key: &str) -> Option<&'static str> {
    if key.is_empty() {
        Some("an empty key")
    } else if key.trim() != key {
        Some("a key with a space or a tab at either end")
    } else if HeaderValue::from_str(key).is_err() {
        Some("a key with a control character")
    } else {
        None
    }
}

/// What the key's rules are, as an error message says them ([`key_fault`]).
pub(crate) const KEY_RULES: &str =
    "a non-empty key without control characters, and without a space or a tab at either end";

/// 64 hex digits (either case) as 32 bytes.
pub(crate) fn parse_hex32(s: &str) -> Option<[u8; 32]> {
    let s = s.trim().as_bytes();
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in s.chunks_exact(2).enumerate() {
        let hi = char::from(pair[0]).to_digit(16)?;
        let lo = char::from(pair[1]).to_digit(16)?;
        out[i] = u8::try_from(hi * 16 + lo).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_agree_across_key_forms() {
        let plain = ClientConfig {
            name: "a".into(),
            key: Some("k1".into()),
            key_env: None,
            key_sha256: None,
            combos: None,
        };
        let hex: String = Sha256::digest(b"k1")
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect();
        let hashed = ClientConfig {
            key: None,
            key_sha256: Some(hex),
            ..plain.clone()
        };
        assert_eq!(plain.key_digest(), hashed.key_digest());
        assert!(plain.key_digest().is_some());
        assert_eq!(parse_hex32("zz"), None);
        assert_eq!(parse_hex32(&"g".repeat(64)), None);
        assert!(!format!("{plain:?}").contains("k1"));
    }
}
