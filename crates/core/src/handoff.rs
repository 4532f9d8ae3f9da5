//! The handoff: the compact structured summary written for a session before its account runs
//! out, its key, and the record a store keeps.
//!
//! A session keeps up to two live handoffs per key, one per [`HandoffSlot`]: the account slot
//! (written before an account runs out, consumed when another account of the same model takes
//! over) and the model slot (written for a move to another model). The slot follows from the
//! record's [`HandoffKind`] alone ([`HandoffKind::slot`]), so a record never sits in the wrong
//! slot and a listing tells the two apart by `kind`.

use std::sync::Arc;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::ResolvedAccount;

/// Longest `summary` kept, in chars.
pub const MAX_SUMMARY_CHARS: usize = 2000;
/// Longest `task_progress` kept, in chars.
pub const MAX_TASK_PROGRESS_CHARS: usize = 1200;
/// Most `key_decisions` items kept.
pub const MAX_KEY_DECISIONS: usize = 8;
/// Most `active_entities` items kept.
pub const MAX_ACTIVE_ENTITIES: usize = 10;
/// Longest list item (`key_decisions`, `active_entities`) kept, in chars.
pub const MAX_ITEM_CHARS: usize = 240;

/// Version of the serialized [`HandoffRecord`] layout, for migrations.
pub const RECORD_VERSION: u32 = 1;

/// `(tenant, session, combo)`: one live handoff per key. Keys never cross tenants.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct HandoffKey {
    /// Who owns the session (the gateway's caller identity).
    pub tenant: Arc<str>,
    /// The session id of the conversation.
    pub session: Arc<str>,
    /// The combo (routing target name) the client asked for.
    pub combo: Arc<str>,
}

impl HandoffKey {
    /// Builds a key from its three parts.
    pub fn new(
        tenant: impl Into<Arc<str>>,
        session: impl Into<Arc<str>>,
        combo: impl Into<Arc<str>>,
    ) -> Self {
        Self {
            tenant: tenant.into(),
            session: session.into(),
            combo: combo.into(),
        }
    }

    /// The key of a conversation of this key's session other than its primary one (see
    /// [`crate::session::opening`]): the session id followed by
    /// [`CONVERSATION_SEPARATOR`] and the conversation's opening digest in 16 hex digits.
    ///
    /// ```
    /// use context_relay_core::HandoffKey;
    ///
    /// let key = HandoffKey::new("t", "s-1", "c");
    /// let sub = key.conversation(0xab);
    /// assert_eq!(&*sub.session, "s-1#00000000000000ab");
    /// assert_eq!(HandoffKey::session_of(&sub.session), "s-1");
    /// assert_eq!(HandoffKey::session_of("s-1"), "s-1");
    /// ```
    pub fn conversation(&self, digest: u64) -> HandoffKey {
        HandoffKey {
            tenant: self.tenant.clone(),
            session: format!("{}{CONVERSATION_SEPARATOR}{digest:016x}", self.session).into(),
            combo: self.combo.clone(),
        }
    }

    /// The session id a key's `session` belongs to: itself, or the session of a conversation
    /// key made by [`HandoffKey::conversation`].
    pub fn session_of(session: &str) -> &str {
        match session.rsplit_once(CONVERSATION_SEPARATOR) {
            Some((base, digest))
                if digest.len() == 16 && digest.bytes().all(|b| b.is_ascii_hexdigit()) =>
            {
                base
            }
            _ => session,
        }
    }
}

/// What separates a session id from a conversation's opening digest in a conversation key
/// ([`HandoffKey::conversation`]).
pub const CONVERSATION_SEPARATOR: char = '#';

impl std::fmt::Display for HandoffKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.tenant, self.session, self.combo)
    }
}

/// The summary content of a handoff, already clamped to its limits (see [`crate::parse`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handoff {
    /// What matters to continue (≤ [`MAX_SUMMARY_CHARS`]); never empty in a stored handoff.
    pub summary: String,
    /// Decisions taken so far (≤ [`MAX_KEY_DECISIONS`] items).
    #[serde(default)]
    pub key_decisions: Vec<String>,
    /// Done / pending / next step (≤ [`MAX_TASK_PROGRESS_CHARS`]).
    #[serde(default)]
    pub task_progress: String,
    /// Files, features and identifiers in play (≤ [`MAX_ACTIVE_ENTITIES`] items).
    #[serde(default)]
    pub active_entities: Vec<String>,
}

/// How a stored handoff was written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HandoffKind {
    /// Written by the summary model (records stored before kinds existed are read as this).
    #[default]
    Generated,
    /// Built from the conversation without a model call, because the summary model gave none;
    /// a generated handoff replaces it.
    Extractive,
    /// Written for a session that moves to another model (often of another provider); kept in
    /// the [`HandoffSlot::Model`] slot, apart from the account-switch handoff.
    ModelSwitch,
}

impl HandoffKind {
    /// The serialized name (`generated`, `extractive`, `model-switch`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Generated => "generated",
            Self::Extractive => "extractive",
            Self::ModelSwitch => "model-switch",
        }
    }

    /// The slot a record of this kind is stored in.
    ///
    /// ```
    /// use context_relay_core::{HandoffKind, HandoffSlot};
    ///
    /// assert_eq!(HandoffKind::Generated.slot(), HandoffSlot::Account);
    /// assert_eq!(HandoffKind::Extractive.slot(), HandoffSlot::Account);
    /// assert_eq!(HandoffKind::ModelSwitch.slot(), HandoffSlot::Model);
    /// ```
    pub fn slot(self) -> HandoffSlot {
        match self {
            Self::Generated | Self::Extractive => HandoffSlot::Account,
            Self::ModelSwitch => HandoffSlot::Model,
        }
    }
}

/// Which of the two handoffs of one key a store operation is about.
///
/// An account-switch handoff and a model-switch handoff of one session live side by side: a
/// write of one never replaces the other, and consuming one never deletes the other.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HandoffSlot {
    /// The handoff for a move between accounts of one model ([`HandoffKind::Generated`] and
    /// [`HandoffKind::Extractive`]).
    #[default]
    Account,
    /// The handoff for a move between models ([`HandoffKind::ModelSwitch`]).
    Model,
}

impl HandoffSlot {
    /// Both slots, account first.
    pub const ALL: [HandoffSlot; 2] = [HandoffSlot::Account, HandoffSlot::Model];

    /// `account` or `model`, for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Account => "account",
            Self::Model => "model",
        }
    }

    /// `0` for the account slot, `1` for the model slot: an index into per-slot arrays.
    pub fn index(self) -> usize {
        match self {
            Self::Account => 0,
            Self::Model => 1,
        }
    }
}

/// A stored handoff: the payload plus where it came from and how long it lives.
///
/// Serialized as JSON so that a stored record stays human-inspectable; times are Unix
/// milliseconds. Lease bookkeeping belongs to the store, not to this record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandoffRecord {
    /// Layout version ([`RECORD_VERSION`]).
    #[serde(default = "default_version")]
    pub version: u32,
    /// How it was written.
    #[serde(default)]
    pub kind: HandoffKind,
    /// Tenant part of the key.
    pub tenant: Arc<str>,
    /// Session part of the key.
    pub session: Arc<str>,
    /// Combo part of the key.
    pub combo: Arc<str>,
    /// Provider of the account that served when the handoff was written (the stored form of
    /// [`HandoffRecord::from`]; compare with [`HandoffRecord::is_from`]).
    pub from_provider: String,
    /// The account that served when the handoff was written (the stored form of
    /// [`HandoffRecord::from`]).
    pub from_account: String,
    /// The summary content.
    #[serde(flatten)]
    pub handoff: Handoff,
    /// Number of conversation entries the summary was made from.
    pub message_count: u32,
    /// The opening digest of the conversation it summarises, in 16 hex digits (see
    /// [`crate::session::opening`]); absent in records written before conversations were told
    /// apart. A handoff is only injected into the conversation it summarises.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<String>,
    /// Whether the summary covers the context of the conversation's `compaction` items: its
    /// summary request carried them, to the account that minted them. The note replacing
    /// those items on another account says the context is in the handoff only then.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compaction: bool,
    /// The model that wrote the summary.
    pub model: String,
    /// The handoff threshold in force when it was written.
    pub threshold: f64,
    /// When the summary was stored.
    #[serde(with = "crate::time::unix_millis")]
    pub generated_at: SystemTime,
    /// When the record stops being live.
    #[serde(with = "crate::time::unix_millis")]
    pub expires_at: SystemTime,
}

fn default_version() -> u32 {
    RECORD_VERSION
}

impl HandoffRecord {
    /// The key this record is stored under.
    pub fn key(&self) -> HandoffKey {
        HandoffKey {
            tenant: self.tenant.clone(),
            session: self.session.clone(),
            combo: self.combo.clone(),
        }
    }

    /// The account that wrote the handoff.
    ///
    /// Stored as the two strings `from_provider` and `from_account`, so that the JSON of a
    /// record (on disk, in Redis, in the admin API) stays what it always was.
    pub fn from(&self) -> ResolvedAccount {
        ResolvedAccount::new(self.from_provider.as_str(), self.from_account.as_str())
    }

    /// Whether `account` wrote the handoff: `self.from() == *account`, without building a
    /// reference.
    pub fn is_from(&self, account: &ResolvedAccount) -> bool {
        account.is(&self.from_provider, &self.from_account)
    }

    /// Records `account` as the writer.
    pub fn set_from(&mut self, account: &ResolvedAccount) {
        self.from_provider = account.provider().to_string();
        self.from_account = account.account().to_string();
    }

    /// The slot the record is stored in (from its kind).
    pub fn slot(&self) -> HandoffSlot {
        self.kind.slot()
    }

    /// Whether the record is still live at `now`.
    pub fn is_live(&self, now: SystemTime) -> bool {
        now < self.expires_at
    }

    /// The opening digest of the conversation it summarises, when recorded (and well formed).
    pub fn conversation_digest(&self) -> Option<u64> {
        self.conversation
            .as_deref()
            .and_then(|d| u64::from_str_radix(d, 16).ok())
    }

    /// Records `digest` as the opening of the conversation it summarises.
    pub fn set_conversation(&mut self, digest: Option<u64>) {
        self.conversation = digest.map(|d| format!("{d:016x}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_without_a_kind_still_load_and_kinds_round_trip() {
        let old = r#"{"version":1,"tenant":"t","session":"s","combo":"c","from_provider":"p",
            "from_account":"a","summary":"x","message_count":3,"model":"m","threshold":0.85,
            "generated_at":1,"expires_at":2}"#;
        let r: HandoffRecord = serde_json::from_str(old).expect("old record");
        assert_eq!(r.kind, HandoffKind::Generated);
        let mut r = r;
        r.kind = HandoffKind::Extractive;
        let json = serde_json::to_string(&r).expect("serialize");
        assert!(json.contains(r#""kind":"extractive""#), "{json}");
        let back: HandoffRecord = serde_json::from_str(&json).expect("round trip");
        assert_eq!(back, r);
        assert_eq!(HandoffKind::Extractive.as_str(), "extractive");
    }

    #[test]
    fn a_model_switch_record_round_trips_in_its_own_slot() {
        let old = r#"{"version":1,"kind":"generated","tenant":"t","session":"s","combo":"c",
            "from_provider":"p","from_account":"a","summary":"x","message_count":3,"model":"m",
            "threshold":0.85,"generated_at":1,"expires_at":2}"#;
        let mut r: HandoffRecord = serde_json::from_str(old).expect("record");
        assert_eq!(r.slot(), HandoffSlot::Account);
        r.kind = HandoffKind::ModelSwitch;
        let json = serde_json::to_string(&r).expect("serialize");
        assert!(json.contains(r#""kind":"model-switch""#), "{json}");
        let back: HandoffRecord = serde_json::from_str(&json).expect("round trip");
        assert_eq!(back, r);
        assert_eq!(back.slot(), HandoffSlot::Model);
        assert_eq!(HandoffKind::ModelSwitch.as_str(), "model-switch");
        assert_eq!(
            HandoffSlot::ALL.map(HandoffSlot::index),
            [0, 1],
            "indexes follow ALL"
        );
        assert_eq!(HandoffSlot::Model.as_str(), "model");
    }

    #[test]
    fn a_record_written_before_the_account_type_loads_and_serializes_the_same() {
        // Exactly as the code before `from()` serialized a record (field order included).
        let old = concat!(
            r#"{"version":1,"kind":"generated","tenant":"t","session":"s","combo":"c","#,
            r#""from_provider":"Codex","from_account":"acct-A","summary":"x","#,
            r#""key_decisions":["d"],"task_progress":"p","active_entities":[],"#,
            r#""message_count":3,"model":"m","threshold":0.85,"generated_at":1,"expires_at":2}"#
        );
        let r: HandoffRecord = serde_json::from_str(old).expect("old record");
        assert_eq!(r.from(), ResolvedAccount::new("codex", "acct-A"));
        assert!(r.is_from(&ResolvedAccount::new("CODEX", "acct-A")));
        assert!(!r.is_from(&ResolvedAccount::new("codex", "acct-a")));
        assert_eq!(serde_json::to_string(&r).expect("serialize"), old);
        let mut moved = r.clone();
        moved.set_from(&ResolvedAccount::new("anthropic", "b"));
        assert_eq!(moved.from().to_string(), "anthropic/b");
        assert_eq!(
            (&*moved.from_provider, &*moved.from_account),
            ("anthropic", "b")
        );
    }
}
