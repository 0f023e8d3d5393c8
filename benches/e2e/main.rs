//! End-to-end benchmark: the real `holdfast run` binary, fed through its
//! real inputs, delivering to local receivers over HTTP.
//!
//! ```text
//! cargo bench --bench e2e                          # 1 GiB of lines, a few minutes, ~6 GiB of disk at peak
//! HOLDFAST_E2E_GIB=0.1 cargo bench --bench e2e     # a quick run (figures indicative only)
//! HOLDFAST_E2E_SHAPE=app HOLDFAST_E2E_GIB=0.18 cargo bench --bench e2e   # issue 32's busy application log: ~1,000,000 lines of ~195 bytes in one file
//! HOLDFAST_E2E_ONLY=file,otlp,restart,syslog-ng cargo bench --bench e2e   # pick phases
//! HOLDFAST_E2E_ONLY=file,syslog-ng-bulk cargo bench --bench e2e   # holdfast and syslog-ng into the same _bulk receiver: lines/s and the receiver's CPU per document side by side
//! HOLDFAST_E2E_ONLY=steady cargo bench --bench e2e   # 10,000 lines/s for 20 s (HOLDFAST_E2E_STEADY_RATE, _SECS)
//! HOLDFAST_E2E_ONLY=crash,crash-loop,outage cargo bench --bench e2e  # kill -9 and outage phases (~2-3 min; HOLDFAST_E2E_PHASES works too)
//! HOLDFAST_E2E_CRASH_LINES=3000000 HOLDFAST_E2E_CRASH_RUNS=5 ...    # their size (default 1,000,000 lines, 3 runs)
//! HOLDFAST_BENCH_DIR=/data/tmp cargo bench --bench e2e          # where the files and logs go
//! HOLDFAST_E2E_COMPRESSION=gzip cargo bench --bench e2e         # sinks compress (default: none)
//! HOLDFAST_E2E_SINK_TOML='batch_max_events = 5000;concurrency = 4' cargo bench --bench e2e  # try settings
//! HOLDFAST_E2E_LOG_TOML='segment_size = "16MiB"' cargo bench --bench e2e
//! HOLDFAST_E2E_DAEMON_TOML='malloc_arenas = 8' cargo bench --bench e2e
//! ```
//!
//! Three phases, each a fresh `holdfast run` (the release binary Cargo
//! builds for this bench) with `fsync = "always"` and its own data
//! directory, on the same file system as the input:
//!
//! 1. **file → log → `elasticsearch`.** `HOLDFAST_E2E_GIB` GiB (default 1)
//!    of Loghub lines (`tests/fixtures/loghub/*.log`, cycled, each line
//!    prefixed with its own number so that no two are alike) in 4 files,
//!    written and synced before the agent starts, so they are read from the
//!    page cache. The clock runs from spawning the agent until the receiver
//!    has accepted every line.
//! 2. **OTLP/HTTP → log → `otlp_http`.** 8 keep-alive clients (one tokio
//!    thread in this process) post protobuf `ExportLogsServiceRequest`s of
//!    200 records each (Loghub lines as bodies, an SDK-like resource and
//!    scope, a few attributes; a pool of distinct requests sent in turn) until
//!    `HOLDFAST_E2E_OTLP_GIB` GiB of request bodies (default a quarter of
//!    `HOLDFAST_E2E_GIB`) were accepted. The clock runs until the receiver
//!    has every record.
//! 3. **Restart with a backlog.** The agent ingests the phase-1 files while
//!    the receiver answers 503 to everything, is stopped with SIGTERM once
//!    every line is in the log, and started again with the receiver
//!    accepting: the figure is the time from spawning the process to the
//!    receiver accepting its first document. The drain of the whole backlog
//!    that follows is timed too (the sink alone, with no intake).
//!
//!    **steady** (after it): one file written at 10,000 lines/s
//!    (`HOLDFAST_E2E_STEADY_RATE`) for 20 s (`HOLDFAST_E2E_STEADY_SECS`),
//!    tailed into `elasticsearch`: peak RSS and CPU of an agent that keeps
//!    up, as most devices run it.
//! 4. **syslog-ng**, if installed (`apt-get install syslog-ng-core`): the
//!    phase-1 files tailed into one file (`flags(no-parse)`, `fsync(no)`,
//!    flow control), timed until the output has every line: the yardstick
//!    the issue's throughput target is set against.
//! 5. **crash**: `HOLDFAST_E2E_CRASH_LINES` numbered syslog-style lines
//!    (`lineno=0000000042` in each) in 4 files, file -> `_bulk`; the agent
//!    is killed with SIGKILL once 40% of the lines were delivered, started
//!    again on the same state and run to the end. The receiver counts every
//!    accepted document by its line number: events delivered twice per kill,
//!    lines lost, and the log's appends per input line (its next sequence
//!    number at the end, read with the library's read-only reader).
//!    `HOLDFAST_E2E_CRASH_RUNS` runs (default 3).
//! 6. **crash-loop**: the same lines; ten instances each killed 250-970 ms
//!    after its spawn, then one run to the end: the same counts.
//! 7. **outage**: the receiver answers 500 for the first 10 s from the
//!    spawn, then accepts: time to the last line, and from the receiver's
//!    return to its first accepted document.
//!
//!    Phases 5-7 run syslog-ng too, on the same numbered files, posting
//!    `_bulk` bodies with its `http()` destination (needs
//!    `syslog-ng-mod-http`) with flow control and no disk buffer, batches and
//!    workers as holdfast's sink defaults, `time-reopen(1)` and `retries`
//!    high so that an outage delays lines rather than drops them. A run ends
//!    when every line is in, or when none came for 75 s (the missing ones
//!    are then counted lost). The disk's fdatasync and sequential limits
//!    are measured first, beside them.
//!
//! Figures come from the agent's process: CPU is `utime + stime` from
//! `/proc/PID/stat`, peak RSS is `VmHWM` from `/proc/PID/status` (it counts
//! file-backed pages of mapped segments), bytes written is `write_bytes`
//! from `/proc/PID/io` (pages the process dirtied, whether the kernel wrote
//! them back yet or not), divided by the input bytes (file bytes, or OTLP
//! request bodies as sent). Events/s and MB/s are input over wall time.
//!
//! The receivers run on one thread of this process (a current-thread tokio
//! runtime with a hyper 1.x server) and share the machine's cores with the
//! agent: `_bulk` is answered per item (`errors: false`, `create.status 201`
//! with each `_id`) from a `memchr` scan of the body, not a JSON parse; OTLP
//! records are counted by walking the protobuf fields, and the answer is an
//! empty `ExportLogsServiceResponse`. Their CPU, and the clients', is shown
//! apart so that the agent's figures can be judged on a busy machine.
//!
//! Where things are: [`input`] writes the input files, [`receiver`] runs the
//! `_bulk` and `/v1/logs` receivers, [`agent`] runs `holdfast run` on the
//! TOML of [`config`], [`measure`] reads `/proc`; one module per phase
//! ([`file_phase`], [`otlp_phase`] with [`otlp_clients`], [`restart`], [`steady`],
//! [`syslog_ng`], [`crash`], [`crash_loop`], [`outage`]), the last three
//! sharing [`contender`] ([`holdfast_under_test`], [`syslog_ng_under_test`])
//! and [`disk_limits`]; [`throughput`] and [`envelope`] print the shared rows.

mod agent;
mod config;
mod contender;
mod crash;
mod crash_loop;
mod disk_limits;
mod envelope;
mod file_phase;
mod holdfast_under_test;
mod input;
mod measure;
mod otlp_clients;
mod otlp_phase;
mod outage;
mod receiver;
mod restart;
mod steady;
mod syslog_ng;
mod syslog_ng_bulk;
mod syslog_ng_under_test;
#[path = "../common/table.rs"]
mod table;
mod throughput;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::crash::crash_phase;
use crate::crash_loop::crash_loop_phase;
use crate::disk_limits::disk_limits;
use crate::file_phase::file_phase;
use crate::input::{write_corpus, write_numbered_corpus};
use crate::otlp_phase::otlp_phase;
use crate::outage::outage_phase;
use crate::receiver::Receiver;
use crate::restart::restart_phase;
use crate::steady::steady_phase;
use crate::syslog_ng::syslog_ng_phase;
use crate::syslog_ng_bulk::syslog_ng_bulk_phase;
use crate::syslog_ng_under_test::SYSLOG_NG_HTTP_SETTINGS;
use crate::table::{thousands, Table};

/// The agent under test: the release binary Cargo builds for this bench,
/// or `HOLDFAST_BENCH_BIN` (another build, to compare two versions with
/// one bench binary).
fn bin() -> String {
    std::env::var("HOLDFAST_BENCH_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_holdfast").to_string())
}
const FILES: usize = 4;

/// Generous bounds for a slow, shared machine: a bench that hangs is worse
/// than one that says what it was waiting for.
const PHASE_DEADLINE: Duration = Duration::from_secs(1800);

fn env_f64(key: &str, default: f64) -> f64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn main() {
    let gib = env_f64("HOLDFAST_E2E_GIB", 1.0);
    let otlp_gib = env_f64("HOLDFAST_E2E_OTLP_GIB", gib / 4.0);
    let only = std::env::var("HOLDFAST_E2E_ONLY")
        .or_else(|_| std::env::var("HOLDFAST_E2E_PHASES"))
        .unwrap_or_else(|_| {
            "file,otlp,restart,steady,syslog-ng,syslog-ng-bulk,crash,crash-loop,outage".into()
        });
    let crash_lines = env_f64("HOLDFAST_E2E_CRASH_LINES", 1_000_000.0).max(1000.0) as u64;
    let crash_runs = env_f64("HOLDFAST_E2E_CRASH_RUNS", 3.0).max(1.0) as u32;
    let phase = |p: &str| only.split(',').any(|x| x.trim() == p);
    let gzip = std::env::var("HOLDFAST_E2E_COMPRESSION").is_ok_and(|v| v == "gzip");
    let root = match std::env::var_os("HOLDFAST_BENCH_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
    };
    std::fs::create_dir_all(&root).unwrap();
    let tmp = tempfile::Builder::new()
        .prefix("e2e-bench-")
        .tempdir_in(&root)
        .unwrap();

    let mut table = Table::new(54, 44, true);
    table.note(format!(
        "holdfast end-to-end benchmark: {} ({} cores, {}), binary {}",
        if gib < 1.0 {
            "SCALED-DOWN run, figures are indicative only"
        } else {
            "full run"
        },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model(),
        bin()
    ));
    for var in [
        "HOLDFAST_E2E_LOG_TOML",
        "HOLDFAST_E2E_SINK_TOML",
        "HOLDFAST_E2E_DAEMON_TOML",
        "MALLOC_ARENA_MAX",
    ] {
        if let Ok(v) = std::env::var(var) {
            table.note(format!("{var}={v}"));
        }
    }
    table.note(format!(
        "load average at start: {}; sinks' compression: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        if gzip { "gzip" } else { "none" }
    ));

    let receiver = Receiver::start();
    table.note(format!(
        "receivers: 127.0.0.1:{} on one thread of this process (_bulk and /v1/logs)",
        receiver.addr.port()
    ));

    let input = tmp.path().join("input");
    std::fs::create_dir_all(&input).unwrap();
    let corpus =
        if phase("file") || phase("restart") || phase("syslog-ng") || phase("syslog-ng-bulk") {
            let total = (gib * (1u64 << 30) as f64) as u64;
            eprintln!(
                "writing {} MiB of Loghub lines into {FILES} files ...",
                total >> 20
            );
            let t = Instant::now();
            let c = write_corpus(&input, FILES, total);
            eprintln!(
                "  {} lines, {} bytes, in {:.1}s",
                c.lines,
                c.bytes,
                t.elapsed().as_secs_f64()
            );
            table.note(format!(
                "input: {} {}, {:.1} MiB in {} files ({:.0} bytes a line on average)",
                thousands(c.lines as f64),
                if crate::input::app_shape() {
                    "application-log lines (HOLDFAST_E2E_SHAPE=app)"
                } else {
                    "Loghub lines"
                },
                c.bytes as f64 / (1 << 20) as f64,
                if crate::input::app_shape() { 1 } else { FILES },
                c.bytes as f64 / c.lines as f64
            ));
            Some(c)
        } else {
            None
        };

    let mut holdfast_file = None;
    if let (true, Some(c)) = (phase("file"), &corpus) {
        holdfast_file = Some(file_phase(
            &mut table,
            tmp.path(),
            &input,
            c,
            &receiver,
            gzip,
        ));
    }
    if phase("otlp") {
        otlp_phase(&mut table, tmp.path(), otlp_gib, &receiver, gzip);
    }
    if let (true, Some(c)) = (phase("restart"), &corpus) {
        restart_phase(&mut table, tmp.path(), &input, c, &receiver, gzip);
    }
    if phase("steady") {
        steady_phase(&mut table, tmp.path(), &receiver, gzip);
    }
    if let (true, Some(c)) = (phase("syslog-ng"), &corpus) {
        syslog_ng_phase(&mut table, tmp.path(), &input, c);
    }
    if let (true, Some(c)) = (phase("syslog-ng-bulk"), &corpus) {
        syslog_ng_bulk_phase(&mut table, tmp.path(), &input, c, &receiver, holdfast_file);
    }
    if phase("crash") || phase("crash-loop") || phase("outage") {
        disk_limits(&mut table, tmp.path());
        let input = tmp.path().join("numbered");
        std::fs::create_dir_all(&input).unwrap();
        eprintln!("writing {crash_lines} numbered syslog-style lines into {FILES} files ...");
        let c = write_numbered_corpus(&input, FILES, crash_lines);
        table.note(format!(
            "numbered input: {} syslog-style lines, {:.1} MiB in {FILES} files;              holdfast: fsync = \"always\", elasticsearch sink at its defaults (2 x 1,000 in flight); {SYSLOG_NG_HTTP_SETTINGS}",
            thousands(c.lines as f64),
            c.bytes as f64 / (1 << 20) as f64
        ));
        table.note(
            "the receiver counts every accepted document by its line number: \
             repeats = documents - distinct lines, lost = lines - distinct lines"
                .into(),
        );
        if phase("crash") {
            crash_phase(
                &mut table,
                tmp.path(),
                &input,
                &c,
                &receiver,
                gzip,
                crash_runs,
            );
        }
        if phase("crash-loop") {
            crash_loop_phase(&mut table, tmp.path(), &input, &c, &receiver, gzip);
        }
        if phase("outage") {
            outage_phase(&mut table, tmp.path(), &input, &c, &receiver, gzip);
        }
    }
    table.print();
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_default()
}
