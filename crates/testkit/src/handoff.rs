//! What the relay writes and what the simulated provider answers it: the handoff's tag in a
//! request, the words of the summary prompt, and the summary reply.

use serde_json::json;

/// The tag that opens a handoff injected into a request.
pub const HANDOFF_TAG: &str = "<context_handoff>";
/// Words in the relay's summary prompt: the simulator answers such requests with the handoff
/// JSON and counts them as no turn.
pub const SUMMARY_NEEDLE: &str = "writing a handoff note";

/// The handoff JSON the simulator answers a summary request with (a task half done).
pub fn summary_reply() -> String {
    json!({
        "summary": "Adding a --json flag to the CLI; parser done, tests pending.",
        "keyDecisions": ["keep the text output as default"],
        "taskProgress": "parser done",
        "activeEntities": ["src/cli.rs"]
    })
    .to_string()
}
