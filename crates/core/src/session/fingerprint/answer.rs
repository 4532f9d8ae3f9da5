//! Whether a conversation's first ask was answered: what [`Opening::continued`] says.
//!
//! [`Opening::continued`]: super::Opening::continued

use super::{Role, within};
use crate::json::{Items, Kind, Members, Span};

/// Whether an entry of `items` is an answer: neither the client's (`user`, `system`,
/// `developer`) nor a non-object. Claude Code sends a `system` entry after the first user
/// message of a conversation's first request; any other client may send a second `user`
/// entry before the first answer. An item that cannot be read (not well-formed, nested too
/// deep) counts as an answer, as any item after the ask once did: the opening stays what it
/// was. Only roles are read: an answer's text (a tool call writing a whole file) is stepped
/// over, not collected.
pub(super) fn answer_follows(body: &[u8], items: Items<'_>) -> bool {
    items.into_iter().any(
        |item| match item.ok().and_then(|span| role_of(body, span)) {
            None => true,
            Some(role) => role.is_some_and(|r| r == Role::Other),
        },
    )
}

/// The role of the entry at `span` (the last one when repeated; [`Role::Other`] without
/// one). `Some(None)` for an item that is not an object, `None` when it cannot be read.
fn role_of(body: &[u8], span: Span) -> Option<Option<Role>> {
    let value = body.get(span.clone())?;
    if Kind::at(value, 0) != Some(Kind::Object) {
        return Some(None);
    }
    let mut role = Role::Other;
    let mut members = Members::root(value).ok()?;
    while let Some(key) = members.next() {
        let key = key.ok()?;
        if key.key.as_ref() == "role" {
            role = Role::of(body, within(&span, members.value(&key).ok()?));
        }
    }
    Some(Some(role))
}
