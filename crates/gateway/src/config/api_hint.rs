//! Warnings about providers left on `api = "passthrough"` (the default) that cannot speak
//! every shape a client may send them.
//!
//! A passthrough provider gets each request in the client's own shape, at the client's path.
//! The real OpenAI hosts serve no `/messages`: Claude Code's `/v1/messages` routed to them
//! gets a 404 where a combo with `api = "openai"` would have skipped to a target that speaks
//! Anthropic Messages. The known hosts are recognised here, so `--check` and start-up say so.

use super::{AuthScheme, Config, ProviderApi};

/// The API the well-known hosts speak, and the `api` value that describes it.
const KNOWN_HOSTS: [(&str, &str, &str); 4] = [
    (
        "api.openai.com",
        "openai",
        "Anthropic Messages (Claude Code) and Gemini requests",
    ),
    (
        "openai.azure.com",
        "openai",
        "Anthropic Messages (Claude Code) and Gemini requests",
    ),
    (
        "chatgpt.com",
        "openai",
        "Anthropic Messages (Claude Code) and Gemini requests",
    ),
    (
        "api.anthropic.com",
        "anthropic",
        "Chat Completions and Gemini requests",
    ),
];

/// One line per passthrough provider whose `base_url` is a host known to speak one API only.
pub(super) fn passthrough_warnings(config: &Config) -> Vec<String> {
    let mut out = Vec::new();
    for (i, p) in config.providers.iter().enumerate() {
        if p.api != ProviderApi::Passthrough {
            continue;
        }
        let Some(host) = url::Url::parse(&p.base_url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_ascii_lowercase))
        else {
            continue;
        };
        if let Some((_, api, refused)) = KNOWN_HOSTS
            .iter()
            .find(|(h, _, _)| host == *h || host.ends_with(&format!(".{h}")))
        {
            out.push(format!(
                "providers[{i}] ({:?}): api = \"passthrough\" (the default) on {host}: {refused} routed to it are sent as they are and refused; set api = \"{api}\" so that such requests skip it for a target that speaks them",
                p.name
            ));
        }
    }
    out
}

/// One line per provider on the real OpenAI or Anthropic API host whose settings that host
/// refuses on every request: Anthropic API keys sent as `Authorization: Bearer` (the API reads
/// `x-api-key`), and a `base_url` without the API's `/v1` (the client's path after `/v1` is
/// appended to it, so `/responses` would go to the host's root).
pub(super) fn host_warnings(config: &Config) -> Vec<String> {
    let mut out = Vec::new();
    for (i, p) in config.providers.iter().enumerate() {
        let Some(url) = url::Url::parse(&p.base_url).ok() else {
            continue;
        };
        let Some(host) = url.host_str().map(str::to_ascii_lowercase) else {
            continue;
        };
        let anthropic = host == "api.anthropic.com";
        if anthropic
            && p.auth == AuthScheme::Bearer
            && p.accounts.iter().any(|a| a.credentials.is_none())
        {
            out.push(format!(
                "providers[{i}] ({:?}): auth = \"bearer\" (the default) on {host}: Anthropic API keys are read from `x-api-key`, and every request would be refused with 401; set auth = \"x-api-key\"",
                p.name
            ));
        }
        if (anthropic || host == "api.openai.com")
            && !url.path().trim_end_matches('/').ends_with("/v1")
        {
            let shown = crate::secret::redact_url(&p.base_url);
            let root = shown.trim_end_matches('/');
            out.push(format!(
                "providers[{i}] ({:?}): base_url {shown} has no /v1: the client's path after /v1 is appended to it ({root}/responses, {root}/messages), where the API serves none; end it with /v1",
                p.name,
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(base_url: &str, api: &str) -> Config {
        let text = format!(
            "[[providers]]\nname = \"p\"\nbase_url = \"{base_url}\"\n{api}\n[[providers.accounts]]\nid = \"a\"\napi_key = \"k\"\n"
        );
        Config::from_toml_str(&text, |_| None).unwrap()
    }

    #[test]
    fn known_single_api_hosts_left_on_passthrough_are_warned_about() {
        let w = config("https://api.openai.com/v1", "").warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("Claude Code") && w[0].contains("api = \"openai\""),
            "{w:?}"
        );
        let w = config("https://chatgpt.com/backend-api/codex", "").warnings();
        assert!(w.iter().any(|l| l.contains("api = \"openai\"")), "{w:?}");
        let w = config("https://API.anthropic.com/v1", "").warnings();
        assert!(w.iter().any(|l| l.contains("api = \"anthropic\"")), "{w:?}");
    }

    #[test]
    fn what_the_real_hosts_refuse_on_every_request_is_warned_about() {
        let w = config("https://api.anthropic.com/v1", "api = \"anthropic\"").warnings();
        assert!(
            w.len() == 1 && w[0].contains("set auth = \"x-api-key\""),
            "{w:?}"
        );
        let keyed = "api = \"anthropic\"\nauth = \"x-api-key\"";
        assert!(
            config("https://api.anthropic.com/v1", keyed)
                .warnings()
                .is_empty()
        );
        let w = config("https://api.openai.com", "api = \"openai\"").warnings();
        assert!(w.len() == 1 && w[0].contains("has no /v1"), "{w:?}");
        let w = config("https://api.anthropic.com/", keyed).warnings();
        assert!(w.len() == 1 && w[0].contains("has no /v1"), "{w:?}");
        assert!(
            config("https://api.openai.com/v1/", "api = \"openai\"")
                .warnings()
                .is_empty()
        );
    }

    #[test]
    fn an_explicit_api_or_an_unknown_host_is_no_warning() {
        assert!(
            config("https://api.openai.com/v1", "api = \"openai\"")
                .warnings()
                .is_empty()
        );
        assert!(config("http://127.0.0.1:9/v1", "").warnings().is_empty());
        assert!(
            config("https://openai.example/v1", "")
                .warnings()
                .is_empty()
        );
    }
}
