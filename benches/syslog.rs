//! Syslog source benchmark: RFC 3164 and RFC 5424 lines over 4 TCP
//! connections into a log with `fsync = "always"`.
//!
//! ```text
//! cargo bench --bench syslog                          # full run
//! HOLDFAST_BENCH_QUICK=1 cargo bench --bench syslog   # smoke run, seconds
//! HOLDFAST_BENCH_DIR=/data/tmp cargo bench --bench syslog
//! ```
//!
//! Not a pass/fail test: it prints one line per scenario. The source runs
//! as in the daemon (`sources::syslog::run`) on a 2-worker tokio runtime;
//! the 4 senders are plain threads in this process writing a pre-built
//! chunk of 10,000 lines again and again (newline framing for 3164, octet
//! counting for 5424), so their cost is the kernel's and their memory a few
//! MiB of the peak RSS. Reported: lines/s from the first byte sent to the last
//! line durable, CPU seconds per million lines (whole process), and peak
//! RSS (VmHWM, reset before each scenario). syslog-ng (Debian's
//! `syslog-ng-core`, if installed) receives the same streams in the same
//! run, into a file without fsync, for comparison.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use holdfast::calendar::TimeZone;
use holdfast::component::ComponentContext;
use holdfast::metrics::Metrics;
use holdfast::seglog::{FsyncPolicy, Log, LogOptions, WhenFull};
use holdfast::sources::listen::Listener;
use holdfast::sources::syslog::{SyslogSourceSettings, Transport};
use tokio_util::sync::CancellationToken;

const CONNECTIONS: usize = 4;
/// Lines per pre-built chunk a sender repeats.
const CHUNK: usize = 10_000;
const TARGET_LINES_PER_S: f64 = 200_000.0;

fn quick() -> bool {
    std::env::var("HOLDFAST_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
}

fn cpu_seconds() -> f64 {
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) };
    assert_eq!(rc, 0);
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(r.ru_utime) + t(r.ru_stime)
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// The bytes one connection sends: `lines` messages of about 150 bytes.
fn stream(rfc5424: bool, conn: usize, lines: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(lines * 180);
    for i in 0..lines {
        if rfc5424 {
            let m = format!(
                "<165>1 2026-12-02T05:30:{:02}.{:06}Z sw{conn}.site.example sshd {} ID47 \
                 [meta@32473 seq=\"{i}\"] Accepted publickey for admin from 10.1.{}.{} port {}",
                i % 60,
                i % 1_000_000,
                1000 + i % 5000,
                i % 250,
                i % 200,
                40000 + i % 20000
            );
            write!(out, "{} {m}", m.len()).unwrap();
        } else {
            writeln!(
                out,
                "<38>Dec  2 05:30:{:02} sw{conn} sshd[{}]: Accepted publickey for admin from \
                 10.1.{}.{} port {} ssh2: ED25519 SHA256:Yx3k9 line {i}",
                i % 60,
                1000 + i % 5000,
                i % 250,
                i % 200,
                40000 + i % 20000
            )
            .unwrap();
        }
    }
    out
}

/// A loopback address with a port free a moment ago.
fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Waits until `who` accepts connections on `listen`.
fn wait_listening(listen: SocketAddr, who: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(listen).is_err() {
        assert!(Instant::now() < deadline, "{who} did not listen");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Sends each stream `repeats` times on a connection of its own, all at
/// once, and returns when every byte is written.
fn send_all(listen: SocketAddr, streams: Vec<Vec<u8>>, repeats: usize) {
    let senders: Vec<_> = streams
        .into_iter()
        .map(|s| {
            std::thread::spawn(move || {
                let mut c = TcpStream::connect(listen).unwrap();
                for _ in 0..repeats {
                    c.write_all(&s).unwrap();
                }
            })
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
}

fn scenario(rt: &tokio::runtime::Runtime, root: &std::path::Path, rfc5424: bool, per_conn: usize) {
    let name = if rfc5424 {
        "rfc5424 octet-counted"
    } else {
        "rfc3164 newline"
    };
    let dir = tempfile::tempdir_in(root).unwrap();
    let log = Log::open(
        dir.path().join("log"),
        LogOptions {
            segment_bytes: 64 << 20,
            max_bytes: 64 << 30,
            fsync: FsyncPolicy::Always,
            when_full: WhenFull::Block,
            ..LogOptions::default()
        },
    )
    .unwrap();
    let listen = free_port();
    let opts = SyslogSourceSettings {
        mode: Transport::Tcp,
        listener: Listener {
            listen,
            max_connections: NonZeroUsize::new(64).unwrap(),
            max_connections_per_peer: NonZeroUsize::new(64).unwrap(),
            tls_handshake_timeout: Duration::from_secs(10),
            tls: None,
        },
        max_message_size: 64 << 10,
        max_buffer_size: 64 << 20,
        idle_timeout: Duration::from_secs(600),
        time_zone: TimeZone::Utc,
    };
    let streams: Vec<Vec<u8>> = (0..CONNECTIONS)
        .map(|c| stream(rfc5424, c, CHUNK.min(per_conn)))
        .collect();
    let repeats = per_conn.div_ceil(CHUNK);
    let per_conn = repeats * CHUNK.min(per_conn);
    let bytes: usize = streams.iter().map(Vec::len).sum::<usize>() * repeats;
    let total = (CONNECTIONS * per_conn) as u64;
    let stop = CancellationToken::new();
    let metrics = Arc::new(Metrics::new(None));
    let ctx = ComponentContext::new("bench".into(), log.clone(), metrics, stop.clone());
    let task = rt.spawn(holdfast::sources::syslog::run(ctx, opts));
    // Connect once the listener is up.
    wait_listening(listen, "the source");
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    send_all(listen, streams, repeats);
    while log.next_seq() < total {
        assert!(start.elapsed() < Duration::from_secs(600), "lines missing");
        std::thread::sleep(Duration::from_millis(1));
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let rss = peak_rss_mib();
    stop.cancel();
    rt.block_on(task).unwrap().unwrap();
    log.close_blocking().unwrap();
    let rate = total as f64 / secs;
    println!(
        "{name:<24} {total:>9} lines {:>7.1} MiB  {rate:>10.0} lines/s ({})  {:>6.2} CPU s per million lines  peak RSS {rss:.1} MiB",
        bytes as f64 / (1 << 20) as f64,
        if rate >= TARGET_LINES_PER_S { "≥ 200k target" } else { "below the 200k target" },
        cpu / total as f64 * 1e6,
    );
}

/// syslog-ng receiving the same streams on the same 4 connections into a
/// file, parsing each message (its `syslog()` driver for RFC 5424 with
/// octet counting, `network()` for RFC 3164 lines), without fsync: the
/// reference the figures are set beside. Its CPU and peak RSS are read
/// from `/proc` just before it is stopped.
fn syslog_ng_scenario(root: &std::path::Path, rfc5424: bool, per_conn: usize) {
    let name = if rfc5424 {
        "syslog-ng rfc5424"
    } else {
        "syslog-ng rfc3164"
    };
    let Some(bin) = [
        "/usr/sbin/syslog-ng",
        "/usr/bin/syslog-ng",
        "/sbin/syslog-ng",
    ]
    .into_iter()
    .map(std::path::PathBuf::from)
    .find(|p| p.exists()) else {
        println!("{name:<24} not installed (apt-get install syslog-ng-core): skipped");
        return;
    };
    let dir = tempfile::tempdir_in(root).unwrap();
    let listen = free_port();
    let port = listen.port();
    let driver = if rfc5424 { "syslog" } else { "network" };
    let out = dir.path().join("out.log");
    let conf = dir.path().join("syslog-ng.conf");
    std::fs::write(
        &conf,
        format!(
            "@version: 3.38\n\
             options {{ threaded(yes); stats-freq(0); log-msg-size(65536); keep-hostname(yes); }};\n\
             source s_net {{ {driver}(ip(\"127.0.0.1\") port({port}) transport(\"tcp\") \
             max-connections(64) log-iw-size(400000) log-fetch-limit(1000)); }};\n\
             destination d_out {{ file(\"{}\" flush-lines(10000) fsync(no)); }};\n\
             log {{ source(s_net); destination(d_out); flags(flow-control); }};\n",
            out.display()
        ),
    )
    .unwrap();
    let mut child = std::process::Command::new(&bin)
        .args(["-F", "--no-caps", "-f"])
        .arg(&conf)
        .arg("-R")
        .arg(dir.path().join("persist"))
        .arg("-p")
        .arg(dir.path().join("pid"))
        .arg("-c")
        .arg(dir.path().join("ctl"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starting syslog-ng");
    wait_listening(listen, "syslog-ng");
    let streams: Vec<Vec<u8>> = (0..CONNECTIONS)
        .map(|c| stream(rfc5424, c, CHUNK.min(per_conn)))
        .collect();
    let repeats = per_conn.div_ceil(CHUNK);
    let total = (CONNECTIONS * repeats * CHUNK.min(per_conn)) as u64;
    let proc_cpu = |pid: u32| -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
        let f: Vec<&str> = after.split_whitespace().collect();
        let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        (ticks(11) + ticks(12)) / 100.0
    };
    let cpu0 = proc_cpu(child.id());
    let start = Instant::now();
    send_all(listen, streams, repeats);
    let mut lines = 0u64;
    let mut file = None;
    let mut buf = vec![0u8; 1 << 20];
    while lines < total {
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "syslog-ng lost lines"
        );
        if file.is_none() {
            file = std::fs::File::open(&out).ok();
        }
        let mut progressed = false;
        if let Some(f) = file.as_mut() {
            while let Ok(n) = std::io::Read::read(f, &mut buf) {
                if n == 0 {
                    break;
                }
                progressed = true;
                lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
            }
        }
        if !progressed {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = proc_cpu(child.id()) - cpu0;
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0);
    let _ = child.kill();
    let _ = child.wait();
    println!(
        "{name:<24} {total:>9} lines  {:>10.0} lines/s (no fsync)  {:>6.2} CPU s per million lines  peak RSS {rss:.1} MiB",
        total as f64 / secs,
        cpu / total as f64 * 1e6,
    );
}

fn main() {
    let root = std::env::var_os("HOLDFAST_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let per_conn = if quick() { 20_000 } else { 500_000 };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "syslog source, {CONNECTIONS} TCP connections, fsync = always, {} lines each",
        per_conn
    );
    for rfc5424 in [false, true] {
        scenario(&rt, &root, rfc5424, per_conn);
        syslog_ng_scenario(&root, rfc5424, per_conn);
    }
}
