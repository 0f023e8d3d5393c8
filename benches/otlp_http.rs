//! OTLP/HTTP source benchmark: durable ingest over real HTTP.
//!
//! ```text
//! cargo bench --bench otlp_http                          # full run, ~40 s
//! HOLDFAST_BENCH_QUICK=1 cargo bench --bench otlp_http   # smoke run, seconds
//! HOLDFAST_BENCH_DIR=/data/tmp cargo bench --bench otlp_http
//! ```
//!
//! Not a pass/fail test: it prints one table. The source runs exactly as in
//! the daemon (`otlp_http::run`) on a 2-worker tokio runtime, in front of a
//! log with `fsync = "always"`. The clients are 16 keep-alive HTTP/1.1
//! connections (hyper) on a separate single-threaded runtime on its own OS
//! thread, in this same process: they share the machine's cores with the
//! server, so their CPU is measured on their thread (`RUSAGE_THREAD`) and
//! reported apart. Each request is a pre-encoded `ExportLogsServiceRequest`
//! of 100 log records (a ~90-byte body, 5 attributes, trace context) under a
//! 6-attribute resource, as an SDK batch processor sends them; the client
//! only frames and sends the same bytes again, so its cost is HTTP alone.
//!
//! Per scenario (protobuf, protobuf + gzip, JSON): requests/s and records/s,
//! latency p50/p99/max, fdatasyncs/s and records per sync (group commit),
//! CPU per 1,000 records (whole process, clients, and the server as the
//! difference), and peak RSS (VmHWM, reset between scenarios).

use std::io::Write;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use holdfast::api::{Health, Phase};
use holdfast::metrics::Metrics;
use holdfast::seglog::{FsyncPolicy, Log, LogOptions, WhenFull};
use holdfast::sources::otlp_http::{Listener, OtlpHttpSourceSettings};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use prost::Message;
use tokio_util::sync::CancellationToken;

#[path = "common/otlp_request.rs"]
mod otlp_request;
use otlp_request::{batch_request, RECORDS};

const CLIENTS: usize = 16;
const TARGET_RECORDS_PER_S: f64 = 200_000.0;

fn quick() -> bool {
    std::env::var("HOLDFAST_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
}

struct Scenario {
    name: &'static str,
    content_type: &'static str,
    encoding: Option<&'static str>,
    body: Bytes,
}

fn scenarios() -> Vec<Scenario> {
    let req = batch_request();
    let pb = req.encode_to_vec();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&pb).unwrap();
    let json = serde_json::to_vec(&req).unwrap();
    vec![
        Scenario {
            name: "protobuf",
            content_type: "application/x-protobuf",
            encoding: None,
            body: pb.into(),
        },
        Scenario {
            name: "protobuf+gzip",
            content_type: "application/x-protobuf",
            encoding: Some("gzip"),
            body: gz.finish().unwrap().into(),
        },
        Scenario {
            name: "json",
            content_type: "application/json",
            encoding: None,
            body: json.into(),
        },
    ]
}

fn rusage(who: libc::c_int) -> Duration {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own.
    unsafe { libc::getrusage(who, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Peak RSS since the last reset, from /proc/self/status.
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

struct ClientResult {
    latencies: Vec<Duration>,
    cpu: Duration,
    errors: u64,
}

/// Runs the clients on their own thread and runtime; returns once `stop` is
/// set and every client has finished its request.
fn run_clients(
    addr: SocketAddr,
    sc: &Scenario,
    measuring: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<ClientResult> {
    let body = sc.body.clone();
    let ct = sc.content_type;
    let enc = sc.encoding;
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut cpu_at_start = None;
        let result = rt.block_on(async {
            let mut tasks = Vec::new();
            for _ in 0..CLIENTS {
                let body = body.clone();
                let measuring = measuring.clone();
                let stop = stop.clone();
                tasks.push(tokio::spawn(async move {
                    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
                    stream.set_nodelay(true).unwrap();
                    let (mut tx, conn) =
                        hyper::client::conn::http1::handshake(TokioIo::new(stream))
                            .await
                            .unwrap();
                    tokio::spawn(conn);
                    let mut lat = Vec::new();
                    let mut errors = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let mut b = hyper::Request::post("/v1/logs")
                            .header("host", "127.0.0.1")
                            .header("content-type", ct);
                        if let Some(e) = enc {
                            b = b.header("content-encoding", e);
                        }
                        let req = b.body(Full::new(body.clone())).unwrap();
                        let t = Instant::now();
                        tx.ready().await.unwrap();
                        let resp = tx.send_request(req).await.unwrap();
                        let ok = resp.status() == 200;
                        let _ = resp.into_body().collect().await;
                        if measuring.load(Ordering::Relaxed) {
                            if ok {
                                lat.push(t.elapsed());
                            } else {
                                errors += 1;
                            }
                        }
                    }
                    (lat, errors)
                }));
            }
            // The thread's CPU counts from when measuring starts.
            while !measuring.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            cpu_at_start = Some(rusage(libc::RUSAGE_THREAD));
            let mut all = Vec::new();
            let mut errors = 0;
            for t in tasks {
                let (l, e) = t.await.unwrap();
                all.extend(l);
                errors += e;
            }
            (all, errors)
        });
        ClientResult {
            latencies: result.0,
            cpu: rusage(libc::RUSAGE_THREAD) - cpu_at_start.unwrap_or_default(),
            errors: result.1,
        }
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let quick = quick();
    let (warmup, measure) = if quick {
        (Duration::from_millis(300), Duration::from_secs(1))
    } else {
        (Duration::from_secs(2), Duration::from_secs(10))
    };
    let base = std::env::var_os("HOLDFAST_BENCH_DIR").map(std::path::PathBuf::from);
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "otlp_http: {CLIENTS} keep-alive clients, {RECORDS} log records per request, fsync = \"always\"{}",
        if quick { " — QUICK smoke run, figures are not meaningful" } else { "" }
    );
    println!(
        "{:<14} {:>9} {:>11} {:>8} {:>8} {:>8} {:>9} {:>10} {:>9} {:>9} {:>9} {:>8}",
        "scenario",
        "req/s",
        "records/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "syncs/s",
        "rec/sync",
        "cpu/1k",
        "srv/1k",
        "cli/1k",
        "RSS MiB"
    );
    let mut notes = Vec::new();
    for sc in scenarios() {
        let dir = match &base {
            Some(b) => tempfile::tempdir_in(b).unwrap(),
            None => tempfile::tempdir().unwrap(),
        };
        let log = Log::open(
            dir.path(),
            LogOptions {
                segment_bytes: 64 << 20,
                max_bytes: 1 << 30,
                fsync: FsyncPolicy::Always,
                // No consumer here: old segments may go, the disk stays small.
                when_full: WhenFull::DropOldest,
                ..LogOptions::default()
            },
        )
        .unwrap();
        let addr: SocketAddr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let opts = OtlpHttpSourceSettings {
            listener: Listener {
                listen: addr,
                max_connections: NonZeroUsize::new(256).unwrap(),
                max_connections_per_peer: NonZeroUsize::new(256).unwrap(),
                tls_handshake_timeout: Duration::from_secs(10),
                tls: None,
            },
            max_body_bytes: 8 << 20,
            header_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            bearer_token_file: None,
            process: None,
        };
        let health = Arc::new(Health::default());
        health.set(Phase::Ready);
        let stop = CancellationToken::new();
        let server = server_rt.spawn(holdfast::sources::otlp_http::run(
            "bench".into(),
            opts,
            log.clone(),
            Arc::new(Metrics::new(None)),
            health,
            stop.clone(),
        ));
        while std::net::TcpStream::connect(addr).is_err() {
            std::thread::sleep(Duration::from_millis(5));
        }

        let measuring = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let clients = run_clients(addr, &sc, measuring.clone(), done.clone());
        std::thread::sleep(warmup);
        reset_peak_rss();
        let stats0 = log.stats().counters;
        let cpu0 = rusage(libc::RUSAGE_SELF);
        let t0 = Instant::now();
        measuring.store(true, Ordering::Relaxed);
        std::thread::sleep(measure);
        measuring.store(false, Ordering::Relaxed);
        let elapsed = t0.elapsed();
        let cpu = rusage(libc::RUSAGE_SELF) - cpu0;
        let stats1 = log.stats().counters;
        let rss = peak_rss_mib();
        done.store(true, Ordering::Relaxed);
        let res = clients.join().unwrap();
        stop.cancel();
        server_rt.block_on(server).unwrap().unwrap();
        log.close_blocking().unwrap();

        let mut lat = res.latencies;
        lat.sort_unstable();
        let reqs = lat.len() as f64;
        let records = reqs * RECORDS as f64;
        let secs = elapsed.as_secs_f64();
        let syncs = (stats1.fsyncs - stats0.fsyncs) as f64;
        let appended = (stats1.appended_events - stats0.appended_events) as f64;
        let per_k = |d: Duration| d.as_secs_f64() * 1e3 / (records / 1e3); // ms per 1,000 records
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "{:<14} {:>9.0} {:>11.0} {:>8.2} {:>8.2} {:>8.2} {:>9.0} {:>10.0} {:>9.3} {:>9.3} {:>9.3} {:>8.1}",
            sc.name,
            reqs / secs,
            records / secs,
            ms(percentile(&lat, 0.50)),
            ms(percentile(&lat, 0.99)),
            ms(lat.last().copied().unwrap_or_default()),
            syncs / secs,
            if syncs > 0.0 { appended / syncs } else { 0.0 },
            per_k(cpu),
            per_k(cpu.saturating_sub(res.cpu)),
            per_k(res.cpu),
            rss,
        );
        if res.errors > 0 {
            notes.push(format!(
                "{}: {} requests were not answered 200",
                sc.name, res.errors
            ));
        }
        if sc.name == "protobuf" {
            notes.push(format!(
                "protobuf: {:.0} records/s against a target of {:.0} ({})",
                records / secs,
                TARGET_RECORDS_PER_S,
                if records / secs >= TARGET_RECORDS_PER_S {
                    "met"
                } else {
                    "NOT met"
                }
            ));
        }
        notes.push(format!(
            "{}: request body {} bytes; {:.1} bytes written to the log per record",
            sc.name,
            sc.body.len(),
            (stats1.bytes_written - stats0.bytes_written) as f64 / appended.max(1.0)
        ));
    }
    println!("cpu/1k, srv/1k, cli/1k: CPU milliseconds per 1,000 records for the whole process, the server (process − clients), the client thread");
    for n in notes {
        println!("  {n}");
    }
}
