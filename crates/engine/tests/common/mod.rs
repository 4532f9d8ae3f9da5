//! Test support shared by the engine's integration tests (each test file is its own crate and
//! uses what it needs).
#![allow(dead_code)]

use std::time::{Duration, SystemTime};

use context_relay_core::{Handoff, HandoffKey, HandoffRecord};
use context_relay_store::{Affinity, HandoffStore};

/// Whether the handoff of `key` can be claimed now (a claim taken here is given back).
pub async fn claimable(store: &dyn HandoffStore, key: &HandoffKey) -> bool {
    let claim = store.claim(key, Duration::from_secs(30)).await.unwrap();
    if let Some(c) = &claim {
        store.release(c).await.unwrap();
    }
    claim.is_some()
}

/// A handoff of `key` written by Codex account `acct-a` an hour before it expires, and the
/// session's affinity to that account.
pub async fn handoff_from_a(store: &dyn HandoffStore, key: &HandoffKey) {
    let now = SystemTime::now();
    store
        .upsert(HandoffRecord {
            version: 1,
            kind: Default::default(),
            tenant: key.tenant.clone(),
            session: key.session.clone(),
            combo: key.combo.clone(),
            from_provider: "codex".into(),
            from_account: "acct-a".into(),
            handoff: Handoff {
                summary: "Adding a --json flag to the CLI.".into(),
                key_decisions: vec!["serde for output".into()],
                task_progress: "flag parsed; tests pending".into(),
                active_entities: vec!["src/cli.rs".into()],
            },
            message_count: 12,
            conversation: None,
            compaction: false,
            model: "gpt-5".into(),
            threshold: 0.85,
            generated_at: now,
            expires_at: now + Duration::from_secs(3600),
        })
        .await
        .unwrap();
    store
        .set_affinity(key, Affinity::new("codex", "acct-a"))
        .await
        .unwrap();
}

/// The handoff of `key` was consumed and the session's affinity moved to Codex `account`.
pub async fn consumed_and_moved_to(store: &dyn HandoffStore, key: &HandoffKey, account: &str) {
    assert!(store.get(key).await.unwrap().is_none(), "consumed");
    let affinity = store.affinity(key).await.unwrap().expect("moved");
    assert!(affinity.is("codex", account));
}
