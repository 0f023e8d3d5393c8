//! `journald` source benchmark: a ~1 GiB journal directory read from the
//! beginning into a log with `fsync = "always"`.
//!
//! ```text
//! cargo bench --bench journald                                  # ~1 GiB journal
//! HOLDFAST_JOURNALD_BENCH_BYTES=64MiB cargo bench --bench journald  # quick run
//! HOLDFAST_BENCH_QUICK=1 cargo bench --bench journald           # same as 64MiB
//! HOLDFAST_BENCH_DIR=/data/tmp cargo bench --bench journald     # where the log goes
//! ```
//!
//! The journal is written once by `systemd-journal-remote` from generated
//! export-format entries shaped like a real system's (the fields journald
//! adds to a syslog message: `_SYSTEMD_UNIT`, `_PID`, `_COMM`, `_EXE`,
//! `_CMDLINE`, `_HOSTNAME`, `_BOOT_ID`, `_MACHINE_ID`, `PRIORITY`,
//! `SYSLOG_IDENTIFIER`, … about 450-500 bytes an entry, the `MESSAGE` a
//! Loghub line) and kept under `target/bench-journal/<bytes>/` for the next
//! run. Its files are in the page cache by the time the clock starts: the
//! figures are sd-journal's and holdfast's CPU and the log's durable
//! appends, not the disk's read speed.
//!
//! Reported: `journalctl --directory D -o export > /dev/null` alone, what
//! the first, journalctl-based reader could at most do (run twice: the
//! first read also fills the page cache), then the source as in the daemon
//! (`sources::journald::run`, sd-journal in-process, `start_at =
//! "beginning"`) on a 2-worker tokio runtime until every entry is in the
//! log: entries/s, CPU seconds of holdfast (this process, `RUSAGE_SELF`,
//! sd-journal included) per million entries, holdfast's peak RSS (`VmHWM`,
//! reset before the run; it counts the journal files sd-journal maps) and
//! peak anonymous RSS (`RssAnon`, sampled every 20 ms: holdfast's own
//! memory), and the load average before and after (the
//! machine may be shared: CPU per entry is the figure that does not depend
//! on it). Target: ≥ 200,000 entries/s.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use holdfast::component::ComponentContext;
use holdfast::metrics::Metrics;
use holdfast::seglog::{FsyncPolicy, Log, LogOptions, WhenFull};
use holdfast::sources::journald::{JournaldOptions, Journals, Selection, StartAt};
use tokio_util::sync::CancellationToken;

const TARGET_ENTRIES_PER_S: f64 = 200_000.0;
const JOURNAL_REMOTE: &str = "/usr/lib/systemd/systemd-journal-remote";
/// Entries written between two looks at the journal directory's size.
const CHUNK: usize = 20_000;

fn rusage(who: i32) -> f64 {
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own.
    let rc = unsafe { libc::getrusage(who, &mut r) };
    assert_eq!(rc, 0);
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(r.ru_utime) + t(r.ru_stime)
}

/// A `/proc/self/status` line's value, in MiB.
fn status_mib(key: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

fn peak_rss_mib() -> f64 {
    status_mib("VmHWM:")
}

/// `1GiB`, `64MiB`, `500000000`.
fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (n, mult) = if let Some(n) = s.strip_suffix("GiB") {
        (n, 1u64 << 30)
    } else if let Some(n) = s.strip_suffix("MiB") {
        (n, 1 << 20)
    } else {
        (s, 1)
    };
    n.trim().parse::<u64>().ok().map(|n| n * mult)
}

fn target_bytes() -> u64 {
    if let Ok(v) = std::env::var("HOLDFAST_JOURNALD_BENCH_BYTES") {
        return parse_size(&v).expect("HOLDFAST_JOURNALD_BENCH_BYTES: e.g. 64MiB or 1GiB");
    }
    let quick = std::env::var("HOLDFAST_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    if quick {
        64 << 20
    } else {
        1 << 30
    }
}

fn dir_bytes(d: &Path) -> u64 {
    std::fs::read_dir(d)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Loghub lines (`tests/fixtures/loghub/`), the messages of the entries.
fn messages() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/loghub");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/fixtures/loghub")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    names.sort();
    let mut out = Vec::new();
    for n in names {
        let f = std::fs::File::open(&n).unwrap();
        for l in std::io::BufReader::new(f).lines() {
            let l = l.unwrap_or_default();
            let l = l.trim_end_matches('\r');
            if !l.is_empty() {
                out.push(l.to_string());
            }
        }
    }
    out
}

/// One entry in export format, as journald would have stored a syslog line.
fn entry(out: &mut Vec<u8>, i: usize, msg: &str) {
    const UNITS: [(&str, &str, &str); 6] = [
        ("sshd.service", "sshd", "/usr/sbin/sshd"),
        ("cron.service", "cron", "/usr/sbin/cron"),
        (
            "NetworkManager.service",
            "NetworkManager",
            "/usr/sbin/NetworkManager",
        ),
        (
            "systemd-logind.service",
            "systemd-logind",
            "/lib/systemd/systemd-logind",
        ),
        ("containerd.service", "containerd", "/usr/bin/containerd"),
        ("hdfs-datanode.service", "java", "/usr/lib/jvm/bin/java"),
    ];
    let (unit, comm, exe) = UNITS[i % UNITS.len()];
    let pid = 1000 + (i / 97) % 30_000;
    let us = 1_764_650_000_000_000u64 + i as u64 * 700;
    let host = i % 4;
    writeln!(
        out,
        "__REALTIME_TIMESTAMP={us}\n__MONOTONIC_TIMESTAMP={}\n\
         _BOOT_ID=3f1c2a9be07d4c5fa1e2b3c4d5e6f708\n_MACHINE_ID=9a8b7c6d5e4f40318293a4b5c6d7e8f9\n\
         _HOSTNAME=edge-gw-{host:02}.site.example\n_TRANSPORT=syslog\nPRIORITY={}\n\
         SYSLOG_FACILITY=3\nSYSLOG_IDENTIFIER={comm}\n_PID={pid}\n_UID=0\n_GID=0\n\
         _COMM={comm}\n_EXE={exe}\n_CMDLINE={exe} -D\n_CAP_EFFECTIVE=1ffffffffff\n\
         _SYSTEMD_CGROUP=/system.slice/{unit}\n_SYSTEMD_UNIT={unit}\n_SYSTEMD_SLICE=system.slice\n\
         _SYSTEMD_INVOCATION_ID=5c3a{pid:028x}\n_SOURCE_REALTIME_TIMESTAMP={}\nMESSAGE={msg}\n",
        us - 1_764_600_000_000_000,
        [6, 6, 6, 5, 4, 3, 6, 7][i % 8],
        us - 3,
    )
    .unwrap();
}

/// The cached journal directory of about `bytes`, and its entry count.
fn journal(bytes: u64) -> (PathBuf, u64) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/bench-journal")
        .join(bytes.to_string());
    let marker = root.join("entries");
    if let Some(n) = std::fs::read_to_string(&marker)
        .ok()
        .and_then(|s| s.trim().parse().ok())
    {
        return (root.join("journal"), n);
    }
    let _ = std::fs::remove_dir_all(&root);
    let dir = root.join("journal");
    std::fs::create_dir_all(&dir).unwrap();
    let started = Instant::now();
    let mut child = Command::new(JOURNAL_REMOTE)
        .arg(format!("--output={}", dir.join("bench.journal").display()))
        .arg("--split-mode=none")
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("systemd-journal-remote (package systemd-journal-remote)");
    let mut stdin = child.stdin.take().unwrap();
    let msgs = messages();
    let mut n = 0usize;
    let mut buf = Vec::with_capacity(CHUNK * 600);
    while dir_bytes(&dir) < bytes {
        buf.clear();
        for _ in 0..CHUNK {
            entry(&mut buf, n, &msgs[n % msgs.len()]);
            n += 1;
        }
        stdin.write_all(&buf).unwrap();
    }
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "systemd-journal-remote: {status}");
    std::fs::write(&marker, n.to_string()).unwrap();
    println!(
        "built {} ({n} entries, {:.0} MiB) in {:.0} s",
        dir.display(),
        dir_bytes(&dir) as f64 / (1 << 20) as f64,
        started.elapsed().as_secs_f64()
    );
    (dir, n as u64)
}

/// `journalctl -o export > /dev/null`: what the first, journalctl-based
/// reader could at most do (its reader's own rate, before any parsing).
fn ceiling(dir: &Path, entries: u64) -> f64 {
    let cpu0 = rusage(libc::RUSAGE_CHILDREN);
    let start = Instant::now();
    let status = Command::new("journalctl")
        .arg(format!("--directory={}", dir.display()))
        .args(["--output=export", "--no-pager"])
        .stdout(Stdio::null())
        .status()
        .expect("journalctl");
    assert!(status.success(), "journalctl: {status}");
    let secs = start.elapsed().as_secs_f64();
    let cpu = rusage(libc::RUSAGE_CHILDREN) - cpu0;
    let rate = entries as f64 / secs;
    let what = "journalctl -o export alone";
    println!(
        "{what:<33}  {entries:>9} entries {secs:>6.1} s {rate:>10.0} entries/s  {:>6.2} CPU s per million entries",
        cpu / entries as f64 * 1e6
    );
    rate
}

fn source(rt: &tokio::runtime::Runtime, root: &Path, dir: &Path, entries: u64) {
    let tmp = tempfile::tempdir_in(root).unwrap();
    let log = Log::open(
        tmp.path().join("log"),
        LogOptions {
            segment_bytes: 64 << 20,
            max_bytes: 64 << 30,
            fsync: FsyncPolicy::Always,
            when_full: WhenFull::Block,
            ..LogOptions::default()
        },
    )
    .unwrap();
    let opts = JournaldOptions {
        journals: Journals::Directory(dir.to_path_buf()),
        select: Selection::default(),
        start_at: StartAt::Beginning,
        fields: Vec::new(),
        max_entry_bytes: 2 << 20,
        checkpoint_dir: tmp.path().join("checkpoints/bench"),
    };
    let stop = CancellationToken::new();
    let metrics = Arc::new(Metrics::new(None));
    let ctx = ComponentContext::new("bench".into(), log.clone(), metrics, stop.clone());
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let cpu0 = rusage(libc::RUSAGE_SELF);
    let start = Instant::now();
    let task = rt.spawn(holdfast::sources::journald::run(ctx, opts));
    // VmHWM counts the journal files sd-journal maps (page cache, shared,
    // reclaimable); the anonymous part is what holdfast itself holds.
    let mut anon: f64 = 0.0;
    let mut polls = 0u32;
    while log.next_seq() < entries {
        polls += 1;
        if polls.is_multiple_of(4) {
            anon = anon.max(status_mib("RssAnon:"));
        }
        assert!(
            start.elapsed() < Duration::from_secs(1800),
            "entries missing: {} of {entries} in the log",
            log.next_seq()
        );
        assert!(!task.is_finished(), "the source stopped early");
        std::thread::sleep(Duration::from_millis(5));
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = rusage(libc::RUSAGE_SELF) - cpu0;
    let rss = peak_rss_mib();
    let anon = anon.max(status_mib("RssAnon:"));
    stop.cancel();
    rt.block_on(task).unwrap().unwrap();
    log.close_blocking().unwrap();
    let rate = entries as f64 / secs;
    println!(
        "holdfast journald source          {entries:>9} entries {secs:>6.1} s {rate:>10.0} entries/s ({})  \
         CPU s per million entries: holdfast {:.2} (sd-journal included)  peak RSS {rss:.1} MiB (anonymous {anon:.1} MiB)  load average after {}",
        if rate >= TARGET_ENTRIES_PER_S {
            "≥ 200k target"
        } else {
            "below the 200k target"
        },
        cpu / entries as f64 * 1e6,
        load_average(),
    );
}

/// `/proc/loadavg`'s three averages.
fn load_average() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn main() {
    let root = std::env::var_os("HOLDFAST_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let (dir, entries) = journal(target_bytes());
    println!(
        "journald source, fsync = always, journal {} ({:.0} MiB, {entries} entries), load average {}",
        dir.display(),
        dir_bytes(&dir) as f64 / (1 << 20) as f64,
        load_average()
    );
    // Twice: the first read also brings the journal into the page cache.
    ceiling(&dir, entries);
    ceiling(&dir, entries);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    source(&rt, &root, &dir, entries);
}
