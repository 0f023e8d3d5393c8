//! Network sink throughput: how fast each sink type drains a backlog from
//! the log to a local receiver that accepts everything.
//!
//! ```sh
//! cargo bench --bench sinks                          # 1 GiB backlog (a few minutes, ~1.2 GiB of disk)
//! HOLDFAST_BENCH_QUICK=1 cargo bench --bench sinks   # 32 MiB, a smoke run
//! HOLDFAST_BENCH_ONLY=pushback HOLDFAST_BENCH_PUSHBACK_EVENTS=4000000 cargo bench --bench sinks   # longer pushback runs
//! HOLDFAST_BENCH_ONLY=pushback HOLDFAST_BENCH_PUSHBACK_RUNS="random,10th" cargo bench --bench sinks   # some of them (and normal)
//! HOLDFAST_BENCH_ONLY=elasticsearch cargo bench --bench sinks   # one sink type
//! HOLDFAST_BENCH_ONLY=nats cargo bench --bench sinks   # the NATS JetStream rows
//! HOLDFAST_BENCH_FORMAT=2 cargo bench --bench sinks  # the backlog in the compact form
//! ```
//!
//! `HOLDFAST_BENCH_FORMAT=2` writes the same events as format-2 batches of
//! 512 (what a `file` source appends): one batch context holding the
//! source, resource, scope, file and the `log.file.name` attribute, each
//! event only its own fields; sinks then build every request from the
//! context plus the events' own fields. It needs a log that keeps batch
//! contexts (format 2) and says so otherwise.
//!
//! The backlog is written once (fsync = "never": writing it is not what is
//! measured), then each sink type drains all of it with `concurrency` 1 and
//! 4, each run as a new consumer from the oldest event. The receiver runs in
//! a child process (this same binary, started with
//! `HOLDFAST_BENCH_RECEIVER=1`) on one thread, so the sink's CPU and memory
//! figures are its own: it answers `_bulk` with `errors: false` and one item
//! per document, OTLP with an empty 200, OpenObserve with its status array.
//!
//! Reported per run: events/s and MiB/s of log data, CPU time of the sink
//! process per 1,000 events (user + system), and peak RSS (VmHWM, reset
//! before each run; file-backed pages of mapped segments count).
//! The target (issue 6): ≥ 300,000 events/s for `elasticsearch` and
//! `otlp_http`.
//!
//! NATS (issue 16): the same backlog published to real `nats-server`
//! processes started here (`tests/common/nats.rs`): one server, and a
//! 3-node cluster with an R3 stream (file storage, the default 2-minute
//! duplicate window: what an operator's stream has), with the servers' CPU
//! and peak RSS (summed) beside the sink's. Target: ≥ 200,000 events/s to
//! one server, ≥ 100,000 to R3. `HOLDFAST_BENCH_NATS_EXTRA="prof_port:
//! 6060"` adds lines to the single server's config (here: Go's profiler,
//! for `/debug/pprof/profile`).
//!
//! Pushback (issue 11, `HOLDFAST_BENCH_ONLY=pushback` runs only this part):
//! the `elasticsearch` sink (`concurrency` 4, default backoff) drains a
//! backlog of 400,000 events (200,000 quick) against the same receiver
//! playing an overloaded Elasticsearch:
//!
//! * `rate R`: at most R documents per second (a token bucket holding 100 ms
//!   of documents), per-item 429 `es_rejected_execution_exception` above
//!   that — target ≥ 80% of R, for R = 50,000 and 200,000;
//! * `random 10% 429`: one item in ten answered 429 at random, whatever the
//!   rate — target ≥ 50% of the same sink's throughput against a receiver
//!   that accepts everything (the `normal` row);
//! * `every 10th 429`: every tenth item of every request answered 429 and
//!   every thousandth 400, whatever the rate (issue 32: a quota in a proxy,
//!   not load) — target ≥ 50% of the `normal` row, and the 400s quarantined
//!   exactly;
//! * `outage 10s`: 500 for every request during the 10 s after the first
//!   one — reported: the time from the receiver's return to the first
//!   request it accepted (target about 1 s) and to the last one (the end of
//!   the drain).
//!
//! Each pushback run is stopped after 120 s (then marked `stopped`).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use holdfast::event::{Context, Envelope, EventId, FileOrigin, Group, Record};
use holdfast::metrics::Metrics;
use holdfast::seglog::{Batch, FsyncPolicy, Log, LogOptions, StartAt};
use holdfast::sinks::document::Layout;
use holdfast::sinks::elasticsearch::ElasticsearchOptions;
use holdfast::sinks::openobserve::OpenObserveOptions;
use holdfast::sinks::SinkKind;
use holdfast::sinks::{
    Compression, DeliveryOptions, HttpOptions, OtlpEncoding, OtlpHttpSinkOptions, Template,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use tokio_util::sync::CancellationToken;

#[path = "../tests/common/daemon.rs"]
mod daemon;
#[path = "../tests/common/nats.rs"]
mod nats;

fn main() {
    if std::env::var_os("HOLDFAST_BENCH_RECEIVER").is_some() {
        receiver::serve();
        return;
    }
    let quick = std::env::var_os("HOLDFAST_BENCH_QUICK").is_some();
    let backlog: u64 = if quick { 32 << 20 } else { 1 << 30 };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let only = std::env::var("HOLDFAST_BENCH_ONLY").ok();
    if only.as_deref() != Some("pushback") {
        rt.block_on(run(backlog));
    }
    if only.is_none() || only.as_deref() == Some("pushback") {
        let events = std::env::var("HOLDFAST_BENCH_PUSHBACK_EVENTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(if quick { 200_000 } else { 400_000 });
        rt.block_on(pushback::run(events));
    }
}

/// Starts the receiver child process; returns it and its base URL.
fn start_receiver() -> (std::process::Child, reqwest::Url) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env("HOLDFAST_BENCH_RECEIVER", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port: u16 = line.trim().strip_prefix("PORT ").unwrap().parse().unwrap();
    let base = reqwest::Url::parse(&format!("http://127.0.0.1:{port}")).unwrap();
    (child, base)
}

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

/// A typical tailed line: about 290 bytes in the log.
fn event(n: u64) -> Vec<u8> {
    Envelope {
        id: EventId::for_file_line(0x5eed, 0, n * 120).0.to_vec(),
        source: "app".into(),
        observed_time_unix_nano: 1_714_564_800_000_000_000 + n * 1000,
        resource: Some(Resource {
            attributes: vec![kv("host.name", "gateway-0042"), kv("service.name", "edge-app")],
            ..Default::default()
        }),
        scope: Some(InstrumentationScope {
            name: "holdfast.file".into(),
            ..Default::default()
        }),
        record: Some(Record::Log(LogRecord {
            observed_time_unix_nano: 1_714_564_800_000_000_000 + n * 1000,
            severity_text: "INFO".into(),
            body: Some(AnyValue {
                value: Some(any_value::Value::StringValue(format!(
                    "2024-05-01T12:00:00.{:06}Z INFO request done method=GET path=/api/v1/items/{} status=200 bytes={} duration_ms={}",
                    n % 1_000_000,
                    n % 9973,
                    n % 65536,
                    n % 997
                ))),
            }),
            attributes: vec![kv("log.file.name", "app.log")],
            ..Default::default()
        })),
        origin: Some(FileOrigin {
            path: "/var/log/app/app.log".into(),
            fingerprint: 0x5eed,
            generation: 0,
            offset: n * 120,
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

/// Events per format-2 batch (`HOLDFAST_BENCH_FORMAT=2`).
const COMPACT_BATCH: u64 = 512;

/// The batch context of the events `event` makes, for format 2: what they
/// share, once.
fn context() -> Vec<u8> {
    let whole = Envelope::decode(event(0).as_slice()).unwrap();
    let Some(Record::Log(l)) = whole.record else {
        unreachable!()
    };
    Context {
        groups: vec![Group {
            source: whole.source,
            resource: whole.resource,
            scope: whole.scope,
            attributes: l.attributes,
            origin: whole.origin.map(|o| FileOrigin {
                offset: 0,
                end_offset: 0,
                ..o
            }),
            observed_time_unix_nano: whole.observed_time_unix_nano,
            record_observed: true,
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

/// Event `n` in format 2: only its own fields (body, severity, offsets, the
/// observed time as a delta from the context's); its id is derived from
/// the file and offset.
fn compact_event(n: u64) -> Vec<u8> {
    let mut e = Envelope::decode(event(n).as_slice()).unwrap();
    let base = 1_714_564_800_000_000_000;
    e.observed_delta = e.observed_time_unix_nano - base;
    e.observed_time_unix_nano = 0;
    e.id.clear();
    e.source.clear();
    e.resource = None;
    e.scope = None;
    if let Some(Record::Log(l)) = &mut e.record {
        l.attributes.clear();
        l.observed_time_unix_nano = 0;
    }
    if let Some(o) = &mut e.origin {
        o.path.clear();
        o.fingerprint = 0;
    }
    e.encode_to_vec()
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn status_kib(key: &str) -> u64 {
    proc_status_kib("self", key)
}

/// A `/proc/<pid>/status` figure in KiB (`pid` may be `self`).
fn proc_status_kib(pid: &str, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k == key).then(|| v.split_whitespace().next()?.parse().ok())?
            })
        })
        .unwrap_or(0)
}

fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

async fn run(backlog: u64) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let log = Log::open(
        dir.path().join("log"),
        LogOptions {
            fsync: FsyncPolicy::Never,
            segment_bytes: 64 << 20,
            max_bytes: backlog * 2 + (256 << 20),
            cursor_sync_interval: Duration::from_secs(1),
            ..LogOptions::default()
        },
    )
    .unwrap();

    println!("holdfast sink benchmark");
    println!(
        "machine: {} cores, {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(
                |c| c.lines().find(|l| l.starts_with("model name")).map(|l| l
                    .split(':')
                    .nth(1)
                    .unwrap_or("")
                    .trim()
                    .to_string())
            )
            .unwrap_or_default()
    );

    // The backlog.
    let compact = std::env::var("HOLDFAST_BENCH_FORMAT").is_ok_and(|f| f == "2");
    let started = Instant::now();
    let mut n = 0u64;
    let mut bytes = 0u64;
    if compact {
        let context = bytes::Bytes::from(context());
        // Whole events' bytes, for the same MiB/s as format 1.
        while bytes < backlog {
            let mut b = Batch::with_capacity(1 << 20).with_context(context.clone());
            for _ in 0..COMPACT_BATCH {
                bytes += event(n).len() as u64;
                b.push(&compact_event(n));
                n += 1;
            }
            log.append(b).await.unwrap();
            if n == COMPACT_BATCH {
                let first = log.reader(0).read(1, 1 << 20).unwrap();
                if first.first().is_none_or(|e| e.context.is_empty()) {
                    println!("HOLDFAST_BENCH_FORMAT=2: this log does not keep batch contexts (a format-1 writer): nothing to measure");
                    return;
                }
            }
        }
        println!("backlog in format 2: batches of {COMPACT_BATCH} events with one context");
    } else {
        while bytes < backlog {
            let mut b = Batch::with_capacity(4 << 20);
            while b.encoded_len() < (4 << 20) {
                let e = event(n);
                bytes += e.len() as u64;
                b.push(&e);
                n += 1;
            }
            log.append(b).await.unwrap();
        }
    }
    println!(
        "backlog: {n} events, {:.0} MiB of events ({:.0} bytes each), written in {:.1}s",
        bytes as f64 / (1 << 20) as f64,
        bytes as f64 / n as f64,
        started.elapsed().as_secs_f64()
    );

    let (mut child, base) = start_receiver();
    let port = base.port().unwrap_or(0);
    println!("receiver: 127.0.0.1:{port}, a child process on one thread, accepting everything");
    println!("sink settings: batch_max_events 2000, batch_max_bytes 8 MiB, batch_timeout 20ms, compression none (and gzip where shown)");
    println!();
    println!(
        "{:<22} {:>5} {:>10} {:>8} {:>14} {:>13} {:>13}",
        "sink", "conc", "events/s", "MiB/s", "CPU ms/1k ev", "peak RSS MiB", "req latency"
    );

    let metrics = Arc::new(Metrics::new(None));
    let runs: &[(&str, usize, Compression)] = &[
        ("elasticsearch", 1, Compression::None),
        ("elasticsearch", 4, Compression::None),
        ("otlp_http", 1, Compression::None),
        ("otlp_http", 4, Compression::None),
        ("openobserve", 1, Compression::None),
        ("openobserve", 4, Compression::None),
        ("otlp_http", 4, Compression::Gzip),
    ];
    // Every run's consumer is registered now, so that the log keeps the
    // whole backlog until the last run has read it.
    for i in 0..runs.len() {
        log.consumer(&format!("bench-{i}"), StartAt::Oldest)
            .unwrap();
    }
    let only = std::env::var("HOLDFAST_BENCH_ONLY").ok();
    for (i, &(kind, concurrency, compression)) in runs.iter().enumerate() {
        if only.as_deref().is_some_and(|o| o != kind) {
            log.remove_consumer(&format!("bench-{i}")).unwrap();
            continue;
        }
        let name = format!("bench-{i}");
        let mut common = DeliveryOptions::new(
            vec!["app".into()],
            dir.path().join("quarantine").join(&name),
        );
        common.batch_max_events = 2000;
        common.batch_max_bytes = 8 << 20;
        // The last, partial batch of the backlog would otherwise wait the
        // default 1s for more events.
        common.batch_timeout = Duration::from_millis(20);
        common.concurrency = concurrency;
        let http = HttpOptions {
            compression,
            ..HttpOptions::default()
        };
        let sink = match kind {
            "elasticsearch" => SinkKind::Elasticsearch(ElasticsearchOptions {
                common,
                http,
                endpoints: vec![base.clone()],
                index: Template::parse("holdfast-{signal}-{date}").unwrap(),
                document: bench_layout(),
            }),
            "otlp_http" => SinkKind::OtlpHttp(OtlpHttpSinkOptions {
                common,
                http,
                logs_url: base.join("/v1/logs").unwrap(),
                traces_url: base.join("/v1/traces").unwrap(),
                metrics_url: base.join("/v1/metrics").unwrap(),
                encoding: OtlpEncoding::Protobuf,
            }),
            _ => SinkKind::OpenObserve(OpenObserveOptions {
                common,
                http,
                endpoint: base.clone(),
                org: "default".into(),
                stream: Template::parse("{signal}").unwrap(),
                document: bench_layout(),
            }),
        };
        reset_peak_rss();
        let cpu0 = cpu_seconds();
        let t0 = Instant::now();
        let stop = CancellationToken::new();
        let task = tokio::spawn(sink.run(&holdfast::component::ComponentContext::new(
            name.clone(),
            log.clone(),
            metrics.clone(),
            stop.clone(),
        )));
        loop {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let done = log
                .stats()
                .consumers
                .iter()
                .any(|c| c.name == name && c.committed == n);
            if done {
                break;
            }
            assert!(!task.is_finished(), "the sink stopped");
        }
        let secs = t0.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - cpu0;
        stop.cancel();
        task.await.unwrap().unwrap();
        let label = match compression {
            Compression::Gzip => format!("{kind} (gzip)"),
            Compression::Snappy => format!("{kind} (snappy)"),
            Compression::None => kind.to_string(),
        };
        let text = metrics.encode().unwrap_or_default();
        let metric = |suffix: &str| -> f64 {
            let prefix =
                format!("holdfast_sink_request_duration_seconds_{suffix}{{sink=\"{name}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
                .unwrap_or(0.0)
        };
        let latency_ms = metric("sum") * 1000.0 / metric("count").max(1.0);
        println!(
            "{:<22} {:>5} {:>10.0} {:>8.1} {:>14.3} {:>13.1} {:>10.1} ms",
            label,
            concurrency,
            n as f64 / secs,
            bytes as f64 / (1 << 20) as f64 / secs,
            cpu * 1000.0 / (n as f64 / 1000.0),
            status_kib("VmHWM") as f64 / 1024.0,
            latency_ms
        );
        // Let the log drop what every bench consumer has passed.
        log.remove_consumer(&name).unwrap();
    }
    drop(child.stdin.take());
    let _ = child.wait();
    if only.as_deref().is_none_or(|o| o == "nats") {
        nats_rows(&log, dir.path(), &metrics, n, bytes).await;
    }
    log.close().await.unwrap();
}

/// The `nats` rows: the same backlog published to JetStream, into one
/// local `nats-server` and into a 3-node cluster with an R3 stream, all on
/// this machine. The servers' own CPU (user + system, from /proc) is
/// reported beside the sink's: on two cores they compete for the same CPU.
/// The stream keeps at most 256 MiB (discard old) per replica so that the
/// servers' stores stay small.
async fn nats_rows(log: &Log, dir: &std::path::Path, metrics: &Arc<Metrics>, n: u64, bytes: u64) {
    use holdfast::sinks::{NatsEncoding, NatsOptions};
    if Command::new("nats-server")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("nats: nats-server is not installed (Debian package nats-server): skipped");
        return;
    }
    println!();
    println!(
        "{:<22} {:>5} {:>10} {:>8} {:>14} {:>13} {:>16} {:>15}",
        "sink",
        "conc",
        "events/s",
        "MiB/s",
        "CPU ms/1k ev",
        "peak RSS MiB",
        "server CPU ms/1k",
        "server RSS MiB"
    );
    for (label, replicas, concurrency) in [
        ("nats (1 server)", 1, 1),
        ("nats (1 server)", 1, 4),
        ("nats (3 nodes, R3)", 3, 4),
        ("nats (3 nodes, R3)", 3, 8),
    ] {
        // `HOLDFAST_BENCH_NATS_EXTRA="prof_port: 6060"`: extra lines for the
        // single server's config (a Go CPU profile of the server, say).
        let extra = std::env::var("HOLDFAST_BENCH_NATS_EXTRA").unwrap_or_default();
        let servers = if replicas == 1 {
            nats::Nats::single(&extra)
        } else {
            nats::Nats::cluster().await
        };
        let js = servers.js().await;
        js.get_or_create_stream(async_nats::jetstream::stream::Config {
            name: "BENCH".into(),
            subjects: vec!["telemetry.>".into()],
            num_replicas: replicas,
            max_bytes: 256 << 20,
            ..Default::default()
        })
        .await
        .unwrap();
        let name = format!("bench-nats-{replicas}-{concurrency}");
        log.consumer(&name, StartAt::Oldest).unwrap();
        let mut common =
            DeliveryOptions::new(vec!["app".into()], dir.join("quarantine").join(&name));
        common.batch_max_events = 2000;
        common.batch_max_bytes = 8 << 20;
        common.batch_timeout = Duration::from_millis(20);
        common.concurrency = concurrency;
        let sink = SinkKind::Nats(NatsOptions {
            common,
            tls: Default::default(),
            servers: servers.urls(),
            stream: "BENCH".into(),
            subject: Template::parse("telemetry.{signal}.{source}").unwrap(),
            encoding: NatsEncoding::Otlp,
            document: bench_layout(),
            credentials: None,
            create_stream: None,
        });
        let pids: Vec<u32> = servers.servers.iter().filter_map(|s| s.pid()).collect();
        let server_cpu = || pids.iter().map(|&p| proc_cpu_seconds(p)).sum::<f64>();
        reset_peak_rss();
        let (cpu0, scpu0) = (cpu_seconds(), server_cpu());
        let t0 = Instant::now();
        let stop = CancellationToken::new();
        let task = tokio::spawn(sink.run(&holdfast::component::ComponentContext::new(
            name.clone(),
            log.clone(),
            metrics.clone(),
            stop.clone(),
        )));
        loop {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let done = log
                .stats()
                .consumers
                .iter()
                .any(|c| c.name == name && c.committed == n);
            if done {
                break;
            }
            assert!(!task.is_finished(), "the sink stopped");
        }
        let secs = t0.elapsed().as_secs_f64();
        let (cpu, scpu) = (cpu_seconds() - cpu0, server_cpu() - scpu0);
        stop.cancel();
        task.await.unwrap().unwrap();
        let per_1k = |c: f64| c * 1000.0 / (n as f64 / 1000.0);
        // The servers' peak resident memory, summed (each process's own
        // peak since it started: one run per set of servers).
        let server_rss: u64 = pids
            .iter()
            .map(|p| proc_status_kib(&p.to_string(), "VmHWM"))
            .sum();
        println!(
            "{:<22} {:>5} {:>10.0} {:>8.1} {:>14.3} {:>13.1} {:>16.3} {:>15.1}",
            label,
            concurrency,
            n as f64 / secs,
            bytes as f64 / (1 << 20) as f64 / secs,
            per_1k(cpu),
            status_kib("VmHWM") as f64 / 1024.0,
            per_1k(scpu),
            server_rss as f64 / 1024.0
        );
        log.remove_consumer(&name).unwrap();
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average after the nats rows: {}", load.trim());
}

/// User + system CPU seconds of another process, from /proc/PID/stat.
fn proc_cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 (1-based), 11 and 12 here.
    // SAFETY: sysconf only reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz.max(1.0)
}

/// The receiver: one port, every API, accepting everything.
mod receiver {
    use super::*;
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper::body::Incoming;
    use hyper::{Request, Response};

    pub fn serve() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            println!("PORT {port}");
            std::io::stdout().flush().unwrap();
            // Stop when the parent closes our stdin.
            std::thread::spawn(|| {
                let mut s = String::new();
                let _ = std::io::stdin().read_line(&mut s);
                std::process::exit(0);
            });
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(handle);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
    }

    const ITEM: &[u8] = br#"{"create":{"_index":"holdfast-logs-2024.05.01","_id":"00000000000000000000000000000000","_version":1,"result":"created","status":201}}"#;

    const BUSY: &[u8] = br#"{"create":{"_index":"holdfast-logs-2024.05.01","_id":"00000000000000000000000000000000","status":429,"error":{"type":"es_rejected_execution_exception","reason":"rejected execution of coordinating operation [coordinating_and_primary_bytes=0]"}}}"#;

    const BAD: &[u8] = br#"{"create":{"_index":"holdfast-logs-2024.05.01","_id":"00000000000000000000000000000000","status":400,"error":{"type":"document_parsing_exception","reason":"[1:2] failed to parse field [n] of type [long]"}}}"#;

    /// An item's answer.
    #[derive(Clone, Copy, PartialEq)]
    enum Item {
        Ok,
        Busy,
        Bad,
    }

    /// What the pushback modes remember (the receiver is single-threaded).
    struct Pushback {
        /// Rate mode: documents that may still be accepted, refilled at R/s
        /// up to 100 ms worth.
        tokens: f64,
        refilled: Option<std::time::Instant>,
        /// Random mode: a xorshift state.
        rng: u64,
        /// Outage mode: the first request, and the first document accepted
        /// after the outage.
        first_request: Option<std::time::Instant>,
        first_ok: Option<std::time::Instant>,
        last_ok: Option<std::time::Instant>,
        requests: u64,
        accepted: u64,
        busy: u64,
        bad: u64,
    }

    static PUSHBACK: std::sync::Mutex<Pushback> = std::sync::Mutex::new(Pushback {
        tokens: 0.0,
        refilled: None,
        rng: 0x9e37_79b9_7f4a_7c15,
        first_request: None,
        first_ok: None,
        last_ok: None,
        requests: 0,
        accepted: 0,
        busy: 0,
        bad: 0,
    });

    /// `/rate/<R>`, `/random429`, `/nth429`, `/outage/<ms>`: the answer to
    /// each item of `docs` (`None`: a 500 for the request).
    fn pushback(mode: &[&str], docs: usize) -> Option<Vec<Item>> {
        let mut p = PUSHBACK.lock().unwrap();
        let now = std::time::Instant::now();
        p.requests += 1;
        if mode == ["nth429"] {
            // The issue's quota: every tenth item of every request 429,
            // every thousandth 400, whatever the rate (a retry too).
            let items: Vec<Item> = (0..docs)
                .map(|i| match i + 1 {
                    n if n % 1000 == 0 => Item::Bad,
                    n if n % 10 == 0 => Item::Busy,
                    _ => Item::Ok,
                })
                .collect();
            let busy = items.iter().filter(|&&b| b == Item::Busy).count() as u64;
            let bad = items.iter().filter(|&&b| b == Item::Bad).count() as u64;
            p.busy += busy;
            p.bad += bad;
            p.accepted += docs as u64 - busy - bad;
            return Some(items);
        }
        let busy: Vec<bool> = match mode {
            ["rate", r] => {
                let r: f64 = r.parse().unwrap();
                let last = p.refilled.unwrap_or(now);
                p.tokens = (p.tokens + (now - last).as_secs_f64() * r).min(r / 10.0);
                if p.refilled.is_none() {
                    p.tokens = r / 10.0;
                }
                p.refilled = Some(now);
                (0..docs)
                    .map(|_| {
                        if p.tokens >= 1.0 {
                            p.tokens -= 1.0;
                            false
                        } else {
                            true
                        }
                    })
                    .collect()
            }
            ["random429"] => (0..docs)
                .map(|_| {
                    p.rng ^= p.rng << 13;
                    p.rng ^= p.rng >> 7;
                    p.rng ^= p.rng << 17;
                    p.rng.is_multiple_of(10)
                })
                .collect(),
            ["outage", ms] => {
                let first = *p.first_request.get_or_insert(now);
                if now < first + Duration::from_millis(ms.parse().unwrap()) {
                    return None;
                }
                if p.first_ok.is_none() {
                    p.first_ok = Some(now);
                }
                p.last_ok = Some(now);
                vec![false; docs]
            }
            _ => vec![false; docs],
        };
        let n = busy.iter().filter(|&&b| b).count() as u64;
        p.busy += n;
        p.accepted += docs as u64 - n;
        Some(
            busy.into_iter()
                .map(|b| if b { Item::Busy } else { Item::Ok })
                .collect(),
        )
    }

    /// `requests accepted busy outage_return_to_first_ok_ms`, then resets.
    fn stats(mode: &[&str]) -> String {
        let mut p = PUSHBACK.lock().unwrap();
        let gap = match (mode, p.first_request, p.first_ok, p.last_ok) {
            (["outage", ms], Some(first), Some(ok), Some(last)) => {
                let back = first + Duration::from_millis(ms.parse().unwrap());
                format!(
                    "{}/{}",
                    ok.saturating_duration_since(back).as_millis(),
                    last.saturating_duration_since(back).as_millis()
                )
            }
            _ => "-".to_string(),
        };
        let out = format!("{} {} {} {gap} {}", p.requests, p.accepted, p.busy, p.bad);
        *p = Pushback {
            tokens: 0.0,
            refilled: None,
            rng: 0x9e37_79b9_7f4a_7c15,
            first_request: None,
            first_ok: None,
            last_ok: None,
            requests: 0,
            accepted: 0,
            busy: 0,
            bad: 0,
        };
        out
    }

    async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, hyper::Error> {
        let path = req.uri().path().to_string();
        let body = req.into_body().collect().await?.to_bytes();
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        if parts.first() == Some(&"stats") {
            return Ok(Response::new(Full::new(Bytes::from(stats(&parts[1..])))));
        }
        let mode = &parts[..parts.len().saturating_sub(1)];
        let (ct, answer) = if path.ends_with("/_bulk") {
            let docs = memchr::memchr_iter(b'\n', &body).count() / 2;
            let Some(busy) = pushback(mode, docs) else {
                return Ok(Response::builder()
                    .status(500)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from_static(
                        br#"{"error":{"type":"test_exception","reason":"down"},"status":500}"#,
                    )))
                    .unwrap());
            };
            let errors = busy.iter().any(|&b| b != Item::Ok);
            let mut out = Vec::with_capacity(40 + docs * (BUSY.len() + 1));
            out.extend_from_slice(if errors {
                br#"{"took":1,"errors":true,"items":["#
            } else {
                br#"{"took":1,"errors":false,"items":["#
            });
            for (i, b) in busy.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(match b {
                    Item::Ok => ITEM,
                    Item::Busy => BUSY,
                    Item::Bad => BAD,
                });
            }
            out.extend_from_slice(b"]}");
            ("application/json", out)
        } else if path.starts_with("/v1/") {
            ("application/x-protobuf", Vec::new())
        } else {
            let docs = memchr::memmem::find_iter(&body, b"{\"_timestamp\":").count();
            (
                "application/json",
                format!(
                    r#"{{"code":200,"status":[{{"name":"logs","successful":{docs},"failed":0}}]}}"#
                )
                .into_bytes(),
            )
        };
        Ok(Response::builder()
            .header("content-type", ct)
            .body(Full::new(Bytes::from(answer)))
            .unwrap())
    }
}

/// The pushback runs (see the module documentation).
mod pushback {
    use super::*;

    pub async fn run(events: u64) {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let log = Log::open(
            dir.path().join("log"),
            LogOptions {
                fsync: FsyncPolicy::Never,
                segment_bytes: 64 << 20,
                max_bytes: 4 << 30,
                cursor_sync_interval: Duration::from_secs(1),
                ..LogOptions::default()
            },
        )
        .unwrap();
        let mut n = 0u64;
        while n < events {
            let mut b = Batch::with_capacity(4 << 20);
            while b.encoded_len() < (4 << 20) && n < events {
                b.push(&event(n));
                n += 1;
            }
            log.append(b).await.unwrap();
        }
        let (mut child, base) = start_receiver();
        let runs: &[(&str, &str)] = &[
            ("normal", "/"),
            ("random 10% 429", "/random429/"),
            ("every 10th 429", "/nth429/"),
            ("rate 50,000/s", "/rate/50000/"),
            ("rate 200,000/s", "/rate/200000/"),
            ("outage 10s", "/outage/10000/"),
        ];
        for i in 0..runs.len() {
            log.consumer(&format!("push-{i}"), StartAt::Oldest).unwrap();
        }
        println!();
        println!(
            "pushback: elasticsearch, {events} events, concurrency 4, batch_max_events 2000, backoff 500ms..60s"
        );
        println!(
            "{:<16} {:>10} {:>9} {:>6} {:>9} {:>11} {:>12} {:>22} {:>6}",
            "receiver",
            "events/s",
            "seconds",
            "cores",
            "requests",
            "429 items",
            "quarantined",
            "return→first/last ok",
            "limit"
        );
        let metrics = Arc::new(Metrics::new(None));
        let mut normal = 0.0;
        // HOLDFAST_BENCH_PUSHBACK_RUNS="every 10th": only the runs whose
        // label holds one of the comma-separated words (and `normal`, the
        // figure the others are read against).
        let chosen = std::env::var("HOLDFAST_BENCH_PUSHBACK_RUNS").ok();
        for (i, &(label, prefix)) in runs.iter().enumerate() {
            if let Some(c) = &chosen {
                if label != "normal" && !c.split(',').any(|w| label.contains(w.trim())) {
                    continue;
                }
            }
            let name = format!("push-{i}");
            let mut common = DeliveryOptions::new(
                vec!["app".into()],
                dir.path().join("quarantine").join(&name),
            );
            common.batch_max_events = 2000;
            common.batch_max_bytes = 8 << 20;
            common.batch_timeout = Duration::from_millis(20);
            common.concurrency = 4;
            let sink = SinkKind::Elasticsearch(ElasticsearchOptions {
                common,
                http: HttpOptions {
                    compression: Compression::None,
                    ..HttpOptions::default()
                },
                endpoints: vec![base.join(prefix).unwrap()],
                index: Template::parse("holdfast-{signal}-{date}").unwrap(),
                document: bench_layout(),
            });
            let cpu0 = super::cpu_seconds();
            let t0 = Instant::now();
            let stop = CancellationToken::new();
            let task = tokio::spawn(sink.run(&holdfast::component::ComponentContext::new(
                name.clone(),
                log.clone(),
                metrics.clone(),
                stop.clone(),
            )));
            let mut finished = true;
            // The adaptive limit, sampled every 100 ms: whether a steady
            // share of 429s holds concurrency down.
            let (mut limit_sum, mut limit_n, mut last_sample) = (0.0, 0u32, Instant::now());
            let limit_key = format!("holdfast_sink_concurrency_limit{{sink=\"{name}\"}} ");
            loop {
                tokio::time::sleep(Duration::from_millis(5)).await;
                if last_sample.elapsed() >= Duration::from_millis(100) {
                    last_sample = Instant::now();
                    let text = metrics.encode().unwrap_or_default();
                    if let Some(v) = text
                        .lines()
                        .find_map(|l| l.strip_prefix(&limit_key)?.trim().parse::<f64>().ok())
                    {
                        limit_sum += v;
                        limit_n += 1;
                    }
                }
                let done = log
                    .stats()
                    .consumers
                    .iter()
                    .any(|c| c.name == name && c.committed == n);
                if done {
                    break;
                }
                if t0.elapsed() > Duration::from_secs(120) {
                    finished = false;
                    break;
                }
                assert!(!task.is_finished(), "the sink stopped");
            }
            let secs = t0.elapsed().as_secs_f64();
            let cpu = super::cpu_seconds() - cpu0;
            stop.cancel();
            task.await.unwrap().unwrap();
            let sent = {
                let text = metrics.encode().unwrap_or_default();
                let key = format!("holdfast_sink_sent_events_total{{sink=\"{name}\"}} ");
                text.lines()
                    .find_map(|l| l.strip_prefix(&key)?.trim().parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            let quarantined = holdfast::cli::quarantine::scan(
                &dir.path().join("quarantine"),
                &holdfast::cli::quarantine::Filter::default(),
            )
            .map_or(0, |s| {
                s.entries.iter().filter(|e| e.record().sink == name).count()
            });
            let stats_path = format!("/stats{prefix}");
            let stats = reqwest::get(base.join(&stats_path).unwrap())
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            let f: Vec<&str> = stats.split_whitespace().collect();
            let rate = sent / secs;
            if label == "normal" {
                normal = rate;
            }
            let gap = if f[3] == "-" {
                "-".to_string()
            } else {
                format!("{} ms", f[3])
            };
            let target = match label {
                "random 10% 429" => format!(
                    "  {:.0}% of normal (target >= 50%)",
                    rate * 100.0 / normal.max(1.0)
                ),
                "every 10th 429" => format!(
                    "  {:.0}% of normal (target >= 50%); the receiver answered 400 to {} items: {}",
                    rate * 100.0 / normal.max(1.0),
                    f[4],
                    if f[4].parse::<usize>().ok() == Some(quarantined) {
                        "each quarantined, exactly"
                    } else {
                        "NOT the number quarantined"
                    }
                ),
                "rate 50,000/s" => {
                    format!("  {:.0}% of R (target >= 80%)", rate * 100.0 / 50_000.0)
                }
                "rate 200,000/s" => {
                    format!("  {:.0}% of R (target >= 80%)", rate * 100.0 / 200_000.0)
                }
                _ => String::new(),
            };
            println!(
                "{:<16} {:>10.0} {:>9.1} {:>6.2} {:>9} {:>11} {:>12} {:>22} {:>6}{}{target}",
                label,
                rate,
                secs,
                cpu / secs,
                f[0],
                f[2],
                quarantined,
                gap,
                if limit_n > 0 {
                    format!("{:.2}", limit_sum / limit_n as f64)
                } else {
                    "-".into()
                },
                if finished { "" } else { "  (stopped)" },
            );
            log.remove_consumer(&name).unwrap();
        }
        drop(child.stdin.take());
        let _ = child.wait();
        log.close().await.unwrap();
    }
}

/// The documents' layout: lean (the default), or full with
/// `HOLDFAST_BENCH_DOCUMENT=full`, to compare what a receiver is sent.
fn bench_layout() -> Layout {
    match std::env::var("HOLDFAST_BENCH_DOCUMENT").as_deref() {
        Ok("full") => Layout::Full,
        _ => Layout::Lean,
    }
}
