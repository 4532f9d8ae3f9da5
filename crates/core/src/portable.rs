//! Making a request body portable to another account of the same provider.
//!
//! Some request state is bound to the account that produced it: the provider refuses it
//! when it arrives through another credential. On an account switch the injection layer calls
//! [`rewrite`] (which also injects the handoff in the same scan) before forwarding. What is
//! removed:
//!
//! - Responses API: `previous_response_id` and `conversation` (server-side state of the old
//!   account); `input` items of type `reasoning` as whole items (an id without its encrypted
//!   blob, or a blob next to an edited item, is rejected too); `compaction` items are replaced
//!   by a short developer note ([`COMPACTION_NOTE`] when the handoff injected into the same
//!   request summarises the compacted context, else [`COMPACTION_NOTE_ALONE`]) since their
//!   encrypted summary cannot be read by the new account; any other item carrying `encrypted_content` (the encrypted tool outputs
//!   and agent messages of Codex's multi-agent tools) is replaced by a plain tool output (same
//!   `call_id`, so the call stays answered) or message saying [`FOREIGN_OUTPUT_NOTE`]. The
//!   [`TURN_STATE_HEADER`] request header must be dropped by the caller (headers are not part
//!   of the body).
//! - Anthropic Messages: `thinking` and `redacted_thinking` blocks of assistant turns (their
//!   signatures are bound to the account); an assistant message left empty is removed. When
//!   extended thinking is on (`thinking.type` is `enabled` or `adaptive`) the API requires the
//!   final assistant turn to start with a thinking block: when the request continues such a
//!   turn (it ends with an assistant prefill that lost its thinking, or with `tool_result`s
//!   answering an assistant turn that began with thinking) the body would be rejected, so
//!   `thinking` is set to `{"type":"disabled"}` for this one request, and the
//!   `context_management` edits that need thinking (`clear_thinking_…`) are dropped with it.
//!   The next turn starts a fresh assistant turn and may think again.
//! - Gemini `generateContent`: the `thoughtSignature` of `contents[].parts[]` (signatures are
//!   bound to the project and model that minted them). A `thought: true` part, or a part
//!   holding nothing but its signature, goes whole; on a `functionCall` of the current turn the
//!   signature is replaced by [`FOREIGN_SIGNATURE`], since Gemini 3 requires one there; a
//!   `contents` entry left empty is removed.
//! - Chat Completions carries no account-bound state.
//!
//! **Scope.** Right after a switch everything goes ([`Scope::All`]). Clients resend their whole
//! history on every later turn, so later requests to the new account carry the old account's
//! state again, next to the state the new account minted meanwhile: [`Scope::Foreign`] removes
//! only the pieces whose digest was recorded at the switch ([`ForeignSet`], from
//! [`Rewrite::seen`]) and keeps the rest.
//!
//! Everything else is forwarded byte for byte. The removals are counted in [`Removed`], for
//! metrics.
//!
//! ```
//! use context_relay_core::{ApiShape, portable::make_portable};
//!
//! let body = br#"{"model":"gpt-5","previous_response_id":"resp_1","input":[{"type":"reasoning","id":"rs_1"},{"type":"message","role":"user","content":"hi"}]}"#;
//! let p = make_portable(ApiShape::Responses, body).unwrap();
//! assert_eq!(
//!     p.body.unwrap(),
//!     br#"{"model":"gpt-5","input":[{"type":"message","role":"user","content":"hi"}]}"#
//! );
//! assert_eq!(p.removed.iter().collect::<Vec<_>>(), [("previous_response_id", 1), ("reasoning", 1)]);
//! ```

use std::borrow::Cow;
use std::sync::LazyLock;

use crate::api::ApiShape;
use crate::config::InjectionSlot;
use crate::inject::{self, InjectError, Plan};
use crate::json::{self, DuplicateKey, EditError, JsonError, Kind, ListEdit, Span};

mod anthropic;
mod chain;
mod foreign;
mod gemini;

use anthropic::anthropic;
pub use chain::ORPHAN_OUTPUT_NOTE;
pub use foreign::{ForeignSet, MAX_FOREIGN, digest};
pub use gemini::FOREIGN_SIGNATURE;
use gemini::gemini;

/// The Codex sticky-routing header: it names server state of the old account, so the caller
/// drops it from the request on a switch.
pub const TURN_STATE_HEADER: &str = "x-codex-turn-state";

/// The text of the developer note that replaces a `compaction` item when the request also
/// carries a context handoff that summarises the compacted context.
pub const COMPACTION_NOTE: &str = "Earlier context of this conversation was compacted on \
another account and cannot be carried over; it is summarised in the context handoff.";

/// The text of the developer note that replaces a `compaction` item when no handoff that
/// summarises the compacted context is injected into the request.
pub const COMPACTION_NOTE_ALONE: &str = "Earlier context of this conversation was compacted \
on another account and cannot be carried over; it is not available here.";

/// The text that replaces an encrypted tool output or agent message minted by another account.
pub const FOREIGN_OUTPUT_NOTE: &str = "[This content was produced on another account and \
cannot be read here.]";

/// What was removed from a body, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Removed {
    /// Responses `previous_response_id` members.
    pub previous_response_id: u32,
    /// Responses `conversation` members.
    pub conversation: u32,
    /// Responses `reasoning` input items.
    pub reasoning_items: u32,
    /// Responses `compaction` input items replaced by a note.
    pub compaction_items: u32,
    /// Other Responses input items carrying `encrypted_content` (encrypted tool outputs and
    /// agent messages) replaced by a plain note.
    pub encrypted_items: u32,
    /// Anthropic `thinking` blocks.
    pub thinking_blocks: u32,
    /// Anthropic `redacted_thinking` blocks.
    pub redacted_thinking_blocks: u32,
    /// Anthropic messages and Gemini `contents` entries left empty and removed.
    pub empty_messages: u32,
    /// Anthropic requests whose extended thinking was disabled (0 or 1).
    pub thinking_disabled: u32,
    /// Anthropic `context_management` edits dropped because they need thinking.
    pub context_edits: u32,
    /// Gemini `thoughtSignature` members removed (or, on a function call of the current
    /// turn, replaced by [`FOREIGN_SIGNATURE`]).
    pub thought_signatures: u32,
    /// Gemini parts dropped whole with their signature: `thought: true` parts and parts that
    /// held nothing else.
    pub thought_parts: u32,
    /// Responses tool outputs whose call was in the dropped response chain, given as user
    /// messages (see [`ORPHAN_OUTPUT_NOTE`]).
    pub orphan_outputs: u32,
}

impl Removed {
    /// Whether nothing was removed.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// `(kind, count)` for every kind with a non-zero count, for metric labels.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u32)> + use<> {
        [
            ("previous_response_id", self.previous_response_id),
            ("conversation", self.conversation),
            ("reasoning", self.reasoning_items),
            ("compaction", self.compaction_items),
            ("encrypted_item", self.encrypted_items),
            ("thinking", self.thinking_blocks),
            ("redacted_thinking", self.redacted_thinking_blocks),
            ("empty_message", self.empty_messages),
            ("thinking_disabled", self.thinking_disabled),
            ("context_edit", self.context_edits),
            ("thought_signature", self.thought_signatures),
            ("thought_part", self.thought_parts),
            ("orphan_output", self.orphan_outputs),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
    }
}

/// Which account-bound state a rewrite removes.
#[derive(Debug, Clone, Copy)]
pub enum Scope<'a> {
    /// All of it: the first request on a new account, or a repair after the provider rejected
    /// the state.
    All,
    /// Only the pieces whose digest is in the set (minted by earlier accounts); the rest was
    /// minted by the serving account and is kept.
    Foreign(&'a ForeignSet),
    /// None: only the handoff is injected.
    Nothing,
}

impl Scope<'_> {
    /// Whether a piece whose token has `digest` (`None`: no token) goes.
    fn strips(&self, digest: Option<u64>) -> bool {
        match self {
            Scope::All => true,
            Scope::Foreign(set) => digest.is_some_and(|d| set.contains(d)),
            Scope::Nothing => false,
        }
    }
}

/// A body made portable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Portable {
    /// The new body; `None` when nothing had to change (forward the original as is).
    pub body: Option<Vec<u8>>,
    /// What was removed.
    pub removed: Removed,
}

/// Why a body could not be made portable. The caller forwards it unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortableError {
    /// The body is not well-formed JSON.
    #[error("expected a JSON request body: {0}")]
    NotJson(#[source] JsonError),
    /// The body is JSON but not an object.
    #[error("expected the request body to be a JSON object, found {found}")]
    NotAnObject {
        /// What the body is.
        found: &'static str,
    },
    /// A member that would be edited occurs more than once.
    #[error(transparent)]
    DuplicateKey(#[from] DuplicateKey),
    /// The planned edits overlap (a bug; reported rather than writing a corrupt body).
    #[error(transparent)]
    Edit(#[from] EditError),
}

impl From<JsonError> for PortableError {
    fn from(e: JsonError) -> Self {
        match inject::root_error(e) {
            InjectError::NotAnObject { found } => PortableError::NotAnObject { found },
            InjectError::NotJson(e) => PortableError::NotJson(e),
            // `root_error` gives only the two variants above.
            _ => PortableError::NotAnObject {
                found: "another value",
            },
        }
    }
}

/// Member names only account-bound state uses.
const BOUND_MARKERS: [&[u8]; 7] = [
    b"\"encrypted_content\"",
    b"\"previous_response_id\"",
    b"\"conversation\"",
    b"\"signature\"",
    b"\"redacted_thinking\"",
    b"\"thoughtSignature\"",
    b"\"thought_signature\"",
];

/// The length of the longest byte pattern [`may_carry_bound_state`] looks for: a body scanned
/// in pieces finds every pattern when each piece is scanned together with the last
/// `BOUND_MARKER_MAX_LEN - 1` bytes before it.
pub const BOUND_MARKER_MAX_LEN: usize = {
    let mut max = 0;
    let mut i = 0;
    while i < BOUND_MARKERS.len() {
        if BOUND_MARKERS[i].len() > max {
            max = BOUND_MARKERS[i].len();
        }
        i += 1;
    }
    max
};

/// Whether `body` may carry account-bound state, from a byte scan (no parse): `false` means
/// certainly none, so there is nothing [`rewrite`] could remove.
///
/// ```
/// use context_relay_core::portable::may_carry_bound_state;
/// assert!(may_carry_bound_state(br#"{"input":[{"type":"reasoning","encrypted_content":"x"}]}"#));
/// assert!(!may_carry_bound_state(br#"{"input":"hi"}"#));
/// ```
pub fn may_carry_bound_state(body: &[u8]) -> bool {
    // Built once: every passed-through Responses or Messages body (and each of its frames) is
    // scanned, and building a searcher costs more than running it on a small body.
    static MARKERS: LazyLock<json::Needles> = LazyLock::new(|| json::Needles::new(&BOUND_MARKERS));
    MARKERS.any_in(body)
}

/// Removes all account-bound state of `body` (see the module docs).
pub fn make_portable(shape: ApiShape, body: &[u8]) -> Result<Portable, PortableError> {
    let r = rewrite(shape, body, Scope::All, None, InjectionSlot::default())?;
    Ok(Portable {
        body: r.body,
        removed: r.removed,
    })
}

/// A body rewritten for an account switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    /// The new body; `None` when nothing changed (forward the original as is).
    pub body: Option<Vec<u8>>,
    /// What was removed to make it portable.
    pub removed: Removed,
    /// Whether the message was injected.
    pub injected: bool,
    /// Why the message could not be injected, if it could not; the body is then only made
    /// portable.
    pub inject_error: Option<InjectError>,
    /// The digests of every piece of account-bound state the body carried (removed or kept),
    /// in body order: on a switch, exactly what the new account must treat as foreign.
    pub seen: Vec<u64>,
}

/// Makes `body` portable and, with a `message`, injects it, from one scan of the body.
///
/// The same as [`rewrite`] with [`Scope::All`].
pub fn rewrite_for_switch(
    shape: ApiShape,
    body: &[u8],
    message: Option<&str>,
    slot: InjectionSlot,
) -> Result<Rewrite, PortableError> {
    rewrite(shape, body, Scope::All, message, slot)
}

/// Removes the account-bound state that `scope` names and, with a `message`, injects it, from
/// one scan of the body.
///
/// An injection failure (a body of an unexpected shape) does not undo the portability edits:
/// the request still needs them to be accepted by the new account. It is reported in
/// [`Rewrite::inject_error`]. A `compaction` item's note says the compacted context is not
/// available ([`COMPACTION_NOTE_ALONE`]): see [`rewrite_noting`] for a handoff that summarises
/// it.
///
/// ```
/// use context_relay_core::ApiShape;
/// use context_relay_core::config::InjectionSlot;
/// use context_relay_core::portable::{ForeignSet, Scope, digest, rewrite};
///
/// let body = br#"{"input":[{"type":"reasoning","encrypted_content":"A1"},{"type":"reasoning","encrypted_content":"B1"}]}"#;
/// let foreign = ForeignSet::from_digests([digest(br#""A1""#)]);
/// let r = rewrite(ApiShape::Responses, body, Scope::Foreign(&foreign), None, InjectionSlot::InputItem).unwrap();
/// assert_eq!(r.body.unwrap(), br#"{"input":[{"type":"reasoning","encrypted_content":"B1"}]}"#);
/// assert_eq!(r.seen, [digest(br#""A1""#), digest(br#""B1""#)]);
/// ```
pub fn rewrite(
    shape: ApiShape,
    body: &[u8],
    scope: Scope<'_>,
    message: Option<&str>,
    slot: InjectionSlot,
) -> Result<Rewrite, PortableError> {
    rewrite_noting(shape, body, scope, message, false, slot)
}

/// [`rewrite`], for a `message` that does (`covers_compaction`) or does not summarise the
/// context the request's `compaction` items hold: a compaction item's note says that context
/// is in the handoff ([`COMPACTION_NOTE`]) only when the message was injected and covers it
/// (it was written by the account that minted the items, from a summary request that carried
/// them), and that it is not available here ([`COMPACTION_NOTE_ALONE`]) otherwise.
pub fn rewrite_noting(
    shape: ApiShape,
    body: &[u8],
    scope: Scope<'_>,
    message: Option<&str>,
    covers_compaction: bool,
    slot: InjectionSlot,
) -> Result<Rewrite, PortableError> {
    let mut plan = Plan::new(body)?;
    let mut cx = Cx {
        scope,
        removed: Removed::default(),
        seen: Vec::new(),
        compactions: Vec::new(),
    };
    match shape {
        ApiShape::Responses => responses(&mut plan, &mut cx)?,
        ApiShape::AnthropicMessages => anthropic(&mut plan, &mut cx)?,
        ApiShape::Gemini => gemini(&mut plan, &mut cx)?,
        ApiShape::ChatCompletions => {}
    }
    let mut inject_error = None;
    let mut injected = false;
    if let Some(message) = message {
        let before = plan.clone();
        match inject::plan_injection(&mut plan, shape, message, slot) {
            Ok(()) => injected = true,
            Err(e) => {
                // Drop the half-planned injection, keep the portability edits.
                plan = before;
                inject_error = Some(e);
            }
        }
    }
    let note = compaction_note(if injected && covers_compaction {
        COMPACTION_NOTE
    } else {
        COMPACTION_NOTE_ALONE
    });
    for item in cx.compactions {
        plan.edits.replace(item, note.clone().into_bytes());
    }
    Ok(Rewrite {
        body: plan.finish()?,
        removed: cx.removed,
        injected,
        inject_error,
        seen: cx.seen,
    })
}

/// The state of one rewrite.
pub(super) struct Cx<'s> {
    pub(super) scope: Scope<'s>,
    pub(super) removed: Removed,
    pub(super) seen: Vec<u64>,
    /// `compaction` items to replace by a note, once it is known whether a handoff goes in.
    compactions: Vec<Span>,
}

impl Cx<'_> {
    /// Records the token at `span` (if any) as seen; whether its piece goes.
    pub(super) fn judge(&mut self, body: &[u8], span: Option<&Span>) -> bool {
        let d = span.map(|s| digest(&body[s.clone()]));
        if let Some(d) = d {
            self.seen.push(d);
        }
        self.scope.strips(d)
    }
}

/// The decoded string member `key` of the object at `span`, if it is one.
pub(super) fn string_member<'a>(
    body: &'a [u8],
    object: &json::Object<'a>,
    key: &str,
) -> Option<Cow<'a, str>> {
    let f = object.get(key)?;
    json::decode_str(body, f.value.clone()).ok()
}

fn responses(plan: &mut Plan<'_>, cx: &mut Cx<'_>) -> Result<(), PortableError> {
    let body = plan.body;
    for (i, f) in plan.root.fields.iter().enumerate() {
        // Every copy goes: there is nothing to choose between.
        let counter = match f.key.as_ref() {
            "previous_response_id" => &mut cx.removed.previous_response_id,
            "conversation" => &mut cx.removed.conversation,
            _ => continue,
        };
        let d = digest(&body[f.value.clone()]);
        cx.seen.push(d);
        if cx.scope.strips(Some(d)) {
            *counter += 1;
            plan.root_edit.drop_member(i);
        }
    }
    let Some(i) = plan.field("input")? else {
        return Ok(());
    };
    let span = plan.value(i);
    if plan.kind(&span) != Kind::Array {
        return Ok(());
    }
    let input = plan.doc.array_at(span)?;
    // The chain went: outputs of calls made in it answer nothing the new account has.
    let orphans = if cx.removed.previous_response_id + cx.removed.conversation > 0 {
        chain::answer_orphans(plan, cx, &input.items)?
    } else {
        Vec::new()
    };
    let mut list = ListEdit::new(&input.span, input.items.clone());
    for (k, item) in input.items.iter().enumerate() {
        // An output given as a message above is not edited again.
        if orphans.contains(item) {
            continue;
        }
        // Only objects that may carry account-bound state are scanned member by member.
        if plan.kind(item) != Kind::Object || !may_be_bound(&body[item.clone()]) {
            continue;
        }
        let object = plan.doc.object_at(item.clone())?;
        let blob = object.get("encrypted_content").map(|f| f.value.clone());
        let ty = string_member(body, &object, "type");
        match ty.as_deref() {
            Some("reasoning") => {
                let token = blob.or_else(|| object.get("id").map(|f| f.value.clone()));
                if cx.judge(body, token.as_ref()) {
                    list.drop_member(k);
                    cx.removed.reasoning_items += 1;
                }
            }
            Some("compaction") if cx.judge(body, blob.as_ref()) => {
                cx.compactions.push(item.clone());
                cx.removed.compaction_items += 1;
            }
            Some("compaction") => {}
            _ if blob.as_ref().is_some_and(|b| plan.kind(b) == Kind::String)
                && cx.judge(body, blob.as_ref()) =>
            {
                let note = foreign_item_note(body, &object, ty.as_deref());
                plan.edits.replace(item.clone(), note.into_bytes());
                cx.removed.encrypted_items += 1;
            }
            _ => {}
        }
    }
    plan.input = Some(list);
    Ok(())
}

/// Whether an input item's bytes can hold account-bound state: reasoning and compaction
/// items, and anything with an `encrypted_content` member. Most items of a long history are
/// messages and tool calls; this skips their member scan.
fn may_be_bound(item: &[u8]) -> bool {
    // Built once: this runs for every item of a long `input`, and building a searcher costs
    // more than running it on a short item.
    static MARKERS: LazyLock<json::Needles> =
        LazyLock::new(|| json::Needles::new(&[b"encrypted_content", b"reasoning", b"compaction"]));
    MARKERS.any_in(item)
}

fn compaction_note(text: &str) -> String {
    format!(
        r#"{{"type":"message","role":"developer","content":[{{"type":"input_text","text":{}}}]}}"#,
        inject::json_string(text)
    )
}

/// What replaces an item carrying another account's `encrypted_content`: a tool output keeps
/// its call answered (a call left without output is rejected), anything else becomes a plain
/// message of the same role.
fn foreign_item_note(body: &[u8], object: &json::Object<'_>, ty: Option<&str>) -> String {
    let text = inject::json_string(FOREIGN_OUTPUT_NOTE);
    if let Some(call_id) = object.get("call_id") {
        let ty = ty
            .filter(|t| t.ends_with("_output"))
            .unwrap_or("function_call_output");
        return format!(
            r#"{{"type":{},"call_id":{},"output":{text}}}"#,
            inject::json_string(ty),
            String::from_utf8_lossy(&body[call_id.value.clone()]),
        );
    }
    let role = string_member(body, object, "role");
    let role = role
        .as_deref()
        .filter(|r| matches!(*r, "user" | "developer" | "system"))
        .unwrap_or("assistant");
    let part = if role == "assistant" {
        "output_text"
    } else {
        "input_text"
    };
    format!(
        r#"{{"type":"message","role":{},"content":[{{"type":"{part}","text":{text}}}]}}"#,
        inject::json_string(role)
    )
}

#[cfg(test)]
mod tests;
