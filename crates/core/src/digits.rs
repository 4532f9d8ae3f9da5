//! An unsigned decimal number read from its ASCII digits, as a header value or a JSON count
//! spells one.
//!
//! ```
//! use context_relay_core::digits::decimal_u64;
//!
//! assert_eq!(decimal_u64(b"0042"), Some(42));
//! assert_eq!(decimal_u64(b"18446744073709551615"), Some(u64::MAX));
//! assert_eq!(decimal_u64(b"18446744073709551616"), None);
//! for not_digits in [&b""[..], b"+1", b"-0", b"1.0", b"1e3", b" 7"] {
//!     assert_eq!(decimal_u64(not_digits), None);
//! }
//! ```

/// The number `digits` spells: `None` unless it is one or more ASCII digits and nothing else,
/// or when the number does not fit in a `u64`. What `str::parse::<u64>` reads, without its
/// `+` sign and without a UTF-8 check first.
pub fn decimal_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        d.is_ascii_digit()
            .then(|| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Digits read as `str::parse` reads them (leading zeros, and `None` past `u64::MAX`);
        /// anything else is no number.
        #[test]
        fn a_number_is_what_parse_reads(text in "[0-9]{1,24}|[0-9+. a-]{0,6}") {
            let digits = text.bytes().all(|b| b.is_ascii_digit());
            let parsed = digits.then(|| text.parse::<u64>().ok()).flatten();
            prop_assert_eq!(decimal_u64(text.as_bytes()), parsed);
        }
    }
}
