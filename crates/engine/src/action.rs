//! What the relay did to one request, told on its response.

use http::header::HeaderName;
use http::{HeaderMap, HeaderValue};

/// The response header naming what the relay did to the request:
/// `model-switch`, `injected`, `extractive`, `scrubbed`, `repaired`, comma-joined when several
/// (absent when nothing). The relay sets it, replacing any the upstream sent.
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
///
/// // Read back from a response head: what the generation side looks at.
/// let moved = RelayAction { model_switch: true, injected: true, ..RelayAction::default() };
/// let mut headers = http::HeaderMap::new();
/// headers.insert(context_relay_engine::RELAY_HEADER, moved.header_value().unwrap());
/// assert_eq!(headers[context_relay_engine::RELAY_HEADER], "model-switch, injected");
/// assert_eq!(RelayAction::from_headers(&headers), moved);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RelayAction {
    /// The request went to another model than the one that last served the session (a
    /// model-switch handoff, or the bare note, was meant for it).
    pub model_switch: bool,
    /// The session's handoff was injected.
    pub injected: bool,
    /// The handoff injected was built without a model call ([`HandoffKind::Extractive`]:
    /// at the switch from the request itself, or after a failed summary).
    ///
    /// [`HandoffKind::Extractive`]: context_relay_core::HandoffKind::Extractive
    pub extractive: bool,
    /// Account-bound state of another account was removed.
    pub scrubbed: bool,
    /// The provider rejected account-bound state, and the request was sent again without it.
    pub repaired: bool,
}

impl RelayAction {
    /// Whether the relay did nothing.
    pub fn is_empty(&self) -> bool {
        !(self.model_switch || self.injected || self.extractive || self.scrubbed || self.repaired)
    }

    /// The action named by the [`RELAY_HEADER`] of `headers` (empty without one; unknown names
    /// are ignored).
    pub fn from_headers(headers: &HeaderMap) -> Self {
        let mut action = Self::default();
        let Some(value) = headers.get(RELAY_HEADER).and_then(|v| v.to_str().ok()) else {
            return action;
        };
        for name in value.split(',').map(str::trim) {
            match name {
                "model-switch" => action.model_switch = true,
                "injected" => action.injected = true,
                "extractive" => action.extractive = true,
                "scrubbed" => action.scrubbed = true,
                "repaired" => action.repaired = true,
                _ => {}
            }
        }
        action
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
            (self.model_switch, "model-switch"),
            (self.injected, "injected"),
            (self.extractive, "extractive"),
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
