//! Splicing bytes into a scanned body.

use super::Span;

/// Two planned edits touch the same bytes: a bug in the planner, reported instead of
/// producing a corrupt body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected disjoint edits, found one at {second:?} overlapping one at {first:?}")]
pub struct EditError {
    /// The earlier edit's range.
    pub first: Span,
    /// The overlapping edit's range.
    pub second: Span,
}

/// A set of byte-range replacements applied to the original body in one copy.
///
/// Insertions are empty ranges. Edits at the same offset apply in the order they were
/// added; an insertion at the start of a replaced range goes before the replacement.
///
/// ```
/// use context_relay_json::Edits;
/// let mut e = Edits::default();
/// e.insert(1, b"0,".to_vec());
/// e.replace(3..4, b"9".to_vec());
/// assert_eq!(e.apply(b"[1,2]").unwrap(), b"[0,1,9]");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Edits {
    edits: Vec<(Span, Vec<u8>)>,
}

impl Edits {
    /// Inserts `bytes` before offset `at`.
    pub fn insert(&mut self, at: usize, bytes: Vec<u8>) {
        self.edits.push((at..at, bytes));
    }

    /// Replaces `span` by `bytes`.
    pub fn replace(&mut self, span: Span, bytes: Vec<u8>) {
        self.edits.push((span, bytes));
    }

    /// Removes `span`.
    pub fn remove(&mut self, span: Span) {
        self.edits.push((span, Vec::new()));
    }

    /// Whether nothing was planned.
    pub fn is_empty(&self) -> bool {
        self.edits.is_empty()
    }

    /// Applies the edits to `body`, copying everything else unchanged.
    pub fn apply(mut self, body: &[u8]) -> Result<Vec<u8>, EditError> {
        // Stable: equal keys keep insertion order.
        self.edits.sort_by_key(|(s, _)| (s.start, s.end));
        let grow: usize = self.edits.iter().map(|(_, b)| b.len()).sum();
        let mut out = Vec::with_capacity(body.len() + grow);
        let mut cursor = 0;
        let mut last: Span = 0..0;
        for (span, bytes) in &self.edits {
            if span.start < cursor || span.end < span.start || span.end > body.len() {
                return Err(EditError {
                    first: last,
                    second: span.clone(),
                });
            }
            out.extend_from_slice(&body[cursor..span.start]);
            out.extend_from_slice(bytes);
            cursor = span.end;
            last = span.clone();
        }
        out.extend_from_slice(&body[cursor..]);
        Ok(out)
    }
}

/// Planned changes to the members of one object or array: members dropped, one new member
/// first, one new member last. [`ListEdit::finish`] turns them into [`Edits`] with the commas
/// right whatever is dropped.
///
/// Whitespace is kept around kept members; a dropped member takes the separator before it
/// (or, when it precedes every kept member, the one after it) with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListEdit {
    open: usize,
    members: Vec<Span>,
    drop: Vec<bool>,
    prepend: Option<Vec<u8>>,
    append: Option<Vec<u8>>,
}

impl ListEdit {
    /// A list edit for the container whose opening bracket is at `span.start`, with its
    /// members' spans (for objects: key start to value end).
    pub fn new(span: &Span, members: Vec<Span>) -> Self {
        let n = members.len();
        Self {
            open: span.start,
            members,
            drop: vec![false; n],
            prepend: None,
            append: None,
        }
    }

    /// Drops member `index` (out of range: ignored).
    pub fn drop_member(&mut self, index: usize) {
        if let Some(d) = self.drop.get_mut(index) {
            *d = true;
        }
    }

    /// Whether member `index` is dropped.
    pub fn is_dropped(&self, index: usize) -> bool {
        self.drop.get(index).copied().unwrap_or(false)
    }

    /// Puts `member` (raw JSON: a value, or `"key":value`) before every existing member.
    pub fn prepend(&mut self, member: Vec<u8>) {
        self.prepend = Some(member);
    }

    /// Puts `member` after every existing member.
    pub fn append(&mut self, member: Vec<u8>) {
        self.append = Some(member);
    }

    /// How many members the container holds once the edit is applied.
    pub fn len_after(&self) -> usize {
        self.drop.iter().filter(|d| !**d).count()
            + usize::from(self.prepend.is_some())
            + usize::from(self.append.is_some())
    }

    /// Whether this edit changes anything.
    pub fn is_noop(&self) -> bool {
        self.prepend.is_none() && self.append.is_none() && !self.drop.contains(&true)
    }

    /// Adds the planned changes to `edits`.
    pub fn finish(self, edits: &mut Edits) {
        let m = &self.members;
        let kept: Vec<usize> = (0..m.len()).filter(|&i| !self.drop[i]).collect();
        match (kept.first(), kept.last()) {
            (Some(&first), Some(&last)) => {
                for i in 0..first {
                    edits.remove(m[i].start..m[i + 1].start);
                }
                for i in first + 1..m.len() {
                    if self.drop[i] {
                        edits.remove(m[i - 1].end..m[i].end);
                    }
                }
                if let Some(p) = self.prepend {
                    edits.insert(self.open + 1, with_comma_after(p));
                }
                if let Some(a) = self.append {
                    edits.insert(m[last].end, with_comma_before(a));
                }
            }
            _ => {
                if let (Some(f), Some(l)) = (m.first(), m.last()) {
                    edits.remove(f.start..l.end);
                }
                match (self.prepend, self.append) {
                    (Some(p), Some(a)) => {
                        edits.insert(self.open + 1, with_comma_after(p));
                        edits.insert(self.open + 1, a);
                    }
                    (Some(one), None) | (None, Some(one)) => edits.insert(self.open + 1, one),
                    (None, None) => {}
                }
            }
        }
    }
}

fn with_comma_after(mut member: Vec<u8>) -> Vec<u8> {
    member.push(b',');
    member
}

fn with_comma_before(member: Vec<u8>) -> Vec<u8> {
    let mut out = Vec::with_capacity(member.len() + 1);
    out.push(b',');
    out.extend_from_slice(&member);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate as json;

    fn run(body: &str, drop: &[usize], pre: Option<&str>, app: Option<&str>) -> String {
        let arr = json::array_at(body.as_bytes(), 0..body.len()).unwrap();
        let mut l = ListEdit::new(&arr.span, arr.items.clone());
        for &d in drop {
            l.drop_member(d);
        }
        if let Some(p) = pre {
            l.prepend(p.as_bytes().to_vec());
        }
        if let Some(a) = app {
            l.append(a.as_bytes().to_vec());
        }
        let mut e = Edits::default();
        l.finish(&mut e);
        String::from_utf8(e.apply(body.as_bytes()).unwrap()).unwrap()
    }

    #[test]
    fn drops_keep_commas_right() {
        assert_eq!(run("[1, 2, 3]", &[0], None, None), "[2, 3]");
        assert_eq!(run("[1, 2, 3]", &[1], None, None), "[1, 3]");
        assert_eq!(run("[1, 2, 3]", &[2], None, None), "[1, 2]");
        assert_eq!(run("[1, 2, 3]", &[0, 2], None, None), "[2]");
        assert_eq!(run("[1, 2, 3]", &[0, 1, 2], None, None), "[]");
        assert_eq!(run("[ 1 ,\n 2 ]", &[0, 1], Some("0"), None), "[0  ]");
        assert_eq!(run("[1, 2]", &[0], Some("0"), Some("9")), "[0,2,9]");
        assert_eq!(run("[1, 2]", &[0, 1], Some("0"), Some("9")), "[0,9]");
        assert_eq!(run("[]", &[], None, Some("9")), "[9]");
        assert_eq!(run("[ ]", &[], Some("0"), None), "[0 ]");
    }

    #[test]
    fn overlapping_edits_are_an_error() {
        let mut e = Edits::default();
        e.replace(0..3, Vec::new());
        e.replace(2..4, Vec::new());
        assert!(e.apply(b"abcdef").is_err());
        let mut e = Edits::default();
        e.replace(0..9, Vec::new());
        assert!(e.apply(b"abc").is_err());
    }
}
