//! Segment log benchmark: what durability costs on *this* machine.
//!
//! ```text
//! cargo bench --bench seglog                          # full run, a few minutes
//! HOLDFAST_BENCH_QUICK=1 cargo bench --bench seglog   # smoke run, seconds
//! HOLDFAST_BENCH_DIR=/data/tmp cargo bench --bench seglog
//! ```
//!
//! Not a pass/fail test: it prints one table. Durable append throughput only
//! means something next to the disk's own limits, so the run first measures
//! those (4 KiB append + `fdatasync`, and sequential writes with an
//! `fdatasync` per MiB) in the same directory, then the log under
//! `fsync = "always"`:
//!
//! * 4 producers appending batches of 100 events (256 B and 1 KiB);
//! * 64 producers appending single events (group commit under contention);
//! * bytes the process caused to be written (`/proc/self/io` `write_bytes`)
//!   per payload byte, i.e. flash wear;
//! * a ~1 GiB backlog written by a child process (this same binary, switched
//!   by `HOLDFAST_BENCH_FILL_CHILD`) that is SIGKILLed mid-append: the time to
//!   open it, warm and (if the page cache can be dropped) cold, then a
//!   read + commit drain of it, then appends and reads at the same time;
//! * peak RSS of each phase (VmHWM, reset between phases via
//!   `/proc/self/clear_refs`).
//!
//! Each figure is printed with its target. Progress goes to stderr, the
//! table to stdout.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use holdfast::seglog::{Batch, Compression, FsyncPolicy, Log, LogOptions, StartAt, WhenFull};
use rand::Rng;

#[path = "common/table.rs"]
mod table;
use table::{thousands, Table};

const FILL_CHILD_ENV: &str = "HOLDFAST_BENCH_FILL_CHILD";
const FILL_BYTES_ENV: &str = "HOLDFAST_BENCH_FILL_BYTES";
const SEGMENT_ENV: &str = "HOLDFAST_BENCH_SEGMENT_BYTES";
const DRAIN: &str = "drain";
const MB: f64 = 1e6;
const MIB: f64 = (1 << 20) as f64;

/// Sizes and durations of one run.
struct Plan {
    quick: bool,
    /// Length of each disk probe and each timed append phase.
    probe: Duration,
    phase: Duration,
    backlog_bytes: u64,
    segment_bytes: u64,
}

impl Plan {
    fn from_env() -> Plan {
        let quick = quick();
        if quick {
            Plan {
                quick,
                probe: Duration::from_millis(300),
                phase: Duration::from_millis(300),
                backlog_bytes: 32 << 20,
                segment_bytes: 4 << 20,
            }
        } else {
            Plan {
                quick,
                probe: Duration::from_secs(2),
                phase: Duration::from_secs(3),
                backlog_bytes: 1 << 30,
                segment_bytes: 64 << 20,
            }
        }
    }
}

fn quick() -> bool {
    std::env::var("HOLDFAST_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Lets the disk go quiet before a measurement: writes back what is dirty
/// and gives the deletions of the previous phase (discards, on a file system
/// mounted with `discard`) time to finish, so one phase's clean-up does not
/// show up in the next one's fdatasync times.
fn settle() {
    let _ = Command::new("sync").status();
    if !quick() {
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The log's mechanics are measured without compression (synthetic
/// payloads would compress to nothing); the Loghub rows compare codecs.
fn options(segment_bytes: u64) -> LogOptions {
    options_with(segment_bytes, Compression::None)
}

fn options_with(segment_bytes: u64, compression: Compression) -> LogOptions {
    LogOptions {
        segment_bytes,
        max_bytes: 16 << 30,
        fsync: FsyncPolicy::Always,
        when_full: WhenFull::Block,
        compression,
        ..LogOptions::default()
    }
}

/// Every line of the Loghub samples in tests/fixtures/loghub, in file
/// order: real log lines, for what compression does with real payloads.
fn loghub_lines() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/loghub");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("reading tests/fixtures/loghub")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    files.sort();
    let mut lines = Vec::new();
    for f in files {
        let text = std::fs::read(&f).expect("reading a Loghub sample");
        lines.extend(
            text.split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .map(<[u8]>::to_vec),
        );
    }
    lines
}

fn main() {
    if let Ok(dir) = std::env::var(FILL_CHILD_ENV) {
        fill_child(PathBuf::from(dir));
        return;
    }
    let plan = Plan::from_env();
    let root = match std::env::var_os("HOLDFAST_BENCH_DIR") {
        Some(d) => PathBuf::from(d),
        // Under target/, so on the same file system as the build.
        None => PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
    };
    std::fs::create_dir_all(&root).expect("creating the bench directory");
    let tmp = tempfile::Builder::new()
        .prefix("seglog-bench-")
        .tempdir_in(&root)
        .expect("creating a temporary directory");
    let dir = tmp.path().to_path_buf();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut t = Table::new(52, 36, false);
    let run_started = Instant::now();

    // ---- machine context
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mount = mount_of(&dir);
    t.note(format!(
        "holdfast seglog benchmark ({}), {} cores, {:.1} GiB RAM",
        if plan.quick {
            "QUICK smoke run: sizes are tiny, figures are not meaningful"
        } else {
            "full run"
        },
        cores,
        meminfo("MemTotal").unwrap_or(0) as f64 / (1 << 20) as f64,
    ));
    t.note(format!(
        "bench dir {} on {}",
        dir.display(),
        mount
            .as_ref()
            .map_or("an unknown file system".into(), |m| format!(
                "{} ({}, mounted at {}, options {})",
                m.fstype, m.source, m.point, m.options
            ))
    ));
    t.note("MB = 10^6 bytes; every log below uses fsync = \"always\" (write + fdatasync before each acknowledgement)".into());

    // ---- the disk's own limits
    eprintln!("probing the disk...");
    let (syncs, sync_lat) = probe_sync_4k(&dir, plan.probe);
    t.head("disk limits (same directory, same run)");
    t.row(
        "4 KiB append + fdatasync",
        format!(
            "{syncs:.0} /s ({:.2} ms each)",
            sync_lat.as_secs_f64() * 1e3
        ),
        "reference".into(),
        None,
    );
    let seq = probe_seq(&dir, plan.probe);
    t.row(
        "sequential write, fdatasync every 1 MiB",
        format!("{:.1} MB/s", seq / MB),
        "reference".into(),
        None,
    );

    // ---- durable appends
    let mut amp_rows = Vec::new();
    t.head("durable appends (fresh log, 64 MiB segments)");
    for &(size, target) in &[(256usize, Some(1_000_000.0)), (1024, None)] {
        let name = format!("4 producers x batches of 100 x {size} B");
        eprintln!("{name}...");
        let m = rt.block_on(append_phase(
            &dir.join(format!("batch-{size}")),
            4,
            100,
            size,
            plan.phase,
        ));
        t.row(
            &name,
            format!(
                "{:.0} events/s, {:.1} MB/s",
                m.events_per_s(),
                m.payload_mb_per_s()
            ),
            target.map_or("-".into(), |x: f64| format!(">= {}", thousands(x))),
            target.map(|x| m.events_per_s() >= x),
        );
        t.row(
            "  payload rate / disk sequential limit",
            format!("{:.2}", m.payload_bytes as f64 / m.secs / seq),
            "-".into(),
            None,
        );
        t.detail(m.describe());
        amp_rows.push((name, m));
    }
    {
        let name = "64 producers x single 256 B events".to_string();
        eprintln!("{name}...");
        let m = rt.block_on(append_phase(&dir.join("single"), 64, 1, 256, plan.phase));
        t.row(
            &name,
            format!("{:.0} events/s", m.events_per_s()),
            ">= 150,000".into(),
            Some(m.events_per_s() >= 150_000.0),
        );
        t.row(
            "  ceiling: 64 events per 4 KiB append + fdatasync",
            format!("{:.0} events/s", 64.0 * syncs),
            "reference".into(),
            None,
        );
        t.detail(m.describe());
        amp_rows.push((name, m));
    }
    {
        let lines = Arc::new(loghub_lines());
        let avg = lines.iter().map(Vec::len).sum::<usize>() as f64 / lines.len() as f64;
        t.head(&format!(
            "durable appends of real log lines ({} Loghub lines, {avg:.0} B average), 4 producers x batches of 400",
            lines.len()
        ));
        for (label, c) in [
            ("compression = \"none\"", Compression::None),
            (
                "compression = \"zstd\" (level 1)",
                Compression::Zstd { level: 1 },
            ),
            ("compression = \"lz4\"", Compression::Lz4),
        ] {
            eprintln!("loghub {label}...");
            let m = rt.block_on(append_events(
                &dir.join("loghub"),
                4,
                400,
                lines.clone(),
                c,
                plan.phase,
            ));
            t.row(
                label,
                format!(
                    "{:.0} events/s, {:.1} MB/s; {:.3} on-disk bytes per payload byte",
                    m.events_per_s(),
                    m.payload_mb_per_s(),
                    m.frame_bytes as f64 / m.payload_bytes as f64
                ),
                "-".into(),
                None,
            );
            t.detail(m.describe());
            amp_rows.push((format!("Loghub lines, {label}"), m));
        }
    }
    t.head("bytes written per payload byte (flash wear), /proc/self/io write_bytes");
    for (name, m) in &amp_rows {
        match m.io_amplification() {
            Some(a) => t.row(name, format!("{a:.3}"), "<= 1.1".into(), Some(a <= 1.1)),
            None => t.row(name, "unavailable".into(), "<= 1.1".into(), None),
        }
        t.detail(format!(
            "  on-disk frame bytes / payload {:.3}; whole device {}",
            m.frame_bytes as f64 / m.payload_bytes as f64,
            m.device_bytes.map_or("unavailable".into(), |d| format!(
                "{:.3} (includes the journal and any other writer on the disk)",
                d as f64 / m.payload_bytes as f64
            ))
        ));
    }

    // ---- a large backlog left by a killed process
    let backlog = dir.join("backlog");
    t.head(&format!(
        "{:.0} MiB backlog written by a child that was SIGKILLed mid-append",
        plan.backlog_bytes as f64 / MIB
    ));
    eprintln!("filling the backlog in a child process...");
    let fill = fill_and_kill(&backlog, &plan);
    t.detail(format!(
        "  child: {} events ({:.0} MiB payload) in {:.1} s = {:.0} events/s with 4 x 100 x 256 B, killed by {}",
        fill.events,
        fill.payload_bytes as f64 / MIB,
        fill.secs,
        fill.events as f64 / fill.secs,
        fill.status
    ));

    reset_peak_rss();
    let started = Instant::now();
    let log = Log::open(&backlog, options(plan.segment_bytes)).expect("open after kill");
    let warm_open = started.elapsed();
    let s = log.stats();
    let active_len =
        std::fs::metadata(segment_paths(&backlog).last().unwrap()).map_or(0, |m| m.len());
    t.row(
        "open after SIGKILL (page cache warm)",
        format!("{:.3} s", warm_open.as_secs_f64()),
        "< 0.5 s".into(),
        Some(warm_open < Duration::from_millis(500)),
    );
    t.detail(format!(
        "  {} segments, {:.0} MiB, {} events; active segment {:.1} MiB scanned; torn tails truncated: {} ({} bytes)",
        s.segments,
        s.bytes as f64 / MIB,
        s.next_seq,
        active_len as f64 / MIB,
        s.counters.torn_tails,
        s.counters.torn_bytes
    ));
    log.close_blocking().expect("close");
    drop(log);
    let dropped = drop_page_cache();
    let started = Instant::now();
    let log = Log::open(&backlog, options(plan.segment_bytes)).expect("cold open");
    let cold_open = started.elapsed();
    match &dropped {
        Ok(_) => t.row(
            "open again, page cache dropped (cold)",
            format!("{:.3} s", cold_open.as_secs_f64()),
            "< 0.5 s".into(),
            Some(cold_open < Duration::from_millis(500)),
        ),
        Err(_) => t.row(
            "open again (page cache NOT dropped)",
            format!("{:.3} s", cold_open.as_secs_f64()),
            "< 0.5 s".into(),
            Some(cold_open < Duration::from_millis(500)),
        ),
    }
    t.detail(match &dropped {
        Ok(freed) => format!(
            "  echo 3 > /proc/sys/vm/drop_caches worked: page cache went from {:.0} to {:.0} MiB",
            freed.0 as f64 / 1024.0,
            freed.1 as f64 / 1024.0
        ),
        Err(e) => format!("  could not drop the page cache: {e}"),
    });
    let open_rss = peak_rss_kib();

    // A first pass with a reader without a cursor reads the backlog from disk
    // (cold when the cache was dropped) and leaves it in the page cache.
    reset_peak_rss();
    let mut cold = log.reader(0);
    let started = Instant::now();
    let (n, bytes) = drain(&mut cold, false);
    let secs = started.elapsed().as_secs_f64();
    drop(cold);
    t.row(
        &format!(
            "read-only pass, {}",
            if dropped.is_ok() {
                "cold (from disk)"
            } else {
                "page cache as left"
            }
        ),
        format!(
            "{:.0} events/s, {:.0} MB/s",
            n as f64 / secs,
            bytes as f64 / secs / MB
        ),
        "-".into(),
        None,
    );
    let cold_rss = peak_rss_kib();

    reset_peak_rss();
    let mut consumer = log.consumer(DRAIN, StartAt::Oldest).unwrap();
    let before = log.stats();
    let cpu0 = cpu_seconds();
    let started = Instant::now();
    let (n, bytes) = drain(&mut consumer, true);
    let secs = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let after = log.stats();
    t.row(
        "read + commit drain (one consumer, warm)",
        format!(
            "{:.0} events/s, {:.0} MB/s",
            n as f64 / secs,
            bytes as f64 / secs / MB
        ),
        ">= 2,000,000".into(),
        Some(n as f64 / secs >= 2e6),
    );
    t.detail(format!(
        "  {n} events in {secs:.2} s, {:.3} us CPU per event; {} segments deleted behind the consumer by then",
        cpu * 1e6 / n.max(1) as f64,
        after.counters.segments_deleted - before.counters.segments_deleted
    ));
    assert_eq!(
        consumer.position(),
        after.next_seq,
        "drain did not reach the end"
    );
    let drain_rss = peak_rss_kib();

    // Let the writer finish deleting the drained segments first.
    let waited = Instant::now();
    while log.stats().segments > 1 && waited.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    settle();
    reset_peak_rss();
    eprintln!("appending and reading at the same time...");
    let deleted0 = log.stats().counters.segments_deleted;
    let (appended, read, secs, lag, latency) =
        rt.block_on(concurrent(log.clone(), consumer, plan.phase));
    let deleted = log.stats().counters.segments_deleted - deleted0;
    t.row(
        "concurrent: 4 x 100 x 256 B appends + reader",
        format!(
            "{:.0} appended/s, {:.0} read/s",
            appended as f64 / secs,
            read as f64 / secs
        ),
        "-".into(),
        None,
    );
    t.detail(format!(
        "  {appended} appended, {read} read (and committed) in {secs:.2} s; largest reader lag seen {lag} events\n  \
         {}; {deleted} consumed segments deleted meanwhile (by the writer thread)",
        latency.describe()
    ));
    let concurrent_rss = peak_rss_kib();
    rt.block_on(log.close()).unwrap();
    drop(log);

    t.head(
        "memory: peak RSS (VmHWM, reset at each phase; file-backed pages of mapped segments count)",
    );
    let mut peak = 0;
    for (name, kib) in amp_rows
        .iter()
        .map(|(n, m)| (n.as_str(), m.peak_rss_kib))
        .chain([
            ("open the backlog (twice)", open_rss),
            ("read-only pass over the backlog", cold_rss),
            ("read + commit drain", drain_rss),
            ("concurrent append + read", concurrent_rss),
        ])
    {
        if let Some(k) = kib {
            peak = peak.max(k);
        }
        t.row(
            name,
            kib.map_or("unavailable".into(), |k| {
                format!("{:.1} MiB", k as f64 / 1024.0)
            }),
            "-".into(),
            None,
        );
    }
    t.row(
        "whole benchmark process",
        format!(
            "{:.1} MiB",
            peak.max(peak_rss_kib().unwrap_or(0)) as f64 / 1024.0
        ),
        "-".into(),
        None,
    );
    // The disk's speed drifts (a virtual disk shares its host): measure it
    // again so each figure above can be read against both.
    eprintln!("probing the disk again...");
    let (syncs2, sync_lat2) = probe_sync_4k(&dir, plan.probe);
    let seq2 = probe_seq(&dir, plan.probe);
    t.head("disk limits again, after the log phases (the disk's speed drifts)");
    t.row(
        "4 KiB append + fdatasync",
        format!(
            "{syncs2:.0} /s ({:.2} ms each)",
            sync_lat2.as_secs_f64() * 1e3
        ),
        "reference".into(),
        None,
    );
    t.row(
        "sequential write, fdatasync every 1 MiB",
        format!("{:.1} MB/s", seq2 / MB),
        "reference".into(),
        None,
    );
    t.note(format!(
        "\ntotal run time {:.0} s",
        run_started.elapsed().as_secs_f64()
    ));
    t.print();
}

// ---------------------------------------------------------------------------
// Disk probes

/// Appends 4 KiB and `fdatasync`s, over and over: the disk's durable
/// round trip for a growing file, which is what each group commit costs.
fn probe_sync_4k(dir: &Path, dur: Duration) -> (f64, Duration) {
    settle();
    let path = dir.join("probe-4k");
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    let buf = vec![0xa5u8; 4096];
    let started = Instant::now();
    let mut n = 0u32;
    while started.elapsed() < dur {
        f.write_all(&buf).unwrap();
        f.sync_data().unwrap();
        n += 1;
    }
    let t = started.elapsed();
    std::fs::remove_file(&path).unwrap();
    (n as f64 / t.as_secs_f64(), t / n.max(1))
}

/// Sequential 1 MiB writes with an `fdatasync` after each; bytes per second.
fn probe_seq(dir: &Path, dur: Duration) -> f64 {
    settle();
    let path = dir.join("probe-seq");
    let mut f = File::create(&path).unwrap();
    let buf: Vec<u8> = (0..1 << 20).map(|i| (i * 7) as u8).collect();
    let started = Instant::now();
    let mut bytes = 0u64;
    while started.elapsed() < dur && bytes < 4 << 30 {
        f.write_all(&buf).unwrap();
        f.sync_data().unwrap();
        bytes += buf.len() as u64;
    }
    let t = started.elapsed();
    std::fs::remove_file(&path).unwrap();
    bytes as f64 / t.as_secs_f64()
}

// ---------------------------------------------------------------------------
// Append phases

/// What one timed append phase did and cost.
struct Measured {
    secs: f64,
    events: u64,
    payload_bytes: u64,
    /// Frame bytes the log wrote (headers and event lengths included).
    frame_bytes: u64,
    frames: u64,
    fsyncs: u64,
    fsync_secs: f64,
    cpu_secs: f64,
    io_write_bytes: Option<u64>,
    device_bytes: Option<u64>,
    peak_rss_kib: Option<u64>,
    latency: Latency,
}

impl Measured {
    fn events_per_s(&self) -> f64 {
        self.events as f64 / self.secs
    }

    fn payload_mb_per_s(&self) -> f64 {
        self.payload_bytes as f64 / self.secs / MB
    }

    fn io_amplification(&self) -> Option<f64> {
        self.io_write_bytes
            .map(|b| b as f64 / self.payload_bytes as f64)
    }

    fn describe(&self) -> String {
        format!(
            "  {} events in {:.2} s; {}\n  {} group commits ({:.0} events, {:.1} KiB each), \
             fdatasync {:.2} ms avg ({:.0}% of wall time); CPU {:.2} us/event ({:.0}% of {} cores)",
            self.events,
            self.secs,
            self.latency.describe(),
            self.frames,
            self.events as f64 / self.frames.max(1) as f64,
            self.frame_bytes as f64 / self.frames.max(1) as f64 / 1024.0,
            self.fsync_secs * 1e3 / self.fsyncs.max(1) as f64,
            self.fsync_secs * 100.0 / self.secs,
            self.cpu_secs * 1e6 / self.events.max(1) as f64,
            self.cpu_secs * 100.0 / self.secs / cores() as f64,
            cores(),
        )
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `producers` tasks append batches of `batch` events of `size` bytes to a
/// fresh log for `dur`; every append is awaited before the next.
async fn append_phase(
    dir: &Path,
    producers: usize,
    batch: usize,
    size: usize,
    dur: Duration,
) -> Measured {
    let event: Vec<u8> = (0..size).map(|i| b"holdfast"[i % 8]).collect();
    append_events(
        dir,
        producers,
        batch,
        Arc::new(vec![event]),
        Compression::None,
        dur,
    )
    .await
}

/// [`append_phase`] with the events taken in turn from `events`, in a log
/// compressing with `compression`.
async fn append_events(
    dir: &Path,
    producers: usize,
    batch: usize,
    events: Arc<Vec<Vec<u8>>>,
    compression: Compression,
    dur: Duration,
) -> Measured {
    settle();
    let log = Log::open(dir, options_with(64 << 20, compression)).unwrap();
    let device = mount_of(dir).and_then(|m| device_stat_path(&m.source));
    let stop = Arc::new(AtomicBool::new(false));
    let payload_bytes = Arc::new(AtomicU64::new(0));
    reset_peak_rss();
    let c0 = log.stats().counters;
    let io0 = io_write_bytes();
    let dev0 = device.as_deref().and_then(device_written_bytes);
    let cpu0 = cpu_seconds();
    let started = Instant::now();
    let tasks: Vec<_> = (0..producers)
        .map(|p| {
            tokio::spawn(produce(
                log.clone(),
                stop.clone(),
                batch,
                events.clone(),
                p * 7919,
                payload_bytes.clone(),
            ))
        })
        .collect();
    tokio::time::sleep(dur).await;
    stop.store(true, Ordering::Relaxed);
    let (mut events, mut lat) = (0, Vec::new());
    for t in tasks {
        let (n, l) = t.await.unwrap();
        events += n;
        lat.extend(l);
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu_secs = cpu_seconds() - cpu0;
    let io1 = io_write_bytes();
    let dev1 = device.as_deref().and_then(device_written_bytes);
    let c1 = log.stats().counters;
    let peak_rss_kib = peak_rss_kib();
    log.close().await.unwrap();
    drop(log);
    std::fs::remove_dir_all(dir).unwrap();
    assert_eq!(events, c1.appended_events - c0.appended_events);
    Measured {
        secs,
        events,
        payload_bytes: payload_bytes.load(Ordering::Relaxed),
        frame_bytes: c1.bytes_written - c0.bytes_written,
        frames: c1.frames_written - c0.frames_written,
        fsyncs: c1.fsyncs - c0.fsyncs,
        fsync_secs: (c1.fsync_nanos - c0.fsync_nanos) as f64 / 1e9,
        cpu_secs,
        io_write_bytes: io0.zip(io1).map(|(a, b)| b - a),
        device_bytes: dev0.zip(dev1).map(|(a, b)| b - a),
        peak_rss_kib,
        latency: Latency::of(lat),
    }
}

/// Appends until stopped; returns the events appended and each append's
/// latency in microseconds.
async fn produce(
    log: Log,
    stop: Arc<AtomicBool>,
    batch: usize,
    events: Arc<Vec<Vec<u8>>>,
    mut next: usize,
    payload: Arc<AtomicU64>,
) -> (u64, Vec<u32>) {
    let mut n = 0;
    let mut lat = Vec::with_capacity(1 << 16);
    while !stop.load(Ordering::Relaxed) {
        let mut b = Batch::with_capacity(batch * (events[0].len() + 4));
        let mut bytes = 0;
        for _ in 0..batch {
            let e = &events[next % events.len()];
            next += 1;
            bytes += e.len() as u64;
            b.push(e);
        }
        payload.fetch_add(bytes, Ordering::Relaxed);
        let t = Instant::now();
        log.append(b).await.expect("append");
        lat.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
        n += batch as u64;
    }
    (n, lat)
}

/// Append latency percentiles.
#[derive(Default)]
struct Latency {
    p50_us: u32,
    p99_us: u32,
    max_us: u32,
}

impl Latency {
    fn of(mut v: Vec<u32>) -> Latency {
        if v.is_empty() {
            return Latency::default();
        }
        v.sort_unstable();
        let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize];
        Latency {
            p50_us: at(0.5),
            p99_us: at(0.99),
            max_us: *v.last().unwrap(),
        }
    }

    fn describe(&self) -> String {
        format!(
            "append latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            self.p50_us as f64 / 1e3,
            self.p99_us as f64 / 1e3,
            self.max_us as f64 / 1e3
        )
    }
}

// ---------------------------------------------------------------------------
// The backlog

struct Fill {
    events: u64,
    payload_bytes: u64,
    secs: f64,
    status: String,
}

/// Runs this binary as a child that fills `dir` to the plan's backlog size,
/// waits until it says so, lets it append a little more and SIGKILLs it.
fn fill_and_kill(dir: &Path, plan: &Plan) -> Fill {
    settle();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(FILL_CHILD_ENV, dir)
        // Stop a fifth of a segment short of the plan's size, so that the
        // kill lands when the active segment (the one recovery scans) is
        // large: the slow case for opening.
        .env(
            FILL_BYTES_ENV,
            (plan.backlog_bytes - plan.segment_bytes / 5).to_string(),
        )
        .env(SEGMENT_ENV, plan.segment_bytes.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawning the fill child");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let full = loop {
        match lines.next() {
            Some(Ok(l)) if l.starts_with("FULL ") => break l,
            Some(Ok(_)) => {}
            other => {
                let _ = child.kill();
                panic!(
                    "fill child ended without filling the log: {other:?}, {:?}",
                    child.wait()
                );
            }
        }
    };
    // Kill at a random point of a later group commit.
    std::thread::sleep(Duration::from_millis(rand::rng().random_range(1..40)));
    child.kill().unwrap();
    let status = child.wait().unwrap();
    let v: Vec<f64> = full
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    Fill {
        events: v[0] as u64,
        payload_bytes: v[1] as u64,
        secs: v[2],
        status: match std::os::unix::process::ExitStatusExt::signal(&status) {
            Some(9) => "SIGKILL".into(),
            _ => format!("{status:?} (NOT a SIGKILL)"),
        },
    }
}

/// The child: 4 producers append until the log holds the requested bytes,
/// say `FULL <events> <payload bytes> <seconds>`, and keep appending until
/// killed (or until it is clear nobody will: the parent is gone or far too
/// much time has passed).
fn fill_child(dir: PathBuf) {
    let target: u64 = std::env::var(FILL_BYTES_ENV).unwrap().parse().unwrap();
    let segment: u64 = std::env::var(SEGMENT_ENV).unwrap().parse().unwrap();
    let log = Log::open(&dir, options(segment)).unwrap();
    // Registered before the data, as a sink would be.
    drop(log.consumer(DRAIN, StartAt::Oldest).unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let events = Arc::new(AtomicU64::new(0));
    let said = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    rt.block_on(async {
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let (log, events, said) = (log.clone(), events.clone(), said.clone());
                tokio::spawn(async move {
                    let event = [0x5au8; 256];
                    loop {
                        let mut b = Batch::with_capacity(100 * 260);
                        for _ in 0..100 {
                            b.push(&event);
                        }
                        log.append(b).await.unwrap();
                        let n = events.fetch_add(100, Ordering::Relaxed) + 100;
                        let bytes = n * 260;
                        if bytes >= target && !said.swap(true, Ordering::Relaxed) {
                            let secs = started.elapsed().as_secs_f64();
                            let mut out = std::io::stdout().lock();
                            if writeln!(out, "FULL {n} {} {secs}", n * 256)
                                .and_then(|_| out.flush())
                                .is_err()
                            {
                                std::process::exit(1);
                            }
                        }
                        if bytes >= 2 * target || started.elapsed() > Duration::from_secs(600) {
                            std::process::exit(2);
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
}

fn segment_paths(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    v.sort();
    v
}

/// Reads everything from the consumer's position, committing after each
/// batch if asked. Returns events and payload bytes.
fn drain(c: &mut holdfast::seglog::Consumer, commit: bool) -> (u64, u64) {
    let (mut n, mut bytes) = (0u64, 0u64);
    loop {
        let events = c.read(10_000, 4 << 20).unwrap();
        let Some(last) = events.last() else {
            return (n, bytes);
        };
        n += events.len() as u64;
        bytes += events.iter().map(|e| e.data.len() as u64).sum::<u64>();
        if commit {
            c.commit(last.seq + 1).unwrap();
        }
    }
}

/// Four producers as in the append phase and one consumer reading and
/// committing, for `dur`; then the consumer catches up. Returns appended,
/// read, seconds, the largest lag the consumer saw and append latencies.
async fn concurrent(
    log: Log,
    mut consumer: holdfast::seglog::Consumer,
    dur: Duration,
) -> (u64, u64, f64, u64, Latency) {
    let stop = Arc::new(AtomicBool::new(false));
    let events = Arc::new(vec![vec![0x33u8; 256]]);
    let started = Instant::now();
    let payload = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            tokio::spawn(produce(
                log.clone(),
                stop.clone(),
                100,
                events.clone(),
                0,
                payload.clone(),
            ))
        })
        .collect();
    let reader = {
        let log = log.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let (mut n, mut lag) = (0u64, 0u64);
            loop {
                let events = consumer.read(10_000, 4 << 20).unwrap();
                match events.last() {
                    Some(last) => {
                        n += events.len() as u64;
                        consumer.commit(last.seq + 1).unwrap();
                        lag = lag.max(log.next_seq() - consumer.position());
                    }
                    None if stop.load(Ordering::Relaxed) => return (n, lag),
                    None => tokio::time::timeout(Duration::from_millis(50), consumer.wait())
                        .await
                        .map_or((), |_| ()),
                }
            }
        })
    };
    tokio::time::sleep(dur).await;
    stop.store(true, Ordering::Relaxed);
    let (mut appended, mut lat) = (0, Vec::new());
    for t in tasks {
        let (n, l) = t.await.unwrap();
        appended += n;
        lat.extend(l);
    }
    let (read, lag) = reader.await.unwrap();
    (
        appended,
        read,
        started.elapsed().as_secs_f64(),
        lag,
        Latency::of(lat),
    )
}

// ---------------------------------------------------------------------------
// The machine, from /proc and /sys

/// A `key: value [kB]` field of a /proc file.
fn proc_field(path: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.split_whitespace().next()?.parse().ok())?
    })
}

fn meminfo(key: &str) -> Option<u64> {
    proc_field("/proc/meminfo", key)
}

/// Bytes this process caused to be sent to the storage layer (counted when
/// page-cache pages are dirtied, so re-dirtying a synced partial page counts
/// again — exactly the wear a small group commit causes).
fn io_write_bytes() -> Option<u64> {
    proc_field("/proc/self/io", "write_bytes")
}

fn peak_rss_kib() -> Option<u64> {
    proc_field("/proc/self/status", "VmHWM")
}

/// Resets VmHWM to the current RSS (Linux >= 4.0).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// User + system CPU seconds of the whole process (/proc ticks are 1/100 s).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    (f.get(11).unwrap_or(&0) + f.get(12).unwrap_or(&0)) as f64 / 100.0
}

struct Mount {
    point: String,
    fstype: String,
    source: String,
    options: String,
}

/// The mount holding `path`, from /proc/self/mountinfo.
fn mount_of(path: &Path) -> Option<Mount> {
    let path = path.canonicalize().ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let l: Vec<&str> = left.split_whitespace().collect();
            let r: Vec<&str> = right.split_whitespace().collect();
            Some(Mount {
                point: l.get(4)?.to_string(),
                options: l.get(5)?.to_string(),
                fstype: r.first()?.to_string(),
                source: r.get(1)?.to_string(),
            })
        })
        .filter(|m| path.starts_with(&m.point))
        .max_by_key(|m| m.point.len())
}

fn device_stat_path(source: &str) -> Option<PathBuf> {
    let name = source.strip_prefix("/dev/")?;
    let p = PathBuf::from(format!("/sys/class/block/{name}/stat"));
    p.exists().then_some(p)
}

/// Bytes written to the whole block device so far.
fn device_written_bytes(stat: &Path) -> Option<u64> {
    let s = std::fs::read_to_string(stat).ok()?;
    let sectors: u64 = s.split_whitespace().nth(6)?.parse().ok()?;
    Some(sectors * 512)
}

/// Syncs and drops the page cache; returns the page cache size (KiB)
/// before and after, or why it could not.
fn drop_page_cache() -> Result<(u64, u64), String> {
    let before = meminfo("Cached").unwrap_or(0);
    let _ = Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3").map_err(|e| {
        format!("writing /proc/sys/vm/drop_caches: {e} (needs root outside a container)")
    })?;
    Ok((before, meminfo("Cached").unwrap_or(0)))
}
