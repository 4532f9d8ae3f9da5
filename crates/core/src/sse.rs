//! An incremental server-sent events splitter: bytes in, one [`Event`] per event out.
//!
//! Both readers of streamed response bodies (how a body ended, [`crate::ending`], and the
//! reply text, [`crate::reply`]) need the same thing from an SSE body fed in chunks split
//! anywhere: its events, each with its `event:` name and its `data:` lines, in bounded memory.
//!
//! - Lines end in `\n`, `\r\n` or `\r`; a `\r\n` split across two chunks is one line end.
//! - A blank line ends an event. An event with neither data nor a name is not reported.
//! - A line starting with `:` is a comment. A line without `:` is a field with an empty value.
//!   One space after the `:` is not part of the value.
//! - `event:` sets the event's name (the last one wins); `data:` lines are joined with `\n`.
//!   Other fields (`id:`, `retry:`) are read and ignored.
//! - Memory is bounded by a limit on the line and on the event data: a longer line is read by
//!   its first `limit` bytes ([`Event::line_cut`]), longer data is kept by its first `limit`
//!   bytes ([`Event::data_cut`]).
//! - [`Splitter::finish`] reads the last line and event of a body that ended without a blank
//!   line.

/// One event of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Event<'a> {
    /// The `event:` field, empty when the event had none.
    pub(crate) name: &'a [u8],
    /// The `data:` lines joined with `\n`, at most the splitter's limit in bytes.
    pub(crate) data: &'a [u8],
    /// Whether the event had a `data:` line.
    pub(crate) has_data: bool,
    /// The data outgrew the limit: [`data`](Self::data) is its start.
    pub(crate) data_cut: bool,
    /// A line of the event outgrew the limit and was read by its start only.
    pub(crate) line_cut: bool,
}

impl Event<'_> {
    /// Whether the event's data is all there: no line and no data was cut.
    pub(crate) fn is_whole(&self) -> bool {
        !self.data_cut && !self.line_cut
    }
}

/// Splits an SSE body into events, incrementally (see the module docs). Holds at most one
/// line and one event's data, each bounded by the limit it was made with.
#[derive(Debug, Clone)]
pub(crate) struct Splitter {
    limit: usize,
    /// The current, not yet terminated line (its first `limit` bytes).
    line: Vec<u8>,
    /// The current line's true length.
    line_len: usize,
    /// The previous byte was `\r`: a following `\n` belongs to the same line end.
    after_cr: bool,
    name: Vec<u8>,
    data: Vec<u8>,
    /// The current event's true data length.
    data_len: usize,
    has_data: bool,
    line_cut: bool,
    /// Chunks in a row that [`Splitter::skips`] searched and found to matter, up to
    /// [`MATTERED_IN_A_ROW`].
    mattered_in_a_row: u8,
}

/// How many chunks in a row may matter to a reader before [`Splitter::skips`] stops searching
/// its chunks: such a stream holds what the reader looks for in every event (a Chat
/// Completions stream with `stream_options.include_usage` names `usage` in each chunk; every
/// Responses event names its `type`), and each chunk would be searched twice, as a chunk and
/// event by event. A Responses stream names `usage` in its first two events only.
pub(crate) const MATTERED_IN_A_ROW: u8 = 8;

impl Splitter {
    /// A splitter keeping at most `limit` bytes of a line and of an event's data.
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            line: Vec::new(),
            line_len: 0,
            after_cr: false,
            name: Vec::new(),
            data: Vec::new(),
            data_len: 0,
            has_data: false,
            line_cut: false,
            mattered_in_a_row: 0,
        }
    }

    /// Chunks in a row that mattered (see [`Splitter::skips`]).
    #[cfg(test)]
    pub(crate) fn mattered_in_a_row(&self) -> u8 {
        self.mattered_in_a_row
    }

    /// Whether a reader may leave `chunk` unfed, its events unread: the splitter stands
    /// between two events and the chunk [`ends_events`], so every event of the chunk is made
    /// of the chunk's own lines and the splitter stands between events after it, and
    /// `matters`, the reader's search of the whole chunk for what it acts on, finds nothing.
    /// After [`MATTERED_IN_A_ROW`] chunks in a row that mattered, chunks are no longer
    /// searched (and never skipped).
    pub(crate) fn skips(&mut self, chunk: &[u8], matters: impl FnOnce(&[u8]) -> bool) -> bool {
        if self.mattered_in_a_row >= MATTERED_IN_A_ROW
            || !self.between_events()
            || !ends_events(chunk)
        {
            return false;
        }
        if matters(chunk) {
            self.mattered_in_a_row += 1;
            return false;
        }
        self.mattered_in_a_row = 0;
        true
    }

    /// Whether the splitter stands between two events: nothing of a line or of an event is
    /// held. Fed a chunk that [`ends_events`] now, it stands between events again, and every
    /// event of the chunk is made of the chunk's own lines.
    fn between_events(&self) -> bool {
        self.line_len == 0
            && !self.after_cr
            && !self.has_data
            && self.data_len == 0
            && self.name.is_empty()
            && !self.line_cut
    }

    /// Feeds the next bytes of the body, calling `on_event` for every event they end.
    ///
    /// A line that lies whole in `chunk` is read where it stands, and an event whose data is
    /// one such line is reported with its data borrowed from `chunk`: a stream whose events
    /// each arrive in one read (the common case) is split without copying its lines. What
    /// must outlive the call (a line or an event cut by the chunk's end) is copied, as before.
    pub(crate) fn push(&mut self, chunk: &[u8], mut on_event: impl FnMut(Event<'_>)) {
        let mut rest = chunk;
        // The current event's data while it is one data line of `chunk`, not yet copied into
        // `self.data` (`has_data` is set). Copied before anything else is appended to it, and
        // at the end of this call if the event has not ended by then.
        let mut held: Option<&[u8]> = None;
        while !rest.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if rest[0] == b'\n' {
                    rest = &rest[1..];
                    continue;
                }
            }
            match memchr::memchr2(b'\n', b'\r', rest) {
                Some(i) => {
                    let line = &rest[..i];
                    self.after_cr = rest[i] == b'\r';
                    if self.line_len == 0 && line.len() <= self.limit {
                        // The whole line is in this chunk, within the limit: read it in place.
                        if line.is_empty() {
                            self.dispatch(held.take(), &mut on_event);
                        } else {
                            self.field_in_chunk(line, &mut held);
                        }
                    } else {
                        self.keep_held(&mut held);
                        self.extend_line(line);
                        self.end_line(&mut on_event);
                    }
                    rest = &rest[i + 1..];
                }
                None => {
                    self.extend_line(rest);
                    rest = &[];
                }
            }
        }
        self.keep_held(&mut held);
    }

    /// Ends the body: reads an unterminated last line and reports an event the body did not
    /// close with a blank line.
    pub(crate) fn finish(&mut self, mut on_event: impl FnMut(Event<'_>)) {
        if self.line_len > 0 {
            self.end_line(&mut on_event);
        }
        self.after_cr = false;
        self.dispatch(None, &mut on_event);
    }

    fn extend_line(&mut self, bytes: &[u8]) {
        let room = self.limit.saturating_sub(self.line.len());
        self.line.extend_from_slice(&bytes[..bytes.len().min(room)]);
        self.line_len += bytes.len();
    }

    /// Copies data held in the chunk into the event's own buffer.
    fn keep_held(&mut self, held: &mut Option<&[u8]>) {
        if let Some(data) = held.take() {
            self.append_data(data);
        }
    }

    /// Ends the line gathered in `self.line` (the data of the event is all in `self.data`).
    fn end_line(&mut self, on_event: &mut impl FnMut(Event<'_>)) {
        let line = std::mem::take(&mut self.line);
        let (empty, cut) = (self.line_len == 0, self.line_len > line.len());
        self.line_len = 0;
        if empty {
            self.dispatch(None, on_event);
        } else {
            if cut {
                self.line_cut = true;
            }
            if let Some((name, value)) = split_field(&line) {
                self.field(name, value);
            }
        }
        // Reuse the line's allocation for the next line.
        self.line = line;
        self.line.clear();
    }

    /// Reads a non-empty line that lies whole in the chunk: the first data line of an event
    /// is held where it stands.
    fn field_in_chunk<'c>(&mut self, line: &'c [u8], held: &mut Option<&'c [u8]>) {
        let Some((name, value)) = split_field(line) else {
            return;
        };
        if name == b"data" && !self.has_data {
            self.has_data = true;
            *held = Some(value);
            return;
        }
        if name == b"data" {
            self.keep_held(held);
        }
        self.field(name, value);
    }

    fn field(&mut self, name: &[u8], value: &[u8]) {
        match name {
            b"event" => {
                self.name.clear();
                self.name.extend_from_slice(value);
            }
            b"data" => {
                if self.has_data {
                    self.append_data(b"\n");
                }
                self.has_data = true;
                self.append_data(value);
            }
            _ => {}
        }
    }

    fn append_data(&mut self, bytes: &[u8]) {
        let room = self.limit.saturating_sub(self.data.len());
        self.data.extend_from_slice(&bytes[..bytes.len().min(room)]);
        self.data_len += bytes.len();
    }

    /// Reports the event, if it has anything, and starts the next one. `held` is the event's
    /// data when it is still in the chunk (one line, within the limit).
    fn dispatch(&mut self, held: Option<&[u8]>, on_event: &mut impl FnMut(Event<'_>)) {
        if self.has_data || !self.name.is_empty() {
            let (data, data_cut) = match held {
                Some(data) => (data, false),
                None => (&self.data[..], self.data_len > self.data.len()),
            };
            on_event(Event {
                name: &self.name,
                data,
                has_data: self.has_data,
                data_cut,
                line_cut: self.line_cut,
            });
        }
        self.name.clear();
        self.data.clear();
        self.data_len = 0;
        self.has_data = false;
        self.line_cut = false;
    }
}

/// Whether `chunk` ends in a blank line that ends an event, whatever precedes it: `\n\n` (the
/// first `\n` ends a line, or a `\r\n`; the second is an empty line) or `\r\n\r\n`. A chunk
/// ending in `\r` does not count: the next chunk's first `\n` may belong to its line end.
fn ends_events(chunk: &[u8]) -> bool {
    chunk.ends_with(b"\n\n") || chunk.ends_with(b"\r\n\r\n")
}

/// A line's field name and value: `None` for a comment. A line without `:` is a field with
/// an empty value; one space after the `:` is not part of the value.
fn split_field(line: &[u8]) -> Option<(&[u8], &[u8])> {
    match memchr::memchr(b':', line) {
        Some(0) => None,
        Some(i) => {
            let value = &line[i + 1..];
            Some((&line[..i], value.strip_prefix(b" ").unwrap_or(value)))
        }
        None => Some((line, &b""[..])),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// An owned [`Event`], for comparing.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Owned {
        name: Vec<u8>,
        data: Vec<u8>,
        has_data: bool,
        data_cut: bool,
        line_cut: bool,
    }

    fn split(chunks: &[&[u8]], limit: usize) -> Vec<Owned> {
        let mut out = Vec::new();
        let mut keep = |e: Event<'_>| {
            out.push(Owned {
                name: e.name.to_vec(),
                data: e.data.to_vec(),
                has_data: e.has_data,
                data_cut: e.data_cut,
                line_cut: e.line_cut,
            });
        };
        let mut s = Splitter::new(limit);
        for chunk in chunks {
            s.push(chunk, &mut keep);
        }
        s.finish(&mut keep);
        out
    }

    fn ev(name: &str, data: &str) -> Owned {
        Owned {
            name: name.as_bytes().to_vec(),
            data: data.as_bytes().to_vec(),
            has_data: true,
            data_cut: false,
            line_cut: false,
        }
    }

    #[test]
    fn names_data_and_line_ends() {
        let body = b"event: a\ndata: 1\n\nevent:b\r\ndata:2\r\ndata:  3\r\n\r\ndata\rdata: x\r\r";
        assert_eq!(
            split(&[body], 1024),
            [ev("a", "1"), ev("b", "2\n 3"), ev("", "\nx")]
        );
    }

    #[test]
    fn comments_other_fields_and_empty_events_are_not_reported() {
        let body = b": keep-alive\n\nid: 7\nretry: 10\n\n\n\ndata: [DONE]\n\n";
        assert_eq!(split(&[body], 1024), [ev("", "[DONE]")]);
    }

    #[test]
    fn a_name_alone_is_an_event() {
        let mut named = ev("ping", "");
        named.has_data = false;
        assert_eq!(split(&[b"event: ping\n\n"], 1024), [named]);
    }

    #[test]
    fn crlf_split_across_chunks_is_one_line_end() {
        assert_eq!(
            split(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"], 1024),
            [ev("", "a\nb")]
        );
    }

    #[test]
    fn the_unterminated_last_event_is_read_at_the_end() {
        assert_eq!(split(&[b"event: e\ndata: tail"], 1024), [ev("e", "tail")]);
        assert_eq!(split(&[b"data: x\n"], 1024), [ev("", "x")]);
        assert!(split(&[b"", b"  "], 1024).is_empty());
    }

    #[test]
    fn long_lines_and_data_are_cut_and_marked() {
        // A line longer than the limit keeps its start and marks the event.
        let got = split(&[b"data: 0123456789abc\n\ndata: ok\n\n"], 10);
        assert_eq!(got[0].data, b"0123");
        assert!(got[0].line_cut && !got[0].data_cut);
        assert_eq!(got[1], ev("", "ok"));
        // Data over the limit from lines that each fit.
        let got = split(&[b"data: 0123\ndata: 4567\ndata: 89\n\n"], 10);
        assert_eq!(got[0].data, b"0123\n4567\n");
        assert!(got[0].data_cut && !got[0].line_cut);
        // A long comment still marks the event it is in.
        let got = split(&[b"data: a\n: 0123456789abc\n\n"], 10);
        assert_eq!(got[0].data, b"a");
        assert!(got[0].line_cut);
        // A long line alone, with no data, reports nothing.
        assert!(split(&[b": 0123456789abc\n\n"], 10).is_empty());
        // Memory stays bounded whatever the line length.
        let mut s = Splitter::new(10);
        for _ in 0..100 {
            s.push(&[b'x'; 1000], |_| {});
        }
        assert!(s.line.capacity() < 1000);
    }

    #[test]
    fn events_whole_in_a_chunk_are_read_in_place() {
        let mut s = Splitter::new(1024);
        let mut seen = Vec::new();
        s.push(b"event: a\ndata: {\"x\":1}\n\ndata: [DONE]\n\n", |e| {
            seen.push(e.data.to_vec())
        });
        assert_eq!(seen, [b"{\"x\":1}".to_vec(), b"[DONE]".to_vec()]);
        // Neither a line nor an event's data was copied.
        assert_eq!((s.line.capacity(), s.data.capacity()), (0, 0));
        // An event the chunk cuts keeps its data for the next push.
        s.push(b"data: held\n", |_| unreachable!("the event has not ended"));
        assert_eq!(s.data, b"held");
        s.push(b"data: more\n\n", |e| seen.push(e.data.to_vec()));
        assert_eq!(seen[2], b"held\nmore");
    }

    proptest! {
        #[test]
        fn any_chunk_split_yields_the_same_events(
            lines in proptest::collection::vec(
                prop_oneof![
                    Just("".to_owned()),
                    Just(": c".to_owned()),
                    Just("id: 1".to_owned()),
                    "event: [a-z.]{0,6}",
                    "data:[ a-z{}\":]{0,12}",
                    "data",
                ],
                0..24,
            ),
            ends in proptest::collection::vec(prop_oneof![Just("\n"), Just("\r\n"), Just("\r")], 24),
            sizes in proptest::collection::vec(1usize..24, 0..16),
            limit in 4usize..64,
        ) {
            let body: Vec<u8> = lines
                .iter()
                .zip(&ends)
                .flat_map(|(l, e)| [l.as_bytes(), e.as_bytes()].concat())
                .collect();
            let whole = split(&[&body], limit);
            // Chunks of the given sizes, the rest of the body in the last one.
            let mut rest = &body[..];
            let mut chunks = Vec::new();
            for size in sizes {
                let (chunk, tail) = rest.split_at(size.min(rest.len()));
                chunks.push(chunk);
                rest = tail;
            }
            chunks.push(rest);
            prop_assert_eq!(split(&chunks, limit), whole.clone());
            let bytes: Vec<&[u8]> = body.chunks(1).collect();
            prop_assert_eq!(split(&bytes, limit), whole);

            // A chunk fed between events that ends in a blank line leaves the splitter between
            // events, and its events are those of the chunk alone (what a reader that skips
            // such a chunk relies on).
            let mut s = Splitter::new(limit);
            for chunk in &chunks {
                let before = s.between_events();
                let mut events = Vec::new();
                s.push(chunk, |e| events.push((e.name.to_vec(), e.data.to_vec(), e.is_whole())));
                if before && ends_events(chunk) {
                    prop_assert!(s.between_events());
                    let mut alone = Vec::new();
                    Splitter::new(limit).push(chunk, |e| alone.push((e.name.to_vec(), e.data.to_vec(), e.is_whole())));
                    prop_assert_eq!(events, alone);
                }
            }
        }
    }

    #[test]
    fn a_chunk_ends_events_when_it_ends_in_a_blank_line_of_its_own() {
        assert!(ends_events(b"data: 1\n\n"));
        assert!(ends_events(b"data: 1\r\n\n"));
        assert!(ends_events(b"data: 1\r\n\r\n"));
        // A `\r` at the end may be half of a `\r\n`; a single line end ends a line only.
        assert!(!ends_events(b"data: 1\r\r"));
        assert!(!ends_events(b"data: 1\n"));
        assert!(!ends_events(b"\n"));
        let mut s = Splitter::new(64);
        assert!(s.between_events());
        s.push(b"event: a\n", |_| {});
        assert!(!s.between_events(), "an event's name is held");
        s.push(b"\n", |_| {});
        assert!(s.between_events());
        s.push(b"data: x\r", |_| {});
        assert!(!s.between_events(), "the next `\\n` may end the same line");
    }
}
