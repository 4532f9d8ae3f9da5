//! `[providers.summary]`: how the relay's summary requests to one provider are made.
//!
//! ```toml
//! [[providers]]
//! name = "openai"
//! base_url = "https://api.openai.com/v1"
//!
//! [providers.summary]
//! model = "gpt-4.1-mini"        # default: the model of the request that triggered the summary
//! max_output_tokens = 800       # default 800
//! stream = false                # default: as the client sent it (Responses), else false
//! params = { temperature = 0.2 } # merged into the request body; none by default
//! ```
//!
//! Without the table, a summary request carries no sampling parameter at all (reasoning models
//! refuse `temperature`). A provider with `auth = "chatgpt"` (the ChatGPT Codex backend) gets
//! no `max_output_tokens` and a streamed request, which is all that backend takes. A parameter the model refuses anyway (a 400 naming it) is dropped,
//! the request retried once, and the refusal remembered for that provider and model.

use context_relay_core::prompt::SummarySettings;

use crate::config::{AuthScheme, Config};

/// The `[providers.summary]` table (the same settings the tower layer takes).
pub(crate) type ProviderSummary = SummarySettings;

/// The summary settings of every provider that has a `[providers.summary]` table, or is the
/// ChatGPT Codex backend (`auth = "chatgpt"`): that backend refuses `max_output_tokens` and
/// wants a stream, so its summary requests carry no output limit and are streamed, whatever
/// the table says.
pub(crate) fn summary_settings(config: &Config) -> Vec<(String, SummarySettings)> {
    config
        .providers
        .iter()
        .filter_map(|p| {
            let mut s = p.summary.clone();
            if p.auth == AuthScheme::Chatgpt {
                let s = s.get_or_insert_with(SummarySettings::default);
                s.max_output_tokens = 0;
                s.stream = Some(true);
            }
            s.map(|s| (p.name.clone(), s))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn table_is_read_and_unknown_keys_are_refused() {
        let provider: crate::config::ProviderConfig = toml::from_str(
            "name = \"openai\"\nbase_url = \"http://x/v1\"\n[summary]\nmodel = \"gpt-4.1-mini\"\nparams = { temperature = 0.2 }\n",
        )
        .expect("provider");
        let s = provider.summary.expect("summary table");
        assert_eq!(s.model.as_deref(), Some("gpt-4.1-mini"));
        assert_eq!(s.max_output_tokens, 800);
        assert_eq!(s.params["temperature"], 0.2);
        let bad: Result<crate::config::ProviderConfig, _> =
            toml::from_str("name = \"o\"\nbase_url = \"http://x\"\n[summary]\ntemperature = 0.2\n");
        assert!(bad.is_err(), "sampling parameters go under `params`");
    }
}
