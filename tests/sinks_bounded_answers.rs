//! Issue 26: a backend cannot make a sink hold memory with its answers.
//! The real binary, an `otlp_http` source and an `otlp_http` sink whose
//! backend (a raw TCP server here, on loopback) first answers 200 with an
//! endless chunked body or with a `Content-Length` of 1 GiB streamed
//! forever, four requests in flight, then answers normally. The agent's
//! peak RSS (VmHWM) stays within a few MiB per request in flight; the
//! events are retried (`response_too_large`), never quarantined, and all
//! delivered once the backend answers normally; one error says so.

#[path = "common/daemon.rs"]
mod daemon;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use daemon::{free_port, wait_for, Agent};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use prost::Message;

const POSTED: u64 = 40;
/// Answers too large before the backend answers normally: half endless
/// chunked bodies, half announcing 1 GiB.
const BAD: usize = 8;
/// Peak RSS allowed above the idle figure. Four requests in flight at
/// 1 MiB of answer each (10 events per request) fit well; a single answer
/// read to the old 64 MiB bound does not.
const MAX_GROWTH_KIB: u64 = 32 << 10;

fn text(v: impl Into<String>) -> Option<AnyValue> {
    Some(AnyValue {
        value: Some(any_value::Value::StringValue(v.into())),
    })
}

fn request(first: u64, n: u64) -> Vec<u8> {
    let records = (first..first + n)
        .map(|i| LogRecord {
            time_unix_nano: 1_700_000_000_000_000_000 + i,
            severity_number: 9,
            body: text(format!("event {i}")),
            attributes: vec![KeyValue {
                key: "test.id".into(),
                value: text(format!("R{i:05}")),
                ..Default::default()
            }],
            ..Default::default()
        })
        .collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

fn post(addr: SocketAddr, body: &[u8]) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let head = format!(
        "POST /v1/logs HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-protobuf\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    String::from_utf8_lossy(&answer)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The backend: counts requests, answers the first `BAD` with bodies that
/// never end, the rest with an empty 200, and keeps the ids of the events
/// it answered normally.
#[derive(Default)]
struct Backend {
    requests: AtomicUsize,
    delivered: Mutex<HashSet<String>>,
}

impl Backend {
    fn start() -> (Arc<Backend>, SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let b = Arc::new(Backend::default());
        let backend = b.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let backend = backend.clone();
                std::thread::spawn(move || backend.serve(conn));
            }
        });
        (b, addr)
    }

    /// One connection, request after request (keep-alive), until the
    /// client goes.
    fn serve(&self, conn: TcpStream) {
        let mut out = conn.try_clone().unwrap();
        let mut r = BufReader::new(conn);
        loop {
            let mut length = 0usize;
            let mut line = String::new();
            loop {
                line.clear();
                if r.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                if line == "\r\n" {
                    break;
                }
                if let Some((k, v)) = line.split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        length = v.trim().parse().unwrap();
                    }
                }
            }
            let mut body = vec![0; length];
            if r.read_exact(&mut body).is_err() {
                return;
            }
            let n = self.requests.fetch_add(1, Ordering::SeqCst);
            if n < BAD {
                // Streams until the sink drops the connection (the write
                // then fails).
                let chunked = n.is_multiple_of(2);
                let head = if chunked {
                    "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nTransfer-Encoding: chunked\r\n\r\n".to_string()
                } else {
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n",
                        1u64 << 30
                    )
                };
                if out.write_all(head.as_bytes()).is_err() {
                    return;
                }
                let zeros = vec![0u8; 64 << 10];
                loop {
                    let sent = if chunked {
                        out.write_all(format!("{:x}\r\n", zeros.len()).as_bytes())
                            .and_then(|_| out.write_all(&zeros))
                            .and_then(|_| out.write_all(b"\r\n"))
                    } else {
                        out.write_all(&zeros)
                    };
                    if sent.is_err() {
                        return;
                    }
                }
            }
            let req = ExportLogsServiceRequest::decode(&body[..]).unwrap();
            let mut delivered = self.delivered.lock().unwrap();
            for rec in req
                .resource_logs
                .iter()
                .flat_map(|r| &r.scope_logs)
                .flat_map(|s| &s.log_records)
            {
                for a in &rec.attributes {
                    if let Some(any_value::Value::StringValue(s)) =
                        a.value.as_ref().and_then(|v| v.value.as_ref())
                    {
                        delivered.insert(s.clone());
                    }
                }
            }
            drop(delivered);
            let ok = "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n";
            if out.write_all(ok.as_bytes()).is_err() {
                return;
            }
        }
    }
}

fn vm_hwm_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmHWM in /proc/<pid>/status")
}

const TOO_LARGE: &str = "holdfast_sink_retries_total{sink=\"out\",reason=\"response_too_large\"}";

#[test]
fn endless_and_huge_answers_are_cut_retried_and_never_held() {
    let (backend, backend_addr) = Backend::start();
    let source: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut agent = Agent::new(&format!(
        r#"
[sources.otlp]
type = "otlp_http"
listen = "{source}"

[sinks.out]
type = "otlp_http"
inputs = ["otlp"]
endpoint = "http://{backend_addr}"
compression = "none"
batch_max_events = 10
batch_timeout = "50ms"
concurrency = 4
adaptive_concurrency = false
request_timeout = "20s"
backoff_initial = "50ms"
backoff_max = "200ms"
"#
    ));
    agent.start();
    agent.wait_ready();
    assert_eq!(
        agent.metric(TOO_LARGE),
        Some(0.0),
        "the reason is registered at 0"
    );
    let idle = vm_hwm_kib(agent.pid());

    for first in (0..POSTED).step_by(10) {
        assert_eq!(post(source, &request(first, 10)), 200);
    }

    let want: HashSet<String> = (0..POSTED).map(|i| format!("R{i:05}")).collect();
    wait_for(
        "every event delivered once the backend answers normally",
        Duration::from_secs(60),
        || (*backend.delivered.lock().unwrap() == want).then_some(()),
    );

    let peak = vm_hwm_kib(agent.pid());
    println!("VmHWM idle {idle} KiB, after the answers {peak} KiB");
    assert!(
        peak < idle + MAX_GROWTH_KIB,
        "peak RSS grew by {} KiB (idle {idle} KiB): answers were held past their limit",
        peak - idle
    );
    assert!(backend.requests.load(Ordering::SeqCst) > BAD);
    let retried = agent.metric(TOO_LARGE).unwrap_or(0.0);
    assert!(
        retried >= 10.0,
        "events retried for answers too large: {retried}"
    );
    let quarantined = agent
        .metrics()
        .lines()
        .filter(|l| l.starts_with("holdfast_sink_quarantined_events_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>();
    assert_eq!(quarantined, 0.0, "nothing quarantined for a long answer");

    agent.stop();
    let log = agent.stderr();
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("longer than this request's limit"))
        .collect();
    assert!(
        !errors.is_empty() && errors.len() < BAD,
        "one error per run of answers too large, not one per answer: {errors:#?}"
    );
    assert!(
        errors[0].contains("sink=out") && errors[0].contains("limit_bytes=1048576"),
        "the error names the sink and the limit: {}",
        errors[0]
    );
}
