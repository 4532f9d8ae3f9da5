//! The invariants of every cell, read from every request the provider recorded (client turns,
//! retries, rejected attempts, compaction and summary requests):
//!
//! 0. (the cell's own check) the cause moved every conversation: the session's first request
//!    away from `p1` at session start, else at least one switch per conversation;
//! 1. every request the client sends gets a 200 with a complete reply (checked as the script
//!    plays);
//! 2. no account receives state another account minted (reasoning and compaction blobs,
//!    thinking signatures, thought signatures, stored response ids), and no attempt is
//!    rejected for anything but the cause itself: relying on the provider's 400 and a repair
//!    breaks this invariant;
//! 3. every switch carries exactly one handoff: the first request of each conversation on
//!    its new account contains exactly one `<context_handoff>`, every other request none;
//! 4. no handoff reaches a conversation it does not summarise: each injected block carries
//!    its own conversation's task and no other conversation's;
//! 5. (after compaction) the note that replaces the old account's `compaction` item says only
//!    what is true: if it says the compacted context is summarised in the handoff, the handoff
//!    carries what only the compacted context held.

use context_relay_sim::RecordedRequest;

use super::Cell;
use super::script::Conv;
use super::setup::{MODEL_WRITTEN, PRIMARY};
use context_relay_testkit::agents::Shape;
use context_relay_testkit::handoff::HANDOFF_TAG;
use context_relay_testkit::harness::Harness;

/// The end tag of a handoff block.
const HANDOFF_END: &str = "</context_handoff>";
/// What the compaction note says when it claims the handoff holds the compacted context.
const NOTE_CLAIMS_HANDOFF: &str = "it is summarised in the context handoff";
/// Words of the bare model-switch note (no summary).
const BARE_NOTE: &str = "no summary of the earlier session exists";

/// A broken invariant: its number and title, and the evidence.
pub type Broken = (String, String);

fn broken(n: u8, evidence: String) -> Broken {
    let title = match n {
        0 => "0 the cause moved the session",
        1 => "1 every request gets a 200",
        2 => "2 no foreign state, no rejected attempt",
        3 => "3 one handoff per switch",
        4 => "4 handoff of its own conversation",
        _ => "5 the compaction note is true",
    };
    (title.to_owned(), evidence)
}

/// The client-side failure of the script as a broken invariant 1.
pub fn failed_request(evidence: String) -> Broken {
    broken(1, evidence)
}

/// The handoff blocks of a body (as sent: JSON-escaped text).
fn blocks(body: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = body;
    while let Some(start) = rest.find(HANDOFF_TAG) {
        let block = &rest[start..];
        let end = block
            .find(HANDOFF_END)
            .map_or(block.len(), |e| e + HANDOFF_END.len());
        out.push(&block[..end]);
        rest = &block[end..];
    }
    out
}

/// The body without its handoff blocks: the conversation as the client sent it.
fn without_blocks(body: &str) -> String {
    let mut out = String::with_capacity(body.len());
    let mut rest = body;
    while let Some(start) = rest.find(HANDOFF_TAG) {
        out.push_str(&rest[..start]);
        let block = &rest[start..];
        let end = block
            .find(HANDOFF_END)
            .map_or(block.len(), |e| e + HANDOFF_END.len());
        rest = &block[end..];
    }
    out.push_str(rest);
    out
}

fn short(s: &str) -> String {
    let s: String = s.chars().take(220).collect();
    s.replace("\\n", " ")
}

/// What a handoff block is: written by the model, the bare model-switch note, or built from
/// the request (extractive).
fn kind(block: &str, whole: &str) -> &'static str {
    if block.contains(MODEL_WRITTEN) {
        "model-written"
    } else if whole.contains(BARE_NOTE) {
        "bare note"
    } else {
        "extractive"
    }
}

/// Checks invariants 2 to 5 over what `h`'s provider recorded; on success, what each
/// conversation's first request on a new account carried.
pub fn check(
    h: &Harness,
    cell: &Cell,
    convs: &[&Conv],
    armed_at: usize,
    fact: &str,
) -> Result<String, Broken> {
    let requests = h.sim.requests();
    let account = |r: &RecordedRequest| r.account.clone().unwrap_or_else(|| "?".into());
    // 2: state and rejections.
    for (i, r) in requests.iter().enumerate() {
        // Each shape's state is read by one parser of the recorded body.
        let owners: Vec<(String, Option<String>)> = if cell.shape == Shape::Gemini {
            h.sim
                .thought_signature_owners(r)
                .into_iter()
                .map(|(_, o)| ("thoughtSignature".to_owned(), o))
                .collect()
        } else {
            h.sim.state_owners(r)
        };
        for (what, owner) in owners {
            if let Some(owner) = owner
                && Some(&owner) != r.account.as_ref()
            {
                let kind = if r.summary {
                    "summary request"
                } else {
                    "request"
                };
                return Err(broken(
                    2,
                    format!(
                        "{kind} #{i} ({}) to {} carried {what} minted by {owner}",
                        r.uri.path(),
                        account(r)
                    ),
                ));
            }
        }
        if let Some(code) = &r.rejected
            && !cell.cause.explains(code)
        {
            let body = String::from_utf8_lossy(&r.body);
            return Err(broken(
                2,
                format!(
                    "the provider rejected request #{i} to {} ({code}){}",
                    account(r),
                    if r.summary { ", a summary request" } else { "" }
                ) + &if code.starts_with("thinking") {
                    format!("; thinking {}", thinking_of(&body))
                } else {
                    String::new()
                },
            ));
        }
    }
    // 3, 4: handoffs per conversation.
    let mut received = Vec::new();
    for conv in convs {
        let mut last_served: Option<String> = None;
        let mut first_served: Option<String> = None;
        let mut switches = 0;
        for (i, r) in requests.iter().enumerate() {
            if r.summary {
                continue;
            }
            let body = String::from_utf8_lossy(&r.body);
            let plain = without_blocks(&body);
            if !plain.contains(&conv.task) {
                continue;
            }
            let found = blocks(&body);
            let acct = account(r);
            let switched = last_served.as_ref().is_some_and(|a| *a != acct);
            let expected = usize::from(switched);
            if r.rejected.is_none() {
                if found.len() != expected {
                    let why = if switched {
                        format!(
                            "{}'s first request on {acct} after {} (#{i}) carried {} handoffs",
                            conv.name,
                            last_served.as_deref().unwrap_or("?"),
                            found.len()
                        )
                    } else {
                        format!(
                            "{}'s request #{i} on {acct} (no switch) carried {} handoffs",
                            conv.name,
                            found.len()
                        )
                    };
                    return Err(broken(3, why));
                }
                if switched {
                    received.push(format!("{}: {}", conv.name, kind(found[0], &body)));
                    switches += 1;
                }
                first_served.get_or_insert_with(|| acct.clone());
                last_served = Some(acct.clone());
            } else if found.len() > 1 {
                return Err(broken(
                    3,
                    format!(
                        "{}'s attempt #{i} on {acct} carried {} handoffs",
                        conv.name,
                        found.len()
                    ),
                ));
            }
            for block in &found {
                if let Some(other) = convs
                    .iter()
                    .find(|c| c.name != conv.name && block.contains(&c.task))
                {
                    return Err(broken(
                        4,
                        format!(
                            "the handoff in {}'s request #{i} on {acct} summarises {}: {}",
                            conv.name,
                            other.name,
                            short(block)
                        ),
                    ));
                }
                if !block.contains(&conv.task) {
                    return Err(broken(
                        4,
                        format!(
                            "the handoff in {}'s request #{i} on {acct} does not carry its task: {}",
                            conv.name,
                            short(block)
                        ),
                    ));
                }
            }
        }
        // The cell tests what it says: the cause moved the conversation.
        let moved = if cell.position == super::Position::SessionStart
            && cell.cause != super::Cause::UsageJump
        {
            first_served.as_deref().is_some_and(|a| a != PRIMARY[0])
        } else {
            switches > 0
        };
        if !moved {
            return Err(broken(
                0,
                format!(
                    "{} never moved: first served by {}, {switches} switches",
                    conv.name,
                    first_served.as_deref().unwrap_or("nobody")
                ),
            ));
        }
    }
    // 5: the compaction note.
    if cell.position == super::Position::AfterCompaction {
        for (i, r) in requests.iter().enumerate().skip(armed_at) {
            let body = String::from_utf8_lossy(&r.body);
            if r.summary || !body.contains(NOTE_CLAIMS_HANDOFF) {
                continue;
            }
            if !blocks(&body).iter().any(|b| b.contains(fact)) {
                return Err(broken(
                    5,
                    format!(
                        "request #{i} to {} says the compacted context is summarised in the handoff; the handoff lacks it ({})",
                        account(r),
                        blocks(&body)
                            .first()
                            .map_or("no handoff".into(), |b| short(b))
                    ),
                ));
            }
        }
    }
    Ok(if received.is_empty() {
        "no switch".into()
    } else {
        received.join(", ")
    })
}

/// The `thinking` setting and the first block of the last assistant message of a Messages
/// body, for the evidence of a thinking-rule rejection.
fn thinking_of(body: &str) -> String {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(body) else {
        return String::new();
    };
    let last_assistant = v["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "assistant"))
        .map(|m| m["content"][0]["type"].to_string())
        .unwrap_or_default();
    format!(
        "{} and the last assistant message starts with {last_assistant}",
        v["thinking"]
    )
}

/// One line per recorded request (account, path, rejection, handoffs, conversation), for
/// `SWITCH_MATRIX_TRACE`.
pub fn trace(h: &Harness, convs: &[&Conv]) -> String {
    let mut out = String::new();
    for (i, r) in h.sim.requests().iter().enumerate() {
        let body = String::from_utf8_lossy(&r.body);
        let plain = without_blocks(&body);
        let conv = convs
            .iter()
            .find(|c| plain.contains(&c.task))
            .map_or("?", |c| c.name);
        out.push_str(&format!(
            "  #{i} {} {} {}{} handoffs={} conv={conv} bytes={}\n",
            r.account.as_deref().unwrap_or("?"),
            r.uri.path(),
            if r.summary { "summary " } else { "" },
            r.rejected.as_deref().unwrap_or("ok"),
            blocks(&body).len(),
            r.body.len()
        ));
    }
    out
}
