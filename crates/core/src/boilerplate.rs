//! Client boilerplate: the context real coding clients resend on every turn, which the next
//! account receives again from the client anyway, so a summary should not spend its budget on
//! it.
//!
//! Boilerplate is every `system` / `developer` entry, plus user text that is really client
//! context. Codex sends its `<environment_context>`, `# AGENTS.md instructions for …` (with an
//! `<INSTRUCTIONS>` block), `<user_instructions>`, `<permissions instructions>` and skills lists
//! as user or developer messages; Claude Code sends `<system-reminder>` blocks, alone or as parts
//! of the user's message. A text part is boilerplate when it starts (after leading whitespace)
//! with one of [`CONTEXT_MARKERS`].
//!
//! ```
//! use context_relay_core::boilerplate::is_client_context;
//! assert!(is_client_context("  <environment_context>\n  <cwd>/w</cwd>\n</environment_context>"));
//! assert!(is_client_context("<system-reminder>\nToday's date is …\n</system-reminder>"));
//! assert!(!is_client_context("Please rename <environment_context> to <env>"));
//! ```

/// Openings of the client context real clients send as user text.
pub const CONTEXT_MARKERS: [&str; 11] = [
    "<environment_context>",
    "# AGENTS.md instructions",
    "<INSTRUCTIONS>",
    "<user_instructions>",
    "<permissions instructions>",
    "<skills_instructions>",
    "<system-reminder>",
    "<collaboration_mode>",
    "<apps_instructions>",
    "<user_shell_command>",
    "<turn_aborted>",
];

/// Whether a user text part is client context rather than the user's own words.
pub fn is_client_context(text: &str) -> bool {
    let t = text.trim_start();
    CONTEXT_MARKERS.iter().any(|m| t.starts_with(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers() {
        for m in CONTEXT_MARKERS {
            assert!(is_client_context(&format!("\n{m} tail")), "{m}");
        }
        assert!(!is_client_context("<b>bold</b> please"));
        assert!(!is_client_context("# Heading of my own"));
        assert!(!is_client_context(""));
    }
}
