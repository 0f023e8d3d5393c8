//! The `holdfast` command line: parse arguments, set up logging, dispatch.
//! Exit codes: 0 success, 1 failure, 2 invalid configuration or usage,
//! 130 stopped by a second signal during the drain.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Args, Parser, Subcommand};

use holdfast::config::{self, Settings};
use holdfast::daemon::{self, Exit};
use holdfast::inspect::{self, DumpFrom};

// The `quarantine` subcommand's arguments and dispatch, part of this binary.
#[path = "cli/quarantine_command.rs"]
mod quarantine_command;
use quarantine_command::{quarantine_command, QuarantineAction};

const DEFAULT_CONFIG: &str = config::DEFAULT_CONFIG_PATH;

/// holdfast: a telemetry agent for edge devices. It keeps every record on
/// local disk until a backend has accepted it, and counts what it drops.
#[derive(Parser, Debug)]
#[command(
    version,
    about,
    after_help = "Examples:\n  holdfast check --config /etc/holdfast/holdfast.toml\n  holdfast run --config /etc/holdfast/holdfast.toml\n  holdfast inspect --config /etc/holdfast/holdfast.toml --json\n  holdfast dump --data-dir /var/lib/holdfast --consumer archive --limit 10\n  holdfast quarantine list --data-dir /var/lib/holdfast --sink es --since 2h\n  holdfast quarantine replay --data-dir /var/lib/holdfast --sink es --reason rejected"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the agent (what the systemd unit starts).
    Run {
        #[arg(long, short, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
    },
    /// Validate a config and print what it would do. Exit 0 when it can
    /// run, 2 when it cannot.
    Check {
        #[arg(long, short, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        /// Skip the checks of this machine (directories writable, ports
        /// free, files present): validate the file alone, as in a CI
        /// pipeline.
        #[arg(long)]
        offline: bool,
        /// Print the result as one JSON object (ok, errors, warnings, notes,
        /// describe, effective_config) for tools.
        #[arg(long)]
        json: bool,
        /// Print the config as read (environment variables substituted,
        /// secrets masked) instead of the description.
        #[arg(long)]
        print_config: bool,
        /// Run a source's processing chain over the lines of this file and
        /// print each resulting event as JSON (with --source).
        #[arg(long, requires = "source", value_name = "FILE")]
        sample: Option<PathBuf>,
        /// The source whose processing --sample runs.
        #[arg(long, requires = "sample", value_name = "NAME")]
        source: Option<String>,
    },
    /// Show the log: segments, bytes, sequence range, per-consumer lag and
    /// losses. Read-only; works while the daemon runs.
    Inspect {
        #[command(flatten)]
        place: Place,
        /// Print JSON for scripts.
        #[arg(long)]
        json: bool,
    },
    /// Print events as NDJSON, from a sequence number or from where a
    /// consumer stands; with --follow, then new events as they are appended.
    /// Read-only; works while the daemon runs.
    Dump {
        #[command(flatten)]
        place: Place,
        /// First sequence number to print (default: the oldest; with
        /// --follow, the end: only new events).
        #[arg(long, conflicts_with_all = ["consumer", "sink"])]
        from: Option<u64>,
        /// Start at this consumer's committed position (its unfinished events).
        #[arg(long, conflicts_with = "sink")]
        consumer: Option<String>,
        /// Start at this sink's cursor: the events it has not delivered yet.
        #[arg(long)]
        sink: Option<String>,
        /// Only events of this source.
        #[arg(long)]
        source: Option<String>,
        /// Keep printing events as they are appended, following segment
        /// rolls, until SIGINT or SIGTERM.
        #[arg(long)]
        follow: bool,
        /// Stop before this sequence number.
        #[arg(long)]
        to: Option<u64>,
        /// Print at most this many events.
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Forget the cursor of a sink taken out of the config, so that its
    /// unsent events no longer hold back the log's deletion. Carried out by
    /// the daemon at its next reload or start.
    Forget {
        #[command(flatten)]
        place: Place,
        /// The removed sink's name.
        #[arg(long)]
        sink: String,
    },
    /// List, show, replay or purge quarantined events (those a receiver
    /// rejected for good). Works whether or not the daemon is running.
    Quarantine {
        #[command(subcommand)]
        action: QuarantineAction,
    },
}

/// Where the log is: from a config's data_dir, or a data directory given directly.
#[derive(Args, Debug)]
struct Place {
    #[arg(long, short, conflicts_with = "data_dir")]
    config: Option<PathBuf>,
    /// The data_dir (the log is in its `log/` directory).
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

impl Place {
    /// The log directory, which must exist: the tools read a log, they
    /// never create one.
    fn log_dir(&self) -> Result<PathBuf, ExitCode> {
        let dir = match &self.data_dir {
            Some(d) => d.join("log"),
            None => self.settings()?.log_dir(),
        };
        if !dir.is_dir() {
            let given = match &self.data_dir {
                Some(d) => format!("--data-dir {}", d.display()),
                None => format!("the data_dir of {}", self.config_path().display()),
            };
            eprintln!(
                "error: there is no log in {}: the directory does not exist; check {given} \
                 (the log is in <data_dir>/log, /var/lib/holdfast/log by default)",
                dir.display()
            );
            return Err(ExitCode::from(2));
        }
        Ok(dir)
    }

    /// `<data_dir>/quarantine`.
    fn quarantine_dir(&self) -> Result<PathBuf, ExitCode> {
        if let Some(d) = &self.data_dir {
            return Ok(d.join("quarantine"));
        }
        self.settings().map(|s| s.data_dir.join("quarantine"))
    }

    fn config_path(&self) -> PathBuf {
        self.config.clone().unwrap_or_else(|| DEFAULT_CONFIG.into())
    }

    /// The config named, or the default one; without either flag, a
    /// default config that cannot be read is not "invalid": say which
    /// flags find the log.
    fn settings(&self) -> Result<Settings, ExitCode> {
        let path = self.config_path();
        match config::load(&path) {
            Ok(s) => Ok(s),
            Err(e @ config::ConfigError::Read { .. }) if self.config.is_none() => {
                eprintln!(
                    "error: no --config or --data-dir given, and the default config cannot be \
                     read: {e}\ngive --config FILE (the agent's config) or --data-dir DIR (its \
                     data_dir)"
                );
                Err(ExitCode::from(2))
            }
            Err(e) => Err(report_load_error(&e)),
        }
    }
}

/// Prints a config that cannot be used: "invalid" only when it was read.
fn report_load_error(e: &config::ConfigError) -> ExitCode {
    match e {
        config::ConfigError::Read { .. } => eprintln!("error: {e}"),
        config::ConfigError::Invalid { .. } => eprintln!("error: invalid configuration\n{e}"),
    }
    ExitCode::from(2)
}

/// `holdfast check`: the config's problems, then (unless `offline`) the
/// machine's. Exit 0 when holdfast can run with it, 2 when it cannot.
/// `holdfast check --sample FILE --source NAME` (`src/cli/sample.rs`):
/// exit 0 when the file was read, 2 for a bad config or an unknown source.
fn sample_command(path: &std::path::Path, file: &std::path::Path, source: &str) -> ExitCode {
    let settings = match load(path) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let Some(src) = settings.sources.get(source) else {
        let names: Vec<&str> = settings.sources.keys().map(String::as_str).collect();
        eprintln!(
            "error: no source named {source:?} in {} (sources: {})",
            path.display(),
            names.join(", ")
        );
        return ExitCode::from(2);
    };
    // The source says what its chain runs on: an `otlp_http` source's runs
    // on each log record, so each sample line stands for one record's body.
    let (chain, what) = match src.kind.processing() {
        Some(p) => (p.chain.cloned(), p.unit),
        None => {
            eprintln!(
                "error: sources.{source} is a {} source, which has no processing chain \
                 (`process` applies to file and otlp_http sources): nothing to try",
                src.kind.type_name()
            );
            return ExitCode::from(2);
        }
    };
    let Some(chain) = chain.filter(|c| c.has_steps() || !c.labels.is_empty()) else {
        eprintln!(
            "error: sources.{source} has no processing chain ([sources.{source}.process] with \
             steps or labels): nothing to try; \
             add steps (docs/processing.md) and run this again"
        );
        return ExitCode::from(2);
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match holdfast::cli::sample::run(&chain, file, &mut out) {
        Ok(s) => {
            drop(out);
            eprintln!(
                "{} {what} through sources.{source}.process: {} kept ({} unparsed), {} dropped",
                s.lines, s.kept, s.unparsed, s.dropped
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

fn check_command(
    path: &std::path::Path,
    offline: bool,
    json: bool,
    print_config: bool,
) -> ExitCode {
    let (settings, mut problems) = match config::load(path) {
        Ok(s) => (Some(s), Vec::new()),
        Err(config::ConfigError::Invalid { problems }) => (None, problems),
        Err(e) if !json => return report_load_error(&e),
        Err(e) => (
            None,
            vec![config::Diagnostic {
                severity: config::Severity::Error,
                file: path.to_path_buf(),
                position: None,
                key: String::new(),
                message: e.to_string(),
            }],
        ),
    };
    if let Some(s) = &settings {
        problems.extend(s.warnings().iter().cloned());
        if !offline {
            problems.extend(s.check_environment());
        }
    }
    let ok = !problems.iter().any(|d| d.is_error());
    if json {
        let of = |severity| -> Vec<serde_json::Value> {
            problems
                .iter()
                .filter(|d| d.severity == severity)
                .map(|d| d.to_json())
                .collect()
        };
        let out = serde_json::json!({
            "ok": ok,
            "config": path.display().to_string(),
            "offline": offline,
            "errors": of(config::Severity::Error),
            "warnings": of(config::Severity::Warning),
            "notes": of(config::Severity::Note),
            "describe": settings.as_ref().map(|s| s.describe()),
            "effective_config": settings.as_ref().map(|s| s.effective_config()),
        });
        println!("{out}");
        return if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(2)
        };
    }
    match &settings {
        Some(s) if print_config => print!("{}", s.effective_config()),
        // The description lists the config's own warnings.
        Some(s) => print!("{}", s.describe()),
        None => eprintln!("error: invalid configuration"),
    }
    // The machine checks' warnings and notes sit on stdout under a heading
    // of their own, like the config's warnings in the description; errors
    // go to stderr. With --print-config, stdout is the config alone.
    let mut machine = Vec::new();
    for d in &problems {
        let described =
            !print_config && settings.as_ref().is_some_and(|s| s.warnings().contains(d));
        if described {
            continue;
        }
        if d.is_error() || print_config {
            eprintln!("{d}");
        } else {
            machine.push(d);
        }
    }
    if !machine.is_empty() {
        println!("\nmachine checks, warnings and notes ({}):", machine.len());
        for d in machine {
            println!("  {d}");
        }
    }
    let skipped = if offline {
        " (machine checks skipped: --offline)"
    } else {
        ""
    };
    if ok {
        // With --print-config stdout is the config alone, ready to save.
        let line = format!("configuration OK: {}{skipped}", path.display());
        if print_config {
            eprintln!("{line}")
        } else {
            println!("\n{line}")
        }
        ExitCode::SUCCESS
    } else if settings.is_some() {
        eprintln!(
            "\nconfiguration {} cannot run on this machine as it is",
            path.display()
        );
        ExitCode::from(2)
    } else {
        ExitCode::from(2)
    }
}

fn load(path: &std::path::Path) -> Result<Settings, ExitCode> {
    config::load(path).map_err(|e| report_load_error(&e))
}

/// A flag SIGINT and SIGTERM set instead of ending the process, so that
/// `dump --follow` stops between events with its output flushed.
fn stop_on_signals() -> &'static AtomicBool {
    static STOP: AtomicBool = AtomicBool::new(false);
    extern "C" fn on_signal(_: libc::c_int) {
        // Only an atomic store: async-signal-safe.
        STOP.store(true, Ordering::Relaxed);
    }
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to a static atomic.
        unsafe {
            libc::signal(
                sig,
                on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    }
    &STOP
}

fn fail(e: anyhow::Error) -> ExitCode {
    // The chain of causes, one per line, for the journal at 3 a.m.
    let causes = causes(&e);
    eprintln!("error: {}", causes[0]);
    for cause in &causes[1..] {
        eprintln!("  caused by: {cause}");
    }
    ExitCode::from(1)
}

/// The messages of `e`'s chain, each cause once: errors that print their
/// source in their own message (`creating … : Not a directory`) would
/// otherwise show it twice.
fn causes(e: &anyhow::Error) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.last().is_some_and(|prev| prev.ends_with(&text)) {
            out.push(text);
        }
    }
    out
}

/// The commands that print for a reader end quietly when the reader goes
/// away (`holdfast check | head`), as other command-line tools do, instead of
/// panicking in `println!`. The daemon keeps Rust's default (SIGPIPE
/// ignored): a peer that closes its socket must give a write error, not end
/// the agent.
fn quiet_on_closed_pipe() {
    // SAFETY: setting a signal's disposition to SIG_DFL before any other
    // thread exists; no handler runs Rust code.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Run { .. }) {
        quiet_on_closed_pipe();
    }
    match cli.command {
        Command::Run { config } => {
            let settings = match load(&config) {
                Ok(s) => s,
                Err(code) => return code,
            };
            holdfast::logging::init(&settings.logging);
            let json_logs = settings.logging.format == config::LogFormat::Json;
            for w in settings.warnings() {
                tracing::warn!("{w}");
            }
            daemon::tune_allocator(&settings.daemon);
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(settings.daemon.worker_threads())
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return fail(e.into()),
            };
            match rt.block_on(daemon::run(settings)) {
                Ok(Exit::Clean) => ExitCode::SUCCESS,
                Ok(Exit::Interrupted) => ExitCode::from(130),
                // Once (it was logged and then printed again), and on one
                // line: one journal entry, at the error priority there. JSON
                // logs get it as one more JSON line, for the shipper.
                Err(e) if json_logs => {
                    tracing::error!("{}", causes(&e).join(": "));
                    ExitCode::from(1)
                }
                Err(e) => {
                    let p = if daemon::systemd::under_journal() {
                        "<3>"
                    } else {
                        ""
                    };
                    eprintln!("{p}error: {}", causes(&e).join("; caused by: "));
                    ExitCode::from(1)
                }
            }
        }
        Command::Check {
            config,
            offline,
            json,
            print_config,
            sample,
            source,
        } => match (sample, source) {
            (Some(file), Some(source)) => sample_command(&config, &file, &source),
            _ => check_command(&config, offline, json, print_config),
        },
        Command::Inspect { place, json } => {
            let dir = match place.log_dir() {
                Ok(d) => d,
                Err(code) => return code,
            };
            match inspect::inspect(&dir, json) {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e),
            }
        }
        Command::Dump {
            place,
            from,
            consumer,
            sink,
            source,
            follow,
            to,
            limit,
        } => {
            let dir = match place.log_dir() {
                Ok(d) => d,
                Err(code) => return code,
            };
            // A sink's cursor is its consumer's, by the sink's name.
            let from = match (consumer.or(sink), from) {
                (Some(c), _) => DumpFrom::Consumer(c),
                (None, Some(s)) => DumpFrom::Seq(s),
                (None, None) if follow => DumpFrom::End,
                (None, None) => DumpFrom::Seq(0),
            };
            let opts = inspect::DumpOptions {
                to,
                limit,
                source,
                follow: follow.then(|| inspect::Follow {
                    poll: std::time::Duration::from_millis(100),
                    stop: stop_on_signals(),
                }),
            };
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            match inspect::dump(&dir, from, &opts, &mut out) {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => fail(e),
            }
        }
        Command::Forget { place, sink } => {
            // With the config at hand, a sink still in it is refused now,
            // not at the next reload.
            if place.data_dir.is_none() {
                let settings = match place.settings() {
                    Ok(s) => s,
                    Err(code) => return code,
                };
                if settings.sinks.contains_key(&sink) {
                    let at = settings
                        .position_of(&format!("sinks.{sink}.type"))
                        .map_or(String::new(), |p| format!(":{}", p.line));
                    eprintln!(
                        "error: sink {sink:?} is still in the config ({}{at}), and a configured \
                         sink's cursor is in use: remove [sinks.{sink}], reload \
                         (`systemctl reload holdfast`), then run this again",
                        settings.config_file.display()
                    );
                    return ExitCode::from(2);
                }
            }
            let dir = match place.log_dir() {
                Ok(d) => d,
                Err(code) => return code,
            };
            match holdfast::cli::forget::forget(&dir, &sink) {
                Ok(text) => {
                    println!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e),
            }
        }
        Command::Quarantine { action } => quarantine_command(action),
    }
}
