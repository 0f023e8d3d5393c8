//! The `holdfast` command line: parse arguments, set up logging, dispatch.
//! Exit codes: 0 success, 1 failure, 2 invalid configuration or usage,
//! 130 stopped by a second signal during the drain.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use holdfast::cli::quarantine;
use holdfast::config::{self, Settings};
use holdfast::daemon::{self, Exit};
use holdfast::inspect::{self, DumpFrom};

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
    /// Validate a config and print what it would do.
    Check {
        #[arg(long, short, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
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
    /// consumer stands. Read-only; works while the daemon runs.
    Dump {
        #[command(flatten)]
        place: Place,
        /// First sequence number to print (default: the oldest).
        #[arg(long, conflicts_with = "consumer")]
        from: Option<u64>,
        /// Start at this consumer's committed position (its unfinished events).
        #[arg(long)]
        consumer: Option<String>,
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

#[derive(Subcommand, Debug)]
enum QuarantineAction {
    /// One line per quarantined event, then totals.
    List {
        #[command(flatten)]
        place: Place,
        #[command(flatten)]
        filter: QuarantineFilter,
        /// One JSON object per event, for scripts.
        #[arg(long)]
        json: bool,
    },
    /// The chosen events in full: the record and the event decoded.
    Show {
        #[command(flatten)]
        place: Place,
        #[command(flatten)]
        filter: QuarantineFilter,
    },
    /// Send the chosen events of one sink again, with their original ids,
    /// once the cause is fixed. They go to the sink's replay inbox: a running
    /// sink sends them within seconds, a stopped one at its next start.
    Replay {
        #[command(flatten)]
        place: Place,
        #[command(flatten)]
        filter: QuarantineFilter,
    },
    /// Delete the chosen events for good.
    Purge {
        #[command(flatten)]
        place: Place,
        #[command(flatten)]
        filter: QuarantineFilter,
        /// Delete every quarantined event (when no filter is given).
        #[arg(long)]
        all: bool,
    },
}

/// Which quarantined events a command applies to; all given filters must match.
#[derive(Args, Debug)]
struct QuarantineFilter {
    /// Only this sink's events (required for replay).
    #[arg(long)]
    sink: Option<String>,
    /// A reason label (rejected, partially_rejected, retries_exhausted,
    /// too_large, invalid_event) or words from the reason.
    #[arg(long)]
    reason: Option<String>,
    /// Quarantined at or after this time: 2024-05-01T12:00:00Z, or a
    /// duration ago like 2h.
    #[arg(long)]
    since: Option<String>,
    /// Quarantined before this time (same forms as --since).
    #[arg(long)]
    until: Option<String>,
    /// One event, by id (32 hex digits).
    #[arg(long)]
    id: Option<String>,
}

impl QuarantineFilter {
    fn filter(&self) -> Result<quarantine::Filter, ExitCode> {
        let now = std::time::SystemTime::now();
        let time = |t: &Option<String>, flag: &str| match t {
            None => Ok(None),
            Some(t) => quarantine::parse_time(t, now).map(Some).map_err(|e| {
                eprintln!("error: --{flag}: {e}");
                ExitCode::from(2)
            }),
        };
        Ok(quarantine::Filter {
            sink: self.sink.clone(),
            reason: self.reason.clone(),
            since_ms: time(&self.since, "since")?,
            until_ms: time(&self.until, "until")?,
            id: self.id.clone(),
        })
    }
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
    fn log_dir(&self) -> Result<PathBuf, ExitCode> {
        if let Some(d) = &self.data_dir {
            return Ok(d.join("log"));
        }
        let path = self.config.clone().unwrap_or_else(|| DEFAULT_CONFIG.into());
        load(&path).map(|s| s.log_dir())
    }

    /// `<data_dir>/quarantine`.
    fn quarantine_dir(&self) -> Result<PathBuf, ExitCode> {
        if let Some(d) = &self.data_dir {
            return Ok(d.join("quarantine"));
        }
        let path = self.config.clone().unwrap_or_else(|| DEFAULT_CONFIG.into());
        load(&path).map(|s| s.data_dir.join("quarantine"))
    }
}

/// `holdfast quarantine ...`: the same code the sinks use to write it.
fn quarantine_command(action: QuarantineAction) -> ExitCode {
    let (place, filter) = match &action {
        QuarantineAction::List { place, filter, .. }
        | QuarantineAction::Show { place, filter }
        | QuarantineAction::Replay { place, filter }
        | QuarantineAction::Purge { place, filter, .. } => (place, filter),
    };
    let root = match place.quarantine_dir() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let f = match filter.filter() {
        Ok(f) => f,
        Err(code) => return code,
    };
    // Usage mistakes exit 2, like the others.
    let usage = match &action {
        QuarantineAction::Replay { .. } if f.sink.is_none() => {
            Some("choose the sink to replay for with --sink")
        }
        QuarantineAction::Purge { all: false, .. } if f.is_empty() => Some(
            "purge needs a filter (--sink, --reason, --since, --until, --id), or --all to \
             delete every quarantined event",
        ),
        _ => None,
    };
    if let Some(message) = usage {
        eprintln!("error: {message}");
        return ExitCode::from(2);
    }
    let result = match action {
        QuarantineAction::List { json, .. } => quarantine::scan(&root, &f).map(|s| {
            if json {
                for e in &s.entries {
                    println!("{}", quarantine::record_json(e, false));
                }
            } else {
                print!("{}", quarantine::render_list(&s));
            }
        }),
        QuarantineAction::Show { .. } => quarantine::scan(&root, &f).map(|s| {
            for e in &s.entries {
                let v = quarantine::record_json(e, true);
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            }
            if s.entries.is_empty() {
                eprintln!("no quarantined event matches");
            }
        }),
        QuarantineAction::Replay { .. } => quarantine::replay(&root, &f).map(|n| {
            println!(
                "{n} event(s) moved to the replay inbox of sink {}: a running holdfast sends them \
                 within seconds, a stopped one at its next start",
                f.sink.as_deref().unwrap_or("")
            )
        }),
        QuarantineAction::Purge { all, .. } => {
            quarantine::purge(&root, &f, all).map(|n| println!("{n} quarantined event(s) deleted"))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

fn load(path: &std::path::Path) -> Result<Settings, ExitCode> {
    config::load(path).map_err(|e| {
        eprintln!("error: invalid configuration\n{e}");
        ExitCode::from(2)
    })
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run { config } => {
            let settings = match load(&config) {
                Ok(s) => s,
                Err(code) => return code,
            };
            holdfast::logging::init(&settings.logging);
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
                Err(e) => {
                    tracing::error!("{}", causes(&e).join(": "));
                    fail(e)
                }
            }
        }
        Command::Check { config } => {
            let settings = match load(&config) {
                Ok(s) => s,
                Err(code) => return code,
            };
            print!("{}", settings.describe());
            let found = settings.check_environment();
            for d in &found {
                eprintln!("{d}");
            }
            if found.iter().any(|d| d.is_error()) {
                eprintln!(
                    "\nconfiguration {} cannot run on this machine as it is",
                    config.display()
                );
                ExitCode::from(2)
            } else {
                println!("\nconfiguration OK: {}", config.display());
                ExitCode::SUCCESS
            }
        }
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
            to,
            limit,
        } => {
            let dir = match place.log_dir() {
                Ok(d) => d,
                Err(code) => return code,
            };
            let from = match consumer {
                Some(c) => DumpFrom::Consumer(c),
                None => DumpFrom::Seq(from.unwrap_or(0)),
            };
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            match inspect::dump(&dir, from, to, limit, &mut out) {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => fail(e),
            }
        }
        Command::Forget { place, sink } => {
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
