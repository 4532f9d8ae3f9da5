//! Codex's remote compaction, `POST /responses/compact`: the body is a Responses request
//! (`model`, `instructions`, `input`, …) whose account-bound state is checked like a turn's;
//! the answer is the compacted history, `{"output":[…]}`: the user messages of the input, kept
//! as they are, then one `compaction` item whose `encrypted_content` this account minted. A
//! later request of another account carrying that item is refused like any foreign
//! `encrypted_content`; a summary request of the minting account can read what it replaced
//! (see `summary`).

use axum::body::Body;
use http::Response;
use serde_json::{Value, json};

use super::quota::quota_headers;
use super::{SimState, header_value};

/// The answer to a compaction request `request` served by `account` as turn `id`.
pub(super) fn reply(
    state: &SimState,
    account: &str,
    request: &Value,
    id: u64,
    used: f64,
    now: u64,
) -> Response<Body> {
    let mut output: Vec<Value> = request["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| item["type"] == "message" && item["role"] == "user")
        .cloned()
        .collect();
    let nonce = format!("cmp{id}");
    super::summary::remember(state, &nonce, &request["input"]);
    output.push(json!({
        "type": "compaction",
        "id": format!("cmp_{id:08}"),
        "encrypted_content": state.minter.encrypted(account, &nonce),
    }));
    let mut res = super::control::json_response(http::StatusCode::OK, &json!({"output": output}));
    quota_headers(&state.config, res.headers_mut(), used, now);
    res.headers_mut()
        .insert("x-sim-account", header_value(account));
    res
}
