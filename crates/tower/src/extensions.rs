//! The request and response extensions through which the services of a relay stack talk to
//! each other (DESIGN §3).
//!
//! ```text
//! client ─▶ ComboService ─▶ GenerationLayer ─▶ AccountResolver ─▶ InjectionLayer ─▶ upstream
//!           sets ComboName                      sets ResolvedAccount
//!                                               (request and response)
//! ```
//!
//! Request extensions are not copied onto responses by `http`: a resolver must put
//! [`ResolvedAccount`] on the response itself (InjectionLayer also does it when the inner
//! response lacks it), so that GenerationLayer knows which account served.

use std::sync::Arc;

pub use context_relay_core::QuotaSignal;

/// The combo (named routing target) a request asked for, set by the combo service.
///
/// Without it both layers pass the request through.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ComboName(pub Arc<str>);

/// The provider account a request was resolved to, set by the account resolver on the request
/// (before InjectionLayer) and on the response (for GenerationLayer).
///
/// The one account reference of the relay (also held by a session's affinity and returned by
/// a stored handoff's `from()`); its provider is lower case, so references compare with `==`.
pub use context_relay_core::ResolvedAccount;

/// Who owns the session (the caller identity set by an auth layer).
///
/// Without it the tenant is derived from the inbound credential (DESIGN §7).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tenant(pub Arc<str>);

/// An explicit session id, overriding extraction from headers and body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionId(pub Arc<str>);

/// Marks an internal request (the summary call): both layers pass it through untouched.
///
/// Internal markers live in extensions only; they never reach a JSON body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SkipRelay;

impl ComboName {
    /// Builds a combo name.
    pub fn new(name: impl Into<Arc<str>>) -> Self {
        Self(name.into())
    }
}

impl Tenant {
    /// Builds a tenant.
    pub fn new(tenant: impl Into<Arc<str>>) -> Self {
        Self(tenant.into())
    }
}

impl SessionId {
    /// Builds a session id.
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        Self(id.into())
    }
}
