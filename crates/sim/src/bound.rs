//! Account-bound state of the simulated provider: minted per account, verified on every
//! request, rejected with the real providers' error bodies when it belongs to another account.
//!
//! Real providers bind some of what they return to the account that produced it, and clients
//! resend it on every turn:
//!
//! - Responses API: `reasoning` items carry an `encrypted_content` blob (asked for with
//!   `include: ["reasoning.encrypted_content"]`, which Codex always sends with `store: false`);
//!   `compaction` items and the encrypted outputs of Codex's multi-agent tools carry one too;
//!   a `previous_response_id` names a response stored (`store` not `false`) by the account.
//! - Messages API: `thinking` blocks carry a `signature`, `redacted_thinking` blocks a `data`
//!   blob.
//!
//! Here a blob is a nonce plus a keyed digest of it under a secret of the minting account
//! (`sha256(secret ‖ nonce)`), padded to a realistic size: only that account verifies it, and
//! its owner can be told for assertions ([`owner`]). The error bodies are those the real APIs
//! send, so the relay's repair classifier is tested against what it will meet.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Prefix of Responses blobs (real ones are Fernet tokens, which start like this).
const ENCRYPTED_PREFIX: &str = "gAAAAAB";
/// Prefix of Anthropic signatures (real ones are base64 protobufs starting like this).
const SIGNATURE_PREFIX: &str = "EqQB";

/// A rejection of account-bound state, as the real API words it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Rejection {
    /// The error code (OpenAI) or a stable label (Anthropic), for the recorded request.
    pub(super) code: &'static str,
    /// The whole JSON error body.
    pub(super) body: Value,
    /// The HTTP status (400, or 404 for an item that was never stored).
    pub(super) status: u16,
}

/// Mints account-bound blobs (`encrypted_content`, thinking signatures) the way the simulated
/// provider does: a keyed hash of (seed, account, nonce) padded to a realistic size, so only
/// the minting account verifies it. Test doubles that bind state to accounts share it.
///
/// ```
/// use context_relay_sim::Minter;
/// let m = Minter::new(7, 2048);
/// assert_eq!(m.encrypted("a", "1").len(), 2048);
/// assert_ne!(m.encrypted("a", "1"), m.encrypted("b", "1"));
/// ```
#[derive(Debug, Clone)]
pub struct Minter {
    seed: u64,
    blob_bytes: usize,
}

impl Minter {
    /// A minter with its secret `seed`, minting blobs of `blob_bytes` bytes.
    pub fn new(seed: u64, blob_bytes: usize) -> Self {
        Self { seed, blob_bytes }
    }

    fn mac(&self, account: &str, nonce: &str) -> String {
        let mut h = Sha256::new();
        h.update(self.seed.to_le_bytes());
        h.update(account.as_bytes());
        h.update([0]);
        h.update(nonce.as_bytes());
        hex(&h.finalize()[..16])
    }

    fn mint(&self, prefix: &str, account: &str, nonce: &str) -> String {
        let mut out = format!("{prefix}{nonce}.{}.", self.mac(account, nonce));
        // Real blobs are kilobytes; pad deterministically so bodies have realistic sizes.
        let mut filler = Sha256::digest(out.as_bytes()).to_vec();
        while out.len() < self.blob_bytes {
            filler = Sha256::digest(&filler).to_vec();
            out.push_str(&hex(&filler));
        }
        out.truncate(self.blob_bytes.max(out.find('.').map_or(0, |i| i + 34)));
        out
    }

    /// An `encrypted_content` blob minted by `account`.
    pub fn encrypted(&self, account: &str, nonce: &str) -> String {
        self.mint(ENCRYPTED_PREFIX, account, nonce)
    }

    /// A thinking `signature` minted by `account`.
    pub fn signature(&self, account: &str, nonce: &str) -> String {
        self.mint(SIGNATURE_PREFIX, account, nonce)
    }

    /// The nonce `blob` was minted with (whoever minted it).
    pub(super) fn nonce(blob: &str) -> Option<&str> {
        let body = blob
            .strip_prefix(ENCRYPTED_PREFIX)
            .or_else(|| blob.strip_prefix(SIGNATURE_PREFIX))?;
        body.split_once('.').map(|(nonce, _)| nonce)
    }

    /// Whether `blob` was minted by `account`.
    pub(super) fn verifies(&self, account: &str, blob: &str) -> bool {
        let body = blob
            .strip_prefix(ENCRYPTED_PREFIX)
            .or_else(|| blob.strip_prefix(SIGNATURE_PREFIX));
        let Some(mut parts) = body.map(|b| b.splitn(3, '.')) else {
            return false;
        };
        match (parts.next(), parts.next()) {
            (Some(nonce), Some(mac)) => self.mac(account, nonce) == mac,
            _ => false,
        }
    }

    /// Which of `accounts` minted `blob`, if any.
    pub fn owner<'a>(&self, accounts: &'a [String], blob: &str) -> Option<&'a str> {
        accounts
            .iter()
            .find(|a| self.verifies(a, blob))
            .map(String::as_str)
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Responses (and their reasoning items) stored by requests without `store: false`:
/// id → account.
pub(super) type StoredResponses = HashMap<String, String>;

fn openai_error(message: String, param: Value, code: &'static str) -> Rejection {
    Rejection {
        code,
        body: json!({"error": {"message": message, "type": "invalid_request_error",
                               "param": param, "code": code}}),
        status: 400,
    }
}

fn anthropic_error(code: &'static str, message: String) -> Rejection {
    Rejection {
        code,
        body: json!({"type": "error",
                     "error": {"type": "invalid_request_error", "message": message},
                     "request_id": "req_sim"}),
        status: 400,
    }
}

/// Short form of a blob in messages, as the real API abbreviates it (`gAAA...DQ==`).
fn abbreviated(blob: &str) -> String {
    let head: String = blob.chars().take(4).collect();
    let tail: String = {
        let v: Vec<char> = blob.chars().rev().take(4).collect();
        v.into_iter().rev().collect()
    };
    format!("{head}...{tail}")
}

/// The first problem with account-bound state in a Responses request served by `account`.
pub(super) fn check_responses(
    minter: &Minter,
    stored: &StoredResponses,
    account: &str,
    request: &Value,
) -> Option<Rejection> {
    if let Some(prev) = request.get("previous_response_id").and_then(Value::as_str)
        && stored.get(prev).map(String::as_str) != Some(account)
    {
        return Some(openai_error(
            format!("Previous response with id '{prev}' not found."),
            json!("previous_response_id"),
            "previous_response_not_found",
        ));
    }
    let items = request.get("input").and_then(Value::as_array)?;
    for item in items {
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
        let Some(blob) = item.get("encrypted_content").and_then(Value::as_str) else {
            // A reasoning item sent by id only must be one the account stored.
            if kind == "reasoning"
                && let Some(id) = item.get("id").and_then(Value::as_str)
                && stored.get(id).map(String::as_str) != Some(account)
            {
                return Some(Rejection {
                    code: "item_not_found",
                    body: json!({"error": {"message": format!("Item with id '{id}' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input."),
                                           "type": "invalid_request_error", "param": "input",
                                           "code": null}}),
                    status: 404,
                });
            }
            continue;
        };
        if minter.verifies(account, blob) {
            continue;
        }
        if kind == "reasoning" || kind == "compaction" {
            let name = item
                .get("id")
                .and_then(Value::as_str)
                .map_or_else(|| abbreviated(blob), str::to_owned);
            return Some(openai_error(
                format!(
                    "The encrypted content for item {name} could not be verified. Reason: Encrypted content could not be decrypted or parsed."
                ),
                Value::Null,
                "invalid_encrypted_content",
            ));
        }
        // Codex's multi-agent tools: encrypted outputs and agent messages.
        return Some(Rejection {
            code: "invalid_request_body",
            body: json!({"error": {"message": "Encrypted function output content could not be decrypted or decoded.",
                                   "type": "invalid_request_error", "param": null,
                                   "code": "invalid_request_body"}}),
            status: 400,
        });
    }
    None
}

fn thinking_on(request: &Value) -> bool {
    matches!(
        request.pointer("/thinking/type").and_then(Value::as_str),
        Some("enabled" | "adaptive")
    )
}

fn block_type(block: &Value) -> &str {
    block.get("type").and_then(Value::as_str).unwrap_or("")
}

fn is_thinking(block: &Value) -> bool {
    matches!(block_type(block), "thinking" | "redacted_thinking")
}

/// The first problem with a Messages request served by `account`: thinking rules the API
/// enforces, then the signatures of `thinking` / `redacted_thinking` blocks.
pub(super) fn check_messages(minter: &Minter, account: &str, request: &Value) -> Option<Rejection> {
    let on = thinking_on(request);
    if !on
        && let Some(edits) = request
            .pointer("/context_management/edits")
            .and_then(Value::as_array)
        && let Some(edit) = edits
            .iter()
            .map(block_type)
            .find(|t| t.starts_with("clear_thinking"))
    {
        return Some(anthropic_error(
            "thinking_required",
            format!("`{edit}` strategy requires `thinking` to be enabled or adaptive"),
        ));
    }
    let messages = request.get("messages").and_then(Value::as_array)?;
    let content = |m: &Value| m.get("content").and_then(Value::as_array).cloned();
    let role = |m: &Value| {
        m.get("role")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    if let Some(last) = messages.last() {
        // The assistant turn the request continues: the last message itself (a prefill), or
        // the one before a user turn that returns tool results.
        let continued = match role(last).as_str() {
            "assistant" => Some(messages.len() - 1),
            "user"
                if content(last)
                    .is_some_and(|c| c.iter().any(|b| block_type(b) == "tool_result")) =>
            {
                messages[..messages.len() - 1]
                    .iter()
                    .rposition(|m| role(m) == "assistant")
            }
            _ => None,
        };
        // Only extended thinking with a budget requires the block: an adaptive model may
        // answer a tool loop step without thinking, and the API takes such a turn back as it
        // is (a real Claude Code capture carries one: `shared/fixtures/clients/
        // claude-tool-roundtrip/03-…`).
        let budgeted = request.pointer("/thinking/type").and_then(Value::as_str) == Some("enabled");
        if budgeted
            && let Some(i) = continued
            && let Some(first) = content(&messages[i]).and_then(|c| c.first().cloned())
            && !is_thinking(&first)
        {
            return Some(anthropic_error(
                "thinking_block_required",
                format!(
                    "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{}`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking",
                    block_type(&first)
                ),
            ));
        }
        if !on
            && role(last) == "assistant"
            && content(last).is_some_and(|c| c.iter().any(is_thinking))
        {
            return Some(anthropic_error(
                "thinking_disabled",
                format!(
                    "messages.{}.content.0: When thinking is disabled, an `assistant` message in the final position cannot contain `thinking`. To use thinking blocks, enable `thinking` in your request.",
                    messages.len() - 1
                ),
            ));
        }
    }
    for (i, m) in messages.iter().enumerate() {
        let Some(blocks) = content(m) else { continue };
        for (j, b) in blocks.iter().enumerate() {
            let (field, kind) = match block_type(b) {
                "thinking" => ("signature", "thinking"),
                "redacted_thinking" => ("data", "redacted_thinking"),
                _ => continue,
            };
            let blob = b.get(field).and_then(Value::as_str).unwrap_or("");
            if !minter.verifies(account, blob) {
                return Some(anthropic_error(
                    "invalid_signature",
                    format!("messages.{i}.content.{j}: Invalid `{field}` in `{kind}` block"),
                ));
            }
        }
    }
    None
}

/// Every piece of account-bound state in a request body, with the account that minted it
/// (`None`: minted by no account of this sim, or a response id it never stored).
pub(super) fn owners(
    minter: &Minter,
    stored: &StoredResponses,
    accounts: &[String],
    request: &Value,
) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    if let Some(prev) = request.get("previous_response_id").and_then(Value::as_str) {
        out.push(("previous_response_id".to_owned(), stored.get(prev).cloned()));
    }
    if let Some(items) = request.get("input").and_then(Value::as_array) {
        for item in items {
            if let Some(blob) = item.get("encrypted_content").and_then(Value::as_str) {
                let kind = item.get("type").and_then(Value::as_str).unwrap_or("item");
                out.push((
                    kind.to_owned(),
                    minter.owner(accounts, blob).map(str::to_owned),
                ));
            }
        }
    }
    if let Some(messages) = request.get("messages").and_then(Value::as_array) {
        for b in messages
            .iter()
            .filter_map(|m| m.get("content").and_then(Value::as_array))
            .flatten()
        {
            let blob = match block_type(b) {
                "thinking" => b.get("signature"),
                "redacted_thinking" => b.get("data"),
                _ => continue,
            };
            let blob = blob.and_then(Value::as_str).unwrap_or("");
            out.push((
                block_type(b).to_owned(),
                minter.owner(accounts, blob).map(str::to_owned),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m() -> Minter {
        Minter::new(7, 1200)
    }

    #[test]
    fn blobs_verify_only_for_their_account_and_have_real_sizes() {
        let m = m();
        let blob = m.encrypted("a", "n1");
        assert!(blob.starts_with("gAAAAAB"));
        assert_eq!(blob.len(), 1200);
        assert!(m.verifies("a", &blob));
        assert!(!m.verifies("b", &blob));
        assert!(!m.verifies("a", "gAAAAABreasoningblobfromaccountA=="));
        let accounts = ["a".to_owned(), "b".to_owned()];
        assert_eq!(m.owner(&accounts, &m.signature("b", "n2")), Some("b"));
        // Another sim instance (another seed) verifies nothing of this one.
        assert!(!Minter::new(8, 1200).verifies("a", &blob));
    }

    #[test]
    fn responses_rejections_are_the_real_bodies() {
        let m = m();
        let mut stored = StoredResponses::new();
        stored.insert("resp_1".into(), "a".into());
        let req = json!({"previous_response_id": "resp_1", "input": []});
        assert_eq!(check_responses(&m, &stored, "a", &req), None);
        let r = check_responses(&m, &stored, "b", &req).unwrap();
        assert_eq!(r.code, "previous_response_not_found");
        assert_eq!(
            r.body["error"]["message"],
            "Previous response with id 'resp_1' not found."
        );
        assert_eq!(r.body["error"]["param"], "previous_response_id");
        let req = json!({"input": [
            {"type": "reasoning", "id": "rs_9", "summary": [], "encrypted_content": m.encrypted("a", "x")}
        ]});
        assert_eq!(check_responses(&m, &stored, "a", &req), None);
        let r = check_responses(&m, &stored, "b", &req).unwrap();
        assert_eq!(r.body["error"]["code"], "invalid_encrypted_content");
        assert_eq!(
            r.body["error"]["message"],
            "The encrypted content for item rs_9 could not be verified. Reason: Encrypted content could not be decrypted or parsed."
        );
        // A reasoning item by id alone: only found where it was stored.
        stored.insert("rs_stored".into(), "a".into());
        let req = json!({"input": [{"type": "reasoning", "id": "rs_stored", "summary": []}]});
        assert_eq!(check_responses(&m, &stored, "a", &req), None);
        let r = check_responses(&m, &stored, "b", &req).unwrap();
        assert_eq!(r.status, 404);
        assert_eq!(r.body["error"]["param"], "input");
        assert!(r.body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Item with id 'rs_stored' not found. Items are not persisted when `store` is set to false."));
        let req = json!({"input": [{"type": "function_call_output", "call_id": "c",
            "encrypted_content": m.encrypted("a", "y")}]});
        let r = check_responses(&m, &stored, "b", &req).unwrap();
        assert_eq!(
            r.body["error"]["message"],
            "Encrypted function output content could not be decrypted or decoded."
        );
    }

    #[test]
    fn messages_rejections_are_the_real_bodies() {
        let m = m();
        let sig = m.signature("a", "s");
        let req = json!({"thinking": {"type": "adaptive"}, "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": sig},
                                              {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}
        ]});
        assert_eq!(check_messages(&m, "a", &req), None);
        let r = check_messages(&m, "b", &req).unwrap();
        assert_eq!(
            r.body["error"]["message"],
            "messages.1.content.0: Invalid `signature` in `thinking` block"
        );
        assert_eq!(r.body["type"], "error");
        assert_eq!(r.body["error"]["type"], "invalid_request_error");
        // Without its thinking block, the tool cycle breaks the thinking rule of budgeted
        // thinking; adaptive thinking takes the step as it is (the model may not think).
        let mut stripped = req.clone();
        stripped["messages"][1]["content"]
            .as_array_mut()
            .unwrap()
            .remove(0);
        assert_eq!(check_messages(&m, "b", &stripped), None);
        stripped["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
        let r = check_messages(&m, "b", &stripped).unwrap();
        assert!(r.body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`."));
        // Thinking off: fine, unless a clear_thinking edit is left.
        stripped["thinking"] = json!({"type": "disabled"});
        assert_eq!(check_messages(&m, "b", &stripped), None);
        stripped["context_management"] =
            json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]});
        let r = check_messages(&m, "b", &stripped).unwrap();
        assert_eq!(
            r.body["error"]["message"],
            "`clear_thinking_20251015` strategy requires `thinking` to be enabled or adaptive"
        );
    }
}
