//! `context-relay-gateway --config FILE`: an OpenAI/Anthropic-compatible gateway that pools
//! provider accounts and keeps sessions alive across account rotation.

#![forbid(unsafe_code)]

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use context_relay_gateway::config::{Config, LogFormat};
use context_relay_gateway::{Gateway, LogBuffer, PlainFields, prometheus_builder};
use tokio::sync::watch;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// OpenAI/Anthropic-compatible gateway that pools several accounts per provider and keeps long
/// coding sessions alive across account rotation.
///
/// Logging follows RUST_LOG (default: info), e.g. RUST_LOG=context_relay_gateway=debug.
#[derive(Debug, Parser)]
#[command(name = "context-relay-gateway", version)]
struct Args {
    /// The TOML configuration file (see the crate README for the schema).
    #[arg(
        long,
        short = 'c',
        value_name = "FILE",
        required_unless_present = "probe"
    )]
    config: Option<PathBuf>,
    /// Listen on this address instead of the file's `listen` (e.g. 0.0.0.0:4000).
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Validate the configuration (keys, values, environment variables), print the result
    /// and exit: 0 when valid, 1 otherwise.
    #[arg(long)]
    check: bool,
    /// Log lines as text or as one JSON object per line (overrides the file's `log_format`).
    #[arg(long, value_enum, value_name = "FORMAT")]
    log_format: Option<LogFormat>,
    /// Ask a running gateway whether it is ready (e.g. http://127.0.0.1:4000/readyz) and exit:
    /// 0 on a 2xx answer within 5 s, 1 otherwise. For container health checks, where the image
    /// has no HTTP client of its own.
    #[arg(long, value_name = "URL", conflicts_with_all = ["config", "check", "listen"])]
    probe: Option<String>,
}

/// mimalloc: the gateway allocates and frees many small buffers per request, which glibc's
/// allocator serves measurably slower (see the README's performance section). It returns
/// freed memory to the system once unused for a second (mimalloc 3's `purge_delay`);
/// `MIMALLOC_PURGE_DELAY=-1` in the environment keeps it (`docs/operations.md`, "Memory after
/// a burst of large requests").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Turns transparent huge pages off for this process (Linux), unless `MIMALLOC_ALLOW_THP` is
/// set, which leaves the choice to mimalloc (`=1` keeps them). mimalloc takes its memory in
/// large aligned regions; with huge pages the kernel backs each touched 2 MiB of them whole,
/// and a gateway holding thousands of open streams, each with a few kilobytes here and there,
/// held 62.7 KiB per open stream with them against 41.3 without, at the same CPU per event
/// (`docs/performance.md`, "Huge pages and memory per open stream").
fn huge_pages() {
    #[cfg(target_os = "linux")]
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none()
        && let Err(e) = nix::sys::prctl::set_thp_disable(true)
    {
        tracing::warn!(
            error = %e,
            "transparent huge pages stay on: each open connection holds more memory"
        );
    }
}

/// Writes the waiting log lines when `main` returns, whatever the path.
struct FlushOnExit(Option<LogBuffer>);

impl FlushOnExit {
    fn flush(&self) {
        if let Some(log) = &self.0 {
            log.flush();
        }
    }
}

impl Drop for FlushOnExit {
    fn drop(&mut self) {
        self.flush();
    }
}

/// How long access-log lines may wait before they are written (see [`LogBuffer`]).
const LOG_FLUSH_EVERY: Duration = Duration::from_millis(100);

/// Sets up logging to stderr; the returned buffer must be flushed before the process exits.
fn init_logging(format: LogFormat) -> Option<LogBuffer> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours on a terminal only, and never with NO_COLOR set (https://no-color.org).
    let ansi = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    match LogBuffer::stderr(LOG_FLUSH_EVERY) {
        Ok(log) => {
            if install(log.clone(), filter, ansi, format) {
                context_relay_gateway::write_access_lines_to(log.clone());
            }
            Some(log)
        }
        Err(e) => {
            // No flusher thread: every line is written through.
            eprintln!("warning: cannot start the log flusher ({e}); logging unbuffered");
            // Unbuffered, the access lines go through `tracing` like every other line.
            install(std::io::stderr, filter, ansi, format);
            None
        }
    }
}

/// Installs the global subscriber writing to `writer` in `format`; `true` when it writes plain
/// text without colours with [`PlainFields`], the text the access log can write itself
/// ([`context_relay_gateway::write_access_lines_to`]).
fn install<W>(writer: W, filter: EnvFilter, ansi: bool, format: LogFormat) -> bool
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer);
    match format {
        // Without colours the same text is written by a cheaper field formatter.
        LogFormat::Text if !ansi => {
            builder.fmt_fields(PlainFields).init();
            true
        }
        LogFormat::Text => {
            builder.init();
            false
        }
        LogFormat::Json => {
            builder.json().with_current_span(true).init();
            false
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(url) = &args.probe {
        return probe(url);
    }
    let Some(path) = args.config.clone() else {
        eprintln!("error: --config FILE is required");
        return ExitCode::FAILURE;
    };
    let mut config = match Config::load(&path) {
        Ok(c) => c,
        Err(e) => {
            // Logging is not set up yet (its format is in the file): plain stderr, naming the
            // file (a read error names it already).
            match e {
                context_relay_gateway::config::ConfigError::Io { .. } => eprintln!("error: {e}"),
                _ => eprintln!("error: {}: {e}", path.display()),
            }
            return ExitCode::FAILURE;
        }
    };
    let overrides = Overrides {
        listen: args.listen,
        log_format: args.log_format,
    };
    overrides.apply(&mut config);
    let log = FlushOnExit(init_logging(config.log_format));
    if let Some(listen) = args.listen
        && let Err(e) = config.check_open(listen)
    {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    if args.check {
        for (field, w) in config.relay_settings().1 {
            println!("warning: {field}: {w} (the default is used)");
        }
        for w in config.warnings() {
            println!("warning: {w}");
        }
        let quiet = QuietStoreChecks::new();
        let checked = context_relay_gateway::check_store(&config.store);
        drop(quiet);
        match checked {
            Ok(Some(store)) => println!("{store}"),
            Ok(None) => {}
            Err(e) => {
                println!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
        let accounts: usize = config.providers.iter().map(|p| p.accounts.len()).sum();
        let logins = match config.logins() {
            0 => String::new(),
            n => format!(" ({n} subscription logins)"),
        };
        println!(
            "{}: valid ({} providers, {accounts} accounts{logins}, {} combos)",
            path.display(),
            config.providers.len(),
            config.combos.len()
        );
        return ExitCode::SUCCESS;
    }

    huge_pages();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(config, path, overrides)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // After the access lines still waiting, not before them.
            log.flush();
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// While it lives, panics raised in redb's own code are not printed: the store opens a file
/// under `catch_unwind` (redb panics on some damaged pages) and turns such a panic into an error
/// that names the file and what to do, which is all an operator should read. Other panics
/// print as ever. Held only around opening the store, before anything else runs.
struct QuietStoreChecks(std::sync::Arc<PanicHook>);

type PanicHook = Box<dyn Fn(&std::panic::PanicHookInfo<'_>) + Sync + Send + 'static>;

impl QuietStoreChecks {
    fn new() -> Self {
        let previous = std::sync::Arc::new(std::panic::take_hook());
        let forward = previous.clone();
        std::panic::set_hook(Box::new(move |info| {
            let in_redb = |file: &str| file.contains("/redb-") || file.contains("\\redb-");
            if !info.location().is_some_and(|l| in_redb(l.file())) {
                forward(info);
            }
        }));
        Self(previous)
    }
}

impl Drop for QuietStoreChecks {
    fn drop(&mut self) {
        let previous = self.0.clone();
        std::panic::set_hook(Box::new(move |info| previous(info)));
    }
}

/// The command line's values that take the place of the file's, at start and at each reload
/// (so that a reload does not see them as changed).
#[derive(Debug, Clone, Copy)]
struct Overrides {
    listen: Option<SocketAddr>,
    log_format: Option<LogFormat>,
}

impl Overrides {
    fn apply(&self, config: &mut Config) {
        if let Some(listen) = self.listen {
            config.listen = listen;
        }
        if let Some(format) = self.log_format {
            config.log_format = format;
        }
    }
}

async fn run(
    config: Config,
    path: PathBuf,
    overrides: Overrides,
) -> Result<(), Box<dyn std::error::Error>> {
    let listen = config.listen;
    let metrics = prometheus_builder().install_recorder()?;
    context_relay_gateway::describe_metrics();
    let quiet = QuietStoreChecks::new();
    let connected = Gateway::connect(config).await;
    drop(quiet);
    let gateway = connected?.with_metrics(metrics);
    let listener = context_relay_gateway::listen(listen)
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr()?;
    // Listening for SIGHUP and SIGTERM before the address is printed: a reload or a stop
    // asked for right after start-up must not meet the signal's default action (exit).
    let reloads = tokio::spawn(reload_on_hangup(
        gateway.clone(),
        hangups(),
        path,
        overrides,
    ));
    let stops = Stops::install();
    tracing::info!(
        %addr,
        store = gateway.store().backend(),
        relay = gateway.relay_enabled(),
        clients = gateway.config().clients.len(),
        "context-relay-gateway listening"
    );
    // One plain line on stdout, for scripts that start the gateway on port 0.
    println!("listening on http://{addr}");
    // A second request to stop drops the drain: its connections' tasks are aborted, and the
    // background work ends with the runtime.
    let cut = tokio::select! {
        served = gateway.serve(listener, stops.reached(1)) => {
            served?;
            false
        }
        () = stops.reached(2) => true,
    };
    // The reload task holds the gateway (and so the store): it ends before the store closes.
    reloads.abort();
    let _ = reloads.await;
    // The last handle on the store: redb commits what is queued and releases its file here
    // (after a cut drain, once the runtime has dropped the tasks still holding it).
    drop(gateway);
    if cut {
        tracing::info!("drain cut short; the store closes as the process exits");
    } else {
        tracing::info!("store closed; bye");
    }
    Ok(())
}

/// `--probe URL`: a GET of `url` (plain HTTP) within 5 s; success on a 2xx answer.
fn probe(url: &str) -> ExitCode {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        eprintln!("error: cannot start the async runtime");
        return ExitCode::FAILURE;
    };
    let outcome = runtime.block_on(async {
        let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
        let client: hyper_util::client::legacy::Client<_, http_body_util::Empty<bytes::Bytes>> =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http();
        let request = client.get(uri);
        match tokio::time::timeout(Duration::from_secs(5), request).await {
            Ok(Ok(res)) if res.status().is_success() => Ok(res.status()),
            Ok(Ok(res)) => Err(format!("{url} answered {}", res.status())),
            Ok(Err(e)) => Err(format!("{url}: {e}")),
            Err(_) => Err(format!("{url} did not answer within 5 s")),
        }
    });
    match outcome {
        Ok(status) => {
            println!("{url}: {status}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("not ready: {e}");
            ExitCode::FAILURE
        }
    }
}

/// SIGHUP as a stream (on Unix; elsewhere, never).
#[cfg(unix)]
fn hangups() -> Option<tokio::signal::unix::Signal> {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!("cannot listen for SIGHUP (no configuration reload): {e}");
            None
        }
    }
}

#[cfg(not(unix))]
fn hangups() -> Option<()> {
    None
}

/// Reloads the configuration file on every SIGHUP: a file that does not load or validate
/// leaves the running configuration in place, and the log says why.
#[cfg(unix)]
async fn reload_on_hangup(
    mut gateway: Gateway,
    hangups: Option<tokio::signal::unix::Signal>,
    path: PathBuf,
    overrides: Overrides,
) {
    let Some(mut hangups) = hangups else { return };
    while hangups.recv().await.is_some() {
        tracing::info!(path = %path.display(), "SIGHUP received: reloading the configuration");
        let mut config = match Config::load(&path) {
            Ok(c) => c,
            Err(e) => {
                refused(&e);
                continue;
            }
        };
        overrides.apply(&mut config);
        match gateway.reload(config).await {
            Ok(next) => {
                gateway = next;
                metrics::counter!("context_relay_gateway_config_reloads_total", "outcome" => "applied")
                    .increment(1);
                let c = gateway.config();
                tracing::info!(
                    providers = c.providers.len(),
                    accounts = c.providers.iter().map(|p| p.accounts.len()).sum::<usize>(),
                    combos = c.combos.len(),
                    clients = c.clients.len(),
                    "configuration reloaded"
                );
            }
            Err(e) => refused(&e),
        }
    }
}

/// Logs and counts a reload that keeps the running configuration.
#[cfg(unix)]
fn refused(e: &dyn std::fmt::Display) {
    tracing::error!("configuration not reloaded (the running one stays): {e}");
    metrics::counter!("context_relay_gateway_config_reloads_total", "outcome" => "refused")
        .increment(1);
}

#[cfg(not(unix))]
async fn reload_on_hangup(
    _gateway: Gateway,
    _hangups: Option<()>,
    _path: PathBuf,
    _overrides: Overrides,
) {
}

/// The requests to stop (ctrl-c, and SIGTERM on Unix), counted from [`Stops::install`] on:
/// the first starts the drain, a second cuts it short. SIGHUP reloads the configuration
/// instead ([`reload_on_hangup`]).
///
/// Installed before the address is printed, like [`hangups`]: a handler installed only when
/// the accept loop first polled its future left a window in which a client could be served and
/// a SIGTERM sent, and that SIGTERM met the default action: an exit without draining the
/// connections or writing the waiting access lines.
struct Stops(watch::Receiver<u32>);

impl Stops {
    /// Installs the handlers now and counts what they receive on a task of its own.
    fn install() -> Self {
        let mut handlers = StopHandlers::install();
        let (count, stops) = watch::channel(0);
        tokio::spawn(async move {
            loop {
                let what = handlers.next().await;
                count.send_modify(|n| *n += 1);
                if *count.borrow() == 1 {
                    tracing::info!("{what} received, shutting down");
                } else {
                    tracing::warn!(
                        "{what} received again: cutting the drain short (requests in flight \
                         end now, background work is not waited for)"
                    );
                }
            }
        });
        Self(stops)
    }

    /// Completes once `n` requests to stop have come (never, when no handler could be
    /// installed).
    fn reached(&self, n: u32) -> impl Future<Output = ()> + Send + 'static {
        let mut stops = self.0.clone();
        async move {
            if stops.wait_for(|count| *count >= n).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// The signal handlers behind [`Stops`].
#[cfg(unix)]
struct StopHandlers {
    interrupt: Option<tokio::signal::unix::Signal>,
    terminate: Option<tokio::signal::unix::Signal>,
}

#[cfg(unix)]
impl StopHandlers {
    fn install() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        let listen = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!("cannot listen for {name}: {e}");
                None
            }
        };
        Self {
            interrupt: listen(SignalKind::interrupt(), "ctrl-c"),
            terminate: listen(SignalKind::terminate(), "SIGTERM"),
        }
    }

    /// The next signal received, by name; never, with neither handler installed.
    async fn next(&mut self) -> &'static str {
        async fn received(signal: &mut Option<tokio::signal::unix::Signal>) {
            let got = match signal {
                Some(s) => s.recv().await.is_some(),
                None => false,
            };
            // No handler, or the runtime's signal driver is gone: never.
            if !got {
                std::future::pending::<()>().await;
            }
        }
        tokio::select! {
            () = received(&mut self.interrupt) => "ctrl-c",
            () = received(&mut self.terminate) => "SIGTERM",
        }
    }
}

/// The signal handler behind [`Stops`]: ctrl-c.
#[cfg(not(unix))]
struct StopHandlers;

#[cfg(not(unix))]
impl StopHandlers {
    fn install() -> Self {
        Self
    }

    async fn next(&mut self) -> &'static str {
        match tokio::signal::ctrl_c().await {
            Ok(()) => "ctrl-c",
            Err(e) => {
                tracing::warn!("cannot listen for ctrl-c: {e}");
                std::future::pending().await
            }
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::time::Duration;

    use context_relay_testkit::binary::signal_pid;

    /// The handlers are in place once `Stops::install` returns, before anything is polled: a
    /// SIGTERM sent then is counted instead of ending the process (which ends this test
    /// binary, and fails it, when the handler waits for a first poll). A second request to
    /// stop, here a ctrl-c (SIGINT), is counted apart from the first. (One test: the signals
    /// go to the whole test binary, and a second test's would be counted here too.)
    #[tokio::test]
    async fn stop_requests_are_counted_from_the_install_on() {
        let stops = super::Stops::install();
        let (first, second) = (stops.reached(1), stops.reached(2));
        signal_pid(std::process::id(), "-TERM");
        tokio::time::timeout(Duration::from_secs(10), first)
            .await
            .expect("the first SIGTERM starts the drain");
        let mut second = std::pin::pin!(second);
        assert!(
            tokio::time::timeout(Duration::from_millis(200), second.as_mut())
                .await
                .is_err(),
            "one SIGTERM does not cut the drain"
        );
        signal_pid(std::process::id(), "-INT");
        tokio::time::timeout(Duration::from_secs(10), second)
            .await
            .expect("a ctrl-c after the SIGTERM cuts the drain");
    }
}
