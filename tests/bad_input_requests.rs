//! Bad input against the running agent (design promise 10): every class of
//! bad OTLP/HTTP request is sent to the real binary, one table row each, and
//! gets its status and the key words of its message; after every row the
//! agent is still ready and the log holds exactly what it held before (not
//! one byte written, checked on the log's own counters and with
//! `holdfast dump`). Bad bytes in tailed files (invalid UTF-8, NUL bytes,
//! 10 MiB lines, a line that never ends) arrive as `docs/sources-file.md`
//! says, marked and counted, with the lines around them intact.

#[path = "common/daemon.rs"]
mod daemon;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use daemon::{holdfast, http_get, wait_for, Agent};
use prost::Message;

const PROTOBUF: &str = "application/x-protobuf";
const JSON: &str = "application/json";

fn fixture(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/otlp")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

/// `google.rpc.Status`, the body of an error answer in protobuf.
#[derive(Clone, PartialEq, Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

/// What the test puts on the wire.
enum Wire {
    /// A request with this body and a matching `Content-Length`.
    Body(Vec<u8>),
    /// A `Content-Length` of `declared`, then only `sent`, then the client
    /// shuts its side: a body cut off in transit.
    CutOff { declared: usize, sent: Vec<u8> },
    /// Only the head, declaring `declared` bytes that never come: the agent
    /// must refuse on the declared length alone.
    DeclaredOnly { declared: usize },
    /// The body in 16 KiB chunks without a declared length.
    Chunked(Vec<u8>),
    /// These bytes, which are not an HTTP request at all.
    Raw(Vec<u8>),
}

struct Row {
    name: &'static str,
    method: &'static str,
    path: &'static str,
    headers: Vec<(&'static str, &'static str)>,
    wire: Wire,
    status: u16,
    /// Words the answer's message must hold.
    words: Vec<&'static str>,
    /// The `reason` label the refusal is counted under, if any.
    reason: Option<&'static str>,
}

fn row(
    name: &'static str,
    path: &'static str,
    headers: &[(&'static str, &'static str)],
    wire: Wire,
    status: u16,
    words: &[&'static str],
    reason: Option<&'static str>,
) -> Row {
    Row {
        name,
        method: "POST",
        path,
        headers: headers.to_vec(),
        wire,
        status,
        words: words.to_vec(),
        reason,
    }
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The error message, decoded from the answer's encoding.
    fn message(&self) -> String {
        let ct = self.header("content-type").unwrap_or_default();
        if ct.starts_with(PROTOBUF) {
            RpcStatus::decode(&self.body[..])
                .map(|s| s.message)
                .unwrap_or_else(|e| format!("<not a google.rpc.Status: {e}>"))
        } else if ct.starts_with(JSON) {
            serde_json::from_slice::<serde_json::Value>(&self.body)
                .ok()
                .and_then(|v| v["message"].as_str().map(str::to_string))
                .unwrap_or_else(|| String::from_utf8_lossy(&self.body).into_owned())
        } else {
            String::from_utf8_lossy(&self.body).into_owned()
        }
    }
}

/// Sends one request on a fresh connection and reads the whole answer.
fn exchange(addr: SocketAddr, r: &Row) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n",
        r.method, r.path
    );
    for (k, v) in &r.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    // A write may fail once the agent has answered and closed (an oversized
    // body); the answer is still there to read.
    match &r.wire {
        Wire::Body(b) => {
            head.push_str(&format!("Content-Length: {}\r\n\r\n", b.len()));
            let _ = s.write_all(head.as_bytes()).and_then(|_| s.write_all(b));
        }
        Wire::CutOff { declared, sent } => {
            head.push_str(&format!("Content-Length: {declared}\r\n\r\n"));
            let _ = s.write_all(head.as_bytes()).and_then(|_| s.write_all(sent));
            let _ = s.shutdown(Shutdown::Write);
        }
        Wire::DeclaredOnly { declared } => {
            head.push_str(&format!("Content-Length: {declared}\r\n\r\n"));
            let _ = s.write_all(head.as_bytes());
        }
        Wire::Chunked(b) => {
            head.push_str("Transfer-Encoding: chunked\r\n\r\n");
            let _ = s.write_all(head.as_bytes()).and_then(|_| {
                for c in b.chunks(16 << 10) {
                    write!(s, "{:x}\r\n", c.len())?;
                    s.write_all(c)?;
                    s.write_all(b"\r\n")?;
                }
                s.write_all(b"0\r\n\r\n")
            });
        }
        Wire::Raw(b) => {
            let _ = s.write_all(b);
            // Half-close only if the agent waits for more: a half-close
            // racing its answer lets hyper drop the connection unanswered
            // (it takes a closed read side for a client gone).
            s.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            let mut first = [0u8; 1];
            match s.peek(&mut first) {
                Ok(_) => {}
                Err(_) => {
                    let _ = s.shutdown(Shutdown::Write);
                }
            }
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        }
    }
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    parse_reply(&buf).unwrap_or_else(|| {
        panic!(
            "{}: no HTTP answer, got {:?}",
            r.name,
            String::from_utf8_lossy(&buf)
        )
    })
}

fn parse_reply(buf: &[u8]) -> Option<Reply> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&buf[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let rest = &buf[end + 4..];
    let len = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(rest.len())
        .min(rest.len());
    Some(Reply {
        status,
        headers,
        body: rest[..len].to_vec(),
    })
}

/// What the log holds, as the agent counts it and as `holdfast dump` reads it.
#[derive(Debug, PartialEq)]
struct LogState {
    next_sequence: Option<f64>,
    appended_events: Option<f64>,
    written_bytes: Option<f64>,
    dump: String,
}

fn log_state(a: &Agent) -> LogState {
    let out = holdfast(&["dump", "--config", a.config_arg()]);
    assert!(
        out.status.success(),
        "dump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    LogState {
        next_sequence: a.metric("holdfast_log_next_sequence"),
        appended_events: a.metric("holdfast_log_appended_events_total"),
        written_bytes: a.metric("holdfast_log_written_bytes_total"),
        dump: String::from_utf8(out.stdout).unwrap(),
    }
}

fn rejected(a: &Agent, reason: &str) -> f64 {
    a.metric(&format!(
        "holdfast_otlp_rejected_requests_total{{source=\"otlp\",reason=\"{reason}\"}}"
    ))
    .unwrap_or(0.0)
}

/// A logs request with one record per body in `bodies`.
fn logs_request(bodies: &[String]) -> Vec<u8> {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue};
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: bodies
                    .iter()
                    .map(|b| LogRecord {
                        severity_text: "INFO".into(),
                        body: Some(AnyValue {
                            value: Some(Value::StringValue(b.clone())),
                        }),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

/// A valid protobuf logs request whose severity text is not UTF-8: the
/// marker is the same length as its replacement, so every length prefix
/// stays right and only the string's bytes are wrong.
fn protobuf_with_invalid_utf8() -> Vec<u8> {
    let mut b = logs_request(&["@@@@".to_string()]);
    let at = b.windows(4).position(|w| w == b"@@@@").unwrap();
    b[at..at + 4].copy_from_slice(b"\xff\xfe\xc3\x28");
    b
}

/// A logs request whose record body is an array nested `depth` deep: valid
/// OTLP, but deeper than any decoder should recurse.
fn deeply_nested_protobuf(depth: usize) -> Vec<u8> {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, ArrayValue};
    let mut v = AnyValue {
        value: Some(Value::StringValue("bottom".into())),
    };
    for _ in 0..depth {
        v = AnyValue {
            value: Some(Value::ArrayValue(ArrayValue { values: vec![v] })),
        };
    }
    let mut req = ExportLogsServiceRequest::decode(&logs_request(&[String::new()])[..]).unwrap();
    req.resource_logs[0].scope_logs[0].log_records[0].body = Some(v);
    req.encode_to_vec()
}

/// 32 gzip members of 1 MiB of zeros (concatenated members are one valid
/// body): 32 MiB that arrive as ~32 KiB.
fn gzip_bomb() -> Vec<u8> {
    gzip(&vec![0u8; 1 << 20]).repeat(32)
}

fn rows() -> Vec<Row> {
    let pb = &[("Content-Type", PROTOBUF)][..];
    let json = &[("Content-Type", JSON)][..];
    let pb_gzip = &[("Content-Type", PROTOBUF), ("Content-Encoding", "gzip")][..];
    let logs_pb = fixture("logs.pb");
    let logs_json = fixture("logs.json");
    let logs_pb_gz = fixture("logs.pb.gz");
    // Over max_body_bytes (1 MiB) but under the 2 MiB the agent reads and
    // discards, so the client is still writing when it reads the answer.
    let oversized = vec![b'x'; 1536 << 10];
    let oversized_json = {
        let mut b =
            br#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":""#.to_vec();
        b.extend(std::iter::repeat_n(b'j', 1536 << 10));
        b.extend(br#""}}]}]}]}"#);
        b
    };
    // 300 records of 1 KiB: under max_body_bytes, over one 256 KiB segment.
    let too_many_events = logs_request(&vec!["e".repeat(1024); 300]);
    assert!(too_many_events.len() < 1 << 20 && too_many_events.len() > 256 << 10);

    vec![
        row(
            "malformed protobuf",
            "/v1/logs",
            pb,
            Wire::Body(b"\xff\xff\xff\xff\xff\xff".to_vec()),
            400,
            &["not a valid protobuf ExportLogsServiceRequest"],
            Some("decode"),
        ),
        row(
            "truncated protobuf",
            "/v1/logs",
            pb,
            Wire::Body(logs_pb[..logs_pb.len() - 7].to_vec()),
            400,
            &["not a valid protobuf ExportLogsServiceRequest"],
            Some("decode"),
        ),
        row(
            "truncated protobuf traces",
            "/v1/traces",
            pb,
            Wire::Body(fixture("traces.pb")[..100].to_vec()),
            400,
            &["not a valid protobuf ExportTraceServiceRequest"],
            Some("decode"),
        ),
        row(
            "protobuf string that is not UTF-8",
            "/v1/logs",
            pb,
            Wire::Body(protobuf_with_invalid_utf8()),
            400,
            &["not a valid protobuf", "UTF-8"],
            Some("decode"),
        ),
        row(
            "protobuf nested 1,000 deep",
            "/v1/logs",
            pb,
            Wire::Body(deeply_nested_protobuf(1000)),
            400,
            &["not a valid protobuf", "recursion limit"],
            Some("decode"),
        ),
        row(
            "JSON sent as protobuf",
            "/v1/logs",
            pb,
            Wire::Body(logs_json.clone()),
            400,
            &["not a valid protobuf"],
            Some("decode"),
        ),
        row(
            "oversized protobuf",
            "/v1/logs",
            pb,
            Wire::Body(oversized.clone()),
            413,
            &["max_body_bytes (1048576 bytes)"],
            Some("too_large"),
        ),
        row(
            "a declared 10 MiB body",
            "/v1/logs",
            pb,
            Wire::DeclaredOnly {
                declared: 10 << 20,
            },
            413,
            &["max_body_bytes (1048576 bytes)"],
            Some("too_large"),
        ),
        row(
            "a declared 10 MiB body that waits for 100-continue",
            "/v1/logs",
            &[("Content-Type", PROTOBUF), ("Expect", "100-continue")],
            Wire::DeclaredOnly {
                declared: 10 << 20,
            },
            413,
            &["max_body_bytes (1048576 bytes)"],
            Some("too_large"),
        ),
        row(
            "oversized body streamed without a length",
            "/v1/logs",
            pb,
            Wire::Chunked(oversized),
            413,
            &["max_body_bytes"],
            Some("too_large"),
        ),
        row(
            "events that do not fit in one segment",
            "/v1/logs",
            pb,
            Wire::Body(too_many_events),
            413,
            &["more than one log append can take", "send smaller batches"],
            Some("events_too_large"),
        ),
        row(
            "a body cut off in transit",
            "/v1/logs",
            pb,
            Wire::CutOff {
                declared: logs_pb.len(),
                sent: logs_pb[..logs_pb.len() / 2].to_vec(),
            },
            400,
            &[],
            Some("body_read"),
        ),
        row(
            "malformed JSON",
            "/v1/logs",
            json,
            Wire::Body(b"{\"resourceLogs\": [".to_vec()),
            400,
            &["not valid JSON"],
            Some("decode"),
        ),
        row(
            "truncated JSON",
            "/v1/logs",
            json,
            Wire::Body(logs_json[..logs_json.len() / 2].to_vec()),
            400,
            &["not valid JSON"],
            Some("decode"),
        ),
        row(
            "JSON that is not UTF-8",
            "/v1/logs",
            json,
            Wire::Body(
                b"{\"resourceLogs\":[{\"scopeLogs\":[{\"logRecords\":[{\"body\":{\"stringValue\":\"caf\xe9\"}}]}]}]}"
                    .to_vec(),
            ),
            400,
            &["not valid JSON"],
            Some("decode"),
        ),
        row(
            "a raw NUL byte inside a JSON string",
            "/v1/logs",
            json,
            Wire::Body(
                b"{\"resourceLogs\":[{\"scopeLogs\":[{\"logRecords\":[{\"body\":{\"stringValue\":\"a\0b\"}}]}]}]}"
                    .to_vec(),
            ),
            400,
            &["not valid JSON"],
            Some("decode"),
        ),
        row(
            "JSON with an unknown key",
            "/v1/logs",
            json,
            Wire::Body(br#"{"resourceLogs":[{"scopeLogs":[{"log_records":[{}]}]}]}"#.to_vec()),
            400,
            &["log_records", "logRecords"],
            Some("decode"),
        ),
        row(
            "JSON with a value of the wrong type",
            "/v1/logs",
            json,
            Wire::Body(
                br#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"severityNumber":{}}]}]}]}"#
                    .to_vec(),
            ),
            400,
            &["severityNumber"],
            Some("decode"),
        ),
        row(
            "an empty JSON body",
            "/v1/logs",
            json,
            Wire::Body(Vec::new()),
            400,
            &["not valid JSON"],
            Some("decode"),
        ),
        row(
            "JSON nested 100,000 deep",
            "/v1/logs",
            json,
            Wire::Body(
                [&b"{\"resourceLogs\":"[..], &b"[".repeat(100_000), &b"]".repeat(100_000), b"}"]
                    .concat(),
            ),
            400,
            &["not valid JSON", "recursion limit"],
            Some("decode"),
        ),
        row(
            "protobuf sent as JSON",
            "/v1/logs",
            json,
            Wire::Body(logs_pb.clone()),
            400,
            &["not valid JSON"],
            Some("decode"),
        ),
        row(
            "oversized JSON",
            "/v1/logs",
            json,
            Wire::Body(oversized_json),
            413,
            &["max_body_bytes (1048576 bytes)"],
            Some("too_large"),
        ),
        row(
            "a wrong content type",
            "/v1/logs",
            &[("Content-Type", "text/plain")],
            Wire::Body(logs_pb.clone()),
            415,
            &["application/x-protobuf", "application/json"],
            Some("content_type"),
        ),
        row(
            "a form content type",
            "/v1/traces",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            Wire::Body(b"a=b".to_vec()),
            415,
            &["application/x-protobuf"],
            Some("content_type"),
        ),
        row(
            "no content type",
            "/v1/logs",
            &[],
            Wire::Body(logs_pb.clone()),
            415,
            &["application/x-protobuf"],
            Some("content_type"),
        ),
        row(
            "an unsupported content encoding",
            "/v1/logs",
            &[("Content-Type", PROTOBUF), ("Content-Encoding", "zstd")],
            Wire::Body(logs_pb.clone()),
            415,
            &["\"zstd\""],
            Some("content_encoding"),
        ),
        row(
            "a gzip bomb",
            "/v1/logs",
            pb_gzip,
            Wire::Body(gzip_bomb()),
            413,
            &["decompresses to more than"],
            Some("too_large"),
        ),
        row(
            "a gzip bomb of JSON",
            "/v1/logs",
            &[("Content-Type", JSON), ("Content-Encoding", "gzip")],
            Wire::Body(gzip_bomb()),
            413,
            &["decompresses to more than"],
            Some("too_large"),
        ),
        row(
            "a deflate bomb",
            "/v1/logs",
            &[("Content-Type", PROTOBUF), ("Content-Encoding", "deflate")],
            // zlib streams cannot be concatenated like gzip members; 4 MiB
            // in ~4 KiB is bomb enough for a 1 MiB limit.
            Wire::Body({
                let mut e =
                    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
                e.write_all(&vec![0u8; 4 << 20]).unwrap();
                e.finish().unwrap()
            }),
            413,
            &["decompresses to more than"],
            Some("too_large"),
        ),
        row(
            "deflate declared, garbage sent",
            "/v1/logs",
            &[("Content-Type", PROTOBUF), ("Content-Encoding", "deflate")],
            Wire::Body(b"\xff\xfe\xfd\xfc not deflate".to_vec()),
            400,
            &["deflate"],
            Some("decompress"),
        ),
        row(
            "gzip declared, plain protobuf sent",
            "/v1/logs",
            pb_gzip,
            Wire::Body(logs_pb.clone()),
            400,
            &["not valid gzip data"],
            Some("decompress"),
        ),
        row(
            "truncated gzip",
            "/v1/logs",
            pb_gzip,
            Wire::Body(logs_pb_gz[..logs_pb_gz.len() - 10].to_vec()),
            400,
            &["gzip"],
            Some("decompress"),
        ),
        row(
            "valid gzip of a malformed protobuf",
            "/v1/logs",
            pb_gzip,
            Wire::Body(gzip(b"\xff\xff\xff\xff")),
            400,
            &["not a valid protobuf"],
            Some("decode"),
        ),
        row(
            "a logs body sent to /v1/traces",
            "/v1/traces",
            pb,
            Wire::Body(logs_pb.clone()),
            400,
            &["not a valid protobuf ExportTraceServiceRequest"],
            Some("decode"),
        ),
        row(
            "a metrics body sent to /v1/logs",
            "/v1/logs",
            pb,
            Wire::Body(fixture("metrics.pb")),
            400,
            &["not a valid protobuf ExportLogsServiceRequest"],
            Some("decode"),
        ),
        row(
            "a JSON traces body sent to /v1/metrics",
            "/v1/metrics",
            json,
            Wire::Body(fixture("traces.json")),
            400,
            &["unknown key \"resourceSpans\"", "did you mean \"resourceMetrics\""],
            Some("decode"),
        ),
        row(
            "a wrong path",
            "/v1/log",
            pb,
            Wire::Body(logs_pb.clone()),
            404,
            &["/v1/logs, /v1/traces or /v1/metrics"],
            Some("not_found"),
        ),
        Row {
            method: "PUT",
            ..row(
                "a wrong method",
                "/v1/logs",
                pb,
                Wire::Body(logs_pb.clone()),
                405,
                &["POST"],
                Some("method"),
            )
        },
        row(
            "two different Content-Lengths",
            "/v1/logs",
            &[],
            Wire::Raw(
                b"POST /v1/logs HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-protobuf\r\n\
                  Content-Length: 4\r\nContent-Length: 40\r\n\r\n\xff\xff\xff\xff"
                    .to_vec(),
            ),
            400,
            &[],
            None,
        ),
        row(
            "Content-Length and chunked together",
            "/v1/logs",
            &[],
            Wire::Raw(
                b"POST /v1/logs HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-protobuf\r\n\
                  Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n\xff\xff\xff\xff\r\n0\r\n\r\n"
                    .to_vec(),
            ),
            400,
            &[],
            None,
        ),
        row(
            "a negative Content-Length",
            "/v1/logs",
            &[],
            Wire::Raw(
                b"POST /v1/logs HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-protobuf\r\n\
                  Content-Length: -1\r\n\r\n"
                    .to_vec(),
            ),
            400,
            &[],
            None,
        ),
        row(
            "broken chunked framing",
            "/v1/logs",
            &[],
            Wire::Raw(
                b"POST /v1/logs HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-protobuf\r\n\
                  Transfer-Encoding: chunked\r\n\r\nzz\r\n\xff\xff\r\n0\r\n\r\n"
                    .to_vec(),
            ),
            400,
            &[],
            None,
        ),
        row(
            "bytes that are not HTTP",
            "/v1/logs",
            &[],
            Wire::Raw(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n".to_vec()),
            400,
            &[],
            None,
        ),
        Row {
            headers: vec![("Content-Type", PROTOBUF), ("X-Padding", huge_header())],
            ..row(
                "a 1 MiB header",
                "/v1/logs",
                pb,
                Wire::Body(logs_pb.clone()),
                431,
                &[],
                None,
            )
        },
    ]
}

fn huge_header() -> &'static str {
    Box::leak("h".repeat(1 << 20).into_boxed_str())
}

#[test]
fn every_bad_request_is_refused_clearly_and_leaves_the_log_as_it_was() {
    let mut a = Agent::new("");
    let otlp: SocketAddr = format!("127.0.0.1:{}", daemon::free_port())
        .parse()
        .unwrap();
    let body = format!(
        "[log]\nsegment_size = \"256KiB\"\nmax_bytes = \"16MiB\"\n\n\
         [sources.otlp]\ntype = \"otlp_http\"\nlisten = \"{otlp}\"\nmax_body_bytes = \"1MiB\"\n"
    );
    let text = std::fs::read_to_string(&a.config).unwrap() + &body;
    std::fs::write(&a.config, text).unwrap();
    a.start();
    a.wait_ready();

    // One good request first, so "unchanged" means more than "still empty".
    let good = row(
        "the captured SDK request",
        "/v1/logs",
        &[("Content-Type", PROTOBUF)],
        Wire::Body(fixture("logs.pb")),
        200,
        &[],
        None,
    );
    assert_eq!(exchange(otlp, &good).status, 200);
    let before = log_state(&a);
    assert_eq!(before.dump.lines().count(), 1, "{}", before.dump);
    assert_eq!(before.next_sequence, Some(1.0));

    let mut failures = Vec::new();
    for r in rows() {
        let counted = r.reason.map(|reason| rejected(&a, reason));
        let reply = exchange(otlp, &r);
        let message = reply.message();
        if reply.status != r.status {
            failures.push(format!(
                "{}: status {} (want {}): {message}",
                r.name, reply.status, r.status
            ));
        }
        for w in &r.words {
            if !message.contains(w) {
                failures.push(format!("{}: message {message:?} lacks {w:?}", r.name));
            }
        }
        if let (Some(reason), Some(n)) = (r.reason, counted) {
            let now = rejected(&a, reason);
            if now != n + 1.0 {
                failures.push(format!(
                    "{}: rejected_requests_total{{reason={reason:?}}} went {n} -> {now}",
                    r.name
                ));
            }
        }
        match http_get(a.api, "/readyz") {
            Some((200, _)) => {}
            other => failures.push(format!("{}: /readyz answered {other:?}", r.name)),
        }
        let after = log_state(&a);
        if after != before {
            failures.push(format!(
                "{}: the log changed: {before:?} -> {after:?}",
                r.name
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} row(s) failed:\n{}\n\nstderr:\n{}",
        failures.len(),
        failures.join("\n"),
        a.stderr()
    );

    // The agent took all of that and still takes good data.
    assert_eq!(exchange(otlp, &good).status, 200);
    let after = log_state(&a);
    assert_eq!(after.next_sequence, Some(2.0));
    assert_eq!(after.dump.lines().count(), 2);
    assert!(a.try_exit().is_none(), "the agent is still running");
    assert!(a.stop().success(), "{}", a.stderr());
}

/// One line written to a tailed file and the event it must become.
struct LineRow {
    name: &'static str,
    bytes: Vec<u8>,
    body: String,
    /// Attributes besides `log.file.path` and `log.file.name`.
    marks: Vec<(&'static str, String)>,
}

fn line(name: &'static str, bytes: &[u8], body: &str, marks: &[(&'static str, &str)]) -> LineRow {
    LineRow {
        name,
        bytes: bytes.to_vec(),
        body: body.to_string(),
        marks: marks.iter().map(|(k, v)| (*k, v.to_string())).collect(),
    }
}

/// An attribute value from the OTLP/JSON mapping as a plain string.
fn attr_value(v: &serde_json::Value) -> String {
    let (_, inner) = v
        .as_object()
        .and_then(|o| o.iter().next())
        .unwrap_or_else(|| panic!("attribute value {v}"));
    match inner {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

const TEN_MIB: usize = 10 << 20;
const MAX_LINE: usize = 256 << 10;

fn line_rows() -> Vec<LineRow> {
    let ten_mib_ascii = vec![b'x'; TEN_MIB];
    // 3-byte characters: 256 KiB is not a multiple of 3, so the cut must
    // step back to a character boundary.
    let ten_mib_euro = "€".repeat(TEN_MIB / 3);
    let euro_kept = "€".repeat(MAX_LINE / 3);
    vec![
        line("a plain line", b"first plain line", "first plain line", &[]),
        line(
            "invalid UTF-8",
            b"caf\xe9 \xff\xfe end",
            "caf\u{fffd} \u{fffd}\u{fffd} end",
            &[("log.record.invalid_utf8", "true")],
        ),
        line(
            "a line after invalid UTF-8",
            b"second plain line",
            "second plain line",
            &[],
        ),
        line(
            "NUL bytes inside a line",
            b"nul\0in\0the middle",
            "nul\0in\0the middle",
            &[],
        ),
        line("only NUL bytes", b"\0\0\0", "\0\0\0", &[]),
        line(
            "a line after NUL bytes",
            b"third plain line",
            "third plain line",
            &[],
        ),
        line(
            "a 10 MiB line",
            &ten_mib_ascii,
            std::str::from_utf8(&ten_mib_ascii[..MAX_LINE]).unwrap(),
            &[
                ("log.record.truncated", "true"),
                ("log.record.original_bytes", &TEN_MIB.to_string()),
            ],
        ),
        line(
            "a line after 10 MiB",
            b"fourth plain line",
            "fourth plain line",
            &[],
        ),
        line(
            "a 10 MiB line of 3-byte characters",
            ten_mib_euro.as_bytes(),
            &euro_kept,
            &[
                ("log.record.truncated", "true"),
                ("log.record.original_bytes", &ten_mib_euro.len().to_string()),
            ],
        ),
        line(
            "a long line that is also not UTF-8",
            &[&b"\xff"[..], &vec![b'y'; MAX_LINE * 2]].concat(),
            &format!("\u{fffd}{}", "y".repeat(MAX_LINE - 1)),
            &[
                ("log.record.truncated", "true"),
                ("log.record.original_bytes", &(MAX_LINE * 2 + 1).to_string()),
                ("log.record.invalid_utf8", "true"),
            ],
        ),
        line(
            "a CRLF line",
            b"fifth plain line\r",
            "fifth plain line",
            &[],
        ),
    ]
}

#[test]
fn bad_bytes_in_files_arrive_marked_and_their_neighbours_intact() {
    let mut a = Agent::new("");
    let app = a.path("app.log");
    let body = format!(
        "[log]\nsegment_size = \"4MiB\"\nmax_bytes = \"64MiB\"\n\n\
         [sources.app]\ntype = \"file\"\ninclude = [\"{}\"]\nstart_at = \"beginning\"\n\
         line_idle_timeout = \"200ms\"\n",
        app.display()
    );
    let text = std::fs::read_to_string(&a.config).unwrap() + &body;
    std::fs::write(&a.config, text).unwrap();

    let rows = line_rows();
    let mut f = std::fs::File::create(&app).unwrap();
    for r in &rows {
        f.write_all(&r.bytes).unwrap();
        f.write_all(b"\n").unwrap();
    }
    // And a last line without its newline, emitted once the file is quiet.
    f.write_all(b"last line, no newline").unwrap();
    f.sync_all().unwrap();

    a.start();
    a.wait_ready();
    let want = rows.len() + 1;
    wait_for(
        &format!("{want} events from the file"),
        Duration::from_secs(60),
        || (a.metric("holdfast_source_events_total{source=\"app\"}")? >= want as f64).then_some(()),
    );
    assert_eq!(http_get(a.api, "/readyz").unwrap().0, 200);
    for (metric, n) in [
        ("holdfast_file_source_truncated_lines_total", 3.0),
        ("holdfast_file_source_invalid_utf8_lines_total", 2.0),
        ("holdfast_file_source_lines_total", want as f64),
    ] {
        let series = format!("{metric}{{source=\"app\"}}");
        assert_eq!(a.metric(&series), Some(n), "{series}");
    }
    let dropped = "holdfast_dropped_events_total{source=\"app\",reason=\"too_large\"}";
    assert_eq!(
        a.metric(dropped),
        Some(0.0),
        "nothing dropped:\n{}",
        a.metrics()
    );

    let out = holdfast(&["dump", "--config", a.config_arg()]);
    assert!(out.status.success());
    let events: Vec<serde_json::Value> = std::str::from_utf8(&out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), want, "one event per line, none twice");
    for (r, e) in rows.iter().zip(&events) {
        let got = e["record"]["body"]["stringValue"].as_str().unwrap();
        assert!(
            got == r.body,
            "{}: body of {} bytes differs from the {} expected (starts {:?})",
            r.name,
            got.len(),
            r.body.len(),
            &got.chars().take(40).collect::<String>()
        );
        let mut attrs: Vec<(String, String)> = e["record"]["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|kv| {
                (
                    kv["key"].as_str().unwrap().to_string(),
                    attr_value(&kv["value"]),
                )
            })
            .filter(|(k, _)| !k.starts_with("log.file."))
            .collect();
        attrs.sort();
        let mut marks: Vec<(String, String)> = r
            .marks
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        marks.sort();
        assert_eq!(attrs, marks, "{}: marks", r.name);
    }
    assert_eq!(
        events[want - 1]["record"]["body"]["stringValue"],
        "last line, no newline"
    );
    assert!(a.stop().success(), "{}", a.stderr());
}

/// (body, attributes other than `log.file.*`) of every event in the log.
fn file_events(a: &Agent) -> Vec<(String, Vec<(String, String)>)> {
    let out = holdfast(&["dump", "--config", a.config_arg()]);
    assert!(out.status.success());
    std::str::from_utf8(&out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let e: serde_json::Value = serde_json::from_str(l).unwrap();
            let body = e["record"]["body"]["stringValue"]
                .as_str()
                .unwrap()
                .to_string();
            let mut attrs: Vec<(String, String)> = e["record"]["attributes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|kv| {
                    (
                        kv["key"].as_str().unwrap().to_string(),
                        attr_value(&kv["value"]),
                    )
                })
                .filter(|(k, _)| !k.starts_with("log.file."))
                .collect();
            attrs.sort();
            (body, attrs)
        })
        .collect()
}

/// A line that never ends: memory stays bounded (the unfinished line is cut
/// at `max_line_bytes`); once the file is quiet for `line_idle_timeout` what
/// was written goes out as one truncated event, and what the writer adds
/// later starts a new one. The lines around it arrive intact.
#[test]
fn an_endless_line_goes_out_cut_and_the_file_goes_on() {
    let mut a = Agent::new("");
    let app = a.path("app.log");
    let body = format!(
        "[log]\nsegment_size = \"4MiB\"\nmax_bytes = \"64MiB\"\n\n\
         [sources.app]\ntype = \"file\"\ninclude = [\"{}\"]\nstart_at = \"beginning\"\n\
         line_idle_timeout = \"1s\"\n",
        app.display()
    );
    let text = std::fs::read_to_string(&a.config).unwrap() + &body;
    std::fs::write(&a.config, text).unwrap();
    std::fs::write(&app, b"before the endless line\n").unwrap();
    a.start();
    a.wait_ready();

    let mut f = std::fs::OpenOptions::new().append(true).open(&app).unwrap();
    // One write: the idle timeout must not fall inside it.
    f.write_all(&vec![b'z'; TEN_MIB]).unwrap();
    let events = |n: f64| {
        wait_for(
            &format!("{n} events from the file"),
            Duration::from_secs(60),
            || (a.metric("holdfast_source_events_total{source=\"app\"}")? >= n).then_some(()),
        )
    };
    events(2.0);
    f.write_all(b"and more, then its end\nafter the endless line\n")
        .unwrap();
    events(4.0);
    assert_eq!(http_get(a.api, "/readyz").unwrap().0, 200);
    assert!(a.stop().success(), "{}", a.stderr());

    let cut = |n: usize| {
        vec![
            ("log.record.original_bytes".to_string(), n.to_string()),
            ("log.record.truncated".to_string(), "true".to_string()),
        ]
    };
    assert_eq!(
        file_events(&a),
        vec![
            ("before the endless line".to_string(), vec![]),
            ("z".repeat(MAX_LINE), cut(TEN_MIB)),
            ("and more, then its end".to_string(), vec![]),
            ("after the endless line".to_string(), vec![]),
        ]
    );
}

/// Things a glob can match that are not log files: a FIFO (opening it
/// would block until a writer came), a directory, and a file whose name is
/// not UTF-8. The first two are left alone, the third is read (its path
/// attribute with U+FFFD), and a real file beside them is followed as usual.
#[test]
fn a_glob_matching_a_fifo_a_directory_and_a_non_utf8_name_goes_on() {
    use std::os::unix::ffi::OsStrExt;
    let mut a = Agent::new("");
    let logs = a.path("logs");
    std::fs::create_dir_all(logs.join("dir.log")).unwrap();
    let fifo = logs.join("fifo.log");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let odd = logs.join(std::ffi::OsStr::from_bytes(b"caf\xe9.log"));
    std::fs::write(&odd, b"from a file with an odd name\n").unwrap();
    let app = logs.join("app.log");
    std::fs::write(&app, b"first line\n").unwrap();
    let body = format!(
        "[sources.app]\ntype = \"file\"\ninclude = [\"{}/*.log\"]\nstart_at = \"beginning\"\n\
         scan_interval = \"200ms\"\n",
        logs.display()
    );
    let text = std::fs::read_to_string(&a.config).unwrap() + &body;
    std::fs::write(&a.config, text).unwrap();
    a.start();
    a.wait_ready();
    let events = |n: f64| {
        wait_for(
            &format!("{n} events from the files"),
            Duration::from_secs(30),
            || (a.metric("holdfast_source_events_total{source=\"app\"}")? >= n).then_some(()),
        )
    };
    events(2.0);
    let mut f = std::fs::OpenOptions::new().append(true).open(&app).unwrap();
    f.write_all(b"second line\n").unwrap();
    events(3.0);
    assert_eq!(http_get(a.api, "/readyz").unwrap().0, 200);
    assert_eq!(
        a.metric("holdfast_file_source_files_watched{source=\"app\"}"),
        Some(2.0)
    );
    assert!(a.stop().success(), "{}", a.stderr());

    let out = holdfast(&["dump", "--config", a.config_arg()]);
    let mut got: Vec<(String, String)> = std::str::from_utf8(&out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let e: serde_json::Value = serde_json::from_str(l).unwrap();
            let path = e["record"]["attributes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|kv| kv["key"] == "log.file.name")
                .map(|kv| attr_value(&kv["value"]))
                .unwrap();
            (
                path,
                e["record"]["body"]["stringValue"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("app.log", "first line"),
            ("app.log", "second line"),
            ("caf\u{fffd}.log", "from a file with an odd name"),
        ]
        .map(|(p, b)| (p.to_string(), b.to_string()))
    );
}
