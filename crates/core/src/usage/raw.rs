//! The counts as the APIs spell them, merged across the events of a stream, and the places in
//! a body or an event where a usage object sits.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

use super::Usage;

/// Every count any API reports, as sent; a later report of a field replaces an earlier one.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Raw {
    // Chat Completions.
    prompt: Option<u64>,
    completion: Option<u64>,
    // Chat Completions and Responses details.
    cached: Option<u64>,
    reasoning: Option<u64>,
    // Responses and Anthropic.
    input: Option<u64>,
    output: Option<u64>,
    // Anthropic.
    cache_read: Option<u64>,
    cache_creation: Option<u64>,
    // Gemini.
    prompt_count: Option<u64>,
    candidates_count: Option<u64>,
    cached_count: Option<u64>,
    thoughts_count: Option<u64>,
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
    pub(super) fn merge(&mut self, newer: Raw) {
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

/// Where usage sits in a body or an event: `usage` (Chat, Responses and Anthropic bodies,
/// Chat's last chunk, Anthropic's `message_delta`), `message.usage` (Anthropic's
/// `message_start`), `response.usage` (Responses stream events), `usageMetadata` (Gemini).
/// Every other member is skipped without being decoded.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Carrier {
    #[serde(default)]
    usage: Counts,
    #[serde(default, rename = "usageMetadata", alias = "usage_metadata")]
    usage_metadata: Counts,
    #[serde(default)]
    message: Nested,
    #[serde(default)]
    response: Nested,
}

impl Carrier {
    /// Merges every usage object this carrier holds into `seen`.
    pub(super) fn merge_into(self, seen: &mut Raw) {
        for counts in [
            self.message.0,
            self.response.0,
            self.usage,
            self.usage_metadata,
        ] {
            if let Counts(Some(raw)) = counts {
                seen.merge(raw);
            }
        }
    }
}

/// The `usage` member of an object, or nothing when the value is no object (an event whose
/// `message` is a string must not fail the whole event).
#[derive(Debug, Default)]
pub(super) struct Nested(Counts);

impl<'de> Deserialize<'de> for Nested {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NestedVisitor)
    }
}

struct NestedVisitor;

impl<'de> Visitor<'de> for NestedVisitor {
    type Value = Nested;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Nested, A::Error> {
        let mut usage = Counts::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if &*key == "usage" {
                usage = map.next_value::<Counts>()?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(Nested(usage))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Nested, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Nested::default())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Nested, E> {
        Ok(Nested::default())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Nested, E> {
        Ok(Nested::default())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Nested, E> {
        Ok(Nested::default())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Nested, E> {
        Ok(Nested::default())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Nested, E> {
        Ok(Nested::default())
    }

    fn visit_unit<E: de::Error>(self) -> Result<Nested, E> {
        Ok(Nested::default())
    }
}

/// A usage object read straight into its counts, with no [`Value`] built: `Some` for an
/// object (what [`Raw::of`] reads from one, member for member: the last of a repeated member
/// counts, a member that is no unsigned integer is not reported), `None` for any other value.
#[derive(Debug, Default)]
pub(super) struct Counts(Option<Raw>);

#[cfg(test)]
impl Counts {
    /// The counts read.
    pub(super) fn raw(&self) -> Option<Raw> {
        self.0
    }
}

impl<'de> Deserialize<'de> for Counts {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CountsVisitor)
    }
}

struct CountsVisitor;

impl<'de> Visitor<'de> for CountsVisitor {
    type Value = Counts;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Counts, A::Error> {
        let mut raw = Raw::default();
        // Chat's details win over Responses' whatever their order, as in `Raw::of`.
        let (mut prompt_details, mut input_details) = (None, None);
        let (mut completion_details, mut output_details) = (None, None);
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let count = match &*key.0 {
                "prompt_tokens" => &mut raw.prompt,
                "completion_tokens" => &mut raw.completion,
                "input_tokens" => &mut raw.input,
                "output_tokens" => &mut raw.output,
                "cache_read_input_tokens" => &mut raw.cache_read,
                "cache_creation_input_tokens" => &mut raw.cache_creation,
                "promptTokenCount" => &mut raw.prompt_count,
                "candidatesTokenCount" => &mut raw.candidates_count,
                "cachedContentTokenCount" => &mut raw.cached_count,
                "thoughtsTokenCount" => &mut raw.thoughts_count,
                "prompt_tokens_details" => &mut prompt_details,
                "input_tokens_details" => &mut input_details,
                "completion_tokens_details" => &mut completion_details,
                "output_tokens_details" => &mut output_details,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *count = if key.0.ends_with("_details") {
                let member = if key.0.starts_with("prompt") || key.0.starts_with("input") {
                    "cached_tokens"
                } else {
                    "reasoning_tokens"
                };
                map.next_value_seed(Detail(member))?
            } else {
                map.next_value::<Count>()?.0
            };
        }
        raw.cached = prompt_details.or(input_details);
        raw.reasoning = completion_details.or(output_details);
        Ok(Counts(Some(raw)))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Counts, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Counts(None))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Counts, E> {
        Ok(Counts(None))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Counts, E> {
        Ok(Counts(None))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Counts, E> {
        Ok(Counts(None))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Counts, E> {
        Ok(Counts(None))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Counts, E> {
        Ok(Counts(None))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Counts, E> {
        Ok(Counts(None))
    }
}

/// One count: an unsigned integer, or not reported (as [`Value::as_u64`] reads it).
struct Count(Option<u64>);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CountVisitor)
    }
}

struct CountVisitor;

impl<'de> Visitor<'de> for CountVisitor {
    type Value = Count;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Count, E> {
        Ok(Count(Some(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Count, E> {
        Ok(Count(u64::try_from(v).ok()))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Count, E> {
        Ok(Count(None))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Count, E> {
        Ok(Count(None))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Count, E> {
        Ok(Count(None))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Count, E> {
        Ok(Count(None))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Count, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Count(None))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Count(None))
    }
}

/// The count named `.0` inside a details object; nothing when the value is no object.
struct Detail(&'static str);

impl<'de> de::DeserializeSeed<'de> for Detail {
    type Value = Option<u64>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<u64>, D::Error> {
        let counts = deserializer.deserialize_any(DetailVisitor(self.0))?;
        Ok(counts)
    }
}

struct DetailVisitor(&'static str);

impl<'de> Visitor<'de> for DetailVisitor {
    type Value = Option<u64>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<u64>, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if key.0 == self.0 {
                found = map.next_value::<Count>()?.0;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Option<u64>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Option<u64>, E> {
        Ok(None)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Option<u64>, E> {
        Ok(None)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Option<u64>, E> {
        Ok(None)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Option<u64>, E> {
        Ok(None)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Option<u64>, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<u64>, E> {
        Ok(None)
    }
}

/// A member name, borrowed from the input unless it holds an escape (serde's own `Cow` always
/// copies).
struct Key<'de>(Cow<'de, str>);

impl std::ops::Deref for Key<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(v.to_owned())))
    }
}
