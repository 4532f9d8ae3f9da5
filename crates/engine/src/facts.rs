//! The facts of a request kept together in one extension value.
//!
//! `http` boxes every extension value on its own: a stack that sets a request's [`Tenant`],
//! [`SessionId`], [`ComboName`], [`ResolvedAccount`] and [`ServingModel`] and its answer's
//! [`QuotaSignal`] as separate values makes six allocations per request for them. [`Facts`]
//! holds all six (and the [`StoredAffinity`] a resolver may have read) in one value, boxed
//! once; [`FactsExt`] reads and writes each of them there and is what the relay's own layers
//! use.
//!
//! A value inserted on its own (`extensions.insert(Tenant::new(..))`, as an embedding
//! application may) is read as before when [`Facts`] has none of its type:
//! [`fact`](FactsExt::fact) looks in [`Facts`] first (one look-up when the fact is set), then
//! for the value on its own. A fact set with [`set_fact`](FactsExt::set_fact) therefore wins
//! over a value of its type inserted on its own; replace it with `set_fact`, or remove it with
//! [`take_fact`](FactsExt::take_fact). The relay's layers write with `insert` what they put
//! on an answer for the application to read (the account that served).
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
//! // A value inserted on its own is read while no fact of its type is set.
//! ext.insert(Tenant::new("alice"));
//! assert_eq!(ext.fact::<Tenant>(), Some(&Tenant::new("alice")));
//! ext.set_fact(Tenant::new("bob"));
//! assert_eq!(ext.fact::<Tenant>(), Some(&Tenant::new("bob")));
//! // Taken: the fact and the value on its own.
//! assert_eq!(ext.take_fact::<Tenant>(), Some(Tenant::new("bob")));
//! assert_eq!(ext.fact::<Tenant>(), None);
//! ```

use http::Extensions;

use crate::extensions::{
    ComboName, QuotaSignal, ResolvedAccount, ServingModel, SessionId, StoredAffinity, Tenant,
};

/// The facts of one request (and of its answer), in one extension value: see the
/// [module docs](self).
///
/// Each field is what the extension of its type says when set on its own. More may be added:
/// build one with [`Default`] (or [`FactsExt::set_fact`]).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
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
    /// The session's affinity as read for the request before the relay.
    pub affinity: Option<StoredAffinity>,
}

impl Facts {
    /// The fact of type `T`: in `facts` (the request's [`Facts`], looked up once by the
    /// caller), else a value of its own in `ext` ([`FactsExt::fact`] in one look-up fewer).
    #[inline(always)]
    pub(crate) fn read<'a, T: Fact>(
        facts: Option<&'a Facts>,
        ext: &'a Extensions,
    ) -> Option<&'a T> {
        match facts.and_then(|f| T::field(f).as_ref()) {
            Some(value) => Some(value),
            None => ext.get::<T>(),
        }
    }
}

mod sealed {
    pub trait Sealed {}
    pub trait SealedMap {}
}

/// A type [`Facts`] has a field for: [`Tenant`], [`SessionId`], [`ComboName`],
/// [`ResolvedAccount`], [`ServingModel`], [`QuotaSignal`] and [`StoredAffinity`].
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
    StoredAffinity => affinity,
}

/// Reads and writes the [`Facts`] of an extension map (see the [module docs](self)).
pub trait FactsExt: sealed::SealedMap {
    /// The value of type `T`: the one in [`Facts`], else one inserted on its own.
    fn fact<T: Fact>(&self) -> Option<&T>;

    /// Sets the value of type `T` in [`Facts`] (inserting one when the map has none).
    fn set_fact<T: Fact>(&mut self, value: T);

    /// Removes the value of type `T`, in [`Facts`] and on its own; returns the one
    /// [`fact`](Self::fact) read.
    fn take_fact<T: Fact>(&mut self) -> Option<T>;
}

impl sealed::SealedMap for Extensions {}

impl FactsExt for Extensions {
    #[inline(always)]
    fn fact<T: Fact>(&self) -> Option<&T> {
        if let Some(value) = self.get::<Facts>().and_then(|f| T::field(f).as_ref()) {
            return Some(value);
        }
        self.get::<T>()
    }

    #[inline(always)]
    fn set_fact<T: Fact>(&mut self, value: T) {
        // A look-up that hits (every write but a request's first) costs less than the entry
        // `get_or_insert_default` makes.
        if let Some(facts) = self.get_mut::<Facts>() {
            *T::field_mut(facts) = Some(value);
            return;
        }
        let mut facts = Facts::default();
        *T::field_mut(&mut facts) = Some(value);
        self.insert(facts);
    }

    #[inline]
    fn take_fact<T: Fact>(&mut self) -> Option<T> {
        let kept = self.get_mut::<Facts>().and_then(|f| T::field_mut(f).take());
        let own = self.remove::<T>();
        kept.or(own)
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
        /// A fact set is read until it is set again or taken; a value inserted on its own is
        /// read while no fact of its type is set; a taken value is gone, both ways.
        #[test]
        fn a_set_fact_wins_over_a_value_on_its_own(writes in prop::collection::vec(write(), 0..12)) {
            let mut ext = Extensions::new();
            let (mut set, mut own): (Option<Tenant>, Option<Tenant>) = (None, None);
            for w in writes {
                match w {
                    Write::Set(n) => {
                        ext.set_fact(Tenant::new(n.to_string()));
                        set = Some(Tenant::new(n.to_string()));
                    }
                    Write::Insert(n) => {
                        ext.insert(Tenant::new(n.to_string()));
                        own = Some(Tenant::new(n.to_string()));
                    }
                    Write::Take => {
                        let taken = set.take().or(own.take());
                        own = None;
                        prop_assert_eq!(ext.take_fact::<Tenant>(), taken);
                    }
                }
                prop_assert_eq!(ext.fact::<Tenant>(), set.as_ref().or(own.as_ref()));
                // The read with `Facts` looked up once gives the same.
                prop_assert_eq!(
                    Facts::read::<Tenant>(ext.get::<Facts>(), &ext),
                    set.as_ref().or(own.as_ref())
                );
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
        let read = StoredAffinity::new(context_relay_core::HandoffKey::new("t", "s", "c"), None);
        ext.set_fact(read.clone());
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
                affinity: Some(read),
            })
        );
        assert_eq!(ext.fact::<QuotaSignal>(), Some(&QuotaSignal::used(0.5)));
    }
}
