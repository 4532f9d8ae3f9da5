//! The credential files the clients write, read and written back in their own format:
//!
//! - **Codex CLI** `$CODEX_HOME/auth.json`: `{"OPENAI_API_KEY": null, "tokens": {"id_token",
//!   "access_token", "refresh_token", "account_id"}, "last_refresh": "<RFC 3339>"}` (the access
//!   token is a JWT whose `exp` says when it expires);
//! - **Claude Code** `~/.claude/.credentials.json`: `{"claudeAiOauth": {"accessToken",
//!   "refreshToken", "expiresAt": <Unix ms>, "scopes": [...], "subscriptionType"}}`.
//!
//! The two are told apart by their shape; anything else is refused with an error that names the
//! keys it found (never a value). Writing back replaces only the token fields (and
//! `last_refresh` / `expiresAt`) of the file as it is on disk at that moment, keeping every
//! other field, through a temporary file in the same folder (mode 0600, the old file's owner,
//! synced) renamed over the old one: a reader sees the old file or the new one, never half of
//! one. A symbolic link to a credential file of the same client is written through, to the
//! file it points to; a link to anything else is replaced, never followed.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use context_relay_core::time::{from_unix_millis, to_unix_millis};
use serde_json::{Map, Value, json};

use super::jwt;
use super::tokens::{Secret, Tokens};

/// Which client's login a credential file holds (and so which `auth` it serves).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LoginKind {
    /// Codex CLI's `auth.json`: a ChatGPT plan, `auth = "chatgpt"`.
    Codex,
    /// Claude Code's `.credentials.json`: a Claude Pro/Max plan, `auth = "claude-oauth"`.
    Claude,
}

impl LoginKind {
    /// What the file is, for messages.
    pub(crate) fn file_name(self) -> &'static str {
        match self {
            Self::Codex => "a Codex CLI auth.json",
            Self::Claude => "a Claude Code .credentials.json",
        }
    }
}

/// A credential file as read: whose it is and its tokens.
#[derive(Debug, Clone)]
pub(crate) struct LoginFile {
    pub(crate) kind: LoginKind,
    pub(crate) tokens: Tokens,
}

/// Why a credential file cannot be used. No variant holds a value from the file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FileError {
    /// The file could not be read.
    #[error("cannot read it: {0}")]
    Io(#[from] io::Error),
    /// Not JSON.
    #[error("expected JSON, found text that does not parse (line {line}, column {column})")]
    NotJson { line: usize, column: usize },
    /// JSON of another shape.
    #[error(
        "expected a Codex CLI auth.json (`tokens.access_token`, `tokens.refresh_token`) or a Claude Code .credentials.json (`claudeAiOauth.accessToken`, `claudeAiOauth.refreshToken`), found {0}"
    )]
    Shape(String),
    /// A Codex `auth.json` of an API-key login.
    #[error(
        "expected a ChatGPT login, found a Codex CLI auth.json holding only an API key (`OPENAI_API_KEY`): configure that key with `api_key` instead"
    )]
    ApiKeyOnly,
    /// A Codex login without a ChatGPT account id.
    #[error(
        "expected a ChatGPT account id (`tokens.account_id`, or `chatgpt_account_id` in the id token), found none"
    )]
    NoAccountId,
    /// A token that no HTTP header can carry.
    #[error("expected `{0}` to be a token of visible ASCII characters, found other characters")]
    BadToken(&'static str),
}

/// Reads and parses the credential file at `path`.
pub(crate) fn read(path: &Path) -> Result<LoginFile, FileError> {
    parse(&fs::read_to_string(path)?)
}

/// Parses a credential file's text.
pub(crate) fn parse(text: &str) -> Result<LoginFile, FileError> {
    let doc: Value = serde_json::from_str(text).map_err(|e| FileError::NotJson {
        line: e.line(),
        column: e.column(),
    })?;
    let Some(obj) = doc.as_object() else {
        return Err(FileError::Shape(format!("a JSON {}", kind_of(&doc))));
    };
    if let Some(tokens) = obj.get("tokens").and_then(Value::as_object) {
        return codex(obj, tokens);
    }
    if let Some(oauth) = obj.get("claudeAiOauth").and_then(Value::as_object) {
        return claude(oauth);
    }
    if obj.get("OPENAI_API_KEY").is_some_and(Value::is_string) {
        return Err(FileError::ApiKeyOnly);
    }
    Err(FileError::Shape(describe(obj)))
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `an object with keys "a", "b"` (at most 8 names, each cut at 40 characters; a name that
/// looks like a key, pasted where a name belongs, is not shown).
fn describe(obj: &Map<String, Value>) -> String {
    if obj.is_empty() {
        return "an empty JSON object".to_owned();
    }
    let names: Vec<String> = obj
        .keys()
        .take(8)
        .map(|k| {
            if crate::config::looks_secret(k) {
                "(a name that looks like a key)".to_owned()
            } else {
                format!("{:?}", k.chars().take(40).collect::<String>())
            }
        })
        .collect();
    let more = if obj.len() > 8 { ", …" } else { "" };
    format!("a JSON object with keys {}{more}", names.join(", "))
}

/// The string at `key` as a token, or the error naming `field`.
fn token(
    obj: &Map<String, Value>,
    key: &str,
    field: &'static str,
) -> Result<Option<Secret>, FileError> {
    match obj
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        None => Ok(None),
        Some(s) if s.bytes().all(|b| b.is_ascii_graphic()) => Ok(Some(Secret::new(s))),
        Some(_) => Err(FileError::BadToken(field)),
    }
}

fn required(
    obj: &Map<String, Value>,
    key: &str,
    field: &'static str,
    shape: &str,
) -> Result<Secret, FileError> {
    token(obj, key, field)?.ok_or_else(|| {
        FileError::Shape(format!(
            "{shape} without a non-empty string `{field}` ({})",
            describe(obj)
        ))
    })
}

fn codex(doc: &Map<String, Value>, tokens: &Map<String, Value>) -> Result<LoginFile, FileError> {
    let shape = "a Codex CLI auth.json";
    let access = required(tokens, "access_token", "tokens.access_token", shape)?;
    let refresh = required(tokens, "refresh_token", "tokens.refresh_token", shape)?;
    let id_token = token(tokens, "id_token", "tokens.id_token")?;
    let account_id = tokens
        .get("account_id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .or_else(|| {
            id_token
                .as_ref()
                .and_then(|t| jwt::chatgpt_account_id(t.expose()))
        })
        .or_else(|| jwt::chatgpt_account_id(access.expose()))
        .ok_or(FileError::NoAccountId)?;
    if !account_id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(FileError::BadToken("tokens.account_id"));
    }
    let obtained_at = doc
        .get("last_refresh")
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<jiff::Timestamp>().ok())
        .map(SystemTime::from);
    Ok(LoginFile {
        kind: LoginKind::Codex,
        tokens: Tokens {
            expires_at: jwt::expires_at(access.expose()),
            access,
            refresh,
            id_token,
            account_id: Some(account_id),
            obtained_at,
        },
    })
}

fn claude(oauth: &Map<String, Value>) -> Result<LoginFile, FileError> {
    let shape = "a Claude Code .credentials.json";
    let access = required(oauth, "accessToken", "claudeAiOauth.accessToken", shape)?;
    let refresh = required(oauth, "refreshToken", "claudeAiOauth.refreshToken", shape)?;
    Ok(LoginFile {
        kind: LoginKind::Claude,
        tokens: Tokens {
            access,
            refresh,
            id_token: None,
            account_id: None,
            expires_at: oauth
                .get("expiresAt")
                .and_then(Value::as_u64)
                .map(from_unix_millis),
            obtained_at: None,
        },
    })
}

/// The file's text with `tokens` written into `current` (the file as it is now, or `None`
/// when it cannot be read): only the token fields change.
pub(crate) fn patched(kind: LoginKind, current: Option<&str>, tokens: &Tokens) -> String {
    let mut doc = current
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| match kind {
            LoginKind::Codex => json!({"OPENAI_API_KEY": null}),
            LoginKind::Claude => json!({}),
        });
    let set = |obj: &mut Value, key: &str, value: Value| {
        if !obj.is_object() {
            *obj = json!({});
        }
        if let Some(o) = obj.as_object_mut() {
            o.insert(key.to_owned(), value);
        }
    };
    let ms = |t: Option<SystemTime>| t.map(to_unix_millis);
    match kind {
        LoginKind::Codex => {
            let t = doc.get_mut("tokens");
            let t = match t {
                Some(t) => t,
                None => {
                    set(&mut doc, "tokens", json!({}));
                    &mut doc["tokens"]
                }
            };
            set(t, "access_token", json!(tokens.access.expose()));
            set(t, "refresh_token", json!(tokens.refresh.expose()));
            if let Some(id) = &tokens.id_token {
                set(t, "id_token", json!(id.expose()));
            }
            if let Some(account) = &tokens.account_id {
                set(t, "account_id", json!(account));
            }
            if let Some(at) = tokens
                .obtained_at
                .and_then(|t| jiff::Timestamp::try_from(t).ok())
            {
                set(&mut doc, "last_refresh", json!(at.to_string()));
            }
        }
        LoginKind::Claude => {
            let o = match doc.get_mut("claudeAiOauth") {
                Some(o) => o,
                None => {
                    set(&mut doc, "claudeAiOauth", json!({}));
                    &mut doc["claudeAiOauth"]
                }
            };
            set(o, "accessToken", json!(tokens.access.expose()));
            set(o, "refreshToken", json!(tokens.refresh.expose()));
            if let Some(at) = ms(tokens.expires_at) {
                set(o, "expiresAt", json!(at));
            }
        }
    }
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

/// Writes `tokens` back into the credential file at `path` atomically (see the module docs).
/// Blocking.
pub(crate) fn write(path: &Path, kind: LoginKind, tokens: &Tokens) -> io::Result<()> {
    // A symbolic link to a credential file of this client is written through (the client
    // reads the file it points to); a link to anything else is replaced, never followed (a
    // gateway run as root must not be led to overwrite another file).
    let link = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    let target = match fs::canonicalize(path) {
        Ok(t) if link && read(&t).is_ok_and(|f| f.kind == kind) => t,
        _ => path.to_owned(),
    };
    let current = fs::read_to_string(&target).ok();
    let text = patched(kind, current.as_deref(), tokens);
    replace(&target, text.as_bytes())
}

/// Replaces the file at `path` by `bytes`: a temporary file beside it (mode 0600), synced, then
/// renamed over it, and the folder synced so that the rename survives a crash.
pub(crate) fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "credentials".to_owned());
    let tmp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut file = options.open(&tmp)?;
        #[cfg(unix)]
        if let Ok(old) = fs::metadata(path) {
            use std::os::unix::fs::MetadataExt;
            // The file stays its owner's (a gateway run as root does not take a user's login
            // over); where that is not allowed, it is the gateway's, as created.
            let _ = std::os::unix::fs::fchown(&file, Some(old.uid()), Some(old.gid()));
        }
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
        return written;
    }
    #[cfg(unix)]
    File::open(dir)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests;
