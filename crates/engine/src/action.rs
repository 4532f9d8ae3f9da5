//! What the relay did to one request, told on its response.

use http::HeaderValue;
use http::header::HeaderName;

/// The response header naming what the relay did to the request:
/// `injected`, `scrubbed`, `repaired`, comma-joined when several (absent when nothing).
pub const RELAY_HEADER: HeaderName = HeaderName::from_static("x-context-relay");

/// What the relay did to a request, set as a response extension (and as
/// the [`RELAY_HEADER`] header) whenever it did anything, for access logs.
///
/// ```
/// use context_relay_engine::RelayAction;
///
/// let action = RelayAction { injected: true, scrubbed: true, ..RelayAction::default() };
/// assert_eq!(action.to_string(), "injected, scrubbed");
/// assert!(RelayAction::default().is_empty());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RelayAction {
    /// The session's handoff was injected.
    pub injected: bool,
    /// Account-bound state of another account was removed.
    pub scrubbed: bool,
    /// The provider rejected account-bound state, and the request was sent again without it.
    pub repaired: bool,
}

impl RelayAction {
    /// Whether the relay did nothing.
    pub fn is_empty(&self) -> bool {
        !(self.injected || self.scrubbed || self.repaired)
    }

    /// The [`RELAY_HEADER`] value; `None` when nothing was done.
    pub fn header_value(&self) -> Option<HeaderValue> {
        (!self.is_empty()).then(|| {
            HeaderValue::try_from(self.to_string()).unwrap_or(HeaderValue::from_static("acted"))
        })
    }
}

impl std::fmt::Display for RelayAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = [
            (self.injected, "injected"),
            (self.scrubbed, "scrubbed"),
            (self.repaired, "repaired"),
        ];
        let mut first = true;
        for (on, name) in names {
            if on {
                if !first {
                    f.write_str(", ")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}
