use super::open::decode_header;
use proptest::prelude::*;

proptest! {
    #[test]
    fn header_decoding_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
        let _ = decode_header(&bytes);
    }
}
