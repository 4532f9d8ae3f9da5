//! The fallback session id: a hash of what stays the same on every turn of a conversation,
//! read from the start of the body only.

use std::borrow::Cow;
use std::ops::Range;

use sha2::{Digest, Sha256};
use smallvec::SmallVec;

use super::found::Hex16;
use crate::json::{self, Items, Kind, Members, Span};
use answer::answer_follows;

/// Domain separation, so these digests never equal a hash of the same bytes made elsewhere,
/// and the layout version (v1 also hashed the sorted tool names, which sit after the history;
/// v2 hashed the decoded text).
const DOMAIN: &[u8] = b"context-relay/session-fingerprint/v3\n";

/// How deep text is followed into nested arrays and objects; a body nesting deeper there has
/// no fingerprint.
const MAX_DEPTH: usize = 128;

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
/// tool inputs and cache markers are skipped). Each text is read in one pass, each byte once,
/// whatever its nesting; a text nested in more than 128 arrays and objects, or a body nesting
/// deeper than [`json::MAX_NESTING`] anywhere in what is read, has no fingerprint. Members of unexpected types count as absent;
/// in an entry, a repeated `role`, `content` or `parts` counts once, the last one.
///
/// **Strings are hashed as sent**, between their quotes, escapes included, and not decoded:
/// a client sends the same first messages in the same bytes on every turn, and reading them
/// without decoding is most of what keeps this cheap. Two spellings of one text (`é` and
/// `\u00e9`, `/` and `\/`) therefore give different ids. Decoding happens only where the
/// characters matter: a `role` holding an escape, and a user entry that might be a context
/// block (one whose first non-space character is `<`, an escape or not ASCII).
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
/// - ids differ from those of v2 (which hashed the decoded text) and v1 (which also hashed
///   the sorted tool names), so a session identified by fingerprint alone starts over once
///   when the relay is upgraded.
///
/// Byte layout hashed with SHA-256: the ASCII line `context-relay/session-fingerprint/v3\n`;
/// then model, `instructions`, `system` and `systemInstruction`, each as an 8-byte
/// big-endian length followed by its bytes; the number of in-array system entries as 8
/// bytes big-endian and each as length + bytes; the first user message as length + bytes.
/// The bytes of a text are its strings' contents as sent, joined by one newline byte (which
/// a JSON string never holds raw). The id is the first 8 digest bytes in lower-case hex.
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
    fingerprint_hex(body).map(|hex| hex.as_str().to_owned())
}

/// [`fingerprint`], kept inline until a caller keeps it.
pub(super) fn fingerprint_hex(body: &[u8]) -> Option<Hex16> {
    let parts = Parts::read(body)?;
    let user = parts.user.unwrap_or_default();
    if user.is_empty()
        && [
            &parts.instructions,
            &parts.system,
            &parts.system_instruction,
        ]
        .into_iter()
        .all(Text::is_empty)
        && parts.entries.iter().all(Text::is_empty)
    {
        return None;
    }

    let mut hasher = Sha256::new();
    hasher.update(DOMAIN);
    let model = parts.model.unwrap_or_default();
    hasher.update((model.len() as u64).to_be_bytes());
    hasher.update(body.get(model).unwrap_or_default());
    parts.instructions.hash(&mut hasher, body);
    parts.system.hash(&mut hasher, body);
    parts.system_instruction.hash(&mut hasher, body);
    hasher.update((parts.entries.len() as u64).to_be_bytes());
    for entry in &parts.entries {
        entry.hash(&mut hasher, body);
    }
    user.hash(&mut hasher, body);
    Some(Hex16::of(&hasher.finalize()))
}

/// Domain separation of [`opening`] digests.
const OPENING_DOMAIN: &[u8] = b"context-relay/conversation-opening/v1\n";

/// The opening of a conversation: what tells apart two conversations that share a session
/// header (Claude Code's sub-agents send their parent's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opening {
    /// A digest of the conversation's first ask: the text parts of its first user message
    /// that are the user's own words, not client context (tagged context blocks, and the
    /// boilerplate of [`crate::boilerplate`]: Codex's `<environment_context>` and
    /// `# AGENTS.md instructions`, Claude Code's `<system-reminder>`…), strings as sent.
    /// Neither the model nor the system prompt count (a model switch rewrites `model`).
    pub digest: u64,
    /// Whether an answer (an assistant or `model` entry, a tool call or output: anything but
    /// the client's `user`, `system` and `developer` entries) follows that message: a request
    /// without one (the first of a conversation, such as Claude Code's, which sends a
    /// `system` entry after its first user message) has nothing to carry across a switch.
    pub continued: bool,
    /// Whether the request continues a conversation the provider keeps (a top-level
    /// `previous_response_id` or `conversation`, wherever it stands): such a request sends
    /// only its new input, so its first user message is no opening of a conversation, and it
    /// belongs to the session itself. Its digest is then that of its `instructions` (empty
    /// when it sends none; marked, see [`Opening::is_chain_digest`]), which a chain sends on
    /// every turn: what tells the handoff written at one chain's turn from another chain's
    /// of the same session (an agent and its sub-agents).
    pub chained: bool,
}

impl Opening {
    /// Whether `digest` (an [`Opening::digest`], as a handoff records it) is a chained
    /// request's: the `instructions` of a chain, not the first ask of a conversation.
    pub fn is_chain_digest(digest: u64) -> bool {
        digest & CHAIN_BIT != 0
    }
}

/// The [`Opening`] of `body`, from its start only: the top-level members up to the
/// conversation array, and that array up to its first ask (see [`Opening::digest`]; when
/// every user message is client context, the first one). `None` when the body does not start
/// as a JSON object or has no user message.
///
/// ```
/// use context_relay_core::session::opening;
///
/// let first = br#"{"messages":[{"role":"user","content":"fix the bug"}]}"#;
/// let later = br#"{"messages":[{"role":"user","content":"fix the bug"},{"role":"assistant","content":"done"}]}"#;
/// let other = br#"{"messages":[{"role":"user","content":"review the diff"}]}"#;
/// let (a, b) = (opening(first).unwrap(), opening(later).unwrap());
/// assert_eq!(a.digest, b.digest);
/// assert!(!a.continued && b.continued);
/// // Entries of the client's own after the ask do not make it continued.
/// let reminded = br#"{"messages":[{"role":"user","content":"fix the bug"},{"role":"system","content":"agents"}]}"#;
/// assert!(!opening(reminded).unwrap().continued);
/// assert_ne!(opening(other).unwrap().digest, a.digest);
/// // Client context before the ask does not count: two conversations started in one
/// // directory differ by their asks.
/// let codex = |ask: &str| format!(r##"{{"input":[
///     {{"role":"user","content":"# AGENTS.md instructions for /w\n\n<INSTRUCTIONS>…</INSTRUCTIONS>"}},
///     {{"role":"user","content":"{ask}"}}]}}"##);
/// let (x, y) = (opening(codex("fix the bug").as_bytes()), opening(codex("write docs").as_bytes()));
/// assert_ne!(x.unwrap().digest, y.unwrap().digest);
/// let chain = br#"{"input":"and now the tests","previous_response_id":"resp_1"}"#;
/// assert!(opening(chain).unwrap().chained && !a.chained);
/// ```
pub fn opening(body: &[u8]) -> Option<Opening> {
    if super::body_ids::chained(body) {
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        hasher.update(CHAIN_DOMAIN);
        if let Some(instructions) = chain_instructions(body) {
            hasher.update(body.get(instructions).unwrap_or_default());
        }
        return Some(Opening {
            digest: hasher.digest() | CHAIN_BIT,
            continued: true,
            chained: true,
        });
    }
    let parts = Parts::read_to(body, Until::Ask)?;
    let (ask, continued) = parts.ask?;
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    hasher.update(OPENING_DOMAIN);
    for (i, part) in ask.iter().enumerate() {
        if i > 0 {
            hasher.update(b"\n");
        }
        hasher.update(body.get(part.clone()).unwrap_or_default());
    }
    Some(Opening {
        digest: hasher.digest() & !CHAIN_BIT,
        continued,
        chained: false,
    })
}

/// Domain separation of a chained request's [`Opening`] digest (its `instructions`).
const CHAIN_DOMAIN: &[u8] = b"context-relay/conversation-chain/v1\n";

/// The bit set in a chained request's [`Opening::digest`] and clear in any other's: a
/// digest tells which of the two it is ([`Opening::is_chain_digest`]).
const CHAIN_BIT: u64 = 1 << 63;

/// The contents of the top-level `instructions` string of a chained request, wherever it
/// stands (the last one when repeated); `None` without one, or when the body is not an
/// object. A chained request sends only its new items, so reading all of its top level is
/// reading little.
fn chain_instructions(body: &[u8]) -> Option<Span> {
    let mut members = Members::root(body).ok()?;
    let mut found = None;
    while let Some(key) = members.next() {
        let key = key.ok()?;
        if key.key.as_ref() == "instructions" {
            let span = members.value(&key).ok()?;
            found = string_contents(body, &span).filter(|s| !s.is_empty());
        }
    }
    found
}

/// How far [`Parts::read_to`] reads the conversation array.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Until {
    /// To the first user entry that is not a context block (the fingerprint's).
    User,
    /// Further, to the first user entry holding the user's own words ([`opening`]'s).
    Ask,
}

/// The parts of a fingerprint, read from the start of a body: where their text sits in it.
#[derive(Default)]
struct Parts {
    /// The contents of the `model` string (between its quotes).
    model: Option<Span>,
    instructions: Text,
    system: Text,
    system_instruction: Text,
    /// The `system` / `developer` entries of the conversation before its first user entry
    /// (the usual one or two without an allocation).
    entries: SmallVec<[Text; 2]>,
    user: Option<Text>,
    /// With [`Until::Ask`]: the parts of the first ask, and whether entries follow it.
    ask: Option<(Vec<Span>, bool)>,
}

impl Parts {
    /// `None` when what is read is not well-formed JSON (or nests deeper than [`MAX_DEPTH`]),
    /// or the body is not an object.
    fn read(body: &[u8]) -> Option<Self> {
        Self::read_to(body, Until::User)
    }

    /// [`Parts::read`], reading the conversation array as far as `until` says.
    fn read_to(body: &[u8], until: Until) -> Option<Self> {
        let mut parts = Parts::default();
        let mut members = Members::root(body).ok()?;
        while let Some(key) = members.next() {
            let key = key.ok()?;
            let slot = match key.key.as_ref() {
                "model" => {
                    let span = members.value(&key).ok()?;
                    parts.model = string_contents(body, &span);
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
                        parts.conversation(body, members.items(&key).ok()?, until)?;
                        return Some(parts);
                    }
                    Some(Kind::String) => {
                        let text = Text::read(body, members.value(&key).ok()?)?;
                        if until == Until::Ask && !text.is_empty() {
                            parts.ask = Some((text.0.to_vec(), false));
                        }
                        parts.user = Some(text);
                        return Some(parts);
                    }
                    // Not a conversation: skipped like any other member.
                    _ => continue,
                },
                _ => continue,
            };
            *slot = Text::read(body, members.value(&key).ok()?)?;
        }
        Some(parts)
    }

    /// Reads the conversation array up to its first user entry that is not a context block
    /// (and, with [`Until::Ask`], on to its first ask).
    fn conversation(&mut self, body: &[u8], mut items: Items<'_>, until: Until) -> Option<()> {
        let mut context: Option<Text> = None;
        let mut first_user: Option<Vec<Span>> = None;
        // Whether an entry that is not the client's (an answer, a tool call or output) comes
        // after the first user entry: read on from there only until one does.
        let mut answered = false;
        while let Some(item) = items.next() {
            let span = item.ok()?;
            let Some(entry) = Entry::read(body, span)? else {
                // Not an object: no entry of the conversation.
                continue;
            };
            match entry.role {
                Role::System if context.is_none() && self.user.is_none() => {
                    self.entries.push(entry.text)
                }
                Role::User => {
                    if until == Until::Ask {
                        let own = own_words(body, &entry.text);
                        if !own.is_empty() {
                            let answered = answered || answer_follows(body, items);
                            self.ask = Some((own, answered));
                            return Some(());
                        }
                        first_user.get_or_insert(entry.text.0.to_vec());
                    }
                    if self.user.is_none() && !is_context_block(body, &entry.text) {
                        self.user = Some(entry.text);
                        if until == Until::User {
                            return Some(());
                        }
                    } else {
                        context.get_or_insert(entry.text);
                    }
                }
                Role::Other => answered |= first_user.is_some() || self.user.is_some(),
                _ => {}
            }
        }
        if self.user.is_none() {
            self.user = context;
        }
        if let Some(parts) = first_user {
            // Every user entry is client context: the first one stands for the ask.
            self.ask = Some((parts, answered));
        }
        Some(())
    }
}

/// The parts of a user entry's text that are the user's own words: neither a tagged context
/// block nor client boilerplate ([`crate::boilerplate::is_client_context`]), and not blank.
fn own_words(body: &[u8], text: &Text) -> Vec<Span> {
    text.0
        .iter()
        .filter(|part| {
            let raw = body.get((*part).clone()).unwrap_or_default();
            let lead = raw.iter().position(|b| !matches!(b, b' ' | b'\t'));
            match lead.map(|i| raw[i]) {
                None => false,
                // Plain ASCII that opens neither a tag nor a heading nor an escape: words.
                Some(b) if b.is_ascii() && !matches!(b, b'<' | b'#' | b'\\') => true,
                _ => {
                    let decoded =
                        json::decode_str(body, part.start.saturating_sub(1)..part.end + 1)
                            .unwrap_or_default();
                    let t = decoded.trim();
                    !t.is_empty()
                        && !is_tagged_block(t)
                        && !crate::boilerplate::is_client_context(t)
                }
            }
        })
        .cloned()
        .collect()
}

/// Whether `part` (trimmed) starts with `<` and a letter and ends with `>`.
fn is_tagged_block(part: &str) -> bool {
    let tagged = part.strip_prefix('<').and_then(|rest| rest.chars().next());
    tagged.is_some_and(|c| c.is_ascii_alphabetic()) && part.ends_with('>')
}

/// Whether the array opening at `open` closes right away (the walk validates it later).
pub(super) fn is_empty_array(body: &[u8], open: usize) -> bool {
    let rest = body.get(open + 1..).unwrap_or_default();
    rest.iter()
        .find(|b| !matches!(b, b' ' | b'\n' | b'\r' | b'\t'))
        == Some(&b']')
}

/// The contents of the JSON string at `span` (between its quotes, as sent), or `None` for
/// any other value.
fn string_contents(body: &[u8], span: &Span) -> Option<Span> {
    (Kind::at(body, span.start) == Some(Kind::String) && span.len() >= 2)
        .then(|| span.start + 1..span.end - 1)
}

/// `inner`, a span of the slice `body[outer]`, as a span of `body`.
fn within(outer: &Span, inner: Span) -> Span {
    inner.start + outer.start..inner.end + outer.start
}

/// The text of a message content in any provider's shape: the strings of a string, an array
/// of parts, or a part object, where from objects only `text`, `content` and `parts` are
/// followed (images, tool inputs and cache markers are skipped). Each part is where a string's
/// contents sit in the body, escapes and all. A text of one or two parts (the usual) is kept
/// without an allocation.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Text(SmallVec<[Span; 2]>);

impl Text {
    /// The text of the (validated) value at `span`; `None` past [`MAX_DEPTH`].
    ///
    /// One pass over the value, whatever its nesting: each byte is read once and no level is
    /// copied or walked again.
    fn read(body: &[u8], span: Span) -> Option<Self> {
        let mut text = Text::default();
        json::strings(
            body,
            span.start,
            MAX_DEPTH,
            |key| matches!(key, "text" | "content" | "parts"),
            &mut text.0,
        )
        .ok()?;
        Some(text)
    }

    fn is_empty(&self) -> bool {
        self.0.iter().all(Range::is_empty)
    }

    /// Hashes the parts joined by a newline byte (which a JSON string never holds raw), after
    /// the joined length.
    fn hash(&self, hasher: &mut Sha256, body: &[u8]) {
        let len = self.0.iter().map(Range::len).sum::<usize>() + self.0.len().saturating_sub(1);
        hasher.update((len as u64).to_be_bytes());
        for (i, part) in self.0.iter().enumerate() {
            if i > 0 {
                hasher.update(b"\n");
            }
            hasher.update(body.get(part.clone()).unwrap_or_default());
        }
    }

    /// Each part decoded (escapes resolved), for the checks that need the characters.
    fn decoded<'b>(&self, body: &'b [u8]) -> impl Iterator<Item = Option<Cow<'b, str>>> {
        self.0.iter().map(move |part| {
            json::decode_str(body, part.start.saturating_sub(1)..part.end + 1).ok()
        })
    }
}

/// The roles that matter to the fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// `system` or `developer`.
    System,
    User,
    Other,
}

/// A conversation entry: its role and its text (`content`, then `parts`).
struct Entry {
    role: Role,
    text: Text,
}

impl Entry {
    /// `Some(None)` for an item that is not an object; `None` past [`MAX_DEPTH`].
    fn read(body: &[u8], span: Span) -> Option<Option<Self>> {
        let value = body.get(span.clone())?;
        if Kind::at(value, 0) != Some(Kind::Object) {
            return Some(None);
        }
        let offset = |inner: Span| within(&span, inner);
        let mut role = Role::Other;
        let (mut content, mut parts) = (Text::default(), Text::default());
        let mut members = Members::root(value).ok()?;
        while let Some(key) = members.next() {
            let key = key.ok()?;
            let slot = match key.key.as_ref() {
                "role" => {
                    role = Role::of(body, offset(members.value(&key).ok()?));
                    continue;
                }
                "content" => &mut content,
                "parts" => &mut parts,
                _ => continue,
            };
            // A repeated key: the last one counts.
            *slot = Text::read(body, offset(members.value(&key).ok()?))?;
        }
        content.0.extend(parts.0);
        Some(Some(Self {
            role,
            text: content,
        }))
    }
}

impl Role {
    fn of(body: &[u8], span: Span) -> Self {
        let Some(contents) = string_contents(body, &span) else {
            return Role::Other;
        };
        let raw = body.get(contents).unwrap_or_default();
        let decoded;
        let name: &[u8] = if raw.contains(&b'\\') {
            decoded = json::decode_str(body, span).unwrap_or_default();
            decoded.as_bytes()
        } else {
            raw
        };
        match name {
            b"system" | b"developer" => Role::System,
            b"user" => Role::User,
            _ => Role::Other,
        }
    }
}

/// Whether every part with text, trimmed, starts with `<` and a letter and ends with `>` (and
/// there is one).
///
/// A part whose first byte that is not a space is plain ASCII other than `<` and `\` cannot
/// be a block, and settles it without decoding; otherwise the decoded parts are checked.
fn is_context_block(body: &[u8], text: &Text) -> bool {
    let cannot_be_a_block = text.0.iter().any(|part| {
        let raw = body.get(part.clone()).unwrap_or_default();
        raw.iter()
            .find(|&&b| b != b' ')
            .is_some_and(|&b| b.is_ascii() && b != b'<' && b != b'\\')
    });
    if cannot_be_a_block {
        return false;
    }
    let mut blocks = text.decoded(body);
    let mut any = false;
    blocks.all(|part| {
        let Some(part) = part else { return false };
        let part = part.trim();
        if part.is_empty() {
            return true;
        }
        any = true;
        is_tagged_block(part)
    }) && any
}

mod answer;
#[cfg(test)]
mod tests;
