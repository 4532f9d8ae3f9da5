//! The harness around the processes under test: core pinning, spawning and reaping the
//! children, and reading their CPU time from `/proc`.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::serve::{gateway_toml, write_port_file};
use crate::{BoxError, CHILD_START_TIMEOUT, Target};

/// The environment variable naming another gateway binary for the gateway-on target.
pub(crate) const GATEWAY_BIN_VAR: &str = "GATEWAY_LOAD_GATEWAY_BIN";

/// How the processes are placed on cores.
pub(crate) struct Pinning {
    /// `Some(core)` for the children when `taskset` works and there are two cores.
    pub(crate) child_core: Option<usize>,
    pub(crate) note: String,
}

pub(crate) fn pin_self(cores: (usize, usize)) -> Pinning {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let taskset_ok = Command::new("taskset")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !taskset_ok {
        return Pinning {
            child_core: None,
            note: "UNPINNED: `taskset` (util-linux) not found; processes float over all cores"
                .into(),
        };
    }
    if cpus < 2 {
        return Pinning {
            child_core: None,
            note: format!("UNPINNED: {cpus} core available, two are needed"),
        };
    }
    // Called before any thread exists, so every thread of this process inherits the mask.
    let pinned = Command::new("taskset")
        .args(["-a", "-p", "-c", &cores.0.to_string()])
        .arg(std::process::id().to_string())
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !pinned {
        return Pinning {
            child_core: None,
            note: format!("UNPINNED: `taskset -p -c {}` failed", cores.0),
        };
    }
    Pinning {
        child_core: Some(cores.1),
        note: format!(
            "load generator + simulated provider on core {}, process under test on core {} ({cpus} cores visible)",
            cores.0, cores.1
        ),
    }
}

/// Kills and reaps the children on every exit path, panics included.
#[derive(Default)]
pub(crate) struct ChildGuard(pub(crate) Vec<Child>);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts the process under test for `target` (on `child_core` when given, under the command
/// `wrap` when not empty), and waits for its port.
pub(crate) fn spawn_server(
    guard: &mut ChildGuard,
    target: Target,
    upstream: &str,
    dir: &Path,
    child_core: Option<usize>,
    wrap: &[OsString],
) -> Result<(u32, SocketAddr), BoxError> {
    let exe = std::env::current_exe()?;
    let port_file = dir.join(format!("{}.port", target.name()));
    // `taskset -c CORE PROG` and valgrind exec PROG, so the pid is the server's own.
    let mut argv: Vec<OsString> = match child_core {
        Some(core) => vec!["taskset".into(), "-c".into(), core.to_string().into()],
        None => Vec::new(),
    };
    argv.extend(wrap.iter().cloned());
    // `GATEWAY_LOAD_GATEWAY_BIN`: the gateway-on target is that binary (another build of the
    // gateway, e.g. scripts/pgo.sh's) on the same configuration, not this one re-executed.
    let external = match std::env::var_os(GATEWAY_BIN_VAR) {
        Some(bin) if target == Target::GatewayOn => Some(bin),
        _ => None,
    };
    if let Some(bin) = &external {
        let config = dir.join(format!("{}.toml", target.name()));
        std::fs::write(&config, gateway_toml(upstream, true))?;
        argv.extend([bin.clone(), "--config".into(), config.into_os_string()]);
    } else {
        argv.push(exe.into_os_string());
        argv.extend(
            [
                "--serve",
                target.name(),
                "--upstream",
                upstream,
                "--port-file",
            ]
            .map(OsString::from),
        );
        argv.push(port_file.clone().into_os_string());
    }
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(if external.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::inherit());
    if external.is_some() {
        // As the serve mode: no log unless `GATEWAY_LOAD_LOG` asks for one.
        let filter = std::env::var("GATEWAY_LOAD_LOG").unwrap_or_else(|_| "off".into());
        cmd.env("RUST_LOG", filter);
    }
    let mut child = cmd.spawn()?;
    let announced = match (&external, child.stdout.take()) {
        (Some(_), Some(stdout)) => Some(announce_port(stdout, port_file.clone())),
        _ => None,
    };
    let pid = child.id();
    // Guarded before anything else can fail: no child outlives an error here.
    guard.0.push(child);
    let started = Instant::now();
    loop {
        if let Some(rx) = &announced
            && let Ok(Err(e)) = rx.try_recv()
        {
            return Err(e.into());
        }
        if let Ok(text) = std::fs::read_to_string(&port_file)
            && let Ok(port) = text.trim().parse::<u16>()
        {
            return Ok((pid, SocketAddr::from(([127, 0, 0, 1], port))));
        }
        if let Some(child) = guard.0.last_mut()
            && let Some(status) = child.try_wait()?
        {
            return Err(format!(
                "{}: expected the server to report its port, found it exited with {status}",
                target.name()
            )
            .into());
        }
        if started.elapsed() > CHILD_START_TIMEOUT {
            return Err(format!(
                "{}: expected a port file within {CHILD_START_TIMEOUT:?}, found none",
                target.name()
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Reads the `listening on http://ADDR` line an external gateway prints once it listens and
/// writes its port to `port_file`, which the wait of [`spawn_server`] reads: on a thread of its
/// own, so that the wait's timeout still holds for a gateway that never listens. A line of
/// another shape comes back on the channel. The gateway writes nothing more to stdout after
/// that line, so the pipe's read end may close with the thread.
fn announce_port(stdout: ChildStdout, port_file: PathBuf) -> mpsc::Receiver<Result<(), String>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let result = BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(|e| format!("{GATEWAY_BIN_VAR}: reading its stdout: {e}"))
            .and_then(|_| {
                line.trim()
                    .strip_prefix("listening on http://")
                    .and_then(|a| a.parse::<SocketAddr>().ok())
                    .ok_or_else(|| {
                        format!(
                            "{GATEWAY_BIN_VAR}: expected `listening on http://ADDR`, found {line:?}"
                        )
                    })
            })
            .and_then(|addr| {
                write_port_file(&port_file, addr.port())
                    .map_err(|e| format!("{}: {e}", port_file.display()))
            });
        let _ = tx.send(result);
    });
    rx
}

/// Clock ticks per second of `/proc/<pid>/stat` times.
pub(crate) fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .filter(|t| *t > 0)
        .unwrap_or(100)
}

/// `utime + stime` of every thread of `pid`, in clock ticks.
pub(crate) fn cpu_ticks(pid: u32) -> Result<u64, BoxError> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name may contain spaces and parentheses: fields start after the last `)`.
    let rest = stat
        .rfind(')')
        .map(|i| &stat[i + 1..])
        .ok_or_else(|| format!("/proc/{pid}/stat: expected `pid (comm) …`, found {stat:?}"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of proc(5); `rest` starts at field 3.
    let tick = |i: usize| -> Result<u64, BoxError> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("/proc/{pid}/stat: expected a number as field {}", i + 3).into())
    };
    Ok(tick(11)? + tick(12)?)
}
