//! The axes of the matrix and the result of one cell.

use context_relay_testkit::agents::Shape;

/// Why the session changes account.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The account is used up: its 429 moves the request (a handoff was written at 87 %).
    Quota429,
    /// The usage reading jumps past the handoff band in one turn (80 % → 97 %): no summary
    /// is written, the account is exhausted, the next request moves.
    UsageJump,
    /// The provider is overloaded (OpenAI and Gemini 503, Anthropic 529): retried on the next
    /// account.
    Overloaded,
    /// The connection is closed without a response: retried on the next account.
    ConnectionError,
    /// The account's key is refused (401; Gemini's 400 `API_KEY_INVALID`).
    Refused401,
    /// Every account of the combo's first target is used up: the request falls through to the
    /// combo's next target (another provider and model).
    FallThrough,
    /// The session addresses `provider/model` directly (no combo); its account's 429 moves
    /// it (a handoff was written at 87 %).
    DirectRoute,
    /// A provider that sends no quota headers: nothing is read before its 429.
    NoQuotaHeaders,
}

impl Cause {
    pub const ALL: [Cause; 8] = [
        Cause::Quota429,
        Cause::UsageJump,
        Cause::Overloaded,
        Cause::ConnectionError,
        Cause::Refused401,
        Cause::FallThrough,
        Cause::DirectRoute,
        Cause::NoQuotaHeaders,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Cause::Quota429 => "quota 429",
            Cause::UsageJump => "usage jump",
            Cause::Overloaded => "503/529",
            Cause::ConnectionError => "conn. error",
            Cause::Refused401 => "401",
            Cause::FallThrough => "fall-through",
            Cause::DirectRoute => "direct route",
            Cause::NoQuotaHeaders => "no quota hdrs",
        }
    }

    /// Whether a model-written handoff is expected to be stored before the switch (the
    /// reading before the switch was in the handoff band).
    pub fn primes_band(self) -> bool {
        matches!(
            self,
            Cause::Quota429 | Cause::FallThrough | Cause::DirectRoute
        )
    }

    /// Whether the provider's rejection `code` is the cause itself (and not a problem of the
    /// request).
    pub fn explains(self, code: &str) -> bool {
        let quota = matches!(
            code,
            "usage_limit_reached" | "rate_limit_error" | "RESOURCE_EXHAUSTED"
        );
        match self {
            Cause::Quota429
            | Cause::UsageJump
            | Cause::FallThrough
            | Cause::DirectRoute
            | Cause::NoQuotaHeaders => quota,
            Cause::Overloaded => code == "overloaded",
            Cause::ConnectionError => code == "disconnect",
            Cause::Refused401 => matches!(code, "invalid_api_key" | "API_KEY_INVALID"),
        }
    }
}

/// Where in the conversation the cause strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Position {
    /// The session's very first request (no account served it before: no switch, nothing to
    /// hand off; the usage jump strikes on the first reply, so the second request switches).
    SessionStart,
    /// The first request of a turn (a plain user ask), after a complete turn.
    TurnStart,
    /// A tool result: the loop began on the old account and goes on on the new one.
    MidToolLoop,
    /// After Codex's remote compaction on the old account: the history holds its
    /// `compaction` item, and the handoff (when one was written) was written after it.
    AfterCompaction,
    /// A sub-agent interleaved: a second conversation with the same session header and its
    /// own opening meets the switch first (mid loop), then the parent (mid loop).
    SubAgent,
}

impl Position {
    pub const ALL: [Position; 5] = [
        Position::SessionStart,
        Position::TurnStart,
        Position::MidToolLoop,
        Position::AfterCompaction,
        Position::SubAgent,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Position::SessionStart => "session start",
            Position::TurnStart => "turn start",
            Position::MidToolLoop => "mid tool loop",
            Position::AfterCompaction => "after compaction",
            Position::SubAgent => "sub-agent",
        }
    }
}

/// One cell of the matrix.
#[derive(Clone, Copy, Debug)]
pub struct Cell {
    pub shape: Shape,
    pub cause: Cause,
    pub position: Position,
}

impl Cell {
    /// The cell's place in the whole matrix (its generator's stream, whatever cells are
    /// played).
    pub fn index(&self) -> u64 {
        let shape = Shape::ALL
            .iter()
            .position(|s| *s == self.shape)
            .unwrap_or(0) as u64;
        let position = Position::ALL
            .iter()
            .position(|p| *p == self.position)
            .unwrap_or(0) as u64;
        let cause = Cause::ALL
            .iter()
            .position(|c| *c == self.cause)
            .unwrap_or(0) as u64;
        (shape * Position::ALL.len() as u64 + position) * Cause::ALL.len() as u64 + cause
    }

    /// Why the cell does not apply, if it does not.
    pub fn not_applicable(&self) -> Option<&'static str> {
        if self.position == Position::AfterCompaction && self.shape != Shape::Codex {
            return Some(match self.shape {
                Shape::Claude | Shape::ClaudeBudget => {
                    "Claude Code compacts on the client: the summary is plain text any account reads"
                }
                Shape::Chat => "Chat Completions has no compaction endpoint",
                _ => "the Gemini API has no compaction endpoint",
            });
        }
        None
    }
}

/// The result of one cell.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Every invariant held; what the new account(s) received at the switch.
    Pass(String),
    /// The first broken invariant, with its evidence.
    Fail { invariant: String, evidence: String },
    /// The cell does not apply.
    NotApplicable(&'static str),
}
