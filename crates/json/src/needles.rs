//! [`Needles`]: several literals looked for in one pass over a body.
//!
//! The relay asks of many request bodies whether they hold any of a few literals (a second
//! `"model"`, the markers of account-bound state) before it reads them further. One search per literal reads the body once per literal; a
//! packed multi-literal search (`aho-corasick`'s Teddy, on SSSE3/AVX2 or NEON) reads it once
//! for all of them. Where no packed searcher is available, one `memchr` searcher per literal
//! gives the same answers.
//!
//! It pays off from three literals, or when one is short: on the perf harness's 100 KB body,
//! seven bound-state markers cost 118 000 instructions in one packed pass against 330 000 in
//! seven `memchr` passes. The packed searcher's speed depends on the set, not only on its
//! size: two long literals alone (`"prompt_cache_key"`, `"metadata"`) cost more packed than in
//! two `memchr` passes (8.8 µs against 5.5 µs natively), while the same two with `"model"` and
//! `\u` take one pass of 3.8 µs, no more than `"model"` and `\u` alone (4.0 µs).
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
}

impl Needles {
    /// The literals `needles` (none of them empty).
    pub fn new(needles: &[&'static [u8]]) -> Self {
        let needles: Vec<&'static [u8]> =
            needles.iter().copied().filter(|n| !n.is_empty()).collect();
        let packed = Config::new()
            .match_kind(MatchKind::LeftmostFirst)
            .builder()
            .extend(needles.iter().copied())
            .build();
        let each = if packed.is_some() {
            Vec::new()
        } else {
            needles.iter().map(|&n| Finder::new(n)).collect()
        };
        let longest = needles.iter().map(|n| n.len()).max().unwrap_or(1);
        Self {
            packed,
            each,
            literals: needles,
            longest,
        }
    }

    /// Where the first occurrence of any of the literals in `haystack` starts.
    pub fn find(&self, haystack: &[u8]) -> Option<usize> {
        match &self.packed {
            Some(packed) => packed.find(haystack).map(|m| m.start()),
            None => self.each.iter().filter_map(|f| f.find(haystack)).min(),
        }
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
        found.record(haystack, 0, cap, haystack.len());
        found
    }

    /// [`Needles::find_all`] over a haystack that grows as it arrives (a body read chunk by
    /// chunk): each [`Pieces::grown`] searches only what is new, while it is still in the
    /// CPU's cache, and [`Pieces::finish`] gives what `find_all` gives on the whole.
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
        self.capped = self.found.record(haystack, at, self.cap, decided);
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
    /// `None` once `decided` is the haystack's end.
    fn record(&mut self, haystack: &[u8], mut at: usize, cap: usize, decided: usize) -> bool {
        while let Some(start) = haystack
            .get(at..)
            .and_then(|rest| self.needles.find(rest))
            .map(|i| at + i)
            .filter(|&start| start < decided)
        {
            if self.hits.len() >= cap {
                self.complete_from = Some(start);
                return true;
            }
            let rest = &haystack[start..];
            for (i, literal) in self.needles.literals.iter().enumerate() {
                if rest.starts_with(literal) {
                    self.hits.push((i, start));
                }
            }
            at = start + 1;
        }
        self.complete_from = (decided < haystack.len()).then_some(decided.max(at));
        false
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
        let hit = self
            .hits
            .iter()
            .find(|&&(i, start)| start >= from && wanted[i])
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
                // whole stretch), stopping only where a literal's first byte stands.
                let literals = &self.needles.literals;
                let stretch = new.get(lo..window_end.max(lo)).unwrap_or_default();
                let firsts: SmallVec<[u8; 4]> = {
                    let mut f: SmallVec<[u8; 4]> =
                        literals.iter().filter_map(|l| l.first().copied()).collect();
                    f.sort_unstable();
                    f.dedup();
                    f
                };
                for at in (0..stretch.len()).filter(|&p| firsts.contains(&stretch[p])) {
                    let rest = &new[lo + at..];
                    for (i, literal) in literals.iter().enumerate() {
                        if rest.starts_with(literal) {
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
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The answer of one memchr search per literal.
    fn reference(needles: &[&[u8]], haystack: &[u8]) -> Option<usize> {
        needles
            .iter()
            .filter(|n| !n.is_empty())
            .filter_map(|n| memchr::memmem::find(haystack, n))
            .min()
    }

    const KEYS: [&[u8]; 7] = [
        b"\"encrypted_content\"",
        b"\"previous_response_id\"",
        b"\"conversation\"",
        b"\"signature\"",
        b"\"model\"",
        b"\\u",
        b"\"metadata\"",
    ];

    proptest! {
        /// The first occurrence of any literal, as one search per literal finds it, in bodies
        /// made of pieces of the literals (overlaps and near misses included) and JSON noise.
        #[test]
        fn finds_what_one_search_per_literal_finds(
            pieces in prop::collection::vec(
                prop_oneof![
                    prop::sample::select(KEYS.to_vec()).prop_map(|k: &[u8]| k.to_vec()),
                    prop::sample::select(KEYS.to_vec())
                        .prop_flat_map(|k| (Just(k), 0..k.len()))
                        .prop_map(|(k, cut)| k[..cut].to_vec()),
                    "[ -~]{0,40}".prop_map(String::into_bytes),
                ],
                0..40,
            ),
            chosen in prop::sample::subsequence(KEYS.to_vec(), 1..KEYS.len()),
        ) {
            let haystack: Vec<u8> = pieces.concat();
            let needles = Needles::new(&chosen);
            prop_assert_eq!(needles.find(&haystack), reference(&chosen, &haystack));
            for from in [1, 7, haystack.len() / 2] {
                if let Some(rest) = haystack.get(from..) {
                    prop_assert_eq!(needles.find(rest), reference(&chosen, rest));
                }
            }
        }
    }

    /// Every occurrence of every literal, by start, as one search per literal per position
    /// finds them.
    fn all_occurrences(needles: &[&[u8]], haystack: &[u8]) -> Vec<(usize, usize)> {
        let mut all = Vec::new();
        for start in 0..haystack.len() {
            for (i, n) in needles.iter().enumerate() {
                if haystack[start..].starts_with(n) {
                    all.push((i, start));
                }
            }
        }
        all
    }

    fn haystack_of() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(
            prop_oneof![
                prop::sample::select(KEYS.to_vec()).prop_map(|k: &[u8]| k.to_vec()),
                prop::sample::select(KEYS.to_vec())
                    .prop_flat_map(|k| (Just(k), 0..k.len()))
                    .prop_map(|(k, cut)| k[..cut].to_vec()),
                "[ -~]{0,20}".prop_map(String::into_bytes),
            ],
            0..30,
        )
        .prop_map(|pieces| pieces.concat())
    }

    proptest! {
        /// `find_all` records every occurrence (overlapping ones too), and `next_of` answers
        /// as a search from `from` would, or says where to search when it cannot know.
        #[test]
        fn find_all_and_next_of_agree_with_searching(
            haystack in haystack_of(),
            chosen in prop::sample::subsequence(KEYS.to_vec(), 1..KEYS.len()),
            asked in prop::sample::subsequence(KEYS.to_vec(), 1..3),
            cap in prop_oneof![Just(usize::MAX), 0usize..6],
            from in 0usize..200,
        ) {
            let needles = Needles::new(&chosen);
            let all = all_occurrences(&chosen, &haystack);
            prop_assert_eq!(&needles.find_all(&haystack, usize::MAX).hits[..], &all[..]);
            let truth = asked
                .iter()
                .filter_map(|n| haystack.get(from..).and_then(|rest| memchr::memmem::find(rest, n)))
                .min()
                .map(|i| from + i);
            let known = asked.iter().all(|a| chosen.contains(a));
            match needles.find_all(&haystack, cap).next_of(&asked, from) {
                Ok(answer) => {
                    prop_assert!(known);
                    prop_assert_eq!(answer, truth);
                }
                Err(resume) => {
                    prop_assert!(resume >= from);
                    // Nothing was skipped: the first occurrence is at or after `resume`.
                    prop_assert!(truth.is_none_or(|t| t >= resume), "{truth:?} < {resume}");
                    if known && cap == usize::MAX {
                        prop_assert!(false, "a complete search answered Err");
                    }
                }
            }
        }

        /// After a splice, the occurrences are those a fresh pass over the new haystack finds
        /// (or, past a cap, a prefix of them with the rest left to search).
        #[test]
        fn spliced_occurrences_are_those_of_the_new_haystack(
            haystack in haystack_of(),
            cut in (0usize..100, 0usize..20),
            new_bytes in prop_oneof![
                prop::sample::select(KEYS.to_vec()).prop_map(|k: &[u8]| k.to_vec()),
                "[ -~]{0,12}".prop_map(String::into_bytes),
            ],
            cap in prop_oneof![Just(usize::MAX), 0usize..6],
        ) {
            let start = cut.0.min(haystack.len());
            let end = (start + cut.1).min(haystack.len());
            let mut new = haystack[..start].to_vec();
            new.extend_from_slice(&new_bytes);
            new.extend_from_slice(&haystack[end..]);
            let needles = Needles::new(&KEYS);
            let spliced = needles
                .find_all(&haystack, cap)
                .spliced(&new, start..end, new_bytes.len());
            let all = all_occurrences(&KEYS, &new);
            match spliced.complete_from {
                None => prop_assert_eq!(&spliced.hits[..], &all[..]),
                Some(rest) => {
                    let before: Vec<_> = all.iter().copied().filter(|&(_, s)| s < rest).collect();
                    prop_assert_eq!(&spliced.hits[..], &before[..]);
                }
            }
        }
    }

    proptest! {
        /// A search made piece by piece, however the haystack is cut, finds what one pass over
        /// the whole finds, cap included.
        #[test]
        fn a_search_in_pieces_finds_what_one_pass_finds(
            haystack in haystack_of(),
            cuts in prop::collection::vec(0usize..200, 0..6),
            chosen in prop::sample::subsequence(KEYS.to_vec(), 1..KEYS.len()),
            cap in prop_oneof![Just(usize::MAX), 0usize..6],
        ) {
            let needles = Needles::new(&chosen);
            let mut ends: Vec<usize> = cuts.into_iter().map(|c| c.min(haystack.len())).collect();
            ends.sort_unstable();
            let mut pieces = needles.find_all_in_pieces(cap);
            for end in ends {
                pieces.grown(&haystack[..end]);
            }
            let found = pieces.finish(&haystack);
            let whole = needles.find_all(&haystack, cap);
            prop_assert_eq!(&found.hits[..], &whole.hits[..]);
            prop_assert_eq!(found.complete_from, whole.complete_from);
        }
    }

    /// What a piece ends with is not taken for absent: a literal cut there is found once its
    /// end arrives, and is recorded once.
    #[test]
    fn a_literal_cut_between_pieces_is_found_once() {
        let needles = Needles::new(&[b"\"metadata\"", b"\\u"]);
        let body = br#"{"a":"x","metadata":{}}"#;
        for cut in 0..=body.len() {
            let mut pieces = needles.find_all_in_pieces(usize::MAX);
            pieces.grown(&body[..cut]);
            pieces.grown(&body[..cut]);
            let found = pieces.finish(body);
            assert_eq!(&found.hits[..], &[(0, 9)], "cut at {cut}");
            assert_eq!(found.complete_from, None);
        }
    }

    #[test]
    fn the_fallback_gives_the_same_answers() {
        let fallback = Needles {
            packed: None,
            each: KEYS.iter().map(Finder::new).collect(),
            literals: KEYS.to_vec(),
            longest: KEYS.iter().map(|k| k.len()).max().unwrap_or(1),
        };
        let body = br#"{"a":"\"model\" \u0041","signature":"x","model":"m"}"#;
        assert_eq!(fallback.find(body), reference(&KEYS, body));
        assert_eq!(Needles::new(&KEYS).find(body), reference(&KEYS, body));
        assert_eq!(fallback.find(b"{}"), None);
    }
}
