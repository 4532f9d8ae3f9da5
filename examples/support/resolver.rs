//! A deliberately small account resolver and upstream client for the examples: fill-first over
//! a list of API keys, an account that answered 429 is skipped for a minute. The gateway crate
//! has the real one (sticky sessions, quota-based rotation, transparent retries).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use context_relay::tower::ResolvedAccount;
use http::{HeaderValue, Request, Response, StatusCode, Uri, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// The accounts of one provider, shared by every clone of the stack.
#[derive(Clone)]
pub struct Accounts {
    provider: Arc<str>,
    base_url: Arc<str>,
    keys: Arc<[HeaderValue]>,
    exhausted_until: Arc<Mutex<Vec<Option<Instant>>>>,
}

impl Accounts {
    /// `keys` are API keys; account ids are `acct-0`, `acct-1`, …; `base_url` ends in `/v1`.
    pub fn new(provider: &str, base_url: &str, keys: &[String]) -> Result<Self, String> {
        let keys: Vec<HeaderValue> = keys
            .iter()
            .filter_map(|k| HeaderValue::from_str(&format!("Bearer {k}")).ok())
            .collect();
        if keys.is_empty() {
            return Err("no usable API key (keys must be valid header values)".to_owned());
        }
        Ok(Self {
            provider: provider.into(),
            base_url: base_url.trim_end_matches('/').into(),
            exhausted_until: Arc::new(Mutex::new(vec![None; keys.len()])),
            keys: keys.into(),
        })
    }

    /// Resolves `req` to the first account not exhausted (every account exhausted: the first,
    /// whose 429 reaches the client): sets [`ResolvedAccount`]. The client's credential stays
    /// on the request (the relay derives the tenant from it); [`client`](Self::client) swaps
    /// it for the account's.
    pub fn resolve<B>(&self, mut req: Request<B>) -> Request<B> {
        let now = Instant::now();
        let i = self.exhausted_until.lock().map_or(0, |until| {
            (0..until.len())
                .find(|&i| until[i].is_none_or(|t| t <= now))
                .unwrap_or(0)
        });
        let account = ResolvedAccount::new(self.provider.clone(), format!("acct-{i}"));
        req.extensions_mut().insert(account);
        req
    }

    fn index(account: Option<&ResolvedAccount>) -> Option<usize> {
        account?.account().strip_prefix("acct-")?.parse().ok()
    }

    /// Skips for a minute the account that answered 429 (InjectionLayer puts the account that
    /// served on the response).
    pub fn observe<B>(&self, res: Response<B>) -> Response<B> {
        let index = Self::index(res.extensions().get::<ResolvedAccount>());
        if res.status() == StatusCode::TOO_MANY_REQUESTS
            && let (Some(i), Ok(mut until)) = (index, self.exhausted_until.lock())
            && i < until.len()
        {
            until[i] = Some(Instant::now() + Duration::from_secs(60));
        }
        res
    }
}

/// The body of the upstream's responses (and of the 502 it answers when it cannot reach it).
pub type UpstreamBody = UnsyncBoxBody<Bytes, hyper::Error>;

impl Accounts {
    /// An HTTP client that sends each request to its account (the URL under the base URL, the
    /// account's key), and never fails: a transport error is a 502 response. (For an `https`
    /// provider, build the client over a TLS connector such as hyper-rustls.)
    pub fn client<B>(
        &self,
    ) -> impl tower::Service<
        Request<B>,
        Response = Response<UpstreamBody>,
        Error = Infallible,
        Future = impl Send + use<B>,
    > + Clone
    + Send
    + use<B>
    where
        B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let client = Client::builder(TokioExecutor::new()).build_http::<B>();
        let accounts = self.clone();
        tower::service_fn(move |mut req: Request<B>| {
            let client = client.clone();
            let i = Self::index(req.extensions().get()).unwrap_or(0);
            let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
            let rest = path.strip_prefix("/v1").unwrap_or(path);
            let uri = format!("{}{rest}", accounts.base_url).parse::<Uri>();
            let key = accounts.keys.get(i).cloned();
            async move {
                if let (Ok(uri), Some(key)) = (uri, key) {
                    *req.uri_mut() = uri;
                    req.headers_mut().remove("x-api-key");
                    req.headers_mut().insert(header::AUTHORIZATION, key);
                }
                // The relay reads answers as they pass: they must come uncompressed.
                if req.headers().contains_key(header::ACCEPT_ENCODING) {
                    req.headers_mut().insert(
                        header::ACCEPT_ENCODING,
                        http::HeaderValue::from_static("identity"),
                    );
                }
                Ok(match client.request(req).await {
                    Ok(res) => res.map(BodyExt::boxed_unsync),
                    Err(e) => {
                        let body = Full::new(Bytes::from(format!("upstream unreachable: {e}")));
                        let body = body.map_err(|never| match never {}).boxed_unsync();
                        let mut res = Response::new(body);
                        *res.status_mut() = StatusCode::BAD_GATEWAY;
                        res
                    }
                })
            }
        })
    }
}
