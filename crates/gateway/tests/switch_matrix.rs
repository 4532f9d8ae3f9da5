//! The switch matrix: client shapes × switch causes × positions in the conversation, each cell
//! played end to end (a real gateway on 127.0.0.1:0, a real HTTP client, the strict simulated
//! provider running tool loops) and checked against the invariants in `matrix/check.rs`.
//!
//! Seeded and reproducible: `SWITCH_MATRIX_SEED` (decimal or `0x…`) changes the seed (the
//! loop length and the markers of each cell); `SWITCH_MATRIX_ONLY` keeps the cells whose
//! "shape / cause / position" names contain it. The matrix is printed (run with
//! `--nocapture` to see it when it passes) and written to `switch_matrix.md` in the test's
//! temporary directory.
//!
//! ```text
//! cargo test -p context-relay-gateway --test switch_matrix -- --nocapture
//! ```

mod matrix;

use std::sync::Arc;
use std::time::Duration;

use context_relay_testkit::agents::{Agent, Shape};
use matrix::script::{Conv, Run};
use matrix::{Cause, Cell, Outcome, Position, Rng, check, setup, table};

/// The seed when `SWITCH_MATRIX_SEED` is not set.
const DEFAULT_SEED: u64 = 0x5eed_2101;
/// Cells played at once.
const PARALLEL: usize = 4;
/// Longest a cell may take.
const CELL_TIMEOUT: Duration = Duration::from_secs(60);

fn seed() -> u64 {
    let Ok(s) = std::env::var("SWITCH_MATRIX_SEED") else {
        return DEFAULT_SEED;
    };
    let s = s.trim();
    let parsed = match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.expect("SWITCH_MATRIX_SEED is a number")
}

fn cells() -> Vec<Cell> {
    let only = std::env::var("SWITCH_MATRIX_ONLY").unwrap_or_default();
    let mut out = Vec::new();
    for shape in Shape::ALL {
        for position in Position::ALL {
            for cause in Cause::ALL {
                let name = format!("{} / {} / {}", shape.name(), cause.name(), position.name());
                if name.contains(only.as_str()) {
                    out.push(Cell {
                        shape,
                        cause,
                        position,
                    });
                }
            }
        }
    }
    out
}

/// Plays one cell with its own generator.
async fn play(cell: Cell, mut rng: Rng) -> Outcome {
    if let Some(reason) = cell.not_applicable() {
        return Outcome::NotApplicable(reason);
    }
    let calls = 2 + (rng.next() % 2) as usize;
    let task = format!("TASK-{}", rng.token());
    let sub_task = format!("TASK-{}", rng.token());
    let fact = format!("FACT-{}", rng.token());
    let session = format!(
        "0199{}-{}-7{}-8{}-{}{}",
        &rng.token()[..4],
        &rng.token()[..4],
        &rng.token()[..3],
        &rng.token()[..3],
        rng.token(),
        &rng.token()[..4]
    );
    let h = setup::start(
        &cell,
        calls,
        vec![task.clone(), sub_task.clone(), fact.clone()],
    )
    .await;
    let model = setup::model(&cell);
    let mut parent = Conv {
        agent: Agent::new(
            cell.shape,
            &session,
            &model,
            &format!("{task}: add a --json flag to the CLI and cover it with a test."),
        ),
        name: "main",
        task,
    };
    let mut sub = (cell.position == Position::SubAgent).then(|| Conv {
        agent: Agent::new(
            cell.shape,
            &session,
            &model,
            &format!("{sub_task}: list every caller of parse_args in the repository."),
        ),
        name: "sub-agent",
        task: sub_task,
    });
    let mut run = Run::new(&h, cell, calls);
    let played = tokio::time::timeout(CELL_TIMEOUT, run.play(&mut parent, sub.as_mut(), &fact))
        .await
        .unwrap_or_else(|_| Err(format!("the cell did not finish within {CELL_TIMEOUT:?}")));
    let armed_at = run.armed_at;
    let convs: Vec<&Conv> = std::iter::once(&parent).chain(sub.as_ref()).collect();
    let checked = check::check(&h, &cell, &convs, armed_at, &fact);
    if std::env::var_os("SWITCH_MATRIX_TRACE").is_some() {
        println!(
            "{} / {} / {}:\n{}",
            cell.shape.name(),
            cell.cause.name(),
            cell.position.name(),
            check::trace(&h, &convs)
        );
    }
    let broken = match (played, checked) {
        (Ok(()), Ok(received)) => return Outcome::Pass(received),
        (Err(client), Err((_, upstream))) => {
            check::failed_request(format!("{client} — upstream: {upstream}"))
        }
        (Err(client), Ok(_)) => check::failed_request(client),
        (Ok(()), Err(broken)) => broken,
    };
    Outcome::Fail {
        invariant: broken.0,
        evidence: broken.1,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switch_matrix() {
    let seed = seed();
    if std::env::var_os("SWITCH_MATRIX_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_env("SWITCH_MATRIX_LOG"))
            .try_init();
    }
    let cells = cells();
    let limit = Arc::new(tokio::sync::Semaphore::new(PARALLEL));
    let mut tasks = tokio::task::JoinSet::new();
    for cell in cells {
        let limit = limit.clone();
        // One generator per cell, from the seed and the cell's place in the whole matrix.
        let rng = Rng::new(seed ^ ((cell.index() + 1) << 32));
        tasks.spawn(async move {
            let _permit = limit.acquire_owned().await;
            (cell, play(cell, rng).await)
        });
    }
    let mut results = Vec::new();
    while let Some(done) = tasks.join_next().await {
        results.push(done.expect("a cell panicked"));
    }
    let text = table::render(seed, &results);
    println!("{text}");
    let _ = std::fs::write(
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("switch_matrix.md"),
        &text,
    );
    let failed = results
        .iter()
        .filter(|(_, o)| matches!(o, Outcome::Fail { .. }))
        .count();
    assert_eq!(
        failed, 0,
        "{failed} cells of the switch matrix fail:\n{text}"
    );
}
