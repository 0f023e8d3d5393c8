//! The `otlp_http` source over real HTTP: captured SDK bodies and the
//! official OTLP/JSON examples land whole and round-trip; every field of
//! every signal survives; every error class gets its status and message and
//! leaves the log untouched; mutated JSON is refused or stored whole, never
//! half; a full log pushes back with 503 and Retry-After; draining and stop
//! finish what is in flight; TLS, bearer tokens, bounds and metrics.

mod otlp_http_common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use holdfast::api::Phase;
use holdfast::event::{Envelope, Record, Signal};
use holdfast::seglog::{FsyncPolicy, WhenFull};
use holdfast::sources::otlp_http::metrics::{OtlpSignalLabels, OtlpSourceMetrics};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value::Value, AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    exemplar, exponential_histogram_data_point::Buckets, metric::Data, number_data_point,
    summary_data_point::ValueAtQuantile, Exemplar, ExponentialHistogram,
    ExponentialHistogramDataPoint, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, Summary, SummaryDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    span, status, ResourceSpans, ScopeSpans, Span, Status,
};
use otlp_http_common::*;
use prost::Message;
use serde_json::Value as JsonValue;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

fn gunzip(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(b)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// Decodes a body independently of the source: prost for protobuf, and
/// opentelemetry-proto's own serde for JSON (lenient, but right on valid
/// input), so a round trip is compared with a second opinion.
fn reference(signal: Signal, json: bool, body: &[u8]) -> (Vec<u8>, usize) {
    macro_rules! both {
        ($t:ty, $count:expr) => {{
            let req: $t = if json {
                serde_json::from_slice(body).expect("reference JSON decode")
            } else {
                <$t>::decode(body).expect("reference protobuf decode")
            };
            let n = ($count)(&req);
            (req.encode_to_vec(), n)
        }};
    }
    match signal {
        Signal::Logs => both!(ExportLogsServiceRequest, |r: &ExportLogsServiceRequest| r
            .resource_logs
            .iter()
            .flat_map(|r| &r.scope_logs)
            .map(|s| s.log_records.len())
            .sum::<usize>()),
        Signal::Traces => both!(
            ExportTraceServiceRequest,
            |r: &ExportTraceServiceRequest| r
                .resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .map(|s| s.spans.len())
                .sum::<usize>()
        ),
        Signal::Metrics => both!(
            ExportMetricsServiceRequest,
            |r: &ExportMetricsServiceRequest| r
                .resource_metrics
                .iter()
                .flat_map(|r| &r.scope_metrics)
                .flat_map(|s| &s.metrics)
                .map(holdfast::sources::otlp_http::data_points)
                .sum::<usize>()
        ),
    }
}

fn rebuilt(signal: Signal, envs: &[Envelope]) -> Vec<u8> {
    match signal {
        Signal::Logs => rebuild_logs(envs).encode_to_vec(),
        Signal::Traces => rebuild_traces(envs).encode_to_vec(),
        Signal::Metrics => rebuild_metrics(envs).encode_to_vec(),
    }
}

fn path_of(signal: Signal) -> &'static str {
    match signal {
        Signal::Logs => "/v1/logs",
        Signal::Traces => "/v1/traces",
        Signal::Metrics => "/v1/metrics",
    }
}

/// Posts a fixture and checks it landed whole: one event per record, each
/// with its own id, and the envelopes rebuild the request exactly.
async fn post_fixture(a: &Agent, c: &mut Client, name: &str, signal: Signal) -> Vec<Envelope> {
    let before = a.next_seq();
    let t0 = now_nanos();
    let r = c
        .post(path_of(signal), &fixture_headers(name), fixture(name))
        .await;
    assert_eq!(r.status, 200, "{name}: {}", r.message());
    if name.contains(".json") {
        assert_eq!(r.content_type(), JSON, "{name}");
        assert_eq!(&r.body[..], b"{}", "{name}: an empty ExportServiceResponse");
    } else {
        assert_eq!(r.content_type(), PROTOBUF, "{name}");
        assert!(r.body.is_empty(), "{name}: an empty ExportServiceResponse");
    }
    let envs = a.events_since(before);
    let raw = fixture(name);
    let body = if name.ends_with(".gz") {
        gunzip(&raw)
    } else {
        raw
    };
    let (want, count) = reference(signal, name.contains(".json"), &body);
    assert!(count > 0, "{name} holds records");
    assert_eq!(envs.len(), count, "{name}: one event per record");
    assert_eq!(rebuilt(signal, &envs), want, "{name}: round trip");
    for e in &envs {
        assert_eq!(e.source, SOURCE);
        assert_eq!(e.signal(), Some(signal));
        assert!(e.observed_time_unix_nano >= t0 && e.observed_time_unix_nano <= now_nanos());
    }
    envs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_captures_land_whole_and_round_trip() {
    let a = start().await;
    let mut c = a.client().await;
    let mut ids = std::collections::HashSet::new();
    for (name, signal) in [
        ("logs", Signal::Logs),
        ("traces", Signal::Traces),
        ("metrics", Signal::Metrics),
    ] {
        for ext in ["pb", "pb.gz", "json", "json.gz"] {
            for e in post_fixture(&a, &mut c, &format!("{name}.{ext}"), signal).await {
                assert!(ids.insert(e.id.clone()), "ids are unique");
            }
        }
    }
    // 4 × (1 log record + 2 spans + 2 metric points)
    assert_eq!(ids.len(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_captured_log_record_field_by_field() {
    let a = start().await;
    let mut c = a.client().await;
    for name in ["logs.pb", "logs.json"] {
        let envs = post_fixture(&a, &mut c, name, Signal::Logs).await;
        let e = &envs[0];
        let res = e.resource.as_ref().unwrap();
        assert_eq!(res.attributes.len(), 6);
        assert_eq!(
            string_attr(&res.attributes, "service.name").unwrap(),
            "edge-test"
        );
        assert_eq!(string_attr(&res.attributes, "host.name").unwrap(), "dev1");
        assert_eq!(
            string_attr(&res.attributes, "telemetry.sdk.version").unwrap(),
            "1.45.2"
        );
        assert_eq!(e.scope.as_ref().unwrap().name, "app");
        let Some(Record::Log(r)) = &e.record else {
            panic!("not a log")
        };
        assert_eq!(r.severity_number, 13);
        assert_eq!(r.severity_text, "WARN");
        assert_eq!(
            r.body.as_ref().unwrap().value,
            Some(Value::StringValue("disk /dev/sda1 almost full".into()))
        );
        assert_eq!(attr(&r.attributes, "pct"), Some(&Value::DoubleValue(93.5)));
        assert_eq!(
            attr(&r.attributes, "code.line.number"),
            Some(&Value::IntValue(21))
        );
        assert_eq!(r.flags, 3);
        assert_eq!(r.trace_id.len(), 16);
        assert_eq!(r.span_id.len(), 8);
        assert!(r.time_unix_nano > 1_700_000_000_000_000_000);
        assert!(r.observed_time_unix_nano >= r.time_unix_nano);
    }
    // The JSON capture's ids, as the exporter wrote them.
    let envs = a.events_since(1);
    let Some(Record::Log(r)) = &envs[0].record else {
        panic!()
    };
    assert_eq!(hex(&r.trace_id), "a55e88b3237d1f27a7a35d077146e0ed");
    assert_eq!(hex(&r.span_id), "f093af8b9938414f");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_json_examples_round_trip() {
    let a = start().await;
    let mut c = a.client().await;
    for (name, signal, records) in [
        ("examples/logs.json", Signal::Logs, 1),
        ("examples/events.json", Signal::Logs, 1),
        ("examples/trace.json", Signal::Traces, 1),
        ("examples/metrics.json", Signal::Metrics, 4),
    ] {
        let envs = post_fixture(&a, &mut c, name, signal).await;
        assert_eq!(envs.len(), records, "{name}");
    }
    let all: Vec<Envelope> = a.events().into_iter().map(|(_, e)| e).collect();
    let Some(Record::Log(ev)) = &all[1].record else {
        panic!()
    };
    assert_eq!(ev.event_name, "browser.page_view");
    // The example's ids are upper-case hex.
    let Some(Record::Log(l)) = &all[0].record else {
        panic!()
    };
    assert_eq!(hex(&l.trace_id), "5b8efff798038103d269b633813fc60c");
    let kinds: Vec<&str> = all[3..]
        .iter()
        .map(|e| match &e.record {
            Some(Record::Metric(m)) => match m.data.as_ref().unwrap() {
                Data::Sum(_) => "sum",
                Data::Gauge(_) => "gauge",
                Data::Histogram(_) => "histogram",
                Data::ExponentialHistogram(_) => "exponential",
                Data::Summary(_) => "summary",
            },
            _ => panic!(),
        })
        .collect();
    assert_eq!(kinds, ["sum", "gauge", "histogram", "exponential"]);
}

// ---------------------------------------------------------------------------
// Every field of every signal

fn s(v: &str) -> Value {
    Value::StringValue(v.into())
}

fn every_value() -> Vec<KeyValue> {
    vec![
        kv("str", s("text ünïcode")),
        kv("bool", Value::BoolValue(true)),
        kv("int", Value::IntValue(i64::MIN)),
        kv("big", Value::IntValue(i64::MAX)),
        kv("double", Value::DoubleValue(-0.125)),
        kv("bytes", Value::BytesValue(vec![0, 1, 2, 254, 255])),
        kv(
            "array",
            Value::ArrayValue(ArrayValue {
                values: vec![
                    AnyValue {
                        value: Some(s("a")),
                    },
                    AnyValue {
                        value: Some(Value::IntValue(2)),
                    },
                    AnyValue { value: None },
                ],
            }),
        ),
        kv(
            "kvlist",
            Value::KvlistValue(KeyValueList {
                values: vec![
                    kv("nested", Value::BoolValue(false)),
                    kv(
                        "deeper",
                        Value::KvlistValue(KeyValueList {
                            values: vec![kv("x", Value::DoubleValue(1e300))],
                        }),
                    ),
                ],
            }),
        ),
        KeyValue {
            key: "empty".into(),
            value: Some(AnyValue { value: None }),
            ..Default::default()
        },
    ]
}

fn resource(n: u32) -> Resource {
    Resource {
        attributes: vec![
            kv("service.name", s(&format!("svc{n}"))),
            kv("n", Value::IntValue(n as i64)),
        ],
        dropped_attributes_count: n,
        entity_refs: vec![EntityRef {
            schema_url: "https://opentelemetry.io/schemas/1.26.0".into(),
            r#type: "service".into(),
            id_keys: vec!["service.name".into()],
            description_keys: vec!["n".into()],
        }],
    }
}

fn scope(n: u32) -> InstrumentationScope {
    InstrumentationScope {
        name: format!("lib{n}"),
        version: "1.0.0".into(),
        attributes: vec![kv("scope.attr", s("v"))],
        dropped_attributes_count: 2,
    }
}

const TRACE: [u8; 16] = [
    0x5b, 0x8e, 0xff, 0xf7, 0x98, 0x03, 0x81, 0x03, 0xd2, 0x69, 0xb6, 0x33, 0x81, 0x3f, 0xc6, 0x0c,
];
const SPAN: [u8; 8] = [0xee, 0xe1, 0x9b, 0x7e, 0xc3, 0xc1, 0xb1, 0x74];

fn rich_logs() -> ExportLogsServiceRequest {
    let rec = |i: u64| LogRecord {
        time_unix_nano: 1_700_000_000_000_000_000 + i,
        observed_time_unix_nano: u64::MAX - i,
        severity_number: 17,
        severity_text: "ERROR".into(),
        body: Some(AnyValue {
            value: Some(Value::KvlistValue(KeyValueList {
                values: every_value(),
            })),
        }),
        attributes: every_value(),
        dropped_attributes_count: 3,
        flags: 0x101,
        trace_id: TRACE.to_vec(),
        span_id: SPAN.to_vec(),
        event_name: "app.event".into(),
    };
    ExportLogsServiceRequest {
        resource_logs: vec![
            ResourceLogs {
                resource: Some(resource(1)),
                schema_url: "https://opentelemetry.io/schemas/1.21.0".into(),
                scope_logs: vec![
                    ScopeLogs {
                        scope: Some(scope(1)),
                        schema_url: "https://scope/1".into(),
                        log_records: vec![rec(0), rec(1)],
                    },
                    ScopeLogs {
                        scope: Some(scope(2)),
                        schema_url: String::new(),
                        log_records: vec![LogRecord::default()],
                    },
                ],
            },
            ResourceLogs {
                resource: None,
                schema_url: String::new(),
                scope_logs: vec![ScopeLogs {
                    scope: None,
                    schema_url: String::new(),
                    log_records: vec![rec(2)],
                }],
            },
        ],
    }
}

fn rich_traces() -> ExportTraceServiceRequest {
    let span = |i: u8, parent: bool| Span {
        trace_id: TRACE.to_vec(),
        span_id: vec![i; 8],
        trace_state: "vendor=x".into(),
        parent_span_id: if parent { SPAN.to_vec() } else { vec![] },
        flags: 0x301,
        name: format!("span {i}"),
        kind: span::SpanKind::Server as i32,
        start_time_unix_nano: 1_000 + i as u64,
        end_time_unix_nano: u64::MAX,
        attributes: every_value(),
        dropped_attributes_count: 1,
        events: vec![span::Event {
            time_unix_nano: 5,
            name: "exception".into(),
            attributes: vec![kv("exception.message", s("boom"))],
            dropped_attributes_count: 4,
        }],
        dropped_events_count: 2,
        links: vec![span::Link {
            trace_id: [7; 16].to_vec(),
            span_id: [8; 8].to_vec(),
            trace_state: "a=b".into(),
            attributes: vec![kv("link", Value::BoolValue(true))],
            dropped_attributes_count: 9,
            flags: 0x100,
        }],
        dropped_links_count: 3,
        status: Some(Status {
            message: "deadline exceeded".into(),
            code: status::StatusCode::Error as i32,
        }),
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(resource(2)),
            schema_url: "https://r".into(),
            scope_spans: vec![ScopeSpans {
                scope: Some(scope(3)),
                schema_url: "https://s".into(),
                spans: vec![span(1, false), span(2, true), Span::default()],
            }],
        }],
    }
}

fn exemplars() -> Vec<Exemplar> {
    vec![
        Exemplar {
            filtered_attributes: vec![kv("user", s("u1"))],
            time_unix_nano: 77,
            span_id: SPAN.to_vec(),
            trace_id: TRACE.to_vec(),
            value: Some(exemplar::Value::AsDouble(1.5)),
        },
        Exemplar {
            value: Some(exemplar::Value::AsInt(-3)),
            ..Default::default()
        },
    ]
}

fn number(i: i64) -> NumberDataPoint {
    NumberDataPoint {
        attributes: vec![kv("i", Value::IntValue(i))],
        start_time_unix_nano: 10,
        time_unix_nano: 20 + i as u64,
        exemplars: exemplars(),
        flags: 1,
        value: Some(if i % 2 == 0 {
            number_data_point::Value::AsInt(i)
        } else {
            number_data_point::Value::AsDouble(i as f64 + 0.5)
        }),
    }
}

fn rich_metrics() -> ExportMetricsServiceRequest {
    let metric = |name: &str, data: Data| Metric {
        name: name.into(),
        description: format!("{name} described"),
        unit: "ms".into(),
        metadata: vec![kv("meta", s("data"))],
        data: Some(data),
    };
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(resource(3)),
            schema_url: "https://r".into(),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(scope(4)),
                schema_url: "https://s".into(),
                metrics: vec![
                    metric(
                        "gauge",
                        Data::Gauge(Gauge {
                            data_points: vec![number(1), number(2), number(3)],
                        }),
                    ),
                    metric(
                        "sum",
                        Data::Sum(Sum {
                            data_points: vec![number(4), number(5)],
                            aggregation_temporality: 1,
                            is_monotonic: true,
                        }),
                    ),
                    metric(
                        "histogram",
                        Data::Histogram(Histogram {
                            data_points: vec![
                                HistogramDataPoint {
                                    attributes: every_value(),
                                    start_time_unix_nano: 1,
                                    time_unix_nano: 2,
                                    count: 6,
                                    sum: Some(12.25),
                                    bucket_counts: vec![1, 2, 3],
                                    explicit_bounds: vec![1.0, 10.0],
                                    exemplars: exemplars(),
                                    flags: 0,
                                    min: Some(-1.0),
                                    max: Some(f64::MAX),
                                },
                                HistogramDataPoint::default(),
                            ],
                            aggregation_temporality: 2,
                        }),
                    ),
                    metric(
                        "exponential",
                        Data::ExponentialHistogram(ExponentialHistogram {
                            data_points: vec![ExponentialHistogramDataPoint {
                                attributes: vec![kv("k", s("v"))],
                                start_time_unix_nano: 1,
                                time_unix_nano: 2,
                                count: 9,
                                sum: Some(0.0),
                                scale: -3,
                                zero_count: 1,
                                positive: Some(Buckets {
                                    offset: -2,
                                    bucket_counts: vec![u64::MAX, 0, 3],
                                }),
                                negative: Some(Buckets::default()),
                                flags: 1,
                                exemplars: exemplars(),
                                min: None,
                                max: Some(4.0),
                                zero_threshold: 1e-9,
                            }],
                            aggregation_temporality: 1,
                        }),
                    ),
                    metric(
                        "summary",
                        Data::Summary(Summary {
                            data_points: vec![SummaryDataPoint {
                                attributes: vec![],
                                start_time_unix_nano: 3,
                                time_unix_nano: 4,
                                count: 10,
                                sum: 99.5,
                                quantile_values: vec![
                                    ValueAtQuantile {
                                        quantile: 0.5,
                                        value: 7.0,
                                    },
                                    ValueAtQuantile {
                                        quantile: 0.99,
                                        value: 70.0,
                                    },
                                ],
                                flags: 0,
                            }],
                        }),
                    ),
                ],
            }],
        }],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_field_of_every_signal_round_trips_in_protobuf_and_json() {
    let a = start().await;
    let mut c = a.client().await;
    let cases: Vec<(Signal, Vec<u8>, Vec<u8>, usize)> = vec![
        (
            Signal::Logs,
            rich_logs().encode_to_vec(),
            serde_json::to_vec(&rich_logs()).unwrap(),
            4,
        ),
        (
            Signal::Traces,
            rich_traces().encode_to_vec(),
            serde_json::to_vec(&rich_traces()).unwrap(),
            3,
        ),
        (
            Signal::Metrics,
            rich_metrics().encode_to_vec(),
            serde_json::to_vec(&rich_metrics()).unwrap(),
            9,
        ),
    ];
    for (signal, pb, json, n) in cases {
        for (ct, body, gz) in [
            (PROTOBUF, pb.clone(), false),
            (JSON, json.clone(), false),
            (PROTOBUF, gzip(&pb), true),
        ] {
            let before = a.next_seq();
            let mut headers = vec![("content-type", ct)];
            if gz {
                headers.push(("content-encoding", "gzip"));
            }
            let r = c.post(path_of(signal), &headers, body).await;
            assert_eq!(r.status, 200, "{signal:?} {ct}: {}", r.message());
            let envs = a.events_since(before);
            assert_eq!(envs.len(), n, "{signal:?} {ct}");
            assert_eq!(rebuilt(signal, &envs), pb, "{signal:?} {ct}: round trip");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_request_is_a_success_that_appends_nothing() {
    let a = start().await;
    let mut c = a.client().await;
    for (path, ct, body) in [
        ("/v1/logs", PROTOBUF, &b""[..]),
        ("/v1/traces", JSON, b"{}"),
        (
            "/v1/metrics",
            JSON,
            br#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[]}]}]}"#,
        ),
    ] {
        let r = c.post(path, &[("content-type", ct)], body.to_vec()).await;
        assert_eq!(r.status, 200, "{path}: {}", r.message());
    }
    assert_eq!(a.next_seq(), 0);
}

// ---------------------------------------------------------------------------
// Errors

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_class_has_its_status_and_message_and_appends_nothing() {
    let a = start_with(|o, _| o.max_body_bytes = 64 << 10).await;
    let mut c = a.client().await;
    let logs = fixture("logs.pb");
    let pb = [("content-type", PROTOBUF)];

    let r = c.post("/v1/log", &pb, logs.clone()).await;
    assert_eq!(r.status, 404);
    assert!(
        r.message().contains("/v1/logs, /v1/traces or /v1/metrics"),
        "{}",
        r.message()
    );
    assert_eq!(
        r.content_type(),
        PROTOBUF,
        "answered in the request's encoding"
    );

    let r = c
        .send(request("GET", "/v1/logs", &[], Default::default()))
        .await
        .unwrap();
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("POST"));
    assert!(r.message().contains("POST"), "{}", r.message());

    let r = c
        .post("/v1/logs", &[("content-type", "text/plain")], logs.clone())
        .await;
    assert_eq!(r.status, 415);
    assert!(
        r.message().contains("application/x-protobuf"),
        "{}",
        r.message()
    );
    assert!(r.content_type().starts_with("text/plain"));
    let r = c.post("/v1/logs", &[], logs.clone()).await;
    assert_eq!(r.status, 415, "no content type");

    let r = c
        .post(
            "/v1/logs",
            &[("content-type", PROTOBUF), ("content-encoding", "zstd")],
            logs.clone(),
        )
        .await;
    assert_eq!(r.status, 415);
    assert!(r.message().contains("\"zstd\""), "{}", r.message());

    // Undecodable bodies, in both encodings, with the decoder's reason.
    let r = c
        .post("/v1/logs", &pb, logs[..logs.len() / 2].to_vec())
        .await;
    assert_eq!(r.status, 400);
    assert!(
        r.message()
            .contains("not a valid protobuf ExportLogsServiceRequest"),
        "{}",
        r.message()
    );
    let r = c
        .post("/v1/traces", &pb, b"\xff\xff\xff\xff".to_vec())
        .await;
    assert_eq!(r.status, 400);
    let r = c
        .post(
            "/v1/logs",
            &[("content-type", JSON)],
            b"{\"resourceLogs\": [".to_vec(),
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.content_type(), JSON);
    assert!(r.message().contains("not valid JSON"), "{}", r.message());
    let snake = br#"{"resource_logs":[{"scopeLogs":[{"logRecords":[{}]}]}]}"#;
    let r = c
        .post("/v1/logs", &[("content-type", JSON)], snake.to_vec())
        .await;
    assert_eq!(r.status, 400);
    assert!(
        r.message().contains("write \"resourceLogs\""),
        "{}",
        r.message()
    );
    let r = c
        .post(
            "/v1/logs",
            &[("content-type", PROTOBUF), ("content-encoding", "gzip")],
            logs.clone(),
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(
        r.message().contains("not valid gzip data"),
        "{}",
        r.message()
    );
    // A metric whose kind is unknown (its field skipped by the decoder).
    let r = c
        .post(
            "/v1/metrics",
            &[("content-type", JSON)],
            br#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"m"}]}]}]}"#.to_vec(),
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(r.message().contains("has no data"), "{}", r.message());

    // Too large: declared, streamed without a length, and after inflating.
    let big = vec![0u8; 65 << 10];
    let r = post(a.addr, "/v1/logs", &pb, big.clone()).await;
    assert_eq!(r.status, 413);
    assert!(
        r.message().contains("max_body_bytes (65536 bytes)"),
        "{}",
        r.message()
    );

    let mut raw = TcpStream::connect(a.addr).await.unwrap();
    write_head(
        &mut raw,
        "/v1/logs",
        &[("content-type", PROTOBUF), ("transfer-encoding", "chunked")],
    )
    .await;
    let chunk = vec![b'x'; 16 << 10];
    for _ in 0..5 {
        raw.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .await
            .unwrap();
        raw.write_all(&chunk).await.unwrap();
        raw.write_all(b"\r\n").await.unwrap();
    }
    let r = read_response(&mut raw)
        .await
        .expect("an answer while streaming");
    assert_eq!(r.status, 413);
    assert_eq!(r.header("connection"), Some("close"));

    // A gzip bomb: 32 gzip members of 1 MiB of zeros each (concatenated
    // members are one valid gzip body), 32 MiB in ~32 KiB; refused after
    // inflating 64 KiB + 1.
    let bomb = {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(&vec![0u8; 1 << 20]).unwrap();
        e.finish().unwrap().repeat(32)
    };
    assert!(bomb.len() < 64 << 10, "the bomb fits the limit compressed");
    let t = Instant::now();
    let r = c
        .post(
            "/v1/logs",
            &[("content-type", PROTOBUF), ("content-encoding", "gzip")],
            bomb,
        )
        .await;
    assert_eq!(r.status, 413);
    assert!(
        r.message().contains("decompresses to more than"),
        "{}",
        r.message()
    );
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "the bomb cost {:?}",
        t.elapsed()
    );

    assert_eq!(a.next_seq(), 0, "no error appended anything");
    // The keep-alive connection survived every refusal it read to the end.
    let r = c.post("/v1/logs", &pb, logs).await;
    assert_eq!(r.status, 200, "{}", r.message());
    assert_eq!(a.next_seq(), 1);

    let text = a.metrics.encode().unwrap();
    for (reason, n) in [
        ("not_found", 1.0),
        ("method", 1.0),
        ("content_type", 2.0),
        ("content_encoding", 1.0),
        ("decode", 5.0),
        ("decompress", 1.0),
        ("too_large", 3.0),
    ] {
        let series =
            format!("holdfast_otlp_rejected_requests_total{{source=\"otlp\",reason=\"{reason}\"}}");
        assert_eq!(metric_value(&text, &series), Some(n), "{series}\n{text}");
    }
    for (series, n) in [
        (
            "holdfast_otlp_requests_total{source=\"otlp\",path=\"/v1/logs\",status=\"200\"}",
            1.0,
        ),
        (
            "holdfast_otlp_requests_total{source=\"otlp\",path=\"other\",status=\"404\"}",
            1.0,
        ),
        (
            "holdfast_otlp_accepted_events_total{source=\"otlp\",signal=\"logs\"}",
            1.0,
        ),
        ("holdfast_source_events_total{source=\"otlp\"}", 1.0),
        (
            "holdfast_otlp_request_duration_seconds_count{source=\"otlp\",path=\"/v1/logs\"}",
            12.0,
        ),
    ] {
        assert_eq!(metric_value(&text, series), Some(n), "{series}\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_time_out() {
    let a = start_with(|o, _| {
        o.header_timeout = Duration::from_millis(500);
        o.request_timeout = Duration::from_millis(800);
    })
    .await;
    // A body that never finishes: 503 (which OTLP clients retry; they must
    // not retry a 408) at the request deadline.
    let mut slow = TcpStream::connect(a.addr).await.unwrap();
    write_head(
        &mut slow,
        "/v1/logs",
        &[("content-type", PROTOBUF), ("content-length", "1000")],
    )
    .await;
    slow.write_all(&[0; 10]).await.unwrap();
    let t = Instant::now();
    let r = read_response(&mut slow)
        .await
        .expect("an answer at the deadline");
    assert_eq!(r.status, 503);
    assert_eq!(r.retry_after(), Some(1));
    assert_eq!(r.header("connection"), Some("close"));
    assert!(r.message().contains("request_timeout"), "{}", r.message());
    assert!(t.elapsed() < Duration::from_secs(3));
    drop(slow);

    // A connection that says nothing is closed at the header timeout.
    let mut idle = TcpStream::connect(a.addr).await.unwrap();
    let t = Instant::now();
    assert!(read_response(&mut idle).await.is_none());
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "closed after {:?}",
        t.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_bounded() {
    let a = start_with(|o, _| o.listener.max_connections = std::num::NonZeroUsize::new(2).unwrap())
        .await;
    // Two connections are served; a third waits until one closes.
    let mut c1 = a.client().await;
    let mut c2 = a.client().await;
    let pb = [("content-type", PROTOBUF)];
    assert_eq!(
        c1.post("/v1/logs", &pb, fixture("logs.pb")).await.status,
        200
    );
    assert_eq!(
        c2.post("/v1/logs", &pb, fixture("logs.pb")).await.status,
        200
    );
    let mut c3 = a.client().await;
    let third = tokio::spawn(async move { c3.post("/v1/logs", &pb, fixture("logs.pb")).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !third.is_finished(),
        "a third connection was served beside two"
    );
    drop(c1);
    let r = tokio::time::timeout(Duration::from_secs(5), third)
        .await
        .expect("served once a connection closed")
        .unwrap();
    assert_eq!(r.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bearer_token_is_required_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "  s3cret-Token_1\n").unwrap();
    let t2 = token.clone();
    let a = start_with(move |o, _| o.bearer_token_file = Some(t2)).await;
    let body = fixture("logs.json");
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("Basic s3cret-Token_1"),
        Some("Bearer s3cret-Token_"),
    ] {
        // Each refusal closes its connection (so that unauthenticated
        // clients hold no slot): a new one each time.
        let mut c = a.client().await;
        let mut h = vec![("content-type", JSON)];
        if let Some(v) = auth {
            h.push(("authorization", v));
        }
        let r = c.post("/v1/logs", &h, body.clone()).await;
        assert_eq!(r.status, 401, "{auth:?}");
        assert_eq!(r.header("www-authenticate"), Some("Bearer"));
        assert_eq!(r.header("connection"), Some("close"));
        assert!(
            r.message().contains("Authorization: Bearer"),
            "{}",
            r.message()
        );
    }
    assert_eq!(a.next_seq(), 0);
    let mut c = a.client().await;
    let r = c
        .post(
            "/v1/logs",
            &[
                ("content-type", JSON),
                ("authorization", "Bearer s3cret-Token_1"),
            ],
            body,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.message());
    assert_eq!(a.next_seq(), 1);

    // A missing token file stops the source at start, naming the key.
    let mut o = settings(free_addr());
    o.bearer_token_file = Some(dir.path().join("absent"));
    let e = holdfast::sources::otlp_http::run(
        "edge".into(),
        o,
        a.log.clone(),
        a.metrics.clone(),
        a.health.clone(),
        Default::default(),
    )
    .await
    .unwrap_err();
    assert!(
        format!("{e:#}").contains("sources.edge.bearer_token_file"),
        "{e:#}"
    );
    assert!(!format!("{e:#}").contains("s3cret"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_port_is_an_error_naming_the_address_and_key() {
    let a = start().await;
    let o = settings(a.addr);
    let e = holdfast::sources::otlp_http::run(
        "edge".into(),
        o,
        a.log.clone(),
        a.metrics.clone(),
        a.health.clone(),
        Default::default(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        e.contains(&a.addr.to_string()) && e.contains("sources.edge.listen"),
        "{e}"
    );
}

// ---------------------------------------------------------------------------
// Mutated JSON: refused, or stored whole

/// Records in a JSON document, counted by shape alone.
fn doc_records(v: &JsonValue, signal: Signal) -> usize {
    let (r, s, x) = match signal {
        Signal::Logs => ("resourceLogs", "scopeLogs", "logRecords"),
        Signal::Traces => ("resourceSpans", "scopeSpans", "spans"),
        Signal::Metrics => ("resourceMetrics", "scopeMetrics", "metrics"),
    };
    let arr = |v: &JsonValue, k: &str| {
        v.get(k)
            .and_then(|a| a.as_array())
            .cloned()
            .unwrap_or_default()
    };
    let mut n = 0;
    for res in arr(v, r) {
        for sc in arr(&res, s) {
            for rec in arr(&sc, x) {
                n += match signal {
                    Signal::Metrics => [
                        "gauge",
                        "sum",
                        "histogram",
                        "exponentialHistogram",
                        "summary",
                    ]
                    .iter()
                    .filter_map(|k| rec.get(*k))
                    .map(|d| arr(d, "dataPoints").len())
                    .sum(),
                    _ => 1,
                };
            }
        }
    }
    n
}

/// Every path to an object key in the document.
fn key_paths(v: &JsonValue, at: &mut Vec<JsonPathStep>, out: &mut Vec<Vec<JsonPathStep>>) {
    match v {
        JsonValue::Object(m) => {
            for (k, child) in m {
                at.push(JsonPathStep::Key(k.clone()));
                out.push(at.clone());
                key_paths(child, at, out);
                at.pop();
            }
        }
        JsonValue::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                at.push(JsonPathStep::Index(i));
                key_paths(child, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

#[derive(Clone, Debug)]
enum JsonPathStep {
    Key(String),
    Index(usize),
}

fn parent_mut<'a>(v: &'a mut JsonValue, path: &[JsonPathStep]) -> &'a mut JsonValue {
    let mut cur = v;
    for step in &path[..path.len() - 1] {
        cur = match step {
            JsonPathStep::Key(k) => cur.get_mut(k.as_str()).unwrap(),
            JsonPathStep::Index(i) => cur.get_mut(*i).unwrap(),
        };
    }
    cur
}

fn last_key(path: &[JsonPathStep]) -> &str {
    match path.last() {
        Some(JsonPathStep::Key(k)) => k,
        _ => unreachable!(),
    }
}

fn snake(k: &str) -> String {
    let mut out = String::new();
    for c in k.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// What a mutated document must get.
enum Expect {
    /// It still holds every record of the original, under a key or in a
    /// shape that is certainly a mistake: a 400, never a 200.
    Refused,
    /// It may be accepted, but then exactly its records must be stored.
    Whole,
    /// A key no OTLP release knows (here a typo): ignored as the OTLP spec
    /// requires, so accepted with exactly the records still in reach and
    /// counted once in `holdfast_otlp_unknown_fields_total`; or refused
    /// when what it hid leaves a metric with no data to store. (Until issue
    /// 14 a typo was `Refused`: the spec's "ignore unknown fields" won,
    /// because a newer client's batch refused is lost at the client.)
    Ignored,
}

/// Mutations of one document: keys renamed to their snake_case spelling or
/// duplicated, which keep every record in the document but out of reach;
/// keys renamed with a typo (an unknown key); values replaced by every other
/// JSON type, and keys removed.
fn mutations(text: &str) -> Vec<(String, String, Expect)> {
    let doc: JsonValue = serde_json::from_str(text).unwrap();
    let mut paths = Vec::new();
    key_paths(&doc, &mut Vec::new(), &mut paths);
    let mut out = Vec::new();
    let replacements = [
        JsonValue::Null,
        JsonValue::Bool(true),
        JsonValue::String("x".into()),
        serde_json::json!(1.5),
        serde_json::json!(-1),
        serde_json::json!([]),
        serde_json::json!({}),
    ];
    for p in &paths {
        let key = last_key(p).to_string();
        let mut renames = vec![(format!("{key}x"), Expect::Ignored)];
        if snake(&key) != key {
            renames.push((snake(&key), Expect::Refused));
        }
        for (new, expect) in renames {
            let mut d = doc.clone();
            let obj = parent_mut(&mut d, p).as_object_mut().unwrap();
            let v = obj.remove(&key).unwrap();
            obj.insert(new.clone(), v);
            out.push((format!("rename {p:?} to {new}"), d.to_string(), expect));
        }
        for r in &replacements {
            let mut d = doc.clone();
            parent_mut(&mut d, p)[key.as_str()] = r.clone();
            out.push((format!("{p:?} = {r}"), d.to_string(), Expect::Whole));
        }
        let mut d = doc.clone();
        parent_mut(&mut d, p).as_object_mut().unwrap().remove(&key);
        out.push((format!("remove {p:?}"), d.to_string(), Expect::Whole));
    }
    // Duplicate the first occurrence of each key in its own object.
    let compact = doc.to_string();
    let mut seen = std::collections::HashSet::new();
    for p in &paths {
        let key = last_key(p);
        if seen.insert(key.to_string()) {
            let needle = format!("\"{key}\":");
            let at = compact.find(&needle).unwrap();
            let mut t = compact.clone();
            t.insert_str(at, &format!("{needle}null,"));
            out.push((format!("duplicate {key}"), t, Expect::Refused));
        }
    }
    out
}

/// Records opentelemetry-proto's serde derive finds in a body, if it
/// accepts it: the lenient decoder this source does not use.
fn lenient_records(signal: Signal, body: &str) -> Option<usize> {
    let count = |v: &JsonValue| doc_records(v, signal);
    let v = match signal {
        Signal::Logs => {
            serde_json::to_value(serde_json::from_str::<ExportLogsServiceRequest>(body).ok()?)
        }
        Signal::Traces => {
            serde_json::to_value(serde_json::from_str::<ExportTraceServiceRequest>(body).ok()?)
        }
        Signal::Metrics => {
            serde_json::to_value(serde_json::from_str::<ExportMetricsServiceRequest>(body).ok()?)
        }
    }
    .ok()?;
    Some(count(&v))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutated_json_is_refused_or_stored_whole() {
    // Durability is not what this test is about: skip the syncs.
    let a = start_with(|_, l| l.fsync = FsyncPolicy::Never).await;
    let mut c = a.client().await;
    let (mut refused, mut accepted, mut lenient_losses, mut ignored) = (0, 0, 0, 0);
    for (name, signal) in [
        ("logs.json", Signal::Logs),
        ("traces.json", Signal::Traces),
        ("metrics.json", Signal::Metrics),
        ("examples/logs.json", Signal::Logs),
        ("examples/metrics.json", Signal::Metrics),
    ] {
        let text = String::from_utf8(fixture(name)).unwrap();
        let original = doc_records(&serde_json::from_str(&text).unwrap(), signal);
        for (what, body, expect) in mutations(&text) {
            let doc: JsonValue = serde_json::from_str(&body).unwrap_or(JsonValue::Null);
            if matches!(expect, Expect::Refused)
                && lenient_records(signal, &body).is_some_and(|n| n < original)
            {
                lenient_losses += 1;
            }
            let unknown = a
                .metrics
                .group::<OtlpSourceMetrics>()
                .unknown_fields
                .get_or_create(&OtlpSignalLabels {
                    source: SOURCE.into(),
                    signal: signal.as_str().into(),
                })
                .clone();
            let (before, unknown_before) = (a.next_seq(), unknown.get());
            let r = c
                .post(path_of(signal), &[("content-type", JSON)], body.clone())
                .await;
            let stored = a.next_seq() - before;
            let counted = unknown.get() - unknown_before;
            match (r.status, &expect) {
                (200, Expect::Whole | Expect::Ignored) => {
                    accepted += 1;
                    assert_eq!(
                        stored as usize,
                        doc_records(&doc, signal),
                        "{name}: {what} was accepted but did not store exactly its records:\n{body}"
                    );
                    let unknowns = u64::from(matches!(expect, Expect::Ignored));
                    ignored += unknowns;
                    assert_eq!(counted, unknowns, "{name}: {what}: unknown keys counted");
                }
                (400, Expect::Ignored) => {
                    refused += 1;
                    assert_eq!(stored, 0, "{name}: {what} was refused but appended");
                    assert!(
                        r.message().contains("has no data"),
                        "{name}: {what}: {}",
                        r.message()
                    );
                }
                (400, _) => {
                    refused += 1;
                    assert_eq!(stored, 0, "{name}: {what} was refused but appended");
                    assert!(!r.message().is_empty());
                }
                (s, _) => panic!("{name}: {what}: status {s} ({}):\n{body}", r.message()),
            }
        }
    }
    eprintln!(
        "{refused} mutations refused, {accepted} accepted whole ({ignored} of them with an \
         unknown key ignored and counted); the lenient serde decoder would have accepted \
         {lenient_losses} of the refused ones with records missing"
    );
    assert!(
        refused > 500 && accepted > 50,
        "{refused} refused, {accepted} accepted"
    );
    assert!(lenient_losses > 20, "the mutations exercise the hazard");
    assert!(ignored > 100, "{ignored} unknown keys ignored");
}

// ---------------------------------------------------------------------------
// A full log, draining, stopping

/// A log request whose every record carries `req` = `tag`.
fn tagged_logs(tag: &str, records: usize) -> Vec<u8> {
    let mut req = rich_logs();
    req.resource_logs.truncate(1);
    let sl = &mut req.resource_logs[0].scope_logs;
    sl.truncate(1);
    let template = sl[0].log_records[0].clone();
    sl[0].log_records = (0..records)
        .map(|i| {
            let mut r = template.clone();
            r.attributes = vec![kv("req", s(tag)), kv("i", Value::IntValue(i as i64))];
            r
        })
        .collect();
    req.encode_to_vec()
}

fn req_tag(e: &Envelope) -> Option<String> {
    match &e.record {
        Some(Record::Log(r)) => string_attr(&r.attributes, "req"),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_log_answers_503_with_retry_after_and_stores_whole_requests_only() {
    let a = start_with(|_, l| {
        l.segment_bytes = 64 << 10;
        l.max_bytes = 256 << 10;
        l.when_full = WhenFull::Block;
        // Requests alike compress to little: uncompressed, 200 fill it.
        l.compression = holdfast::seglog::Compression::None;
    })
    .await;
    // The harness's consumer never commits: nothing can be freed.
    let mut c = a.client().await;
    let pb = [("content-type", PROTOBUF)];
    let mut ok = Vec::new();
    let mut full = None;
    for i in 0..200 {
        let tag = format!("r{i}");
        let r = c.post("/v1/logs", &pb, tagged_logs(&tag, 20)).await;
        match r.status {
            200 => ok.push(tag),
            503 => {
                full = Some(r);
                break;
            }
            s => panic!("status {s}: {}", r.message()),
        }
    }
    let r = full.expect("the log filled up");
    assert!(
        r.retry_after().is_some_and(|s| s >= 1),
        "Retry-After: {:?}",
        r.header("retry-after")
    );
    assert!(r.message().contains("log is full"), "{}", r.message());
    assert!(ok.len() > 5, "{} requests fit", ok.len());
    // Still full: refused again, and the refusals stored nothing.
    let before = a.next_seq();
    let r = c.post("/v1/logs", &pb, tagged_logs("late", 20)).await;
    assert_eq!(r.status, 503);
    assert_eq!(a.next_seq(), before);

    let envs: Vec<Envelope> = a.events().into_iter().map(|(_, e)| e).collect();
    let by_req = count_by(&envs, req_tag);
    assert_eq!(
        by_req.len(),
        ok.len(),
        "exactly the accepted requests are stored"
    );
    for tag in &ok {
        assert_eq!(by_req.get(tag), Some(&20), "request {tag} is stored whole");
    }
    // One request larger than one append can ever be: 413, not 503.
    let r = c.post("/v1/logs", &pb, tagged_logs("huge", 800)).await;
    assert_eq!(r.status, 413, "{}", r.message());
    assert!(
        r.message().contains("more than one log append"),
        "{}",
        r.message()
    );
    let text = a.metrics.encode().unwrap();
    assert_eq!(
        metric_value(
            &text,
            "holdfast_otlp_rejected_requests_total{source=\"otlp\",reason=\"log_full\"}"
        ),
        Some(2.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_answers_503_and_stop_finishes_requests_in_flight() {
    let mut a = start().await;
    let body = fixture("logs.pb");
    let pb = [("content-type", PROTOBUF)];

    a.health.set(Phase::Draining);
    let mut c = a.client().await;
    let r = c.post("/v1/logs", &pb, body.clone()).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.retry_after(), Some(5));
    assert!(r.message().contains("shutting down"), "{}", r.message());
    assert_eq!(
        r.header("connection"),
        Some("close"),
        "reconnect to the next process"
    );
    assert_eq!(a.next_seq(), 0);
    a.health.set(Phase::Ready);
    // An idle keep-alive connection, to be closed by stop.
    let mut c = a.client().await;
    let r = c.post("/v1/logs", &pb, body.clone()).await;
    assert_eq!(r.status, 200);

    // A request whose head is in, its body half sent, when stop comes; and
    // one whose body never comes.
    let mut raw = TcpStream::connect(a.addr).await.unwrap();
    let len = body.len().to_string();
    write_head(
        &mut raw,
        "/v1/logs",
        &[("content-type", PROTOBUF), ("content-length", &len)],
    )
    .await;
    raw.write_all(&body[..100]).await.unwrap();
    let mut stuck = TcpStream::connect(a.addr).await.unwrap();
    write_head(
        &mut stuck,
        "/v1/logs",
        &[("content-type", PROTOBUF), ("content-length", "1000")],
    )
    .await;
    stuck.write_all(&[0; 10]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stopped = Instant::now();
    a.stop.cancel();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !a.task.as_ref().unwrap().is_finished(),
        "run returned with a request in flight"
    );
    raw.write_all(&body[100..]).await.unwrap();
    let r = read_response(&mut raw)
        .await
        .expect("the request in flight is answered");
    assert_eq!(r.status, 200);
    assert_eq!(a.next_seq(), 2, "and it is in the log");
    // The stuck one is answered 503 after the drain grace, and run returns.
    let r = read_response(&mut stuck)
        .await
        .expect("the stuck request is answered");
    assert_eq!(r.status, 503);
    assert_eq!(r.retry_after(), Some(5));
    assert!(r.message().contains("shutting down"), "{}", r.message());
    a.stop().await.unwrap();
    assert!(
        stopped.elapsed() < Duration::from_secs(8),
        "stopping took {:?}",
        stopped.elapsed()
    );
    assert_eq!(a.next_seq(), 2);
    assert!(
        TcpStream::connect(a.addr).await.is_err(),
        "the listener is closed"
    );
    // The idle keep-alive connection was closed too.
    let req = request("POST", "/v1/logs", &pb, body.into());
    assert!(c.send(req).await.is_err());
}

// ---------------------------------------------------------------------------
// TLS

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_with_the_configured_certificate() {
    use tokio_rustls::rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};
    use tokio_rustls::rustls::{crypto, ClientConfig, RootCertStore};

    let a = start_with(|o, _| {
        o.listener.tls = Some(holdfast::sources::otlp_http::TlsSettings {
            cert_file: fixture_path("tls/cert.pem"),
            key_file: fixture_path("tls/key.pem"),
            client_ca: None,
        })
    })
    .await;
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(fixture_path("tls/ca.pem")).unwrap())
        .unwrap();
    let config =
        ClientConfig::builder_with_provider(std::sync::Arc::new(crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = TcpStream::connect(a.addr).await.unwrap();
    let tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let resp = sender
        .send_request(request(
            "POST",
            "/v1/traces",
            &[("content-type", PROTOBUF)],
            fixture("traces.pb").into(),
        ))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(a.next_seq(), 2);

    // Plain HTTP to the TLS port gets no HTTP answer.
    let mut raw = TcpStream::connect(a.addr).await.unwrap();
    write_head(&mut raw, "/v1/logs", &[("content-length", "0")]).await;
    assert!(read_response(&mut raw).await.is_none());

    // Unreadable TLS files stop the source at start, naming the keys.
    let mut o = settings(free_addr());
    o.listener.tls = Some(holdfast::sources::otlp_http::TlsSettings {
        cert_file: fixture_path("tls/key.pem"),
        key_file: fixture_path("tls/key.pem"),
        client_ca: None,
    });
    let e = holdfast::sources::otlp_http::run(
        "edge".into(),
        o,
        a.log.clone(),
        a.metrics.clone(),
        a.health.clone(),
        Default::default(),
    )
    .await
    .unwrap_err();
    let e = format!("{e:#}");
    assert!(
        e.contains("sources.edge.tls.cert_file") && e.contains("no PEM certificate"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_that_cannot_be_written_answers_503_never_500() {
    let a = start().await;
    let mut c = a.client().await;
    // The writer is gone, as after an unrecoverable disk error.
    a.log.close().await.unwrap();
    let r = c
        .post("/v1/logs", &[("content-type", JSON)], fixture("logs.json"))
        .await;
    assert_eq!(r.status, 503);
    assert_eq!(r.retry_after(), Some(5));
    assert!(r.message().contains("cannot take data"), "{}", r.message());
    let text = a.metrics.encode().unwrap();
    assert_eq!(
        metric_value(
            &text,
            "holdfast_otlp_rejected_requests_total{source=\"otlp\",reason=\"log_error\"}"
        ),
        Some(1.0)
    );
}
