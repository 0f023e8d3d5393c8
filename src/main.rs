//! The `holdfast` command line: parse arguments, set up logging, dispatch.
//! Exit codes: 0 success, 1 failure, 2 invalid configuration or usage,
//! 130 stopped by a second signal during the drain.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

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
    after_help = "Examples:\n  holdfast check --config /etc/holdfast/holdfast.toml\n  holdfast run --config /etc/holdfast/holdfast.toml\n  holdfast inspect --config /etc/holdfast/holdfast.toml --json\n  holdfast dump --data-dir /var/lib/holdfast --consumer archive --limit 10"
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
}

fn load(path: &std::path::Path) -> Result<Settings, ExitCode> {
    config::load(path).map_err(|e| {
        eprintln!("error: invalid configuration\n{e}");
        ExitCode::from(2)
    })
}

fn fail(e: anyhow::Error) -> ExitCode {
    // The chain of causes, one per line, for the journal at 3 a.m.
    eprintln!("error: {e}");
    for cause in e.chain().skip(1) {
        eprintln!("  caused by: {cause}");
    }
    ExitCode::from(1)
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
            let rt = match tokio::runtime::Builder::new_multi_thread()
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
                    tracing::error!("{e:#}");
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
    }
}
