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

/// `literals` as `Needles::new` builds them, with one searcher per literal whatever their
/// number, and packed from their first one or two bytes: the ways of searching, which must
/// agree.
fn all_ways(literals: &[&'static [u8]]) -> [Needles; 4] {
    let chosen = Needles::new(literals);
    let each = Needles {
        packed: None,
        each: chosen.literals.iter().map(|&l| Finder::new(l)).collect(),
        ..chosen.clone()
    };
    let prefixed = |n| Needles::with_packed_prefix(literals, n);
    [chosen, each, prefixed(2), prefixed(1)]
}

const KEYS: [&[u8]; 8] = [
    b"\"encrypted_content\"",
    b"\"previous_response_id\"",
    b"\"conversation\"",
    b"\"signature\"",
    b"\"model\"",
    b"\\u",
    b"\\u006",
    b"\"metadata\"",
];

proptest! {
    /// The first occurrence of any literal, as one search per literal finds it, in bodies
    /// made of pieces of the literals (overlaps and near misses included) and JSON noise.
    #[test]
    fn finds_what_one_search_per_literal_finds(
        haystack in haystack_of(40, 40),
        chosen in prop::sample::subsequence(KEYS.to_vec(), 1..KEYS.len()),
    ) {
        for needles in all_ways(&chosen) {
            prop_assert_eq!(needles.find(&haystack), reference(&chosen, &haystack));
            for from in [1, 7, haystack.len() / 2] {
                if let Some(rest) = haystack.get(from..) {
                    prop_assert_eq!(needles.find(rest), reference(&chosen, rest));
                }
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

/// Bodies made of up to `pieces` pieces: the literals, their beginnings (overlaps and near
/// misses) and printable noise of up to `noise` bytes.
fn haystack_of(pieces: usize, noise: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            prop::sample::select(KEYS.to_vec()).prop_map(|k: &[u8]| k.to_vec()),
            prop::sample::select(KEYS.to_vec())
                .prop_flat_map(|k| (Just(k), 0..k.len()))
                .prop_map(|(k, cut)| k[..cut].to_vec()),
            prop::collection::vec(0x20u8..0x7f, 0..=noise),
        ],
        0..pieces,
    )
    .prop_map(|pieces| pieces.concat())
}

proptest! {
    /// `find_all` records every occurrence (overlapping ones too), and `next_of` answers
    /// as a search from `from` would, or says where to search when it cannot know.
    #[test]
    fn find_all_and_next_of_agree_with_searching(
        haystack in haystack_of(30, 20),
        chosen in prop::sample::subsequence(KEYS.to_vec(), 1..KEYS.len()),
        asked in prop::sample::subsequence(KEYS.to_vec(), 1..3),
        cap in prop_oneof![Just(usize::MAX), 0usize..6],
        from in 0usize..200,
    ) {
        for needles in all_ways(&chosen) {
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
    }

    /// After a splice, the occurrences are those a fresh pass over the new haystack finds
    /// (or, past a cap, a prefix of them with the rest left to search).
    #[test]
    fn spliced_occurrences_are_those_of_the_new_haystack(
        haystack in haystack_of(30, 20),
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
        haystack in haystack_of(30, 20),
        cuts in prop::collection::vec(0usize..200, 0..6),
        chosen in prop::sample::subsequence(KEYS.to_vec(), 1..KEYS.len()),
        cap in prop_oneof![Just(usize::MAX), 0usize..6],
    ) {
        let mut ends: Vec<usize> = cuts.into_iter().map(|c| c.min(haystack.len())).collect();
        ends.sort_unstable();
        let ways = all_ways(&chosen);
        let whole = ways[0].find_all(&haystack, cap);
        for needles in ways.iter() {
            let mut pieces = needles.find_all_in_pieces(cap);
            for &end in &ends {
                pieces.grown(&haystack[..end]);
            }
            let found = pieces.finish(&haystack);
            prop_assert_eq!(&found.hits[..], &whole.hits[..]);
            prop_assert_eq!(found.complete_from, whole.complete_from);
        }
    }
}

proptest! {
    /// A search given the haystack chunk by chunk, never joined, finds what one pass over the
    /// whole finds, however it is cut and whatever the cap; and one whose chunks are joined
    /// after all, part way, goes on over the joined haystack to the same answer.
    #[test]
    fn a_search_of_chunks_finds_what_one_pass_finds(
        haystack in haystack_of(30, 20),
        cuts in prop::collection::vec(0usize..200, 0..8),
        joined_after in 0usize..8,
        chosen in prop::sample::subsequence(KEYS.to_vec(), 1..KEYS.len()),
        cap in prop_oneof![Just(usize::MAX), 0usize..6],
    ) {
        let mut ends: Vec<usize> = cuts.into_iter().map(|c| c.min(haystack.len())).collect();
        ends.push(haystack.len());
        ends.sort_unstable();
        let ways = all_ways(&chosen);
        let whole = ways[0].find_all(&haystack, cap);
        for needles in ways.iter() {
            let mut pieces = needles.find_all_in_pieces(cap);
            let mut mixed = needles.find_all_in_pieces(cap);
            let mut from = 0;
            for (n, &end) in ends.iter().enumerate() {
                pieces.push(&haystack[from..end]);
                if n < joined_after {
                    mixed.push(&haystack[from..end]);
                } else {
                    mixed.grown(&haystack[..end]);
                }
                from = end;
            }
            let found = pieces.finish_pushed();
            prop_assert_eq!(&found.hits[..], &whole.hits[..]);
            prop_assert_eq!(found.complete_from, whole.complete_from);
            let found = mixed.finish(&haystack);
            prop_assert_eq!(&found.hits[..], &whole.hits[..]);
            prop_assert_eq!(found.complete_from, whole.complete_from);
        }
    }
}

/// What a piece ends with is not taken for absent: a literal cut there is found once its
/// end arrives, and is recorded once.
#[test]
fn a_literal_cut_between_pieces_is_found_once() {
    let body = br#"{"a":"x","metadata":{}}"#;
    for (needles, cut) in all_ways(&[b"\"metadata\"", b"\\u", b"\"model\""])
        .iter()
        .flat_map(|n| (0..=body.len()).map(move |cut| (n, cut)))
    {
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
        ..Needles::new(&KEYS)
    };
    let body = br#"{"a":"\"model\" \u0041","signature":"x","model":"m"}"#;
    assert_eq!(fallback.find(body), reference(&KEYS, body));
    assert_eq!(Needles::new(&KEYS).find(body), reference(&KEYS, body));
    assert_eq!(fallback.find(b"{}"), None);
}

/// Two literals asked for by a prefix are packed (one pass over a large body, not one per
/// literal), where the CPU has the vector instructions Teddy needs; without a prefix they are
/// searched with one `memchr` searcher each.
#[test]
fn two_literals_by_a_prefix_are_packed() {
    let literals: [&'static [u8]; 2] = [b"\"model\"", b"\\u006"];
    assert!(Needles::new(&literals).packed.is_none());
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("ssse3") {
        let prefixed = Needles::with_packed_prefix(&literals, 2);
        assert!(prefixed.packed.is_some() && prefixed.each.is_empty());
    }
}
