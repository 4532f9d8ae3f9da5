//! A Responses request's `compaction` items in its summary: the encrypted context a client's
//! remote compaction left, which only the account that minted it can read. The summary request
//! carries those the serving account can read, before its prompt.

use std::time::SystemTime;

use context_relay_core::{ApiShape, HandoffKey, portable};
use serde_json::Value;

use crate::relay::Shared;

/// The `compaction` items of a Responses request, with the digest of their blob as the
/// scrub records it (the JSON string as serialized; clients send it unescaped).
pub(super) fn items(shape: ApiShape, value: &Value) -> Vec<(Value, u64)> {
    if shape != ApiShape::Responses {
        return Vec::new();
    }
    let items = value.get("input").and_then(Value::as_array);
    items
        .into_iter()
        .flatten()
        .filter(|item| item.get("type").and_then(Value::as_str) == Some("compaction"))
        .filter_map(|item| {
            let blob = item.get("encrypted_content").filter(|b| b.is_string())?;
            let digest = portable::digest(&serde_json::to_vec(blob).ok()?);
            Some((item.clone(), digest))
        })
        .collect()
}

/// Those of `items` the serving account minted: the ones the session's affinity (under `key`)
/// does not record as foreign.
pub(super) async fn readable(
    shared: &Shared,
    key: &HandoffKey,
    items: Vec<(Value, u64)>,
) -> Vec<Value> {
    if items.is_empty() {
        return Vec::new();
    }
    let now = SystemTime::now();
    let affinity = shared.affinity(key).await;
    let foreign = affinity.as_ref().and_then(|a| a.foreign_at(now));
    items
        .into_iter()
        .filter(|(_, d)| !foreign.is_some_and(|f| f.contains(*d)))
        .map(|(item, _)| item)
        .collect()
}
