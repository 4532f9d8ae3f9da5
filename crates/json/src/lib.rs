//! A raw JSON scanner over bytes: spans instead of values.
//!
//! The injection side of the relay (`context_relay_core::inject`, `context_relay_core::portable`)
//! rewrites request bodies of up to several MiB on the request path. Parsing such a body into a
//! `serde_json::Value` and serialising it again costs far more than the edit itself and
//! loses the client's key order and number formatting, so this crate never builds a value of
//! the whole body. It finds where things are ([`Span`]s into the original bytes), validates
//! the whole document on the way (so that an edit is never applied to malformed JSON), and
//! lets callers splice new bytes in with [`Edits`].
//!
//! Readers that need only the first members of a body ([`find_member`], [`Members`]) read
//! as far as they need and validate only that, so their cost is bounded by a prefix of the
//! body, not by its size. Callers that read many nested values of one body build a [`Doc`]:
//! one validating scan records the span of every value, and nested objects and arrays are
//! then read from those records without scanning their bytes again. Two readers do not
//! validate: [`skim_object`] / [`skim_array`] check a container's structure only, for a small
//! document read and not forwarded (the usage of an answer), and [`enclosing`] reads back from a
//! place to the bracket of the container it is in, for a reader that leaves the document's
//! checks to another (whether a `model` key far into a forwarded body is nested).
//!
//! Validation follows RFC 8259: strings must be closed, contain no raw control characters,
//! use only the defined escapes and be valid UTF-8; numbers follow the JSON grammar; literals
//! are `true`, `false` and `null`; brackets balance; only whitespace may follow the top-level
//! value. Two things are deliberately not checked: lone UTF-16 surrogates in `\u` escapes
//! (they are syntactically valid JSON and are forwarded untouched) and duplicate keys (callers
//! that care look for them with [`Object::unique`]). Nesting is followed with an explicit
//! stack, never by recursion, so hostile input cannot overflow the call stack, and at most
//! [`MAX_NESTING`] levels deep: a deeper document is refused with [`JsonError::TooDeep`], so
//! the stack of a scan stays a few KiB whatever the input.
//!
//! Long strings dominate real bodies, so that is where the speed is: string contents are
//! classified 64 bytes at a time into bit masks and escapes are resolved on the masks with
//! carry arithmetic, so that an escape every few dozen bytes (code) costs no branch. Safe
//! SIMD types (`wide`: SSE2 on x86_64, NEON on aarch64) classify the blocks, long plain runs
//! are crossed with `memchr2`, and UTF-8 is checked once per call over the bytes it reads
//! (`simdutf8`). The code is safe Rust throughout, and its answers do not depend on the CPU.
//!
//! ```
//! use context_relay_json as json;
//!
//! let body = br#"{"model": "gpt-5", "messages": [{"role": "user"}, 1e3]}"#;
//! let root = json::parse_object(body).unwrap();
//! let messages = root.get("messages").unwrap();
//! assert_eq!(&body[messages.value.clone()], br#"[{"role": "user"}, 1e3]"#);
//! let items = json::array_at(body, messages.value.clone()).unwrap();
//! assert_eq!(&body[items.items[1].clone()], b"1e3");
//!
//! // The same from one scan: nested values are looked up, not scanned again.
//! let doc = json::Doc::parse(body).unwrap();
//! let messages = doc.root_object().unwrap().get("messages").unwrap().value.clone();
//! assert_eq!(doc.array_at(messages).unwrap(), items);
//!
//! assert!(json::parse_object(br#"{"a": [1, 2}"#).is_err());
//! ```
//!
//! # Which reader is used where
//!
//! Four kinds of readers. The whole-body readers ([`validate`], [`parse_object`]) validate
//! every byte before they answer: they serve the gateway's checks that refuse a malformed
//! request. The index ([`Doc`]) validates every byte too and keeps the span of every value
//! (down to a depth its caller chooses): it serves the callers that edit a body, which must
//! never splice into malformed JSON and read many nested values of it, each from the records
//! of the one scan. The value readers ([`object_at`], [`array_at`], [`decode_str`],
//! [`splice_str`], [`strings`]) read one value, whose span or start another reader gave, and
//! nothing around it. The prefix
//! readers ([`find_member`], [`Members`], [`Items`]) read only as far as their caller asks and
//! validate only what they read: they serve the callers that look at the first members of
//! every request and forward the body as sent.
//! The callers below are the workspace's (core is `context-relay-core`, which re-exports this
//! crate as `context_relay_core::json`); engine and tower call none of these directly.
//!
//! | entry point | what it reads | callers | why this reader |
//! |---|---|---|---|
//! | [`validate`] | the whole body; keeps nothing | no production caller: core's `tests/nested_alloc.rs` (memory under deep nesting), `tests/inj_props.rs` (never panics) and `benches/fingerprint.rs` (the whole-body baseline) | the price of reading every byte once, without building anything |
//! | [`parse_object`] | the whole body; the top-level members as spans | gateway `gemini::check_body`; gateway `model::find_model`, only when a second `"model"` may follow the first | a Gemini body has no `model` member to look for, so the gateway checks it is one object; a possible duplicate `model` is refused with [`Object::unique`]; only the top-level members are kept (it is [`Doc::parse_to_depth`] to depth 1) |
//! | [`Doc`] ([`Doc::parse_to_depth`], then [`Doc::root_object`], [`Doc::object_at`], [`Doc::array_at`]) | the whole body once; the span of every value down to a depth (20 bytes each) | core `inject` (`Plan::new`, under `inject::inject` and `portable::rewrite_noting`, which `rewrite`, `rewrite_for_switch` and `make_portable` call; to depth 5); through the plan, core `portable` (Responses `input` items, Anthropic `messages`, content blocks and `context_management.edits`, Gemini `contents` and `parts`) and core `inject` (`append_to_array`, Gemini `systemInstruction`) | an edit needs the whole body valid first, the top-level members by index (for [`ListEdit`] and [`Object::unique`]), and then members and items of nested values by index: each is a lookup in the records of the one scan, where a scan per value read every byte of a list's items again |
//! | [`object_at`], [`array_at`] | one value span, members or items as spans | no production caller since the editors read a [`Doc`]; the reference the index is tested against | a caller holding one span of a body and no index: the span bounds the scan |
//! | [`decode_str`] | one string span | core `portable` (string members such as `type`, Gemini signatures); core `session` fingerprint (a `role` holding an escape, a user text that may be a context block); gateway `model::find_model` | the few places where the characters matter; borrows when the string has no escape |
//! | [`find_member`] | the body up to the end of the member's value (all of it when there is none) | gateway `model::find_model` (the `model` of every request); `examples/floor_proxy.rs`; testkit `sessions::key_order` | `model` comes first in real bodies: the cost is the prefix, not the body's size |
//! | [`splice_str`] | one string span | gateway `model::WrittenModel::retarget` and `model::kept`; `examples/floor_proxy.rs` | renames the model with one copy of the body at most, none when the name is unchanged |
//! | [`write_str`] | nothing (the caller knows the span) | gateway `model::replace_model`, once the field it found told the name differs | the rename's one copy, without decoding the old name a second time |
//! | [`Members`] | the top-level members one at a time, unread values skipped | core `session`: the fingerprint and `opening` (`model`, the system prompt members), `body_ids` (`metadata`, `prompt_cache_key`); testkit `sessions::key_order` | session identity is read on every request: the walk stops where the answer is known (in the conversation for the fingerprint, past the last key literal for `body_ids`) |
//! | [`Items`] (from [`Members::items`]) | the items of an array one at a time | core `session` fingerprint and `opening` (the conversation, up to the first user entry or ask) | a long history is not read past the entry that decides |
//! | [`strings`] | one value; its strings in one pass | core `session` fingerprint (`Text::read`: `text`, `content`, `parts`) | each byte of a nested message read once, at a bounded depth |
//! | [`Edits`], [`ListEdit`] | nothing: they splice bytes | core `inject` (`Plan`), core `portable` | every byte not edited stays as the client sent it |
//! | [`Needles`] | nothing is parsed: where the first of a few literals occurs | core `portable` (`may_carry_bound_state` on every passed-through body, the per-item check of the scrub); gateway `model::find_model` (a second `"model"` or a `\u` escape) | one pass over the body for all the literals, not one per literal |
//! | [`Kind`] | the first byte of a span | core `inject`, `portable` and `session` fingerprint; gateway `model` | a type check without a scan |
//!
//! Other callers reach the readers through core: `session::identify` (the engine's generation
//! gate, the gateway's combo routing) and `session::opening` (the engine's summary job) use the
//! prefix readers; `portable::rewrite_noting` and `portable::rewrite` (the engine's injection
//! decision and repair) use the index.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

use std::borrow::Cow;
use std::ops::Range;

mod classify;
mod depth;
mod edit;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod index;
mod needles;
mod scan;
mod skim;
mod string;
mod strings;
mod walk;

pub use depth::{Enclosing, enclosing, is_escaped};
pub use edit::{EditError, Edits, ListEdit};
pub use index::Doc;
pub use needles::{Found, Needles, Pieces};
pub use skim::{SKIM_MAX_DEPTH, skim_array, skim_object};
pub use strings::strings;
pub use walk::{Items, Key, Members, find_member, splice_str, write_str};

/// A byte range into the scanned body.
pub type Span = Range<usize>;

/// How many arrays and objects may enclose one another. Real request bodies nest a few dozen
/// levels at most (JSON Schemas of tools included); providers refuse far less than this.
pub const MAX_NESTING: usize = 512;

/// What kind of JSON value a span holds (from its first byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `{…}`
    Object,
    /// `[…]`
    Array,
    /// `"…"`
    String,
    /// A number.
    Number,
    /// `true` or `false`.
    Bool,
    /// `null`.
    Null,
}

impl Kind {
    /// The kind of the value starting at `body[at]`, if a value can start there.
    pub fn at(body: &[u8], at: usize) -> Option<Kind> {
        Some(match body.get(at)? {
            b'{' => Kind::Object,
            b'[' => Kind::Array,
            b'"' => Kind::String,
            b't' | b'f' => Kind::Bool,
            b'n' => Kind::Null,
            b'-' | b'0'..=b'9' => Kind::Number,
            _ => return None,
        })
    }

    /// The kind of the value in `span` (which must come from this crate).
    pub fn of(body: &[u8], span: &Span) -> Option<Kind> {
        Kind::at(body, span.start)
    }

    /// An article and the JSON type name, for error messages (`"an object"`).
    pub fn described(self) -> &'static str {
        match self {
            Kind::Object => "an object",
            Kind::Array => "an array",
            Kind::String => "a string",
            Kind::Number => "a number",
            Kind::Bool => "a boolean",
            Kind::Null => "null",
        }
    }
}

/// Why a body is not well-formed JSON. Offsets are byte offsets into the scanned input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// The input ended where more was required.
    #[error("expected {expected} at byte {at}, found the end of the input")]
    UnexpectedEnd {
        /// Where the input ended.
        at: usize,
        /// What was required there.
        expected: &'static str,
    },
    /// A byte that cannot appear at this point of the grammar.
    #[error("expected {expected} at byte {at}, found {}", show_byte(*found))]
    Unexpected {
        /// Offset of the byte.
        at: usize,
        /// What was required there.
        expected: &'static str,
        /// The byte found.
        found: u8,
    },
    /// An object or array that is never closed.
    #[error("expected `{}` closing the {} opened at byte {open_at}, found the end of the input",
        if *open == b'{' { '}' } else { ']' },
        if *open == b'{' { "object" } else { "array" })]
    Unclosed {
        /// Offset of the opening bracket.
        open_at: usize,
        /// The opening bracket (`{` or `[`).
        open: u8,
    },
    /// A string without its closing quote.
    #[error(
        "expected a closing `\"` for the string opened at byte {start}, found the end of the input"
    )]
    UnterminatedString {
        /// Offset of the opening quote.
        start: usize,
    },
    /// A raw control character (U+0000..U+001F) inside a string.
    #[error(
        "expected control characters in strings to be escaped, found raw 0x{byte:02x} at byte {at}"
    )]
    ControlCharacter {
        /// Offset of the character.
        at: usize,
        /// The character.
        byte: u8,
    },
    /// A backslash not followed by a defined escape.
    #[error(
        "expected one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX at byte {at}, found another escape"
    )]
    InvalidEscape {
        /// Offset of the backslash.
        at: usize,
    },
    /// Bytes that are not UTF-8 inside a string.
    #[error("expected UTF-8 text in a string, found an invalid sequence at byte {at}")]
    InvalidUtf8 {
        /// Offset of the first invalid byte.
        at: usize,
    },
    /// A word that is not `true`, `false` or `null`.
    #[error("expected `true`, `false` or `null` at byte {at}, found another word")]
    BadLiteral {
        /// Offset of the word.
        at: usize,
    },
    /// A number that does not follow the JSON grammar (`01`, `1.`, `-`, `1e`).
    #[error("expected a JSON number at byte {at}, found a malformed one")]
    BadNumber {
        /// Offset of the number.
        at: usize,
    },
    /// Something other than whitespace after the top-level value.
    #[error("expected only whitespace after the top-level value, found more data at byte {at}")]
    TrailingData {
        /// Offset of the first extra byte.
        at: usize,
    },
    /// A well-formed value of another kind where an object or array was asked for.
    #[error("expected {expected} at byte {at}, found {}", found.described())]
    WrongKind {
        /// Offset of the value.
        at: usize,
        /// What was asked for.
        expected: &'static str,
        /// What is there.
        found: Kind,
    },
    /// Arrays and objects nested deeper than a limit ([`MAX_NESTING`], or a caller's).
    #[error("expected at most {limit} nested arrays and objects, found more at byte {at}")]
    TooDeep {
        /// Offset of the value past the limit.
        at: usize,
        /// The limit.
        limit: usize,
    },
    /// A span that is not a value a [`Doc`] recorded: not the exact span of a value, or a
    /// container whose content lies deeper than the index reaches ([`Doc::parse_to_depth`]).
    #[error("expected the span of a value the index recorded, found {start}..{end}")]
    NotIndexed {
        /// Start of the span.
        start: usize,
        /// End of the span.
        end: usize,
    },
    /// An input too long for a [`Doc`] (its offsets are 32-bit).
    #[error("expected an input of at most {limit} bytes to index, found {len}")]
    TooLarge {
        /// Length of the input.
        len: usize,
        /// The longest input accepted.
        limit: usize,
    },
    /// A span that does not lie inside the input (a caller mixed up bodies).
    #[error("expected a span inside the {len}-byte input, found {start}..{end}")]
    OutOfBounds {
        /// Start of the span.
        start: usize,
        /// End of the span.
        end: usize,
        /// Length of the input.
        len: usize,
    },
}

fn show_byte(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("`{}`", b as char)
    } else {
        format!("byte 0x{b:02x}")
    }
}

/// One member of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field<'a> {
    /// The decoded key.
    pub key: Cow<'a, str>,
    /// The key with its quotes.
    pub key_span: Span,
    /// The value.
    pub value: Span,
}

impl Field<'_> {
    /// The whole member, from the key's opening quote to the end of the value.
    pub fn member(&self) -> Span {
        self.key_span.start..self.value.end
    }
}

/// An object: its span (braces included) and its members in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object<'a> {
    /// From `{` to `}` inclusive.
    pub span: Span,
    /// The members, in the order of the input (duplicates kept).
    pub fields: Vec<Field<'a>>,
}

/// A key occurs more than once in an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("expected one `{key}` member, found {count}")]
pub struct DuplicateKey {
    /// The key.
    pub key: &'static str,
    /// How many times it occurs.
    pub count: usize,
}

impl<'a> Object<'a> {
    /// The last member named `key` (the one most JSON parsers keep).
    pub fn get(&self, key: &str) -> Option<&Field<'a>> {
        self.fields.iter().rev().find(|f| f.key == key)
    }

    /// The index of the only member named `key`; an error when it occurs more than once,
    /// because editing one of two conflicting members is a guess.
    pub fn unique(&self, key: &'static str) -> Result<Option<usize>, DuplicateKey> {
        let mut found = None;
        let mut count = 0;
        for (i, f) in self.fields.iter().enumerate() {
            if f.key == key {
                count += 1;
                found = Some(i);
            }
        }
        if count > 1 {
            Err(DuplicateKey { key, count })
        } else {
            Ok(found)
        }
    }

    /// The members as spans (key to end of value), for [`ListEdit`].
    pub fn members(&self) -> Vec<Span> {
        self.fields.iter().map(Field::member).collect()
    }
}

/// An array: its span (brackets included) and the spans of its items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Array {
    /// From `[` to `]` inclusive.
    pub span: Span,
    /// The items, in order.
    pub items: Vec<Span>,
}

/// Validates a whole document: one JSON value surrounded by optional whitespace.
pub fn validate(body: &[u8]) -> Result<Span, JsonError> {
    scan::check_utf8(body, 0)?;
    let mut s = scan::Scanner::new(body);
    let start = s.skip_ws(0);
    let end = s.skip_value(start)?;
    s.expect_end(end)?;
    Ok(start..end)
}

/// Parses a whole document that must be an object, validating every nested value.
///
/// A well-formed document of another kind gives [`JsonError::WrongKind`] (so "not JSON" and
/// "JSON, but not an object" are told apart). UTF-8 is checked in its own pass first, so
/// errors are the first of the input. The scan is a [`Doc`]'s to depth 1 (it keeps the
/// top-level members only), so the answers are [`validate`]'s, and a body of 4 GiB or more is
/// refused ([`JsonError::TooLarge`]).
pub fn parse_object(body: &[u8]) -> Result<Object<'_>, JsonError> {
    Doc::parse_to_depth(body, 1)?.root_object()
}

/// Parses the object occupying exactly `span` of `body` (a value span from this crate).
pub fn object_at(body: &[u8], span: Span) -> Result<Object<'_>, JsonError> {
    let bounded = bounded(body, &span)?;
    scan::check_utf8(bounded, span.start)?;
    let mut s = scan::Scanner::new(bounded);
    match Kind::at(bounded, span.start) {
        Some(Kind::Object) => {
            let obj = s.object(span.start)?;
            expect_exact(&span, obj.span.end)?;
            Ok(obj)
        }
        Some(found) => Err(JsonError::WrongKind {
            at: span.start,
            expected: "an object",
            found,
        }),
        None => Err(s.value_error(span.start)),
    }
}

/// Parses the array occupying exactly `span` of `body` (a value span from this crate).
pub fn array_at(body: &[u8], span: Span) -> Result<Array, JsonError> {
    let bounded = bounded(body, &span)?;
    scan::check_utf8(bounded, span.start)?;
    let mut s = scan::Scanner::new(bounded);
    match Kind::at(bounded, span.start) {
        Some(Kind::Array) => {
            let arr = s.array(span.start)?;
            expect_exact(&span, arr.span.end)?;
            Ok(arr)
        }
        Some(found) => Err(JsonError::WrongKind {
            at: span.start,
            expected: "an array",
            found,
        }),
        None => Err(s.value_error(span.start)),
    }
}

/// Decodes the string value in `span` (quotes included).
///
/// Borrows when the string has no escapes, which is the common case for keys and type tags.
pub fn decode_str(body: &[u8], span: Span) -> Result<Cow<'_, str>, JsonError> {
    let bounded = bounded(body, &span)?;
    scan::check_utf8(bounded, span.start)?;
    let s = scan::Scanner::new(bounded);
    match Kind::at(bounded, span.start) {
        Some(Kind::String) => {
            let end = s.skip_string(span.start)?;
            expect_exact(&span, end)?;
            scan::decode_string(body, span)
        }
        Some(found) => Err(JsonError::WrongKind {
            at: span.start,
            expected: "a string",
            found,
        }),
        None => Err(s.value_error(span.start)),
    }
}

/// `body` cut at the end of `span`, so that a scan from the span's start cannot run past it
/// (offsets stay those of `body`).
fn bounded<'b>(body: &'b [u8], span: &Span) -> Result<&'b [u8], JsonError> {
    if span.start < span.end && span.end <= body.len() {
        Ok(&body[..span.end])
    } else {
        Err(JsonError::OutOfBounds {
            start: span.start,
            end: span.end,
            len: body.len(),
        })
    }
}

/// A value scanned from the start of `span` must end exactly at its end: a span that ends
/// later holds more than one value.
fn expect_exact(span: &Span, end: usize) -> Result<(), JsonError> {
    if end == span.end {
        Ok(())
    } else {
        Err(JsonError::TrailingData { at: end })
    }
}

#[cfg(test)]
mod tests;
