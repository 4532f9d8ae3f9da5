//! Subscription logins over the strict simulated provider: two logins of one client, their
//! credential files (as the client's CLI writes them) in a temporary folder, and the gateway
//! configuration that pools them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use context_relay_sim::{SimBuilder, SimLogin, SimProvider, SimQuotaHeaders};
use serde_json::{Value, json};

use crate::conversation::{Client, Conversation};
use crate::handoff::{SUMMARY_NEEDLE, summary_reply};
use crate::harness::{ADMIN_TOKEN, Harness};

/// What Codex sends as `instructions` to the ChatGPT backend (which requires them).
pub const CODEX_INSTRUCTIONS: &str =
    "You are Codex, a coding agent based on GPT-5. You and the user share the same workspace.";

/// A fresh folder under the system's temporary folder, removed on drop.
pub struct Folder(PathBuf);

impl Folder {
    /// Creates the folder.
    pub fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "cr-logins-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("a temporary folder");
        Self(path)
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Default for Folder {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Two logins of `client`'s subscription (its first two accounts) and a folder for their files.
pub struct Logins {
    /// The client whose subscription it is.
    pub client: Client,
    /// The simulator's kind of login for that client.
    pub kind: SimLogin,
    /// Where the credential files are.
    pub dir: Folder,
}

impl Logins {
    /// The logins of `client`, with a fresh folder.
    pub fn new(client: Client) -> Self {
        let kind = match client {
            Client::Codex => SimLogin::Codex,
            Client::Claude => SimLogin::Claude,
        };
        Self {
            client,
            kind,
            dir: Folder::new(),
        }
    }

    /// The two login accounts.
    pub fn accounts(&self) -> [&'static str; 2] {
        let [a, b, _] = self.client.accounts();
        [a, b]
    }

    /// A simulator with the two logins, 30 % of quota per turn, the relay's summary reply, and
    /// the quota headers of the client's provider.
    pub fn sim(&self) -> SimBuilder {
        let [a, b] = self.accounts();
        let headers = match self.kind {
            SimLogin::Codex => SimQuotaHeaders::Codex,
            SimLogin::Claude => SimQuotaHeaders::Anthropic,
        };
        SimProvider::builder()
            .login(a, self.kind)
            .login(b, self.kind)
            .quota_step(30.0)
            .quota_headers(headers)
            .summary_reply(SUMMARY_NEEDLE, summary_reply())
    }

    /// The credential file of account `id`.
    pub fn path(&self, id: &str) -> PathBuf {
        self.dir.path().join(format!("{id}.json"))
    }

    /// Logs `id` in (a new pair, its access token expiring in `expiring` seconds when given)
    /// and writes the credential file.
    pub fn log_in(&self, sim: &SimProvider, id: &str, expiring: Option<u64>) -> Value {
        let file = match expiring {
            Some(secs) => sim.login_file_expiring(id, secs),
            None => sim.login_file(id),
        }
        .expect("a login account");
        std::fs::write(self.path(id), file.to_string()).expect("credential file written");
        file
    }

    /// The refresh token in `id`'s credential file now.
    pub fn refresh_token(&self, id: &str) -> String {
        self.refresh_token_at(&self.path(id))
    }

    /// The refresh token in the credential file at `path` now.
    pub fn refresh_token_at(&self, path: &Path) -> String {
        let v: Value =
            serde_json::from_slice(&std::fs::read(path).expect("credential file")).expect("JSON");
        let t = match self.kind {
            SimLogin::Codex => &v["tokens"]["refresh_token"],
            SimLogin::Claude => &v["claudeAiOauth"]["refreshToken"],
        };
        t.as_str().expect("a refresh token").to_owned()
    }

    /// The gateway configuration pooling the two logins (files from [`log_in`](Self::log_in))
    /// behind the client's combo, with `store` as the `[store]` table's body.
    pub fn config(&self, sim: &SimProvider, store: &str) -> String {
        let [a, b] = self.accounts();
        let (name, base, auth, combo) = match self.kind {
            SimLogin::Codex => (
                "codex",
                sim.codex_base_url(),
                "chatgpt",
                "name = \"codex-relay\"\ntargets = [\"codex/gpt-5.5\"]",
            ),
            SimLogin::Claude => (
                "anthropic",
                sim.base_url(),
                "claude-oauth",
                "name = \"claude-relay\"\ntargets = [\"anthropic/claude-opus-4-8\"]",
            ),
        };
        format!(
            r#"
admin_token = "{ADMIN_TOKEN}"
[store]
{store}
[relay]
handoff_providers = ["*"]
[[providers]]
name = "{name}"
base_url = "{base}"
auth = "{auth}"
token_url = "{token_url}"
  [[providers.accounts]]
  id = "{a}"
  credentials = {pa:?}
  [[providers.accounts]]
  id = "{b}"
  credentials = {pb:?}
[[combos]]
{combo}
"#,
            token_url = sim.token_url(self.kind),
            pa = self.path(a).display().to_string(),
            pb = self.path(b).display().to_string(),
        )
    }

    /// Starts `sim`, logs both accounts in (the first one's access token expiring in
    /// `expiring` seconds when given) and serves a gateway pooling them over `store` (a
    /// `[store]` table's body).
    pub async fn start(&self, sim: SimBuilder, expiring: Option<u64>, store: &str) -> Harness {
        let sim = sim.start().await.expect("sim");
        let [a, b] = self.accounts();
        self.log_in(&sim, a, expiring);
        self.log_in(&sim, b, None);
        let text = self.config(&sim, store);
        Harness::single(sim, &text).await
    }

    /// A conversation of the client as it talks to its subscription backend (Codex sends its
    /// `instructions` to the ChatGPT backend).
    pub fn conversation(&self, session: &str) -> Conversation {
        let mut conv = Conversation::new(self.client, session);
        if let Client::Codex = self.client {
            conv.body["instructions"] = json!(CODEX_INSTRUCTIONS);
        }
        conv
    }

    /// A small request of the client, without a session: `(path, body)`.
    pub fn small_turn(&self, text: &str) -> (&'static str, Value) {
        let body = match self.client {
            Client::Codex => json!({"model": "codex-relay", "instructions": CODEX_INSTRUCTIONS,
                "stream": true, "store": false,
                "input": [{"type": "message", "role": "user",
                           "content": [{"type": "input_text", "text": text}]}]}),
            Client::Claude => json!({"model": "claude-relay", "max_tokens": 1000,
                "stream": true,
                "system": [{"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."}],
                "messages": [{"role": "user", "content": text}]}),
        };
        (self.client.path(), body)
    }
}
