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
//! seven `memchr` passes, and `"model"` with `\u` 64 000 against 77 000; but two long literals
//! (`"prompt_cache_key"`, `"metadata"`) cost 114 000 against 95 000, so those stay with
//! `memchr`.

use aho_corasick::packed::{Config, MatchKind, Searcher};
use memchr::memmem::Finder;

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
        Self { packed, each }
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

    #[test]
    fn the_fallback_gives_the_same_answers() {
        let fallback = Needles {
            packed: None,
            each: KEYS.iter().map(Finder::new).collect(),
        };
        let body = br#"{"a":"\"model\" \u0041","signature":"x","model":"m"}"#;
        assert_eq!(fallback.find(body), reference(&KEYS, body));
        assert_eq!(Needles::new(&KEYS).find(body), reference(&KEYS, body));
        assert_eq!(fallback.find(b"{}"), None);
    }
}
