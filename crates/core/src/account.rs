//! The one reference to a provider account: which account served a request, wrote a handoff,
//! or holds a session.
//!
//! Every place that asks "which account" (the request and response extensions, a session's
//! affinity, a stored handoff's writer, an account pool's binding) uses [`ResolvedAccount`] and
//! compares with `==`. Provider names are case-insensitive configuration identifiers, so the
//! provider is lower-cased (ASCII) once, when the reference is built; the account id is kept
//! as given (ids are opaque and case-sensitive).
//!
//! ```
//! use context_relay_core::ResolvedAccount;
//!
//! let a = ResolvedAccount::new("Codex", "acct-A");
//! assert_eq!(&**a.provider(), "codex");
//! assert_eq!(a, ResolvedAccount::new("codex", "acct-A"));
//! assert_ne!(a, ResolvedAccount::new("codex", "acct-a"));
//! assert_eq!(a.to_string(), "codex/acct-A");
//! ```

use std::fmt;
use std::sync::Arc;

/// A provider account: the provider's name (lower case) and the account id within it.
///
/// Built only with [`ResolvedAccount::new`], which lower-cases the provider, so that two
/// references to one account are always `==` and hash alike; read it with
/// [`provider`](Self::provider) and [`account`](Self::account).
///
/// A reference cannot be built field by field (that could keep an upper-case provider):
///
/// ```compile_fail
/// use context_relay_core::ResolvedAccount;
///
/// let a = ResolvedAccount { provider: "Codex".into(), account: "acct-a".into() };
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResolvedAccount {
    /// Provider name, e.g. `codex`, `anthropic`: always lower case.
    provider: Arc<str>,
    /// Account id within the provider, as configured (case-sensitive).
    account: Arc<str>,
}

impl ResolvedAccount {
    /// A reference to `account` of `provider`; the provider is lower-cased (ASCII).
    ///
    /// An already lower-case `Arc<str>` provider is kept as is (no allocation), so building a
    /// reference per request from configured names costs two reference-count increments.
    pub fn new(provider: impl Into<Arc<str>>, account: impl Into<Arc<str>>) -> Self {
        Self {
            provider: lower(provider.into()),
            account: account.into(),
        }
    }

    /// The provider name (lower case).
    pub fn provider(&self) -> &Arc<str> {
        &self.provider
    }

    /// The account id within the provider.
    pub fn account(&self) -> &Arc<str> {
        &self.account
    }

    /// Whether this is `account` of `provider`, the provider compared case-insensitively:
    /// the same answer as `*self == ResolvedAccount::new(provider, account)`, without
    /// building one.
    ///
    /// ```
    /// use context_relay_core::ResolvedAccount;
    ///
    /// let a = ResolvedAccount::new("codex", "alice");
    /// assert!(a.is("CODEX", "alice"));
    /// assert!(!a.is("codex", "Alice"));
    /// ```
    pub fn is(&self, provider: &str, account: &str) -> bool {
        *self.account == *account && self.provider.eq_ignore_ascii_case(provider)
    }
}

impl fmt::Display for ResolvedAccount {
    /// `provider/account`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.provider, self.account)
    }
}

/// `name` with ASCII letters lower-cased, reusing it when it has none in upper case.
fn lower(name: Arc<str>) -> Arc<str> {
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        Arc::from(name.to_ascii_lowercase())
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::hash_map::DefaultHasher;
    use std::hash::{Hash, Hasher};

    fn hash(a: &ResolvedAccount) -> u64 {
        let mut h = DefaultHasher::new();
        a.hash(&mut h);
        h.finish()
    }

    #[test]
    fn a_lower_case_provider_is_not_copied() {
        let provider: Arc<str> = Arc::from("codex");
        let a = ResolvedAccount::new(provider.clone(), "x");
        assert!(Arc::ptr_eq(&a.provider, &provider));
        let b = ResolvedAccount::new(Arc::<str>::from("Codex"), "x");
        assert_eq!(&*b.provider, "codex");
    }

    proptest! {
        #[test]
        fn provider_case_never_matters(p in "[a-zA-Z0-9_-]{0,12}", acct in ".{0,12}") {
            let upper = ResolvedAccount::new(p.to_ascii_uppercase(), acct.as_str());
            let lower = ResolvedAccount::new(p.to_ascii_lowercase(), acct.as_str());
            prop_assert_eq!(&upper, &lower);
            prop_assert_eq!(hash(&upper), hash(&lower));
            prop_assert!(upper.is(&p, &acct));
            prop_assert_eq!(upper.to_string(), format!("{}/{}", p.to_ascii_lowercase(), acct));
        }

        #[test]
        fn is_agrees_with_eq(p in "[a-cA-C]{0,3}", a in "[a-cA-C]{0,3}", q in "[a-cA-C]{0,3}", b in "[a-cA-C]{0,3}") {
            let x = ResolvedAccount::new(p.as_str(), a.as_str());
            prop_assert_eq!(x.is(&q, &b), x == ResolvedAccount::new(q.as_str(), b.as_str()));
        }
    }
}
