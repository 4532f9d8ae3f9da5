//! The fallback session id: a hash of what stays the same on every turn of a conversation.

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, SeqAccess, Visitor};
use sha2::{Digest, Sha256};

use super::lenient::{List, Object, Str, Text};

/// Domain separation, so these digests never equal a hash of the same bytes made elsewhere,
/// and a version to bump if the layout ever changes.
const DOMAIN: &[u8] = b"context-relay/session-fingerprint/v1\n";

/// 16 hex characters identifying a conversation by its stable parts, or `None` when the body
/// is not a JSON object or has neither a system prompt nor a user message.
///
/// The parts (everything else, notably the growing history, is ignored):
/// - **model**: top-level `model` (empty when absent, as in Gemini, whose model is in the path);
/// - **system prompt**: `instructions` (Responses), else top-level `system` (Anthropic), else
///   `systemInstruction` (Gemini), else the first `system`/`developer` entry of `messages`
///   (Chat) or `input` (Responses); text parts are joined with `\n`;
/// - **first user message**: the text of the first `user` entry of `messages`, `input` (a string
///   `input` is one) or `contents`. A user entry whose text parts are all tagged context
///   blocks (each, trimmed, starts with `<` and a letter and ends with `>`, like the
///   `<environment_context>` message Codex sends before every prompt) is passed over in
///   favour of the next user entry, since it is the same for every conversation started in
///   one directory; when all user entries are such blocks, the first one is used. (Claude
///   Code's first message mixes a `<system-reminder>` part with the prompt: it is not passed
///   over.)
/// - **tool names**: `name` of each `tools` entry (else `function.name`, else each
///   `functionDeclarations[].name`, else its `type`), sorted and deduplicated.
///
/// Byte layout hashed with SHA-256: the ASCII line `context-relay/session-fingerprint/v1\n`;
/// then model, system prompt and first user message, each as an 8-byte big-endian length
/// followed by its UTF-8 bytes; then the number of tool names as 8 bytes big-endian, and each
/// name as length + bytes. The id is the first 8 digest bytes in lower-case hex.
///
/// ```
/// use context_relay_core::session::fingerprint;
///
/// let first = br#"{"model":"gpt-5","messages":[{"role":"user","content":"fix the bug"}]}"#;
/// let later = br#"{"model":"gpt-5","messages":[{"role":"user","content":"fix the bug"},
///     {"role":"assistant","content":"done"},{"role":"user","content":"thanks"}]}"#;
/// assert_eq!(fingerprint(first), fingerprint(later));
/// assert_eq!(fingerprint(first).unwrap().len(), 16);
/// ```
pub fn fingerprint(body: &[u8]) -> Option<String> {
    let parsed: Body<'_> = serde_json::from_slice(body).ok()?;
    let system = [
        &parsed.instructions,
        &parsed.system,
        &parsed.system_instruction,
        &parsed.messages.system,
        &parsed.input.system,
    ]
    .into_iter()
    .find(|t| !t.is_empty())
    .map(Text::joined)
    .unwrap_or_default();
    let user = [&parsed.messages, &parsed.input, &parsed.contents]
        .into_iter()
        .find_map(FirstEntries::user)
        .map(Text::joined)
        .unwrap_or_default();
    if system.is_empty() && user.is_empty() {
        return None;
    }
    let mut tools: Vec<&str> = parsed
        .tools
        .0
        .iter()
        .filter_map(|t| t.0.as_ref())
        .flat_map(Tool::names)
        .collect();
    tools.sort_unstable();
    tools.dedup();

    let mut hasher = Sha256::new();
    hasher.update(DOMAIN);
    let mut field = |bytes: &[u8]| {
        hasher.update((bytes.len() as u64).to_be_bytes());
        hasher.update(bytes);
    };
    field(parsed.model.as_deref().unwrap_or_default().as_bytes());
    field(system.as_bytes());
    field(user.as_bytes());
    hasher.update((tools.len() as u64).to_be_bytes());
    for name in tools {
        hasher.update((name.len() as u64).to_be_bytes());
        hasher.update(name.as_bytes());
    }
    Some(super::hex16(&hasher.finalize()))
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Body<'a> {
    #[serde(borrow)]
    model: Str<'a>,
    #[serde(borrow)]
    instructions: Text<'a>,
    #[serde(borrow)]
    system: Text<'a>,
    #[serde(borrow, rename = "systemInstruction", alias = "system_instruction")]
    system_instruction: Text<'a>,
    #[serde(borrow)]
    messages: FirstEntries<'a>,
    #[serde(borrow)]
    input: FirstEntries<'a>,
    #[serde(borrow)]
    contents: FirstEntries<'a>,
    #[serde(borrow)]
    tools: List<Object<Tool<'a>>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Entry<'a> {
    #[serde(borrow)]
    role: Str<'a>,
    #[serde(borrow)]
    content: Text<'a>,
    #[serde(borrow)]
    parts: Text<'a>,
}

impl<'a> Entry<'a> {
    fn text(self) -> Text<'a> {
        let mut text = self.content;
        text.0.extend(self.parts.0);
        text
    }
}

/// The first system/developer entry and the first user entries of a conversation array; the
/// rest of the array is skipped without being decoded once they are found.
#[derive(Default)]
struct FirstEntries<'a> {
    system: Text<'a>,
    first_user: Option<Text<'a>>,
    first_plain_user: Option<Text<'a>>,
}

impl<'a> FirstEntries<'a> {
    fn user(&self) -> Option<&Text<'a>> {
        self.first_plain_user.as_ref().or(self.first_user.as_ref())
    }

    fn done(&self) -> bool {
        !self.system.is_empty() && self.first_plain_user.is_some()
    }

    fn push(&mut self, entry: Entry<'a>) {
        match entry.role.as_deref() {
            Some("system" | "developer") if self.system.is_empty() => self.system = entry.text(),
            Some("user") if self.first_plain_user.is_none() => {
                let text = entry.text();
                if is_context_block(&text) {
                    self.first_user.get_or_insert(text);
                } else {
                    self.first_plain_user = Some(text);
                }
            }
            _ => {}
        }
    }
}

fn is_context_block(text: &Text<'_>) -> bool {
    let mut parts = text
        .0
        .iter()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .peekable();
    parts.peek().is_some()
        && parts.all(|p| {
            let tagged = p.strip_prefix('<').and_then(|rest| rest.chars().next());
            tagged.is_some_and(|c| c.is_ascii_alphabetic()) && p.ends_with('>')
        })
}

impl<'de: 'a, 'a> Deserialize<'de> for FirstEntries<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = FirstEntries<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            // A Responses `input` may be a bare string: the user's message.
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                v: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(FirstEntries {
                    first_plain_user: Some(Text(vec![v.into()])),
                    ..FirstEntries::default()
                })
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(FirstEntries {
                    first_plain_user: Some(Text(vec![v.to_owned().into()])),
                    ..FirstEntries::default()
                })
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut found = FirstEntries::default();
                while !found.done() {
                    match seq.next_element::<Object<Entry<'a>>>()? {
                        Some(Object(Some(entry))) => found.push(entry),
                        Some(Object(None)) => {}
                        None => return Ok(found),
                    }
                }
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(found)
            }
            ignore_other_values!(map);
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Tool<'a> {
    #[serde(borrow)]
    name: Str<'a>,
    #[serde(borrow, rename = "type")]
    kind: Str<'a>,
    #[serde(borrow)]
    function: Object<Named<'a>>,
    #[serde(
        borrow,
        rename = "functionDeclarations",
        alias = "function_declarations"
    )]
    function_declarations: List<Object<Named<'a>>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Named<'a> {
    #[serde(borrow)]
    name: Str<'a>,
}

impl Tool<'_> {
    fn names(&self) -> Vec<&str> {
        if let Some(name) = self.name.as_deref() {
            return vec![name];
        }
        if let Some(name) = self.function.0.as_ref().and_then(|f| f.name.as_deref()) {
            return vec![name];
        }
        let declared: Vec<&str> = self
            .function_declarations
            .0
            .iter()
            .filter_map(|d| d.0.as_ref()?.name.as_deref())
            .collect();
        if !declared.is_empty() {
            return declared;
        }
        self.kind.as_deref().into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(json: &str) -> Option<String> {
        fingerprint(json.as_bytes())
    }

    #[test]
    fn shapes_and_order_of_tools() {
        let a = fp(
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"b"}},{"type":"function","function":{"name":"a"}}]}"#,
        );
        let b = fp(
            r#"{"tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"model":"m"}"#,
        );
        assert_eq!(a, b);
        let c = fp(
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"a"}}]}"#,
        );
        assert_ne!(a, c);
    }

    #[test]
    fn gemini_and_responses_string_input() {
        let g = fp(
            r#"{"systemInstruction":{"parts":[{"text":"be brief"}]},"contents":[{"role":"user","parts":[{"text":"hi"}]},{"role":"model","parts":[{"text":"yo"}]}],"tools":[{"functionDeclarations":[{"name":"f"},{"name":"e"}]}]}"#,
        );
        let g2 = fp(
            r#"{"systemInstruction":{"parts":[{"text":"be brief"}]},"contents":[{"role":"user","parts":[{"text":"hi"}]}],"tools":[{"functionDeclarations":[{"name":"e"},{"name":"f"}]}]}"#,
        );
        assert!(g.is_some());
        assert_eq!(g, g2);
        let r = fp(r#"{"model":"m","instructions":"be brief","input":"hi"}"#);
        let r2 = fp(
            r#"{"model":"m","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]},{"type":"function_call","name":"x"}]}"#,
        );
        assert_eq!(r, r2);
    }

    #[test]
    fn context_blocks_are_passed_over() {
        let env = r#"{"role":"user","content":[{"type":"input_text","text":"<environment_context>\n<cwd>/w</cwd>\n</environment_context>"}]}"#;
        let a = fp(&format!(
            r#"{{"model":"m","input":[{env},{{"role":"user","content":"task one"}}]}}"#
        ));
        let b = fp(&format!(
            r#"{{"model":"m","input":[{env},{{"role":"user","content":"task two"}}]}}"#
        ));
        assert_ne!(a, b);
        let only_env = fp(&format!(r#"{{"model":"m","input":[{env}]}}"#));
        assert!(only_env.is_some());
    }

    #[test]
    fn no_conversation_no_fingerprint() {
        assert_eq!(fp(r#"{"model":"m"}"#), None);
        assert_eq!(fp("[]"), None);
        assert_eq!(fp("not json"), None);
        assert_eq!(
            fp(r#"{"model":"m","messages":5,"input":{"role":"user"}}"#),
            None
        );
    }

    #[test]
    fn fields_do_not_run_together() {
        // Without length prefixes these two would hash the same bytes.
        let a = fp(r#"{"model":"ab","messages":[{"role":"user","content":"c"}]}"#);
        let b = fp(r#"{"model":"a","messages":[{"role":"user","content":"bc"}]}"#);
        assert_ne!(a, b);
    }
}
