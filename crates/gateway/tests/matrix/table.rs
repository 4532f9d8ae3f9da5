//! The printed matrix: one row per shape and position, one column per cause; then every
//! failing cell with its first broken invariant and the evidence, and what the new account
//! received in each cell that switched.

use std::fmt::Write as _;

use super::{Cause, Cell, Outcome, Position};
use context_relay_testkit::agents::Shape;

/// The markdown of the matrix for `results` (in any order).
pub fn render(seed: u64, results: &[(Cell, Outcome)]) -> String {
    let find = |shape: Shape, position: Position, cause: Cause| {
        results
            .iter()
            .find(|(c, _)| c.shape == shape && c.position == position && c.cause == cause)
    };
    let mut out = String::new();
    let count = |f: fn(&Outcome) -> bool| results.iter().filter(|(_, o)| f(o)).count();
    let _ = writeln!(
        out,
        "Switch matrix, seed {seed:#x}: {} cells, {} pass, {} fail, {} n/a\n",
        results.len(),
        count(|o| matches!(o, Outcome::Pass(_))),
        count(|o| matches!(o, Outcome::Fail { .. })),
        count(|o| matches!(o, Outcome::NotApplicable(_))),
    );
    let _ = write!(out, "| shape | position |");
    for cause in Cause::ALL {
        let _ = write!(out, " {} |", cause.name());
    }
    out.push_str("\n|---|---|");
    out.push_str(&"---|".repeat(Cause::ALL.len()));
    out.push('\n');
    let mut failures = Vec::new();
    for shape in Shape::ALL {
        for position in Position::ALL {
            let _ = write!(out, "| {} | {} |", shape.name(), position.name());
            for cause in Cause::ALL {
                let text = match find(shape, position, cause) {
                    Some((_, Outcome::Pass(_))) => "pass".to_owned(),
                    Some((
                        cell,
                        Outcome::Fail {
                            invariant,
                            evidence,
                        },
                    )) => {
                        failures.push((*cell, invariant.clone(), evidence.clone()));
                        let n = invariant.split(' ').next().unwrap_or("?");
                        format!("FAIL {n}")
                    }
                    Some((_, Outcome::NotApplicable(_))) => "n/a".to_owned(),
                    None => "—".to_owned(),
                };
                let _ = write!(out, " {text} |");
            }
            out.push('\n');
        }
    }
    out.push_str(
        "\nInvariants: 0 the cause moved the session (the cell tests what it says); 1 every request gets a 200; 2 no account receives another account's \
         state, and no attempt is rejected but by the cause; 3 exactly one handoff on each \
         conversation's first request on a new account, none elsewhere; 4 a handoff carries \
         its own conversation's task and no other's; 5 the compaction note is true.\n",
    );
    let mut reasons: Vec<&str> = results
        .iter()
        .filter_map(|(_, o)| match o {
            Outcome::NotApplicable(r) => Some(*r),
            _ => None,
        })
        .collect();
    reasons.sort_unstable();
    reasons.dedup();
    if !reasons.is_empty() {
        out.push_str("\nn/a: after compaction applies to Codex only (");
        out.push_str(&reasons.join("; "));
        out.push_str(").\n");
    }
    if !failures.is_empty() {
        out.push_str("\nFailing cells (first broken invariant, evidence):\n\n");
        for (cell, invariant, evidence) in &failures {
            let _ = writeln!(
                out,
                "- {} × {} × {}: [{invariant}] {evidence}",
                cell.shape.name(),
                cell.cause.name(),
                cell.position.name()
            );
        }
    }
    out.push_str("\nWhat the new account received, in the cells that passed:\n\n");
    for cause in Cause::ALL {
        // Each kind of reception, with the number of cells that showed it.
        let mut kinds: Vec<(&str, usize)> = Vec::new();
        for (_, o) in results.iter().filter(|(c, _)| c.cause == cause) {
            if let Outcome::Pass(received) = o {
                match kinds.iter_mut().find(|(k, _)| *k == received.as_str()) {
                    Some((_, n)) => *n += 1,
                    None => kinds.push((received.as_str(), 1)),
                }
            }
        }
        let text = if kinds.is_empty() {
            "no cell passed".to_owned()
        } else {
            kinds
                .iter()
                .map(|(k, n)| format!("{k} ({n} cells)"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let _ = writeln!(out, "- {}: {text}", cause.name());
    }
    out
}
