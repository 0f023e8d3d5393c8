//! gRPC out beside HTTP out: an `otlp_grpc` sink and an `otlp_http` sink
//! drain the same backlog, one after the other, each as a new consumer from
//! the oldest event, in `holdfast run` against a receiver in this process
//! (its own OS thread, one single-threaded runtime) that accepts everything:
//! an empty 200 for OTLP/HTTP, an empty `Export` answer with `grpc-status:
//! 0` for gRPC (benches/otlp_grpc/wire.rs). The receiver decodes every
//! request to count its records (the same work for both), so the rate is
//! from its first record to the last of the backlog; the CPU is the holdfast
//! process's over the same span.
//!
//! The backlog is written into the agent's log before it starts, with the
//! library (fsync = "never": writing it is not what is measured): log lines
//! of about 290 bytes, as benches/sinks.rs makes them. The events name the
//! source `app`, an `otlp_http` source of the config that nobody sends to.

use std::convert::Infallible;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use holdfast::event::{Envelope, EventId, Record};
use holdfast::seglog::{Batch, FsyncPolicy, Log, LogOptions};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use crate::daemon::{free_ports, wait_for, Agent};
use crate::{peak_rss_mib, proc_cpu, wire};

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

/// A typical tailed line as the log holds it.
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
        ..Default::default()
    }
    .encode_to_vec()
}

/// Writes `n` events into the log at `dir`.
fn write_backlog(dir: &std::path::Path, n: u64) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let log = Log::open(
            dir,
            LogOptions {
                fsync: FsyncPolicy::Never,
                segment_bytes: 64 << 20,
                max_bytes: 8 << 30,
                ..LogOptions::default()
            },
        )
        .unwrap();
        let mut i = 0;
        let mut bytes = 0;
        while i < n {
            let mut b = Batch::with_capacity(4 << 20);
            while i < n && b.encoded_len() < (4 << 20) {
                let e = event(i);
                bytes += e.len() as u64;
                b.push(&e);
                i += 1;
            }
            log.append(b).await.unwrap();
        }
        log.close().await.unwrap();
        bytes
    })
}

/// What the receiver counted.
#[derive(Default)]
struct Counts {
    records: AtomicU64,
}

fn records_in(message: &[u8]) -> u64 {
    let req = ExportLogsServiceRequest::decode(message).expect("an ExportLogsServiceRequest");
    req.resource_logs
        .iter()
        .flat_map(|r| &r.scope_logs)
        .map(|s| s.log_records.len() as u64)
        .sum()
}

async fn http_answer(
    counts: Arc<Counts>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let gzip = req
        .headers()
        .get("content-encoding")
        .is_some_and(|v| v == "gzip");
    let body = req.into_body().collect().await.map(|b| b.to_bytes());
    if let Ok(body) = body {
        let n = if gzip {
            let mut v = Vec::new();
            flate2::read::GzDecoder::new(&body[..])
                .read_to_end(&mut v)
                .unwrap();
            records_in(&v)
        } else {
            records_in(&body)
        };
        counts.records.fetch_add(n, Ordering::Relaxed);
    }
    Ok(Response::builder()
        .header("content-type", "application/x-protobuf")
        .body(Full::new(Bytes::new()))
        .unwrap())
}

async fn grpc_answer(
    counts: Arc<Counts>,
    req: Request<Incoming>,
) -> Result<Response<wire::ExportOk>, Infallible> {
    if let Ok(body) = req.into_body().collect().await.map(|b| b.to_bytes()) {
        let n: u64 = wire::messages(&body).iter().map(|m| records_in(m)).sum();
        counts.records.fetch_add(n, Ordering::Relaxed);
    }
    Ok(Response::builder()
        .header("content-type", "application/grpc")
        .body(wire::ExportOk::new())
        .unwrap())
}

/// The receiver: OTLP/HTTP on `http`, OTLP/gRPC on `grpc`, until the process ends.
fn start_receiver(http: SocketAddr, grpc: SocketAddr, counts: Arc<Counts>) {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let h = tokio::net::TcpListener::bind(http).await.unwrap();
            let g = tokio::net::TcpListener::bind(grpc).await.unwrap();
            ready_tx.send(()).unwrap();
            let c = counts.clone();
            tokio::spawn(async move {
                loop {
                    let (s, _) = h.accept().await.unwrap();
                    let c = c.clone();
                    tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(
                        TokioIo::new(s),
                        hyper::service::service_fn(move |r| http_answer(c.clone(), r)),
                    ));
                }
            });
            loop {
                let (s, _) = g.accept().await.unwrap();
                let c = counts.clone();
                tokio::spawn(
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(
                            TokioIo::new(s),
                            hyper::service::service_fn(move |r| grpc_answer(c.clone(), r)),
                        ),
                );
            }
        });
    });
    ready_rx.recv().unwrap();
}

pub fn run(quick: bool) {
    let n: u64 = if quick { 200_000 } else { 2_000_000 };
    let [http, grpc, unused] = free_ports::<3>();
    let http: SocketAddr = format!("127.0.0.1:{http}").parse().unwrap();
    let grpc: SocketAddr = format!("127.0.0.1:{grpc}").parse().unwrap();

    let mut agent = Agent::new("");
    let head = std::fs::read_to_string(&agent.config).unwrap();
    let started = Instant::now();
    let bytes = write_backlog(&agent.data_dir().join("log"), n);
    println!();
    println!(
        "gRPC out beside HTTP out: a backlog of {n} events ({:.0} MiB, {:.0} bytes each, written in {:.1}s){}",
        bytes as f64 / (1 << 20) as f64,
        bytes as f64 / n as f64,
        started.elapsed().as_secs_f64(),
        if quick { " — QUICK smoke run, figures are not meaningful" } else { "" }
    );
    println!("sink settings: batch_max_events 2000, batch_max_bytes 8 MiB, batch_timeout 20ms, concurrency 4");
    let counts = Arc::new(Counts::default());
    start_receiver(http, grpc, counts.clone());
    println!(
        "{:<20} {:>10} {:>8} {:>14} {:>13}",
        "sink", "events/s", "MiB/s", "CPU ms/1k ev", "peak RSS MiB"
    );
    let runs = [
        ("otlp_http", "none", http),
        ("otlp_grpc", "none", grpc),
        ("otlp_http", "gzip", http),
        ("otlp_grpc", "gzip", grpc),
    ];
    for (i, (kind, compression, addr)) in runs.into_iter().enumerate() {
        // A new sink name: a new consumer, from the oldest event.
        let body = format!(
            "[log]\nmax_bytes = \"16GiB\"\n\n\
             [sources.app]\ntype = \"otlp_http\"\nlisten = \"127.0.0.1:{unused}\"\n\n\
             [sinks.run{i}]\ntype = \"{kind}\"\ninputs = [\"app\"]\nendpoint = \"http://{addr}\"\n\
             batch_max_events = 2000\nbatch_max_bytes = \"8MiB\"\nbatch_timeout = \"20ms\"\n\
             concurrency = 4\ncompression = \"{compression}\"\n"
        );
        std::fs::write(&agent.config, format!("{head}{body}")).unwrap();
        counts.records.store(0, Ordering::SeqCst);
        agent.start();
        agent.wait_ready();
        let pid = agent.pid() as u32;
        let (t0, c0, cpu0) = wait_for(
            "the first records at the receiver",
            Duration::from_secs(60),
            || {
                let c = counts.records.load(Ordering::Relaxed);
                (c > 0).then(|| (Instant::now(), c, proc_cpu(pid)))
            },
        );
        let (t1, cpu1) = wait_for(
            "the whole backlog at the receiver",
            Duration::from_secs(900),
            || {
                (counts.records.load(Ordering::Relaxed) >= n)
                    .then(|| (Instant::now(), proc_cpu(pid)))
            },
        );
        let rss = peak_rss_mib(pid);
        assert!(agent.stop().success(), "{}", agent.stderr());
        let events = (n - c0) as f64;
        let secs = (t1 - t0).as_secs_f64().max(1e-9);
        println!(
            "{:<20} {:>10.0} {:>8.1} {:>14.3} {:>13.1}",
            format!("{kind} {compression}"),
            events / secs,
            events * (bytes as f64 / n as f64) / secs / (1 << 20) as f64,
            (cpu1 - cpu0) * 1e3 / (events / 1e3),
            rss,
        );
        let extra = counts.records.load(Ordering::SeqCst).saturating_sub(n);
        if extra > 0 {
            println!("  {kind} {compression}: {extra} records arrived more than once");
        }
    }
}
