//! Stage two: the validated [`Settings`] and the checks that build them from
//! the raw tables. Everything here has its default applied, its paths
//! resolved and its bounds checked; the daemon uses it as is.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::log;
pub use super::raw::LogFormat;
use super::raw::{RawApi, RawConfig, RawDaemon, RawLog, RawLogging};
use super::sinks::{self, SinkSettings};
use super::sources::{self, SourceSettings};
use crate::checking::error::{suggestion_suffix, Diagnostic, Position};
use crate::checking::units::format_duration;
use crate::checking::Checker;
use crate::component::SourceEnv;
use crate::seglog::LogOptions;

/// Where holdfast keeps its state unless `data_dir` says otherwise.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/holdfast";
/// The `/metrics`, `/healthz`, `/readyz` address unless `api.listen` says
/// otherwise: this machine only.
pub const DEFAULT_API_LISTEN: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9467));
/// The drain deadline unless `daemon.shutdown_timeout` says otherwise.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(20);
/// Runtime threads unless `daemon.worker_threads` says otherwise: a source
/// and a sink each keep one busy at full speed, and every thread costs its
/// stack, its share of malloc arenas and its own zstd contexts.
pub const DEFAULT_WORKER_THREADS: usize = 2;
/// glibc malloc arenas unless `daemon.malloc_arenas` says otherwise. glibc
/// gives each thread that contends for the heap its own arena, up to eight
/// per core, and an arena keeps what it once held: with the writer, two
/// workers and blocking threads that is several arenas each holding a peak's
/// worth of chunks and request bodies.
pub const DEFAULT_MALLOC_ARENAS: usize = 2;
/// glibc's own ceiling for the threshold on 64-bit systems.
const MAX_MALLOC_MMAP_THRESHOLD: u64 = 32 << 20;
/// `TimeoutStopSec` of the shipped systemd unit: systemd kills holdfast after
/// this, so the drain deadline must stay below it.
pub const SYSTEMD_STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// A validated config: what `holdfast run` runs and `holdfast check` prints.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The file this came from (for messages).
    pub config_file: PathBuf,
    /// Absolute state directory (`data_dir`); the log is in
    /// [`log_dir`](Settings::log_dir).
    pub data_dir: PathBuf,
    /// The `[log]` table, ready for [`Log::open`](crate::seglog::Log::open).
    pub log: LogOptions,
    /// The `[api]` table.
    pub api: ApiSettings,
    /// The `[daemon]` table.
    pub daemon: DaemonSettings,
    /// The `[logging]` table.
    pub logging: LoggingSettings,
    /// `[sources.<name>]`, by name (the same as each value's `name`).
    pub sources: BTreeMap<String, SourceSettings>,
    /// `[sinks.<name>]`, by name (the same as each value's `name`); each
    /// input names one of `sources`.
    pub sinks: BTreeMap<String, SinkSettings>,
    pub(crate) warnings: Vec<Diagnostic>,
    pub(crate) origins: BTreeMap<String, Position>,
    /// The file after interpolation, secrets masked.
    pub(crate) effective: String,
    /// Secret values from the environment, as messages could quote them:
    /// redacted from the description and the machine checks' messages.
    pub(crate) secrets: Vec<String>,
}

impl Settings {
    /// Where the log lives: `<data_dir>/log`.
    pub fn log_dir(&self) -> PathBuf {
        self.data_dir.join("log")
    }

    /// What is allowed but probably unintended (a public listener without
    /// authentication, a source no sink reads...), in file order. `check`
    /// prints these; `run` should log them at startup.
    pub fn warnings(&self) -> &[Diagnostic] {
        &self.warnings
    }

    /// The config file as read: after environment interpolation, comments
    /// and layout kept, every secret shown as `"********"` (what `holdfast
    /// check --print-config` prints).
    pub fn effective_config(&self) -> &str {
        &self.effective
    }

    /// Where `key` (like `sources.otlp.listen`) is set in the file, for
    /// messages about it later (a failed bind, an unreadable file). `None`
    /// when the key was left at its default.
    pub fn position_of(&self, key: &str) -> Option<Position> {
        self.origins.get(key).copied()
    }
}

/// `[api]`: the local HTTP endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiSettings {
    /// Address for `/metrics`, `/healthz` and `/readyz`. Port 0 picks a free
    /// port (for tests).
    pub listen: SocketAddr,
}

/// `[daemon]`: behaviour under systemd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonSettings {
    /// Deadline for the drain after SIGTERM; never zero.
    pub shutdown_timeout: Duration,
    /// Ping systemd's watchdog when the unit sets `WatchdogSec`.
    pub watchdog: bool,
    /// Threads of the async runtime that runs sources, sinks and the API
    /// (the log's writer thread is apart). `None`: the default,
    /// [`DEFAULT_WORKER_THREADS`] or the number of cores if fewer.
    pub worker_threads: Option<usize>,
    /// glibc malloc arenas (`M_ARENA_MAX`), set before any thread starts.
    pub malloc_arenas: usize,
    /// Allocations from this many bytes up get their own mapping, returned
    /// to the system when freed (`M_MMAP_THRESHOLD`, and so fixed). `None`:
    /// glibc's own, which grows.
    pub malloc_mmap_threshold: Option<usize>,
}

impl DaemonSettings {
    /// The runtime's worker threads: as configured, else
    /// [`DEFAULT_WORKER_THREADS`] or fewer on a machine with fewer cores.
    pub fn worker_threads(&self) -> usize {
        self.worker_threads.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(DEFAULT_WORKER_THREADS)
        })
    }
}

/// `[logging]`: holdfast's own logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggingSettings {
    /// A tracing `EnvFilter` directive, already checked to parse. `RUST_LOG`,
    /// when set, takes precedence.
    pub level: String,
    /// How log lines look.
    pub format: LogFormat,
}

/// Builds [`Settings`] from the parsed document, recording every problem in
/// `cx`. The result is meaningful only if `cx` holds no errors.
pub(crate) fn check_document<'a>(
    cx: &mut Checker<'a>,
    root: &'a Spanned<DeTable<'a>>,
    config_file: &Path,
) -> Settings {
    let table = root.get_ref();
    let whole = Spanned::new(root.span(), DeValue::Table(table.clone()));
    let raw: RawConfig = cx.deserialize("", &whole).unwrap_or_default();

    let data_dir = cx
        .path("data_dir", raw.data_dir.as_ref())
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
    let log_dir = data_dir.join("log");

    // Each table on its own, so a mistake in one does not hide the others.
    let raw_log: RawLog = sub_table(cx, table, "log").unwrap_or_default();
    let raw_api: RawApi = sub_table(cx, table, "api").unwrap_or_default();
    let raw_daemon: RawDaemon = sub_table(cx, table, "daemon").unwrap_or_default();
    let raw_logging: RawLogging = sub_table(cx, table, "logging").unwrap_or_default();

    let log = log::check_log(cx, &raw_log);
    let api = ApiSettings {
        listen: cx.listen("api.listen", raw_api.listen.as_ref(), DEFAULT_API_LISTEN),
    };
    if let Some(v) = &raw_api.listen {
        if !api.listen.ip().is_loopback() {
            cx.warn(
                Some(v.span()),
                "api.listen",
                format!(
                    "{} is reachable from other machines and /metrics has no authentication: \
                     fine for a Prometheus scraper on the network, but firewall the port (or \
                     listen on 127.0.0.1)",
                    api.listen
                ),
            );
        }
    }
    let daemon = check_daemon(cx, &raw_daemon);
    let logging = check_logging(cx, &raw_logging);

    let (mut sources, mut source_names) = sources::check_sources(
        cx,
        &SourceEnv {
            log: &log,
            data_dir: &data_dir,
        },
    );
    // Sorted whatever order toml's map keeps (insertion order if some other
    // crate turns on its `preserve_order` feature), so messages are stable.
    sources.sort_by(|a, b| a.name.cmp(&b.name));
    source_names.sort();
    let mut sinks = sinks::check_sinks(cx, &data_dir, &source_names);
    sinks.sort_by(|a, b| a.name.cmp(&b.name));

    check_listeners(cx, &api, &sources);
    check_paths(cx, &data_dir, &log_dir, &sources, &sinks);
    check_flow(cx, &sources, &sinks);

    Settings {
        config_file: config_file.to_path_buf(),
        data_dir,
        log,
        api,
        daemon,
        logging,
        sources: sources.into_iter().map(|s| (s.name.clone(), s)).collect(),
        sinks: sinks.into_iter().map(|s| (s.name.clone(), s)).collect(),
        warnings: Vec::new(),
        origins: BTreeMap::new(),
        effective: String::new(),
        secrets: Vec::new(),
    }
}

fn sub_table<'a, T: serde::de::DeserializeOwned>(
    cx: &mut Checker<'a>,
    root: &'a DeTable<'a>,
    name: &str,
) -> Option<T> {
    let value = root.get(name)?;
    cx.deserialize(name, value)
}

fn check_daemon(cx: &mut Checker<'_>, raw: &RawDaemon) -> DaemonSettings {
    let shutdown_timeout = cx.duration(
        "daemon.shutdown_timeout",
        raw.shutdown_timeout.as_ref(),
        DEFAULT_SHUTDOWN_TIMEOUT,
        Some("holdfast needs a moment to persist cursors and flush tailed lines on stop"),
    );
    if let Some(v) = &raw.shutdown_timeout {
        if shutdown_timeout >= SYSTEMD_STOP_TIMEOUT {
            cx.warn(
                Some(v.span()),
                "daemon.shutdown_timeout",
                format!(
                    "{} is not below the shipped systemd unit's TimeoutStopSec={}: systemd would \
                     kill holdfast before its drain ends; lower it, or raise TimeoutStopSec in a \
                     drop-in (systemctl edit holdfast) above it",
                    format_duration(shutdown_timeout),
                    SYSTEMD_STOP_TIMEOUT.as_secs()
                ),
            );
        }
    }
    let watchdog = match &raw.watchdog {
        Some(v) => {
            cx.note("daemon.watchdog", v);
            *v.get_ref()
        }
        None => true,
    };
    let worker_threads = raw.worker_threads.as_ref().map(|_| {
        cx.count(
            "daemon.worker_threads",
            raw.worker_threads.as_ref(),
            DEFAULT_WORKER_THREADS as u64,
            1..=64,
        ) as usize
    });
    let malloc_arenas = cx.count(
        "daemon.malloc_arenas",
        raw.malloc_arenas.as_ref(),
        DEFAULT_MALLOC_ARENAS as u64,
        1..=64,
    ) as usize;
    // Unset by default: glibc's threshold starts at 128 KiB but rises to the
    // largest block freed so far, so after the first 1 MiB chunk or request
    // body is freed, every later one is carved from an arena, whose freed
    // space stays in the process and fragments. Fixed low, each large
    // buffer is an mmap/munmap pair and fresh page faults: about 15-20 MiB
    // less peak RSS at full speed, but 40% more CPU per line (measured in
    // the e2e bench), so it is the operator's trade to make.
    let malloc_mmap_threshold = raw.malloc_mmap_threshold.as_ref().map(|v| {
        cx.size(
            "daemon.malloc_mmap_threshold",
            Some(v),
            MAX_MALLOC_MMAP_THRESHOLD,
            4 << 10,
            MAX_MALLOC_MMAP_THRESHOLD,
        ) as usize
    });
    DaemonSettings {
        shutdown_timeout,
        watchdog,
        worker_threads,
        malloc_arenas,
        malloc_mmap_threshold,
    }
}

const LEVELS: &[&str] = &["error", "warn", "info", "debug", "trace", "off"];

fn check_logging(cx: &mut Checker<'_>, raw: &RawLogging) -> LoggingSettings {
    let format = match &raw.format {
        Some(v) => {
            cx.note("logging.format", v);
            *v.get_ref()
        }
        None => LogFormat::Auto,
    };
    let mut level = "info".to_string();
    if let Some(v) = &raw.level {
        cx.note("logging.level", v);
        match check_level(v.get_ref()) {
            Ok(()) => level = v.get_ref().trim().to_string(),
            Err(why) => cx.error(Some(v.span()), "logging.level", why),
        }
    }
    LoggingSettings { level, format }
}

/// A bare word must be a level: tracing would read `"inof"` as "everything
/// from a module named inof", which is never what was meant.
fn check_level(text: &str) -> Result<(), String> {
    let t = text.trim();
    let help = "use one of error, warn, info, debug, trace, off, or a directive like \"info,holdfast=debug\"";
    if t.is_empty() {
        return Err(format!("must not be empty: {help}"));
    }
    if t.chars().all(|c| c.is_ascii_alphabetic()) {
        if LEVELS.contains(&t.to_ascii_lowercase().as_str()) {
            return Ok(());
        }
        let suggestion = suggestion_suffix(&t.to_ascii_lowercase(), LEVELS.iter().copied(), '"');
        return Err(format!("\"{t}\" is not a level{suggestion}: {help}"));
    }
    tracing_subscriber::EnvFilter::try_new(t)
        .map(|_| ())
        .map_err(|e| format!("\"{t}\" is not a valid filter ({e}): {help}"))
}

/// Two listeners on the same port where one address covers the other would
/// fail to bind at startup; say so now, naming both keys.
fn check_listeners(cx: &mut Checker<'_>, api: &ApiSettings, sources: &[SourceSettings]) {
    let mut listeners: Vec<(String, SocketAddr)> = vec![("api.listen".to_string(), api.listen)];
    for s in sources {
        for (key, listen) in s.kind.component().listens() {
            listeners.push((format!("sources.{}.{key}", s.name), listen));
        }
    }
    // A refused address is only a stand-in: nothing really listens there.
    listeners.retain(|(key, _)| !cx.is_refused(key));
    for (i, (key, addr)) in listeners.iter().enumerate() {
        for (other_key, other) in &listeners[..i] {
            let overlap = addr.port() != 0
                && addr.port() == other.port()
                && (addr.ip() == other.ip()
                    || addr.ip().is_unspecified()
                    || other.ip().is_unspecified());
            if !overlap {
                continue;
            }
            // Point at whichever of the two is written in the file.
            let describe = |k: &str, a: &SocketAddr, cx: &Checker<'_>| match span_for_key(cx, k) {
                Some(_) => format!("{k} ({a})"),
                None => format!("{k} ({a}, the default)"),
            };
            let (at, this, that) = match (span_for_key(cx, key), span_for_key(cx, other_key)) {
                (Some(span), _) => (
                    Some((span, key.clone())),
                    describe(key, addr, cx),
                    describe(other_key, other, cx),
                ),
                (None, Some(span)) => (
                    Some((span, other_key.clone())),
                    describe(other_key, other, cx),
                    describe(key, addr, cx),
                ),
                (None, None) => (
                    None,
                    describe(key, addr, cx),
                    describe(other_key, other, cx),
                ),
            };
            let message = format!("{this} collides with {that}: two listeners cannot share a port; change one of them");
            match at {
                Some((span, k)) => cx.error(Some(span), &k, message),
                None => {
                    let span = key
                        .rsplit_once('.')
                        .and_then(|(table, _)| span_for_key(cx, table));
                    cx.error(span, key, message)
                }
            }
        }
    }
}

/// The span of a dotted key set in the file.
pub(crate) fn span_for_key(cx: &Checker<'_>, key: &str) -> Option<Range<usize>> {
    let parts: Vec<&str> = key.split('.').collect();
    cx.span_of(&parts)
}

/// Output directories must not overlap each other or the log: a sink's
/// clean-up of old files would delete them; a file source must not tail
/// holdfast's own output.
fn check_paths(
    cx: &mut Checker<'_>,
    data_dir: &Path,
    log_dir: &Path,
    sources: &[SourceSettings],
    sinks: &[SinkSettings],
) {
    let mut dirs: Vec<(String, &Path)> = Vec::new();
    for sink in sinks {
        let Some(dir) = sink.kind.component().output_dir() else {
            continue;
        };
        let key = format!("sinks.{}.path", sink.name);
        let span = span_for_key(cx, &key).or_else(|| cx.span_of(&["sinks", &sink.name]));
        let clash = if dir.starts_with(log_dir) || log_dir.starts_with(dir) {
            Some(format!(
                "{} overlaps the log directory {}: the sink removes old files in its directory and \
                 would delete log segments; choose a directory outside it, like {}",
                dir.display(),
                log_dir.display(),
                data_dir.join("out").join(&sink.name).display()
            ))
        } else {
            dirs.iter()
                .find(|(_, other)| dir.starts_with(other) || other.starts_with(dir))
                .map(|(other_key, other)| {
                    format!(
                        "{} overlaps {other_key} ({}): each file sink needs a directory of its own, \
                         since it removes its oldest files; choose another path",
                        dir.display(),
                        other.display()
                    )
                })
        };
        if let Some(message) = clash {
            cx.error(span, &key, message);
        }
        dirs.push((key, dir));
    }
    for source in sources {
        for (i, pattern) in source.kind.component().tails().iter().enumerate() {
            let p = Path::new(pattern);
            let own = if p.starts_with(log_dir) {
                Some(log_dir.display().to_string())
            } else {
                dirs.iter()
                    .find(|(_, d)| p.starts_with(d))
                    .map(|(k, d)| format!("{k} ({})", d.display()))
            };
            if let Some(what) = own {
                let key = format!("sources.{}.include[{i}]", source.name);
                let span = cx.span_of_element(&["sources", &source.name, "include"], i);
                cx.error(
                    span,
                    &key,
                    format!(
                        "\"{pattern}\" is inside holdfast's own output, {what}: tailing it would \
                         feed holdfast its own events in a loop; remove it from include"
                    ),
                );
            }
        }
    }
}

/// A source that no sink reads fills the log for nothing.
fn check_flow(cx: &mut Checker<'_>, sources: &[SourceSettings], sinks: &[SinkSettings]) {
    for source in sources {
        if !sinks.iter().any(|s| s.inputs.contains(&source.name)) {
            let key = format!("sources.{}", source.name);
            let span = cx.span_of(&["sources", &source.name]);
            cx.warn(
                span,
                &key,
                format!(
                    "no sink reads this source: its events are stored in the log and never sent \
                     anywhere; add \"{}\" to a sink's inputs, or remove the source",
                    source.name
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_directives() {
        let accepted = [
            "info",
            "DEBUG",
            "info,holdfast=debug",
            "holdfast::sinks=trace",
        ];
        for level in accepted {
            assert!(check_level(level).is_ok(), "{level}");
        }
        assert!(check_level("inof")
            .unwrap_err()
            .contains("did you mean \"info\""));
        assert!(check_level("").is_err());
    }
}
