//! A deliberately small account resolver for the examples: fill-first over a list of API keys,
//! an account that answered 429 is skipped for a minute. The gateway crate has the real one
//! (sticky sessions, quota-based rotation, transparent retries).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use context_relay::tower::ResolvedAccount;
use context_relay_gateway::UpstreamEndpoint;
use http::{HeaderValue, Request, Response, StatusCode, header};
use tower::{Layer, Service};

/// The accounts of one provider, shared by every clone of the resolver.
#[derive(Clone)]
pub struct Accounts {
    provider: Arc<str>,
    base_url: Arc<str>,
    keys: Arc<[(Arc<str>, HeaderValue)]>,
    exhausted_until: Arc<Mutex<Vec<Option<Instant>>>>,
}

impl Accounts {
    /// `keys` are API keys; account ids are `acct-0`, `acct-1`, …. Fails when no key is a
    /// valid header value.
    pub fn new(provider: &str, base_url: &str, keys: &[String]) -> Result<Self, String> {
        let keys: Vec<(Arc<str>, HeaderValue)> = keys
            .iter()
            .enumerate()
            .filter_map(|(i, k)| {
                let value = HeaderValue::from_str(&format!("Bearer {k}")).ok()?;
                Some((Arc::from(format!("acct-{i}")), value))
            })
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

    /// The first account not exhausted.
    fn pick(&self) -> Option<usize> {
        let now = Instant::now();
        let until = self.exhausted_until.lock().ok()?;
        (0..self.keys.len()).find(|&i| until[i].is_none_or(|t| t <= now))
    }

    fn exhaust(&self, i: usize) {
        if let Ok(mut until) = self.exhausted_until.lock() {
            until[i] = Some(Instant::now() + Duration::from_secs(60));
        }
    }
}

/// Wraps a service with [`Resolver`].
#[derive(Clone)]
pub struct ResolverLayer(pub Accounts);

impl<S> Layer<S> for ResolverLayer {
    type Service = Resolver<S>;
    fn layer(&self, inner: S) -> Resolver<S> {
        Resolver {
            inner,
            accounts: self.0.clone(),
        }
    }
}

/// Sets `ResolvedAccount` (request and response) and the upstream endpoint.
#[derive(Clone)]
pub struct Resolver<S> {
    inner: S,
    accounts: Accounts,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, ResBody> Service<Request<B>> for Resolver<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<ResBody>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        // Every account exhausted: ask the first anyway, its 429 reaches the client.
        let i = self.accounts.pick().unwrap_or(0);
        let (id, key) = self.accounts.keys[i].clone();
        let account = ResolvedAccount::new(self.accounts.provider.clone(), id);
        req.extensions_mut().insert(account.clone());
        req.extensions_mut().insert(UpstreamEndpoint {
            base_url: self.accounts.base_url.clone(),
            credential: Some((header::AUTHORIZATION, key)),
        });
        let accounts = self.accounts.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let mut res = fut.await?;
            if res.status() == StatusCode::TOO_MANY_REQUESTS {
                accounts.exhaust(i);
            }
            // GenerationLayer learns who served from the response.
            res.extensions_mut().insert(account);
            Ok(res)
        })
    }
}
