//! How a summary job ended, and what became of the handoff it stored.

/// How a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Generated,
    /// The model gave no handoff; one was built from the conversation instead (`why` says
    /// which failure).
    Extractive(Failure),
    Failed(Failure),
    /// Nothing to do: a live generated handoff is recent enough (`fresh`), another gateway
    /// replica is summarising this key (`in_flight_elsewhere`), the conversation has no text
    /// (`empty`), too many jobs are waiting (`queue_full`), the session moved on before the
    /// summary was done (`superseded`).
    Skipped(&'static str),
}

/// The skip reason of a summary done after its session moved on (see [`Stored::Superseded`]).
pub(super) const SUPERSEDED: &str = "superseded";

/// What became of a handoff a job stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stored {
    Yes,
    /// Dropped: the session moved to another account before the summary was done, or a
    /// switching request is carrying its handoff right now (the switch carried one; a second
    /// would reach the new account too).
    Superseded,
    /// The store failed.
    Failed,
}

/// Why the model gave no handoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failure {
    Rejected,
    Unparseable,
    Unavailable,
}

impl Failure {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Rejected => "rejected",
            Self::Unparseable => "unparseable",
            Self::Unavailable => "unavailable",
        }
    }
}

impl Outcome {
    pub(super) fn label(self) -> &'static str {
        match self {
            Self::Generated => "generated",
            Self::Extractive(_) => "extractive",
            Self::Failed(f) => f.as_str(),
            Self::Skipped(_) => "skipped",
        }
    }

    pub(super) fn failure(self) -> Option<Failure> {
        match self {
            Self::Extractive(f) | Self::Failed(f) => Some(f),
            _ => None,
        }
    }
}
