//! The injection side: on the way to the provider, whether a request is an account switch,
//! what account-bound state it must lose, and whether the session's handoff goes in.
//!
//! A request is a **switch** when the account it was resolved to is not the session's
//! affinity (the last account that served it successfully through this combo), or when a live
//! handoff exists that another account wrote. On a switch the relay claims the handoff,
//! removes all the account-bound state the new account would reject (`previous_response_id`,
//! encrypted reasoning, compaction and tool-output items, signed thinking blocks, the
//! `x-codex-turn-state` header) and injects the handoff as a `<context_handoff>` system
//! message, editing the raw JSON so every other byte stays as the client sent it.
//!
//! **The scrub lasts.** Clients resend their whole history on every turn. The digests of the
//! account-bound state a switch request carried are recorded with the new affinity; every
//! later request of the session to that account is stripped of exactly those pieces, while the
//! state the account minted itself is forwarded. The record lives for the handoff TTL.
//!
//! **Model switches.** With the serving model known ([`ServingModel`](crate::ServingModel)),
//! a request sent to another model than the one that last served the session is a model
//! switch: all account-bound state goes, and a handoff whose `<transfer_reason>` names both
//! models is injected, made from the freshest stored handoff of the session (read, not
//! consumed), or a bare note saying that no summary exists and the history is the whole
//! context. The response carries `x-context-relay: model-switch, …`, from which the generation
//! side writes a model-switch handoff on the new model.
//!
//! **Success means the response completed.** The handoff is deleted, and the affinity moves,
//! only when the response body ended with the API's terminal success event (or is a complete
//! JSON body): see [`Attempt`](crate::Attempt).

mod claim;
mod conversation;
mod decide;
mod extractive;
mod fast;
mod model;
mod repair;
mod tee;
mod ticket;

pub(crate) use conversation::other_conversation;
pub(crate) use decide::{BodyDecision, Inject};
pub use repair::{HOLD_LIMIT, HOLD_TIME, resend_headers};
pub(crate) use repair::{Look, Repair};
pub use tee::Tee;
pub(crate) use ticket::Ticket;
