//! What lives in Redis: the key names, the stored affinity fields and the Lua scripts that make
//! each operation atomic on the server.

use std::time::Duration;

use context_relay_core::portable::ForeignSet;
use context_relay_core::{HandoffKey, HandoffSlot};
use redis::Script;

use super::RedisStore;
use crate::affinity;

/// The foreign digests of an affinity, as stored in its `f` field.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Foreign {
    pub(super) foreign: ForeignSet,
    pub(super) until: u64,
}

/// Replaces the record with `ARGV[1]`, expiring at `ARGV[2]`, at version `ARGV[3]`; with
/// `ARGV[4]` = `offer`, not while the record is live and leased at `ARGV[5]` (0 returned).
const UPSERT: &str = r"
if ARGV[4] == 'offer' then
  local f = redis.call('HMGET', KEYS[1], 'exp', 'lu')
  local now = tonumber(ARGV[5])
  if f[1] and f[2] and tonumber(f[1]) > now and tonumber(f[2]) > now then return 0 end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'rec', ARGV[1], 'ver', ARGV[3], 'exp', ARGV[2])
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
return 1
";

/// Leases the record live at `ARGV[1]` until `ARGV[2]` under token `ARGV[3]`.
const CLAIM: &str = r"
local f = redis.call('HMGET', KEYS[1], 'rec', 'ver', 'exp', 'lu')
if not f[1] or not f[2] or not f[3] then return false end
if tonumber(f[3]) <= tonumber(ARGV[1]) then return false end
if f[4] and tonumber(f[4]) > tonumber(ARGV[1]) then return false end
redis.call('HSET', KEYS[1], 'lu', ARGV[2], 'lt', ARGV[3])
return {f[1], f[2]}
";

const COMPLETE: &str = r"
if redis.call('HGET', KEYS[1], 'ver') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
";

const RELEASE: &str = r"
local f = redis.call('HMGET', KEYS[1], 'ver', 'lt')
if f[1] == ARGV[1] and f[2] == ARGV[2] then
  redis.call('HDEL', KEYS[1], 'lu', 'lt')
end
return 0
";

/// Deletes the record; 1 when it was live at `ARGV[1]`.
const DELETE: &str = r"
local e = redis.call('HGET', KEYS[1], 'exp')
redis.call('DEL', KEYS[1])
if e and tonumber(e) > tonumber(ARGV[1]) then return 1 end
return 0
";

/// Deletes the record if it expired at `ARGV[1]`.
const PURGE_ONE: &str = r"
local e = redis.call('HGET', KEYS[1], 'exp')
if e and tonumber(e) <= tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
";

/// Writes the affinity unless it holds the same account, foreign digests and model and was
/// written recently (its TTL is still above `ARGV[4]`): the common case costs no write. An
/// empty model (`ARGV[6]`) is an unknown one: no `m` field, as older code wrote it.
const SET_AFFINITY: &str = r"
local f = redis.call('HMGET', KEYS[1], 'p', 'a', 'f', 'm')
-- Conditional (a replica writing back what it kept): only over what it expects Redis holds.
if ARGV[7] == 'none' and f[1] then return -1 end
if ARGV[7] == 'is' and (f[1] ~= ARGV[8] or f[2] ~= ARGV[9] or (f[4] or '') ~= ARGV[10]) then
  return -1
end
if f[1] == ARGV[1] and f[2] == ARGV[2] and f[3] == ARGV[5] and (f[4] or '') == ARGV[6]
  and redis.call('PTTL', KEYS[1]) > tonumber(ARGV[4]) then
  return 0
end
redis.call('HSET', KEYS[1], 'p', ARGV[1], 'a', ARGV[2], 'f', ARGV[5])
if ARGV[6] == '' then
  redis.call('HDEL', KEYS[1], 'm')
else
  redis.call('HSET', KEYS[1], 'm', ARGV[6])
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
";

const END_GENERATION: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
";

pub(super) struct Scripts {
    pub(super) upsert: Script,
    pub(super) claim: Script,
    pub(super) complete: Script,
    pub(super) release: Script,
    pub(super) delete: Script,
    pub(super) purge_one: Script,
    pub(super) set_affinity: Script,
    pub(super) end_generation: Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        Self {
            upsert: Script::new(UPSERT),
            claim: Script::new(CLAIM),
            complete: Script::new(COMPLETE),
            release: Script::new(RELEASE),
            delete: Script::new(DELETE),
            purge_one: Script::new(PURGE_ONE),
            set_affinity: Script::new(SET_AFFINITY),
            end_generation: Script::new(END_GENERATION),
        }
    }
}

impl RedisStore {
    /// `{prefix}{kind}:` then the three parts, length-prefixed so that no two keys collide
    /// whatever characters they contain. On a cluster the parts are a hash tag (`{…}`): every
    /// key of one session lives in one slot, whatever its kind.
    pub(super) fn key(&self, kind: &str, key: &HandoffKey) -> String {
        let (open, close) = if self.is_cluster() {
            ("{", "}")
        } else {
            ("", "")
        };
        format!(
            "{}{kind}:{open}{}.{}.{}:{}{}{}{close}",
            self.inner.prefix,
            key.tenant.len(),
            key.session.len(),
            key.combo.len(),
            key.tenant,
            key.session,
            key.combo
        )
    }

    /// The hash of `key`'s record in `slot`: `h` for the account slot, `hm` for the model slot.
    pub(super) fn record_key(&self, key: &HandoffKey, slot: HandoffSlot) -> String {
        self.key(record_tag(slot), key)
    }

    pub(super) fn affinity_key(&self, key: &HandoffKey) -> String {
        format!("{}ac:{}", self.inner.prefix, affinity::key(key))
    }
}

/// The key kind of the records of `slot`.
pub(super) fn record_tag(slot: HandoffSlot) -> &'static str {
    match slot {
        HandoffSlot::Account => "h",
        HandoffSlot::Model => "hm",
    }
}

/// Escapes glob metacharacters for SCAN MATCH.
pub(super) fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
