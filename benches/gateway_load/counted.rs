//! Counted scale (`GATEWAY_LOAD_CALLGRIND=DIR` with `--scale`): the open-streams phase with
//! each process under test run by `valgrind --tool=callgrind` with its cache simulation, so
//! that the work per event is counted, not timed: instructions, first-level instruction and
//! data cache misses, and last-level misses (the lines fetched from memory).
//!
//! Counting is switched on once every stream had its first event, for
//! `GATEWAY_LOAD_CALLGRIND_SECS` (10), and the figures are divided by the events the clients
//! read in that window. The simulated caches are those of the machines these figures were
//! first taken on (per core 48 KiB, 12-way first-level data cache; a 32 MiB, 16-way last
//! level), or `GATEWAY_LOAD_CALLGRIND_CACHE` (valgrind's `--D1=…`/`--LL=…` options). Under
//! valgrind a process runs many times slower, so fewer streams or events further apart keep
//! it in step:
//!
//! ```sh
//! GATEWAY_LOAD_CALLGRIND=/tmp/counted GATEWAY_LOAD_STREAMS=4000 GATEWAY_LOAD_EVENT_SECS=4 \
//!   GATEWAY_LOAD_STREAM_EVENTS=12 cargo bench --bench gateway_load -- --scale
//! ```
//!
//! The callgrind files stay in `DIR` (`callgrind_annotate --show=Ir,I1mr,D1mr,DLmr FILE`).
//! The phase's times and resident memory are then those of processes under valgrind.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::{BoxError, Target};

const DEFAULT_CACHE: &str = "--D1=49152,12,64 --LL=33554432,16,64";

/// The counted-scale settings (see the [module docs](self)).
pub(crate) struct Callgrind {
    dir: PathBuf,
    cache: String,
    window: Duration,
}

/// What one process did per event in the counted window.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PerEvent {
    pub(crate) events: u64,
    pub(crate) instructions: f64,
    pub(crate) i1_misses: f64,
    pub(crate) d1_misses: f64,
    pub(crate) ll_misses: f64,
}

impl Callgrind {
    /// The settings, when `GATEWAY_LOAD_CALLGRIND` asks for counting.
    pub(crate) fn from_env() -> Result<Option<Self>, BoxError> {
        let Some(dir) = std::env::var_os("GATEWAY_LOAD_CALLGRIND") else {
            return Ok(None);
        };
        for tool in ["valgrind", "callgrind_control"] {
            let found = Command::new(tool)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success());
            if !found {
                return Err(format!(
                    "GATEWAY_LOAD_CALLGRIND: expected `{tool}` on the PATH (apt-get install valgrind), found none"
                )
                .into());
            }
        }
        let secs: f64 = crate::env_or("GATEWAY_LOAD_CALLGRIND_SECS", 10.0)?;
        if !(1.0..=600.0).contains(&secs) {
            return Err(
                format!("GATEWAY_LOAD_CALLGRIND_SECS: expected 1..=600, found {secs}").into(),
            );
        }
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir)?;
        Ok(Some(Self {
            dir,
            cache: std::env::var("GATEWAY_LOAD_CALLGRIND_CACHE")
                .unwrap_or_else(|_| DEFAULT_CACHE.to_owned()),
            window: Duration::from_secs_f64(secs),
        }))
    }

    fn out_file(&self, target: Target) -> PathBuf {
        self.dir.join(format!("callgrind.{}.out", target.name()))
    }

    /// The command the process under test runs under (its program and arguments follow).
    pub(crate) fn wrapper(&self, target: Target) -> Vec<OsString> {
        let mut out: Vec<OsString> = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
            .into_iter()
            .map(OsString::from)
            .collect();
        out.push("--cache-sim=yes".into());
        out.extend(self.cache.split_whitespace().map(OsString::from));
        let mut file = OsString::from("--callgrind-out-file=");
        file.push(self.out_file(target));
        out.push(file);
        out
    }

    /// Counts the process `pid` for the window, `events` being the clients' running count of
    /// the events they read; the figures are taken from callgrind's dump.
    pub(crate) async fn count(
        &self,
        pid: u32,
        target: Target,
        events: &AtomicU64,
    ) -> Result<PerEvent, BoxError> {
        let dump = {
            let mut d = self.out_file(target).into_os_string();
            d.push(".1");
            PathBuf::from(d)
        };
        let _ = std::fs::remove_file(&dump);
        control(pid, &["-i", "on"])?;
        let before = events.load(Ordering::Relaxed);
        tokio::time::sleep(self.window).await;
        control(pid, &["-i", "off"])?;
        let counted = events.load(Ordering::Relaxed) - before;
        control(pid, &["-d"])?;
        let text = std::fs::read_to_string(&dump)
            .map_err(|e| format!("{}: expected callgrind's dump, {e}", dump.display()))?;
        per_event(&text, counted).ok_or_else(|| {
            format!(
                "{}: expected `events:` and `totals:` lines with Ir, I1mr, D1mr, D1mw, DLmr and DLmw",
                dump.display()
            )
            .into()
        })
    }
}

fn control(pid: u32, args: &[&str]) -> Result<(), BoxError> {
    let out = Command::new("callgrind_control")
        .args(args)
        .arg(pid.to_string())
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "callgrind_control {} {pid}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(())
}

/// The totals of a callgrind file, per event.
fn per_event(text: &str, events: u64) -> Option<PerEvent> {
    let names: Vec<&str> = text
        .lines()
        .find_map(|l| l.strip_prefix("events:"))?
        .split_whitespace()
        .collect();
    let totals: Vec<u64> = text
        .lines()
        .find_map(|l| l.strip_prefix("totals:"))?
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let get = |name: &str| {
        let i = names.iter().position(|n| *n == name)?;
        totals.get(i).map(|&v| v as f64 / events.max(1) as f64)
    };
    Some(PerEvent {
        events,
        instructions: get("Ir")?,
        i1_misses: get("I1mr")?,
        d1_misses: get("D1mr")? + get("D1mw")?,
        ll_misses: get("DLmr")? + get("DLmw")? + get("ILmr")?,
    })
}

/// Prints the counted figures of both targets, and the gateway's over the bare proxy's.
pub(crate) fn report(rows: &[(Target, PerEvent)], window: Option<&Callgrind>) {
    let Some(cg) = window else { return };
    println!();
    println!(
        "counted per event (callgrind, {:?} once every stream was open, caches `{}`; files in {}):",
        cg.window,
        cg.cache,
        cg.dir.display()
    );
    println!();
    println!("| target | events counted | instructions | I1 misses | D1 misses | LL misses |");
    println!("|---|---|---|---|---|---|");
    for (t, p) in rows {
        println!(
            "| {} | {} | {:.0} | {:.1} | {:.1} | {:.1} |",
            t.name(),
            p.events,
            p.instructions,
            p.i1_misses,
            p.d1_misses,
            p.ll_misses
        );
    }
    let find = |want: Target| rows.iter().find(|(t, _)| *t == want).map(|(_, p)| p);
    if let (Some(bare), Some(gw)) = (find(Target::Plain), find(Target::GatewayOn)) {
        println!();
        println!(
            "instructions per event, gateway / bare: {:.2}×",
            gw.instructions / bare.instructions.max(1e-9)
        );
    }
}
