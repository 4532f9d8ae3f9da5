//! A session's affinity in Redis: read (with what this replica kept when a write failed,
//! `unwritten`), written, and written back once Redis takes writes again.

use context_relay_core::HandoffKey;
use context_relay_core::time::{from_unix_millis, to_unix_millis};

use super::RedisStore;
use super::scripts::{Foreign, millis};
use super::unwritten::Resolved;
use crate::affinity::{self, Write};
use crate::{Affinity, StoreError, report_corrupt};

impl RedisStore {
    /// Writes `a` for the session of `key` to Redis (the cache is the caller's).
    pub(super) async fn write_affinity(
        &self,
        key: &HandoffKey,
        a: &Affinity,
    ) -> Result<(), StoreError> {
        self.write_affinity_if(key, a, None).await.map(drop)
    }

    /// [`Self::write_affinity`], with `over` (`Some`) only while Redis still holds it (the
    /// account and model of `Some(affinity)`, or nothing for `None`): whether it was written
    /// (or was already there), `false` when Redis holds something else.
    pub(super) async fn write_affinity_if(
        &self,
        key: &HandoffKey,
        a: &Affinity,
        over: Option<Option<&Affinity>>,
    ) -> Result<bool, StoreError> {
        let foreign = serde_json::to_string(&Foreign {
            foreign: (*a.foreign).clone(),
            until: to_unix_millis(a.foreign_expires_at),
        })?;
        let ttl = millis(self.inner.affinity_ttl).max(1);
        let mut inv = self.inner.scripts.set_affinity.prepare_invoke();
        inv.key(self.affinity_key(key))
            .arg(&**a.account().provider())
            .arg(&**a.account().account())
            .arg(ttl)
            .arg(ttl / 4 * 3)
            .arg(foreign)
            .arg(a.model().unwrap_or_default());
        match over {
            None => {}
            Some(None) => {
                inv.arg("none");
            }
            Some(Some(o)) => {
                inv.arg("is")
                    .arg(&**o.account().provider())
                    .arg(&**o.account().account())
                    .arg(o.model().unwrap_or_default());
            }
        }
        let mut conn = self.conn();
        let written: i64 = self
            .call("set_affinity", inv.invoke_async(&mut conn))
            .await?;
        Ok(written >= 0)
    }

    /// Whether `a` must be written under `k` (the affinity table's key): `None` when the same
    /// affinity was written recently, else what Redis is known to hold under `k` before it.
    /// An affinity whose last write failed is always written again.
    pub(super) fn needs_write(&self, k: &str, a: &Affinity) -> Option<Option<Affinity>> {
        let cache = &self.inner.affinity_cache;
        let unwritten = &self.inner.unwritten;
        let fresh = self.inner.affinity_cache_ttl;
        if !unwritten.contains(k) && cache.needs_write(k, a, self.now_ms(), fresh) == Write::Skip {
            return None;
        }
        Some(unwritten.base(k, cache.peek(k)))
    }

    /// The session's affinity from what [`Unwritten::resolve`] answered: a kept decision is
    /// written again first (the engine writes an affinity only when it changes, so without
    /// this Redis would not learn it once it takes writes again).
    ///
    /// [`Unwritten::resolve`]: super::unwritten::Unwritten::resolve
    async fn settle(&self, key: &HandoffKey, resolved: Resolved) -> Option<Affinity> {
        let kept = match resolved {
            Resolved::Read(read) => return read,
            Resolved::Kept(kept) => kept,
        };
        let k = affinity::key(key);
        let base = self.inner.unwritten.base(&k, None);
        // Only over what it was to replace: a concurrent write (another request of the
        // session, another replica) that landed since wins.
        match self
            .write_affinity_if(key, &kept, Some(base.as_ref()))
            .await
        {
            // Written, or Redis moved on meanwhile (its value is read next time).
            Ok(_) => self.inner.unwritten.settled(&k, &kept),
            Err(_) => self.inner.unwritten.still_failing(&k, &kept, self.now_ms()),
        }
        Some(kept)
    }

    /// Records the outcome of writing `a` under `k` over `base` (see [`Self::needs_write`]).
    pub(super) fn after_write(
        &self,
        k: String,
        a: Affinity,
        base: Option<Affinity>,
        written: &Result<(), StoreError>,
    ) {
        let a = affinity::intern(a);
        match written {
            Ok(()) => self.inner.unwritten.written(&k),
            Err(_) => self
                .inner
                .unwritten
                .failed(k.clone(), a.clone(), base, self.now_ms()),
        }
        self.inner.affinity_cache.insert(k, a, self.now_ms());
    }

    /// The session's affinity as Redis holds it, or as this replica kept it when its
    /// write failed (see `unwritten`); cached for `affinity_cache_ttl`.
    pub(super) async fn read_affinity(
        &self,
        key: &HandoffKey,
    ) -> Result<Option<Affinity>, StoreError> {
        let mut conn = self.conn();
        let cmd = redis::cmd("HMGET")
            .arg(self.affinity_key(key))
            .arg("p")
            .arg("a")
            .arg("f")
            .arg("m")
            .to_owned();
        type Fields = (
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
        );
        let (p, a, f, m): Fields = self.call("affinity", cmd.query_async(&mut conn)).await?;
        let (Some(p), Some(a)) = (p, a) else {
            let resolved = affinity::with_key(key, |k| self.inner.unwritten.resolve(k, None));
            return Ok(self.settle(key, resolved).await);
        };
        let foreign = match f.as_deref().map(serde_json::from_str::<Foreign>) {
            Some(Ok(f)) => f,
            None => Foreign::default(),
            Some(Err(e)) => {
                report_corrupt("redis", key, &format_args!("foreign digests: {e}"));
                Foreign::default()
            }
        };
        let mut found =
            Affinity::new(p, a).with_foreign(foreign.foreign, from_unix_millis(foreign.until));
        if let Some(m) = m.filter(|m| !m.is_empty()) {
            found = found.with_model(m);
        }
        let k = affinity::key(key);
        let resolved = self
            .inner
            .unwritten
            .resolve(&k, Some(affinity::intern(found)));
        let Some(found) = self.settle(key, resolved).await else {
            return Ok(None);
        };
        self.inner
            .affinity_cache
            .insert(k, found.clone(), self.now_ms());
        Ok(Some(found))
    }
}
