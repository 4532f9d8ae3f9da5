//! Subscription logins in the configuration: `credentials = "PATH"` on an account of a
//! provider with `auth = "chatgpt"` or `"claude-oauth"`, read at load (so `--check` reports a
//! missing or wrong file), and the provider's `token_url` and `client_id`, which default to the
//! client's own.
//!
//! ```
//! use context_relay_gateway::config::Config;
//! let dir = std::env::temp_dir().join(format!("cr-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let file = dir.join("credentials.json");
//! std::fs::write(&file, r#"{"claudeAiOauth":{"accessToken":"sk-ant-oat01-a","refreshToken":"sk-ant-ort01-r","expiresAt":1800000000000}}"#).unwrap();
//! let text = format!(r#"
//! [[providers]]
//! name = "claude"
//! base_url = "https://api.anthropic.com/v1"
//! auth = "claude-oauth"
//!   [[providers.accounts]]
//!   id = "max-1"
//!   credentials = {:?}
//! "#, file.display().to_string());
//! let config = Config::from_toml_str(&text, |_| None).unwrap();
//! assert_eq!(config.providers[0].token_url(), "https://console.anthropic.com/v1/oauth/token");
//! // A Claude file under a ChatGPT provider is refused.
//! let e = Config::from_toml_str(&text.replace("claude-oauth", "chatgpt"), |_| None).unwrap_err();
//! assert!(e.to_string().contains("expected a Codex CLI auth.json"), "{e}");
//! # std::fs::remove_dir_all(&dir).ok();
//! ```

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::error::{ConfigError, invalid};
use super::{AuthScheme, Config, ProviderConfig};
use crate::login::{self, LoginKind};

impl ProviderConfig {
    /// The token endpoint its logins refresh at: `token_url`, else the client's own
    /// (`https://auth.openai.com/oauth/token` for `chatgpt`,
    /// `https://console.anthropic.com/v1/oauth/token` for `claude-oauth`); empty for key
    /// providers.
    pub fn token_url(&self) -> &str {
        match (&self.token_url, self.auth) {
            (Some(url), _) => url,
            (None, AuthScheme::Chatgpt) => login::CODEX_TOKEN_URL,
            (None, AuthScheme::ClaudeOauth) => login::CLAUDE_TOKEN_URL,
            (None, _) => "",
        }
    }

    /// The OAuth client id its logins refresh as: `client_id`, else the client's own (Codex
    /// CLI's `app_EMoamEEZ73f0CkXaXp7hrann`, Claude Code's
    /// `9d1c250a-e61b-44d9-88ed-5944d1962f5e`); empty for key providers.
    pub fn client_id(&self) -> &str {
        match (&self.client_id, self.auth) {
            (Some(id), _) => id,
            (None, AuthScheme::Chatgpt) => login::CODEX_CLIENT_ID,
            (None, AuthScheme::ClaudeOauth) => login::CLAUDE_CLIENT_ID,
            (None, _) => "",
        }
    }
}

/// The login file kind an `auth` takes.
fn kind_of(auth: AuthScheme) -> Option<LoginKind> {
    match auth {
        AuthScheme::Chatgpt => Some(LoginKind::Codex),
        AuthScheme::ClaudeOauth => Some(LoginKind::Claude),
        _ => None,
    }
}

/// `path` with a leading `~/` replaced by `$HOME/`.
fn expand(path: &Path, env: &impl Fn(&str) -> Option<String>) -> PathBuf {
    match (path.strip_prefix("~"), env("HOME")) {
        (Ok(rest), Some(home)) if !home.is_empty() => Path::new(&home).join(rest),
        _ => path.to_owned(),
    }
}

impl Config {
    /// Reads the credential file of every login account (see the module docs).
    pub(super) fn read_logins(
        &mut self,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        let mut seen = HashSet::new();
        for p in &mut self.providers {
            for a in &mut p.accounts {
                let afield = format!("providers[{:?}].accounts[{:?}]", p.name, a.id);
                let Some(kind) = kind_of(p.auth) else {
                    if a.credentials.is_some() {
                        return Err(invalid(
                            format!("{afield}.credentials"),
                            "an account of a provider with auth = \"chatgpt\" or \"claude-oauth\" (subscription logins)",
                            format!(
                                "credentials on a provider with auth = {:?}",
                                p.auth.as_str()
                            ),
                        ));
                    }
                    continue;
                };
                if a.api_key.is_some() {
                    return Err(invalid(
                        afield,
                        format!(
                            "`credentials` (the login's credential file) for auth = {:?}",
                            p.auth.as_str()
                        ),
                        "`api_key` (keys go on providers with a key auth)",
                    ));
                }
                let Some(given) = &a.credentials else {
                    return Err(invalid(
                        format!("{afield}.credentials"),
                        format!(
                            "the path of {} for auth = {:?}",
                            kind.file_name(),
                            p.auth.as_str()
                        ),
                        "none",
                    ));
                };
                let path = expand(given, env);
                let field = format!("{afield}.credentials");
                let file = login::file::read(&path).map_err(|e| ConfigError::Credentials {
                    field: field.clone(),
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
                if file.kind != kind {
                    return Err(invalid(
                        field,
                        format!("{} for auth = {:?}", kind.file_name(), p.auth.as_str()),
                        format!("{} at {}", file.kind.file_name(), path.display()),
                    ));
                }
                // Two accounts refreshing one login would each kill the other's refresh token.
                if !seen.insert(file_identity(&path)) {
                    return Err(invalid(
                        field,
                        "a credential file no other account uses (one login per account)",
                        format!("{} twice", path.display()),
                    ));
                }
                a.credentials = Some(path);
                a.login = Some(file);
            }
        }
        Ok(())
    }

    /// The logins' provider settings: `token_url` and `client_id` only with a login `auth`, a
    /// token URL that is an http(s) URL, a client id that is not blank.
    pub(super) fn validate_logins(&self) -> Result<(), ConfigError> {
        for p in &self.providers {
            let field = format!("providers[{:?}]", p.name);
            if !p.auth.is_login() {
                for (key, set) in [
                    ("token_url", p.token_url.is_some()),
                    ("client_id", p.client_id.is_some()),
                ] {
                    if set {
                        return Err(invalid(
                            format!("{field}.{key}"),
                            "a provider with auth = \"chatgpt\" or \"claude-oauth\"",
                            format!("{key} with auth = {:?}", p.auth.as_str()),
                        ));
                    }
                }
                continue;
            }
            let url = p.token_url();
            let parsed = url::Url::parse(url).ok();
            if !parsed.is_some_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host()) {
                return Err(invalid(
                    format!("{field}.token_url"),
                    "an absolute http:// or https:// URL",
                    format!("{:?}", crate::secret::redact_url(url)),
                ));
            }
            if p.client_id().trim().is_empty() {
                return Err(invalid(
                    format!("{field}.client_id"),
                    "a non-empty OAuth client id",
                    "\"\"",
                ));
            }
        }
        Ok(())
    }

    /// How many accounts are subscription logins.
    pub fn logins(&self) -> usize {
        self.providers
            .iter()
            .flat_map(|p| &p.accounts)
            .filter(|a| a.login.is_some())
            .count()
    }
}

/// What makes two credential paths one file: its device and inode where the system has them
/// (so hard links and symbolic links are one file), else its canonical path.
#[derive(Debug, PartialEq, Eq, Hash)]
enum FileIdentity {
    #[cfg(unix)]
    Inode(u64, u64),
    Path(std::path::PathBuf),
}

fn file_identity(path: &std::path::Path) -> FileIdentity {
    #[cfg(unix)]
    if let Ok(m) = std::fs::metadata(path) {
        use std::os::unix::fs::MetadataExt;
        return FileIdentity::Inode(m.dev(), m.ino());
    }
    FileIdentity::Path(path.canonicalize().unwrap_or_else(|_| path.to_owned()))
}

#[cfg(test)]
mod tests;
