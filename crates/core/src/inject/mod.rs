//! Placing the handoff message in a request body by editing its raw JSON.
//!
//! Called by the injection layer on an account switch, after [`crate::portable`] (or through
//! [`crate::portable::rewrite_for_switch`], which does both in one scan). Only the bytes of
//! the new message (and the few separators around it) are added: every other byte of the
//! body stays as the client sent it, so key order, number formatting, unknown fields and the
//! provider's prompt-cache prefix survive. The whole body is validated first
//! ([`crate::json`]); a body that is not well-formed JSON, or not of the expected shape, gives
//! an [`InjectError`] and no output, never a partial rewrite.
//!
//! Where the message goes:
//! - Chat Completions: a `system` message prepended to `messages` (existing system messages
//!   follow it);
//! - Responses ([`InjectionSlot::InputItem`], the default): a `developer` message item
//!   prepended to `input`; a string `input` becomes `[developer item, user item]` with the
//!   original string's bytes reused. [`InjectionSlot::Instructions`]: the message and a blank
//!   line prepended to `instructions` (created when missing). Either way an empty
//!   `messages: []` member, which the Responses API does not know, is removed;
//! - Anthropic Messages: a text block appended to the top-level `system` (a string becomes a
//!   text block first; a missing `system` is created), after any `cache_control` blocks so
//!   the cached prefix is unchanged;
//! - Gemini: a `{"text": …}` part appended to `systemInstruction.parts` (created as needed;
//!   the snake-case `system_instruction` spelling is used when that is what the client sent).
//!
//! ```
//! use context_relay_core::{ApiShape, config::InjectionSlot, inject::inject};
//!
//! let body = br#"{"model":"gpt-5","messages":[{"role":"user","content":"hi"}],"n":1.0}"#;
//! let out = inject(ApiShape::ChatCompletions, body, "HANDOFF", InjectionSlot::InputItem).unwrap();
//! assert_eq!(
//!     out,
//!     br#"{"model":"gpt-5","messages":[{"role":"system","content":"HANDOFF"},{"role":"user","content":"hi"}],"n":1.0}"#
//! );
//! ```

mod anthropic;
mod chat;
mod gemini;
mod responses;

use crate::api::ApiShape;
use crate::config::InjectionSlot;
use std::rc::Rc;

use crate::json::{Doc, DuplicateKey, EditError, Edits, JsonError, Kind, ListEdit, Object, Span};

/// Why a handoff could not be injected into a body. The body is then forwarded unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InjectError {
    /// The body is not well-formed JSON.
    #[error("expected a JSON request body: {0}")]
    NotJson(#[source] JsonError),
    /// The body is JSON but not an object.
    #[error("expected the request body to be a JSON object, found {found}")]
    NotAnObject {
        /// What the body is (`"an array"`, …).
        found: &'static str,
    },
    /// The conversation field of the shape is absent.
    #[error("expected a `{field}` field in the {shape} request body, found none")]
    MissingField {
        /// The API shape the body was read as.
        shape: ApiShape,
        /// The missing field.
        field: &'static str,
    },
    /// A field the message goes into, or the conversation field, has an unexpected type.
    #[error("expected `{field}` to be {expected}, found {found}")]
    WrongType {
        /// The field (a dotted path for nested ones).
        field: &'static str,
        /// The accepted types.
        expected: &'static str,
        /// The type found.
        found: &'static str,
    },
    /// A field that would be edited occurs more than once.
    #[error(transparent)]
    DuplicateKey(#[from] DuplicateKey),
    /// The planned edits overlap (a bug; reported rather than writing a corrupt body).
    #[error(transparent)]
    Edit(#[from] EditError),
}

/// Injects `message` into `body` of the given `shape`. `slot` only matters for Responses.
///
/// The message text is JSON-escaped here; pass the plain text (see
/// [`crate::render::render_handoff`]).
pub fn inject(
    shape: ApiShape,
    body: &[u8],
    message: &str,
    slot: InjectionSlot,
) -> Result<Vec<u8>, InjectError> {
    let mut plan = Plan::new(body).map_err(root_error)?;
    plan_injection(&mut plan, shape, message, slot)?;
    match plan.finish()? {
        Some(out) => Ok(out),
        // Injection always adds a message, so this is unreachable in practice; copying keeps
        // the contract (a body with the message) without a panic path.
        None => Ok(body.to_vec()),
    }
}

/// Maps an error of the top-level parse.
pub(crate) fn root_error(e: JsonError) -> InjectError {
    match e {
        JsonError::WrongKind { found, .. } => InjectError::NotAnObject {
            found: found.described(),
        },
        e => InjectError::NotJson(e),
    }
}

/// Adds the injection of `message` to `plan`.
pub(crate) fn plan_injection(
    plan: &mut Plan<'_>,
    shape: ApiShape,
    message: &str,
    slot: InjectionSlot,
) -> Result<(), InjectError> {
    match shape {
        ApiShape::ChatCompletions => chat::plan(plan, message),
        ApiShape::Responses => responses::plan(plan, message, slot),
        ApiShape::AnthropicMessages => anthropic::plan(plan, message),
        ApiShape::Gemini => gemini::plan(plan, message),
    }
}

/// How deep the editors read a body: the members of a Gemini part or of an Anthropic content
/// block (`contents[].parts[].*`, `messages[].content[].*`) lie five levels below the
/// top-level object. Deeper values are validated but not indexed (no memory for them).
pub(crate) const EDIT_DEPTH: usize = 5;

/// The edits planned for one body: shared by injection and [`crate::portable`] so that both
/// can be applied from one scan with separators that stay right when both touch one list.
#[derive(Debug, Clone)]
pub(crate) struct Plan<'a> {
    pub(crate) body: &'a [u8],
    /// The body's values down to [`EDIT_DEPTH`], from the one validating scan: nested objects
    /// and arrays are read from it, not scanned again. Shared, so that a copy of the plan (to
    /// undo a failed injection) does not copy it.
    pub(crate) doc: Rc<Doc<'a>>,
    pub(crate) root: Object<'a>,
    /// Top-level members dropped and a member created.
    pub(crate) root_edit: ListEdit,
    /// Responses `input` items dropped (portable) and the item prepended (injection).
    pub(crate) input: Option<ListEdit>,
    /// Everything else.
    pub(crate) edits: Edits,
}

impl<'a> Plan<'a> {
    /// Scans and validates the whole body, which must be an object, and indexes it.
    pub(crate) fn new(body: &'a [u8]) -> Result<Self, JsonError> {
        let doc = Doc::parse_to_depth(body, EDIT_DEPTH)?;
        let root = doc.root_object()?;
        let root_edit = ListEdit::new(&root.span, root.members());
        Ok(Self {
            body,
            doc: Rc::new(doc),
            root,
            root_edit,
            input: None,
            edits: Edits::default(),
        })
    }

    /// The index of the top-level member `key`, refusing duplicates.
    pub(crate) fn field(&self, key: &'static str) -> Result<Option<usize>, DuplicateKey> {
        self.root.unique(key)
    }

    /// The value span of top-level member `index`.
    pub(crate) fn value(&self, index: usize) -> Span {
        self.root.fields[index].value.clone()
    }

    /// The value span of the required conversation field `key`, which must be an array (or,
    /// with `allow_string`, a string).
    pub(crate) fn conversation(
        &self,
        shape: ApiShape,
        key: &'static str,
        expected: &'static str,
        allow_string: bool,
    ) -> Result<(Span, Kind), InjectError> {
        let index = self
            .field(key)?
            .ok_or(InjectError::MissingField { shape, field: key })?;
        let span = self.value(index);
        let kind = self.kind(&span);
        match kind {
            Kind::Array => Ok((span, kind)),
            Kind::String if allow_string => Ok((span, kind)),
            found => Err(InjectError::WrongType {
                field: key,
                expected,
                found: found.described(),
            }),
        }
    }

    /// The kind of a validated value span.
    pub(crate) fn kind(&self, span: &Span) -> Kind {
        // Spans come from the validating scan, so a value starts there.
        Kind::of(self.body, span).unwrap_or(Kind::Null)
    }

    /// Applies everything planned; `None` when nothing was.
    pub(crate) fn finish(self) -> Result<Option<Vec<u8>>, EditError> {
        let Plan {
            body,
            root_edit,
            input,
            mut edits,
            ..
        } = self;
        if !root_edit.is_noop() {
            root_edit.finish(&mut edits);
        }
        if let Some(input) = input.filter(|l| !l.is_noop()) {
            input.finish(&mut edits);
        }
        if edits.is_empty() {
            Ok(None)
        } else {
            edits.apply(body).map(Some)
        }
    }
}

/// `s` as a JSON string literal.
pub(crate) fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// Whether the validated array at `span` has no items.
pub(crate) fn array_is_empty(body: &[u8], span: &Span) -> bool {
    body.get(span.start + 1..span.end.saturating_sub(1))
        .is_none_or(|inner| inner.iter().all(u8::is_ascii_whitespace))
}

/// Plans `item` as the first element of the validated array at `span`.
pub(crate) fn prepend_to_array(edits: &mut Edits, body: &[u8], span: &Span, mut item: Vec<u8>) {
    if !array_is_empty(body, span) {
        item.push(b',');
    }
    edits.insert(span.start + 1, item);
}

/// Plans `item` as the last element of the array at `span`, a value of `doc`.
pub(crate) fn append_to_array(
    edits: &mut Edits,
    doc: &Doc<'_>,
    span: &Span,
    item: Vec<u8>,
) -> Result<(), InjectError> {
    let array = doc.array_at(span.clone()).map_err(InjectError::NotJson)?;
    let mut list = ListEdit::new(&array.span, array.items);
    list.append(item);
    list.finish(edits);
    Ok(())
}

#[cfg(test)]
mod tests;
