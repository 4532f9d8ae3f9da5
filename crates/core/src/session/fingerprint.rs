//! The fallback session id: a hash of what stays the same on every turn of a conversation,
//! read from the start of the body only.

use std::borrow::Cow;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::lenient::{Object, Str, Text};
use crate::json::{Items, Kind, Members, Span};

/// Domain separation, so these digests never equal a hash of the same bytes made elsewhere,
/// and the layout version (v1 also hashed the sorted tool names, which sit after the history).
const DOMAIN: &[u8] = b"context-relay/session-fingerprint/v2\n";

/// 16 hex characters identifying a conversation by its stable parts, or `None` when the body
/// does not start as a JSON object or has neither a system prompt nor a user message.
///
/// Only a prefix of the body is read, so the cost does not grow with the history: the
/// top-level members are read in order up to the conversation array (`messages`, `input` or
/// `contents`), and that array up to its first user entry that is not a context block.
/// Nothing after that is read, nor validated: a body malformed further on still gets its
/// fingerprint (the provider refuses it). An empty conversation array (some clients send
/// `messages: []` next to a Responses `input`) is passed over like any other member.
///
/// The parts:
/// - **model**: the top-level `model` string, if it comes before the conversation array
///   (empty otherwise, as in Gemini, whose model is in the path);
/// - **system prompt**: the top-level `instructions` (Responses), `system` (Anthropic) and
///   `systemInstruction` / `system_instruction` (Gemini) that come before the conversation
///   array, in any order among themselves (and the last one when a key is repeated); then the
///   `system` and `developer` entries of the array before its first `user` entry;
/// - **first user message**: the first `user` entry of the array, passing over entries whose
///   text parts are all tagged context blocks (each, trimmed, starts with `<` and a letter and
///   ends with `>`, like the `<environment_context>` message Codex sends before every prompt,
///   which is the same for every conversation started in one directory). When every user
///   entry is such a block, the array is read to its end and the first one is used. Claude
///   Code's first message mixes a `<system-reminder>` part with the prompt: it counts. A
///   string conversation (a Responses `input` string) is the user message.
///
/// Text is a string, or the `text` / `content` / `parts` of part objects and arrays (images,
/// tool inputs and cache markers are skipped), parts joined with `\n`. Members of unexpected
/// types count as absent.
///
/// What real clients send first decides what counts: the OpenAI SDKs (`model, messages` or
/// `model, input, instructions`) give model, the in-array system entries and the first ask;
/// Codex (`model, …, input`) gives model, its developer entries and the first prompt after
/// `<environment_context>`; Claude Code (`model, messages, system, tools, …`) gives model and
/// its first message, not the system prompt; the Anthropic SDK (`max_tokens, messages,
/// model, system`) gives the first message only. Consequences:
/// - two conversations of one tenant collide when these parts are equal: the same first ask
///   to the same model from Claude Code (whose first message carries the date, so on the same
///   day), or the same first ask from the Anthropic SDK whatever the model and system prompt.
///   Tenants never collide with each other (handoffs are keyed by tenant too);
/// - a client that reorders its keys between turns keeps its fingerprint as long as the same
///   keys stay before the conversation array; moving `model` or a system key across it, or
///   changing the earlier entries of the history, starts a new session (a pending handoff
///   is then not found);
/// - ids differ from those of v1 (which also hashed the sorted tool names), so a session
///   identified by fingerprint alone starts over once when the relay is upgraded.
///
/// Byte layout hashed with SHA-256: the ASCII line `context-relay/session-fingerprint/v2\n`;
/// then model, `instructions`, `system` and `systemInstruction`, each as an 8-byte
/// big-endian length followed by its UTF-8 bytes; the number of in-array system entries as 8
/// bytes big-endian and each as length + bytes; the first user message as length + bytes.
/// The id is the first 8 digest bytes in lower-case hex.
///
/// ```
/// use context_relay_core::session::fingerprint;
///
/// let first = br#"{"model":"gpt-5","messages":[{"role":"user","content":"fix the bug"}]}"#;
/// let later = br#"{"model":"gpt-5","messages":[{"role":"user","content":"fix the bug"},
///     {"role":"assistant","content":"done"},{"role":"user","content":"thanks"}],"tools":[]}"#;
/// assert_eq!(fingerprint(first), fingerprint(later));
/// assert_eq!(fingerprint(first).unwrap().len(), 16);
/// // Nothing after the first user entry is read.
/// let cut = br#"{"model":"gpt-5","messages":[{"role":"user","content":"fix the bug"}, oops"#;
/// assert_eq!(fingerprint(first), fingerprint(cut));
/// ```
pub fn fingerprint(body: &[u8]) -> Option<String> {
    let parts = Parts::read(body)?;
    let user = parts.user.as_ref().map(Text::joined).unwrap_or_default();
    let empty = |t: &Text<'_>| t.is_empty();
    if user.is_empty()
        && [
            &parts.instructions,
            &parts.system,
            &parts.system_instruction,
        ]
        .into_iter()
        .all(empty)
        && parts.entries.iter().all(empty)
    {
        return None;
    }

    let mut hasher = Sha256::new();
    hasher.update(DOMAIN);
    let mut field = |bytes: &[u8]| {
        hasher.update((bytes.len() as u64).to_be_bytes());
        hasher.update(bytes);
    };
    field(parts.model.as_deref().unwrap_or_default().as_bytes());
    field(parts.instructions.joined().as_bytes());
    field(parts.system.joined().as_bytes());
    field(parts.system_instruction.joined().as_bytes());
    hasher.update((parts.entries.len() as u64).to_be_bytes());
    for entry in &parts.entries {
        let text = entry.joined();
        hasher.update((text.len() as u64).to_be_bytes());
        hasher.update(text.as_bytes());
    }
    hasher.update((user.len() as u64).to_be_bytes());
    hasher.update(user.as_bytes());
    Some(super::hex16(&hasher.finalize()))
}

/// The parts of a fingerprint, read from the start of a body.
#[derive(Default)]
struct Parts<'a> {
    model: Option<Cow<'a, str>>,
    instructions: Text<'a>,
    system: Text<'a>,
    system_instruction: Text<'a>,
    /// The `system` / `developer` entries of the conversation before its first user entry.
    entries: Vec<Text<'a>>,
    user: Option<Text<'a>>,
}

impl<'a> Parts<'a> {
    /// `None` when what is read is not well-formed JSON (or nests deeper than `serde_json`
    /// reads), or the body is not an object.
    fn read(body: &'a [u8]) -> Option<Self> {
        let mut parts = Parts::default();
        let mut members = Members::root(body).ok()?;
        while let Some(key) = members.next() {
            let key = key.ok()?;
            let slot = match key.key.as_ref() {
                "model" => {
                    let span = members.value(&key).ok()?;
                    parts.model = value::<Str<'a>>(body, span)?.0;
                    continue;
                }
                "instructions" => &mut parts.instructions,
                "system" => &mut parts.system,
                "systemInstruction" | "system_instruction" => &mut parts.system_instruction,
                "messages" | "input" | "contents" => match Kind::at(body, key.value_start) {
                    // Some clients send Chat-style `messages: []` next to a Responses
                    // `input`: an empty array holds no conversation.
                    Some(Kind::Array) if is_empty_array(body, key.value_start) => continue,
                    Some(Kind::Array) => {
                        parts.conversation(body, members.items(&key).ok()?)?;
                        return Some(parts);
                    }
                    Some(Kind::String) => {
                        parts.user = Some(value(body, members.value(&key).ok()?)?);
                        return Some(parts);
                    }
                    // Not a conversation: skipped like any other member.
                    _ => continue,
                },
                _ => continue,
            };
            *slot = value(body, members.value(&key).ok()?)?;
        }
        Some(parts)
    }

    /// Reads the conversation array up to its first user entry that is not a context block.
    fn conversation(&mut self, body: &'a [u8], items: Items<'a>) -> Option<()> {
        let mut context = None;
        for item in items {
            let Object(entry) = value::<Object<Entry<'a>>>(body, item.ok()?)?;
            let Some(entry) = entry else { continue };
            match entry.role.as_deref() {
                Some("system" | "developer") if context.is_none() => {
                    self.entries.push(entry.text());
                }
                Some("user") => {
                    let text = entry.text();
                    if !is_context_block(&text) {
                        self.user = Some(text);
                        return Some(());
                    }
                    context.get_or_insert(text);
                }
                _ => {}
            }
        }
        self.user = context;
        Some(())
    }
}

/// Whether the array opening at `open` closes right away (the walk validates it later).
fn is_empty_array(body: &[u8], open: usize) -> bool {
    let rest = body.get(open + 1..).unwrap_or_default();
    rest.iter()
        .find(|b| !matches!(b, b' ' | b'\n' | b'\r' | b'\t'))
        == Some(&b']')
}

/// The value at `span` (validated by the walk) read as `T`.
fn value<'a, T: Deserialize<'a>>(body: &'a [u8], span: Span) -> Option<T> {
    serde_json::from_slice(body.get(span)?).ok()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(json: &str) -> Option<String> {
        fingerprint(json.as_bytes())
    }

    /// v1 hashed the sorted tool names; v2 does not read them (they follow the history).
    #[test]
    fn tools_do_not_count_and_keys_before_the_history_may_move() {
        let a = fp(
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"b"}},{"type":"function","function":{"name":"a"}}]}"#,
        );
        let b = fp(
            r#"{"tools":[{"type":"function","function":{"name":"a"}}],"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#,
        );
        assert!(a.is_some());
        assert_eq!(a, b);
        // `model` after the history is not read.
        let c = fp(r#"{"messages":[{"role":"user","content":"hi"}],"model":"m"}"#);
        assert_ne!(a, c);
        assert_eq!(
            c,
            fp(r#"{"messages":[{"role":"user","content":"hi"}],"model":"x"}"#)
        );
    }

    #[test]
    fn keys_before_the_history_count_in_any_order() {
        let keys = [
            r#""model":"m""#,
            r#""instructions":"be brief""#,
            r#""system":[{"type":"text","text":"sys"}]"#,
            r#""systemInstruction":{"parts":[{"text":"g"}]}"#,
        ];
        let body = |order: &[usize]| {
            let head: Vec<&str> = order.iter().map(|&i| keys[i]).collect();
            fp(&format!(
                r#"{{{},"messages":[{{"role":"user","content":"hi"}}],"tools":[]}}"#,
                head.join(",")
            ))
        };
        let reference = body(&[0, 1, 2, 3]);
        for order in [[3, 2, 1, 0], [1, 3, 0, 2], [2, 0, 3, 1]] {
            assert_eq!(body(&order), reference);
        }
        // Each of them counts.
        for drop in 0..4 {
            let rest: Vec<usize> = (0..4).filter(|&i| i != drop).collect();
            assert_ne!(body(&rest), reference);
        }
        // A repeated key: the last one counts.
        let twice = fp(
            r#"{"model":"x","model":"m","instructions":"be brief","system":[{"type":"text","text":"sys"}],"systemInstruction":{"parts":[{"text":"g"}]},"messages":[{"role":"user","content":"hi"}]}"#,
        );
        assert_eq!(twice, reference);
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
    fn an_empty_conversation_array_is_passed_over() {
        let input = r#""input":[{"role":"user","content":"hi"}]"#;
        let alone = fp(&format!(r#"{{"model":"m",{input}}}"#));
        assert!(alone.is_some());
        assert_eq!(
            fp(&format!(r#"{{"model":"m","messages":[ ],{input}}}"#)),
            alone
        );
        assert_eq!(fp(r#"{"model":"m","messages":[]}"#), None);
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
