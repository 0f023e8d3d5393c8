//! Hostile OTLP/HTTP bodies through the real binary on loopback: a few
//! megabytes that name millions of empty records (protobuf and JSON, plain
//! and gzip, alone and seven at once). Each is refused (413, or 429/503 with
//! `Retry-After`), the daemon stays up and takes a normal request next, and
//! its peak resident memory (VmHWM) stays within 64 MiB of its idle figure:
//! decoding is charged to the source's memory budget before it allocates.

#[path = "common/daemon.rs"]
mod daemon;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use daemon::{free_port, Agent};

/// The most VmHWM may grow over its idle figure during an attack.
const HEADROOM: u64 = 64 << 20;

/// Peak resident memory of `pid`, in bytes, from `/proc/<pid>/status`.
fn vm_hwm(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/<pid>/status");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmHWM value");
    kib << 10
}

struct Answer {
    status: u16,
    retry_after: bool,
    body: String,
}

/// One HTTP/1.1 POST on its own connection.
fn post(addr: SocketAddr, path: &str, content_type: &str, gzip: bool, body: &[u8]) -> Answer {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let coding = if gzip {
        "Content-Encoding: gzip\r\n"
    } else {
        ""
    };
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: {content_type}\r\n{coding}\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    // The server may answer and close before the whole body is sent.
    let _ = s.write_all(body);
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Answer {
        status,
        retry_after: head
            .lines()
            .any(|l| l.to_ascii_lowercase().starts_with("retry-after:")),
        body: body.to_string(),
    }
}

fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The finding of issue 26: an `ExportLogsServiceRequest` of 8,380,012
/// bytes holding 4,190,000 empty log records, ending in a truncated field.
fn empty_records_protobuf() -> Vec<u8> {
    const RECORDS: usize = 4_190_000;
    // ScopeLogs.log_records (field 2), each empty: 0x12 0x00.
    let scope = [0x12u8, 0x00].repeat(RECORDS);
    // ResourceLogs.scope_logs (field 2) holding the scope.
    let mut resource = vec![0x12];
    varint(scope.len() as u64, &mut resource);
    resource.extend_from_slice(&scope);
    // ExportLogsServiceRequest.resource_logs (field 1).
    let mut body = vec![0x0a];
    varint(resource.len() as u64, &mut body);
    body.extend_from_slice(&resource);
    // A second resource_logs that says 5 bytes follow, and none do.
    body.extend_from_slice(&[0x0a, 0x05]);
    assert_eq!(body.len(), 8_380_012);
    body
}

/// OTLP/JSON with about 8 MB of empty log records.
fn empty_records_json() -> Vec<u8> {
    let records = vec!["{}"; 2_700_000].join(",");
    format!(r#"{{"resourceLogs":[{{"scopeLogs":[{{"logRecords":[{records}]}}]}}]}}"#).into_bytes()
}

/// OTLP/JSON with one log record whose body nests about 8 MB of values:
/// arrays of arrays of empty values.
fn nested_values_json() -> Vec<u8> {
    let inner = format!(
        r#"{{"arrayValue":{{"values":[{}]}}}}"#,
        vec!["{}"; 1000].join(",")
    );
    let outer = vec![inner.as_str(); 2600].join(",");
    format!(
        r#"{{"resourceLogs":[{{"scopeLogs":[{{"logRecords":[{{"body":{{"arrayValue":{{"values":[{outer}]}}}}}}]}}]}}]}}"#
    )
    .into_bytes()
}

const PROTOBUF: &str = "application/x-protobuf";
const JSON: &str = "application/json";

/// A running agent with one OTLP/HTTP source on default settings.
struct Target {
    agent: Agent,
    otlp: SocketAddr,
    idle_hwm: u64,
}

fn target() -> Target {
    let port = free_port();
    let mut agent = Agent::new(&format!(
        "[sources.otlp]\ntype = \"otlp_http\"\nlisten = \"127.0.0.1:{port}\"\n"
    ));
    agent.start();
    agent.wait_ready();
    let otlp: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    // One normal request first, so the idle figure includes what serving
    // any request costs.
    assert_normal_request_is_served(otlp);
    let idle_hwm = vm_hwm(agent.pid());
    Target {
        agent,
        otlp,
        idle_hwm,
    }
}

fn assert_normal_request_is_served(otlp: SocketAddr) {
    let body =
        br#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"hello"}}]}]}]}"#;
    let a = post(otlp, "/v1/logs", JSON, false, body);
    assert_eq!(
        a.status, 200,
        "a normal request after the attack: {}",
        a.body
    );
}

/// Refused as too large to decode, or told to come back later.
fn assert_refused(a: &Answer, what: &str) {
    match a.status {
        413 => {}
        429 | 503 => assert!(a.retry_after, "{what}: {} without Retry-After", a.status),
        s => panic!("{what}: answered {s}, expected 413 or 429/503: {}", a.body),
    }
}

impl Target {
    /// The daemon is still up, serves a normal request, and its peak
    /// memory stayed within the headroom.
    fn assert_unharmed(self, what: &str) {
        self.assert_unharmed_within(what, HEADROOM);
    }

    fn assert_unharmed_within(mut self, what: &str, headroom: u64) {
        assert!(
            self.agent.try_exit().is_none(),
            "{what}: holdfast exited; stderr:\n{}",
            self.agent.stderr()
        );
        let hwm = vm_hwm(self.agent.pid());
        eprintln!(
            "{what}: VmHWM {} KiB idle, {} KiB after",
            self.idle_hwm >> 10,
            hwm >> 10
        );
        assert_normal_request_is_served(self.otlp);
        assert!(
            hwm <= self.idle_hwm + headroom,
            "{what}: peak resident memory grew from {} MiB idle to {} MiB (at most {} MiB more \
             is allowed)",
            self.idle_hwm >> 20,
            hwm >> 20,
            headroom >> 20
        );
        self.agent.stop();
    }

    /// Sends `body` from `clients` connections at once.
    fn attack(&self, clients: usize, content_type: &'static str, gzip: bool, body: Vec<u8>) {
        let body = std::sync::Arc::new(body);
        let threads: Vec<_> = (0..clients)
            .map(|_| {
                let (otlp, body) = (self.otlp, body.clone());
                std::thread::spawn(move || post(otlp, "/v1/logs", content_type, gzip, &body))
            })
            .collect();
        for t in threads {
            assert_refused(&t.join().unwrap(), content_type);
        }
    }
}

#[test]
fn millions_of_empty_protobuf_records_plain() {
    let t = target();
    t.attack(1, PROTOBUF, false, empty_records_protobuf());
    t.assert_unharmed("8 MB protobuf of 4.19 M empty records");
}

#[test]
fn millions_of_empty_protobuf_records_gzip_alone() {
    let body = gzip(&empty_records_protobuf());
    assert!(body.len() < 16 << 10, "gzip body of {} bytes", body.len());
    let t = target();
    t.attack(1, PROTOBUF, true, body);
    t.assert_unharmed("8 KB gzip of 4.19 M empty protobuf records");
}

#[test]
fn millions_of_empty_protobuf_records_gzip_seven_at_once() {
    let body = gzip(&empty_records_protobuf());
    let t = target();
    t.attack(7, PROTOBUF, true, body);
    t.assert_unharmed("7 concurrent 8 KB gzip bodies of 4.19 M empty protobuf records");
}

#[test]
fn millions_of_empty_json_records_plain() {
    let body = empty_records_json();
    assert!(body.len() <= 8 << 20);
    let t = target();
    t.attack(1, JSON, false, body);
    t.assert_unharmed("8 MB of empty OTLP/JSON records");
}

#[test]
fn millions_of_empty_json_records_gzip_seven_at_once() {
    let body = gzip(&empty_records_json());
    let t = target();
    t.attack(7, JSON, true, body);
    t.assert_unharmed("7 concurrent gzip bodies of empty OTLP/JSON records");
}

#[test]
fn millions_of_nested_json_values() {
    let body = nested_values_json();
    assert!(body.len() <= 8 << 20, "{}", body.len());
    let t = target();
    t.attack(1, JSON, false, body);
    t.assert_unharmed("one OTLP/JSON record nesting millions of values");
}

/// An SDK's batch of `n` records (a 90-byte body, 5 attributes), as
/// protobuf: about 230 bytes a record, some 8 times that once decoded.
fn sdk_batch(n: usize) -> Vec<u8> {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use prost::Message;
    let text = |s: String| {
        Some(AnyValue {
            value: Some(Value::StringValue(s)),
        })
    };
    let record = LogRecord {
        time_unix_nano: 1,
        body: text("x".repeat(90)),
        attributes: (0..5)
            .map(|i| KeyValue {
                key: format!("attr.{i}"),
                value: text("value".into()),
                ..Default::default()
            })
            .collect(),
        trace_id: vec![7; 16],
        span_id: vec![8; 8],
        ..Default::default()
    };
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: vec![record; n],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

/// Requests that each fit the budget alone, but not together: they take
/// turns (200) or are told to retry (429 with `Retry-After`); none is
/// refused for good, and memory stays within the budget.
#[test]
fn large_requests_that_fit_alone_take_turns() {
    let body = sdk_batch(16_000);
    assert!(body.len() > 3 << 20, "{}", body.len());
    let t = target();
    let body = std::sync::Arc::new(body);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (otlp, body) = (t.otlp, body.clone());
            std::thread::spawn(move || post(otlp, "/v1/logs", PROTOBUF, false, &body))
        })
        .collect();
    let mut accepted = 0;
    for a in threads.into_iter().map(|t| t.join().unwrap()) {
        match a.status {
            200 => accepted += 1,
            429 => assert!(a.retry_after, "429 without Retry-After"),
            s => panic!("answered {s}: {}", a.body),
        }
    }
    assert!(accepted >= 1, "no request got its turn");
    // Requests that are accepted may use the whole budget (64 MiB), and
    // their append compresses a block beside it.
    t.assert_unharmed_within("4 concurrent 3 MB SDK batches", HEADROOM + (16 << 20));
}
