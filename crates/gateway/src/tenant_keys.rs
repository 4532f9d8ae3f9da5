//! The open-mode tenants: `k-` and 32 hex digits of an HMAC-SHA256 of the client's credential
//! under a secret kept in the handoff store ([`TENANT_SECRET`]), so that replicas sharing a
//! store, and a gateway across restarts, give one credential one tenant.
//!
//! The secret can be lost while gateways run: a Redis without persistence that restarts comes
//! back empty, and a gateway started then stores a secret of its own. Replicas that kept the
//! old one would key every tenant differently from it for as long as they run, and a session
//! crossing them would find none of its handoffs. So each gateway compares its secret with the
//! store's every [`SYNC_INTERVAL`] ([`spawn_sync`]): it stores its own when the store has none
//! (the first writer wins) and adopts the stored one when it differs. Replicas agree again
//! within one interval of the store coming back; handoffs written in between under the losing
//! secret are not found.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use context_relay_store::HandoffStore;
use context_relay_tower::Tenant;
use foldhash::HashMap;
use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::task::JoinHandle;

/// Name of the open-mode tenant secret in the handoff store.
pub(crate) const TENANT_SECRET: &str = "tenant-hmac";

/// How often a running gateway compares its tenant secret with the store's.
pub(crate) const SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// Most credentials whose tenant is kept at hand.
pub(crate) const MEMO_MAX: usize = 4096;
/// Longest credential the memo keeps (API keys are well under it).
pub(crate) const MEMO_KEY_MAX: usize = 256;

/// The secret and the tenants of recent credentials; clones share them (a gateway and the
/// gateways its reloads build).
#[derive(Clone)]
pub(crate) struct TenantKeys(Arc<Mutex<Keys>>);

struct Keys {
    secret: [u8; 32],
    /// Tenants of recent credentials, so that a client's requests cost one hash look-up rather
    /// than an HMAC each (cleared when [`MEMO_MAX`] credentials are held, and when the secret
    /// changes).
    memo: HashMap<Box<[u8]>, Tenant>,
}

impl std::fmt::Debug for TenantKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TenantKeys")
    }
}

impl TenantKeys {
    /// Keys made with `secret`.
    pub(crate) fn new(secret: [u8; 32]) -> Self {
        Self(Arc::new(Mutex::new(Keys {
            secret,
            memo: HashMap::default(),
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Keys> {
        // A poisoned lock only means a panic while it was held: the state is still valid.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The secret in use.
    pub(crate) fn secret(&self) -> [u8; 32] {
        self.lock().secret
    }

    /// Uses `secret` from now on; `true` when it was another (the memo is cleared then).
    pub(crate) fn adopt(&self, secret: [u8; 32]) -> bool {
        let mut keys = self.lock();
        if keys.secret == secret {
            return false;
        }
        keys.secret = secret;
        keys.memo.clear();
        true
    }

    /// The tenant of `credential`.
    pub(crate) fn tenant(&self, credential: &[u8]) -> Tenant {
        // Only credentials of a key's size are kept: the memo's memory stays bounded
        // (MEMO_MAX × MEMO_KEY_MAX), whatever clients send.
        let memoised = credential.len() <= MEMO_KEY_MAX;
        let secret = {
            let keys = self.lock();
            if memoised && let Some(t) = keys.memo.get(credential) {
                return t.clone();
            }
            keys.secret
        };
        let tenant = Tenant::new(format!(
            "k-{}",
            hmac_hex(&secret, b"credential", credential)
        ));
        if memoised {
            let mut keys = self.lock();
            // Not kept if the secret changed meanwhile.
            if keys.secret == secret {
                if keys.memo.len() >= MEMO_MAX {
                    keys.memo.clear();
                }
                keys.memo.insert(credential.into(), tenant.clone());
            }
        }
        tenant
    }

    /// The tenant of the `n`-th request without a credential (one of its own).
    pub(crate) fn anonymous(&self, n: u64) -> Tenant {
        let secret = self.secret();
        Tenant::new(format!(
            "anon-{}",
            hmac_hex(&secret, b"anonymous", &n.to_be_bytes())
        ))
    }

    /// Compares the secret with `store`'s once: stores it when the store has none, adopts the
    /// store's when it differs. `true` when the secret changed.
    pub(crate) async fn sync(&self, store: &dyn HandoffStore) -> bool {
        match store.secret(TENANT_SECRET, self.secret()).await {
            Ok(stored) => {
                let changed = self.adopt(stored);
                if changed {
                    metrics::counter!("context_relay_gateway_tenant_secret_adopted_total")
                        .increment(1);
                    tracing::warn!(
                        "the store holds another tenant secret (it was emptied and another \
                         replica stored its own): adopted it, so that replicas key tenants alike"
                    );
                }
                changed
            }
            Err(e) => {
                tracing::debug!("tenant secret not compared with the store: {e}");
                false
            }
        }
    }

    /// The number of memoised tenants (for tests).
    #[cfg(test)]
    pub(crate) fn memoised(&self) -> usize {
        self.lock().memo.len()
    }
}

/// Runs [`TenantKeys::sync`] every `every` until the handle is dropped.
pub(crate) fn spawn_sync(
    keys: TenantKeys,
    store: Arc<dyn HandoffStore>,
    every: Duration,
) -> SyncHandle {
    SyncHandle(tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate: the gateway compared at start already.
        tick.tick().await;
        loop {
            tick.tick().await;
            keys.sync(&*store).await;
        }
    }))
}

/// Owns the task of [`spawn_sync`]; dropping it stops the task.
#[derive(Debug)]
pub(crate) struct SyncHandle(JoinHandle<()>);

impl Drop for SyncHandle {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A fresh random secret for [`TENANT_SECRET`].
pub(crate) fn random_secret() -> Result<[u8; 32], getrandom::Error> {
    let mut s = [0u8; 32];
    getrandom::fill(&mut s)?;
    Ok(s)
}

/// 32 hex digits of HMAC-SHA256(`secret`, `domain` ‖ 0 ‖ `data`).
pub(crate) fn hmac_hex(secret: &[u8; 32], domain: &[u8], data: &[u8]) -> String {
    // HMAC accepts keys of any length: the fallback is never taken.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret)
        .unwrap_or_else(|_| <Hmac<Sha256> as KeyInit>::new(&Default::default()));
    mac.update(domain);
    mac.update(&[0]);
    mac.update(data);
    let out = mac.finalize().into_bytes();
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(32);
    for b in &out[..16] {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 15)]));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_are_memoised_within_a_bound_and_forgotten_with_the_secret() {
        let keys = TenantKeys::new([1; 32]);
        let t = |key: &str| keys.tenant(key.as_bytes()).0.to_string();
        let first = t("sk-1");
        assert_eq!(
            first,
            format!("k-{}", hmac_hex(&[1; 32], b"credential", b"sk-1"))
        );
        assert_eq!(t("sk-1"), first);
        assert_eq!(keys.memoised(), 1);
        for i in 0..MEMO_MAX + 10 {
            t(&format!("sk-x{i}"));
        }
        assert!(keys.memoised() <= MEMO_MAX);
        // Forgotten or not, a credential keeps its tenant.
        assert_eq!(t("sk-1"), first);
        // A credential longer than a key is hashed each time, never kept.
        let long = "k".repeat(MEMO_KEY_MAX + 1);
        let before = keys.memoised();
        assert_eq!(t(&long), t(&long));
        assert_eq!(keys.memoised(), before);
        // Another secret: another tenant, and nothing memoised under the old one is used.
        assert!(keys.adopt([2; 32]));
        assert!(!keys.adopt([2; 32]));
        assert_eq!(keys.memoised(), 0);
        assert_eq!(
            t("sk-1"),
            format!("k-{}", hmac_hex(&[2; 32], b"credential", b"sk-1"))
        );
    }

    /// A store emptied while two replicas run, and a third replica started then with its own
    /// secret: after one comparison each, all three key a credential alike.
    #[tokio::test]
    async fn replicas_agree_again_after_the_store_lost_the_secret() {
        let dir = tempfile::tempdir().unwrap();
        // The store as it came back: empty.
        let store: Arc<dyn HandoffStore> =
            Arc::new(context_relay_store::RedbStore::open(dir.path().join("h.redb")).unwrap());
        let a = TenantKeys::new([1; 32]);
        let b = TenantKeys::new([1; 32]);
        // c started then and stored its own.
        let c = TenantKeys::new([3; 32]);
        assert!(!c.sync(&*store).await);
        assert_ne!(a.tenant(b"sk-1"), c.tenant(b"sk-1"));
        assert!(a.sync(&*store).await);
        assert!(b.sync(&*store).await);
        assert!(!c.sync(&*store).await);
        assert_eq!(a.tenant(b"sk-1"), c.tenant(b"sk-1"));
        assert_eq!(b.tenant(b"sk-1"), c.tenant(b"sk-1"));
    }
}
