//! Scrape and remote write beside Prometheus in agent mode (issue 30), in
//! one run, on the same targets, to the same receiver, through the same
//! receiver outage.
//!
//! ```text
//! cargo bench --bench metrics                                   # 2 min, a 10 min outage, 3 min after
//! HOLDFAST_BENCH_OUTAGE_SECS=120 cargo bench --bench metrics    # a shorter outage
//! HOLDFAST_BENCH_SERIES=10000 HOLDFAST_BENCH_QUICK=1 cargo bench --bench metrics   # smoke run
//! HOLDFAST_BENCH_BIN=/path/to/old/holdfast cargo bench --bench metrics   # another build
//! ```
//!
//! Not a pass/fail test: it prints one table.
//!
//! * Targets: Debian's `prometheus-node-exporter`, and a synthetic target
//!   in this process serving `HOLDFAST_BENCH_SERIES` gauges (default
//!   100,000), every value new at each scrape.
//! * The receiver: Debian's `prometheus` with
//!   `--web.enable-remote-write-receiver` and a 1 h out-of-order window
//!   (tests/common/prometheus.rs).
//! * The contenders, side by side, each scraping both targets every 15 s
//!   and writing to the receiver, told apart by a label `agent`:
//!   holdfast (the release binary: a `prometheus_scrape` source, the log
//!   with `fsync = "always"`, a `prometheus_remote_write` sink) and
//!   `prometheus --enable-feature=agent` (its write-ahead log, its remote
//!   write queue).
//! * Timeline: `HOLDFAST_BENCH_WARM_SECS` (120) flowing, the receiver
//!   killed for `HOLDFAST_BENCH_OUTAGE_SECS` (600), started again on the
//!   same storage, `HOLDFAST_BENCH_AFTER_SECS` (180) to catch up.
//!
//! Figures per contender, from its process: CPU (`utime + stime`), peak
//! RSS (`VmHWM`) and bytes written (`write_bytes` of `/proc/PID/io`), per
//! sample scraped (series × scrapes); and from the receiver: of the samples
//! scraped during the outage, how many it holds at the end.

#[path = "../../tests/common/daemon.rs"]
mod daemon;
#[path = "../../tests/common/prometheus.rs"]
mod prometheus;
#[path = "../../tests/common/require.rs"]
mod require;
#[path = "../common/table.rs"]
mod table;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use daemon::Agent;
use prometheus::{NodeExporter, Prometheus};
use table::{thousands, Table};

const INTERVAL_S: u64 = 15;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// CPU seconds (user + system) of process `pid` so far.
fn proc_cpu(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf only reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz.max(1.0)
}

/// A `/proc/PID/status` field in KiB (`VmHWM`, `VmRSS`).
fn status_kib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0)
}

/// Bytes the process caused to be written to storage (`write_bytes`).
fn write_bytes(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The synthetic target: `series` gauges, new values at every scrape.
fn synthetic_target(series: u64) -> (u16, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let scrapes = Arc::new(AtomicU64::new(0));
    let count = scrapes.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let n = count.fetch_add(1, Ordering::Relaxed);
            std::thread::spawn(move || {
                let mut req = String::new();
                let mut r = BufReader::new(s.try_clone().unwrap());
                while r.read_line(&mut req).is_ok_and(|k| k > 2) {
                    req.clear();
                }
                let mut body = String::with_capacity(series as usize * 64);
                body += "# HELP bench_synthetic A synthetic gauge.\n# TYPE bench_synthetic gauge\n";
                for i in 0..series {
                    body += &format!(
                        "bench_synthetic{{shard=\"{}\",series=\"{i}\"}} {}\n",
                        i % 16,
                        (i + n) % 1000
                    );
                }
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(body.as_bytes());
            });
        }
    });
    (port, scrapes)
}

/// Prometheus in agent mode on the same targets and receiver.
fn prometheus_agent(dir: &std::path::Path, targets: &[String], write: &str) -> Child {
    let list: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
    let conf = dir.join("agent.yml");
    std::fs::write(
        &conf,
        format!(
            "global:\n  scrape_interval: {INTERVAL_S}s\n  scrape_timeout: 10s\n  external_labels:\n    agent: prometheus\n\
             scrape_configs:\n  - job_name: bench\n    static_configs:\n      - targets: [{}]\n\
             remote_write:\n  - url: {write}\n",
            list.join(", ")
        ),
    )
    .unwrap();
    let port = daemon::free_port();
    Command::new("prometheus")
        .arg("--enable-feature=agent")
        .arg(format!("--config.file={}", conf.display()))
        .arg(format!(
            "--storage.agent.path={}",
            dir.join("wal").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("agent.log")).unwrap())
        .spawn()
        .expect("prometheus --enable-feature=agent")
}

fn holdfast_agent(targets: &[String], write: &str, series: u64) -> Agent {
    let list: Vec<String> = targets
        .iter()
        .map(|t| format!("\"http://{t}/metrics\""))
        .collect();
    let mut agent = Agent::new(&format!(
        r#"
[log]
fsync = "always"

[sources.scrape]
type = "prometheus_scrape"
targets = [{}]
interval = "{INTERVAL_S}s"
timeout = "10s"
max_samples = {}
max_body_size = "64MiB"
labels = {{ agent = "holdfast" }}

[sinks.rw]
type = "prometheus_remote_write"
inputs = ["scrape"]
endpoint = "{write}"
"#,
        list.join(", "),
        series * 2 + 10_000
    ));
    // Another build to compare with, run in turns with this one.
    if let Ok(bin) = std::env::var("HOLDFAST_BENCH_BIN") {
        agent.bin = bin;
    }
    agent.start();
    agent.wait_ready();
    agent
}

/// One value of an instant query at `at`; NaN (printed, never a panic:
/// the run's figures are worth more than one query) when it has none.
fn scalar(p: &Prometheus, q: &str, at: f64) -> f64 {
    let target = format!(
        "/api/v1/query?query={}&time={at:.3}",
        prometheus::url_encode(q)
    );
    let answer = prometheus::http_get(p.addr(), &target)
        .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(&body).ok());
    match answer {
        Some(v) if v["status"] == "success" => v["data"]["result"][0]["value"][1]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0),
        other => {
            eprintln!("metrics bench: query {q} failed: {other:?}");
            f64::NAN
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !prometheus::available("bench metrics") {
        eprintln!("metrics bench: needs prometheus and prometheus-node-exporter");
        return;
    }
    let quick = std::env::var("HOLDFAST_BENCH_QUICK").is_ok();
    let series = env_u64("HOLDFAST_BENCH_SERIES", 100_000);
    let warm = env_u64("HOLDFAST_BENCH_WARM_SECS", if quick { 35 } else { 120 });
    let outage = env_u64("HOLDFAST_BENCH_OUTAGE_SECS", if quick { 35 } else { 600 });
    let after = env_u64("HOLDFAST_BENCH_AFTER_SECS", if quick { 60 } else { 180 });

    let mut receiver = Prometheus::started();
    let exporter = NodeExporter::started();
    let (synthetic, _scrapes) = synthetic_target(series);
    let targets = vec![
        format!("127.0.0.1:{}", exporter.port),
        format!("127.0.0.1:{synthetic}"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let began = now_s();
    let hf = holdfast_agent(&targets, &receiver.write_url(), series);
    let mut pa = prometheus_agent(dir.path(), &targets, &receiver.write_url());
    let pids = [("holdfast", hf.pid() as u32), ("prometheus agent", pa.id())];
    let cpu0: Vec<f64> = pids.iter().map(|(_, p)| proc_cpu(*p)).collect();
    let wb0: Vec<f64> = pids.iter().map(|(_, p)| write_bytes(*p)).collect();

    eprintln!("metrics bench: {warm} s flowing");
    std::thread::sleep(Duration::from_secs(warm));
    receiver.kill9();
    let down = now_s();
    eprintln!("metrics bench: receiver down for {outage} s");
    std::thread::sleep(Duration::from_secs(outage));
    receiver.start();
    let back = now_s();
    eprintln!("metrics bench: receiver back; {after} s to catch up");
    let end_at = Instant::now() + Duration::from_secs(after);
    std::thread::sleep(end_at.saturating_duration_since(Instant::now()));
    let end = now_s();

    let mut t = Table::new(44, 16, false);
    t.note(format!(
        "metrics bench: {} cores, load {}; targets: node exporter + {} synthetic series, every {INTERVAL_S} s; \
         {warm} s flowing, {outage} s receiver outage, {after} s after; holdfast fsync = \"always\"",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
        thousands(series as f64)
    ));
    // Both processes' figures at the same moment, before any query.
    let figures: Vec<(f64, f64, f64)> = pids
        .iter()
        .enumerate()
        .map(|(i, (_, pid))| {
            (
                proc_cpu(*pid) - cpu0[i],
                status_kib(*pid, "VmHWM:") / 1024.0,
                write_bytes(*pid) - wb0[i],
            )
        })
        .collect();
    for (i, (name, _)) in pids.iter().enumerate() {
        let (cpu, rss, written) = figures[i];
        let label = if i == 0 { "holdfast" } else { "prometheus" };
        // Scrapes each made, from its own `up` samples of the synthetic target.
        let up = format!("up{{agent=\"{label}\",instance=\"127.0.0.1:{synthetic}\"}}");
        let window = (end - began).ceil() as u64;
        let scrapes = scalar(&receiver, &format!("count_over_time({up}[{window}s])"), end);
        let gap = (back - down).ceil() as u64;
        let gap_up = scalar(&receiver, &format!("count_over_time({up}[{gap}s])"), back);
        let gap_samples = scalar(
            &receiver,
            &format!("sum(count_over_time(bench_synthetic{{agent=\"{label}\"}}[{gap}s]))"),
            back,
        );
        // Series each delivered, at the end (every series is scraped each
        // 15 s, well inside the 5 min lookback).
        let stored_series = scalar(&receiver, &format!("count({{agent=\"{label}\"}})"), end);
        let samples = stored_series * scrapes;
        t.head(name);
        t.row(
            "samples scraped (series × scrapes)",
            thousands(samples),
            String::new(),
            None,
        );
        t.row(
            "CPU per sample",
            format!("{:.2} µs", cpu / samples.max(1.0) * 1e6),
            String::new(),
            None,
        );
        t.row("CPU, whole run", format!("{cpu:.1} s"), String::new(), None);
        t.row("peak RSS", format!("{rss:.1} MiB"), String::new(), None);
        t.row(
            "bytes written per sample",
            format!("{:.2}", written / samples.max(1.0)),
            String::new(),
            None,
        );
        let expected = (gap as f64 / INTERVAL_S as f64).floor();
        t.row(
            "scrapes of the outage held by the receiver",
            format!("{gap_up:.0} of ~{expected:.0}"),
            String::new(),
            None,
        );
        t.row(
            "synthetic samples of the outage held",
            format!(
                "{} of ~{}",
                thousands(gap_samples),
                thousands(expected * series as f64)
            ),
            String::new(),
            None,
        );
    }
    let _ = pa.kill();
    let _ = pa.wait();
    t.print();
}
