//! `file` source benchmark: lines from files into the log with
//! `fsync = "always"`.
//!
//! ```text
//! cargo bench --bench file_source                          # ≥ 1 GiB, a minute or two
//! HOLDFAST_BENCH_QUICK=1 cargo bench --bench file_source   # 64 MiB smoke run
//! HOLDFAST_BENCH_DIR=/data/tmp cargo bench --bench file_source
//! ```
//!
//! The Loghub samples (`tests/fixtures/loghub/`, CRLF and all) are
//! concatenated, over and over, into files of at least 1 GiB in all (a
//! newline added where a sample lacks a final one). The files are written
//! before the clock starts, so they are read from the page cache: the
//! figures are the source's own cost plus the log's durable appends, not
//! the disk's read speed. Then a fresh log is opened (`fsync = "always"`,
//! 64 MiB segments, no consumers) and the source runs until every line is
//! acknowledged in the log. Two shapes: one large file, and the same bytes
//! spread over 16 files read at once.
//!
//! Reported per shape: lines/s and MB/s of input, CPU seconds (user +
//! system, `getrusage(RUSAGE_SELF)`) per million lines, peak RSS (`VmHWM`,
//! reset before each shape through `/proc/self/clear_refs`), and bytes the
//! process caused to be written (`/proc/self/io` `write_bytes`) per input
//! byte. Target: ≥ 500,000 lines/s on a 2-core machine.
//!
//! Two more rows (issue 17) read the same Loghub lines written as JSON
//! application logs (`{"time":…,"level":…,"msg":<the line>}`, a tenth of
//! them DEBUG) from one file: `json plain` stores them as they are, `json
//! chain` runs a processing chain first (JSON parse with `msg` as the body,
//! resource and record labels, a filter dropping DEBUG). Target for the
//! chain: ≥ 300,000 lines/s. `HOLDFAST_BENCH_SHAPES=1,16,json,chain` picks
//! the rows.
//!
//! Two idle rows (`idle`, `idle-poll`, issue 32) measure what a source
//! that has read everything costs while nothing is written: 10,000 files
//! of two lines each (more than the descriptor cap, so most are closed),
//! then 10 s of CPU with the default `scan_interval`, with inotify and
//! with polling alone. Target with inotify: < 1 % of a core.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use holdfast::metrics::Metrics;
use holdfast::seglog::{FsyncPolicy, Log, LogOptions, WhenFull};
use holdfast::sources::file::{self, FileSourceOptions};
use tokio_util::sync::CancellationToken;

const TARGET_LINES_PER_SEC: f64 = 500_000.0;
const TARGET_CHAIN_LINES_PER_SEC: f64 = 300_000.0;

/// What a row reads and does.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Plain,
    /// The corpus as JSON lines, stored as they are.
    Json,
    /// The corpus as JSON lines, through a parse + label + filter chain.
    Chain,
}

/// The Loghub lines as JSON application logs; every tenth is DEBUG.
/// Returns the bytes and how many DEBUG lines they hold.
fn as_json(unit: &[u8]) -> (Vec<u8>, u64) {
    let mut out = Vec::with_capacity(unit.len() * 2);
    let mut debug = 0;
    for (i, l) in String::from_utf8_lossy(unit)
        .lines()
        .filter(|l| !l.is_empty() && *l != "\r")
        .enumerate()
    {
        let level = if i % 10 == 3 {
            debug += 1;
            "DEBUG"
        } else if l.contains("ERROR") || l.contains("error") {
            "ERROR"
        } else {
            "INFO"
        };
        let rec = serde_json::json!({
            "time": "2024-05-01T12:00:00.123Z",
            "level": level,
            "thread": i % 7,
            "msg": l.trim_end_matches('\r'),
        });
        out.extend_from_slice(rec.to_string().as_bytes());
        out.push(b'\n');
    }
    (out, debug)
}

/// The chain of the `json chain` row.
fn chain() -> holdfast::process::Chain {
    use holdfast::process::filter::{Action, Condition, FieldTest, Filter};
    use holdfast::process::parse::{Format, Parser};
    use holdfast::process::{Chain, Kind, Labels, Step};
    Chain {
        labels: Labels {
            resource: vec![("site".into(), "bench-site".into())],
            attributes: vec![("device.id".into(), "dev-1".into())],
        },
        steps: vec![
            Step {
                name: "json".into(),
                kind: Kind::Parse(Parser {
                    format: Format::Json {
                        max_depth: holdfast::process::parse::json::MAX_DEPTH,
                    },
                    field: None,
                    body_key: Some("msg".into()),
                }),
            },
            Step {
                name: "no_debug".into(),
                kind: Kind::Filter(Filter {
                    action: Action::Drop,
                    when: Condition {
                        field: Some(("level".into(), FieldTest::Equals("DEBUG".into()))),
                        ..Default::default()
                    },
                }),
            },
        ],
    }
}

fn loghub() -> Vec<u8> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/loghub");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/fixtures/loghub")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    names.sort();
    let mut all = Vec::new();
    for n in names {
        let mut b = std::fs::read(&n).unwrap();
        if b.last() != Some(&b'\n') {
            b.push(b'\n');
        }
        all.extend_from_slice(&b);
    }
    all
}

fn count_lines(b: &[u8]) -> u64 {
    b.split(|&c| c == b'\n')
        .filter(|l| !l.is_empty() && *l != b"\r")
        .count() as u64
}

/// Writes `files` files holding `total` bytes of Loghub lines in all (as
/// JSON unless `mode` is plain). Returns the number of lines, of bytes, and
/// of lines a chain drops.
fn write_corpus(dir: &Path, files: usize, total: u64, mode: Mode) -> (u64, u64, u64) {
    let (unit, unit_debug) = match mode {
        Mode::Plain => (loghub(), 0),
        _ => as_json(&loghub()),
    };
    let unit_lines = count_lines(&unit);
    let per_file = total.div_ceil(files as u64).div_ceil(unit.len() as u64);
    let (mut lines, mut bytes, mut debug) = (0, 0, 0);
    for i in 0..files {
        let mut f = std::io::BufWriter::with_capacity(
            8 << 20,
            std::fs::File::create(dir.join(format!("corpus-{i:02}.log"))).unwrap(),
        );
        // A first line of its own, so files are not copies of each other
        // (the source holds back a file that looks like a copy of another).
        writeln!(f, "corpus file {i}").unwrap();
        lines += 1;
        for _ in 0..per_file {
            f.write_all(&unit).unwrap();
        }
        f.into_inner().unwrap().sync_all().unwrap();
        lines += per_file * unit_lines;
        bytes += per_file * unit.len() as u64;
        debug += per_file * unit_debug;
    }
    (lines, bytes, debug)
}

fn cpu_seconds() -> f64 {
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) };
    assert_eq!(rc, 0);
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(r.ru_utime) + t(r.ru_stime)
}

fn proc_field(file: &str, key: &str) -> u64 {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

struct Figures {
    shape: String,
    lines: u64,
    bytes: u64,
    secs: f64,
    cpu: f64,
    peak_rss_kib: u64,
    written: u64,
}

fn run_shape(
    rt: &tokio::runtime::Runtime,
    root: &Path,
    files: usize,
    total: u64,
    mode: Mode,
) -> Figures {
    let dir = root.join(format!("shape-{files}"));
    let input = dir.join("files");
    std::fs::create_dir_all(&input).unwrap();
    eprintln!("writing {files} file(s), {} MiB ...", total >> 20);
    let (lines, bytes, debug) = write_corpus(&input, files, total, mode);
    // The chain drops the DEBUG lines: the log holds the rest.
    let events = if mode == Mode::Chain {
        lines - debug
    } else {
        lines
    };
    let log = Log::open(
        dir.join("log"),
        LogOptions {
            segment_bytes: 64 << 20,
            max_bytes: 64 << 30,
            fsync: FsyncPolicy::Always,
            when_full: WhenFull::Block,
            ..LogOptions::default()
        },
    )
    .unwrap();
    let opts = FileSourceOptions {
        start_at: file::StartAt::Beginning,
        ..FileSourceOptions::new(
            vec![input.join("*.log").to_string_lossy().into_owned()],
            dir.join("checkpoints/bench"),
        )
    };
    let opts = FileSourceOptions {
        process: (mode == Mode::Chain).then(|| Arc::new(chain())),
        ..opts
    };
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let written0 = proc_field("/proc/self/io", "write_bytes:");
    let cpu0 = cpu_seconds();
    let started = Instant::now();
    eprintln!("reading {lines} lines ...");
    rt.block_on(async {
        let stop = CancellationToken::new();
        let task = tokio::spawn(file::run(
            "bench".into(),
            opts,
            log.clone(),
            Arc::new(Metrics::new(None)),
            stop.clone(),
        ));
        while log.next_seq() < events {
            assert!(!task.is_finished(), "the source stopped: {:?}", task.await);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        stop.cancel();
        task.await.unwrap().unwrap();
    });
    let secs = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let written = proc_field("/proc/self/io", "write_bytes:") - written0;
    let peak_rss_kib = proc_field("/proc/self/status", "VmHWM:");
    assert_eq!(
        log.next_seq(),
        events,
        "the log holds a different number of events than lines kept"
    );
    log.close_blocking().unwrap();
    drop(log);
    let _ = std::fs::remove_dir_all(&dir);
    Figures {
        shape: match mode {
            Mode::Json => "json plain".into(),
            Mode::Chain => "json chain".into(),
            Mode::Plain if files == 1 => "1 file".into(),
            Mode::Plain => format!("{files} files"),
        },
        lines,
        bytes,
        secs,
        cpu,
        peak_rss_kib,
        written,
    }
}

const IDLE_FILES: usize = 10_000;
const IDLE_SECS: u64 = 10;

/// The idle rows: CPU per second of wall time while 10,000 read files sit
/// still, as a share of one core.
fn run_idle(rt: &tokio::runtime::Runtime, root: &Path, poll_only: bool) -> f64 {
    let dir = root.join(if poll_only { "idle-poll" } else { "idle" });
    let input = dir.join("files");
    std::fs::create_dir_all(&input).unwrap();
    for i in 0..IDLE_FILES {
        std::fs::write(
            input.join(format!("f{i:05}.log")),
            format!("file {i} line 1\nfile {i} line 2\n"),
        )
        .unwrap();
    }
    let log = Log::open(dir.join("log"), LogOptions::default()).unwrap();
    let opts = FileSourceOptions {
        start_at: file::StartAt::Beginning,
        ..FileSourceOptions::new(
            vec![input.join("*.log").to_string_lossy().into_owned()],
            dir.join("checkpoints/bench"),
        )
    };
    // Read when the source starts: only this row's source sees it.
    std::env::set_var(file::POLL_ONLY_ENV, if poll_only { "1" } else { "0" });
    let share = rt.block_on(async {
        let stop = CancellationToken::new();
        let task = tokio::spawn(file::run(
            "bench".into(),
            opts,
            log.clone(),
            Arc::new(Metrics::new(None)),
            stop.clone(),
        ));
        while log.next_seq() < 2 * IDLE_FILES as u64 {
            assert!(!task.is_finished(), "the source stopped: {:?}", task.await);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Let the checkpoint writes and closes for the cap settle first.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let cpu0 = cpu_seconds();
        let t0 = Instant::now();
        tokio::time::sleep(Duration::from_secs(IDLE_SECS)).await;
        let share = (cpu_seconds() - cpu0) / t0.elapsed().as_secs_f64();
        stop.cancel();
        task.await.unwrap().unwrap();
        share
    });
    std::env::remove_var(file::POLL_ONLY_ENV);
    log.close_blocking().unwrap();
    drop(log);
    let _ = std::fs::remove_dir_all(&dir);
    share
}

fn main() {
    let quick = std::env::var("HOLDFAST_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let total: u64 = if quick { 64 << 20 } else { 1 << 30 };
    let root = match std::env::var_os("HOLDFAST_BENCH_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
    };
    std::fs::create_dir_all(&root).unwrap();
    let tmp = tempfile::Builder::new()
        .prefix("file-source-bench-")
        .tempdir_in(&root)
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "holdfast file source benchmark ({}): Loghub samples, {} MiB per shape, fsync = always, {cores} cores",
        if quick { "QUICK smoke run: small sizes, figures are indicative only" } else { "full run" },
        total >> 20
    );
    println!(
        "{:<10} {:>10} {:>8} {:>12} {:>8} {:>16} {:>12} {:>14}  target",
        "shape",
        "lines",
        "seconds",
        "lines/s",
        "MB/s",
        "CPU s/M lines",
        "peak RSS",
        "written/input"
    );
    // HOLDFAST_BENCH_SHAPES=1,16,json,chain picks the rows (a number is
    // the files of a plain row).
    let shapes: Vec<(usize, Mode)> = std::env::var("HOLDFAST_BENCH_SHAPES")
        .ok()
        .map(|s| {
            s.split(',')
                .filter_map(|x| match x.trim() {
                    "json" => Some((1, Mode::Json)),
                    "chain" => Some((1, Mode::Chain)),
                    "idle" | "idle-poll" => None,
                    n => n.parse().ok().map(|n| (n, Mode::Plain)),
                })
                .collect()
        })
        .unwrap_or_else(|| {
            vec![
                (1, Mode::Plain),
                (16, Mode::Plain),
                (1, Mode::Json),
                (1, Mode::Chain),
            ]
        });
    let picked = std::env::var("HOLDFAST_BENCH_SHAPES").ok();
    let wants = |row: &str| {
        picked
            .as_deref()
            .is_none_or(|p| p.split(',').any(|x| x.trim() == row))
    };
    for (files, mode) in shapes {
        let f = run_shape(&rt, tmp.path(), files, total, mode);
        let lps = f.lines as f64 / f.secs;
        let target = if mode == Mode::Chain {
            TARGET_CHAIN_LINES_PER_SEC
        } else {
            TARGET_LINES_PER_SEC
        };
        println!(
            "{:<10} {:>10} {:>8.2} {:>12.0} {:>8.1} {:>16.3} {:>8.1} MiB {:>14.2}  {} (≥ {:.0} lines/s)",
            f.shape,
            f.lines,
            f.secs,
            lps,
            f.bytes as f64 / f.secs / 1e6,
            f.cpu / (f.lines as f64 / 1e6),
            f.peak_rss_kib as f64 / 1024.0,
            f.written as f64 / f.bytes as f64,
            if lps >= target { "met" } else { "NOT met" },
            target
        );
    }
    for (row, poll_only) in [("idle", false), ("idle-poll", true)] {
        if !wants(row) {
            continue;
        }
        let share = run_idle(&rt, tmp.path(), poll_only);
        println!(
            "{row:<10} {IDLE_FILES} files read, then {IDLE_SECS} s idle ({}): {:.2} % of a core{}",
            if poll_only { "polling only" } else { "inotify" },
            share * 100.0,
            if poll_only {
                String::new()
            } else {
                format!("  {} (< 1 %)", if share < 0.01 { "met" } else { "NOT met" })
            }
        );
    }
}
