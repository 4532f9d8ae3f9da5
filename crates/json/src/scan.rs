//! The validating scanner behind [`super`]: skips values without building them.

use std::borrow::Cow;

use smallvec::SmallVec;

use super::string;
use super::{Array, Field, JsonError, MAX_NESTING, Object, Span};

#[derive(Debug)]
pub(super) struct Scanner<'a> {
    b: &'a [u8],
    /// Offsets of the open brackets while skipping a nested value: an explicit stack instead
    /// of recursion, at most [`MAX_NESTING`] deep; the usual few levels stay on the stack
    /// (no allocation per scan).
    stack: SmallVec<[usize; 16]>,
}

impl<'a> Scanner<'a> {
    /// A scanner over `b`. It makes no pass over the whole input: strings are checked for
    /// raw control bytes as they are crossed, and UTF-8 is left to the caller (see
    /// [`check_utf8`]), once for the bytes it reads.
    pub(super) fn new(b: &'a [u8]) -> Self {
        Self {
            b,
            stack: SmallVec::new(),
        }
    }

    #[inline]
    pub(super) fn skip_ws(&self, i: usize) -> usize {
        skip_ws(self.b, i)
    }

    /// Only whitespace may follow the top-level value ending at `end`.
    pub(super) fn expect_end(&self, end: usize) -> Result<(), JsonError> {
        let i = self.skip_ws(end);
        if i < self.b.len() {
            Err(JsonError::TrailingData { at: i })
        } else {
            Ok(())
        }
    }

    /// The error for a position where a value should start but none does.
    pub(super) fn value_error(&self, at: usize) -> JsonError {
        match self.b.get(at) {
            None => JsonError::UnexpectedEnd {
                at,
                expected: "a value",
            },
            Some(&found) => JsonError::Unexpected {
                at,
                expected: "a value",
                found,
            },
        }
    }

    /// `b[i]` must be `want`; `open_at` is the enclosing bracket, for the end-of-input error.
    #[inline]
    pub(super) fn expect_byte(
        &self,
        i: usize,
        want: u8,
        expected: &'static str,
        open_at: usize,
    ) -> Result<(), JsonError> {
        match self.b.get(i) {
            Some(&c) if c == want => Ok(()),
            Some(&found) => Err(JsonError::Unexpected {
                at: i,
                expected,
                found,
            }),
            None => Err(self.unclosed(open_at)),
        }
    }

    pub(super) fn unclosed(&self, open_at: usize) -> JsonError {
        JsonError::Unclosed {
            open_at,
            open: self.b.get(open_at).copied().unwrap_or(b'{'),
        }
    }

    /// Parses the object whose `{` is at `start` into its members.
    pub(super) fn object(&mut self, start: usize) -> Result<Object<'a>, JsonError> {
        let mut fields = Vec::new();
        let mut i = self.skip_ws(start + 1);
        if self.b.get(i) == Some(&b'}') {
            return Ok(Object {
                span: start..i + 1,
                fields,
            });
        }
        loop {
            self.expect_byte(i, b'"', "a string key", start)?;
            let key_end = self.skip_string(i)?;
            let key = decode_string(self.b, i..key_end)?;
            let colon = self.skip_ws(key_end);
            self.expect_byte(colon, b':', "`:`", start)?;
            let value_start = self.skip_ws(colon + 1);
            if value_start >= self.b.len() {
                return Err(self.unclosed(start));
            }
            let value_end = self.skip_value(value_start)?;
            fields.push(Field {
                key,
                key_span: i..key_end,
                value: value_start..value_end,
            });
            i = self.skip_ws(value_end);
            match self.b.get(i) {
                Some(b',') => i = self.skip_ws(i + 1),
                Some(b'}') => {
                    return Ok(Object {
                        span: start..i + 1,
                        fields,
                    });
                }
                Some(&found) => {
                    return Err(JsonError::Unexpected {
                        at: i,
                        expected: "`,` or `}`",
                        found,
                    });
                }
                None => return Err(self.unclosed(start)),
            }
        }
    }

    /// Parses the array whose `[` is at `start` into its item spans.
    pub(super) fn array(&mut self, start: usize) -> Result<Array, JsonError> {
        let mut items = Vec::new();
        let mut i = self.skip_ws(start + 1);
        if self.b.get(i) == Some(&b']') {
            return Ok(Array {
                span: start..i + 1,
                items,
            });
        }
        loop {
            if i >= self.b.len() {
                return Err(self.unclosed(start));
            }
            let end = self.skip_value(i)?;
            items.push(i..end);
            i = self.skip_ws(end);
            match self.b.get(i) {
                Some(b',') => i = self.skip_ws(i + 1),
                Some(b']') => {
                    return Ok(Array {
                        span: start..i + 1,
                        items,
                    });
                }
                Some(&found) => {
                    return Err(JsonError::Unexpected {
                        at: i,
                        expected: "`,` or `]`",
                        found,
                    });
                }
                None => return Err(self.unclosed(start)),
            }
        }
    }

    /// Skips the value starting at `start` (no leading whitespace), validating it, and returns
    /// the offset just past it.
    pub(super) fn skip_value(&mut self, start: usize) -> Result<usize, JsonError> {
        self.walk(start, &mut Skip)
    }

    /// Skips the value starting at `start` as [`Scanner::skip_value`] does, telling `visit`
    /// where each value inside it (itself included) starts and ends, in document order.
    ///
    /// The one loop behind every validating read: [`Skip`] makes it the plain skip (its calls
    /// compile to nothing), the index records nodes through it.
    pub(super) fn walk<V: Visit>(
        &mut self,
        start: usize,
        visit: &mut V,
    ) -> Result<usize, JsonError> {
        self.stack.clear();
        let mut i = start;
        // The key of the member whose value starts at `i`, when it is one.
        let mut key = None;
        loop {
            // A value starts at `i`.
            visit.open(i, key);
            i = match self.b.get(i) {
                Some(b'"') => self.skip_string(i)?,
                Some(b'{') => {
                    let j = self.skip_ws(i + 1);
                    if self.b.get(j) == Some(&b'}') {
                        j + 1
                    } else {
                        self.push(i)?;
                        let (k, value) = self.skip_member_key(j, i)?;
                        key = Some(k);
                        i = value;
                        continue;
                    }
                }
                Some(b'[') => {
                    let j = self.skip_ws(i + 1);
                    if self.b.get(j) == Some(&b']') {
                        j + 1
                    } else if j >= self.b.len() {
                        return Err(self.unclosed(i));
                    } else {
                        self.push(i)?;
                        key = None;
                        i = j;
                        continue;
                    }
                }
                Some(b't') => self.literal(i, b"true")?,
                Some(b'f') => self.literal(i, b"false")?,
                Some(b'n') => self.literal(i, b"null")?,
                Some(b'-' | b'0'..=b'9') => self.number(i)?,
                _ => {
                    return Err(match self.stack.last() {
                        Some(&open) if i >= self.b.len() => self.unclosed(open),
                        _ => self.value_error(i),
                    });
                }
            };
            visit.close(i);
            // A value ended at `i`: close containers until one continues.
            loop {
                let Some(&open) = self.stack.last() else {
                    return Ok(i);
                };
                let is_object = self.b[open] == b'{';
                i = self.skip_ws(i);
                match self.b.get(i) {
                    Some(b',') => {
                        let j = self.skip_ws(i + 1);
                        if is_object {
                            let (k, value) = self.skip_member_key(j, open)?;
                            key = Some(k);
                            i = value;
                        } else if j >= self.b.len() {
                            return Err(self.unclosed(open));
                        } else {
                            key = None;
                            i = j;
                        }
                        break;
                    }
                    Some(b'}') if is_object => {
                        self.stack.pop();
                        i += 1;
                        visit.close(i);
                    }
                    Some(b']') if !is_object => {
                        self.stack.pop();
                        i += 1;
                        visit.close(i);
                    }
                    Some(&found) => {
                        return Err(JsonError::Unexpected {
                            at: i,
                            expected: if is_object {
                                "`,` or `}`"
                            } else {
                                "`,` or `]`"
                            },
                            found,
                        });
                    }
                    None => return Err(self.unclosed(open)),
                }
            }
        }
    }

    /// Enters the array or object opened at `at`, within [`MAX_NESTING`].
    fn push(&mut self, at: usize) -> Result<(), JsonError> {
        if self.stack.len() >= MAX_NESTING {
            return Err(JsonError::TooDeep {
                at,
                limit: MAX_NESTING,
            });
        }
        self.stack.push(at);
        Ok(())
    }

    /// Skips `"key" :` and the whitespace after it; returns the key's span (quotes included)
    /// and where the value starts.
    fn skip_member_key(&self, i: usize, open: usize) -> Result<((usize, usize), usize), JsonError> {
        self.expect_byte(i, b'"', "a string key", open)?;
        let key_end = self.skip_string(i)?;
        let colon = self.skip_ws(key_end);
        self.expect_byte(colon, b':', "`:`", open)?;
        let value = self.skip_ws(colon + 1);
        if value >= self.b.len() {
            return Err(self.unclosed(open));
        }
        Ok(((i, key_end), value))
    }

    fn literal(&self, i: usize, word: &'static [u8]) -> Result<usize, JsonError> {
        if self.b[i..].starts_with(word) {
            Ok(i + word.len())
        } else {
            Err(JsonError::BadLiteral { at: i })
        }
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    fn number(&self, start: usize) -> Result<usize, JsonError> {
        let b = self.b;
        let bad = JsonError::BadNumber { at: start };
        let digits = |mut i: usize| {
            let from = i;
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            (i, i > from)
        };
        let mut i = start;
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        match b.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => i = digits(i).0,
            _ => return Err(bad),
        }
        if b.get(i) == Some(&b'.') {
            let (j, any) = digits(i + 1);
            if !any {
                return Err(bad);
            }
            i = j;
        }
        if let Some(b'e' | b'E') = b.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = b.get(i) {
                i += 1;
            }
            let (j, any) = digits(i);
            if !any {
                return Err(bad);
            }
            i = j;
        }
        Ok(i)
    }

    /// Skips the string whose opening quote is at `start`; returns the offset past its
    /// closing quote. UTF-8 is checked by the callers, once for the bytes they read.
    #[inline]
    pub(super) fn skip_string(&self, start: usize) -> Result<usize, JsonError> {
        string::skip(self.b, start)
    }
}

/// What [`Scanner::walk`] tells about the values it crosses, in document order: each value's
/// start (with the span of its key, for an object member) and then its end, a container's end
/// after those of everything inside it. After an error the calls stop where the error is.
pub(super) trait Visit {
    /// A value starts at `at`; `key` is the start and end of its key when it is a member.
    fn open(&mut self, at: usize, key: Option<(usize, usize)>);
    /// The value opened last and not closed yet ends just before `end`.
    fn close(&mut self, end: usize);
}

/// The visitor of a plain skip: nothing is kept.
pub(super) struct Skip;

impl Visit for Skip {
    #[inline(always)]
    fn open(&mut self, _: usize, _: Option<(usize, usize)>) {}
    #[inline(always)]
    fn close(&mut self, _: usize) {}
}

/// The offset of the first byte at or after `i` that is not JSON whitespace.
#[inline]
pub(super) fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = b.get(i) {
        i += 1;
    }
    i
}

/// Checks that `b[from..]` is UTF-8, reporting the first bad offset.
///
/// One vectorised pass over the whole input (`simdutf8`, several times faster than the
/// standard library on mixed text) instead of a check per string; only a failure pays for
/// the standard library's error position.
pub(super) fn check_utf8(b: &[u8], from: usize) -> Result<(), JsonError> {
    let region = &b[from.min(b.len())..];
    // A short value, most often ASCII: a word-at-a-time check first, where `simdutf8` hands
    // anything under 64 bytes to the standard library's validator (about 100 instructions for
    // a ten-byte string). Longer regions go straight to the vectorised pass, so text that is
    // not ASCII is not read twice.
    if (region.len() < 64 && region.is_ascii()) || simdutf8::basic::from_utf8(region).is_ok() {
        return Ok(());
    }
    match std::str::from_utf8(region) {
        Ok(_) => Ok(()),
        Err(e) => Err(JsonError::InvalidUtf8 {
            at: from + e.valid_up_to(),
        }),
    }
}

/// Decodes a string already checked by [`Scanner::skip_string`] (quotes included).
///
/// Lone surrogates in `\u` escapes decode to U+FFFD: they are valid JSON syntax, and keys and
/// type tags holding them only need to compare unequal to the names we look for.
pub(super) fn decode_string(b: &[u8], span: Span) -> Result<Cow<'_, str>, JsonError> {
    let inner_start = span.start + 1;
    let inner = b
        .get(inner_start..span.end.saturating_sub(1))
        .ok_or(JsonError::UnterminatedString { start: span.start })?;
    let utf8 = |bytes| {
        std::str::from_utf8(bytes).map_err(|e| JsonError::InvalidUtf8 {
            at: inner_start + e.valid_up_to(),
        })
    };
    // Keys and short values are most of the calls: below a few words, core's search costs
    // less than setting up `memchr`'s vector one.
    let escaped = if inner.len() < 64 {
        inner.contains(&b'\\')
    } else {
        memchr::memchr(b'\\', inner).is_some()
    };
    if !escaped {
        return utf8(inner).map(Cow::Borrowed);
    }
    let mut out = String::with_capacity(inner.len());
    let mut i = 0;
    while i < inner.len() {
        let Some(k) = memchr::memchr(b'\\', &inner[i..]) else {
            out.push_str(utf8(&inner[i..])?);
            break;
        };
        out.push_str(utf8(&inner[i..i + k])?);
        i += k;
        let bad = JsonError::InvalidEscape {
            at: inner_start + i,
        };
        let c = match inner.get(i + 1) {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                let hi = hex4(inner, i + 2).ok_or(bad.clone())?;
                i += 6;
                if (0xD800..0xDC00).contains(&hi) {
                    let lo = (inner.get(i) == Some(&b'\\') && inner.get(i + 1) == Some(&b'u'))
                        .then(|| hex4(inner, i + 2))
                        .flatten()
                        .filter(|lo| (0xDC00..0xE000).contains(lo));
                    if let Some(lo) = lo {
                        i += 6;
                        let cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                        out.push(char::from_u32(cp).unwrap_or('\u{FFFD}'));
                    } else {
                        out.push('\u{FFFD}');
                    }
                } else {
                    out.push(char::from_u32(hi).unwrap_or('\u{FFFD}'));
                }
                continue;
            }
            _ => return Err(bad),
        };
        out.push(c);
        i += 2;
    }
    Ok(Cow::Owned(out))
}

fn hex4(b: &[u8], at: usize) -> Option<u32> {
    let s = std::str::from_utf8(b.get(at..at + 4)?).ok()?;
    u32::from_str_radix(s, 16).ok()
}
