//! A body read once: [`Doc`], the spans of its values recorded by one validating scan, so
//! that reading a nested object or array costs a lookup instead of another scan.
//!
//! [`super::object_at`] and [`super::array_at`] scan (and validate) the bytes of the value
//! they are given. An editor that reads a list and then each of its items reads every byte
//! of those items two or three times. [`Doc`] scans the body once, with the same loop as
//! [`super::validate`] (so a body is accepted or refused, with the same [`JsonError`], exactly
//! as there), and keeps for every value its span, the index of what follows it and, for an
//! object member, its key's span. [`Doc::object_at`] and [`Doc::array_at`] then answer from
//! these records: a binary search for the value and a walk over its children.
//!
//! # Memory
//!
//! A value costs one record of five `u32`s (20 bytes), whatever its size: a long string is
//! one record. Bodies of real requests are mostly long strings and hold a few records per KiB;
//! the most a body can hold is one value per two bytes (`[0,0,0,…]`), about ten times its own
//! size in records (twenty while the list grows). [`Doc::parse_to_depth`] bounds this for
//! callers that read only the first levels of a body: deeper values are validated and not
//! recorded. Offsets are `u32`, so a body of 4 GiB or more is refused
//! ([`JsonError::TooLarge`]); the scan's own stack stays bounded by [`super::MAX_NESTING`].

use super::scan::{Scanner, Visit, check_utf8, decode_string};
use super::{Array, Field, JsonError, Kind, Object, Span};

/// A validated body and the spans of its values, from one scan.
///
/// ```
/// use context_relay_json::Doc;
///
/// let body = br#"{"model": "gpt-5", "input": [{"type": "message"}, 2]}"#;
/// let doc = Doc::parse(body).unwrap();
/// let root = doc.root_object().unwrap();
/// let input = doc.array_at(root.get("input").unwrap().value.clone()).unwrap();
/// let first = doc.object_at(input.items[0].clone()).unwrap();
/// assert_eq!(first.fields[0].key, "type");
/// assert_eq!(&body[input.items[1].clone()], b"2");
///
/// assert!(Doc::parse(br#"{"a": [1, 2}"#).is_err());
/// ```
#[derive(Debug, Clone)]
pub struct Doc<'a> {
    body: &'a [u8],
    /// Every recorded value, in document order (a container before what it holds).
    nodes: Vec<Node>,
}

/// One recorded value. Its children are the records after it, up to `next`.
#[derive(Debug, Clone, Copy)]
struct Node {
    start: u32,
    end: u32,
    /// The index of the first record after this value and everything recorded inside it.
    next: u32,
    /// The key's span (quotes included) when the value is an object member; `0..0` otherwise
    /// (a key is at least two bytes long).
    key_start: u32,
    key_end: u32,
}

impl Node {
    fn span(&self) -> Span {
        self.start as usize..self.end as usize
    }
}

impl<'a> Doc<'a> {
    /// Validates `body` (one JSON value between optional whitespace, as [`super::validate`])
    /// and records every value in it.
    pub fn parse(body: &'a [u8]) -> Result<Self, JsonError> {
        Self::parse_to_depth(body, usize::MAX)
    }

    /// Validates all of `body` as [`Doc::parse`] does, recording only the values enclosed by
    /// at most `depth` arrays and objects (the top-level value is at depth 0, its members or
    /// items at depth 1). Deeper values cost no memory; [`Doc::object_at`] and
    /// [`Doc::array_at`] refuse the containers whose content was not recorded.
    ///
    /// ```
    /// use context_relay_json::{Doc, JsonError};
    ///
    /// let body = br#"{"a": [[1], []]}"#;
    /// let doc = Doc::parse_to_depth(body, 2).unwrap();
    /// let a = doc.array_at(6..15).unwrap();
    /// assert_eq!(a.items, [7..10, 12..14]);
    /// assert!(doc.array_at(12..14).unwrap().items.is_empty());
    /// assert!(matches!(doc.array_at(7..10), Err(JsonError::NotIndexed { .. })));
    /// ```
    pub fn parse_to_depth(body: &'a [u8], depth: usize) -> Result<Self, JsonError> {
        if u32::try_from(body.len()).is_err() {
            return Err(JsonError::TooLarge {
                len: body.len(),
                limit: u32::MAX as usize,
            });
        }
        check_utf8(body, 0)?;
        let mut s = Scanner::new(body);
        let start = s.skip_ws(0);
        let mut record = Record {
            nodes: Vec::new(),
            open: Vec::new(),
            depth: 0,
            limit: depth,
        };
        let end = s.walk(start, &mut record)?;
        s.expect_end(end)?;
        Ok(Self {
            body,
            nodes: record.nodes,
        })
    }

    /// The body this index was built from.
    pub fn body(&self) -> &'a [u8] {
        self.body
    }

    /// How many values were recorded.
    pub fn recorded(&self) -> usize {
        self.nodes.len()
    }

    /// The span of the top-level value (surrounding whitespace excluded).
    pub fn root(&self) -> Span {
        self.nodes.first().map_or(0..0, Node::span)
    }

    /// The top-level object's members, as [`super::parse_object`] gives them: a top-level
    /// value of another kind gives [`JsonError::WrongKind`].
    pub fn root_object(&self) -> Result<Object<'a>, JsonError> {
        self.object_at(self.root())
    }

    /// The object occupying exactly `span`, which must be a recorded value (as from this
    /// index's [`Object`] or [`Array`] answers): what [`super::object_at`] answers, without a
    /// scan.
    ///
    /// A span that is not a recorded value, or an object whose members were not recorded
    /// ([`Doc::parse_to_depth`]), gives [`JsonError::NotIndexed`]; a recorded value of another
    /// kind gives [`JsonError::WrongKind`].
    pub fn object_at(&self, span: Span) -> Result<Object<'a>, JsonError> {
        let at = self.container(&span, Kind::Object, "an object")?;
        let mut fields = Vec::new();
        for node in self.children(at) {
            let key_span = node.key_start as usize..node.key_end as usize;
            fields.push(Field {
                key: decode_string(self.body, key_span.clone())?,
                key_span,
                value: node.span(),
            });
        }
        Ok(Object { span, fields })
    }

    /// The array occupying exactly `span`, which must be a recorded value: what
    /// [`super::array_at`] answers, without a scan. Errors as [`Doc::object_at`].
    pub fn array_at(&self, span: Span) -> Result<Array, JsonError> {
        let at = self.container(&span, Kind::Array, "an array")?;
        let items = self.children(at).map(|n| n.span()).collect();
        Ok(Array { span, items })
    }

    /// The index of the record of `span`, a container of kind `want` whose content is
    /// recorded.
    fn container(
        &self,
        span: &Span,
        want: Kind,
        expected: &'static str,
    ) -> Result<usize, JsonError> {
        if !(span.start < span.end && span.end <= self.body.len()) {
            return Err(JsonError::OutOfBounds {
                start: span.start,
                end: span.end,
                len: self.body.len(),
            });
        }
        let not_indexed = JsonError::NotIndexed {
            start: span.start,
            end: span.end,
        };
        // `span.end` fits: the body's length does (see `parse_to_depth`).
        let start = u32::try_from(span.start).map_err(|_| not_indexed.clone())?;
        let at = self
            .nodes
            .binary_search_by_key(&start, |n| n.start)
            .map_err(|_| not_indexed.clone())?;
        let node = self.nodes[at];
        if node.end as usize != span.end {
            return Err(not_indexed);
        }
        match Kind::at(self.body, span.start) {
            Some(found) if found != want => {
                return Err(JsonError::WrongKind {
                    at: span.start,
                    expected,
                    found,
                });
            }
            _ => {}
        }
        // Nothing recorded inside a container that holds something: it lies deeper than the
        // index reaches.
        let inner = self
            .body
            .get(span.start + 1..span.end - 1)
            .unwrap_or_default();
        if node.next as usize == at + 1 && !inner.iter().all(u8::is_ascii_whitespace) {
            return Err(not_indexed);
        }
        Ok(at)
    }

    /// The records of the values directly inside the container recorded at `at`.
    fn children(&self, at: usize) -> impl Iterator<Item = &Node> + '_ {
        let end = self.nodes.get(at).map_or(at, |n| n.next as usize);
        let mut i = at + 1;
        std::iter::from_fn(move || {
            let node = self.nodes.get(i).filter(|_| i < end)?;
            // `next` always lies past the record; `max` keeps the walk finite regardless.
            i = (node.next as usize).max(i + 1);
            Some(node)
        })
    }
}

/// The visitor that records the values of a [`Doc`].
struct Record {
    nodes: Vec<Node>,
    /// The records of the values opened and not closed yet, within the depth limit.
    open: Vec<u32>,
    /// How many values are open (the nesting of the next one).
    depth: usize,
    limit: usize,
}

impl Visit for Record {
    #[inline]
    fn open(&mut self, at: usize, key: Option<(usize, usize)>) {
        if self.depth <= self.limit {
            // Offsets fit in `u32` (`Doc::parse_to_depth` checks the body's length), and so
            // does the number of records (a value is at least one byte long).
            let (key_start, key_end) = key.unwrap_or((0, 0));
            self.open.push(self.nodes.len() as u32);
            self.nodes.push(Node {
                start: at as u32,
                end: at as u32,
                next: 0,
                key_start: key_start as u32,
                key_end: key_end as u32,
            });
        }
        self.depth += 1;
    }

    #[inline]
    fn close(&mut self, end: usize) {
        self.depth = self.depth.saturating_sub(1);
        if self.depth <= self.limit
            && let Some(at) = self.open.pop()
        {
            let next = self.nodes.len() as u32;
            if let Some(node) = self.nodes.get_mut(at as usize) {
                node.end = end as u32;
                node.next = next;
            }
        }
    }
}

#[cfg(test)]
mod tests;
