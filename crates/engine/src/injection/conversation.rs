//! Conversations within one session: clients may send one session header with several
//! conversations (Claude Code's sub-agents send their parent's, each with a conversation of
//! its own). A handoff belongs to the conversation it summarises, told by its opening (the
//! first user message, [`opening`](context_relay_core::session::opening)); it is never
//! injected into, or consumed by, another.
//!
//! The rule:
//! - The session's **primary** conversation is the first one the relay records an affinity
//!   for; it is keyed by the session itself, as a session with one conversation always was.
//! - A request whose opening differs is **another** conversation, keyed by the session and
//!   its opening ([`HandoffKey::conversation`]): its own affinity, foreign state and
//!   handoffs. A request that continues a conversation the provider keeps
//!   (`previous_response_id`) sends only its new input, so it belongs to the session itself;
//!   a handoff written at a chained turn is told by its chain's `instructions`
//!   ([`Opening::chained`]), so that one chain does not take another's.
//! - Another conversation with no record of its own (it only ever went through the fast path,
//!   or started on another replica) is taken to be where the session was: on the account that
//!   served before the session's last switch while that switch is recent, else on the
//!   session's account. Its first request (no history yet) is never a switch.
//! - After any switch the session's requests take the slow path for the handoff TTL (the
//!   switch window), so that each conversation is scrubbed and handed off when it crosses.
//!
//! Records written before conversations were told apart have no primary: every
//! conversation then uses the session's key, and a handoff is only claimed by the
//! conversation whose opening it records.

use std::time::SystemTime;

use context_relay_core::HandoffKey;
use context_relay_core::session::Opening;
use context_relay_store::Affinity;

use crate::extensions::ResolvedAccount;
use crate::relay::Shared;

/// The conversation a request belongs to, with its key and affinity.
pub(crate) struct Conversation {
    /// The conversation's key (the session's own for the primary conversation).
    pub(crate) key: HandoffKey,
    /// The conversation's affinity: its own, or where the session was (see the module docs).
    pub(crate) affinity: Option<Affinity>,
    /// The affinity was not the conversation's own: its own is recorded when the response
    /// completes.
    pub(crate) inherited: bool,
    /// The request's opening, when it has one.
    pub(crate) opening: Option<Opening>,
    /// The opening recorded with the conversation's affinity: the session's primary
    /// conversation's (none for another conversation, or a session recorded before
    /// conversations were told apart).
    primary: Option<u64>,
}

/// The key of the conversation opening with `opening`, when it is not the primary one
/// (`primary`: the session's recorded opening); `None` for the primary conversation and a
/// session recorded before conversations were told apart. The one place both sides of the
/// relay tell conversations apart.
pub(crate) fn other_conversation(
    key: &HandoffKey,
    primary: Option<u64>,
    opening: Opening,
) -> Option<HandoffKey> {
    match primary {
        Some(p) if p != opening.digest && !opening.chained => {
            Some(key.conversation(opening.digest))
        }
        _ => None,
    }
}

impl Conversation {
    /// Where `opening` belongs in the session of `key`, whose affinity is `session`.
    pub(crate) async fn resolve(
        shared: &Shared,
        key: HandoffKey,
        session: Option<Affinity>,
        opening: Option<Opening>,
        now: SystemTime,
    ) -> Self {
        let primary = |key, affinity: Option<Affinity>| Self {
            key,
            primary: match &affinity {
                // The session's first conversation becomes its primary one.
                None => opening.map(|o| o.digest),
                Some(a) => a.conversation(),
            },
            affinity,
            inherited: false,
            opening,
        };
        let (Some(open), Some(base)) = (opening, session.as_ref()) else {
            // No opening to tell by, or the session's first conversation.
            return primary(key, session);
        };
        let Some(key) = other_conversation(&key, base.conversation(), open) else {
            return primary(key, session);
        };
        if let Some(own) = shared.affinity(&key).await {
            return Self {
                key,
                affinity: Some(own),
                inherited: false,
                opening,
                primary: None,
            };
        }
        // No record of its own: where the session was, unless this is its first request.
        let affinity = open.continued.then(|| {
            let account = base.previous_at(now).unwrap_or(base.account()).clone();
            let a = Affinity::of(account);
            match base.model() {
                Some(m) => a.with_model(m),
                None => a,
            }
        });
        Self {
            key,
            affinity,
            inherited: true,
            opening,
            primary: None,
        }
    }

    /// A fresh affinity of this conversation to `account`, serving `model`.
    pub(crate) fn fresh(&self, account: &ResolvedAccount, model: Option<&str>) -> Affinity {
        let mut a = Affinity::of(account.clone());
        if let Some(m) = model {
            a = a.with_model(m);
        }
        match self.primary {
            Some(d) => a.with_conversation(d),
            None => a,
        }
    }

    /// The affinity to record when a request that is no switch completes on `account`
    /// (serving `model`): a new one when the conversation had none of its own, the same one
    /// with `model` when it did not record that model yet; `None` when it stays as it is.
    pub(crate) fn record(
        &self,
        account: &ResolvedAccount,
        model: Option<&str>,
    ) -> Option<Affinity> {
        match &self.affinity {
            Some(_) if self.inherited => Some(self.fresh(account, model)),
            None => Some(self.fresh(account, model)),
            Some(a) => match model {
                Some(m) if a.model() != Some(m) => Some(a.clone().with_model(m)),
                _ => None,
            },
        }
    }

    /// Whether `digest` (a handoff's recorded opening) is this conversation's: a handoff with
    /// none recorded, or a request with no opening, matches. A chained request belongs to the
    /// session itself: it owns the session's handoff written at a turn that was not chained
    /// (its chain's first), and one written at a chained turn of its own chain, told by the
    /// chain's `instructions` ([`Opening::chained`]), not another chain's (a sub-agent's).
    pub(crate) fn owns(&self, digest: Option<u64>) -> bool {
        match (digest, self.opening) {
            (Some(d), Some(o)) if o.chained => d == o.digest || !Opening::is_chain_digest(d),
            (Some(d), Some(o)) => d == o.digest,
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use context_relay_core::session::opening;

    fn of(body: &[u8]) -> Conversation {
        Conversation {
            key: HandoffKey::new("t", "s", "c"),
            affinity: None,
            inherited: false,
            opening: opening(body),
            primary: None,
        }
    }

    /// A chained turn owns its session's handoff written at a turn that was not chained (its
    /// chain's first) and one written at its own chain's turn, not one of another chain.
    #[test]
    fn a_chained_turn_owns_its_chains_handoffs_only() {
        let first = br#"{"instructions":"You are the planner.","input":"rename the crate"}"#;
        let planner = |step: &str| {
            format!(
                r#"{{"instructions":"You are the planner.","input":"{step}","previous_response_id":"r{step}"}}"#
            )
        };
        let sub = br#"{"instructions":"You are the sub-agent.","input":"look","previous_response_id":"r9"}"#;
        let written_first = opening(first).map(|o| o.digest);
        let written_chained = opening(planner("2").as_bytes()).map(|o| o.digest);
        let next = of(planner("3").as_bytes());
        assert!(next.owns(written_first), "the chain's first turn's");
        assert!(
            next.owns(written_chained),
            "its own chain's, whatever the turn's input"
        );
        assert!(!of(sub).owns(written_chained), "another chain's");
        assert!(of(sub).owns(written_first), "the session's first turn's");
        // A conversation that is not chained owns only its own opening's.
        assert!(!of(first).owns(written_chained));
        assert!(of(first).owns(written_first));
    }
}
