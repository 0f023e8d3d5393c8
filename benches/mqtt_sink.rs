//! The `mqtt` sink draining a backlog to mosquitto (issue 31's sink
//! target: ≥ 100,000 events/s, with CPU per event and peak RSS).
//!
//! ```sh
//! cargo bench --bench mqtt_sink                          # 1,000,000 events
//! HOLDFAST_BENCH_QUICK=1 cargo bench --bench mqtt_sink   # 100,000 events, a smoke run
//! ```
//!
//! The backlog is appended to a log with `fsync = "always"` (one sync per
//! append of 1,000 events; writing it is not what is measured), then each
//! row drains all of it as a new consumer, in this process, to a real
//! mosquitto started here with the test harness (`tests/common/mosquitto.rs`:
//! persistence on, `max_inflight_messages 1000` so that its Receive
//! Maximum does not hold the sink to its default of 20, a subscriber queue
//! that holds everything, the Debian package's log types rather than the
//! tests' `log_type all`, which costs the broker more than the messages). A `mosquitto_sub -q 1` persistent subscriber
//! per row counts what arrives, except in the last row, where the broker
//! has no subscriber to hand the messages to (PUBACK 0x10, delivered): the
//! sink and the broker without a subscriber's share of the same cores.
//!
//! Reported per row: events/s until the sink committed the last event,
//! the time until the subscriber had them all (JSON rows: a protobuf
//! payload may hold newlines, which split `mosquitto_sub`'s lines), the sink's CPU (this
//! process, user + system) per event, and peak RSS (VmHWM, reset before
//! each row; the mapped segments' pages count); beside them the broker's
//! CPU per event over the same time (it also hands each message to the
//! subscriber).

#[path = "../tests/common/daemon.rs"]
mod daemon;
#[path = "../tests/common/mosquitto.rs"]
mod mosquitto;
#[path = "../tests/common/require.rs"]
mod require;

use std::sync::Arc;
use std::time::{Duration, Instant};

use holdfast::event::{Envelope, EventId, Record};
use holdfast::metrics::Metrics;
use holdfast::seglog::{Batch, FsyncPolicy, Log, LogOptions};
use holdfast::sinks::SinkKind;
use mosquitto::{Broker, BrokerOptions};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use tokio_util::sync::CancellationToken;

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

/// A typical log line from a device: about 250 bytes in the log.
fn event(n: u64) -> Vec<u8> {
    Envelope {
        id: EventId::random().0.to_vec(),
        source: "app".into(),
        observed_time_unix_nano: 1_714_564_800_000_000_000 + n * 1000,
        resource: Some(Resource {
            attributes: vec![
                kv("host.name", "gateway-0042"),
                kv("service.name", "edge-app"),
            ],
            ..Default::default()
        }),
        scope: Some(InstrumentationScope {
            name: "holdfast.bench".into(),
            ..Default::default()
        }),
        record: Some(Record::Log(LogRecord {
            time_unix_nano: 1_714_564_800_000_000_000 + n * 1000,
            severity_text: "INFO".into(),
            body: Some(AnyValue {
                value: Some(any_value::Value::StringValue(format!(
                    "sensor reading seq={n} temperature_c={} humidity={} status=ok",
                    n % 97,
                    n % 61
                ))),
            }),
            ..Default::default()
        })),
        ..Default::default()
    }
    .encode_to_vec()
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

/// A process's user + system CPU seconds, from `/proc/<pid>/stat`.
fn process_cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    // utime and stime are fields 14 and 15, 12 and 13 after the name.
    (ticks(11) + ticks(12)) / hz
}

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// The row without a subscriber.
const NO_SUBSCRIBER: &str = "MQTT 5, json, no subscriber";

fn main() {
    if !mosquitto::available("benches/mqtt_sink") {
        return;
    }
    let quick = std::env::var_os("HOLDFAST_BENCH_QUICK").is_some();
    let n: u64 = if quick { 100_000 } else { 1_000_000 };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(n));
}

async fn run(n: u64) {
    // `HOLDFAST_BENCH_MQTT_EXTRA`: more lines for mosquitto's config,
    // separated by `;`.
    let extra = std::env::var("HOLDFAST_BENCH_MQTT_EXTRA")
        .map(|e| e.split(';').map(str::to_string).collect())
        .unwrap_or_default();
    let broker = Broker::start(BrokerOptions {
        max_inflight_messages: Some(1000),
        max_queued_messages: Some(u32::try_from(n * 2).unwrap()),
        log_every_packet: false,
        extra,
        ..Default::default()
    });
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let log = Log::open(
        dir.path().join("log"),
        LogOptions {
            fsync: FsyncPolicy::Always,
            segment_bytes: 64 << 20,
            max_bytes: 4 << 30,
            ..LogOptions::default()
        },
    )
    .unwrap();
    let started = Instant::now();
    let mut bytes = 0u64;
    let mut i = 0u64;
    while i < n {
        let mut b = Batch::with_capacity(1 << 20);
        for _ in 0..1000.min(n - i) {
            let e = event(i);
            bytes += e.len() as u64;
            b.push(&e);
            i += 1;
        }
        log.append(b).await.unwrap();
    }
    println!(
        "backlog: {n} events, {:.1} MiB, appended with fsync = \"always\" in {:.1} s",
        bytes as f64 / (1 << 20) as f64,
        started.elapsed().as_secs_f64()
    );
    println!(
        "{:<28} {:>10} {:>12} {:>14} {:>12} {:>10} {:>16}",
        "row",
        "events/s",
        "all at sub",
        "CPU µs/event",
        "peak RSS MiB",
        "repeats",
        "broker µs/event"
    );
    let rows = [
        ("MQTT 5, json", "protocol = \"5\"\npayload = \"json\""),
        (
            "MQTT 5, otlp_proto",
            "protocol = \"5\"\npayload = \"otlp_proto\"",
        ),
        (
            "MQTT 3.1.1, json",
            "protocol = \"3.1.1\"\npayload = \"json\"",
        ),
        // The broker takes each message and has no one to hand it to
        // (PUBACK 0x10): what the sink and the broker cost without a
        // subscriber's share of the same two cores.
        (NO_SUBSCRIBER, "protocol = \"5\"\npayload = \"json\""),
    ];
    let metrics = Arc::new(Metrics::new(Some(log.clone())));
    for (row, (label, keys)) in rows.iter().enumerate() {
        let name = format!("mqtt{row}");
        let sub =
            (*label != NO_SUBSCRIBER).then(|| broker.subscriber(&format!("r{row}/#"), 1, "5"));
        let text = format!(
            "data_dir = \"{}\"\nsources.app = {{ type = \"otlp_http\" }}\n\n\
             [sinks.{name}]\ntype = \"mqtt\"\ninputs = [\"app\"]\nurl = \"{}\"\n\
             topic = \"r{row}/{{resource.host.name}}\"\nmax_in_flight = 1000\n{keys}\n",
            dir.path().display(),
            broker.url()
        );
        let settings = holdfast::config::parse(&text, dir.path().join("bench.toml"))
            .unwrap_or_else(|e| panic!("{e}"));
        let sink: SinkKind = settings.sinks[&name].kind.clone();
        sink.declare_metrics(&name, &metrics);
        // The rows share this process: the previous row's subscriber lines
        // (read whole by `wait_for`) were freed, but glibc keeps the pages
        // until trimmed, and the peak is reset to what is resident now.
        // SAFETY: malloc_trim only returns free heap memory to the kernel.
        unsafe { libc::malloc_trim(0) };
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        let broker_pid = broker.pid().expect("the broker runs");
        let broker0 = process_cpu_seconds(broker_pid);
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
        let broker_cpu = process_cpu_seconds(broker_pid) - broker0;
        let hwm = vm_hwm_kib();
        // A protobuf payload may hold newlines: the subscriber's lines
        // count only the JSON rows' messages.
        let text = !keys.contains("otlp_proto");
        let lines = match sub {
            Some(sub) if text => tokio::task::spawn_blocking(move || {
                sub.wait_for(n as usize, Duration::from_secs(600)).len() as u64
            })
            .await
            .unwrap(),
            _ => n,
        };
        let text = text && *label != NO_SUBSCRIBER;
        let all = t0.elapsed().as_secs_f64();
        stop.cancel();
        task.await.unwrap().unwrap();
        let (all, repeats) = if text {
            (format!("{all:.2} s"), (lines - n).to_string())
        } else {
            ("-".to_string(), "-".to_string())
        };
        println!(
            "{:<28} {:>10.0} {:>12} {:>14.2} {:>12.1} {:>10} {:>16.2}",
            label,
            n as f64 / secs,
            all,
            cpu * 1e6 / n as f64,
            hwm as f64 / 1024.0,
            repeats,
            broker_cpu * 1e6 / n as f64
        );
        log.remove_consumer(&name).unwrap();
    }
}
