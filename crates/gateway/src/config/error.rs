//! Why a configuration could not be loaded, worded so that no secret reaches the terminal.
//!
//! A TOML syntax or schema error is shown as `line L, column C: message`: the offending source
//! line is never echoed (it may hold a key next to the typo), and quoted values in the message
//! are replaced by their kind.
//!
//! ```
//! use context_relay_gateway::config::Config;
//! let text = "admin_token = \"adm-s3cret\"\nlisten_adress = \"x\"\n";
//! let e = Config::from_toml_str(text, |_| None).unwrap_err().to_string();
//! assert!(e.contains("line 2, column 1") && e.contains("listen_adress"), "{e}");
//! assert!(!e.contains("adm-s3cret"), "{e}");
//! ```

use std::path::PathBuf;

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read configuration file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The text is not valid TOML or does not match the schema (unknown key, wrong type).
    #[error("invalid configuration at line {line}, column {column}: {message}")]
    Parse {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column (in characters) of the error.
        column: usize,
        /// What the parser expected, with quoted values removed.
        message: String,
    },
    /// An `*_env` field names a variable that is not set (or is empty).
    #[error(
        "{field}: expected environment variable `{variable}` to hold the {what}, but it is {found}"
    )]
    MissingEnv {
        /// The field path, e.g. `providers["codex"].accounts["acct-a"].api_key_env`.
        field: String,
        /// The variable name.
        variable: String,
        /// What the variable holds (`API key`, `client key`, `admin token`, `store URL`).
        what: &'static str,
        /// `not set` or `empty`.
        found: &'static str,
    },
    /// An account's `credentials` file cannot be used.
    #[error("{field}: cannot use the credential file {path}: {reason}")]
    Credentials {
        /// The field path, e.g. `providers["codex"].accounts["plus-1"].credentials`.
        field: String,
        /// The file (with `~` expanded).
        path: PathBuf,
        /// What is wrong with it (never a token).
        reason: String,
    },
    /// A value is out of range or inconsistent with the rest of the file.
    #[error("{field}: expected {expected}, found {found}")]
    Invalid {
        /// The field path, e.g. `combos["codex-relay"].targets[0]`.
        field: String,
        /// What a valid value looks like.
        expected: String,
        /// The offending value (secrets are never printed).
        found: String,
    },
}

impl ConfigError {
    /// The error of `toml` parsing `text`, located by line and column, without the source line.
    pub fn parse(e: &toml::de::Error, text: &str) -> Self {
        let (line, column) = match e.span() {
            Some(span) => line_column(text, span.start),
            None => (1, 1),
        };
        let mut message = scrub(e.message());
        // Name the key of a refused value (`api = "gemini"` → "key `api`"): the message of an
        // unknown variant does not.
        if let Some(key) = e
            .span()
            .and_then(|span| text.get(..span.start))
            .and_then(|before| before.rsplit('\n').next())
            .and_then(|line| line.split_once('='))
            .map(|(key, _)| key.trim())
            .filter(|key| !key.is_empty() && !key.contains(['"', '\'', ' ']))
        {
            message.push_str(&format!(" (key `{key}`)"));
        } else if message.starts_with("duplicate")
            && let Some(named) = e
                .span()
                .and_then(|span| text.get(span))
                .map(str::trim)
                .filter(|k| !k.is_empty() && k.len() <= 200 && !k.contains('\n'))
        {
            // A duplicate key or table: its span is its name.
            message.push_str(&format!(" (`{named}`)"));
        }
        Self::Parse {
            line,
            column,
            message: redact_quoted(&message),
        }
    }
}

pub(crate) fn invalid(
    field: impl Into<String>,
    expected: impl Into<String>,
    found: impl Into<String>,
) -> ConfigError {
    ConfigError::Invalid {
        field: redact_quoted(&field.into()),
        expected: expected.into(),
        found: redact_quoted(&found.into()),
    }
}

/// Whether a value looks like a credential rather than a name, URL or number: a known key
/// prefix (`sk-`, `AIza`, `ghp_`, a JWT's `eyJ`, …), or a long run of letters and digits
/// without the separators names and URLs have. A key pasted where a name belongs (an
/// `*_env` field, a combo name, a target) is then never printed.
pub(crate) fn looks_secret(value: &str) -> bool {
    const PREFIXES: [&str; 13] = [
        "sk-",
        "sk_",
        "pk-",
        "pk_",
        "rk-",
        "aiza",
        "xai-",
        "gsk_",
        "ghp_",
        "github_pat_",
        "glpat-",
        "eyj",
        "bearer ",
    ];
    let v = value.trim();
    let lower = v.to_ascii_lowercase();
    if v.len() >= 8 && PREFIXES.iter().any(|p| lower.starts_with(p)) {
        return true;
    }
    v.len() >= 24
        && !v.contains(['/', ':', '.', ' '])
        && !word_separated(v)
        && v.chars().any(|c| c.is_ascii_digit())
        && v.chars().any(|c| c.is_ascii_alphabetic())
}

/// Whether `v` reads as words joined by `_` or `-`, as names are (`OPENAI_API_KEY_TEAM2_2`,
/// `gpt-4o-realtime-preview-2024-12-17`): three parts or more, none longer than 10
/// characters, each letters and digits in at most two runs (`TEAM2`, `4o`, `v2`). A key's
/// random parts switch between letters and digits more often, or run long (a UUID's last
/// part is 12).
fn word_separated(v: &str) -> bool {
    let mut parts = 0;
    for part in v.split(['_', '-']) {
        let bytes = part.as_bytes();
        let alnum = bytes.iter().all(u8::is_ascii_alphanumeric);
        let switches = bytes
            .windows(2)
            .filter(|w| w[0].is_ascii_digit() != w[1].is_ascii_digit())
            .count();
        if part.is_empty() || part.len() > 10 || !alnum || switches > 1 {
            return false;
        }
        parts += 1;
    }
    parts >= 3
}

/// What an error shows of `value`: the value, or its length when it [`looks_secret`].
pub(crate) fn shown(value: &str) -> String {
    if looks_secret(value) {
        format!(
            "a value of {} characters (not shown: it looks like a key)",
            value.chars().count()
        )
    } else {
        value.to_owned()
    }
}

/// `text` with each double- or back-quoted part that [`looks_secret`] replaced by `…`.
fn redact_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find(['"', '`']) {
        let quote = rest.as_bytes()[open] as char;
        let after = &rest[open + 1..];
        let Some(close) = after.find(quote) else {
            break;
        };
        out.push_str(&rest[..=open]);
        let inner = &after[..close];
        out.push_str(if looks_secret(inner) { "…" } else { inner });
        out.push(quote);
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// `message` with every quoted string value replaced by `"…"`: serde names the value it
/// could not use (`invalid type: string "sk-…", expected a number`), and that value may be a
/// key. Field and variant names (back-quoted) stay.
fn scrub(message: &str) -> String {
    const MARK: &str = "string \"";
    let mut out = String::with_capacity(message.len());
    let mut rest = message.trim();
    while let Some(start) = rest.find(MARK) {
        out.push_str(&rest[..start + MARK.len()]);
        let after = &rest[start + MARK.len()..];
        out.push_str("…\"");
        // serde writes the value with `{:?}`: the closing quote is the first unescaped one.
        let mut end = None;
        let mut escaped = false;
        for (i, c) in after.char_indices() {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => {
                    end = Some(i);
                    break;
                }
                _ => escaped = false,
            }
        }
        rest = end.map_or("", |e| &after[e + 1..]);
    }
    out.push_str(rest);
    out.replace('\n', "; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_and_scrubbing() {
        assert_eq!(line_column("a\nbc\nd", 3), (2, 2));
        assert_eq!(line_column("é\nx", 1), (1, 1));
        assert_eq!(line_column("", 10), (1, 1));
        assert_eq!(
            scrub("invalid type: string \"sk-1\", expected `u64`"),
            "invalid type: string \"…\", expected `u64`"
        );
        assert_eq!(scrub("string \"sk\\\"x"), "string \"…\"");
        assert_eq!(
            scrub("expected `a`, found \"b\""),
            "expected `a`, found \"b\""
        );
        assert_eq!(
            redact_quoted("unknown variant `sk-live-1234`, expected one of `bearer`"),
            "unknown variant `…`, expected one of `bearer`"
        );
        assert_eq!(
            redact_quoted("found \"AbCdEfGhIjKlMnOpQrStUvWx12\" and \"codex-relay\""),
            "found \"…\" and \"codex-relay\""
        );
    }

    /// A key pasted where a name, a URL or a variant belongs is never printed.
    #[test]
    fn a_key_in_the_wrong_place_is_not_printed() {
        let key = "sk-proj-Abc123Def456Ghi789";
        let provider = |extra: &str, account: &str| {
            format!(
                "[[providers]]\nname = \"codex\"\nbase_url = \"http://h/v1\"\n{extra}\n\
                 [[providers.accounts]]\nid = \"a\"\n{account}\n"
            )
        };
        let cases = [
            provider(&format!("auth = \"{key}\""), "api_key = \"k\""),
            provider("", &format!("api_key_env = \"{key}\"")),
            format!(
                "[[providers]]\nname = \"codex\"\nbase_url = \"{key}\"\n\
                 [[providers.accounts]]\nid = \"a\"\napi_key = \"k\"\n"
            ),
            provider("", "api_key = \"k\"")
                + &format!("[[combos]]\nname = \"c\"\ntargets = [\"{key}\"]\n"),
            provider("", "api_key = \"k\"")
                + &format!(
                    "[[combos]]\nname = \"{key}\"\ntargets = [\"codex/m\"]\n\
                     [[combos]]\nname = \"{key}\"\ntargets = [\"codex/m\"]\n"
                ),
        ];
        for text in cases {
            let e = crate::config::Config::from_toml_str(&text, |_| None)
                .expect_err("refused")
                .to_string();
            assert!(!e.contains("Abc123"), "{e}");
        }
        assert!(!looks_secret("codex-relay") && !looks_secret("https://api.example/v1"));
        assert!(!looks_secret("OPENAI_API_KEY") && !looks_secret("claude-sonnet-4-5"));
        // Long names of words are names: an `*_env` variable, a dated model id.
        assert!(!looks_secret("OPENAI_API_KEY_PERSONAL_2"));
        assert!(!looks_secret("claude-sonnet-4-5-20250929"));
        assert!(!looks_secret("ANTHROPIC_API_KEY_TEAM2_PROD"));
        assert!(!looks_secret("gpt-4o-realtime-preview-2024-12-17"));
        // Keys with a separator or two in a long random run are keys; so is a UUID.
        assert!(looks_secret("AbCdEf0123456789_GhIjKlMnOp9876"));
        assert!(looks_secret("Ab12-Cd34-Ef56GhIjKlMnOpQr7890"));
        assert!(looks_secret("123e4567-e89b-12d3-a456-426614174000"));
        // A random token whose separators happen to cut it short: its parts mix letters and
        // digits.
        assert!(looks_secret("aB3dE-f9Gh2_Jk4Lm-Np5qR_s7Tu"));
        assert!(looks_secret("GOCSPX-a1B2c3D4-e5F6g7H8-i9J0"));
    }

    #[test]
    fn a_duplicate_key_or_table_is_named() {
        let dup = |text: &str| {
            crate::config::Config::from_toml_str(text, |_| None)
                .expect_err("refused")
                .to_string()
        };
        let e = dup("listen = \"127.0.0.1:1\"\nlisten = \"127.0.0.1:2\"\n");
        assert!(e.contains("duplicate") && e.contains("`listen`"), "{e}");
        let e = dup("[store]\nbackend = \"memory\"\n[store]\nbackend = \"redb\"\n");
        assert!(e.contains("duplicate") && e.contains("store"), "{e}");
    }

    #[test]
    fn typo_next_to_a_secret_shows_no_source_line() {
        let text = "[[providers]]\nname = \"p\"\nbase_url = \"http://h/v1\"\n  [[providers.accounts]]\n  id = \"a\"\n  api_key = \"sk-live-123\n";
        let e = crate::config::Config::from_toml_str(text, |_| None)
            .unwrap_err()
            .to_string();
        assert!(!e.contains("sk-live"), "{e}");
        assert!(e.contains("line 6"), "{e}");
        let text = "[[providers]]\nname = \"p\"\nbase_url = \"http://h/v1\"\nrotate_at = \"sk-live-123\"\n";
        let e = crate::config::Config::from_toml_str(text, |_| None)
            .unwrap_err()
            .to_string();
        assert!(!e.contains("sk-live"), "{e}");
        assert!(e.contains("line 4"), "{e}");
    }
}
