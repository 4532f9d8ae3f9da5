//! How a summary job ended, and what became of the handoff it stored.

use context_relay_core::ending::{EndDetector, Ending};

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

/// Why a summary reply held no handoff: it was cut before its end, or failed in band for a
/// reason that passes (the account out of quota, the provider overloaded or failing):
/// [`Failure::Unavailable`], no cool-down. Anything else the provider ended it with (an answer
/// cut at its output limit, a refusal) or a complete reply the relay could not read is
/// [`Failure::Unparseable`]: the same request would end the same way.
pub(super) fn unreadable(reply: &[u8]) -> Failure {
    let mut end = EndDetector::new();
    end.push(reply);
    match end.finish() {
        Ending::Completed => Failure::Unparseable,
        Ending::Unfinished => Failure::Unavailable,
        Ending::Failed => match end.failure() {
            Some(event) if passes(event) => Failure::Unavailable,
            _ => Failure::Unparseable,
        },
    }
}

/// Whether a failure event says something that passes: a quota error, an overload, a server
/// error (OpenAI `server_error`, Anthropic `overloaded_error` and `api_error`).
fn passes(event: &[u8]) -> bool {
    let names = |needle: &[u8]| event.windows(needle.len()).any(|w| w == needle);
    context_relay_core::quota::limit_in_band(event, std::time::SystemTime::UNIX_EPOCH).is_some()
        || names(b"\"server_error\"")
        || names(b"\"overloaded_error\"")
        || names(b"\"api_error\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_passes_and_what_would_end_the_same_way() {
        let event = |data: &str| format!("event: x\ndata: {data}\n\n");
        for (reply, why) in [
            (
                event(
                    r#"{"type":"response.failed","response":{"error":{"code":"rate_limit_exceeded","message":"m"}}}"#,
                ),
                Failure::Unavailable,
            ),
            (
                event(
                    r#"{"type":"response.failed","response":{"error":{"code":"server_error","message":"m"}}}"#,
                ),
                Failure::Unavailable,
            ),
            (
                event(
                    r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                ),
                Failure::Unavailable,
            ),
            (
                "data: {\"choices\":[{\"delta\":{\"content\":\"{\"}}]}\n\n".to_owned(),
                Failure::Unavailable,
            ),
            (
                event(
                    r#"{"type":"response.incomplete","response":{"incomplete_details":{"reason":"max_output_tokens"}}}"#,
                ),
                Failure::Unparseable,
            ),
            (
                event(
                    r#"{"type":"response.failed","response":{"error":{"code":"invalid_prompt","message":"m"}}}"#,
                ),
                Failure::Unparseable,
            ),
            (
                r#"{"choices":[{"message":{"content":"not a handoff"}}]}"#.to_owned(),
                Failure::Unparseable,
            ),
        ] {
            assert_eq!(unreadable(reply.as_bytes()), why, "{reply}");
        }
    }
}
