//! Gathering the strings of one value in a single pass: every string of its arrays, and of
//! the members of its objects whose keys a caller follows, without re-reading a level.
//!
//! Walking a nested value level by level (find an item's span, then walk into that span)
//! reads a byte once per level above it: on a body of nested arrays that is quadratic, and
//! each level's walker keeps its own stack. This walk reads each byte of the value once,
//! follows containers with one explicit stack bounded by the caller's depth, and skips the
//! members it does not follow with the scanner (validated, also once).

use super::scan::{Scanner, check_utf8};
use smallvec::SmallVec;

use super::{JsonError, Span, decode_str};

/// The strings of the value starting at `body[start]`, in document order, as the spans of
/// their contents (between the quotes, escapes as sent), appended to `out` (a `Vec`, or any
/// collection that extends); returns where the value ends.
///
/// Arrays are followed item by item; of an object, only the members whose decoded key
/// `follow` accepts (all of them when a key repeats), the others are skipped. Numbers,
/// booleans and null give nothing. A value enclosed by more than `max_depth` followed
/// containers gives [`JsonError::TooDeep`], before anything deeper is read. What is read is
/// validated as [`super::validate`] does; nothing after the value is.
///
/// ```
/// use context_relay_json::strings;
///
/// let body = br#"[{"text":"a","image":{"text":"no"}},["b",1],{"content":[{"text":"c"}]}] tail"#;
/// let mut out = Vec::new();
/// let end = strings(body, 0, 8, |k| k == "text" || k == "content", &mut out).unwrap();
/// let found: Vec<&[u8]> = out.iter().map(|s| &body[s.clone()]).collect();
/// assert_eq!(found, [&b"a"[..], b"b", b"c"]);
/// assert_eq!(&body[end..], b" tail");
/// assert!(strings(b"[[[1]]]", 0, 2, |_| true, &mut out).is_err());
/// ```
pub fn strings(
    body: &[u8],
    start: usize,
    max_depth: usize,
    follow: impl Fn(&str) -> bool,
    out: &mut impl Extend<Span>,
) -> Result<usize, JsonError> {
    let mut walk = Walk {
        s: Scanner::new(body),
        b: body,
        follow,
        open: SmallVec::new(),
    };
    let end = walk.run(start, max_depth, out)?;
    check_utf8(&body[..end], start)?;
    Ok(end)
}

struct Walk<'a, F> {
    s: Scanner<'a>,
    b: &'a [u8],
    follow: F,
    /// The offsets of the followed containers around the current value (the usual few on the
    /// stack).
    open: SmallVec<[usize; 8]>,
}

/// What comes next inside an object: a followed member's value, or the end of the object.
enum Next {
    Value(usize),
    Closed(usize),
}

impl<F: Fn(&str) -> bool> Walk<'_, F> {
    fn run(
        &mut self,
        start: usize,
        max_depth: usize,
        out: &mut impl Extend<Span>,
    ) -> Result<usize, JsonError> {
        let b = self.b;
        let mut i = start;
        loop {
            // A value starts at `i`.
            if self.open.len() > max_depth {
                return Err(JsonError::TooDeep {
                    at: i,
                    limit: max_depth,
                });
            }
            i = match b.get(i) {
                Some(b'"') => {
                    let end = self.s.skip_string(i)?;
                    out.extend(Some(i + 1..end - 1));
                    end
                }
                Some(b'[') => {
                    let j = self.s.skip_ws(i + 1);
                    if b.get(j) == Some(&b']') {
                        j + 1
                    } else if j >= b.len() {
                        return Err(self.s.unclosed(i));
                    } else {
                        self.open.push(i);
                        i = j;
                        continue;
                    }
                }
                Some(b'{') => {
                    let j = self.s.skip_ws(i + 1);
                    match self.member(j, i, true)? {
                        Next::Closed(end) => end,
                        Next::Value(v) => {
                            self.open.push(i);
                            i = v;
                            continue;
                        }
                    }
                }
                Some(_) => self.s.skip_value(i)?,
                None => {
                    return Err(match self.open.last() {
                        Some(&open) => self.s.unclosed(open),
                        None => self.s.value_error(i),
                    });
                }
            };
            // A value ended at `i`: close containers until one goes on.
            loop {
                let Some(&open) = self.open.last() else {
                    return Ok(i);
                };
                let j = self.s.skip_ws(i);
                let is_object = b[open] == b'{';
                match b.get(j) {
                    Some(b',') if is_object => {
                        match self.member(self.s.skip_ws(j + 1), open, false)? {
                            Next::Value(v) => {
                                i = v;
                                break;
                            }
                            Next::Closed(end) => {
                                self.open.pop();
                                i = end;
                            }
                        }
                    }
                    Some(b',') => {
                        let v = self.s.skip_ws(j + 1);
                        if v >= b.len() {
                            return Err(self.s.unclosed(open));
                        }
                        i = v;
                        break;
                    }
                    Some(b'}') if is_object => {
                        self.open.pop();
                        i = j + 1;
                    }
                    Some(b']') if !is_object => {
                        self.open.pop();
                        i = j + 1;
                    }
                    Some(&found) => {
                        return Err(JsonError::Unexpected {
                            at: j,
                            expected: if is_object {
                                "`,` or `}`"
                            } else {
                                "`,` or `]`"
                            },
                            found,
                        });
                    }
                    None => return Err(self.s.unclosed(open)),
                }
            }
        }
    }

    /// From `i` (a key, or the `}` when `may_close`) in the object opened at `open`: skips the
    /// members not followed and returns the next followed value, or where the object ends.
    fn member(&mut self, mut i: usize, open: usize, may_close: bool) -> Result<Next, JsonError> {
        let b = self.b;
        if may_close && b.get(i) == Some(&b'}') {
            return Ok(Next::Closed(i + 1));
        }
        loop {
            self.s.expect_byte(i, b'"', "a string key", open)?;
            let key_end = self.s.skip_string(i)?;
            let colon = self.s.skip_ws(key_end);
            self.s.expect_byte(colon, b':', "`:`", open)?;
            let value = self.s.skip_ws(colon + 1);
            if value >= b.len() {
                return Err(self.s.unclosed(open));
            }
            if (self.follow)(&decode_str(b, i..key_end)?) {
                return Ok(Next::Value(value));
            }
            let end = self.s.skip_value(value)?;
            let j = self.s.skip_ws(end);
            match b.get(j) {
                Some(b',') => i = self.s.skip_ws(j + 1),
                Some(b'}') => return Ok(Next::Closed(j + 1)),
                Some(&found) => {
                    return Err(JsonError::Unexpected {
                        at: j,
                        expected: "`,` or `}`",
                        found,
                    });
                }
                None => return Err(self.s.unclosed(open)),
            }
        }
    }
}
