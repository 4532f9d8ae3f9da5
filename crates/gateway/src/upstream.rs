//! The upstream client: the last service of the proxy stack.
//!
//! It sends each request to `{base_url}{client path after /v1}{?query}` of the
//! [`UpstreamEndpoint`] the account resolver chose, with the client's credentials and the
//! hop-by-hop headers removed and the account's credential added. Bodies stream both ways:
//! nothing is buffered, so an SSE event reaches the client as soon as the provider sends it.
//! Connection errors become a 502 in the client's error shape (the service never fails).
//!
//! Time is bounded ([`UpstreamLimits`]): connecting (`upstream_connect_timeout_secs`), waiting
//! for the response head (`upstream_head_timeout_secs`, then a 504 in the client's error shape)
//! and waiting between two chunks of the response body (`upstream_idle_timeout_secs`, then the
//! stream is cut: the client sees a closed stream, never a half-written error).
//!
//! Headers: besides the client's credentials, headers that would let a client pick the
//! account's organization or project, or send cookies (`openai-organization`,
//! `openai-project`, `anthropic-organization-id`, `x-goog-user-project`, `cookie`, `api-key`,
//! `x-goog-api-key`) are
//! not forwarded; headers that identify the account (`set-cookie`, `openai-organization`,
//! `anthropic-organization-id`) are removed from responses.
//!
//! It uses hyper-util's pooled client over [`Connector`]: rustls (ring provider, webpki roots)
//! for `https` and plain TCP for `http`, HTTP/1.1 and HTTP/2 (ALPN).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, Request, Response, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use smallvec::SmallVec;
use tower_service::Service;

use context_relay_tower::RequestBody;

use crate::chunks::Chunks;
use crate::combo::BoxError;
use crate::config::ProviderApi;
use crate::connector::Connector;
use crate::credential::Credential;
use crate::idle::IdleTimeoutBody;
use crate::resolver::InBandQuota;
use crate::telemetry::HistogramsBy;
use crate::usage::{MeteredBody, UsageLedger};

mod body;
mod carried;
mod send;
mod uri;
pub(crate) use body::UpstreamBody;
use send::Sent;
pub(crate) use uri::BaseUrl;

/// Where an attempt goes and with which credential: set by the account resolver, in the
/// request's [`Routing`](crate::routing::Routing).
#[derive(Clone)]
pub(crate) struct UpstreamEndpoint {
    /// Provider base URL (the client path after `/v1` is appended).
    pub(crate) base_url: Arc<BaseUrl>,
    /// The `Host` to send, when known before connecting (plain `http`); else the client
    /// writes it.
    pub(crate) host: Option<http::HeaderValue>,
    /// The headers carrying the account's credential.
    pub(crate) credential: Option<Credential>,
    /// The API the provider speaks: a client shape it does not speak is translated.
    pub(crate) api: ProviderApi,
    /// The provider's `max_output_tokens`, for a translated request whose client set none.
    pub(crate) max_output_tokens: Option<u64>,
    /// The account, for a quota failure its answer's stream may end with.
    pub(crate) in_band: Option<InBandQuota>,
}

impl std::fmt::Debug for UpstreamEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamEndpoint")
            .field("base_url", &self.base_url)
            .field("credential", &self.credential)
            .field("api", &self.api)
            .finish()
    }
}

/// Why the upstream client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// rustls refused the TLS configuration.
    #[error("the TLS client configuration was rejected: {0}")]
    Tls(#[from] rustls::Error),
}

/// The request body the relay layers hand the upstream call: the body ComboService
/// buffered, as the injection layer passes it on.
pub(crate) type InBody = RequestBody<Chunks>;

/// The body of an upstream request: a relayed request's body as it came (not boxed: every
/// relayed request has it), or another one (a translated request, a login call), boxed.
pub(crate) type OutBody = Either<InBody, UnsyncBoxBody<Bytes, BoxError>>;

/// The pooled HTTP(S) client of upstream calls (also what logins refresh with).
pub(crate) type HttpClient = Client<Connector, OutBody>;

/// The time bounds of upstream calls (`[limits]` `upstream_*_timeout_secs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UpstreamLimits {
    /// Connecting (TCP) to the provider (10 s).
    pub(crate) connect: Duration,
    /// From sending the request to the response head (600 s).
    pub(crate) head: Duration,
    /// Between two chunks of the response body (300 s).
    pub(crate) idle: Duration,
    /// How long a pooled connection to a provider stays open unused ([`POOL_IDLE`]).
    pub(crate) pool_idle: Duration,
}

/// How long a pooled connection to a provider stays open unused: a provider that goes quiet,
/// or that a reload removed, is not held a connection per request it once had in flight.
pub(crate) const POOL_IDLE: Duration = Duration::from_secs(90);

impl Default for UpstreamLimits {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            head: Duration::from_secs(600),
            idle: Duration::from_secs(300),
            pool_idle: POOL_IDLE,
        }
    }
}

/// The gateway's HTTP client to providers, as a tower service: it sends each request to the
/// base URL of its [`UpstreamEndpoint`] (in the request's `Routing`) with that account's credential (the client's
/// own credentials and hop-by-hop headers removed), streams both bodies, and answers a 502 or
/// 504 in the client's error shape when the provider cannot be reached or is too slow.
#[derive(Clone, Debug)]
pub(crate) struct Upstream {
    /// Shared: a request clones one reference count, not the client's configuration.
    client: Arc<HttpClient>,
    limits: UpstreamLimits,
    first_byte: Arc<HistogramsBy>,
    /// Where the usage of successful answers is counted.
    usage: Option<UsageLedger>,
}

/// Request headers a client may not set upstream: they would choose the account's
/// organization or project, or carry a credential of their own. (A `match` on the name, not a
/// list compared name by name: every header of every request and answer is looked at.)
fn client_only(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "authorization"
            | "x-api-key"
            | "api-key"
            | "x-goog-api-key"
            | "cookie"
            | "openai-organization"
            | "openai-project"
            | "anthropic-organization-id"
            // Google's billing and quota project of the call.
            | "x-goog-user-project"
            // The client's own ChatGPT account: the provider must see the pooled account only.
            | "chatgpt-account-id"
            // Where the client connects from, and through which proxies: the provider sees
            // the gateway, not the clients behind it.
            | "x-forwarded-for"
            | "x-forwarded-host"
            | "x-forwarded-proto"
            | "x-forwarded-port"
            | "x-real-ip"
            | "x-client-ip"
            | "cf-connecting-ip"
            | "true-client-ip"
            | "forwarded"
            | "via"
    )
}

/// Response headers that identify the account and stay between the gateway and the provider
/// (the provider's request id too: the client gets the gateway's).
fn account_only(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "set-cookie"
            | "openai-organization"
            | "openai-project"
            | "anthropic-organization-id"
            | "x-request-id"
    )
}

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1). (`host` is
/// stripped from requests too: the client derives it from the upstream URL.)
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

impl Upstream {
    /// A pooled client for http and https upstreams bounded by `limits`.
    pub(crate) fn with_limits(limits: UpstreamLimits) -> Result<Self, UpstreamError> {
        let connector = Connector::new(limits.connect)?;
        // The timer is what closes an idle connection when its time is up: without one, an
        // expired connection is only found (and closed) by the next request to its provider.
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(limits.pool_idle)
            .build(connector);
        Ok(Self {
            client: Arc::new(client),
            limits,
            first_byte: Arc::new(HistogramsBy::new(
                "context_relay_gateway_upstream_first_byte_seconds",
                "provider",
            )),
            usage: None,
        })
    }

    /// Counts the usage of every successful answer in `ledger`.
    pub(crate) fn usage(mut self, ledger: UsageLedger) -> Self {
        self.usage = Some(ledger);
        self
    }
}

impl Upstream {
    /// The pooled client (the token refreshes of logins share it).
    pub(crate) fn client(&self) -> Arc<HttpClient> {
        self.client.clone()
    }
}

/// Removes hop-by-hop headers (those the `connection` header names too) and those `also`
/// selects. Each header present is looked at once: most of the listed names are absent, and
/// removing an absent name costs a hash look-up.
fn strip(headers: &mut HeaderMap, also: impl Fn(&HeaderName) -> bool) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    // Names a client lists are looked up one by one: the list is the client's, of any length.
    for n in named {
        headers.remove(n);
    }
    // A request carries a handful of them (`host`, `content-length`): kept on the stack.
    let doomed: SmallVec<[HeaderName; 8]> = headers
        .keys()
        .filter(|n| hop_by_hop(n) || also(n))
        .cloned()
        .collect();
    for n in doomed {
        headers.remove(n);
    }
}

/// The provider's stream (its usage counted), or the gateway's own error.
///
/// The stream is boxed here, once: every layer above moves the response by value (the
/// resolver's attempts, both relay layers, the combo), and inline, hyper's body, the idle
/// timer and the usage reader made each of those moves half a kilobyte longer (on the 1 KB
/// mix, about 2 000 instructions per request of `memcpy` against the one allocation the box
/// takes).
pub(crate) type RawBody = Either<Pin<Box<MeteredBody<IdleTimeoutBody<Incoming>>>>, Full<Bytes>>;

pin_project_lite::pin_project! {
    /// The future of [`Upstream`].
    #[project = ResponseFutureProj]
    pub(crate) enum ResponseFuture {
        /// A request sent as it came: not boxed (nearly every request).
        Sent {
            #[pin]
            sent: Sent,
        },
        /// A request translated for its provider, and then its answer: boxed.
        Translated {
            future: Pin<Box<dyn Future<Output = Response<UpstreamBody>> + Send>>,
        },
    }
}

impl Future for ResponseFuture {
    type Output = Result<Response<UpstreamBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            ResponseFutureProj::Sent { sent } => {
                sent.poll(cx).map(|res| Ok(res.map(UpstreamBody::from)))
            }
            ResponseFutureProj::Translated { future } => future.as_mut().poll(cx).map(Ok),
        }
    }
}

impl Service<Request<InBody>> for Upstream {
    type Response = Response<UpstreamBody>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The legacy client queues internally; it is always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<InBody>) -> Self::Future {
        if !crate::translate::needed(&req) {
            let usage = self.usage.as_ref();
            let sent = send::start(
                &self.client,
                self.limits,
                &self.first_byte,
                usage,
                req.map(Either::Left),
            );
            return ResponseFuture::Sent { sent };
        }
        let client = self.client.clone();
        let limits = self.limits;
        let first_byte = self.first_byte.clone();
        let usage = self.usage.clone();
        ResponseFuture::Translated {
            future: Box::pin(async move {
                // A Responses request to a provider that speaks only Anthropic Messages goes
                // out translated, and its answer comes back translated.
                let (req, inbound) = match crate::translate::outbound(req).await {
                    Ok(r) => r,
                    Err(refused) => return refused.map(|body| UpstreamBody::Own { body }),
                };
                let res = send::start(&client, limits, &first_byte, usage.as_ref(), req).await;
                match inbound {
                    None => res.map(UpstreamBody::from),
                    Some(inbound) => inbound
                        .response(res)
                        .await
                        .map(|body| UpstreamBody::Translated { body }),
                }
            }),
        }
    }
}

/// Response extension: this 504 is the gateway's own, after `upstream_head_timeout_secs`
/// without a response head. The resolver does not try another account after it: that would
/// make the client wait twice the timeout.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeadTimedOut;

#[cfg(test)]
mod tests {
    use super::*;
    use context_relay_tower::FactsExt;
    use http::HeaderValue;

    #[test]
    fn hop_by_hop() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("keep-alive, x-private"),
        );
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("te", HeaderValue::from_static("trailers"));
        h.insert("upgrade", HeaderValue::from_static("h2c"));
        h.insert("x-codex-turn-state", HeaderValue::from_static("s"));
        h.append("set-cookie", HeaderValue::from_static("a=1"));
        h.append("set-cookie", HeaderValue::from_static("b=2"));
        strip(&mut h, account_only);
        assert_eq!(h.len(), 1, "{h:?}");
        assert!(h.contains_key("x-codex-turn-state"));
    }

    /// The answer of a loopback provider that says `200 Fine` to a request carrying `ext`
    /// (besides its endpoint).
    /// The provider's task ends when the gateway closes the connection.
    async fn answer_to(
        upstream: &mut Upstream,
        ext: http::Extensions,
    ) -> (Response<UpstreamBody>, tokio::task::JoinHandle<()>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let provider = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 1024];
            // The head and the two bytes of the body.
            while seen
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .is_none_or(|end| seen.len() < end + 4 + 2)
            {
                let n = stream.read(&mut buf).await.unwrap();
                assert!(n > 0, "the request ended early");
                seen.extend_from_slice(&buf[..n]);
            }
            stream
                .write_all(b"HTTP/1.1 200 Fine\r\ncontent-length: 2\r\n\r\nok")
                .await
                .unwrap();
            // Kept open, as a provider keeps it, until the gateway closes it.
            while stream.read(&mut buf).await.is_ok_and(|n| n > 0) {}
        });
        let mut req = Request::post("/v1/chat/completions")
            .header(header::CONTENT_TYPE, "application/json")
            .body(InBody::full(Bytes::from_static(b"{}")))
            .unwrap();
        *req.extensions_mut() = ext;
        crate::routing::Routing::set_endpoint(
            req.extensions_mut(),
            UpstreamEndpoint {
                base_url: Arc::new(BaseUrl::new(&format!("http://{addr}/v1"))),
                host: None,
                credential: None,
                api: ProviderApi::Passthrough,
                max_output_tokens: None,
                in_band: None,
            },
        );
        let res = upstream.call(req).await.unwrap();
        assert_eq!(res.status(), http::StatusCode::OK);
        let reason = res.extensions().get::<hyper::ext::ReasonPhrase>();
        assert_eq!(reason.map(|r| r.as_bytes()), Some(&b"Fine"[..]));
        (res, provider)
    }

    /// A pooled connection left unused for `pool_idle` is closed when its time is up, not
    /// when the next request to its provider finds it expired (which may be never).
    #[tokio::test]
    async fn an_idle_connection_to_a_provider_is_closed_when_its_time_is_up() {
        use http_body_util::BodyExt;
        let mut upstream = Upstream::with_limits(UpstreamLimits {
            pool_idle: Duration::from_millis(100),
            ..UpstreamLimits::default()
        })
        .unwrap();
        let (res, provider) = answer_to(&mut upstream, http::Extensions::new()).await;
        // Read to its end: the connection goes back to the pool.
        res.into_body().collect().await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), provider)
            .await
            .expect("the idle connection was still open after 5 s")
            .unwrap();
        drop(upstream);
    }

    /// The request's extension map is handed on to the answer: the answer carries what hyper
    /// put on it (a reason phrase that is not the usual one) and of the request's values only
    /// the account, tenant and combo, and those only when the map held nothing the gateway
    /// does not know.
    #[tokio::test]
    async fn the_answer_keeps_the_providers_extensions_and_only_the_requests_account() {
        use context_relay_tower::{ResolvedAccount, SessionId, Tenant};
        #[derive(Clone, Debug, PartialEq)]
        struct Marker;
        let account = ResolvedAccount::new("codex", "acct-a");
        let mut known = http::Extensions::new();
        known.insert(account.clone());
        known.insert(Tenant::new("alice"));
        known.insert(SessionId::new("s1"));
        let mut upstream = Upstream::with_limits(UpstreamLimits::default()).unwrap();
        let (res, _) = answer_to(&mut upstream, known.clone()).await;
        assert_eq!(res.extensions().fact::<ResolvedAccount>(), Some(&account));
        assert_eq!(
            res.extensions().fact::<Tenant>(),
            Some(&Tenant::new("alice"))
        );
        assert_eq!(res.extensions().fact::<SessionId>(), None);

        known.insert(Marker);
        let (res, _) = answer_to(&mut upstream, known).await;
        assert_eq!(res.extensions().get::<Marker>(), None);
        assert_eq!(res.extensions().fact::<ResolvedAccount>(), None);
        assert_eq!(res.extensions().fact::<Tenant>(), None);
    }

    /// Every layer above moves the answer by value: it stays small (see [`RawBody`]). With
    /// the provider's stream or the translator inline it was 1 056 bytes.
    #[test]
    fn the_answer_is_small_to_move() {
        let size = std::mem::size_of::<Response<UpstreamBody>>();
        assert!(size <= 256, "Response<UpstreamBody> is {size} bytes");
    }
}
