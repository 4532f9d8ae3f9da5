//! The credential of one upstream attempt, as the headers it adds: an API key in the header its
//! provider's `auth` names, or a login's access token with what its backend wants beside it
//! (`chatgpt-account-id` for the ChatGPT Codex backend; the `oauth-2025-04-20` beta added to
//! the client's `anthropic-beta` for a Claude login).
//!
//! Every value is marked sensitive, and `Debug` shows header names only.

use http::{HeaderMap, HeaderName, HeaderValue};

/// The beta a Claude OAuth access token needs on the Messages API.
pub(crate) const CLAUDE_OAUTH_BETA: &str = "oauth-2025-04-20";

static ANTHROPIC_BETA: HeaderName = HeaderName::from_static("anthropic-beta");

/// The headers one attempt carries for its account (see the module docs).
#[derive(Clone)]
pub(crate) struct Credential {
    main: (HeaderName, HeaderValue),
    extra: Option<(HeaderName, HeaderValue)>,
    beta: Option<&'static str>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("header", &self.main.0)
            .field("extra", &self.extra.as_ref().map(|(n, _)| n))
            .field("beta", &self.beta)
            .finish()
    }
}

fn sensitive(mut v: HeaderValue) -> HeaderValue {
    v.set_sensitive(true);
    v
}

impl Credential {
    /// `name: value` (an API key, or `Bearer <token>`).
    pub(crate) fn header(name: HeaderName, value: HeaderValue) -> Self {
        Self {
            main: (name, sensitive(value)),
            extra: None,
            beta: None,
        }
    }

    /// Whether `other` sends the same headers.
    pub(crate) fn same(&self, other: &Credential) -> bool {
        self.main == other.main && self.extra == other.extra && self.beta == other.beta
    }

    /// `Authorization: Bearer <token>`; `None` when the token cannot be a header value.
    pub(crate) fn bearer(token: &str) -> Option<Self> {
        let value = HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
        Some(Self::header(http::header::AUTHORIZATION, value))
    }

    /// The same with `name: value` beside it.
    pub(crate) fn with(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.extra = Some((name, sensitive(value)));
        self
    }

    /// The same with `beta` added to the request's `anthropic-beta`.
    pub(crate) fn with_beta(mut self, beta: &'static str) -> Self {
        self.beta = Some(beta);
        self
    }

    /// The header that carries the credential itself.
    #[cfg(test)]
    pub(crate) fn main(&self) -> &(HeaderName, HeaderValue) {
        &self.main
    }

    /// Whether [`apply`](Self::apply) sets `name` (with `insert`, which replaces any value
    /// of it in place): the upstream call then need not remove the client's first.
    pub(crate) fn replaces(&self, name: &HeaderName) -> bool {
        *name == self.main.0 || self.extra.as_ref().is_some_and(|(n, _)| n == name)
    }

    /// Adds the credential to `headers` (from which the client's own credentials are gone, but
    /// for those of the names it sets, which it replaces).
    pub(crate) fn apply(self, headers: &mut HeaderMap) {
        headers.insert(self.main.0, self.main.1);
        if let Some((name, value)) = self.extra {
            headers.insert(name, value);
        }
        if let Some(beta) = self.beta {
            add_beta(headers, beta);
        }
    }
}

/// Adds `beta` to the `anthropic-beta` list (one header, comma-separated, the client's betas
/// first), unless it is listed already; the client's lines become one header either way.
fn add_beta(headers: &mut HeaderMap, beta: &str) {
    let listed: Vec<&str> = headers
        .get_all(&ANTHROPIC_BETA)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .collect();
    let has = listed.contains(&beta);
    if has && headers.get_all(&ANTHROPIC_BETA).iter().nth(1).is_none() {
        return;
    }
    let mut joined = listed.join(",");
    if !has {
        if !joined.is_empty() {
            joined.push(',');
        }
        joined.push_str(beta);
    }
    if let Ok(v) = HeaderValue::from_str(&joined) {
        headers.insert(ANTHROPIC_BETA.clone(), v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn betas_are_merged_once() {
        let c = Credential::bearer("sk-ant-oat01-x")
            .unwrap()
            .with_beta(CLAUDE_OAUTH_BETA);
        let mut h = HeaderMap::new();
        h.append(
            "anthropic-beta",
            HeaderValue::from_static("claude-code-20250219, a"),
        );
        h.append("anthropic-beta", HeaderValue::from_static("b"));
        c.clone().apply(&mut h);
        assert_eq!(
            h["anthropic-beta"],
            "claude-code-20250219,a,b,oauth-2025-04-20"
        );
        assert_eq!(h.get_all("anthropic-beta").iter().count(), 1);
        assert!(h["authorization"].is_sensitive());
        c.clone().apply(&mut h);
        assert_eq!(
            h["anthropic-beta"],
            "claude-code-20250219,a,b,oauth-2025-04-20"
        );
        // The beta listed already, on the second of two lines: still one header.
        let mut two = HeaderMap::new();
        two.append("anthropic-beta", HeaderValue::from_static("a-1"));
        two.append(
            "anthropic-beta",
            HeaderValue::from_static("b-2, oauth-2025-04-20"),
        );
        c.clone().apply(&mut two);
        assert_eq!(two["anthropic-beta"], "a-1,b-2,oauth-2025-04-20");
        assert_eq!(two.get_all("anthropic-beta").iter().count(), 1);
        let mut empty = HeaderMap::new();
        c.apply(&mut empty);
        assert_eq!(empty["anthropic-beta"], "oauth-2025-04-20");
    }

    #[test]
    fn debug_shows_names_only() {
        let c = Credential::bearer("at-secret").unwrap().with(
            HeaderName::from_static("chatgpt-account-id"),
            HeaderValue::from_static("ws"),
        );
        let shown = format!("{c:?}");
        assert!(
            shown.contains("chatgpt-account-id") && !shown.contains("at-secret"),
            "{shown}"
        );
        let mut h = HeaderMap::new();
        c.apply(&mut h);
        assert_eq!(h["authorization"], "Bearer at-secret");
        assert!(h["chatgpt-account-id"].is_sensitive());
    }
}
