//! End-to-end benchmark: the real `holdfast run` binary, fed through its
//! real inputs, delivering to local receivers over HTTP.
//!
//! ```text
//! cargo bench --bench e2e                          # 1 GiB of lines, a few minutes, ~6 GiB of disk at peak
//! HOLDFAST_E2E_GIB=0.1 cargo bench --bench e2e     # a quick run (figures indicative only)
//! HOLDFAST_E2E_ONLY=file,otlp,restart,syslog-ng cargo bench --bench e2e   # pick phases
//! HOLDFAST_E2E_ONLY=crash,crash-loop,outage cargo bench --bench e2e  # kill -9 and outage phases (~2-3 min; HOLDFAST_E2E_PHASES works too)
//! HOLDFAST_E2E_CRASH_LINES=3000000 HOLDFAST_E2E_CRASH_RUNS=5 ...    # their size (default 1,000,000 lines, 3 runs)
//! HOLDFAST_BENCH_DIR=/data/tmp cargo bench --bench e2e          # where the files and logs go
//! HOLDFAST_E2E_COMPRESSION=gzip cargo bench --bench e2e         # sinks compress (default: none)
//! HOLDFAST_E2E_SINK_TOML='batch_max_events = 5000;concurrency = 4' cargo bench --bench e2e  # try settings
//! HOLDFAST_E2E_LOG_TOML='segment_size = "16MiB"' cargo bench --bench e2e
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

use std::io::{BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value::Value, AnyValue, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

#[path = "common/table.rs"]
mod table;
use table::{thousands, Table};

const BIN: &str = env!("CARGO_BIN_EXE_holdfast");
const FILES: usize = 4;
const CLIENTS: usize = 8;
const RECORDS_PER_REQUEST: usize = 200;
const POOL: usize = 64;

const TARGET_LINES_PER_S: f64 = 300_000.0;
const TARGET_PEAK_RSS_MIB: f64 = 24.0;
const TARGET_WRITE_AMP: f64 = 1.2;

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
        .unwrap_or_else(|_| "file,otlp,restart,syslog-ng,crash,crash-loop,outage".into());
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
        "holdfast end-to-end benchmark: {} ({} cores, {}), binary {BIN}",
        if gib < 1.0 {
            "SCALED-DOWN run, figures are indicative only"
        } else {
            "full run"
        },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model()
    ));
    for var in [
        "HOLDFAST_E2E_LOG_TOML",
        "HOLDFAST_E2E_SINK_TOML",
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
    let corpus = if phase("file") || phase("restart") || phase("syslog-ng") {
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
            "input: {} Loghub lines, {:.1} MiB in {FILES} files ({:.0} bytes a line on average)",
            thousands(c.lines as f64),
            c.bytes as f64 / (1 << 20) as f64,
            c.bytes as f64 / c.lines as f64
        ));
        Some(c)
    } else {
        None
    };

    if let (true, Some(c)) = (phase("file"), &corpus) {
        file_phase(&mut table, tmp.path(), &input, c, &receiver, gzip);
    }
    if phase("otlp") {
        otlp_phase(&mut table, tmp.path(), otlp_gib, &receiver, gzip);
    }
    if let (true, Some(c)) = (phase("restart"), &corpus) {
        restart_phase(&mut table, tmp.path(), &input, c, &receiver, gzip);
    }
    if let (true, Some(c)) = (phase("syslog-ng"), &corpus) {
        syslog_ng_phase(&mut table, tmp.path(), &input, c);
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

// ---------------------------------------------------------------------------
// Input

struct Corpus {
    lines: u64,
    bytes: u64,
}

/// The Loghub sample lines, without their line ends (a CR of a CRLF sample
/// is kept, as a tailer would see it), empty lines left out.
fn loghub_lines() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/loghub");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/fixtures/loghub")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    names.sort();
    let mut lines = Vec::new();
    for n in names {
        let b = std::fs::read(&n).unwrap();
        lines.extend(
            b.split(|&c| c == b'\n')
                .filter(|l| !l.is_empty() && *l != b"\r")
                .map(|l| l.to_vec()),
        );
    }
    lines
}

/// Writes `files` files of about `total / files` bytes each: Loghub lines
/// in turn, each prefixed with its number across all files, so every line
/// (and every file's first KiB, its fingerprint) is unique.
fn write_corpus(dir: &Path, files: usize, total: u64) -> Corpus {
    let unit = loghub_lines();
    let per_file = total.div_ceil(files as u64);
    let (mut n, mut bytes) = (0u64, 0u64);
    for i in 0..files {
        let f = std::fs::File::create(dir.join(format!("app-{i:02}.log"))).unwrap();
        let mut w = BufWriter::with_capacity(8 << 20, f);
        let mut written = 0u64;
        while written < per_file {
            let line = &unit[(n % unit.len() as u64) as usize];
            let mut num = itoa_buf(n);
            num.push(b' ');
            w.write_all(&num).unwrap();
            w.write_all(line).unwrap();
            w.write_all(b"\n").unwrap();
            written += (num.len() + line.len() + 1) as u64;
            n += 1;
        }
        w.into_inner().unwrap().sync_all().unwrap();
        bytes += written;
    }
    Corpus { lines: n, bytes }
}

fn itoa_buf(n: u64) -> Vec<u8> {
    format!("{n:010}").into_bytes()
}

// ---------------------------------------------------------------------------
// The agent

/// What /proc says about a process.
#[derive(Debug, Clone, Copy, Default)]
struct ProcSample {
    cpu_s: f64,
    hwm_kib: u64,
    write_bytes: u64,
    cancelled_write_bytes: u64,
}

fn proc_sample(task: &str) -> ProcSample {
    let stat = std::fs::read_to_string(format!("{task}/stat")).unwrap_or_default();
    // Fields after the command name, which may hold spaces: state is field 3,
    // utime 14, stime 15.
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    // SAFETY: sysconf has no memory-safety preconditions.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let field = |file: &str, key: &str| -> u64 {
        std::fs::read_to_string(format!("{task}/{file}"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k == key).then(|| v.split_whitespace().next()?.parse().ok())?
            })
            .unwrap_or(0)
    };
    ProcSample {
        cpu_s: (ticks(11) + ticks(12)) / tck,
        hwm_kib: field("status", "VmHWM"),
        write_bytes: field("io", "write_bytes"),
        cancelled_write_bytes: field("io", "cancelled_write_bytes"),
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// The largest anonymous and file-backed resident sizes seen, polled from
/// `/proc/PID/status` every 20 ms: `VmHWM` says how high the total went,
/// this says which kind of page it was (heap, or mapped segment files).
#[derive(Default)]
struct RssPeaks {
    anon_kib: AtomicU64,
    file_kib: AtomicU64,
    stop: AtomicBool,
}

impl RssPeaks {
    fn watch(pid: u32) -> Arc<RssPeaks> {
        let peaks = Arc::new(RssPeaks::default());
        let p = peaks.clone();
        std::thread::spawn(move || {
            let path = format!("/proc/{pid}/status");
            while !p.stop.load(Ordering::Relaxed) {
                let Ok(text) = std::fs::read_to_string(&path) else {
                    break;
                };
                for l in text.lines() {
                    let Some((k, v)) = l.split_once(':') else {
                        continue;
                    };
                    let kib: u64 = v
                        .split_whitespace()
                        .next()
                        .and_then(|x| x.parse().ok())
                        .unwrap_or(0);
                    match k {
                        "RssAnon" => p.anon_kib.fetch_max(kib, Ordering::Relaxed),
                        "RssFile" => p.file_kib.fetch_max(kib, Ordering::Relaxed),
                        _ => 0,
                    };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        peaks
    }

    fn describe(&self) -> String {
        format!(
            "anon {:.1} + file-backed {:.1} MiB at their peaks",
            self.anon_kib.load(Ordering::Relaxed) as f64 / 1024.0,
            self.file_kib.load(Ordering::Relaxed) as f64 / 1024.0
        )
    }
}

struct Agent {
    child: Option<Child>,
    api: SocketAddr,
    stderr: PathBuf,
    spawned: Instant,
    rss: Arc<RssPeaks>,
}

impl Agent {
    /// Writes `<dir>/holdfast.toml` (data directory, API, logging, then
    /// `body`) and spawns `holdfast run` on it.
    fn spawn(dir: &Path, body: &str) -> Agent {
        std::fs::create_dir_all(dir).unwrap();
        let config = dir.join("holdfast.toml");
        let api: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let text = format!(
            "data_dir = \"{}\"\n\n[api]\nlisten = \"{api}\"\n\n[daemon]\nshutdown_timeout = \"25s\"\n\n\
             [logging]\nlevel = \"warn\"\nformat = \"text\"\n\n{body}\n",
            dir.join("data").display()
        );
        std::fs::write(&config, text).unwrap();
        Agent::spawn_config(dir, &config, api)
    }

    fn spawn_config(dir: &Path, config: &Path, api: SocketAddr) -> Agent {
        let stderr = dir.join(format!("stderr-{}.log", now_nanos()));
        let spawned = Instant::now();
        let child = Command::new(BIN)
            .arg("run")
            .arg("--config")
            .arg(config)
            .env_remove("NOTIFY_SOCKET")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("starting holdfast run");
        let rss = RssPeaks::watch(child.id());
        Agent {
            child: Some(child),
            api,
            stderr,
            spawned,
            rss,
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    fn sample(&self) -> ProcSample {
        proc_sample(&format!("/proc/{}", self.pid()))
    }

    fn stderr_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Panics with the agent's last log lines if it has exited.
    fn check_alive(&mut self) {
        if let Some(c) = self.child.as_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                panic!(
                    "holdfast exited ({status}); stderr:\n{}",
                    self.stderr_tail()
                );
            }
        }
    }

    fn metrics(&self) -> String {
        http_get(self.api, "/metrics")
            .map(|r| r.1)
            .unwrap_or_default()
    }

    /// SIGTERM, then waits for the drain to finish.
    fn stop(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s;
            }
            assert!(Instant::now() < end, "holdfast did not stop within 60s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.rss.stop.store(true, Ordering::Relaxed);
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The value of the first sample `name{…} value` or `name value` in a
/// Prometheus text answer, summed over label sets.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            if !(rest.starts_with(' ') || rest.starts_with('{')) {
                return None;
            }
            l.rsplit(' ').next()?.parse::<f64>().ok()
        })
        // Not `sum()`: the sum of no samples is -0.0, printed "-0".
        .fold(0.0, |a, b| a + b)
}

/// Polls `f` every 2 ms until it is true; checks the agent is still alive.
fn wait_until(what: &str, agent: &mut Agent, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + PHASE_DEADLINE;
    let mut last_note = Instant::now();
    while !f() {
        agent.check_alive();
        assert!(
            Instant::now() < end,
            "timed out after {PHASE_DEADLINE:?} waiting for {what}"
        );
        if last_note.elapsed() > Duration::from_secs(10) {
            eprintln!("  ... waiting for {what}");
            last_note = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn dir_bytes(p: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(p) else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Extra TOML lines from the environment (`\n` or `;` between keys), for
/// trying settings without editing the bench.
fn extra_toml(var: &str) -> String {
    std::env::var(var)
        .map(|v| v.replace(';', "\n") + "\n")
        .unwrap_or_default()
}

/// Everything else at its default (64 MiB segments).
fn log_section(max_bytes: u64) -> String {
    format!(
        "[log]\nmax_bytes = \"{}MiB\"\nfsync = \"always\"\nwhen_full = \"block\"\n{}\n",
        max_bytes >> 20,
        extra_toml("HOLDFAST_E2E_LOG_TOML")
    )
}

/// Sinks run with their defaults (batches of 1,000 events, 2 requests in
/// flight) except for compression.
fn sink_tuning(gzip: bool) -> String {
    format!(
        "compression = \"{}\"\n{}",
        if gzip { "gzip" } else { "none" },
        extra_toml("HOLDFAST_E2E_SINK_TOML")
    )
}

fn file_source(input: &Path) -> String {
    format!(
        "[sources.files]\ntype = \"file\"\ninclude = [\"{}/*.log\"]\nstart_at = \"beginning\"\n\n",
        input.display()
    )
}

fn es_sink(receiver: SocketAddr, gzip: bool) -> String {
    format!(
        "[sinks.search]\ntype = \"elasticsearch\"\ninputs = [\"files\"]\nendpoint = \"http://{receiver}\"\n{}\n",
        sink_tuning(gzip)
    )
}

/// Rows shared by the phases that measure a whole run.
#[allow(clippy::too_many_arguments)]
fn throughput_rows(
    table: &mut Table,
    what: &str,
    events: u64,
    input_bytes: u64,
    secs: f64,
    p: ProcSample,
    throughput_target: Option<f64>,
    metrics: &str,
    rss: &RssPeaks,
    clock: &str,
) {
    let eps = events as f64 / secs;
    table.row(
        &format!("wall time, {clock} to the last event accepted"),
        format!("{secs:.2} s"),
        String::new(),
        None,
    );
    table.row(
        &format!("{what}/s"),
        thousands(eps),
        throughput_target.map_or(String::new(), |t| format!(">= {}", thousands(t))),
        throughput_target.map(|t| eps >= t),
    );
    table.row(
        "MB/s of input",
        format!("{:.1}", input_bytes as f64 / secs / 1e6),
        String::new(),
        None,
    );
    table.row(
        &format!("CPU s per million {what} (agent, user+sys)"),
        format!(
            "{:.2}  ({:.1} s in all, {:.0}% of one core)",
            p.cpu_s / (events as f64 / 1e6),
            p.cpu_s,
            p.cpu_s / secs * 100.0
        ),
        String::new(),
        None,
    );
    let rss_mib = p.hwm_kib as f64 / 1024.0;
    table.row(
        "peak RSS (VmHWM)",
        format!("{rss_mib:.1} MiB  ({})", rss.describe()),
        format!("<= {TARGET_PEAK_RSS_MIB} MiB"),
        Some(rss_mib <= TARGET_PEAK_RSS_MIB),
    );
    let wa = p.write_bytes as f64 / input_bytes as f64;
    table.row(
        "bytes written to disk per byte ingested",
        format!(
            "{wa:.2}  ({:.1} MiB written, {:.1} MiB cancelled)",
            p.write_bytes as f64 / (1 << 20) as f64,
            p.cancelled_write_bytes as f64 / (1 << 20) as f64
        ),
        format!("<= {TARGET_WRITE_AMP}"),
        Some(wa <= TARGET_WRITE_AMP),
    );
    // What the log itself wrote, to tell the envelope's size from the rest
    // (page rewrites at each sync, cursors, checkpoints).
    let log_written = metric(metrics, "holdfast_log_written_bytes_total");
    let appended = metric(metrics, "holdfast_log_appended_events_total");
    let syncs = metric(metrics, "holdfast_log_fsync_duration_seconds_count");
    let sync_s = metric(metrics, "holdfast_log_fsync_duration_seconds_sum");
    if log_written > 0.0 {
        table.detail(format!(
            "  the log: {:.0} events appended, {:.1} MiB of frames ({:.0} bytes per event, {:.2} per input byte); \
             {:.0} fdatasyncs ({:.0} events each, {:.2} ms average); other writes {:.2} per input byte",
            appended,
            log_written / (1 << 20) as f64,
            log_written / appended.max(1.0),
            log_written / input_bytes as f64,
            syncs,
            appended / syncs.max(1.0),
            sync_s * 1000.0 / syncs.max(1.0),
            (p.write_bytes as f64 - log_written).max(0.0) / input_bytes as f64
        ));
    }
    let reqs = metric(metrics, "holdfast_sink_requests_total");
    let sent = metric(metrics, "holdfast_sink_sent_events_total");
    let retries = metric(metrics, "holdfast_sink_retries_total");
    let lat = metric(metrics, "holdfast_sink_request_duration_seconds_sum");
    let lat_n = metric(metrics, "holdfast_sink_request_duration_seconds_count");
    if reqs > 0.0 {
        table.detail(format!(
            "  the sink: {:.0} events in {:.0} requests ({:.0} each, {:.1} ms average), {:.0} retries",
            sent,
            reqs,
            sent / reqs,
            lat * 1000.0 / lat_n.max(1.0),
            retries
        ));
    }
}

// ---------------------------------------------------------------------------
// Phase 1: file -> log -> elasticsearch

fn file_phase(
    table: &mut Table,
    root: &Path,
    input: &Path,
    c: &Corpus,
    receiver: &Receiver,
    gzip: bool,
) {
    table.head("file -> log (fsync = always) -> elasticsearch");
    eprintln!("phase file -> elasticsearch ...");
    let dir = root.join("file-phase");
    receiver.reset(true);
    let recv_cpu0 = receiver.cpu_s();
    let body =
        log_section(c.bytes * 4 + (1 << 30)) + &file_source(input) + &es_sink(receiver.addr, gzip);
    let mut agent = Agent::spawn(&dir, &body);
    let mut peak_log = 0;
    let log_dir = dir.join("data/log");
    let mut last_du = Instant::now();
    wait_until("every line at the receiver", &mut agent, || {
        if last_du.elapsed() > Duration::from_millis(500) {
            peak_log = peak_log.max(dir_bytes(&log_dir));
            last_du = Instant::now();
        }
        receiver.stats.es_docs.load(Ordering::Relaxed) >= c.lines
    });
    let secs = agent.spawned.elapsed().as_secs_f64();
    let p = agent.sample();
    let m = agent.metrics();
    let recv_cpu = receiver.cpu_s() - recv_cpu0;
    let status = agent.stop();
    assert!(
        status.success(),
        "holdfast stop: {status}\n{}",
        agent.stderr_tail()
    );
    throughput_rows(
        table,
        "lines",
        c.lines,
        c.bytes,
        secs,
        p,
        Some(TARGET_LINES_PER_S),
        &m,
        &agent.rss,
        "spawn",
    );
    table.detail(format!(
        "  the receiver: {} documents in {} requests, {:.1} MiB of _bulk bodies, {:.1} s CPU; largest log on disk seen {:.0} MiB",
        receiver.stats.es_docs.load(Ordering::Relaxed),
        receiver.stats.requests.load(Ordering::Relaxed),
        receiver.stats.body_bytes.load(Ordering::Relaxed) as f64 / (1 << 20) as f64,
        recv_cpu,
        peak_log as f64 / (1 << 20) as f64
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------
// Phase 2: OTLP/HTTP -> log -> otlp_http

fn kv(k: &str, v: Value) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

fn s(v: &str) -> Value {
    Value::StringValue(v.into())
}

/// `POOL` distinct requests of `RECORDS_PER_REQUEST` records each, with
/// Loghub lines as bodies.
fn otlp_pool() -> Vec<Bytes> {
    let lines = loghub_lines();
    let mut n = 0usize;
    (0..POOL)
        .map(|r| {
            let records = (0..RECORDS_PER_REQUEST)
                .map(|i| {
                    let line = String::from_utf8_lossy(&lines[n % lines.len()])
                        .trim_end()
                        .to_string();
                    n += 1;
                    LogRecord {
                        time_unix_nano: 1_700_000_000_000_000_000 + n as u64 * 1_000,
                        observed_time_unix_nano: 1_700_000_000_000_000_000 + n as u64 * 1_000 + 7,
                        severity_number: 9,
                        severity_text: "INFO".into(),
                        body: Some(AnyValue {
                            value: Some(s(&format!("{n:010} {line}"))),
                        }),
                        attributes: vec![
                            kv("log.iostream", s("stdout")),
                            kv("thread.id", Value::IntValue((i % 16) as i64)),
                        ],
                        flags: 1,
                        trace_id: (0..16).map(|b| (b * 7 + i + r) as u8).collect(),
                        span_id: (0..8).map(|b| (b * 3 + i) as u8).collect(),
                        ..Default::default()
                    }
                })
                .collect();
            ExportLogsServiceRequest {
                resource_logs: vec![ResourceLogs {
                    resource: Some(Resource {
                        attributes: vec![
                            kv("service.name", s("checkout")),
                            kv("service.version", s("1.4.2")),
                            kv(
                                "service.instance.id",
                                s("7233be56-33bb-4d09-8d46-649d95da0b2b"),
                            ),
                            kv("host.name", s("gateway-017")),
                            kv("telemetry.sdk.name", s("opentelemetry")),
                            kv("telemetry.sdk.language", s("python")),
                        ],
                        ..Default::default()
                    }),
                    scope_logs: vec![ScopeLogs {
                        scope: Some(InstrumentationScope {
                            name: "checkout.http".into(),
                            version: "1.4.2".into(),
                            ..Default::default()
                        }),
                        log_records: records,
                        schema_url: String::new(),
                    }],
                    schema_url: "https://opentelemetry.io/schemas/1.21.0".into(),
                }],
            }
            .encode_to_vec()
            .into()
        })
        .collect()
}

struct ClientTotals {
    requests: u64,
    refused: u64,
    cpu_s: f64,
}

/// Sends requests `0..total` (request `i` is `pool[i % POOL]`) over
/// `CLIENTS` keep-alive connections; a refused request is sent again.
fn run_clients(addr: SocketAddr, pool: Vec<Bytes>, total: u64) -> ClientTotals {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let next = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let pool = Arc::new(pool);
    let cpu0 = thread_cpu_s();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..CLIENTS {
            let (next, refused, pool) = (next.clone(), refused.clone(), pool.clone());
            tasks.push(tokio::spawn(async move {
                let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
                stream.set_nodelay(true).unwrap();
                let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                    .await
                    .unwrap();
                tokio::spawn(conn);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    let body = pool[(i % pool.len() as u64) as usize].clone();
                    loop {
                        let req = hyper::Request::post("/v1/logs")
                            .header("host", "127.0.0.1")
                            .header("content-type", "application/x-protobuf")
                            .body(Full::new(body.clone()))
                            .unwrap();
                        tx.ready().await.unwrap();
                        let resp = tx.send_request(req).await.unwrap();
                        let ok = resp.status() == 200;
                        let _ = resp.into_body().collect().await;
                        if ok {
                            break;
                        }
                        // Full log or overload: the agent asks us to back off.
                        refused.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    ClientTotals {
        requests: total,
        refused: refused.load(Ordering::Relaxed),
        cpu_s: thread_cpu_s() - cpu0,
    }
}

fn otlp_phase(table: &mut Table, root: &Path, gib: f64, receiver: &Receiver, gzip: bool) {
    table.head("OTLP/HTTP clients -> log (fsync = always) -> otlp_http");
    eprintln!("phase OTLP -> otlp_http ...");
    let pool = otlp_pool();
    let avg = pool.iter().map(|b| b.len()).sum::<usize>() as f64 / pool.len() as f64;
    let target_bytes = gib * (1u64 << 30) as f64;
    let requests = (target_bytes / avg).ceil().max(1.0) as u64;
    let records = requests * RECORDS_PER_REQUEST as u64;
    let body_bytes: u64 = (0..requests)
        .map(|i| pool[(i % POOL as u64) as usize].len() as u64)
        .sum();
    table.note(format!(
        "  {requests} requests of {RECORDS_PER_REQUEST} records ({avg:.0} bytes each, protobuf, no compression) \
         from {CLIENTS} keep-alive clients on one thread: {} records, {:.1} MiB",
        thousands(records as f64),
        body_bytes as f64 / (1 << 20) as f64
    ));
    let dir = root.join("otlp-phase");
    receiver.reset(true);
    let recv_cpu0 = receiver.cpu_s();
    let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let body = log_section(body_bytes * 6 + (1 << 30))
        + &format!("[sources.otlp]\ntype = \"otlp_http\"\nlisten = \"{listen}\"\n\n")
        + &format!(
            "[sinks.collector]\ntype = \"otlp_http\"\ninputs = [\"otlp\"]\nendpoint = \"http://{}\"\n{}\n",
            receiver.addr,
            sink_tuning(gzip)
        );
    let mut agent = Agent::spawn(&dir, &body);
    let api = agent.api;
    wait_until("the agent to be ready", &mut agent, || {
        http_get(api, "/readyz").is_some_and(|(s, _)| s == 200)
    });
    let ready = agent.spawned.elapsed();
    let t0 = Instant::now();
    let p0 = agent.sample();
    let clients = std::thread::spawn(move || run_clients(listen, pool, requests));
    wait_until("every record at the receiver", &mut agent, || {
        receiver.stats.otlp_records.load(Ordering::Relaxed) >= records
    });
    let secs = t0.elapsed().as_secs_f64();
    let mut p = agent.sample();
    let m = agent.metrics();
    let recv_cpu = receiver.cpu_s() - recv_cpu0;
    let c = clients.join().unwrap();
    let status = agent.stop();
    assert!(
        status.success(),
        "holdfast stop: {status}\n{}",
        agent.stderr_tail()
    );
    // Start-up is not what this phase measures: the clock starts when the
    // clients do, and CPU and writes are counted from there.
    p.cpu_s -= p0.cpu_s;
    p.write_bytes -= p0.write_bytes;
    p.cancelled_write_bytes -= p0.cancelled_write_bytes;
    table.note(format!(
        "  (clock from the first request, {:.0} ms after spawn when /readyz answered)",
        ready.as_secs_f64() * 1000.0
    ));
    throughput_rows(
        table,
        "records",
        records,
        body_bytes,
        secs,
        p,
        None,
        &m,
        &agent.rss,
        "first request",
    );
    table.detail(format!(
        "  the clients: {} requests, {} refused and resent, {:.1} s CPU; the receiver: {} records in {} requests, {:.1} MiB, {:.1} s CPU",
        c.requests,
        c.refused,
        c.cpu_s,
        receiver.stats.otlp_records.load(Ordering::Relaxed),
        receiver.stats.requests.load(Ordering::Relaxed),
        receiver.stats.body_bytes.load(Ordering::Relaxed) as f64 / (1 << 20) as f64,
        recv_cpu
    ));
    envelope_breakdown(table, &dir.join("data/log"), None);
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------
// Phase 3: restart with a backlog

fn restart_phase(
    table: &mut Table,
    root: &Path,
    input: &Path,
    c: &Corpus,
    receiver: &Receiver,
    gzip: bool,
) {
    table.head(&format!(
        "restart with a backlog of {:.0} MiB of lines (file -> elasticsearch)",
        c.bytes as f64 / (1 << 20) as f64
    ));
    eprintln!("phase restart with a backlog: filling the log ...");
    let dir = root.join("restart-phase");
    receiver.reset(false);
    let body =
        log_section(c.bytes * 4 + (1 << 30)) + &file_source(input) + &es_sink(receiver.addr, gzip);
    let mut agent = Agent::spawn(&dir, &body);
    let t = Instant::now();
    let api = agent.api;
    let mut m = String::new();
    wait_until("every line in the log", &mut agent, || {
        std::thread::sleep(Duration::from_millis(100));
        m = http_get(api, "/metrics").map(|r| r.1).unwrap_or_default();
        metric(&m, "holdfast_log_appended_events_total") >= c.lines as f64
    });
    let fill = t.elapsed().as_secs_f64();
    let p_fill = agent.sample();
    let status = agent.stop();
    assert!(
        status.success(),
        "holdfast stop: {status}\n{}",
        agent.stderr_tail()
    );
    assert_eq!(receiver.stats.es_docs.load(Ordering::Relaxed), 0);
    let backlog = dir_bytes(&dir.join("data/log"));
    table.row(
        "filling: lines/s into the log (receiver answering 503)",
        format!(
            "{}  ({fill:.1} s, {:.0} MiB in the log, {:.2} bytes written per input byte)",
            thousands(c.lines as f64 / fill),
            backlog as f64 / (1 << 20) as f64,
            p_fill.write_bytes as f64 / c.bytes as f64
        ),
        String::new(),
        None,
    );
    table.detail(format!(
        "  filling: peak RSS {:.1} MiB ({})",
        p_fill.hwm_kib as f64 / 1024.0,
        agent.rss.describe()
    ));
    envelope_breakdown(table, &dir.join("data/log"), Some(input));

    eprintln!("  restarting with the receiver accepting ...");
    receiver.reset(true);
    let mut agent = Agent::spawn_config(&dir, &dir.join("holdfast.toml"), api);
    let spawned = agent.spawned;
    let mut ready = None;
    let mut polled = Instant::now();
    wait_until("the first document at the receiver", &mut agent, || {
        if ready.is_none() && polled.elapsed() > Duration::from_millis(5) {
            if http_get(api, "/readyz").is_some_and(|(s, _)| s == 200) {
                ready = Some(spawned.elapsed());
            }
            polled = Instant::now();
        }
        receiver.first_accept().is_some()
    });
    let first = receiver.first_accept().unwrap() - spawned;
    table.row(
        "restart to first delivery (spawn to first 201)",
        format!(
            "{:.0} ms  (/readyz 200 after {})",
            first.as_secs_f64() * 1000.0,
            ready.map_or("-".into(), |r| format!(
                "{:.0} ms",
                r.as_secs_f64() * 1000.0
            ))
        ),
        String::new(),
        None,
    );
    wait_until("the whole backlog at the receiver", &mut agent, || {
        receiver.stats.es_docs.load(Ordering::Relaxed) >= c.lines
    });
    let secs = agent.spawned.elapsed().as_secs_f64();
    let p = agent.sample();
    let m = agent.metrics();
    let status = agent.stop();
    assert!(
        status.success(),
        "holdfast stop: {status}\n{}",
        agent.stderr_tail()
    );
    table.row(
        "draining the backlog: lines/s (no intake)",
        format!(
            "{}  ({secs:.1} s, {:.1} CPU s per million)",
            thousands(c.lines as f64 / secs),
            p.cpu_s / (c.lines as f64 / 1e6),
        ),
        String::new(),
        None,
    );
    let rss_mib = p.hwm_kib as f64 / 1024.0;
    table.row(
        "draining: peak RSS (VmHWM)",
        format!("{rss_mib:.1} MiB  ({})", agent.rss.describe()),
        format!("<= {TARGET_PEAK_RSS_MIB} MiB"),
        Some(rss_mib <= TARGET_PEAK_RSS_MIB),
    );
    let reqs = metric(&m, "holdfast_sink_requests_total");
    table.detail(format!(
        "  the sink after the restart: {:.0} requests ({:.0} events each)",
        reqs,
        metric(&m, "holdfast_sink_sent_events_total") / reqs.max(1.0)
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the bytes of an envelope are spent on, averaged over events sampled
/// across the (stopped) agent's log, read with the library's read-only
/// reader: the text of the line or record body against the cost around it.
/// `input`: the file source's directory (file lines), or None (OTLP).
fn envelope_breakdown(table: &mut Table, log_dir: &Path, input: Option<&Path>) {
    use holdfast::event::{Envelope, Record};
    use opentelemetry_proto::tonic::common::v1::any_value;
    use prost::encoding::{encoded_len_varint, key_len};
    let Ok(log) = holdfast::seglog::Log::open_read_only(log_dir) else {
        return;
    };
    let st = log.stats();
    // A length-delimited field: key, length, payload.
    let ld = |tag: u32, len: usize| {
        if len == 0 {
            0
        } else {
            key_len(tag) + encoded_len_varint(len as u64) + len
        }
    };
    // text, body field beyond the text, attributes, other record fields,
    // origin, resource, scope, id + source + time
    let mut parts = [0usize; 8];
    let (mut n, mut total) = (0usize, 0usize);
    let spots = 20u64;
    for k in 0..spots {
        let at = st.first_seq + (st.next_seq - st.first_seq) * k / spots;
        let Ok(events) = log.reader(at).read(200, 1 << 20) else {
            continue;
        };
        for e in &events {
            let Ok(env) = Envelope::decode(&e.data[..]) else {
                continue;
            };
            let Some(Record::Log(r)) = &env.record else {
                continue;
            };
            n += 1;
            total += e.data.len();
            let text = match r.body.as_ref().and_then(|b| b.value.as_ref()) {
                Some(any_value::Value::StringValue(t)) => t.len(),
                _ => 0,
            };
            let body = r.body.as_ref().map_or(0, |b| ld(5, b.encoded_len()));
            let attrs: usize = r.attributes.iter().map(|a| ld(6, a.encoded_len())).sum();
            parts[0] += text;
            parts[1] += body - text;
            parts[2] += attrs;
            parts[3] += ld(8, r.encoded_len()) - body - attrs;
            parts[4] += env.origin.as_ref().map_or(0, |o| ld(11, o.encoded_len()));
            parts[5] += env.resource.as_ref().map_or(0, |r| ld(4, r.encoded_len()));
            parts[6] += env.scope.as_ref().map_or(0, |r| ld(6, r.encoded_len()));
            parts[7] += ld(1, env.id.len()) + ld(2, env.source.len()) + 9;
        }
    }
    if n == 0 {
        return;
    }
    let avg = |x: usize| x as f64 / n as f64;
    let Some(input) = input else {
        table.detail(format!(
            "  an OTLP record's envelope ({n} sampled across what is left of the log): {:.0} bytes = body text {:.0} + {:.0} around it: \
             resource (repeated in every record) {:.0}, scope {:.0}, record attributes {:.0}, \
             record's other fields (times, severity, trace and span ids, flags) {:.0}, id + source + time {:.0}, body framing {:.0}",
            avg(total),
            avg(parts[0]),
            avg(total) - avg(parts[0]),
            avg(parts[5]),
            avg(parts[6]),
            avg(parts[2]),
            avg(parts[3]),
            avg(parts[7]),
            avg(parts[1]),
        ));
        return;
    };
    table.detail(format!(
        "  a file line's envelope ({n} sampled across the log): {:.0} bytes = line text {:.0} + {:.0} around it: \
         record attributes log.file.path + log.file.name {:.0}, origin (path again, fingerprint, offsets) {:.0}, \
         scope {:.0}, resource {:.0}, id + source + time {:.0}, record's other fields {:.0}, body framing {:.0} \
         (the input path, {} bytes, is carried twice)",
        avg(total),
        avg(parts[0]),
        avg(total) - avg(parts[0]),
        avg(parts[2]),
        avg(parts[4]),
        avg(parts[6]),
        avg(parts[5]),
        avg(parts[7]),
        avg(parts[3]),
        avg(parts[1]),
        input.join("app-00.log").to_string_lossy().len()
    ));
}

// ---------------------------------------------------------------------------
// syslog-ng, for comparison

/// syslog-ng tailing the same files into one file, without fsync and
/// without parsing: the speed the issue's target is set against.
fn syslog_ng_phase(table: &mut Table, root: &Path, input: &Path, c: &Corpus) {
    table.head("syslog-ng for comparison: the same files -> a file, no fsync, no parsing");
    let Some(bin) = syslog_ng_bin() else {
        table.note("  syslog-ng is not installed (apt-get install syslog-ng-core): skipped".into());
        return;
    };
    eprintln!("phase syslog-ng ...");
    let dir = root.join("syslog-ng");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("out.log");
    let conf = dir.join("syslog-ng.conf");
    std::fs::write(
        &conf,
        format!(
            "@version: 3.38\n\
             options {{ threaded(yes); stats-freq(0); log-msg-size(262144); }};\n\
             source s_files {{ wildcard-file(base-dir(\"{}\") filename-pattern(\"*.log\") recursive(no) \
             flags(no-parse) follow-freq(1) log-fetch-limit(10000) log-iw-size(100000) max-files(100)); }};\n\
             destination d_out {{ file(\"{}\" template(\"${{MSG}}\\n\") flush-lines(10000) fsync(no)); }};\n\
             log {{ source(s_files); destination(d_out); flags(flow-control); }};\n",
            input.display(),
            out.display()
        ),
    )
    .unwrap();
    let started = Instant::now();
    let mut child = Command::new(&bin)
        .arg("-F")
        .arg("--no-caps")
        .arg("-f")
        .arg(&conf)
        .arg("-R")
        .arg(dir.join("persist"))
        .arg("-p")
        .arg(dir.join("pid"))
        .arg("-c")
        .arg(dir.join("ctl"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap())
        .spawn()
        .expect("starting syslog-ng");
    let task = format!("/proc/{}", child.id());
    let mut lines = 0u64;
    let mut file = None;
    let mut buf = vec![0u8; 1 << 20];
    let mut sample = ProcSample::default();
    let end = started + PHASE_DEADLINE;
    while lines < c.lines {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "syslog-ng exited ({status}): {}",
                std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default()
            );
        }
        assert!(Instant::now() < end, "syslog-ng did not write every line");
        if file.is_none() {
            file = std::fs::File::open(&out).ok();
        }
        let mut progressed = false;
        if let Some(f) = file.as_mut() {
            while let Ok(n) = f.read(&mut buf) {
                if n == 0 {
                    break;
                }
                progressed = true;
                lines += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
            }
        }
        sample = proc_sample(&task);
        if !progressed {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let _ = child.kill();
    let _ = child.wait();
    let lps = c.lines as f64 / secs;
    table.row(
        "lines/s (spawn to the last line in the output)",
        format!("{}  ({secs:.2} s)", thousands(lps)),
        String::new(),
        None,
    );
    table.row(
        "MB/s of input",
        format!("{:.1}", c.bytes as f64 / secs / 1e6),
        String::new(),
        None,
    );
    table.row(
        "CPU s per million lines (user+sys)",
        format!(
            "{:.2}  ({:.1} s in all, {:.0}% of one core)",
            sample.cpu_s / (c.lines as f64 / 1e6),
            sample.cpu_s,
            sample.cpu_s / secs * 100.0
        ),
        String::new(),
        None,
    );
    table.row(
        "peak RSS (VmHWM)",
        format!("{:.1} MiB", sample.hwm_kib as f64 / 1024.0),
        String::new(),
        None,
    );
    table.row(
        "bytes written to disk per byte ingested",
        format!("{:.2}", sample.write_bytes as f64 / c.bytes as f64),
        String::new(),
        None,
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------
// Phases 5-7: kill -9 mid-run, a crash loop, an outage (holdfast and
// syslog-ng, both delivering numbered lines to the `_bulk` receiver)

/// What each numbered line carries: the receiver finds it in every
/// document and counts the number after it.
const LINENO: &[u8] = b"lineno=";
/// The crash phase kills each contender once this share of the lines has
/// been delivered.
const KILL_AT: f64 = 0.4;
/// Crash loop: each instance is killed this long after its spawn.
const LOOP_KILLS_MS: [u64; 10] = [250, 330, 410, 490, 570, 650, 730, 810, 890, 970];
/// The receiver answers 500 for this long from the spawn in the outage phase.
const OUTAGE: Duration = Duration::from_secs(10);
/// A run whose receiver saw no new line for this long is over, with what is
/// missing counted lost (a complete run ends as soon as every line is in).
/// Longer than the sinks' default `backoff_max` (60 s): a request backing
/// off is late, not lost.
const QUIET: Duration = Duration::from_secs(75);
/// The issue's bound on appends per input line in the crash loop.
const TARGET_LOOP_APPENDS: f64 = 1.1;
/// "Delivery resumes within about a second" after an outage.
const TARGET_RESUME_S: f64 = 1.5;

/// `lines` syslog-style lines in `files` files, each line carrying its own
/// number (`lineno=0000000042`) once, numbered across the files.
fn write_numbered_corpus(dir: &Path, files: usize, lines: u64) -> Corpus {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    const WHAT: [&str; 4] = [
        "Accepted publickey for",
        "Failed password for invalid user",
        "pam_unix(sshd:session): session opened for user",
        "Disconnected from user",
    ];
    let per_file = lines.div_ceil(files as u64);
    let mut bytes = 0u64;
    for i in 0..files as u64 {
        let f = std::fs::File::create(dir.join(format!("sys-{i:02}.log"))).unwrap();
        let mut w = BufWriter::with_capacity(8 << 20, f);
        for n in i * per_file..((i + 1) * per_file).min(lines) {
            let secs = n / 40;
            let line = format!(
                "{} {:2} {:02}:{:02}:{:02} gw-017 sshd[{}]: lineno={n:010} {} user{} from 10.{}.{}.{} port {} ssh2\n",
                MONTHS[(n / 3_000_000 % 12) as usize],
                1 + n / 100_000 % 28,
                secs / 3600 % 24,
                secs / 60 % 60,
                secs % 60,
                1000 + n % 30_000,
                WHAT[(n % 4) as usize],
                n % 997,
                n % 251,
                n / 7 % 256,
                n / 13 % 256,
                1024 + n * 7 % 60_000,
            );
            w.write_all(line.as_bytes()).unwrap();
            bytes += line.len() as u64;
        }
        w.into_inner().unwrap().sync_all().unwrap();
    }
    Corpus { lines, bytes }
}

/// One agent under test, started again and again on the same state.
trait Contender {
    fn name(&self) -> &'static str;
    /// Spawns a fresh process on the contender's state (config, data,
    /// positions), and says when.
    fn start(&mut self) -> Instant;
    /// kill -9, and waits for the process to be gone.
    fn kill9(&mut self);
    /// SIGTERM, and waits for the process to exit.
    fn stop(&mut self);
    /// Panics, with its last words, if the process has exited.
    fn check_alive(&mut self);
    /// Events appended to its own durable log over all its runs (after
    /// `stop`), if it has one.
    fn appends(&self) -> Option<u64>;
}

struct HoldfastUnderTest {
    dir: PathBuf,
    body: String,
    api: Option<SocketAddr>,
    agent: Option<Agent>,
}

impl HoldfastUnderTest {
    fn new(dir: PathBuf, body: String) -> HoldfastUnderTest {
        let _ = std::fs::remove_dir_all(&dir);
        HoldfastUnderTest {
            dir,
            body,
            api: None,
            agent: None,
        }
    }
}

impl Contender for HoldfastUnderTest {
    fn name(&self) -> &'static str {
        "holdfast"
    }

    fn start(&mut self) -> Instant {
        let agent = match self.api {
            None => Agent::spawn(&self.dir, &self.body),
            Some(api) => Agent::spawn_config(&self.dir, &self.dir.join("holdfast.toml"), api),
        };
        self.api = Some(agent.api);
        let at = agent.spawned;
        self.agent = Some(agent);
        at
    }

    fn kill9(&mut self) {
        // Agent's drop is kill -9 and wait.
        self.agent = None;
    }

    fn stop(&mut self) {
        if let Some(mut a) = self.agent.take() {
            // A run can have nothing left to do (the crash loop delivered
            // every line): a SIGTERM before the agent handles it kills it.
            let api = a.api;
            wait_until("the agent to be ready before its stop", &mut a, || {
                http_get(api, "/readyz").is_some_and(|(s, _)| s == 200)
            });
            let status = a.stop();
            assert!(
                status.success(),
                "holdfast stop: {status}\n{}",
                a.stderr_tail()
            );
        }
    }

    fn check_alive(&mut self) {
        if let Some(a) = self.agent.as_mut() {
            a.check_alive();
        }
    }

    fn appends(&self) -> Option<u64> {
        // Sequence numbers run on across restarts and start at 0 in a fresh
        // log, so the next one is the number of appends over all runs.
        let log = holdfast::seglog::Log::open_read_only(self.dir.join("data/log")).ok()?;
        Some(log.stats().next_seq)
    }
}

struct SyslogNgUnderTest {
    bin: PathBuf,
    dir: PathBuf,
    conf: PathBuf,
    child: Option<Child>,
    runs: u32,
}

impl SyslogNgUnderTest {
    /// syslog-ng tailing `input` (the same source options as the syslog-ng
    /// phase) into an `http()` destination that posts `_bulk` bodies to
    /// the receiver, with flow control and no disk buffer: file positions
    /// advance in its persist file as the destination acknowledges.
    /// Err, with the reason, when it cannot run this config.
    fn new(dir: PathBuf, input: &Path, receiver: SocketAddr) -> Result<SyslogNgUnderTest, String> {
        let bin =
            syslog_ng_bin().ok_or("syslog-ng is not installed (apt-get install syslog-ng-core)")?;
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("syslog-ng.conf");
        std::fs::write(&conf, syslog_ng_http_conf(input, receiver)).unwrap();
        let check = Command::new(&bin)
            .arg("--syntax-only")
            .arg("-f")
            .arg(&conf)
            .output()
            .map_err(|e| format!("running {}: {e}", bin.display()))?;
        if !check.status.success() {
            return Err(format!(
                "syslog-ng rejects the http() config (apt-get install syslog-ng-mod-http): {}",
                String::from_utf8_lossy(&check.stderr).trim()
            ));
        }
        Ok(SyslogNgUnderTest {
            bin,
            dir,
            conf,
            child: None,
            runs: 0,
        })
    }

    fn stderr_path(&self) -> PathBuf {
        self.dir.join(format!("stderr-{}.log", self.runs))
    }
}

fn syslog_ng_bin() -> Option<PathBuf> {
    [
        "/usr/sbin/syslog-ng",
        "/usr/bin/syslog-ng",
        "/sbin/syslog-ng",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

/// The http() settings beside holdfast's sink defaults: batches of 1,000,
/// 2 requests in flight. `max-files(10)`, not the syslog-ng phase's 100:
/// `log-iw-size` is shared out over `max-files`, and a window of 1,000
/// lines per file left its batches half full (5,000 lines/s). `time-reopen(1)` (default 60 s) and `retries`
/// high so that an outage delays lines instead of dropping them.
fn syslog_ng_http_conf(input: &Path, receiver: SocketAddr) -> String {
    format!(
        "@version: 3.38\n\
         options {{ threaded(yes); stats-freq(0); log-msg-size(262144); time-reopen(1); }};\n\
         source s_files {{ wildcard-file(base-dir(\"{}\") filename-pattern(\"*.log\") recursive(no) \
         flags(no-parse) follow-freq(1) log-fetch-limit(10000) log-iw-size(100000) max-files(10)); }};\n\
         destination d_bulk {{ http(url(\"http://{receiver}/_bulk\") method(\"POST\") \
         headers(\"Content-Type: application/x-ndjson\") workers(2) batch-lines(1000) batch-timeout(100) \
         retries(1000000) time-reopen(1) \
         body(\"{{\\\"index\\\":{{}}}}\\n$(format-json message=${{MSG}})\") body-suffix(\"\\n\")); }};\n\
         log {{ source(s_files); destination(d_bulk); flags(flow-control); }};\n",
        input.display()
    )
}

/// What `syslog_ng_http_conf` says, for the table.
const SYSLOG_NG_HTTP_SETTINGS: &str = "syslog-ng: wildcard-file (log-iw-size(100000) max-files(10)) -> http() _bulk, \
     flow-control, no disk-buffer, workers(2) batch-lines(1000) batch-timeout(100) retries(1000000) time-reopen(1)";

impl Contender for SyslogNgUnderTest {
    fn name(&self) -> &'static str {
        "syslog-ng"
    }

    fn start(&mut self) -> Instant {
        self.runs += 1;
        let at = Instant::now();
        let child = Command::new(&self.bin)
            .arg("-F")
            .arg("--no-caps")
            .arg("-f")
            .arg(&self.conf)
            .arg("-R")
            .arg(self.dir.join("persist"))
            .arg("-p")
            .arg(self.dir.join("pid"))
            .arg("-c")
            .arg(self.dir.join("ctl"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.stderr_path()).unwrap())
            .spawn()
            .expect("starting syslog-ng");
        self.child = Some(child);
        at
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let end = Instant::now() + Duration::from_secs(60);
            while c.try_wait().unwrap().is_none() {
                assert!(Instant::now() < end, "syslog-ng did not stop within 60s");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    fn check_alive(&mut self) {
        if let Some(c) = self.child.as_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                panic!(
                    "syslog-ng exited ({status}): {}",
                    std::fs::read_to_string(self.stderr_path()).unwrap_or_default()
                );
            }
        }
    }

    fn appends(&self) -> Option<u64> {
        None
    }
}

impl Drop for SyslogNgUnderTest {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Keeps the contender's process checked until `until`: for kills on a
/// schedule, which is what the crash loop measures.
fn run_until(c: &mut dyn Contender, until: Instant) {
    while Instant::now() < until {
        c.check_alive();
        std::thread::sleep(
            until
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(1)),
        );
    }
}

/// Waits until the receiver has `docs` documents with a line number.
fn wait_docs(c: &mut dyn Contender, receiver: &Receiver, docs: u64) {
    let end = Instant::now() + PHASE_DEADLINE;
    while receiver.tally().0 < docs {
        c.check_alive();
        assert!(
            Instant::now() < end,
            "timed out waiting for {docs} documents from {}",
            c.name()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// How a wait for every line ended.
struct Finish {
    /// When the last new line was seen.
    last: Instant,
    /// The longest time without a new line, from `from` on.
    longest_gap: Duration,
}

/// Waits until every line is in, or no new line came for `QUIET` (after
/// `from`).
fn wait_all_lines(c: &mut dyn Contender, receiver: &Receiver, lines: u64, from: Instant) -> Finish {
    let end = Instant::now() + PHASE_DEADLINE;
    let (mut seen, mut last_new) = (receiver.tally().1, from);
    let mut longest_gap = Duration::ZERO;
    let mut last_note = Instant::now();
    loop {
        let distinct = receiver.tally().1;
        if distinct > seen {
            let now = Instant::now();
            longest_gap = longest_gap.max(now - last_new);
            (seen, last_new) = (distinct, now);
        }
        if distinct >= lines {
            return Finish {
                last: last_new,
                longest_gap,
            };
        }
        if last_new.elapsed() > QUIET {
            eprintln!(
                "  {}: no new line for {QUIET:?}, {} of {lines} in: the rest counts as lost",
                c.name(),
                distinct
            );
            return Finish {
                last: last_new,
                longest_gap: longest_gap.max(last_new.elapsed()),
            };
        }
        c.check_alive();
        assert!(
            Instant::now() < end,
            "timed out waiting for the lines from {}",
            c.name()
        );
        if last_note.elapsed() > Duration::from_secs(10) {
            eprintln!("  ... {}: {distinct} of {lines} lines in", c.name());
            last_note = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// What the receiver counted over one run (all of a contender's instances).
struct Outcome {
    lines: u64,
    docs: u64,
    distinct: u64,
    appends: Option<u64>,
    kills: u32,
}

impl Outcome {
    fn of(c: &dyn Contender, receiver: &Receiver, lines: u64, kills: u32) -> Outcome {
        let (docs, distinct) = receiver.tally();
        Outcome {
            lines,
            docs,
            distinct,
            appends: c.appends(),
            kills,
        }
    }

    fn repeats(&self) -> u64 {
        self.docs - self.distinct
    }

    fn lost(&self) -> u64 {
        self.lines - self.distinct
    }

    fn appends_per_line(&self) -> String {
        self.appends.map_or("n/a (no log of its own)".into(), |a| {
            format!(
                "{:.3}  ({} appends)",
                a as f64 / self.lines as f64,
                thousands(a as f64)
            )
        })
    }
}

/// The contenders of these phases: holdfast (file -> log -> elasticsearch,
/// the bench's usual config) and syslog-ng when it can post `_bulk`.
fn contenders(
    table: &mut Table,
    root: &Path,
    tag: &str,
    input: &Path,
    c: &Corpus,
    receiver: &Receiver,
    gzip: bool,
) -> Vec<Box<dyn Contender>> {
    let body =
        log_section(c.bytes * 4 + (1 << 30)) + &file_source(input) + &es_sink(receiver.addr, gzip);
    let mut out: Vec<Box<dyn Contender>> = vec![Box::new(HoldfastUnderTest::new(
        root.join(format!("{tag}-holdfast")),
        body,
    ))];
    match SyslogNgUnderTest::new(root.join(format!("{tag}-syslog-ng")), input, receiver.addr) {
        Ok(s) => out.push(Box::new(s)),
        Err(why) => table.note(format!("  syslog-ng skipped: {why}")),
    }
    out
}

/// The load average, and a warning when the machine is busier than its
/// cores: kill timings and resume times move with the load.
fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let three: Vec<&str> = text.split_whitespace().take(3).collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let busy = three
        .first()
        .and_then(|l| l.parse::<f64>().ok())
        .is_some_and(|l| l > cores as f64);
    format!(
        "{}{}",
        three.join(" "),
        if busy {
            format!(
                " (more than the {cores} cores: other work shares the machine, figures are noisy)"
            )
        } else {
            String::new()
        }
    )
}

/// The disk's own limits in the directory the phases write to, beside
/// their figures: a durable round trip bounds how often a cursor or a
/// checkpoint can be made durable.
fn disk_limits(table: &mut Table, dir: &Path) {
    table.head("disk limits (same file system, this run, 1 s each)");
    let _ = Command::new("sync").status();
    let path = dir.join("probe-4k");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    let buf = vec![0xa5u8; 4096];
    let (started, mut n) = (Instant::now(), 0u32);
    while started.elapsed() < Duration::from_secs(1) {
        f.write_all(&buf).unwrap();
        f.sync_data().unwrap();
        n += 1;
    }
    let t = started.elapsed().as_secs_f64();
    table.row(
        "4 KiB append + fdatasync",
        format!("{:.0} /s ({:.2} ms each)", n as f64 / t, t * 1e3 / n as f64),
        "reference".into(),
        None,
    );
    drop(f);
    let _ = std::fs::remove_file(&path);
    let _ = Command::new("sync").status();
    let path = dir.join("probe-seq");
    let mut f = std::fs::File::create(&path).unwrap();
    let buf: Vec<u8> = (0..1 << 20).map(|i| (i * 7) as u8).collect();
    let (started, mut bytes) = (Instant::now(), 0u64);
    while started.elapsed() < Duration::from_secs(1) {
        f.write_all(&buf).unwrap();
        f.sync_data().unwrap();
        bytes += buf.len() as u64;
    }
    table.row(
        "sequential write, fdatasync every 1 MiB",
        format!(
            "{:.1} MB/s",
            bytes as f64 / started.elapsed().as_secs_f64() / 1e6
        ),
        "reference".into(),
        None,
    );
    drop(f);
    let _ = std::fs::remove_file(&path);
}

/// Rows a contender's runs share: repeats, losses, appends.
fn outcome_rows(table: &mut Table, name: &str, runs: &[Outcome], repeat_target: &str) {
    let list = |f: &dyn Fn(&Outcome) -> String| runs.iter().map(f).collect::<Vec<_>>().join(", ");
    let kills: u32 = runs.iter().map(|r| r.kills).sum();
    let repeats: u64 = runs.iter().map(Outcome::repeats).sum();
    table.row(
        &format!("{name}: events delivered twice per kill"),
        format!(
            "{}  (runs: {})",
            thousands(repeats as f64 / kills.max(1) as f64),
            list(&|r| thousands(r.repeats() as f64 / r.kills.max(1) as f64))
        ),
        repeat_target.into(),
        None,
    );
    let lost: u64 = runs.iter().map(Outcome::lost).sum();
    table.row(
        &format!("{name}: lines lost"),
        format!(
            "{}  (runs: {})",
            thousands(lost as f64),
            list(&|r| thousands(r.lost() as f64))
        ),
        "0".into(),
        Some(lost == 0),
    );
    table.row(
        &format!("{name}: documents sent per input line"),
        list(&|r| format!("{:.3}", r.docs as f64 / r.lines as f64)),
        String::new(),
        None,
    );
    table.row(
        &format!("{name}: log appends per input line"),
        list(&|r| r.appends_per_line()),
        String::new(),
        None,
    );
}

fn crash_phase(
    table: &mut Table,
    root: &Path,
    input: &Path,
    c: &Corpus,
    receiver: &Receiver,
    gzip: bool,
    runs: u32,
) {
    table.head(&format!(
        "crash: kill -9 once at {:.0}% delivered, then a restart to the end; {} numbered lines, file -> _bulk; {runs} run(s) each",
        KILL_AT * 100.0,
        thousands(c.lines as f64)
    ));
    table.note(format!("  load average before: {}", load_average()));
    let mut names = Vec::new();
    let mut results: Vec<Vec<Outcome>> = Vec::new();
    for run in 0..runs {
        for (i, mut who) in contenders(table, root, "crash", input, c, receiver, gzip)
            .into_iter()
            .enumerate()
        {
            eprintln!("phase crash, run {}: {} ...", run + 1, who.name());
            receiver.reset_counting(true, c.lines);
            let t0 = who.start();
            wait_docs(who.as_mut(), receiver, (c.lines as f64 * KILL_AT) as u64);
            who.kill9();
            let at_kill = receiver.tally().0;
            who.start();
            let last = wait_all_lines(who.as_mut(), receiver, c.lines, Instant::now()).last;
            who.stop();
            let o = Outcome::of(who.as_ref(), receiver, c.lines, 1);
            eprintln!(
                "  {}: killed at {} documents, {:.1} s to the last line; {} repeats, {} lost",
                who.name(),
                at_kill,
                (last - t0).as_secs_f64(),
                o.repeats(),
                o.lost()
            );
            if results.len() <= i {
                names.push(who.name());
                results.push(Vec::new());
            }
            results[i].push(o);
        }
    }
    for (name, runs) in names.iter().zip(&results) {
        let target = if *name == "holdfast" {
            "in flight: 2 x 1,000 + 1 save group"
        } else {
            ""
        };
        outcome_rows(table, name, runs, target);
    }
}

fn crash_loop_phase(
    table: &mut Table,
    root: &Path,
    input: &Path,
    c: &Corpus,
    receiver: &Receiver,
    gzip: bool,
) {
    table.head(&format!(
        "crash loop: {} kill -9s, each {}-{} ms after its spawn, then a clean run to the end; {} numbered lines",
        LOOP_KILLS_MS.len(),
        LOOP_KILLS_MS[0],
        LOOP_KILLS_MS[LOOP_KILLS_MS.len() - 1],
        thousands(c.lines as f64)
    ));
    table.note(format!("  load average before: {}", load_average()));
    for mut who in contenders(table, root, "loop", input, c, receiver, gzip) {
        eprintln!("phase crash loop: {} ...", who.name());
        receiver.reset_counting(true, c.lines);
        let t0 = Instant::now();
        for ms in LOOP_KILLS_MS {
            let spawned = who.start();
            run_until(who.as_mut(), spawned + Duration::from_millis(ms));
            who.kill9();
        }
        let during = receiver.tally();
        who.start();
        let last = wait_all_lines(who.as_mut(), receiver, c.lines, Instant::now()).last;
        who.stop();
        let o = Outcome::of(who.as_ref(), receiver, c.lines, LOOP_KILLS_MS.len() as u32);
        let name = who.name();
        table.row(
            &format!("{name}: events delivered twice (all kills)"),
            format!(
                "{}  ({} per kill; {} documents, {} distinct lines, before the clean run)",
                thousands(o.repeats() as f64),
                thousands(o.repeats() as f64 / o.kills as f64),
                thousands(during.0 as f64),
                thousands(during.1 as f64)
            ),
            String::new(),
            None,
        );
        table.row(
            &format!("{name}: lines lost"),
            thousands(o.lost() as f64),
            "0".into(),
            Some(o.lost() == 0),
        );
        table.row(
            &format!("{name}: documents sent per input line"),
            format!("{:.3}", o.docs as f64 / o.lines as f64),
            String::new(),
            None,
        );
        let target = o
            .appends
            .map(|a| a as f64 / o.lines as f64 <= TARGET_LOOP_APPENDS);
        table.row(
            &format!("{name}: log appends per input line"),
            o.appends_per_line(),
            if o.appends.is_some() {
                format!("<= {TARGET_LOOP_APPENDS}")
            } else {
                String::new()
            },
            target,
        );
        table.row(
            &format!("{name}: wall time, first spawn to the last line"),
            format!("{:.1} s", (last - t0).as_secs_f64()),
            String::new(),
            None,
        );
    }
}

fn outage_phase(
    table: &mut Table,
    root: &Path,
    input: &Path,
    c: &Corpus,
    receiver: &Receiver,
    gzip: bool,
) {
    table.head(&format!(
        "outage: the receiver answers 500 for the first {} s of a {}-line run (file -> _bulk)",
        OUTAGE.as_secs(),
        thousands(c.lines as f64)
    ));
    table.note(format!("  load average before: {}", load_average()));
    for mut who in contenders(table, root, "outage", input, c, receiver, gzip) {
        eprintln!("phase outage: {} ...", who.name());
        receiver.reset_counting(false, c.lines);
        receiver.stats.refuse_status.store(500, Ordering::SeqCst);
        let t0 = who.start();
        run_until(who.as_mut(), t0 + OUTAGE);
        let refused = receiver.stats.refused.load(Ordering::Relaxed);
        receiver.stats.accepting.store(true, Ordering::SeqCst);
        let back = Instant::now();
        let Finish { last, longest_gap } = wait_all_lines(who.as_mut(), receiver, c.lines, back);
        who.stop();
        let o = Outcome::of(who.as_ref(), receiver, c.lines, 0);
        let name = who.name();
        let resumed = receiver
            .first_accept()
            .map(|t| t.saturating_duration_since(back));
        table.row(
            &format!("{name}: receiver back to the first accepted delivery"),
            resumed.map_or("never".into(), |d| format!("{:.2} s", d.as_secs_f64())),
            format!("<= {TARGET_RESUME_S} s"),
            Some(resumed.is_some_and(|d| d.as_secs_f64() <= TARGET_RESUME_S)),
        );
        table.row(
            &format!("{name}: wall time, spawn to the last line"),
            format!(
                "{:.1} s  ({:.1} s after the receiver came back; {refused} requests refused)",
                (last - t0).as_secs_f64(),
                last.saturating_duration_since(back).as_secs_f64()
            ),
            String::new(),
            None,
        );
        // Resuming means every request slot delivering again, not one.
        table.row(
            &format!("{name}: longest pause in new lines after the return"),
            format!("{:.2} s", longest_gap.as_secs_f64()),
            format!("<= {TARGET_RESUME_S} s"),
            Some(longest_gap.as_secs_f64() <= TARGET_RESUME_S),
        );
        table.row(
            &format!("{name}: lines lost / delivered twice"),
            format!(
                "{} / {}",
                thousands(o.lost() as f64),
                thousands(o.repeats() as f64)
            ),
            "0 / -".into(),
            Some(o.lost() == 0),
        );
    }
}

// ---------------------------------------------------------------------------
// The receivers

#[derive(Default)]
struct Stats {
    accepting: AtomicBool,
    es_docs: AtomicU64,
    otlp_records: AtomicU64,
    requests: AtomicU64,
    refused: AtomicU64,
    body_bytes: AtomicU64,
    /// Nanoseconds after `epoch` of the first accepted event; 0 = none yet.
    first_accept: AtomicU64,
    tid: AtomicU64,
    /// The status answered while not accepting; 0 means 503.
    refuse_status: AtomicU64,
    /// Per line number of the numbered corpus, how often an accepted
    /// document carried it (None: not counting).
    tally: std::sync::Mutex<Option<Vec<u8>>>,
    /// Accepted documents that carried a line number, and how many distinct.
    tally_docs: AtomicU64,
    tally_distinct: AtomicU64,
}

struct Receiver {
    addr: SocketAddr,
    stats: Arc<Stats>,
    epoch: Instant,
}

impl Receiver {
    fn start() -> Receiver {
        let stats = Arc::new(Stats::default());
        let epoch = Instant::now();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let st = stats.clone();
        std::thread::Builder::new()
            .name("receiver".into())
            .spawn(move || {
                // SAFETY: gettid has no preconditions.
                st.tid
                    .store(unsafe { libc::gettid() } as u64, Ordering::Relaxed);
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                    loop {
                        let Ok((stream, _)) = listener.accept().await else {
                            continue;
                        };
                        let _ = stream.set_nodelay(true);
                        let st = st.clone();
                        tokio::spawn(async move {
                            let svc = hyper::service::service_fn(move |req| {
                                handle(req, st.clone(), epoch)
                            });
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), svc)
                                .await;
                        });
                    }
                });
            })
            .unwrap();
        while stats.tid.load(Ordering::Relaxed) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        Receiver { addr, stats, epoch }
    }

    fn reset(&self, accepting: bool) {
        let s = &self.stats;
        for c in [
            &s.es_docs,
            &s.otlp_records,
            &s.requests,
            &s.refused,
            &s.body_bytes,
            &s.first_accept,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        s.refuse_status.store(0, Ordering::Relaxed);
        s.tally_docs.store(0, Ordering::Relaxed);
        s.tally_distinct.store(0, Ordering::Relaxed);
        *s.tally.lock().unwrap() = None;
        s.accepting.store(accepting, Ordering::SeqCst);
    }

    /// Like `reset`, and counts each accepted document by its line number
    /// (`lineno=` in the numbered corpus, `0..lines`).
    fn reset_counting(&self, accepting: bool, lines: u64) {
        self.reset(accepting);
        *self.stats.tally.lock().unwrap() = Some(vec![0u8; lines as usize]);
    }

    /// Accepted documents with a line number, and the distinct line numbers.
    fn tally(&self) -> (u64, u64) {
        (
            self.stats.tally_docs.load(Ordering::SeqCst),
            self.stats.tally_distinct.load(Ordering::SeqCst),
        )
    }

    fn first_accept(&self) -> Option<Instant> {
        match self.stats.first_accept.load(Ordering::SeqCst) {
            0 => None,
            n => Some(self.epoch + Duration::from_nanos(n)),
        }
    }

    fn cpu_s(&self) -> f64 {
        proc_sample(&format!(
            "/proc/self/task/{}",
            self.stats.tid.load(Ordering::Relaxed)
        ))
        .cpu_s
    }
}

fn thread_cpu_s() -> f64 {
    // SAFETY: gettid has no preconditions.
    proc_sample(&format!("/proc/self/task/{}", unsafe { libc::gettid() })).cpu_s
}

type Answer = hyper::Response<Full<Bytes>>;

async fn handle(
    req: hyper::Request<hyper::body::Incoming>,
    st: Arc<Stats>,
    epoch: Instant,
) -> Result<Answer, hyper::Error> {
    let path = req.uri().path().to_string();
    let gzip = req
        .headers()
        .get("content-encoding")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
    let wire = req.into_body().collect().await?.to_bytes();
    st.requests.fetch_add(1, Ordering::Relaxed);
    st.body_bytes
        .fetch_add(wire.len() as u64, Ordering::Relaxed);
    if !st.accepting.load(Ordering::SeqCst) {
        st.refused.fetch_add(1, Ordering::Relaxed);
        let status = match st.refuse_status.load(Ordering::Relaxed) {
            0 => 503,
            s => s as u16,
        };
        return Ok(answer(
            status,
            "application/json",
            br#"{"error":"not yet"}"#.to_vec(),
        ));
    }
    let body: Bytes = if gzip {
        let mut out = Vec::with_capacity(wire.len() * 4);
        if flate2::read::GzDecoder::new(&wire[..])
            .read_to_end(&mut out)
            .is_err()
        {
            return Ok(answer(400, "text/plain", b"bad gzip".to_vec()));
        }
        out.into()
    } else {
        wire
    };
    let (events, ct, out) = if path.ends_with("/_bulk") {
        let (docs, out) = bulk_answer(&body);
        tally_lines(&st, &body);
        st.es_docs.fetch_add(docs, Ordering::Relaxed);
        (docs, "application/json", out)
    } else if path == "/v1/logs" {
        let Some(n) = count_log_records(&body) else {
            return Ok(answer(400, "text/plain", b"bad protobuf".to_vec()));
        };
        st.otlp_records.fetch_add(n, Ordering::Relaxed);
        // An empty ExportLogsServiceResponse: everything accepted.
        (n, "application/x-protobuf", Vec::new())
    } else {
        return Ok(answer(404, "text/plain", b"no such API".to_vec()));
    };
    if events > 0 {
        let now = epoch.elapsed().as_nanos() as u64;
        let _ = st
            .first_accept
            .compare_exchange(0, now.max(1), Ordering::SeqCst, Ordering::SeqCst);
    }
    Ok(answer(200, ct, out))
}

fn answer(status: u16, ct: &str, body: Vec<u8>) -> Answer {
    hyper::Response::builder()
        .status(status)
        .header("content-type", ct)
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

/// Counts the line numbers (`lineno=` and ten digits, once per document)
/// in an accepted `_bulk` body, when the receiver is counting.
fn tally_lines(st: &Stats, body: &[u8]) {
    let mut guard = st.tally.lock().unwrap();
    let Some(counts) = guard.as_mut() else {
        return;
    };
    let (mut docs, mut distinct) = (0u64, 0u64);
    for at in memchr::memmem::find_iter(body, LINENO) {
        let digits = body.get(at + LINENO.len()..at + LINENO.len() + 10);
        let Some(n) = digits.and_then(|d| std::str::from_utf8(d).ok()?.parse::<usize>().ok())
        else {
            continue;
        };
        let Some(c) = counts.get_mut(n) else {
            continue;
        };
        docs += 1;
        distinct += u64::from(*c == 0);
        *c = c.saturating_add(1);
    }
    st.tally_docs.fetch_add(docs, Ordering::SeqCst);
    st.tally_distinct.fetch_add(distinct, Ordering::SeqCst);
}

/// The `_bulk` answer: one `create` item per action line, with its `_id`.
fn bulk_answer(body: &[u8]) -> (u64, Vec<u8>) {
    let id_key = memchr::memmem::Finder::new(b"\"_id\":\"");
    let mut out = Vec::with_capacity(body.len() / 3 + 64);
    out.extend_from_slice(br#"{"took":1,"errors":false,"items":["#);
    let mut docs = 0u64;
    let mut start = 0;
    let mut action = true;
    for end in memchr::memchr_iter(b'\n', body).chain(std::iter::once(body.len())) {
        let line = &body[start..end];
        start = end + 1;
        if line.is_empty() {
            continue;
        }
        if action {
            let id = id_key
                .find(line)
                .map(|at| {
                    let rest = &line[at + 7..];
                    &rest[..memchr::memchr(b'"', rest).unwrap_or(0)]
                })
                .unwrap_or(b"");
            if docs > 0 {
                out.push(b',');
            }
            out.extend_from_slice(br#"{"create":{"_index":"holdfast-logs","_id":""#);
            out.extend_from_slice(id);
            out.extend_from_slice(br#"","_version":1,"result":"created","status":201}}"#);
            docs += 1;
        }
        action = !action;
    }
    out.extend_from_slice(b"]}");
    (docs, out)
}

/// Reads a protobuf varint at `*i`.
fn varint(b: &[u8], i: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*i)?;
        *i += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Calls `f(field, bytes)` for each length-delimited field of a message,
/// skipping the others.
fn each_len_field<'a>(b: &'a [u8], mut f: impl FnMut(u64, &'a [u8]) -> Option<()>) -> Option<()> {
    let mut i = 0;
    while i < b.len() {
        let key = varint(b, &mut i)?;
        match key & 7 {
            0 => {
                varint(b, &mut i)?;
            }
            1 => i += 8,
            5 => i += 4,
            2 => {
                let len = varint(b, &mut i)? as usize;
                let end = i.checked_add(len).filter(|&e| e <= b.len())?;
                f(key >> 3, &b[i..end])?;
                i = end;
            }
            _ => return None,
        }
    }
    (i == b.len()).then_some(())
}

/// Log records in an `ExportLogsServiceRequest`: resource_logs (1) →
/// scope_logs (2) → log_records (2), without decoding the records.
fn count_log_records(b: &[u8]) -> Option<u64> {
    let mut n = 0;
    each_len_field(b, |f, rl| {
        if f != 1 {
            return Some(());
        }
        each_len_field(rl, |f, sl| {
            if f != 2 {
                return Some(());
            }
            each_len_field(sl, |f, _| {
                n += u64::from(f == 2);
                Some(())
            })
        })
    })?;
    Some(n)
}

// ---------------------------------------------------------------------------
// Odds and ends

fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
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
