//! Deserializers that pick a few fields out of a request body without building a
//! `serde_json::Value` and without failing on fields of an unexpected type.
//!
//! A request body is the client's, not ours: a field we read for identity may have any
//! shape, and a surprise there must cost us that one field, not the whole parse. Strings are
//! borrowed from the body when they contain no escapes.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

/// Implements the visitor methods for every JSON value a lenient type does not want: scalars
/// give the default, arrays and objects are skipped without allocating.
macro_rules! ignore_other_values {
    (@skip) => {};
    (@skip str $(, $rest:ident)*) => {
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        ignore_other_values!(@skip $($rest),*);
    };
    (@skip seq $(, $rest:ident)*) => {
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok(Default::default())
        }
        ignore_other_values!(@skip $($rest),*);
    };
    (@skip map $(, $rest:ident)*) => {
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
            Ok(Default::default())
        }
        ignore_other_values!(@skip $($rest),*);
    };
    ($($skip:ident),*) => {
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        ignore_other_values!(@skip $($skip),*);
    };
}

/// A string, or `None` for any other JSON value.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Str<'a>(pub(crate) Option<Cow<'a, str>>);

impl<'a> Str<'a> {
    pub(crate) fn as_deref(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Str<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Str<'a>, E> {
                Ok(Str(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Str<'a>, E> {
                Ok(Str(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Str<'a>, E> {
                Ok(Str(Some(Cow::Owned(v))))
            }
            ignore_other_values!(seq, map);
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// An object deserialized as `T`, or `None` for any other JSON value.
#[derive(Debug)]
pub(crate) struct Object<T>(pub(crate) Option<T>);

impl<T> Default for Object<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Object<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(|t| Object(Some(t)))
            }
            ignore_other_values!(str, seq);
        }
        d.deserialize_any(V(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Probe<'a> {
        #[serde(borrow)]
        s: Str<'a>,
        o: Object<Inner>,
    }

    #[derive(Deserialize, Default)]
    struct Inner {
        #[allow(dead_code)]
        x: Option<u8>,
    }

    #[test]
    fn wrong_types_become_empty() {
        let p: Probe<'_> = serde_json::from_str(r#"{"s":[1,{"a":2}],"o":"no"}"#).unwrap();
        assert_eq!(p.s.0, None);
        assert!(p.o.0.is_none());
    }

    #[test]
    fn strings_borrow_when_they_can() {
        let p: Probe<'_> = serde_json::from_str(r#"{"s":"plain"}"#).unwrap();
        assert!(matches!(p.s.0, Some(Cow::Borrowed("plain"))));
        let p: Probe<'_> = serde_json::from_str(r#"{"s":"a\nb"}"#).unwrap();
        assert_eq!(p.s.as_deref(), Some("a\nb"));
    }
}
