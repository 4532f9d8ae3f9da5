//! The key a pool binds a session by.

use std::sync::Arc;

/// A session as a pool binds it: its tenant and its session id, so that two tenants sending
/// the same session id never share an account binding. The resolver makes it from the
/// request's `Tenant` and `SessionId` ([`session_key`](crate::resolver::session_key)): two
/// reference counts, no copy of either string.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SessionKey {
    tenant: Arc<str>,
    session: Arc<str>,
}

impl SessionKey {
    /// The key of `tenant`'s session `session`.
    pub(crate) fn new(tenant: Arc<str>, session: Arc<str>) -> Self {
        Self { tenant, session }
    }
}

/// Tests name a key as `tenant\nsession` (a bare `session` has the empty tenant).
#[cfg(test)]
impl From<&str> for SessionKey {
    fn from(key: &str) -> Self {
        let (tenant, session) = key.split_once('\n').unwrap_or(("", key));
        Self::new(Arc::from(tenant), Arc::from(session))
    }
}
