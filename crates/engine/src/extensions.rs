//! The request and response extensions through which the parts of a relay stack (the combo
//! routing, the account resolver, the relay) tell each other what they know about a request.
//!
//! ```text
//! client ─▶ ComboService ─▶ GenerationLayer ─▶ AccountResolver ─▶ InjectionLayer ─▶ upstream
//!           sets ComboName                      sets ResolvedAccount
//!                                               and ServingModel
//!                                               (request and response)
//! ```
//!
//! Request extensions are not copied onto responses by `http`: the injection side puts
//! [`ResolvedAccount`] on the response when the inner response lacks it, so that the
//! generation side knows which account served.

use std::sync::Arc;

use context_relay_core::HandoffKey;
use context_relay_store::Affinity;

use crate::facts::Facts;

pub use context_relay_core::QuotaSignal;

/// The combo (named routing target) a request asked for, set by the combo service.
///
/// Without it the relay passes the request through.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ComboName(pub Arc<str>);

/// The provider account a request was resolved to, set by the account resolver on the request
/// (before the injection side); the injection side copies it onto the response (for the
/// generation side). The one account reference of the relay (also held by a session's
/// affinity and returned by a stored handoff's `from()`), compared with `==`.
pub use context_relay_core::ResolvedAccount;

/// Who owns the session (the caller identity set by an auth layer).
///
/// Without it the tenant is derived from the inbound credential: a short hash of the
/// `authorization` / `x-api-key` / `x-goog-api-key` value, else of the `key` query parameter
/// (where Gemini clients may send their key), `anonymous` without one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tenant(pub Arc<str>);

/// An explicit session id, overriding extraction from headers and body (cleaned like one).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionId(pub Arc<str>);

/// The model a request is sent to, as `provider/model` (`codex/gpt-5.5`), set by whatever
/// picks the routing target (a combo service or account resolver; an embedding application
/// otherwise).
///
/// The relay records it with the session's affinity when a response completes. A later
/// request of the session sent to another model is a **model switch**: all account-bound
/// state is removed and a handoff naming both models is injected. Without it, model switches
/// are not detected.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServingModel(pub Arc<str>);

/// Marks a request the relay leaves alone (an application's anonymous traffic, say): it
/// passes through both layers untouched. It is user traffic all the same: a gateway serves it
/// as it serves any other request.
///
/// Markers live in extensions only; they never reach a JSON body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SkipRelay;

/// Marks the relay's own summary call (set by the summarizer): the relay leaves it alone, as
/// with [`SkipRelay`], and a gateway serves it with one attempt on the account named by the
/// request's [`ResolvedAccount`] (the one that served the summarised turn; see
/// [`SummaryRequest`](crate::SummaryRequest)) and counts its tokens apart from user traffic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SummaryCall;

/// Whether the relay leaves a request with `ext` alone: it carries [`SkipRelay`] or
/// [`SummaryCall`]. The one place both markers are read for that.
pub fn relay_skips(ext: &http::Extensions) -> bool {
    ext.get::<SkipRelay>().is_some() || ext.get::<SummaryCall>().is_some()
}

impl ComboName {
    /// Builds a combo name.
    pub fn new(name: impl Into<Arc<str>>) -> Self {
        Self(name.into())
    }
}

impl ServingModel {
    /// Builds a serving model (`provider/model`).
    pub fn new(model: impl Into<Arc<str>>) -> Self {
        Self(model.into())
    }

    /// The model part, when the provider part is `provider` (a model name may hold `/`
    /// itself; a provider name does not).
    ///
    /// ```
    /// use context_relay_engine::ServingModel;
    /// let m = ServingModel::new("router/anthropic/claude-sonnet-4-5");
    /// assert_eq!(m.model_of("router"), Some("anthropic/claude-sonnet-4-5"));
    /// assert_eq!(m.model_of("anthropic"), None);
    /// assert_eq!(ServingModel::new("codex").model_of("codex"), None);
    /// assert_eq!(ServingModel::new("codex/").model_of("codex"), None);
    /// ```
    pub fn model_of(&self, provider: &str) -> Option<&str> {
        match self.0.split_once('/') {
            Some((p, model)) if p == provider && !model.is_empty() => Some(model),
            _ => None,
        }
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

/// What the parts of the stack before the relay know about a request, borrowed: its
/// [`ComboName`], the [`ResolvedAccount`] and [`ServingModel`] it was sent to, an explicit
/// [`SessionId`] and [`Tenant`], and whether the relay leaves it alone ([`relay_skips`]).
///
/// An adapter on `http` types reads them from the request's extensions with
/// [`from_extensions`](Self::from_extensions); another (a pingora proxy) fills the fields.
///
/// ```
/// use context_relay_engine::{
///     ComboName, RequestFacts, ResolvedAccount, SkipRelay, SummaryCall, relay_skips,
/// };
///
/// let mut ext = http::Extensions::new();
/// ext.insert(ComboName::new("codex"));
/// ext.insert(ResolvedAccount::new("codex", "acct-a"));
/// let facts = RequestFacts::from_extensions(&ext);
/// assert_eq!(facts.combo, Some(&ComboName::new("codex")));
/// assert!(facts.session.is_none() && !facts.skip);
///
/// // Either marker makes the relay leave a request alone.
/// let mut skipped = http::Extensions::new();
/// skipped.insert(SkipRelay);
/// let mut summary = http::Extensions::new();
/// summary.insert(SummaryCall);
/// assert!(relay_skips(&skipped) && RequestFacts::from_extensions(&skipped).skip);
/// assert!(relay_skips(&summary) && RequestFacts::from_extensions(&summary).skip);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestFacts<'a> {
    /// The combo; without one the relay does nothing.
    pub combo: Option<&'a ComboName>,
    /// The account the request is sent to (needed by the injection side).
    pub account: Option<&'a ResolvedAccount>,
    /// The model the request is sent to; without it model switches are not detected.
    pub model: Option<&'a ServingModel>,
    /// An explicit session id; otherwise it is derived from headers and body.
    pub session: Option<&'a SessionId>,
    /// An explicit tenant; otherwise it is derived from the credential.
    pub tenant: Option<&'a Tenant>,
    /// A request the relay leaves alone ([`relay_skips`]).
    pub skip: bool,
    /// The session's affinity as a layer before the relay read it from the relay's store for
    /// this request; the injection side takes it instead of reading it again.
    pub affinity: Option<&'a StoredAffinity>,
}

impl<'a> RequestFacts<'a> {
    /// The facts set as extensions of a request, on their own or in
    /// [`Facts`](crate::Facts) ([`FactsExt::fact`](crate::FactsExt::fact)).
    pub fn from_extensions(ext: &'a http::Extensions) -> Self {
        // `Facts` looked up once for all of them; a fact it lacks may be a value on its own.
        let facts = ext.get::<Facts>();
        Self {
            combo: Facts::read(facts, ext),
            account: Facts::read(facts, ext),
            model: Facts::read(facts, ext),
            session: Facts::read(facts, ext),
            tenant: Facts::read(facts, ext),
            skip: relay_skips(ext),
            affinity: Facts::read(facts, ext),
        }
    }
}

/// A session's affinity (the account and model that last served it, and the state its earlier
/// accounts minted) as a layer before the relay read it from the relay's store for this
/// request, keyed as the relay keys it.
///
/// An account resolver that reads the affinity to place the session (the gateway's does on a
/// store replicas share, where another replica may have moved the session) sets it as a fact
/// ([`FactsExt::set_fact`](crate::FactsExt::set_fact)); the injection side then takes it for the same key instead of
/// reading the store a second time for the request. A value of another key (another tenant,
/// session or combo than the relay derives) is not used.
///
/// ```
/// use context_relay_core::HandoffKey;
/// use context_relay_engine::{FactsExt, RequestFacts, StoredAffinity};
///
/// let key = HandoffKey::new("tenant", "session", "combo");
/// let mut ext = http::Extensions::new();
/// ext.set_fact(StoredAffinity::new(key.clone(), None));
/// let facts = RequestFacts::from_extensions(&ext);
/// let read = facts.affinity.expect("set");
/// assert_eq!(read.key(), &key);
/// assert!(read.affinity().is_none(), "the store had none");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct StoredAffinity(Arc<(HandoffKey, Option<Affinity>)>);

impl StoredAffinity {
    /// The affinity the store gave for `key` (`None`: it had none).
    pub fn new(key: HandoffKey, affinity: Option<Affinity>) -> Self {
        Self(Arc::new((key, affinity)))
    }

    /// The key it was read for.
    pub fn key(&self) -> &HandoffKey {
        &self.0.0
    }

    /// What the store gave.
    pub fn affinity(&self) -> Option<&Affinity> {
        self.0.1.as_ref()
    }

    /// What the store gave for `key`, if this was read for it.
    pub(crate) fn of(&self, key: &HandoffKey) -> Option<Option<Affinity>> {
        (self.key() == key).then(|| self.0.1.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_affinity_answers_for_its_own_key_only() {
        let key = HandoffKey::new("t", "s", "c");
        let read = StoredAffinity::new(key.clone(), Some(Affinity::new("codex", "acct-b")));
        assert_eq!(
            read.of(&key),
            Some(Some(Affinity::new("codex", "acct-b"))),
            "its own key"
        );
        for other in [
            HandoffKey::new("u", "s", "c"),
            HandoffKey::new("t", "r", "c"),
            HandoffKey::new("t", "s", "d"),
        ] {
            assert_eq!(
                read.of(&other),
                None,
                "{other:?}: the store is read instead"
            );
        }
        let none = StoredAffinity::new(key.clone(), None);
        assert_eq!(
            none.of(&key),
            Some(None),
            "the store had none: not read again"
        );
    }
}
