//! The counts as the APIs spell them, merged across the events of a stream.

use serde_json::Value;

use super::Usage;

/// Every count any API reports, as sent; a later report of a field replaces an earlier one.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Raw {
    // Chat Completions.
    pub(super) prompt: Option<u64>,
    pub(super) completion: Option<u64>,
    // Chat Completions and Responses details.
    pub(super) cached: Option<u64>,
    pub(super) reasoning: Option<u64>,
    // Responses and Anthropic.
    pub(super) input: Option<u64>,
    pub(super) output: Option<u64>,
    // Anthropic.
    pub(super) cache_read: Option<u64>,
    pub(super) cache_creation: Option<u64>,
    // Gemini.
    pub(super) prompt_count: Option<u64>,
    pub(super) candidates_count: Option<u64>,
    pub(super) cached_count: Option<u64>,
    pub(super) thoughts_count: Option<u64>,
}

impl Raw {
    /// The counts of one usage object (of any API).
    pub(super) fn of(v: &Value) -> Self {
        let n = |k: &str| v.get(k).and_then(Value::as_u64);
        let nested =
            |outer: &str, k: &str| v.get(outer).and_then(|o| o.get(k)).and_then(Value::as_u64);
        Self {
            prompt: n("prompt_tokens"),
            completion: n("completion_tokens"),
            cached: nested("prompt_tokens_details", "cached_tokens")
                .or_else(|| nested("input_tokens_details", "cached_tokens")),
            reasoning: nested("completion_tokens_details", "reasoning_tokens")
                .or_else(|| nested("output_tokens_details", "reasoning_tokens")),
            input: n("input_tokens"),
            output: n("output_tokens"),
            cache_read: n("cache_read_input_tokens"),
            cache_creation: n("cache_creation_input_tokens"),
            prompt_count: n("promptTokenCount"),
            candidates_count: n("candidatesTokenCount"),
            cached_count: n("cachedContentTokenCount"),
            thoughts_count: n("thoughtsTokenCount"),
        }
    }

    /// Takes every field `newer` reports.
    pub(super) fn merge(&mut self, newer: &Raw) {
        let fields = [
            (&mut self.prompt, newer.prompt),
            (&mut self.completion, newer.completion),
            (&mut self.cached, newer.cached),
            (&mut self.reasoning, newer.reasoning),
            (&mut self.input, newer.input),
            (&mut self.output, newer.output),
            (&mut self.cache_read, newer.cache_read),
            (&mut self.cache_creation, newer.cache_creation),
            (&mut self.prompt_count, newer.prompt_count),
            (&mut self.candidates_count, newer.candidates_count),
            (&mut self.cached_count, newer.cached_count),
            (&mut self.thoughts_count, newer.thoughts_count),
        ];
        for (mine, theirs) in fields {
            if theirs.is_some() {
                *mine = theirs;
            }
        }
    }

    /// The normalised usage; `None` when nothing was reported.
    pub(super) fn usage(&self) -> Option<Usage> {
        if *self == Raw::default() {
            return None;
        }
        let z = |v: Option<u64>| v.unwrap_or(0);
        let (cache_read, cache_creation) = (z(self.cache_read), z(self.cache_creation));
        // Anthropic's `input_tokens` leaves the cache out; Responses' counts it.
        let anthropic = self.cache_read.is_some() || self.cache_creation.is_some();
        let input = if anthropic {
            z(self.input)
                .saturating_add(cache_read)
                .saturating_add(cache_creation)
        } else {
            z(self.input)
        };
        let thoughts = z(self.thoughts_count);
        Some(Usage {
            input: z(self.prompt)
                .saturating_add(input)
                .saturating_add(z(self.prompt_count)),
            cached_input: z(self.cached)
                .saturating_add(cache_read)
                .saturating_add(z(self.cached_count)),
            cache_write_input: cache_creation,
            output: z(self.completion)
                .saturating_add(z(self.output))
                .saturating_add(z(self.candidates_count))
                .saturating_add(thoughts),
            reasoning_output: z(self.reasoning).saturating_add(thoughts),
        })
    }
}
