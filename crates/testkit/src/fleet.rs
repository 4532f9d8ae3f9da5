//! A fleet of gateway binaries' providers: four providers, one per API shape, over two
//! simulated providers (one sending Codex's quota headers, one Anthropic's), and the POST an
//! outside client of such a gateway sends. The soak (`benches/soak`) and the training run of
//! the profile-guided build (`benches/pgo_train.rs`) configure their gateways with it, each
//! with a head of its own (listen address, store) before [`providers_toml`]'s sections.
//!
//! ```
//! use context_relay_testkit::fleet::{FLEET, providers_toml};
//!
//! let text = providers_toml(["http://127.0.0.1:1", "http://127.0.0.1:2"], 2);
//! assert!(text.contains("name = \"anthropic\"\nbase_url = \"http://127.0.0.1:2\""));
//! assert!(text.contains("id = \"c2\"") && !text.contains("id = \"c3\""));
//! assert_eq!(FLEET[1].sim(), 1);
//! assert_eq!(FLEET[1].quota(), "anthropic");
//! ```

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

use crate::harness::key_of;

/// A provider of the fleet.
#[derive(Debug, Clone, Copy)]
pub struct FleetProvider {
    /// Its name in the configuration.
    pub name: &'static str,
    /// Its `auth` line (empty: the default bearer key).
    pub auth: &'static str,
    /// Its accounts' ids (their keys are [`key_of`] them).
    pub accounts: [&'static str; 3],
    /// The combo that routes to it alone.
    pub combo: &'static str,
    /// That combo's target.
    pub target: &'static str,
}

/// The four providers, in the order of their API shapes: Responses, Messages, Chat
/// Completions, Gemini.
pub const FLEET: [FleetProvider; 4] = [
    FleetProvider {
        name: "codex",
        auth: "",
        accounts: ["c1", "c2", "c3"],
        combo: "codex-relay",
        target: "codex/gpt-5.5",
    },
    FleetProvider {
        name: "anthropic",
        auth: "auth = \"x-api-key\"\n",
        accounts: ["a1", "a2", "a3"],
        combo: "claude-relay",
        target: "anthropic/claude-opus-4-8",
    },
    FleetProvider {
        name: "openai",
        auth: "",
        accounts: ["o1", "o2", "o3"],
        combo: "chat-relay",
        target: "openai/gpt-4.1",
    },
    FleetProvider {
        name: "gemini",
        auth: "auth = \"x-goog-api-key\"\n",
        accounts: ["g1", "g2", "g3"],
        combo: "gemini-relay",
        target: "gemini/gemini-3-pro",
    },
];

impl FleetProvider {
    /// Which of the two simulators serves it: 1 (Anthropic's quota headers) for
    /// `anthropic`, 0 (Codex's) for the others.
    pub fn sim(&self) -> usize {
        usize::from(self.name == "anthropic")
    }

    /// Its `quota` setting: the headers of the simulator that serves it.
    pub fn quota(&self) -> &'static str {
        ["codex", "anthropic"][self.sim()]
    }
}

/// The `[[providers]]` and `[[combos]]` sections of [`FLEET`] over the simulators at
/// `sim_urls` (Codex's headers first), each provider with its first `accounts` accounts (all
/// three for a larger number).
pub fn providers_toml(sim_urls: [&str; 2], accounts: usize) -> String {
    let mut text = String::new();
    for p in &FLEET {
        let (name, auth, quota) = (p.name, p.auth, p.quota());
        let base_url = sim_urls[p.sim()];
        text.push_str(&format!(
            "[[providers]]\nname = \"{name}\"\nbase_url = \"{base_url}\"\nquota = \"{quota}\"\n{auth}"
        ));
        for id in p.accounts.iter().take(accounts) {
            text.push_str(&format!(
                "  [[providers.accounts]]\n  id = \"{id}\"\n  api_key = \"{}\"\n",
                key_of(id)
            ));
        }
    }
    for FleetProvider { combo, target, .. } in FLEET {
        text.push_str(&format!(
            "[[combos]]\nname = \"{combo}\"\ntargets = [\"{target}\"]\n"
        ));
    }
    text
}

/// A plain HTTP/1 client ([`crate::harness::http_client`] builds one).
pub type FleetClient = Client<HttpConnector, Full<Bytes>>;

/// One POST of `body` to `url` with `headers`: the status and the whole reply, or why the
/// exchange broke (including no complete answer within `within`).
pub async fn post(
    client: &FleetClient,
    url: &str,
    headers: &[(String, String)],
    body: Bytes,
    within: Duration,
) -> Result<(u16, Bytes), String> {
    let mut b = Request::post(url);
    for (k, v) in headers {
        b = b.header(k.as_str(), v.as_str());
    }
    let req = b.body(Full::new(body)).map_err(|e| e.to_string())?;
    exchange(client, req, within).await
}

/// Sends `req`: the status and the whole reply, or why the exchange broke (including no
/// complete answer within `within`).
pub async fn exchange(
    client: &FleetClient,
    req: Request<Full<Bytes>>,
    within: Duration,
) -> Result<(u16, Bytes), String> {
    let exchange = async {
        let res = client.request(req).await.map_err(|e| format!("{e:?}"))?;
        let status = res.status().as_u16();
        let bytes = res
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("{e:?}"))?;
        Ok((status, bytes.to_bytes()))
    };
    tokio::time::timeout(within, exchange)
        .await
        .map_err(|_| format!("no complete answer within {within:?}"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sections read as a gateway configuration: every provider with the accounts asked
    /// for, on the simulator of its quota headers, and a combo of each.
    #[test]
    fn providers_toml_is_a_gateway_configuration() {
        let text = format!(
            "listen = \"127.0.0.1:0\"\n[store]\nbackend = \"memory\"\n{}",
            providers_toml(["http://127.0.0.1:7001", "http://127.0.0.1:7002"], 2)
        );
        let config = context_relay_gateway::Config::from_toml_str(&text, |_| None)
            .expect("the fleet's configuration reads");
        assert_eq!(config.providers.len(), FLEET.len());
        for (read, provider) in config.providers.iter().zip(FLEET) {
            assert_eq!(read.name, provider.name);
            assert_eq!(read.accounts.len(), 2, "{}", provider.name);
            let port = if provider.name == "anthropic" {
                "7002"
            } else {
                "7001"
            };
            assert!(read.base_url.contains(port), "{}", provider.name);
        }
        assert_eq!(config.combos.len(), FLEET.len());
    }
}
