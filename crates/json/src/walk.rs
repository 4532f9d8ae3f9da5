//! Reading the start of a body without scanning the rest: lazy walks over the members of the
//! top-level object and the items of an array, and a lookup of one top-level member.
//!
//! [`super::parse_object`] validates a whole body before anything is read from it. Finding
//! `model` or the parts of a session fingerprint needs only the first members of the body, and
//! on a 100 KB conversation the rest is most of the cost. These walks read as far as their
//! caller asks and no further. What they read is validated exactly as the full scan does
//! (syntax, escapes, raw control bytes, UTF-8); what they do not read is not validated at all,
//! so a body that is malformed after the point where a walk stops is not noticed here.

use std::borrow::Cow;

use bytes::Bytes;

use super::scan::{Scanner, check_utf8, decode_string};
use super::{Field, JsonError, Kind, Span, decode_str};

/// A member's key, read by [`Members`]; its value starts at `value_start` and is not read yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key<'a> {
    /// The decoded key.
    pub key: Cow<'a, str>,
    /// The key with its quotes.
    pub key_span: Span,
    /// The offset of the first byte of the value.
    pub value_start: usize,
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// Just after the opening bracket at this offset.
    Open(usize),
    /// A value not read by the caller starts here: skip it before the next member.
    Pending(usize),
    /// The last value read ended here.
    After(usize),
    /// Closed, or an error was returned.
    Done,
}

/// The members of the top-level object of a body, read one at a time.
///
/// Each call to `next` gives the next key; its value is skipped (and validated) by the
/// following call unless the caller reads it first with [`Members::value`] or walks into it
/// with [`Members::items`]. After an error the walk ends. Reaching the closing `}` also checks
/// that only whitespace follows it, so a walk that runs to its end has validated the whole
/// body, as [`super::parse_object`] does (duplicate keys are not looked for).
///
/// ```
/// use context_relay_json::Members;
///
/// let body = br#"{"model":"gpt-5","messages":[{"role":"user"}, 2], "tail": oops"#;
/// let mut members = Members::root(body).unwrap();
/// let model = members.next().unwrap().unwrap();
/// assert_eq!(model.key, "model");
/// let messages = members.next().unwrap().unwrap();
/// assert_eq!(messages.key, "messages");
/// let items: Vec<_> = members.items(&messages).unwrap().collect::<Result<_, _>>().unwrap();
/// assert_eq!(&body[items[1].clone()], b"2");
/// // The malformed tail was never read.
/// ```
#[derive(Debug)]
pub struct Members<'a> {
    s: Scanner<'a>,
    b: &'a [u8],
    open: usize,
    state: State,
}

impl<'a> Members<'a> {
    /// A walk over the object that `body` holds (after optional whitespace).
    ///
    /// A well-formed body of another kind gives [`JsonError::WrongKind`] (and is then
    /// validated whole, to tell it apart from a malformed one).
    pub fn root(body: &'a [u8]) -> Result<Self, JsonError> {
        let mut s = Scanner::new(body);
        let open = s.skip_ws(0);
        match Kind::at(body, open) {
            Some(Kind::Object) => Ok(Self {
                s,
                b: body,
                open,
                state: State::Open(open + 1),
            }),
            Some(found) => {
                let end = s.skip_value(open)?;
                s.expect_end(end)?;
                check_utf8(body, 0)?;
                Err(JsonError::WrongKind {
                    at: open,
                    expected: "an object",
                    found,
                })
            }
            None => Err(s.value_error(open)),
        }
    }

    /// Reads the value of `key` (the key just returned by `next`): its span.
    pub fn value(&mut self, key: &Key<'a>) -> Result<Span, JsonError> {
        let span = self.skip(key.value_start);
        self.state = match &span {
            Ok(span) => State::After(span.end),
            Err(_) => State::Done,
        };
        span
    }

    /// Walks into the value of `key` (the key just returned by `next`), which must be an array;
    /// the walk over this object ends there.
    pub fn items(self, key: &Key<'a>) -> Result<Items<'a>, JsonError> {
        Items::new(self.s, self.b, key.value_start)
    }

    /// Skips and validates the value at `at`.
    fn skip(&mut self, at: usize) -> Result<Span, JsonError> {
        let end = self.s.skip_value(at)?;
        check_utf8(&self.b[..end], at)?;
        Ok(at..end)
    }

    fn step(&mut self) -> Result<Option<Key<'a>>, JsonError> {
        let b = self.b;
        let i = match self.state {
            State::Done => return Ok(None),
            State::Open(i) => {
                let i = self.s.skip_ws(i);
                if b.get(i) == Some(&b'}') {
                    return self.close(i);
                }
                i
            }
            State::Pending(at) => {
                let end = self.skip(at)?.end;
                match self.separator(end)? {
                    Some(next) => next,
                    None => return Ok(None),
                }
            }
            State::After(end) => match self.separator(end)? {
                Some(next) => next,
                None => return Ok(None),
            },
        };
        self.s.expect_byte(i, b'"', "a string key", self.open)?;
        let key_end = self.s.skip_string(i)?;
        let key = decode_string(b, i..key_end)?;
        let colon = self.s.skip_ws(key_end);
        self.s.expect_byte(colon, b':', "`:`", self.open)?;
        let value_start = self.s.skip_ws(colon + 1);
        if value_start >= b.len() {
            return Err(self.s.unclosed(self.open));
        }
        self.state = State::Pending(value_start);
        Ok(Some(Key {
            key,
            key_span: i..key_end,
            value_start,
        }))
    }

    /// After a value ending at `end`: the start of the next member, or `None` at the `}`.
    fn separator(&mut self, end: usize) -> Result<Option<usize>, JsonError> {
        let i = self.s.skip_ws(end);
        match self.b.get(i) {
            Some(b',') => Ok(Some(self.s.skip_ws(i + 1))),
            Some(b'}') => self.close(i).map(|_| None),
            Some(&found) => Err(JsonError::Unexpected {
                at: i,
                expected: "`,` or `}`",
                found,
            }),
            None => Err(self.s.unclosed(self.open)),
        }
    }

    fn close(&mut self, at: usize) -> Result<Option<Key<'a>>, JsonError> {
        self.state = State::Done;
        self.s.expect_end(at + 1)?;
        Ok(None)
    }
}

impl<'a> Iterator for Members<'a> {
    type Item = Result<Key<'a>, JsonError>;

    fn next(&mut self) -> Option<Self::Item> {
        let step = self.step();
        if step.is_err() {
            self.state = State::Done;
        }
        step.transpose()
    }
}

/// The items of an array, read one at a time: each item's span, validated. The walk ends at
/// the closing `]` (nothing after it is read) or after an error.
#[derive(Debug)]
pub struct Items<'a> {
    s: Scanner<'a>,
    b: &'a [u8],
    open: usize,
    state: State,
}

impl<'a> Items<'a> {
    /// A walk over the array that `body` holds (after optional whitespace), such as the span of
    /// a value another walk returned. Nothing after the closing `]` is read.
    ///
    /// ```
    /// use context_relay_json::Items;
    ///
    /// let body = br#" [1, "two", {"three": 3}] "#;
    /// let items: Vec<_> = Items::root(body).unwrap().collect::<Result<_, _>>().unwrap();
    /// assert_eq!(&body[items[1].clone()], br#""two""#);
    /// assert!(Items::root(b"{}").is_err());
    /// ```
    pub fn root(body: &'a [u8]) -> Result<Self, JsonError> {
        let s = Scanner::new(body);
        let open = s.skip_ws(0);
        Self::new(s, body, open)
    }

    fn new(s: Scanner<'a>, b: &'a [u8], open: usize) -> Result<Self, JsonError> {
        match Kind::at(b, open) {
            Some(Kind::Array) => Ok(Self {
                s,
                b,
                open,
                state: State::Open(open + 1),
            }),
            Some(found) => Err(JsonError::WrongKind {
                at: open,
                expected: "an array",
                found,
            }),
            None => Err(s.value_error(open)),
        }
    }

    fn step(&mut self) -> Result<Option<Span>, JsonError> {
        let b = self.b;
        let i = match self.state {
            State::Done => return Ok(None),
            State::Open(i) => {
                let i = self.s.skip_ws(i);
                if b.get(i) == Some(&b']') {
                    self.state = State::Done;
                    return Ok(None);
                }
                i
            }
            State::Pending(end) | State::After(end) => {
                let i = self.s.skip_ws(end);
                match b.get(i) {
                    Some(b',') => self.s.skip_ws(i + 1),
                    Some(b']') => {
                        self.state = State::Done;
                        return Ok(None);
                    }
                    Some(&found) => {
                        return Err(JsonError::Unexpected {
                            at: i,
                            expected: "`,` or `]`",
                            found,
                        });
                    }
                    None => return Err(self.s.unclosed(self.open)),
                }
            }
        };
        if i >= b.len() {
            return Err(self.s.unclosed(self.open));
        }
        let end = self.s.skip_value(i)?;
        check_utf8(&b[..end], i)?;
        self.state = State::After(end);
        Ok(Some(i..end))
    }
}

impl Iterator for Items<'_> {
    type Item = Result<Span, JsonError>;

    fn next(&mut self) -> Option<Self::Item> {
        let step = self.step();
        if step.is_err() {
            self.state = State::Done;
        }
        step.transpose()
    }
}

/// The first top-level member named `key` of the object `body`, reading the body only up to
/// the end of that member's value.
///
/// The work is bounded by the bytes before the key and the value itself, not by the body's
/// size: a `model` sent first is found in the same time in a 1 KB and in a 1 MB body.
///
/// What is validated: everything read, that is the bytes up to the end of the value, exactly
/// as [`super::parse_object`] would (an error there is returned). What is not: the rest of
/// the body, so a body malformed after the member is answered with the member (whoever
/// parses the whole body later, such as the provider, refuses it), and a second member named
/// `key` after the first is not seen (the first one is returned). When there is no such
/// member the whole body has been read and validated, and the answer is `Ok(None)`.
///
/// ```
/// use context_relay_json::{decode_str, find_member};
///
/// let body = br#"{"stream":true,"model":"gpt-5","messages":[ malformed later"#;
/// let model = find_member(body, "model").unwrap().unwrap();
/// assert_eq!(decode_str(body, model.value).unwrap(), "gpt-5");
/// assert!(find_member(body, "absent").is_err());
/// assert_eq!(find_member(br#"{"a":1}"#, "model"), Ok(None));
/// ```
pub fn find_member<'a>(body: &'a [u8], key: &str) -> Result<Option<Field<'a>>, JsonError> {
    let mut members = Members::root(body)?;
    while let Some(member) = members.next() {
        let member = member?;
        if member.key == key {
            let value = members.value(&member)?;
            return Ok(Some(Field {
                key: member.key,
                key_span: member.key_span,
                value,
            }));
        }
    }
    Ok(None)
}

/// `body` with the JSON string at `span` (quotes included, as [`find_member`] gives it)
/// replaced by the string `value`, JSON-escaped.
///
/// One copy of the body at most: when the string already decodes to `value` (the client sent
/// the name the target wants), `body` itself is returned, without copying a byte. Errors when
/// `span` is not exactly one JSON string of `body`.
///
/// ```
/// use bytes::Bytes;
/// use context_relay_json::{find_member, splice_str};
///
/// let body = Bytes::from_static(br#"{"model" : "relay-fast","n":1.50}"#);
/// let model = find_member(&body, "model").unwrap().unwrap();
/// let out = splice_str(&body, model.value.clone(), "gpt-5.5").unwrap();
/// assert_eq!(&out[..], br#"{"model" : "gpt-5.5","n":1.50}"#);
/// let same = splice_str(&body, model.value, "relay-fast").unwrap();
/// assert_eq!(same.as_ptr(), body.as_ptr());
/// ```
pub fn splice_str(body: &Bytes, span: Span, value: &str) -> Result<Bytes, JsonError> {
    if decode_str(body, span.clone())? == value {
        return Ok(body.clone());
    }
    // `decode_str` checked that the span lies within the body.
    Ok(write_str(body, span, value).unwrap_or_else(|| body.clone()))
}

/// `body` with the bytes at `span` replaced by the JSON string `value`, without reading what
/// stood there: for a caller that already knows the span holds a string literal of `body`
/// naming something else ([`splice_str`] finds out both by decoding it). `None` when `span`
/// does not lie within `body`.
///
/// ```
/// use context_relay_json::write_str;
///
/// let body = br#"{"model":"relay-fast","n":1}"#;
/// assert_eq!(&write_str(body, 9..21, "gpt \"5\"").unwrap()[..], br#"{"model":"gpt \"5\"","n":1}"#);
/// assert!(write_str(body, 9..40, "x").is_none());
/// ```
pub fn write_str(body: &[u8], span: Span, value: &str) -> Option<Bytes> {
    let (before, after) = (body.get(..span.start)?, body.get(span.end..)?);
    // The literal is written straight into the new body (no string of its own); escapes make
    // it longer than the text, rarely.
    let mut out = Vec::with_capacity(before.len() + after.len() + value.len() + 2);
    out.extend_from_slice(before);
    // Serialising a `str` into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut out, value);
    out.extend_from_slice(after);
    Some(Bytes::from(out))
}

#[cfg(test)]
mod tests;
