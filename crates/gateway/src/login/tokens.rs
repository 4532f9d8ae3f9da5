//! A login's token pair as the gateway holds it, with every secret wrapped so that it can never
//! be printed: `Debug` shows `<redacted>`, and there is no `Display`.

use std::time::{Duration, SystemTime};

use context_relay_core::time::{from_unix_millis, to_unix_millis};
use serde::{Deserialize, Serialize};

/// A secret string (an access, refresh or id token). Its `Debug` is `<redacted>`; the value
/// is read with [`expose`](Self::expose) where it is sent, nowhere else.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct Secret(String);

impl Secret {
    pub(crate) fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    /// The value, for the request that sends it.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The tokens of one login, from its credential file, the store or a refresh.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Tokens {
    /// Sent as `Authorization: Bearer`.
    pub(crate) access: Secret,
    /// Single-use: a refresh kills it.
    pub(crate) refresh: Secret,
    /// Codex's OpenID token (kept and written back; never sent upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) id_token: Option<Secret>,
    /// The ChatGPT account id (`chatgpt-account-id`), for Codex logins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) account_id: Option<String>,
    /// When the access token expires, when known (Unix ms in the store).
    #[serde(default, with = "opt_ms", skip_serializing_if = "Option::is_none")]
    pub(crate) expires_at: Option<SystemTime>,
    /// When the pair was obtained (a refresh, or the CLI's `last_refresh`), when known.
    #[serde(default, with = "opt_ms", skip_serializing_if = "Option::is_none")]
    pub(crate) obtained_at: Option<SystemTime>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("expires_at", &self.expires_at)
            .field("obtained_at", &self.obtained_at)
            .finish_non_exhaustive()
    }
}

impl Tokens {
    /// Whether the access token is still good at `now` for at least `margin` more (an unknown
    /// expiry counts as good: the provider's 401 will tell).
    pub(crate) fn fresh(&self, now: SystemTime, margin: Duration) -> bool {
        self.expires_at.is_none_or(|t| t > now + margin)
    }

    /// Whether the access token has expired at `now` (never, when its expiry is unknown).
    pub(crate) fn expired(&self, now: SystemTime) -> bool {
        self.expires_at.is_some_and(|t| t <= now)
    }

    /// Whether `self` was issued after `other`: the later expiry, then the later refresh,
    /// wins (a pair obtained later lives until later). Equal pairs are not newer.
    pub(crate) fn newer_than(&self, other: &Tokens) -> bool {
        if self.refresh == other.refresh && self.access == other.access {
            return false;
        }
        (self.expires_at, self.obtained_at) > (other.expires_at, other.obtained_at)
    }
}

/// `Option<SystemTime>` as Unix milliseconds.
mod opt_ms {
    use super::*;

    pub(super) fn serialize<S: serde::Serializer>(
        t: &Option<SystemTime>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        t.map(to_unix_millis).serialize(s)
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<SystemTime>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(from_unix_millis))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(access: &str, expires: u64) -> Tokens {
        Tokens {
            access: Secret::new(access),
            refresh: Secret::new(format!("rt-{access}")),
            id_token: None,
            account_id: None,
            expires_at: Some(from_unix_millis(expires)),
            obtained_at: None,
        }
    }

    #[test]
    fn secrets_are_never_printed() {
        let mut t = tokens("at-secret", 1_000);
        t.id_token = Some(Secret::new("id-secret"));
        let shown = format!("{t:?} {:?}", t.access);
        assert!(!shown.contains("secret"), "{shown}");
        // The store copy round-trips.
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<Tokens>(&json).unwrap(), t);
    }

    #[test]
    fn freshness_and_order() {
        let now = from_unix_millis(100_000);
        let t = tokens("a", 100_000 + 30_000);
        assert!(t.fresh(now, Duration::from_secs(10)));
        assert!(!t.fresh(now, Duration::from_secs(60)));
        assert!(!t.expired(now));
        assert!(tokens("b", 99_000).expired(now));
        assert!(tokens("b", 200_000).newer_than(&t));
        assert!(!t.newer_than(&tokens("b", 200_000)));
        assert!(!t.newer_than(&t.clone()));
        let mut unknown = t.clone();
        unknown.expires_at = None;
        assert!(unknown.fresh(now, Duration::from_secs(3600)) && !unknown.expired(now));
    }
}
