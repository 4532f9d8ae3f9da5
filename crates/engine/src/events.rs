//! What the relay did in the background, told as it happens: the outcome of every summary
//! generation and every qualifying turn that started none (with its reason), for an
//! operator's view (the gateway's console shows them).
//!
//! Set a sink with [`RelayBuilder::events`](crate::RelayBuilder::events); without one nothing
//! is made. What the relay did to a request (injected, scrubbed, repaired, model switch) is on
//! the response instead ([`RelayAction`](crate::RelayAction)).
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use context_relay_engine::{Relay, RelayEvent};
//! use context_relay_store::MemoryStore;
//!
//! let seen: Arc<Mutex<Vec<String>>> = Arc::default();
//! let sink = seen.clone();
//! let relay = Relay::builder(Arc::new(MemoryStore::new()))
//!     .events(move |e: RelayEvent| sink.lock().unwrap().push(e.kind.to_owned()))
//!     .build();
//! # let _ = relay;
//! ```

use context_relay_core::{HandoffKey, HandoffKind, ResolvedAccount};

/// One thing the relay did, or declined to do.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RelayEvent {
    /// What happened: a generation's outcome (`generated`, `extractive`, `rejected`,
    /// `unparseable`, `unavailable`), or `skipped`. New kinds may be added.
    pub kind: &'static str,
    /// Why, for a skip (`fresh`, `cooling_down`, `in_flight`, `exhausted`, `provider`, …) or a
    /// handoff built without the model (the failure).
    pub reason: Option<&'static str>,
    /// The session's handoff key, when it is known.
    pub key: Option<HandoffKey>,
    /// The account that served the turn.
    pub account: Option<ResolvedAccount>,
    /// Which handoff it is about: an account switch's or a model switch's.
    pub handoff: Option<HandoffKind>,
}

impl RelayEvent {
    /// An event of `kind`, with nothing else known yet.
    pub fn new(kind: &'static str) -> Self {
        Self {
            kind,
            reason: None,
            key: None,
            account: None,
            handoff: None,
        }
    }

    /// With a reason.
    pub fn reason(mut self, reason: &'static str) -> Self {
        self.reason = Some(reason);
        self
    }

    /// About the session of `key`.
    pub fn key(mut self, key: &HandoffKey) -> Self {
        self.key = Some(key.clone());
        self
    }

    /// Served by `account`.
    pub fn account(mut self, account: &ResolvedAccount) -> Self {
        self.account = Some(account.clone());
        self
    }

    /// About a handoff of `kind`.
    pub fn handoff(mut self, kind: HandoffKind) -> Self {
        self.handoff = Some(kind);
        self
    }
}

/// Where [`RelayEvent`]s go. A closure `Fn(RelayEvent)` is one. It is called on the relay's
/// tasks: keep it short and never block.
pub trait RelayEvents: Send + Sync + 'static {
    /// Takes one event.
    fn event(&self, event: RelayEvent);
}

impl<F> RelayEvents for F
where
    F: Fn(RelayEvent) + Send + Sync + 'static,
{
    fn event(&self, event: RelayEvent) {
        self(event)
    }
}
