//! The generation side: which responses lead to a summary (the gates), the copy of the request
//! and the watch on the reply that feed the summary job.
//!
//! On each response the serving account's quota signal is read (a signal the application
//! computed, else the configured [`QuotaSource`](crate::QuotaSource)). When the account is at
//! or above the handoff threshold (default 85 %) but below 95 %, its provider gets handoffs,
//! the session is not cooling down after a rejected or unparseable summary and no other
//! generation for it is in flight, the conversation is summarised **in the background** once
//! the reply is complete (so the assistant's reply of this turn is included), and the handoff
//! is stored. The response itself is never delayed or changed.

mod capture;
mod gate;
mod kept;

pub use capture::{Capture, ReplyWatch};
pub use gate::GenerationTicket;
