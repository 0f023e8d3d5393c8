//! gRPC in beside HTTP in: a `holdfast run` (a fresh one per scenario) with an `otlp` source that
//! has both listeners, `fsync = "always"`, and the same protobuf request
//! (benches/common/otlp_request.rs) sent over each by 16 connections, one
//! request at a time each (HTTP/1.1 keep-alive; one HTTP/2 connection per
//! gRPC client), from a single-threaded runtime on its own OS thread.
//! The server's CPU is the holdfast process's (/proc/PID/stat), the
//! clients' this process's: both are printed per 1,000 records.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;

use crate::daemon::{free_ports, Agent};
use crate::otlp_request::{batch_request, RECORDS};
use crate::{proc_cpu, self_cpu, wire};

const CLIENTS: usize = 16;

/// The log's fdatasync calls so far (a histogram's count).
const SYNCS: &str = "holdfast_log_fsync_duration_seconds_count";

#[derive(Clone, Copy, PartialEq)]
enum Protocol {
    Http,
    Grpc,
}

struct Scenario {
    name: &'static str,
    protocol: Protocol,
    gzip: bool,
    body: Bytes,
}

fn scenarios() -> Vec<Scenario> {
    let pb = batch_request().encode_to_vec();
    let gz = {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&pb).unwrap();
        Bytes::from(gz.finish().unwrap())
    };
    vec![
        Scenario {
            name: "http protobuf",
            protocol: Protocol::Http,
            gzip: false,
            body: pb.clone().into(),
        },
        Scenario {
            name: "grpc protobuf",
            protocol: Protocol::Grpc,
            gzip: false,
            body: wire::frame(&pb, false),
        },
        Scenario {
            name: "http +gzip",
            protocol: Protocol::Http,
            gzip: true,
            body: gz,
        },
        Scenario {
            name: "grpc +gzip",
            protocol: Protocol::Grpc,
            gzip: true,
            body: wire::frame(&pb, true),
        },
    ]
}

struct ClientResult {
    latencies: Vec<Duration>,
    errors: u64,
}

/// One client: requests one after another until `stop`; latencies counted
/// while `measuring`.
async fn client(
    addr: SocketAddr,
    sc: (Protocol, bool, Bytes),
    measuring: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> ClientResult {
    let (protocol, gzip, body) = sc;
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let io = TokioIo::new(stream);
    let mut lat = Vec::new();
    let mut errors = 0;
    let authority = addr.to_string();
    match protocol {
        Protocol::Http => {
            let (mut tx, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(conn);
            while !stop.load(Ordering::Relaxed) {
                let mut b = hyper::Request::post("/v1/logs")
                    .header("host", authority.as_str())
                    .header("content-type", "application/x-protobuf");
                if gzip {
                    b = b.header("content-encoding", "gzip");
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
        }
        Protocol::Grpc => {
            let (mut tx, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .unwrap();
            tokio::spawn(conn);
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let ok =
                    wire::call(&mut tx, &authority, wire::LOGS_EXPORT, body.clone(), gzip).await;
                if measuring.load(Ordering::Relaxed) {
                    if ok {
                        lat.push(t.elapsed());
                    } else {
                        errors += 1;
                    }
                }
            }
        }
    }
    ClientResult {
        latencies: lat,
        errors,
    }
}

fn run_clients(
    addr: SocketAddr,
    sc: &Scenario,
    measuring: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<ClientResult> {
    let args = (sc.protocol, sc.gzip, sc.body.clone());
    let threads = client_threads();
    std::thread::spawn(move || {
        let rt = if threads > 1 {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .enable_all()
                .build()
                .unwrap()
        } else {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        };
        rt.block_on(async {
            let tasks: Vec<_> = (0..CLIENTS)
                .map(|_| tokio::spawn(client(addr, args.clone(), measuring.clone(), stop.clone())))
                .collect();
            let mut all = ClientResult {
                latencies: Vec::new(),
                errors: 0,
            };
            for t in tasks {
                let r = t.await.unwrap();
                all.latencies.extend(r.latencies);
                all.errors += r.errors;
            }
            all
        })
    })
}

/// `HOLDFAST_BENCH_CLIENT_THREADS=N` (default 1): the clients' runtime
/// threads. On one thread, the 16 answers of a group commit are taken and
/// the next 16 requests written one after the other; a client costlier per
/// call (HTTP/2's) then stretches every round trip, and the server's
/// records per fsync group shrink with it.
fn client_threads() -> usize {
    std::env::var("HOLDFAST_BENCH_CLIENT_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .clamp(1, 16)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// One scenario's figures.
struct Row {
    records_per_s: f64,
    srv_per_k: f64,
}

/// Runs `sc` against a fresh agent: warm-up, then `measure`; prints its row.
fn measure_one(sc: &Scenario, warmup: Duration, measure: Duration, label: &str) -> Row {
    let [grpc_port, http_port] = free_ports::<2>();
    let grpc: SocketAddr = format!("127.0.0.1:{grpc_port}").parse().unwrap();
    let http: SocketAddr = format!("127.0.0.1:{http_port}").parse().unwrap();
    // A fresh agent and log for each scenario: the log fills at these
    // rates, and a scenario that met a full log (evicting as it
    // appends) would pay for the one before it.
    // No sink reads the source: under drop_oldest the log keeps its size.
    let mut agent = Agent::new(&format!(
        "[log]\nfsync = \"always\"\nwhen_full = \"drop_oldest\"\nmax_bytes = \"1GiB\"\n\n\
         [sources.otlp]\ntype = \"otlp\"\n\n\
         [sources.otlp.grpc]\nlisten = \"{grpc}\"\nmax_connections_per_peer = 256\n\n\
         [sources.otlp.http]\nlisten = \"{http}\"\nmax_connections_per_peer = 256\n"
    ));
    // Another build to compare with (main's, say), run as this one is.
    if let Ok(bin) = std::env::var("HOLDFAST_BENCH_BIN") {
        agent.bin = bin;
    }
    agent.start();
    agent.wait_ready();
    let pid = agent.pid() as u32;
    let addr = match sc.protocol {
        Protocol::Http => http,
        Protocol::Grpc => grpc,
    };
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let clients = run_clients(addr, sc, measuring.clone(), stop.clone());
    std::thread::sleep(warmup);
    // fsync = "always": one fdatasync per group commit. Records per sync
    // shows whether a difference in CPU per record is per request or per
    // group (a slower client makes smaller groups, each paying a sync).
    let syncs = || agent.metric(SYNCS).unwrap_or(f64::NAN);
    let syncs0 = syncs();
    let srv0 = proc_cpu(pid);
    let cli0 = self_cpu();
    let t0 = Instant::now();
    measuring.store(true, Ordering::Relaxed);
    std::thread::sleep(measure);
    measuring.store(false, Ordering::Relaxed);
    let secs = t0.elapsed().as_secs_f64();
    let srv = proc_cpu(pid) - srv0;
    let synced = syncs() - syncs0;
    let cli = self_cpu() - cli0;
    stop.store(true, Ordering::Relaxed);
    let res = clients.join().unwrap();

    let mut lat = res.latencies;
    lat.sort_unstable();
    let reqs = lat.len() as f64;
    let records = reqs * RECORDS as f64;
    let per_k = |s: f64| s * 1e3 / (records / 1e3).max(1e-9);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{:<14} {:>9.0} {:>11.0} {:>8.2} {:>8.2} {:>8.2} {:>9.3} {:>9.3} {:>8.0} {:>7}",
        label,
        reqs / secs,
        records / secs,
        ms(percentile(&lat, 0.50)),
        ms(percentile(&lat, 0.99)),
        ms(lat.last().copied().unwrap_or_default()),
        per_k(srv),
        per_k(cli),
        records / synced,
        res.errors,
    );
    assert!(agent.stop().success(), "{}", agent.stderr());
    Row {
        records_per_s: records / secs,
        srv_per_k: per_k(srv),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// `HOLDFAST_BENCH_ROUNDS=N` (default 1): every scenario N times, the
/// scenarios taking turns, and the ratios round by round, so that a
/// machine whose load drifts (others' builds) weighs on both sides.
fn rounds() -> usize {
    std::env::var("HOLDFAST_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .clamp(1, 20)
}

pub fn run(quick: bool) {
    let (warmup, measure) = if quick {
        (Duration::from_millis(300), Duration::from_secs(1))
    } else {
        (Duration::from_secs(2), Duration::from_secs(10))
    };
    let rounds = rounds();
    println!(
        "gRPC in beside HTTP in: one holdfast process, {CLIENTS} clients on {} thread(s), {RECORDS} log records per request, fsync = \"always\"{}{}",
        client_threads(),
        if rounds > 1 { format!(", {rounds} rounds taking turns") } else { String::new() },
        if quick { " — QUICK smoke run, figures are not meaningful" } else { "" }
    );
    println!(
        "{:<14} {:>9} {:>11} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8} {:>7}",
        "scenario",
        "req/s",
        "records/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "srv/1k",
        "cli/1k",
        "rec/sync",
        "errors"
    );
    let scenarios = scenarios();
    // `HOLDFAST_BENCH_PAIRS=protobuf` (or `gzip`): only that pair.
    let scenarios: Vec<Scenario> = match std::env::var("HOLDFAST_BENCH_PAIRS") {
        Ok(p) if p == "protobuf" => scenarios.into_iter().filter(|s| !s.gzip).collect(),
        Ok(p) if p == "gzip" => scenarios.into_iter().filter(|s| s.gzip).collect(),
        _ => scenarios,
    };
    // rows[round][scenario]
    let mut rows: Vec<Vec<Row>> = Vec::new();
    for round in 0..rounds {
        rows.push(
            scenarios
                .iter()
                .map(|sc| {
                    let label = if rounds > 1 {
                        format!("{} #{}", sc.name, round + 1)
                    } else {
                        sc.name.to_string()
                    };
                    measure_one(sc, warmup, measure, &label)
                })
                .collect(),
        );
    }
    println!("srv/1k, cli/1k: CPU milliseconds per 1,000 records of the holdfast process and of the clients; rec/sync: records per fdatasync (group commit)");
    // Scenarios come in pairs: HTTP, then gRPC on the same request.
    for pair in (0..scenarios.len()).step_by(2) {
        let (h, g) = (pair, pair + 1);
        let rate: Vec<f64> = rows
            .iter()
            .map(|r| r[g].records_per_s / r[h].records_per_s.max(1e-9))
            .collect();
        let cpu: Vec<f64> = rows
            .iter()
            .map(|r| r[g].srv_per_k / r[h].srv_per_k.max(1e-9))
            .collect();
        let each = |v: &[f64]| {
            if v.len() < 2 {
                return String::new();
            }
            let all: Vec<String> = v.iter().map(|x| format!("{x:.2}")).collect();
            format!(" (rounds: {})", all.join(" "))
        };
        println!(
            "  {} / {}: records/s ×{:.2}{}, server CPU per record ×{:.2}{}",
            scenarios[g].name,
            scenarios[h].name,
            median(rate.clone()),
            each(&rate),
            median(cpu.clone()),
            each(&cpu),
        );
    }
    if rounds > 1 {
        println!("  ×: the median of the rounds' ratios");
    }
    for sc in &scenarios {
        println!("  {}: request body {} bytes", sc.name, sc.body.len());
    }
}
