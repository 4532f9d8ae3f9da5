//! The session and tenant of a routed request: [`identify`], the one derivation of them, and
//! whether the head alone names the session ([`session_in_head`]), which lets ComboService
//! read a large body for less.

use std::sync::LazyLock;

use context_relay_core::json::Found;
use context_relay_core::session::{self, SessionSources};
use context_relay_tower::{FactsExt, SessionId, Tenant};

/// Sets the request's [`Tenant`] and [`SessionId`] facts (in its `Facts`) from
/// [`session::identify`], the one derivation of session and tenant: a `Tenant` already set (by
/// the client authentication) and a `SessionId` already set (by an embedding application, in
/// `Facts` or on its own) are taken as explicit; otherwise the session comes from the
/// credential, the session headers and the decoded body. Without a session no `SessionId` is
/// left on the request.
///
/// Deriving them once here, where the body is already decoded, lets the account resolver (sticky
/// sessions), GenerationLayer and InjectionLayer agree on the session of every request, also
/// for clients that send no session header, without each of them parsing the body again.
///
/// `body`: `None` when the head names the session (the body is then not read: a large body
/// kept in its chunks is not given). `found`: where [`BODY_LITERALS`] occur in `body`, when
/// ComboService searched it for them (only [`MODEL_LITERALS`] when the head names the session:
/// the body's ids are then not read).
///
/// [`BODY_LITERALS`]: crate::model::BODY_LITERALS
/// [`MODEL_LITERALS`]: crate::model::MODEL_LITERALS
pub(crate) fn identify(
    parts: &mut http::request::Parts,
    body: Option<&[u8]>,
    found: Option<&Found<'_>>,
) {
    let explicit_session = parts.extensions.fact::<SessionId>().map(|s| s.0.clone());
    let explicit_tenant = parts.extensions.fact::<Tenant>().map(|t| t.0.clone());
    let headers = &parts.headers;
    let identity = match (body, found) {
        (Some(body), Some(found)) => session::identify_found(
            headers,
            body,
            found,
            &SESSION_SOURCES,
            explicit_session,
            explicit_tenant,
        ),
        (body, _) => session::identify(
            headers,
            body,
            &SESSION_SOURCES,
            explicit_session,
            explicit_tenant,
        ),
    };
    // Both go into the request's `Facts` (one box for every fact of the request), an
    // explicit value set on its own included: the layers below find the identity there.
    parts.extensions.set_fact(Tenant(identity.tenant));
    match identity.session {
        Some(session) => parts.extensions.set_fact(SessionId(session)),
        None => {
            parts.extensions.take_fact::<SessionId>();
        }
    }
}

/// The declared body length from which ComboService asks the head for the session before the
/// body arrives, to search the body for fewer literals when it names one
/// ([`MODEL_LITERALS`](crate::model::MODEL_LITERALS)): on the perf harness's 100 KB body that
/// pass takes 2.1 µs instead of 2.9 µs, and counted it saves about 3 200 instructions; asking
/// costs about 700, what the shorter pass saves on some 22 KB. A body of unknown length is
/// asked about (and, with the session in the head, kept in its chunks: see
/// [`chunks`](crate::chunks)).
pub(super) const FEWER_LITERALS_FROM: u64 = 32 * 1024;

/// Whether [`identify`] finds the session of `parts` without reading the body
/// ([`session::session_in_head`]).
pub(super) fn session_in_head(parts: &http::request::Parts) -> bool {
    let explicit = parts.extensions.fact::<SessionId>().map(|s| &*s.0);
    session::session_in_head(&parts.headers, &SESSION_SOURCES, explicit)
}

/// The default session sources (headers, `metadata.user_id`, `prompt_cache_key`, fingerprint),
/// the same the relay layers use.
static SESSION_SOURCES: LazyLock<SessionSources> = LazyLock::new(SessionSources::default);
