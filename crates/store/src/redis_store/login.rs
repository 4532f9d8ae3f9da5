//! Logins in Redis, shared by every replica: a hash `{prefix}login:<name>` with fields `v`
//! (version) and `d` (the stored bytes), written by a compare-and-set script, and the refresh
//! lock `{prefix}login-lock:<name>` (`SET NX PX` with a token, deleted only by its holder).
//! Each operation touches one key, so each runs on one node of a cluster too. Neither key
//! expires by itself except the lock: a login lives until it is replaced.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::RedisStore;
use super::scripts::millis;
use crate::login::lock_token;
use crate::{LoginLock, StoreError, StoreFuture, StoredLogin};

/// Writes `ARGV[2]` when the stored version is `ARGV[1]` (0: none); the new version, or false.
static PUT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0') or 0
if v ~= tonumber(ARGV[1]) then return false end
redis.call('HSET', KEYS[1], 'v', v + 1, 'd', ARGV[2])
return v + 1
",
    )
});

/// Deletes the lock when it still holds the caller's token.
static UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
",
    )
});

impl RedisStore {
    fn login_key(&self, name: &str) -> String {
        format!("{}login:{name}", self.inner.prefix)
    }

    fn login_lock_key(&self, name: &str) -> String {
        format!("{}login-lock:{name}", self.inner.prefix)
    }

    pub(super) fn login_now<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<StoredLogin>> {
        Box::pin(async move {
            let key = self.login_key(name);
            let cmd = redis::cmd("HMGET").arg(&key).arg("v").arg("d").to_owned();
            let mut conn = self.conn();
            let (v, d): (Option<u64>, Option<Vec<u8>>) =
                self.call("login", cmd.query_async(&mut conn)).await?;
            match (v, d) {
                (Some(version), Some(data)) => Ok(Some(StoredLogin { version, data })),
                (None, None) => Ok(None),
                _ => Err(StoreError::Corrupt {
                    key,
                    expected: "fields v and d",
                    found: "only one of them".to_owned(),
                }),
            }
        })
    }

    pub(super) fn put_login_now<'a>(
        &'a self,
        name: &'a str,
        expected: u64,
        data: &'a [u8],
    ) -> StoreFuture<'a, Option<u64>> {
        Box::pin(async move {
            let mut inv = PUT.prepare_invoke();
            inv.key(self.login_key(name)).arg(expected).arg(data);
            let mut conn = self.conn();
            self.call("put_login", inv.invoke_async(&mut conn)).await
        })
    }

    pub(super) fn lock_login_now<'a>(
        &'a self,
        name: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Option<LoginLock>> {
        Box::pin(async move {
            let token = lock_token();
            let cmd = redis::cmd("SET")
                .arg(self.login_lock_key(name))
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(millis(ttl).max(1))
                .to_owned();
            let mut conn = self.conn();
            let set: Option<String> = self.call("lock_login", cmd.query_async(&mut conn)).await?;
            Ok(set.map(|_| LoginLock::distributed(name, token)))
        })
    }

    pub(super) fn unlock_login_now<'a>(&'a self, lock: &'a LoginLock) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let Some(token) = lock.token else {
                return Ok(());
            };
            let mut inv = UNLOCK.prepare_invoke();
            inv.key(self.login_lock_key(lock.name())).arg(token);
            let mut conn = self.conn();
            let _: i64 = self
                .call("unlock_login", inv.invoke_async(&mut conn))
                .await?;
            Ok(())
        })
    }
}
