//! The facts of a request kept together in one extension value.
//!
//! `http` boxes every extension value on its own: a stack that sets a request's [`Tenant`],
//! [`SessionId`], [`ComboName`], [`ResolvedAccount`] and [`ServingModel`] and its answer's
//! [`QuotaSignal`] as separate values makes six allocations per request for them. [`Facts`]
//! holds all six in one value, boxed once; [`FactsExt`] reads and writes each of them there
//! and is what the relay's own layers use.
//!
//! A value inserted on its own (`extensions.insert(Tenant::new(..))`, as an embedding
//! application may) is read as before, and wins: [`fact`](FactsExt::fact) looks for the value
//! on its own first, then in [`Facts`]; [`set_fact`](FactsExt::set_fact) removes a value of
//! the same type inserted on its own, so that the last one written is the one read, whichever
//! way it was written.
//!
//! ```
//! use context_relay_engine::{ComboName, Facts, FactsExt, ResolvedAccount, Tenant};
//!
//! let mut ext = http::Extensions::new();
//! ext.set_fact(ComboName::new("codex"));
//! ext.set_fact(ResolvedAccount::new("codex", "acct-a"));
//! assert_eq!(ext.len(), 1, "both in one value");
//! assert_eq!(ext.fact::<ComboName>(), Some(&ComboName::new("codex")));
//! assert_eq!(ext.get::<Facts>().and_then(|f| f.combo.as_ref()), Some(&ComboName::new("codex")));
//!
//! // A value inserted on its own is read first; writing the fact again replaces it.
//! ext.insert(Tenant::new("alice"));
//! assert_eq!(ext.fact::<Tenant>(), Some(&Tenant::new("alice")));
//! ext.set_fact(Tenant::new("bob"));
//! assert_eq!(ext.fact::<Tenant>(), Some(&Tenant::new("bob")));
//! assert_eq!(ext.take_fact::<Tenant>(), Some(Tenant::new("bob")));
//! assert_eq!(ext.fact::<Tenant>(), None);
//! ```

use http::Extensions;

use crate::extensions::{ComboName, QuotaSignal, ResolvedAccount, ServingModel, SessionId, Tenant};

/// The facts of one request (and of its answer), in one extension value: see the
/// [module docs](self).
///
/// Each field is what the extension of its type says when set on its own.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// Who owns the session.
    pub tenant: Option<Tenant>,
    /// An explicit session id.
    pub session: Option<SessionId>,
    /// The combo the request asked for.
    pub combo: Option<ComboName>,
    /// The account the request was sent to (on the answer: the one that served it).
    pub account: Option<ResolvedAccount>,
    /// The model the request was sent to.
    pub model: Option<ServingModel>,
    /// The quota reading of the answer.
    pub quota: Option<QuotaSignal>,
}

mod sealed {
    pub trait Sealed {}
    pub trait SealedMap {}
}

/// A type [`Facts`] has a field for: [`Tenant`], [`SessionId`], [`ComboName`],
/// [`ResolvedAccount`], [`ServingModel`] and [`QuotaSignal`].
pub trait Fact: sealed::Sealed + Clone + Send + Sync + 'static {
    /// The field of `facts` holding this type.
    fn field(facts: &Facts) -> &Option<Self>;
    /// The field of `facts` holding this type, to write.
    fn field_mut(facts: &mut Facts) -> &mut Option<Self>;
}

macro_rules! fact {
    ($($ty:ty => $field:ident),* $(,)?) => {$(
        impl sealed::Sealed for $ty {}

        impl Fact for $ty {
            #[inline]
            fn field(facts: &Facts) -> &Option<Self> {
                &facts.$field
            }

            #[inline]
            fn field_mut(facts: &mut Facts) -> &mut Option<Self> {
                &mut facts.$field
            }
        }
    )*};
}

fact! {
    Tenant => tenant,
    SessionId => session,
    ComboName => combo,
    ResolvedAccount => account,
    ServingModel => model,
    QuotaSignal => quota,
}

/// Reads and writes the [`Facts`] of an extension map (see the [module docs](self)).
pub trait FactsExt: sealed::SealedMap {
    /// The value of type `T`: one inserted on its own, else the one in [`Facts`].
    fn fact<T: Fact>(&self) -> Option<&T>;

    /// Sets the value of type `T` in [`Facts`] (inserting an empty one first when the map has
    /// none), and removes a value of that type inserted on its own.
    fn set_fact<T: Fact>(&mut self, value: T);

    /// Removes the value of type `T`, on its own and in [`Facts`]; returns the one
    /// [`fact`](Self::fact) read.
    fn take_fact<T: Fact>(&mut self) -> Option<T>;
}

impl sealed::SealedMap for Extensions {}

impl FactsExt for Extensions {
    #[inline]
    fn fact<T: Fact>(&self) -> Option<&T> {
        self.get::<T>()
            .or_else(|| self.get::<Facts>().and_then(|f| T::field(f).as_ref()))
    }

    #[inline]
    fn set_fact<T: Fact>(&mut self, value: T) {
        self.remove::<T>();
        *T::field_mut(self.get_or_insert_default::<Facts>()) = Some(value);
    }

    #[inline]
    fn take_fact<T: Fact>(&mut self) -> Option<T> {
        let own = self.remove::<T>();
        let kept = self.get_mut::<Facts>().and_then(|f| T::field_mut(f).take());
        own.or(kept)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// One write to the map: a fact set, a value inserted on its own, or a fact taken.
    #[derive(Debug, Clone)]
    enum Write {
        Set(u8),
        Insert(u8),
        Take,
    }

    fn write() -> impl Strategy<Value = Write> {
        prop_oneof![
            any::<u8>().prop_map(Write::Set),
            any::<u8>().prop_map(Write::Insert),
            Just(Write::Take),
        ]
    }

    proptest! {
        /// Whichever way a value is written, the last one written is the one read, and a
        /// taken value is gone.
        #[test]
        fn the_last_value_written_is_read(writes in prop::collection::vec(write(), 0..12)) {
            let mut ext = Extensions::new();
            let mut expected: Option<Tenant> = None;
            for w in writes {
                match w {
                    Write::Set(n) => {
                        ext.set_fact(Tenant::new(n.to_string()));
                        expected = Some(Tenant::new(n.to_string()));
                    }
                    Write::Insert(n) => {
                        ext.insert(Tenant::new(n.to_string()));
                        expected = Some(Tenant::new(n.to_string()));
                    }
                    Write::Take => {
                        prop_assert_eq!(ext.take_fact::<Tenant>(), expected.take());
                    }
                }
                prop_assert_eq!(ext.fact::<Tenant>(), expected.as_ref());
                // The other facts are untouched.
                prop_assert_eq!(ext.fact::<SessionId>(), None);
            }
        }
    }

    #[test]
    fn every_fact_shares_one_value() {
        let mut ext = Extensions::new();
        ext.set_fact(Tenant::new("t"));
        ext.set_fact(SessionId::new("s"));
        ext.set_fact(ComboName::new("c"));
        ext.set_fact(ResolvedAccount::new("codex", "a"));
        ext.set_fact(ServingModel::new("codex/gpt-5"));
        ext.set_fact(QuotaSignal::used(0.5));
        assert_eq!(ext.len(), 1);
        assert_eq!(
            ext.get::<Facts>(),
            Some(&Facts {
                tenant: Some(Tenant::new("t")),
                session: Some(SessionId::new("s")),
                combo: Some(ComboName::new("c")),
                account: Some(ResolvedAccount::new("codex", "a")),
                model: Some(ServingModel::new("codex/gpt-5")),
                quota: Some(QuotaSignal::used(0.5)),
            })
        );
        assert_eq!(ext.fact::<QuotaSignal>(), Some(&QuotaSignal::used(0.5)));
    }
}
