//! Environment references: `api_key_env`, `[[clients]] key_env`, `admin_token_env` and
//! `[store] url_env` name a variable that holds the secret, so the file itself holds none.
//!
//! Each pair (`api_key` / `api_key_env`, …) is exclusive; after resolution the plain field
//! holds the value, trimmed. A variable that is not set or is blank is an error that names the
//! variable (never its value).

use super::Config;
use super::error::{ConfigError, invalid};

/// One `value` / `value_env` pair.
struct Pair<'a> {
    field: String,
    value: &'a mut Option<String>,
    value_name: &'static str,
    env: Option<&'a String>,
    env_name: &'static str,
    what: &'static str,
    required: bool,
}

impl Pair<'_> {
    fn resolve(self, env: &impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        let Pair {
            field,
            value,
            value_name,
            env: var,
            env_name,
            what,
            required,
        } = self;
        // A top-level pair (`admin_token`) has no table to name: the error names the key.
        let named = || {
            if field.is_empty() {
                value_name.to_owned()
            } else {
                field.clone()
            }
        };
        match (value.is_some(), var) {
            (true, Some(_)) => Err(invalid(
                named(),
                format!("either `{value_name}` or `{env_name}`"),
                "both",
            )),
            (false, None) if required => Err(invalid(
                named(),
                format!("`{value_name}` or `{env_name}`"),
                "neither",
            )),
            (_, None) => Ok(()),
            (false, Some(var)) => match env(var) {
                Some(v) if !v.trim().is_empty() => {
                    *value = Some(v.trim().to_owned());
                    Ok(())
                }
                found => Err(ConfigError::MissingEnv {
                    field: if field.is_empty() {
                        env_name.to_owned()
                    } else {
                        format!("{field}.{env_name}")
                    },
                    variable: super::error::shown(var),
                    what,
                    found: if found.is_some() { "empty" } else { "not set" },
                }),
            },
        }
    }
}

impl Config {
    /// Replaces every `*_env` reference by the variable's value, looked up with `env`.
    pub(super) fn resolve_env(
        &mut self,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        Pair {
            field: String::new(),
            value: &mut self.admin_token,
            value_name: "admin_token",
            env: self.admin_token_env.as_ref(),
            env_name: "admin_token_env",
            what: "admin token",
            required: false,
        }
        .resolve(env)?;
        Pair {
            field: "store".to_owned(),
            value: &mut self.store.url,
            value_name: "url",
            env: self.store.url_env.as_ref(),
            env_name: "url_env",
            what: "store URL",
            required: false,
        }
        .resolve(env)?;
        for p in &mut self.providers {
            // A login account has no key: its `credentials` are read and checked apart.
            let keyed = !p.auth.is_login();
            for a in &mut p.accounts {
                if !keyed && a.api_key.is_none() && a.api_key_env.is_none() {
                    continue;
                }
                Pair {
                    field: format!("providers[{:?}].accounts[{:?}]", p.name, a.id),
                    value: &mut a.api_key,
                    value_name: "api_key",
                    env: a.api_key_env.as_ref(),
                    env_name: "api_key_env",
                    what: "API key",
                    // An account naming a credential file on a key provider is told so by
                    // the logins' check (`auth` is what is wrong), not asked for a key.
                    required: keyed && a.credentials.is_none(),
                }
                .resolve(env)?;
            }
        }
        for c in &mut self.clients {
            let field = format!("clients[{:?}]", c.name);
            if c.key_sha256.is_some() {
                if c.key.is_some() || c.key_env.is_some() {
                    return Err(invalid(
                        field,
                        "one of `key`, `key_env` or `key_sha256`",
                        "several",
                    ));
                }
                continue;
            }
            Pair {
                field,
                value: &mut c.key,
                value_name: "key",
                env: c.key_env.as_ref(),
                env_name: "key_env",
                what: "client key",
                required: true,
            }
            .resolve(env)?;
        }
        Ok(())
    }
}
