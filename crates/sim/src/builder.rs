//! Configuring a simulated provider: accounts, quotas, replies, and how strict it is.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use http::Request;

use super::oauth::{self, SimLogin};
use super::quota::SimQuotaHeaders;
use super::server::Server;
use super::{
    SimAccountState, SimProvider, SimState, bound, control, handle, minting_seed, summary,
};

pub(crate) type Matcher = Arc<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// Configures a [`SimProvider`].
#[derive(Clone)]
pub struct SimBuilder {
    pub(crate) accounts: Vec<(String, String, f64)>,
    pub(crate) quota_step: f64,
    pub(crate) window_minutes: u64,
    pub(crate) reset_secs: u64,
    pub(crate) quota_headers: SimQuotaHeaders,
    pub(crate) summary: Option<(Matcher, summary::Replier)>,
    pub(crate) addr: SocketAddr,
    pub(crate) blob_bytes: usize,
    pub(crate) state_errors_in_band: bool,
    pub(crate) gzip_answers: bool,
    pub(crate) chat_deltas: usize,
    pub(crate) tool_call: Option<String>,
    pub(crate) tool_loop: usize,
    pub(crate) context_window: Option<u64>,
    pub(crate) logins: Vec<(String, SimLogin)>,
    pub(crate) access_ttl: u64,
    pub(crate) token_delay: Option<std::time::Duration>,
    pub(crate) summary_delay: Option<std::time::Duration>,
}

impl std::fmt::Debug for SimBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimBuilder")
            .field(
                "accounts",
                &self.accounts.iter().map(|a| &a.0).collect::<Vec<_>>(),
            )
            .field("quota_step", &self.quota_step)
            .finish_non_exhaustive()
    }
}

impl Default for SimBuilder {
    fn default() -> Self {
        Self {
            accounts: Vec::new(),
            quota_step: 10.0,
            window_minutes: 300,
            reset_secs: 3600,
            quota_headers: SimQuotaHeaders::Codex,
            summary: None,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            blob_bytes: 1536,
            state_errors_in_band: false,
            gzip_answers: false,
            chat_deltas: 2,
            tool_call: None,
            tool_loop: 0,
            context_window: None,
            logins: Vec::new(),
            access_ttl: 3600,
            token_delay: None,
            summary_delay: None,
        }
    }
}

impl SimBuilder {
    /// Adds an account `id` authenticated by `api_key`, starting at 0 % used.
    pub fn account(mut self, id: impl Into<String>, api_key: impl Into<String>) -> Self {
        self.accounts.push((id.into(), api_key.into(), 0.0));
        self
    }

    /// Percent of quota each turn uses (10 by default).
    pub fn quota_step(mut self, percent: f64) -> Self {
        self.quota_step = percent;
        self
    }

    /// Seconds until the announced quota reset (3600 by default).
    pub fn reset_secs(mut self, secs: u64) -> Self {
        self.reset_secs = secs;
        self
    }

    /// Which quota headers are sent.
    pub fn quota_headers(mut self, headers: SimQuotaHeaders) -> Self {
        self.quota_headers = headers;
        self
    }

    /// Requests whose body contains `needle` get `reply` as the assistant text and use no
    /// quota.
    pub fn summary_reply(self, needle: impl Into<String>, reply: impl Into<String>) -> Self {
        let needle = needle.into().into_bytes();
        self.summary_matcher(
            move |body| !needle.is_empty() && body.windows(needle.len()).any(|w| w == needle),
            reply,
        )
    }

    /// Requests for which `matcher(body)` is true get `reply` as the assistant text and use
    /// no quota.
    pub fn summary_matcher(
        self,
        matcher: impl Fn(&[u8]) -> bool + Send + Sync + 'static,
        reply: impl Into<String>,
    ) -> Self {
        let reply: String = reply.into();
        self.summary_reply_with(matcher, move |_| reply.clone())
    }

    /// Content deltas of a streamed Chat Completions reply (2 by default): with usage asked for,
    /// a stream is `deltas + 4` events.
    pub fn chat_deltas(mut self, deltas: usize) -> Self {
        self.chat_deltas = deltas.max(2);
        self
    }

    /// Size in bytes of each minted `encrypted_content` blob and thinking signature (1536 by
    /// default; real reasoning blobs are a few kilobytes).
    pub fn blob_bytes(mut self, bytes: usize) -> Self {
        self.blob_bytes = bytes;
        self
    }

    /// Rejects another account's state in a streamed Responses request the way the API
    /// sometimes does: a 200 stream that ends in `response.failed` (off by default: a 400).
    pub fn state_errors_in_band(mut self, in_band: bool) -> Self {
        self.state_errors_in_band = in_band;
        self
    }

    /// Compresses JSON answers (successes and errors) with gzip for requests that accept it,
    /// as the real APIs behind their CDN do; event streams go out as they are (off by default).
    pub fn gzip_answers(mut self, on: bool) -> Self {
        self.gzip_answers = on;
        self
    }

    /// Listens on `addr` (`127.0.0.1:0` by default: a free loopback port).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Starts serving (on `127.0.0.1:0` unless [`listen`](Self::listen) said otherwise).
    pub async fn start(self) -> std::io::Result<SimProvider> {
        let seed = minting_seed();
        // A login account has no API key: a key no request can send stands in for it.
        let login_accounts = self
            .logins
            .iter()
            .map(|(id, _)| (id.clone(), format!("\u{0}login {id}"), 0.0));
        let state = Arc::new(SimState {
            accounts: Mutex::new(
                self.accounts
                    .iter()
                    .cloned()
                    .chain(login_accounts)
                    .map(|(id, key, used)| SimAccountState {
                        id,
                        key,
                        used,
                        turns: 0,
                    })
                    .collect(),
            ),
            logins: oauth::Logins::new(&self.logins, self.access_ttl, seed),
            requests: Mutex::new(Vec::new()),
            hold: Mutex::new(None),
            arrivals: tokio::sync::watch::channel(0).0,
            counter: Mutex::new(0),
            minter: bound::Minter::new(seed, self.blob_bytes),
            stored: Mutex::new(bound::StoredResponses::new()),
            faults: Mutex::new(VecDeque::new()),
            revoked: Mutex::new(Vec::new()),
            compacted: Mutex::new(summary::Compacted::new()),
            in_band: AtomicBool::new(self.state_errors_in_band),
            config: self.clone(),
        });
        let s = state.clone();
        let router = Router::new().fallback(move |req: Request<Body>| {
            let state = s.clone();
            async move {
                let gzip = state.config.gzip_answers && crate::gzip::accepted(req.headers());
                let res = control::close_if_disconnect(handle(state, req).await);
                if gzip {
                    crate::gzip::compress(res).await
                } else {
                    res
                }
            }
        });
        let server = Server::start(self.addr, router).await?;
        Ok(SimProvider { state, server })
    }
}
