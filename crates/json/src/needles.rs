//! [`Needles`]: several literals looked for in one pass over a body.
//!
//! The relay asks of many request bodies whether they hold any of a few literals (a second
//! `"model"`, the markers of account-bound state) before it reads them further. One search per literal reads the body once per literal; a
//! packed multi-literal search (`aho-corasick`'s Teddy, on SSSE3/AVX2 or NEON) reads it once
//! for all of them. Where no packed searcher is available, one `memchr` searcher per literal
//! gives the same answers.
//!
//! It pays off from three literals: on the perf harness's 100 KB body, seven bound-state
//! markers cost 118 000 instructions in one packed pass against 330 000 in seven `memchr`
//! passes. With fewer whole literals, one `memchr` searcher per literal is faster: Teddy's
//! speed depends on its shortest literal more than on how many there are (`"model"` and `\u`
//! take 2.9 µs packed on that body and 2.1 µs in two `memchr` passes, 29.6 and 24.4 µs on the
//! 1 MiB one; `"model"` alone 5.5 µs packed, 1.1 µs with `memchr`). Packed by their first two
//! bytes ([`Needles::with_packed_prefix`]) two literals read faster than in two `memchr`
//! passes once the body is large: `"model"` and `\u006` on the harness's 1 MiB `xl` body in
//! 128 KiB chunks, 37 µs against 57 µs (one `memchr` pass alone is 28–31 µs: each reads the
//! body at the speed of its vector loop, and two read it twice); 3.6 against 5.0 µs on the
//! 100 KB body, the same on 33 KB and 8 KB bodies. A pass with one searcher per literal still
//! reads the body once per literal, not once per occurrence: each searcher resumes only after
//! its own last occurrence.
//!
//! [`Needles::find`] answers one question; [`Needles::find_all`] records every occurrence in
//! one pass ([`Found`]), so that several readers of a body (the gateway's `model` check and the
//! session-id reading) share it.

use aho_corasick::packed::{Config, MatchKind, Searcher};
use memchr::memmem::Finder;
use smallvec::SmallVec;

/// A set of literals, searched for together: [`Needles::find`] gives where the first
/// occurrence of any of them starts. Build it once (in a `LazyLock`) and share it: building
/// costs more than searching a small body.
///
/// ```
/// use context_relay_json::Needles;
///
/// let needles = Needles::new(&[b"\"metadata\"", b"\"prompt_cache_key\""]);
/// let body = br#"{"messages":[],"prompt_cache_key":"k","metadata":{}}"#;
/// assert_eq!(needles.find(body), Some(15));
/// assert_eq!(needles.find(&body[16..]), Some(22));
/// assert_eq!(needles.find(b"{}"), None);
/// ```
#[derive(Debug, Clone)]
pub struct Needles {
    packed: Option<Searcher>,
    /// One searcher per literal, used when no packed searcher could be built.
    each: Vec<Finder<'static>>,
    /// The literals, in the order given.
    literals: Vec<&'static [u8]>,
    /// The length of the longest literal.
    longest: usize,
    /// Whether a byte starts one of the literals (the short stretches re-read by
    /// [`Found::spliced`] are stepped through with it).
    firsts: [bool; 256],
}

impl Needles {
    /// The literals `needles` (none of them empty).
    pub fn new(needles: &[&'static [u8]]) -> Self {
        Self::build(needles, None)
    }

    /// [`Needles::new`], packed however few the literals are (where a packed searcher can be
    /// built), whose packed pass looks for the first `prefix` bytes of each literal and checks
    /// the whole literal where they occur. Teddy reads a haystack at a speed set by
    /// its shortest literal (it compares up to four of its first bytes at each place): for
    /// literals whose first two bytes are already rare in the haystacks searched (a quote and
    /// a letter, a backslash and `u`), searching for those only reads faster than searching for
    /// the whole literals, and finds the same occurrences. The gateway's four request-body
    /// literals, on the perf harness's 100 KB body: 113 000 instructions packed whole, 63 000
    /// with `prefix` 2.
    ///
    /// ```
    /// use context_relay_json::Needles;
    ///
    /// let needles = Needles::with_packed_prefix(&[b"\"model\"", b"\\u006", b"\"metadata\""], 2);
    /// let body = br#"{"messages":[{"m":"\u00e9"}],"metadata":{"mod\u0065l":1}}"#;
    /// // `"m` and `\u` stand in `messages`, `"m"` and `\u00e9`: not the literals.
    /// assert_eq!(needles.find(body), Some(29));
    /// let found = needles.find_all(body, 8);
    /// assert_eq!(found.next_of(&[b"\\u006"], 0), Ok(Some(45)));
    /// ```
    pub fn with_packed_prefix(needles: &[&'static [u8]], prefix: usize) -> Self {
        Self::build(needles, Some(prefix.max(1)))
    }

    fn build(needles: &[&'static [u8]], prefix: Option<usize>) -> Self {
        let needles: Vec<&'static [u8]> =
            needles.iter().copied().filter(|n| !n.is_empty()).collect();
        let cut = prefix.unwrap_or(usize::MAX);
        let mut patterns: Vec<&[u8]> = needles.iter().map(|n| &n[..n.len().min(cut)]).collect();
        patterns.sort_unstable();
        patterns.dedup();
        // Packed from three literals, or when the caller asks for a prefix (see the module
        // docs).
        let packed = (needles.len() >= 3 || prefix.is_some())
            .then(|| {
                Config::new()
                    .match_kind(MatchKind::LeftmostFirst)
                    .builder()
                    .extend(patterns)
                    .build()
            })
            .flatten();
        let each = if packed.is_some() {
            Vec::new()
        } else {
            needles.iter().map(|&n| Finder::new(n)).collect()
        };
        let longest = needles.iter().map(|n| n.len()).max().unwrap_or(1);
        let mut firsts = [false; 256];
        for &first in needles.iter().filter_map(|n| n.first()) {
            firsts[usize::from(first)] = true;
        }
        Self {
            packed,
            each,
            literals: needles,
            longest,
            firsts,
        }
    }

    /// Where the first occurrence of any of the literals in `haystack` starts.
    pub fn find(&self, haystack: &[u8]) -> Option<usize> {
        match &self.packed {
            Some(packed) => {
                // A place the packed pass finds holds a literal's first bytes: the first that
                // holds a whole one.
                let mut at = 0;
                loop {
                    let start = at + packed.find(haystack.get(at..)?)?.start();
                    if self.at(haystack, start).next().is_some() {
                        return Some(start);
                    }
                    at = start + 1;
                }
            }
            None => {
                // Each later literal is looked for only where it would start before the
                // earliest occurrence found so far.
                let mut first: Option<usize> = None;
                for finder in &self.each {
                    let end = first.map_or(haystack.len(), |at| {
                        (at + finder.needle().len() - 1).min(haystack.len())
                    });
                    if let Some(at) = haystack.get(..end).and_then(|h| finder.find(h)) {
                        first = Some(first.map_or(at, |f| f.min(at)));
                    }
                }
                first
            }
        }
    }

    /// The literals (their indexes) that stand whole at `start` of `haystack`.
    fn at<'a>(&'a self, haystack: &'a [u8], start: usize) -> impl Iterator<Item = usize> + 'a {
        let rest = haystack.get(start..).unwrap_or_default();
        (self.literals.iter().enumerate())
            .filter(move |(_, literal)| rest.starts_with(literal))
            .map(|(i, _)| i)
    }

    /// Whether `haystack` holds any of the literals.
    pub fn any_in(&self, haystack: &[u8]) -> bool {
        self.find(haystack).is_some()
    }

    /// Every occurrence of every literal in `haystack` (overlapping ones included), in one
    /// pass, so that several readers of one body can ask it instead of each searching the body
    /// again. At most `cap` occurrences are recorded: past them the pass stops, and the
    /// [`Found`] says so (its readers search the rest themselves).
    ///
    /// ```
    /// use context_relay_json::Needles;
    ///
    /// let needles = Needles::new(&[b"\"model\"", b"\"metadata\""]);
    /// let body = br#"{"model":"m","messages":[],"metadata":{}}"#;
    /// let found = needles.find_all(body, 8);
    /// assert_eq!(found.next_of(&[b"\"metadata\""], 0), Ok(Some(27)));
    /// assert_eq!(found.next_of(&[b"\"model\"", b"\"metadata\""], 2), Ok(Some(27)));
    /// assert_eq!(found.next_of(&[b"\"model\""], 2), Ok(None));
    /// // A literal the set does not hold: the reader searches from `from` itself.
    /// assert_eq!(found.next_of(&[b"\"user\""], 5), Err(5));
    /// // Past the cap, what was not recorded is left to the reader.
    /// assert_eq!(needles.find_all(body, 1).next_of(&[b"\"metadata\""], 0), Err(27));
    /// ```
    pub fn find_all(&self, haystack: &[u8], cap: usize) -> Found<'_> {
        let mut found = Found {
            needles: self,
            hits: SmallVec::new(),
            complete_from: None,
        };
        found.record(haystack, 0, cap, haystack.len(), 0);
        found
    }

    /// [`Needles::find_all`] over a haystack that grows as it arrives (a body read chunk by
    /// chunk): each [`Pieces::grown`] searches only what is new, while it is still in the
    /// CPU's cache, and [`Pieces::finish`] gives what `find_all` gives on the whole. A
    /// haystack that is never joined into one buffer is given chunk by chunk to
    /// [`Pieces::push`] instead, and [`Pieces::finish_pushed`] ends the search.
    ///
    /// ```
    /// use context_relay_json::Needles;
    ///
    /// let needles = Needles::new(&[b"\"model\"", b"\"metadata\""]);
    /// let body = br#"{"model":"m","messages":[],"metadata":{}}"#;
    /// let mut pieces = needles.find_all_in_pieces(8);
    /// pieces.grown(&body[..30]); // `"metadata"` is cut at the end of this piece
    /// let found = pieces.finish(body);
    /// assert_eq!(found.next_of(&[b"\"metadata\""], 0), Ok(Some(27)));
    ///
    /// // The same body in chunks that are never joined.
    /// let mut pieces = needles.find_all_in_pieces(8);
    /// pieces.push(&body[..30]);
    /// pieces.push(&body[30..]);
    /// let found = pieces.finish_pushed();
    /// assert_eq!(found.next_of(&[b"\"metadata\""], 0), Ok(Some(27)));
    /// ```
    pub fn find_all_in_pieces(&self, cap: usize) -> Pieces<'_> {
        Pieces {
            found: Found {
                needles: self,
                hits: SmallVec::new(),
                complete_from: Some(0),
            },
            cap,
            capped: false,
            fed: 0,
            tail: SmallVec::new(),
        }
    }
}

/// A [`Needles::find_all`] pass made piece by piece ([`Needles::find_all_in_pieces`]).
#[derive(Debug, Clone)]
pub struct Pieces<'n> {
    /// What is known so far: `complete_from` is where the search resumes.
    found: Found<'n>,
    cap: usize,
    /// The cap was reached: nothing more is searched.
    capped: bool,
    /// How many bytes [`Pieces::push`] was given.
    fed: usize,
    /// What [`Pieces::push`] was given from `found.complete_from` on: the last few bytes, where
    /// a literal may start that continues into the next chunk.
    tail: SmallVec<[u8; 16]>,
}

impl<'n> Pieces<'n> {
    /// Searches what `haystack` adds to what earlier calls were given: `haystack` is the whole
    /// haystack so far, which only ever grows at its end. An occurrence that may continue
    /// past the end is left for a later call.
    pub fn grown(&mut self, haystack: &[u8]) {
        let decided = haystack
            .len()
            .saturating_sub(self.found.needles.longest - 1);
        self.search(haystack, decided);
    }

    /// How far the search has gone: every occurrence starting before this offset is known
    /// (or the cap stopped the search there).
    pub fn searched_to(&self) -> usize {
        self.found.complete_from.unwrap_or(usize::MAX)
    }

    /// The occurrences in the whole `haystack` (what the calls to [`Pieces::grown`] were given,
    /// and what came after), as [`Needles::find_all`] records them.
    pub fn finish(mut self, haystack: &[u8]) -> Found<'n> {
        self.search(haystack, haystack.len());
        self.found
    }

    fn search(&mut self, haystack: &[u8], decided: usize) {
        if self.capped {
            return;
        }
        let at = self.found.complete_from.unwrap_or(0);
        self.capped = self.found.record(haystack, at, self.cap, decided, 0);
    }

    /// Searches `chunk`, the bytes that follow all those earlier calls were given, without the
    /// haystack being kept whole: the positions recorded are the haystack's. An occurrence that
    /// may continue past `chunk` is left for a later call, which is given the few bytes where
    /// it starts again from a copy kept here. (Once the haystack is joined after all, the
    /// search goes on with [`Pieces::grown`] over the whole of it.)
    pub fn push(&mut self, chunk: &[u8]) {
        let start = self.fed;
        self.fed = start.saturating_add(chunk.len());
        if self.capped {
            return;
        }
        let keep = self.found.needles.longest.saturating_sub(1);
        // The haystack searched here is `tail` followed by `chunk`, from `at` on.
        let at = start - self.tail.len();
        let tail_len = self.tail.len();
        let decided = (tail_len + chunk.len()).saturating_sub(keep);
        // Occurrences that start in the tail: they end within its first `keep` bytes of
        // `chunk`, or are not decided yet.
        let mut window = std::mem::take(&mut self.tail);
        window.extend_from_slice(&chunk[..chunk.len().min(keep)]);
        if self
            .found
            .record(&window, 0, self.cap, decided.min(tail_len), at)
        {
            self.capped = true;
            return;
        }
        // Those that start in `chunk` itself.
        if decided > tail_len
            && self
                .found
                .record(chunk, 0, self.cap, decided - tail_len, start)
        {
            self.capped = true;
            return;
        }
        self.found.complete_from = Some(at + decided);
        self.tail = if decided >= tail_len {
            SmallVec::from_slice(&chunk[decided - tail_len..])
        } else {
            // `chunk` is shorter than `keep`: the window holds all of it.
            window.drain(..decided);
            window
        };
    }

    /// The occurrences in the whole haystack [`Pieces::push`] was given, as
    /// [`Needles::find_all`] records them.
    pub fn finish_pushed(mut self) -> Found<'n> {
        if !self.capped {
            let tail = std::mem::take(&mut self.tail);
            let at = self.fed - tail.len();
            self.capped = self.found.record(&tail, 0, self.cap, tail.len(), at);
        }
        self.found
    }
}

/// Where the literals of a [`Needles`] set occur in one haystack ([`Needles::find_all`]).
#[derive(Debug, Clone)]
pub struct Found<'n> {
    needles: &'n Needles,
    /// (literal index, start), by start; a request body holds a few (its `model` key).
    hits: SmallVec<[(usize, usize); 4]>,
    /// `None` when every occurrence is in `hits`; else the position from which nothing was
    /// recorded (every occurrence starting before it is in `hits`).
    complete_from: Option<usize>,
}

impl Found<'_> {
    /// Records the occurrences starting at or after `at` and before `decided`, up to `cap` of
    /// them in all, and whether the cap stopped it. Every literal starting before `decided`
    /// must fit in `haystack`. Afterwards `complete_from` says where nothing is known yet:
    /// `None` once `decided` is the haystack's end. `haystack` starts at `base` of the
    /// haystack whose positions are recorded (a chunk of it).
    fn record(
        &mut self,
        haystack: &[u8],
        at: usize,
        cap: usize,
        decided: usize,
        base: usize,
    ) -> bool {
        let needles = self.needles;
        let from = self.hits.len();
        let (capped, at) = match &needles.packed {
            Some(packed) => self.record_packed(packed, haystack, at, cap, decided),
            None => self.record_each(haystack, at, cap, decided),
        };
        if base > 0 {
            for hit in &mut self.hits[from..] {
                hit.1 += base;
            }
        }
        if capped {
            self.complete_from = self.complete_from.map(|rest| rest + base);
        } else {
            self.complete_from = (decided < haystack.len()).then_some(base + decided.max(at));
        }
        capped
    }

    /// [`Found::record`] with the packed searcher: one search per occurrence, each from the
    /// one before. Returns whether the cap stopped it, and where the search stands.
    fn record_packed(
        &mut self,
        packed: &Searcher,
        haystack: &[u8],
        mut at: usize,
        cap: usize,
        decided: usize,
    ) -> (bool, usize) {
        while let Some(start) = haystack
            .get(at..)
            .and_then(|rest| packed.find(rest))
            .map(|m| at + m.start())
            .filter(|&start| start < decided)
        {
            at = start + 1;
            // The packed pass may look for the literals' first bytes only.
            let mut whole = self.needles.at(haystack, start).peekable();
            if whole.peek().is_none() {
                continue;
            }
            if self.hits.len() >= cap {
                self.complete_from = Some(start);
                return (true, start);
            }
            self.hits.extend(whole.map(|i| (i, start)));
        }
        (false, at)
    }

    /// [`Found::record`] with one searcher per literal: the next occurrence of each is kept,
    /// and only the searcher whose occurrence was taken searches again, so each reads the
    /// haystack once.
    fn record_each(
        &mut self,
        haystack: &[u8],
        mut at: usize,
        cap: usize,
        decided: usize,
    ) -> (bool, usize) {
        let needles = self.needles;
        let each = &needles.each;
        let next_from = |i: usize, from: usize| {
            haystack
                .get(from..)
                .and_then(|rest| each.get(i)?.find(rest))
                .map(|j| from + j)
        };
        let mut next: SmallVec<[Option<usize>; 4]> =
            (0..each.len()).map(|i| next_from(i, at)).collect();
        while let Some(start) = next
            .iter()
            .flatten()
            .min()
            .copied()
            .filter(|&s| s < decided)
        {
            if self.hits.len() >= cap {
                self.complete_from = Some(start);
                return (true, at);
            }
            for (i, slot) in next.iter_mut().enumerate() {
                if *slot == Some(start) {
                    self.hits.push((i, start));
                    *slot = next_from(i, start + 1);
                }
            }
            at = start + 1;
        }
        (false, at)
    }

    /// Where the first occurrence at or after `from` of any of `literals` starts: `Ok(None)`
    /// when there is none; `Err(resume)` when the answer is not known here (a literal that is
    /// not in the set, or occurrences past the cap): the caller searches from `resume` itself.
    pub fn next_of(&self, literals: &[&[u8]], from: usize) -> Result<Option<usize>, usize> {
        let mut wanted = [false; 16];
        for literal in literals {
            match self.needles.literals.iter().position(|l| l == literal) {
                Some(i) if i < wanted.len() => wanted[i] = true,
                _ => return Err(from),
            }
        }
        // The hits are in order: those before `from` are stepped over at once (a reader that
        // walks a body's occurrences asks once for each).
        let first = self.hits.partition_point(|&(_, start)| start < from);
        let hit = self.hits[first..]
            .iter()
            .find(|&&(i, _)| wanted[i])
            .map(|&(_, start)| start);
        match (hit, self.complete_from) {
            (Some(start), _) => Ok(Some(start)),
            (None, None) => Ok(None),
            (None, Some(rest)) => Err(rest.max(from)),
        }
    }

    /// The occurrences in the haystack that results from replacing the bytes at `span` of the
    /// searched one by `new` (the whole new haystack): those well before the span stay, those
    /// after it move by the change of length, and the stretch around the new bytes, where a
    /// literal may have been removed or formed, is read again.
    pub fn spliced(mut self, new: &[u8], span: std::ops::Range<usize>, new_len: usize) -> Self {
        let reach = self.needles.longest;
        // Occurrences starting before `lo` end before the span; those starting at or after
        // `hi` (in the old haystack) start after it.
        let lo = span.start.saturating_sub(reach - 1);
        let hi = span.end;
        // An old position at or after the span's end, in the new haystack.
        let shift = |p: usize| p - span.end + span.start + new_len;
        match self.complete_from {
            Some(rest) if rest <= hi => {
                // Nothing known past the span: keep what lies before it, search on from there.
                self.hits.retain(|hit| hit.1 < lo);
                self.complete_from = Some(lo.min(rest));
            }
            _ => {
                let after: SmallVec<[(usize, usize); 4]> = self
                    .hits
                    .iter()
                    .filter(|&&(_, start)| start >= hi)
                    .map(|&(i, start)| (i, shift(start)))
                    .collect();
                let complete_from = self.complete_from.map(shift);
                self.hits.retain(|hit| hit.1 < lo);
                // Occurrences starting from `lo` up to the end of the new bytes are read again
                // from `new`.
                let window_end = (span.start + new_len).min(new.len());
                // A few dozen bytes: read directly (a searcher costs more to start than this
                // whole stretch), stopping only where a literal's first byte stands, and
                // comparing a literal only when its second byte stands there too.
                let needles = self.needles;
                let stretch = new.get(lo..window_end.max(lo)).unwrap_or_default();
                for (at, &byte) in stretch.iter().enumerate() {
                    if !needles.firsts[usize::from(byte)] {
                        continue;
                    }
                    let rest = &new[lo + at..];
                    for (i, literal) in needles.literals.iter().enumerate() {
                        let second = literal.get(1).is_none_or(|b| rest.get(1) == Some(b));
                        if literal.first() == Some(&byte) && second && rest.starts_with(literal) {
                            self.hits.push((i, lo + at));
                        }
                    }
                }
                self.hits.extend(after);
                self.complete_from = complete_from;
            }
        }
        self
    }
}

#[cfg(test)]
mod tests;
