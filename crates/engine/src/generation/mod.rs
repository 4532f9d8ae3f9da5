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
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use context_relay_engine::{ComboName, Relay, RequestFacts, ResolvedAccount};
//! use context_relay_store::MemoryStore;
//! use http::{HeaderMap, StatusCode, Uri};
//!
//! let relay = Relay::builder(Arc::new(MemoryStore::new())).build();
//! let combo = ComboName::new("coding");
//! let facts = RequestFacts { combo: Some(&combo), ..Default::default() };
//! let uri: Uri = "/v1/chat/completions".parse().unwrap();
//! let mut headers = HeaderMap::new();
//! headers.insert("x-session-id", "s1".parse().unwrap());
//!
//! // At header time: the turn; the body is copied as it goes out.
//! let mut turn = relay.turn(&uri, &headers, facts);
//! assert!(turn.is_active(), "can lead to a summary");
//! turn.request_chunk(&Bytes::from_static(br#"{"messages":[]}"#), true);
//!
//! // The response head: 40 % of the account used, below the threshold, so no summary.
//! let mut head = HeaderMap::new();
//! head.insert("x-codex-primary-used-percent", "40".parse().unwrap());
//! let served_by = ResolvedAccount::new("codex", "acct-a");
//! turn.response(StatusCode::OK, &head, Some(&served_by), None, None);
//! assert!(!turn.watches_reply());
//! ```

mod capture;
mod gate;
mod kept;

pub use capture::Capture;
pub(crate) use capture::ReplyWatch;
pub(crate) use gate::GenerationTicket;
