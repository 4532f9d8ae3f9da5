//! Client authentication: who is calling, and as which tenant.
//!
//! The first service of the proxy stack. It reads the client's credential
//! (`Authorization: Bearer …`, `x-api-key` or `x-goog-api-key`, as
//! [`credential`] reads it for the relay layers' own tenants) and sets the [`Tenant`]
//! extension, so that the account resolver and the relay layers key sessions and handoffs by
//! it.
//!
//! - **With `[[clients]]`** the credential must be one of the configured keys (compared as
//!   SHA-256 digests in constant time, against every client): the tenant is the client's
//!   `name` and its `combos` allow-list travels in a [`ClientAccess`] extension, which the combo
//!   service enforces (403). Any other credential, or none, is a 401 in the API's error shape.
//! - **Open** (no `[[clients]]`): every request passes. The tenant is `k-` and 32 hex digits of
//!   an HMAC-SHA256 of the credential under a random secret kept in the handoff store, so it
//!   cannot be reversed from logs or the admin API; a request without a credential gets a tenant
//!   of its own (`anon-…`), so two such requests never share a session or a handoff. Such a
//!   request is also marked [`SkipRelay`]: its session can never be seen again, so the relay
//!   layers leave it alone rather than record an affinity (a store write) per request that
//!   nothing would read and that would push real sessions out of the cache. It is user traffic
//!   all the same (unlike the relay's own `SummaryCall`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use context_relay_core::session::credential;
use context_relay_tower::{FactsExt, SkipRelay, Tenant};
use futures_util::future::{Either as EitherFuture, Ready, ready};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{Either, Full};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tower_layer::Layer;
use tower_service::Service;

use crate::config::Config;
use crate::error::{ErrorKind, ErrorShape, closing_if_body, error_response};
use crate::tenant_keys::TenantKeys;

/// Request extension: the authenticated client and the combos it may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientAccess {
    /// The client's configured name (its tenant).
    pub name: Arc<str>,
    /// The combos it may ask for; `None` = any combo or `provider/model` target.
    pub combos: Option<Arc<[String]>>,
}

impl ClientAccess {
    /// Whether this client may use `model` (a combo name or a `provider/model` target).
    pub(crate) fn allows(&self, model: &str) -> bool {
        self.combos
            .as_ref()
            .is_none_or(|list| list.iter().any(|c| c == model))
    }
}

struct Client {
    digest: [u8; 32],
    access: ClientAccess,
}

enum Mode {
    Keys(Vec<Client>),
    Open { keys: TenantKeys, anon: AtomicU64 },
}

/// The authentication policy of a gateway (see the [module docs](self)). Cheap to share.
#[derive(Clone)]
pub(crate) struct Auth {
    mode: Arc<Mode>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &*self.mode {
            Mode::Keys(clients) => f
                .debug_struct("Auth")
                .field("clients", &clients.len())
                .finish_non_exhaustive(),
            Mode::Open { .. } => f.debug_struct("Auth").field("open", &true).finish(),
        }
    }
}

/// Who sent a request ([`Auth::authenticate`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Authenticated {
    /// Its tenant.
    pub(crate) tenant: Tenant,
    /// The client's access, when keys are configured.
    pub(crate) access: Option<ClientAccess>,
    /// It carried no credential: only open mode lets such a request through.
    pub(crate) anonymous: bool,
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No credential, or one no client has (401).
    Unauthenticated,
}

impl Auth {
    /// The policy of `config`: its `[[clients]]`, or open mode keying tenants with `keys` (see
    /// [`tenant_keys`](crate::tenant_keys)) when there are none.
    pub(crate) fn from_config(config: &Config, keys: TenantKeys) -> Self {
        let mode = if config.clients.is_empty() {
            Mode::Open {
                keys,
                anon: AtomicU64::new(0),
            }
        } else {
            Mode::Keys(
                config
                    .clients
                    .iter()
                    .filter_map(|c| {
                        Some(Client {
                            digest: c.key_digest()?,
                            access: ClientAccess {
                                name: Arc::from(c.name.as_str()),
                                combos: c.combos.as_ref().map(|l| Arc::from(l.as_slice())),
                            },
                        })
                    })
                    .collect(),
            )
        };
        Self {
            mode: Arc::new(mode),
        }
    }

    /// Whether the gateway runs without client keys.
    pub(crate) fn is_open(&self) -> bool {
        matches!(*self.mode, Mode::Open { .. })
    }

    /// Who sent a request with `headers`: its tenant, the client's access when keys are
    /// configured, and whether it carried no credential (open mode only).
    pub(crate) fn authenticate(&self, headers: &HeaderMap) -> Result<Authenticated, Refusal> {
        let credential = credential(headers);
        match &*self.mode {
            Mode::Keys(clients) => {
                let credential = credential.ok_or(Refusal::Unauthenticated)?;
                let digest: [u8; 32] = Sha256::digest(credential).into();
                // Every client is compared, whichever matches, so timing says nothing about
                // which keys exist.
                let mut found = None;
                for c in clients {
                    if bool::from(c.digest.ct_eq(&digest)) {
                        found = Some(&c.access);
                    }
                }
                let access = found.ok_or(Refusal::Unauthenticated)?;
                Ok(Authenticated {
                    tenant: Tenant(access.name.clone()),
                    access: Some(access.clone()),
                    anonymous: false,
                })
            }
            Mode::Open { keys, anon } => {
                let tenant = match credential {
                    Some(c) => keys.tenant(c),
                    None => keys.anonymous(anon.fetch_add(1, Ordering::Relaxed)),
                };
                Ok(Authenticated {
                    tenant,
                    access: None,
                    anonymous: credential.is_none(),
                })
            }
        }
    }
}

/// Layer building [`AuthService`].
#[derive(Debug, Clone)]
pub(crate) struct AuthLayer {
    auth: Auth,
}

impl AuthLayer {
    /// A layer applying `auth`.
    pub(crate) fn new(auth: Auth) -> Self {
        Self { auth }
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AuthService {
            inner,
            auth: self.auth.clone(),
        }
    }
}

/// See the [module docs](self).
#[derive(Debug, Clone)]
pub(crate) struct AuthService<S> {
    inner: S,
    auth: Auth,
}

/// The future of [`AuthService`].
pub(crate) type ResponseFuture<F, ResBody, E> =
    EitherFuture<MapLeft<F>, Ready<Result<Response<Either<ResBody, Full<Bytes>>>, E>>>;

pin_project_lite::pin_project! {
    /// The inner future, its body wrapped as the left side.
    pub struct MapLeft<F> {
        #[pin]
        inner: F,
    }
}

impl<F, B, E> std::future::Future for MapLeft<F>
where
    F: std::future::Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<Either<B, Full<Bytes>>>, E>;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project()
            .inner
            .poll(cx)
            .map(|r| r.map(|res| res.map(Either::Left)))
    }
}

impl<S, B, ResBody> Service<Request<B>> for AuthService<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
{
    type Response = Response<Either<ResBody, Full<Bytes>>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        match self.auth.authenticate(req.headers()) {
            Ok(Authenticated {
                tenant,
                access,
                anonymous,
            }) => {
                if anonymous {
                    req.extensions_mut().insert(SkipRelay);
                }
                req.extensions_mut().set_fact(tenant);
                if let Some(access) = access {
                    req.extensions_mut().insert(access);
                }
                EitherFuture::Left(MapLeft {
                    inner: self.inner.call(req),
                })
            }
            Err(Refusal::Unauthenticated) => {
                let res = unauthenticated(ErrorShape::for_path(req.uri().path()));
                // Answered before its body is read: hyper may end the connection.
                let res = closing_if_body(res, req.headers(), req.version());
                EitherFuture::Right(ready(Ok(res.map(Either::Right))))
            }
        }
    }
}

/// The 401 of a missing or unknown client key, in the API's error shape (counted in
/// `context_relay_gateway_unauthenticated_total`).
pub(crate) fn unauthenticated(shape: ErrorShape) -> Response<Full<Bytes>> {
    metrics::counter!("context_relay_gateway_unauthenticated_total").increment(1);
    let message = match shape {
        ErrorShape::OpenAi => {
            "expected a client key of this gateway in `Authorization: Bearer <key>`, found a missing or unknown key"
        }
        ErrorShape::Anthropic => {
            "expected a client key of this gateway in `x-api-key` or `Authorization: Bearer <key>`, found a missing or unknown key"
        }
        ErrorShape::Gemini => {
            "expected a client key of this gateway in `x-goog-api-key` or `?key=`, found a missing or unknown key"
        }
    };
    let kind = ErrorKind::Unauthenticated.name(shape);
    let mut res = error_response(shape, StatusCode::UNAUTHORIZED, kind, message);
    res.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    res
}

/// The 403 of a client asking for a combo outside its allow-list, in the API's error shape.
pub(crate) fn forbidden(shape: ErrorShape, client: &str, model: &str) -> Response<Full<Bytes>> {
    error_response(
        shape,
        StatusCode::FORBIDDEN,
        ErrorKind::PermissionDenied.name(shape),
        &format!("the client {client:?} may not use the model {model:?}: it is not in its combos"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn open_with(secret: [u8; 32]) -> Auth {
        Auth {
            mode: Arc::new(Mode::Open {
                keys: TenantKeys::new(secret),
                anon: AtomicU64::new(0),
            }),
        }
    }

    fn open() -> Auth {
        open_with([1; 32])
    }

    #[test]
    fn open_tenants_are_keyed_and_anonymous_ones_unique() {
        let a = open();
        let t = |h: &HeaderMap| a.authenticate(h).unwrap().tenant.0.to_string();
        let bearer = t(&headers(&[("authorization", "Bearer sk-1")]));
        assert_eq!(bearer, t(&headers(&[("x-api-key", "sk-1")])));
        assert_eq!(bearer, t(&headers(&[("authorization", "bearer  sk-1 ")])));
        assert_ne!(bearer, t(&headers(&[("x-api-key", "sk-2")])));
        assert!(bearer.starts_with("k-") && bearer.len() == 34, "{bearer}");
        assert!(!bearer.contains("sk-1"));
        // Another secret, another tenant: not reversible without the secret.
        let other = open_with([2; 32]);
        assert_ne!(
            bearer,
            other
                .authenticate(&headers(&[("x-api-key", "sk-1")]))
                .unwrap()
                .tenant
                .0
                .to_string()
        );
        let none1 = t(&HeaderMap::new());
        let none2 = t(&headers(&[("authorization", "Bearer ")]));
        let none3 = t(&headers(&[("authorization", "Bearer"), ("x-api-key", " ")]));
        for none in [&none1, &none2, &none3] {
            assert!(none.starts_with("anon-"), "{none}");
        }
        assert_ne!(none1, none2);
        assert_ne!(none2, none3);
        // Only a request without a credential is anonymous (it passes the relay by).
        let anonymous = |h: &HeaderMap| a.authenticate(h).unwrap().anonymous;
        assert!(!anonymous(&headers(&[("x-api-key", "sk-1")])));
        assert!(anonymous(&HeaderMap::new()));
        assert!(anonymous(&headers(&[("authorization", "Bearer ")])));
    }

    #[test]
    fn keys_mode_matches_every_key_form() {
        let config = Config::from_toml_str(
            r#"
[[providers]]
name = "p"
base_url = "http://127.0.0.1:9/v1"
[[providers.accounts]]
id = "a"
api_key = "k"
[[combos]]
name = "c"
targets = ["p/m"]
[[clients]]
name = "alice"
key = "ka"
combos = ["c"]
[[clients]]
name = "bob"
key_sha256 = "c4c71fc2d1ba4eeb4b2b3c6ad7fe1f1e6ff5ef7b4b1ab0c7d44e8c9b0a1c5d6e"
"#,
            |_| None,
        )
        .unwrap();
        let a = Auth::from_config(&config, TenantKeys::new([0; 32]));
        let alice = a
            .authenticate(&headers(&[("x-goog-api-key", "ka")]))
            .unwrap();
        assert_eq!(&*alice.tenant.0, "alice");
        assert!(!alice.anonymous);
        let access = alice.access.unwrap();
        assert!(access.allows("c") && !access.allows("p/m"));
        assert_eq!(
            a.authenticate(&headers(&[("authorization", "Bearer kb")])),
            Err(Refusal::Unauthenticated)
        );
        assert_eq!(
            a.authenticate(&HeaderMap::new()),
            Err(Refusal::Unauthenticated)
        );
    }
}

#[cfg(test)]
mod examples {
    #[tokio::test(flavor = "current_thread")]
    async fn module_example() {
        use crate::auth::{Auth, AuthLayer};
        use crate::config::Config;
        use bytes::Bytes;
        use context_relay_tower::FactsExt;
        use http::{Request, Response};
        use http_body_util::Full;
        use std::convert::Infallible;
        use tower::{Layer, ServiceExt, service_fn};
        let config = Config::from_toml_str(
            r#"
        [[providers]]
        name = "p"
        base_url = "http://127.0.0.1:9/v1"
        [[providers.accounts]]
        id = "a"
        api_key = "k"
        [[clients]]
        name = "alice"
        key = "alice-key"
        "#,
            |_| None,
        )
        .unwrap();
        let auth = Auth::from_config(&config, crate::tenant_keys::TenantKeys::new([7; 32]));
        let svc = AuthLayer::new(auth).layer(service_fn(|req: Request<Full<Bytes>>| async move {
            let tenant = req
                .extensions()
                .fact::<context_relay_tower::Tenant>()
                .unwrap()
                .0
                .clone();
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(tenant.to_string()))))
        }));
        let ok = Request::post("/v1/responses")
            .header("authorization", "Bearer alice-key")
            .body(Full::new(Bytes::new()))
            .unwrap();
        assert_eq!(svc.clone().oneshot(ok).await.unwrap().status(), 200);
        let bad = Request::post("/v1/responses")
            .header("authorization", "Bearer guess")
            .body(Full::new(Bytes::new()))
            .unwrap();
        assert_eq!(svc.oneshot(bad).await.unwrap().status(), 401);
    }
}
