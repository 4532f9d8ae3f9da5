//! `content-length` kept true to the body that is sent, decided in one place.
//!
//! The gateway changes bodies on the way (a combo's model renamed, a compressed request
//! decoded, a request translated or rewritten by the relay, an answer replaced by an error),
//! so a length the client or the provider sent may no longer hold. [`says`] tells whether a
//! head's length is right for a body; [`fix`] replaces a wrong one in its place.
//!
//! A head without a length is left without one: hyper writes the length of the body it sends
//! (exact for a buffered body, chunked for a stream). A wrong value is replaced rather than
//! removed for hyper to write: the upstream call keeps a value that [`says`] the sent body's
//! length, and each attempt's head is a copy of the request's, sized to what it holds; a
//! header hyper's client added to the copy would grow it (an allocation and a move of every
//! header, per request).

use context_relay_core::digits::decimal_u64;
use http::{HeaderMap, HeaderValue, header};

/// Whether `headers` hold exactly one `content-length`, and it says `len` in plain digits.
pub(crate) fn says(headers: &HeaderMap, len: u64) -> bool {
    reading(headers, len) == Reading::Says
}

/// What a head's `content-length` values say of a body of `len` bytes.
#[derive(Debug, PartialEq, Eq)]
enum Reading {
    /// No `content-length` at all.
    Absent,
    /// Exactly one, saying `len` in plain digits.
    Says,
    /// Another number, an unreadable value, or more than one value.
    Wrong,
}

/// Reads the values of `content-length` in one look-up of the name (a head is read three
/// times per request: by the combo, each attempt and the answer).
fn reading(headers: &HeaderMap, len: u64) -> Reading {
    let mut values = headers.get_all(header::CONTENT_LENGTH).iter();
    let Some(first) = values.next() else {
        return Reading::Absent;
    };
    if decimal_u64(first.as_bytes()) == Some(len) && values.next().is_none() {
        Reading::Says
    } else {
        Reading::Wrong
    }
}

/// Makes the `content-length` of `headers`, when there is one, say `len`: a right value is
/// kept as sent (its spelling included), a stale, repeated or unreadable one is replaced.
pub(crate) fn fix(headers: &mut HeaderMap, len: u64) {
    if reading(headers, len) == Reading::Wrong {
        headers.insert(header::CONTENT_LENGTH, value(len));
    }
}

/// `len` as a header value cut from the thread's shared buffer ([`crate::slab`]): no
/// allocation of its own, and every copy of the head shares it (the value `HeaderValue::from`
/// makes holds a growable buffer, and its first copy allocates again).
fn value(len: u64) -> HeaderValue {
    let mut digits = itoa::Buffer::new();
    crate::slab::header_value(digits.format(len).as_bytes())
        .unwrap_or_else(|| HeaderValue::from(len))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// A replaced length spells the number as `HeaderValue::from` does.
        #[test]
        fn a_replaced_length_spells_the_number(len in any::<u64>(), small in 0u64..1000) {
            for len in [len, small] {
                let mut headers = HeaderMap::new();
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("x"));
                fix(&mut headers, len);
                prop_assert_eq!(&headers[header::CONTENT_LENGTH], &HeaderValue::from(len));
            }
        }
    }

    #[test]
    fn a_length_is_right_only_as_one_plain_number() {
        let with = |values: &[&'static str]| {
            let mut headers = HeaderMap::new();
            for v in values {
                headers.append(header::CONTENT_LENGTH, HeaderValue::from_static(v));
            }
            headers
        };
        assert!(says(&with(&["12"]), 12));
        assert!(says(&with(&["012"]), 12));
        assert!(says(&with(&["18446744073709551615"]), u64::MAX));
        for wrong in [
            &["13"][..],
            &[],
            &["+12"],
            &[" 12"],
            &["12, 12"],
            &["12", "12"],
            &[""],
        ] {
            assert!(!says(&with(wrong), 12), "{wrong:?}");
        }
        // One more than the largest length: no length at all (not a wrapped 0).
        assert!(!says(&with(&["18446744073709551616"]), 0));
    }

    #[test]
    fn a_length_is_kept_only_when_it_is_right() {
        let mut headers = HeaderMap::new();
        fix(&mut headers, 12);
        assert!(headers.get(header::CONTENT_LENGTH).is_none(), "none made");
        // A right value stays the very value that was sent (its spelling included).
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("012"));
        fix(&mut headers, 12);
        assert_eq!(headers[header::CONTENT_LENGTH], "012");
        fix(&mut headers, 7);
        assert_eq!(
            headers[header::CONTENT_LENGTH],
            "7",
            "a stale value is replaced"
        );
        // Two values (even equal and right ones) become one.
        headers.append(header::CONTENT_LENGTH, HeaderValue::from_static("7"));
        fix(&mut headers, 7);
        let values: Vec<_> = headers.get_all(header::CONTENT_LENGTH).iter().collect();
        assert_eq!(values, ["7"]);
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("x"));
        fix(&mut headers, 7);
        assert_eq!(
            headers[header::CONTENT_LENGTH],
            "7",
            "an unreadable value is replaced"
        );
    }
}
