//! The request and response extensions through which the services of a relay stack talk to
//! each other.
//!
//! ```text
//! client ─▶ ComboService ─▶ GenerationLayer ─▶ AccountResolver ─▶ InjectionLayer ─▶ upstream
//!           sets ComboName                      sets ResolvedAccount
//!                                               and ServingModel
//!                                               (on the request)
//! ```
//!
//! Request extensions are not copied onto responses by `http`: [`InjectionLayer`] puts the
//! request's [`ResolvedAccount`] on the response (unless the inner service set one), so that
//! [`GenerationLayer`] knows which account served. [`Tenant`] and [`SessionId`] are optional
//! overrides of what the relay derives from the credential and the session headers or body;
//! [`SkipRelay`] marks a request the relay leaves alone and [`SummaryCall`] the relay's own
//! summary call (left alone too); a [`QuotaSignal`] on the response wins over the
//! layer's quota source. [`ServingModel`] (`provider/model`) turns on model switches: a
//! session sent to another model than the one that last served it gets a model-switch
//! handoff, and all account-bound state is removed. A [`StoredAffinity`] is the session's
//! affinity as a resolver read it from the relay's store for the request: the injection side
//! takes it instead of reading the store again.
//!
//! Each may be inserted on its own or set in the request's [`Facts`], one value for all of
//! them (one allocation instead of one each; [`FactsExt`] reads and writes them there): the layers read
//! a value in [`Facts`] first, then one on its own.
//!
//! [`InjectionLayer`]: crate::InjectionLayer
//! [`GenerationLayer`]: crate::GenerationLayer

pub use context_relay_engine::{
    ComboName, Fact, Facts, FactsExt, QuotaSignal, ResolvedAccount, ServingModel, SessionId,
    SkipRelay, StoredAffinity, SummaryCall, Tenant,
};
