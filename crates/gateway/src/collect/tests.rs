use std::convert::Infallible;

use http_body::Frame;
use http_body_util::StreamBody;

use super::*;
use crate::budget::ByteBudget;

proptest::proptest! {
    /// A body read whole is its chunks joined, whatever their sizes; empty chunks and
    /// trailers add nothing; a body of one chunk comes back as that chunk, not a copy.
    #[test]
    fn a_body_read_whole_is_its_chunks_joined(
        chunks in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40), 0..6),
        trailers: bool,
    ) {
        use futures_util::FutureExt;
        let datas: Vec<Bytes> = chunks.iter().map(|c| Bytes::from(c.clone())).collect();
        let mut frames: Vec<Result<Frame<Bytes>, Infallible>> =
            datas.iter().cloned().map(|d| Ok(Frame::data(d))).collect();
        if trailers {
            frames.push(Ok(Frame::trailers(http::HeaderMap::new())));
        }
        let body = StreamBody::new(futures_util::stream::iter(frames));
        let Some(Ok(read)) = whole(body).now_or_never() else {
            panic!("a ready body reads at once")
        };
        proptest::prop_assert_eq!(&read[..], &chunks.concat()[..]);
        let mut nonempty = datas.iter().filter(|d| !d.is_empty());
        if let (Some(only), None) = (nonempty.next(), nonempty.next()) {
            proptest::prop_assert_eq!(read.as_ptr(), only.as_ptr(), "one chunk is not copied");
        }
    }
}

fn chunked(chunks: &[&'static [u8]]) -> impl Body<Data = Bytes, Error = Infallible> {
    let frames: Vec<Result<Frame<Bytes>, Infallible>> = chunks
        .iter()
        .map(|c| Ok(Frame::data(Bytes::from_static(c))))
        .collect();
    StreamBody::new(futures_util::stream::iter(frames))
}

/// The hold counts what is really held: a joined body's whole buffer, spare capacity
/// included, and a first chunk copied into it only once.
#[tokio::test]
async fn the_hold_counts_the_buffer_it_holds() {
    let chunks: [&'static [u8]; 3] = [b"{\"model\":", b"\"m\",\"input\":", b"\"hi\"}"];
    let len: usize = chunks.iter().map(|c| c.len()).sum();
    for declared in [Some(len as u64), None, Some(1 << 40)] {
        let budget = ByteBudget::new(1 << 20);
        let mut hold = budget.hold();
        let (body, _) = whole_of(
            collect_within(chunked(&chunks), declared, 1 << 20, &mut hold, None, false).await,
        );
        let Buffered::Joined(buf) = &body else {
            panic!("joined")
        };
        assert_eq!(body.as_slice(), b"{\"model\":\"m\",\"input\":\"hi\"}");
        assert_eq!(hold.held(), buf.capacity(), "{declared:?}");
        if declared == Some(len as u64) {
            assert_eq!(buf.capacity(), HEADROOM + len);
        }
    }
    // One chunk is kept as it came, and counted as it is.
    let budget = ByteBudget::new(1 << 20);
    let mut hold = budget.hold();
    let (body, _) =
        whole_of(collect_within(chunked(&[b"{}"]), Some(2), 1 << 20, &mut hold, None, false).await);
    assert!(matches!(body, Buffered::Chunk(_)));
    assert_eq!(hold.held(), 2);
    // A budget smaller than the buffer refuses the body.
    let budget = ByteBudget::new((HEADROOM + len - 1) as u64);
    let mut hold = budget.hold();
    let refused = collect_within(
        chunked(&chunks),
        Some(len as u64),
        1 << 20,
        &mut hold,
        None,
        false,
    )
    .await;
    assert!(matches!(refused, Err(Collect::Budget)));
}

/// A joined body is searched as its chunks arrive, once enough bytes came (a literal cut
/// between two chunks included), and the search completed finds what one pass over the
/// whole finds; tiny chunks are not searched one by one; a body of one chunk is left to
/// be searched whole.
#[tokio::test]
async fn a_joined_body_is_searched_as_it_arrives() {
    use context_relay_core::json::Needles;

    let needles = Needles::new(&[b"\"model\"", b"\"metadata\""]);
    let leak = |s: String| -> &'static [u8] { Box::leak(s.into_bytes().into_boxed_slice()) };
    let filler = "a".repeat(SEARCH_STEP);
    let chunks: [&'static [u8]; 3] = [
        leak(format!("{{\"model\":\"m\",\"input\":\"{filler}\",\"meta")),
        leak(format!("data\":{{}},\"x\":\"{filler}\\\"model\\\"\"")),
        b",\"model\":1}",
    ];
    let budget = ByteBudget::new(1 << 20);
    let mut hold = budget.hold();
    let search = Some(needles.find_all_in_pieces(usize::MAX));
    let (body, searched) =
        whole_of(collect_within(chunked(&chunks), None, 1 << 20, &mut hold, search, false).await);
    let body = body.as_slice();
    let searched = searched.expect("searched");
    // Searched up to the last bytes of the second chunk, where a literal could still have
    // continued; the last chunk, a few bytes, waits for the end.
    let second_end = chunks[0].len() + chunks[1].len();
    assert_eq!(
        searched.searched_to(),
        second_end + 1 - b"\"metadata\"".len()
    );
    let found = searched.finish(body);
    let whole = needles.find_all(body, usize::MAX);
    for from in (0..body.len()).step_by(7) {
        for literal in [&b"\"model\""[..], b"\"metadata\""] {
            assert_eq!(
                found.next_of(&[literal], from),
                whole.next_of(&[literal], from)
            );
        }
    }
    let metadata = chunks[0].len() - b"\"meta".len();
    assert_eq!(found.next_of(&[b"\"metadata\""], 0), Ok(Some(metadata)));

    // A body in one-byte chunks, shorter than a step, is left for the end.
    let bytes: &'static [u8] = b"{\"model\":\"m\",\"metadata\":{}}";
    let tiny: Vec<&'static [u8]> = bytes.chunks(1).collect();
    let search = Some(needles.find_all_in_pieces(usize::MAX));
    let (body, searched) =
        whole_of(collect_within(chunked(&tiny), None, 1 << 20, &mut hold, search, false).await);
    let searched = searched.expect("searched");
    assert_eq!(searched.searched_to(), 0);
    let found = searched.finish(body.as_slice());
    assert_eq!(found.next_of(&[b"\"metadata\""], 0), Ok(Some(13)));

    let search = Some(needles.find_all_in_pieces(usize::MAX));
    let (_, searched) =
        whole_of(collect_within(chunked(&[b"{}"]), None, 1 << 20, &mut hold, search, true).await);
    assert!(
        searched.is_none(),
        "one chunk is kept as it is, and not searched"
    );
}

/// Asked to, the body is kept in its chunks, each searched as it arrives (a literal cut
/// between two of them included), its bytes counted as they are; past
/// [`MAX_KEPT_CHUNKS`] it is joined after all, and searched on in the joined buffer.
#[tokio::test]
async fn a_body_is_kept_in_its_chunks_when_asked() {
    use context_relay_core::json::Needles;

    let needles = Needles::new(&[b"\"model\"", b"\\u"]);
    let filler = "a".repeat(200);
    let whole = format!("{{\"model\":\"m\",\"input\":\"{filler}\\u0041\",\"model\":1}}");
    let whole: &'static [u8] = Box::leak(whole.into_bytes().into_boxed_slice());
    let expected = needles.find_all(whole, usize::MAX);
    for pieces in [2, 3, 29, MAX_KEPT_CHUNKS, MAX_KEPT_CHUNKS + 1] {
        // `pieces` chunks, as even as they come.
        let cut: Vec<&'static [u8]> = (0..pieces)
            .map(|i| &whole[i * whole.len() / pieces..(i + 1) * whole.len() / pieces])
            .collect();
        let budget = ByteBudget::new(1 << 20);
        let mut hold = budget.hold();
        let search = Some(needles.find_all_in_pieces(usize::MAX));
        let collected = collect_within(chunked(&cut), None, 1 << 20, &mut hold, search, true).await;
        let found = match collected {
            Ok(Collected::Kept { body, searched }) => {
                assert!(cut.len() <= MAX_KEPT_CHUNKS, "{} chunks kept", cut.len());
                assert_eq!(body.count(), cut.len());
                assert_eq!(&body.to_bytes()[..], whole);
                assert_eq!(hold.held(), whole.len());
                // Joined after all, the body is counted as its buffer.
                let joined = join_kept(body, &mut hold).ok().unwrap();
                assert_eq!(joined.as_slice(), whole);
                assert_eq!(hold.held(), HEADROOM + whole.len());
                searched.finish_pushed()
            }
            Ok(Collected::Whole { body, searched }) => {
                assert!(cut.len() > MAX_KEPT_CHUNKS, "{} chunks joined", cut.len());
                assert_eq!(body.as_slice(), whole);
                searched.expect("searched").finish(body.as_slice())
            }
            Err(_) => panic!("read"),
        };
        for from in 0..whole.len() {
            for literal in [&b"\"model\""[..], b"\\u"] {
                assert_eq!(
                    found.next_of(&[literal], from),
                    expected.next_of(&[literal], from),
                    "{pieces} pieces, from {from}"
                );
            }
        }
    }
}

/// A body kept in its chunks is bounded by the budget as a joined one is: a chunk past it
/// refuses the body.
#[tokio::test]
async fn a_body_kept_in_chunks_is_refused_past_the_budget() {
    use context_relay_core::json::Needles;

    let needles = Needles::new(&[b"\"model\"", b"\\u"]);
    let chunks: [&'static [u8]; 3] = [b"{\"model\":\"m\",", b"\"input\":\"abcdef\"", b"}"];
    let len: usize = chunks.iter().map(|c| c.len()).sum();
    for bytes in [len - 1, len] {
        let budget = ByteBudget::new(bytes as u64);
        let mut hold = budget.hold();
        let search = Some(needles.find_all_in_pieces(usize::MAX));
        let read = collect_within(chunked(&chunks), None, 1 << 20, &mut hold, search, true).await;
        match read {
            Ok(Collected::Kept { body, .. }) => {
                assert_eq!((body.len(), hold.held()), (len, len));
                assert_eq!(bytes, len);
            }
            Err(Collect::Budget) => assert!(bytes < len),
            _ => panic!("kept or refused"),
        }
    }
}

fn whole_of<'n>(collected: Result<Collected<'n>, Collect>) -> (Buffered, Option<Pieces<'n>>) {
    match collected {
        Ok(Collected::Whole { body, searched }) => (body, searched),
        Ok(Collected::Kept { .. }) => panic!("kept in chunks"),
        Err(_) => panic!("not read"),
    }
}
