//! One Redis or a Redis Cluster behind the same calls: the connection either is, and the
//! whole-keyspace scan visits every master of a cluster.
//!
//! On a cluster every key a call touches must hash to one slot: the record keys of a session
//! (both slots and its generation lease) carry the session in a hash tag (`{…}`), so the one
//! pipeline that reads two of them goes to one node, and no script touches a second key.

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::RedisStore;
use crate::StoreError;

/// The connection: to one Redis (reconnecting in the background) or to a cluster (following
/// its slot map, redirections and failovers).
#[derive(Clone)]
pub(super) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(cmd, offset, count),
            Self::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// Where a scan runs: the one server, or one master of a cluster (named by a slot it serves).
#[derive(Clone, Copy)]
pub(super) enum ScanTarget {
    Single,
    Master(u16),
}

impl RedisStore {
    /// Every node a whole-keyspace scan must visit: each master once on a cluster.
    pub(super) async fn scan_targets(&self) -> Result<Vec<ScanTarget>, StoreError> {
        let Conn::Cluster(_) = self.inner.conn else {
            return Ok(vec![ScanTarget::Single]);
        };
        let mut conn = self.conn();
        let slots: Vec<Vec<Value>> = self
            .call(
                "scan",
                redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut conn),
            )
            .await?;
        // Each entry: start slot, end slot, then the master [host, port, id, …], then replicas.
        let mut seen: Vec<String> = Vec::new();
        let mut targets = Vec::new();
        for range in slots {
            let master = range
                .get(2)
                .and_then(|m| redis::from_redis_value_ref::<Vec<Value>>(m).ok());
            let start = range
                .first()
                .and_then(|s| redis::from_redis_value_ref::<u16>(s).ok());
            let id = master
                .as_ref()
                .and_then(|m| m.get(2))
                .and_then(|id| redis::from_redis_value_ref::<String>(id).ok());
            let (Some(start), Some(id)) = (start, id) else {
                return Err(StoreError::Redis {
                    op: "scan",
                    reason: "CLUSTER SLOTS answered an entry without a slot or a master".into(),
                });
            };
            if !seen.contains(&id) {
                seen.push(id);
                targets.push(ScanTarget::Master(start));
            }
        }
        Ok(targets)
    }

    /// One `SCAN` step on `target`: the next cursor and a batch of keys.
    pub(super) async fn scan_step(
        &self,
        target: ScanTarget,
        cmd: Cmd,
    ) -> Result<(u64, Vec<String>), StoreError> {
        match (target, self.conn()) {
            (ScanTarget::Master(slot), Conn::Cluster(mut c)) => {
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::new(slot, SlotAddr::Master),
                ));
                let value = self.call("scan", c.route_command(cmd, route)).await?;
                redis::from_redis_value(value).map_err(|e| StoreError::Redis {
                    op: "scan",
                    reason: e.to_string(),
                })
            }
            (_, mut conn) => self.call("scan", cmd.query_async(&mut conn)).await,
        }
    }
}
