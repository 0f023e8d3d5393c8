use super::*;
use crate::event::{Envelope, EventId, FileOrigin};
use crate::sinks::test_events;
use opentelemetry_proto::tonic::common::v1::{ArrayValue as Array, KeyValueList};
use opentelemetry_proto::tonic::resource::v1::Resource;

fn kv(k: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

#[test]
fn a_log_becomes_a_flat_document() {
    use any_value::Value::*;
    let id = EventId::for_file_line(1, 0, 0);
    let env = Envelope {
        id: id.0.to_vec(),
        source: "syslog".into(),
        observed_time_unix_nano: 1_709_251_199_500_000_000,
        resource: Some(Resource {
            attributes: vec![kv("host.name", StringValue("dev1".into()))],
            ..Default::default()
        }),
        record: Some(Record::Log(LogRecord {
            severity_text: "WARN".into(),
            severity_number: 13,
            body: Some(AnyValue {
                value: Some(StringValue("disk \"sda\" at 91%\n".into())),
            }),
            attributes: vec![
                kv("n", IntValue(-3)),
                kv("ok", BoolValue(true)),
                kv("ratio", DoubleValue(0.5)),
                kv(
                    "list",
                    ArrayValue(Array {
                        values: vec![AnyValue {
                            value: Some(StringValue("a".into())),
                        }],
                    }),
                ),
                kv(
                    "map",
                    KvlistValue(KeyValueList {
                        values: vec![kv("x", DoubleValue(f64::NAN))],
                    }),
                ),
                kv("raw", BytesValue(vec![0, 1, 2])),
            ],
            ..Default::default()
        })),
        origin: Some(FileOrigin {
            path: "/var/log/syslog".into(),
            offset: 42,
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut out = Vec::new();
    write(&mut out, &test_events::stored(&env));
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["@timestamp"], "2024-02-29T23:59:59.500Z");
    assert_eq!(v["event_id"], id.to_hex());
    assert_eq!(v["source"], "syslog");
    assert_eq!(v["signal"], "logs");
    assert_eq!(v["message"], "disk \"sda\" at 91%\n");
    assert_eq!(v["severity_number"], 13);
    assert_eq!(v["resource"]["host.name"], "dev1");
    assert_eq!(v["attributes"]["n"], -3);
    assert_eq!(v["attributes"]["ok"], true);
    assert_eq!(v["attributes"]["ratio"], 0.5);
    assert_eq!(v["attributes"]["list"][0], "a");
    assert_eq!(v["attributes"]["map"]["x"], "NaN");
    assert_eq!(v["attributes"]["raw"], "AAEC");
    assert_eq!(v["log.file.path"], "/var/log/syslog");
    assert_eq!(v["log.file.offset"], 42);
}

#[test]
fn control_characters_are_escaped() {
    let mut out = Vec::new();
    string(&mut out, "a\u{1}b\u{7f}é");
    assert_eq!(
        serde_json::from_slice::<String>(&out).unwrap(),
        "a\u{1}b\u{7f}é"
    );
}

#[test]
fn cached_documents_are_the_uncached_bytes() {
    // Format-1 events are written whole, never from the cache; the same
    // events in format 2, in an order that switches group at every event
    // and back, must give the same bytes through one request's cache.
    let envs = test_events::mixed();
    let v1 = test_events::items_v1(&envs, 0);
    let v2 = test_events::items_v2(&envs, 2, 0);
    let order: Vec<usize> = (0..envs.len()).chain((0..envs.len()).rev()).collect();
    for layout in [Layout::Full, Layout::Lean] {
        let mut whole = Vec::new();
        let mut cached = Vec::new();
        let mut shared = Shared::new(layout);
        for &i in &order {
            write_with(&mut whole, &v1[i].ev, None, true, &mut Shared::new(layout));
            whole.push(b'\n');
            write_with(&mut cached, &v2[i].ev, None, true, &mut shared);
            cached.push(b'\n');
        }
        assert_eq!(
            String::from_utf8_lossy(&whole),
            String::from_utf8_lossy(&cached),
            "{layout:?}"
        );
    }
}

/// A file line with no time of its own, from holdfast's file source: the
/// lean document says each fact once, the full one keeps every field.
#[test]
fn a_lean_document_says_each_fact_once() {
    use any_value::Value::StringValue;
    let id = EventId::for_file_line(1, 0, 0);
    let env = Envelope {
        id: id.0.to_vec(),
        source: "app".into(),
        observed_time_unix_nano: 1_709_251_199_500_000_000,
        scope: Some(InstrumentationScope {
            name: "holdfast.sources.file".into(),
            version: "1.2.3".into(),
            ..Default::default()
        }),
        record: Some(Record::Log(LogRecord {
            body: Some(AnyValue {
                value: Some(StringValue("hello".into())),
            }),
            attributes: vec![
                kv("log.file.path", StringValue("/var/log/app.log".into())),
                kv("log.file.name", StringValue("app.log".into())),
            ],
            ..Default::default()
        })),
        origin: Some(FileOrigin {
            path: "/var/log/app.log".into(),
            offset: 7,
            ..Default::default()
        }),
        ..Default::default()
    };
    let ev = test_events::stored(&env);
    let doc = |layout, id_beside| {
        let mut out = Vec::new();
        write_with(&mut out, &ev, None, id_beside, &mut Shared::new(layout));
        String::from_utf8(out).unwrap()
    };
    assert_eq!(
        doc(Layout::Lean, true),
        r#"{"@timestamp":"2024-02-29T23:59:59.500Z","source":"app","signal":"logs","log.file.path":"/var/log/app.log","log.file.offset":7,"message":"hello"}"#
    );
    // Where nothing else carries the id (OpenObserve), it stays.
    assert!(doc(Layout::Lean, false).contains(&format!(r#""event_id":"{}""#, id.to_hex())));
    assert_eq!(
        doc(Layout::Full, true),
        format!(
            r#"{{"@timestamp":"2024-02-29T23:59:59.500Z","observed_timestamp":"2024-02-29T23:59:59.500Z","event_id":"{}","source":"app","signal":"logs","scope":{{"name":"holdfast.sources.file","version":"1.2.3"}},"log.file.path":"/var/log/app.log","log.file.offset":7,"message":"hello","attributes":{{"log.file.path":"/var/log/app.log","log.file.name":"app.log"}}}}"#,
            id.to_hex()
        )
    );
    // A scope a client sent, and a time of the record's own, stay.
    let mut env = env;
    env.scope.as_mut().unwrap().name = "my.library".into();
    if let Some(Record::Log(l)) = env.record.as_mut() {
        l.time_unix_nano = 1_709_251_000_000_000_000;
    }
    let ev = test_events::stored(&env);
    let mut out = Vec::new();
    write_with(&mut out, &ev, None, true, &mut Shared::new(Layout::Lean));
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains(r#""scope":{"name":"my.library""#), "{text}");
    assert!(
        text.contains(r#""observed_timestamp":"2024-02-29T23:59:59.500Z""#),
        "{text}"
    );
}

#[test]
fn the_clock_formats_each_second_anew() {
    let mut clock = shared::Clock::default();
    let mut out = Vec::new();
    for t in [
        1_709_251_199_999_000_000u64, // 2024-02-29T23:59:59.999
        1_709_251_199_001_000_000,
        1_709_251_200_000_000_000, // the next day
        0,
        u64::MAX, // 2554-07-21T23:34:33.709
    ] {
        clock.write(&mut out, t);
        out.push(b' ');
    }
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "\"2024-02-29T23:59:59.999Z\" \"2024-02-29T23:59:59.001Z\" \
         \"2024-03-01T00:00:00.000Z\" \"1970-01-01T00:00:00.000Z\" \
         \"2554-07-21T23:34:33.709Z\" "
    );
}

/// Span events and links, a summary's quantiles and both histogram kinds,
/// byte for byte: the array and attribute writers these share.
#[test]
fn spans_and_metric_points_keep_their_bytes() {
    use opentelemetry_proto::tonic::metrics::v1::{
        exponential_histogram_data_point::Buckets, summary_data_point::ValueAtQuantile,
        ExponentialHistogram, ExponentialHistogramDataPoint, Histogram, HistogramDataPoint,
        Summary, SummaryDataPoint,
    };
    use opentelemetry_proto::tonic::trace::v1::span::{Event, Link};
    use opentelemetry_proto::tonic::trace::v1::Span;
    let s = |v: &str| any_value::Value::StringValue(v.into());
    let span = Span {
        trace_id: vec![1; 16],
        span_id: vec![2; 8],
        name: "GET /".into(),
        start_time_unix_nano: 1_700_000_000_000_000_000,
        end_time_unix_nano: 1_700_000_000_500_000_000,
        attributes: vec![kv("http.method", s("GET"))],
        events: vec![
            Event {
                time_unix_nano: 1_700_000_000_100_000_000,
                name: "retry".into(),
                attributes: vec![kv("n", any_value::Value::IntValue(2))],
                ..Default::default()
            },
            Event {
                name: "done".into(),
                ..Default::default()
            },
        ],
        links: vec![
            Link {
                trace_id: vec![3; 16],
                span_id: vec![4; 8],
                attributes: vec![kv("why", s("follows"))],
                ..Default::default()
            },
            Link {
                trace_id: vec![5; 16],
                span_id: vec![6; 8],
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let metric = |name: &str, data: metric::Data| Metric {
        name: name.into(),
        data: Some(data),
        ..Default::default()
    };
    let points = [
        Record::Span(span),
        Record::Metric(metric(
            "lat",
            metric::Data::Summary(Summary {
                data_points: vec![SummaryDataPoint {
                    attributes: vec![kv("route", s("/"))],
                    count: 4,
                    sum: 2.5,
                    quantile_values: vec![
                        ValueAtQuantile {
                            quantile: 0.5,
                            value: 0.25,
                        },
                        ValueAtQuantile {
                            quantile: 0.99,
                            value: 1.0,
                        },
                    ],
                    ..Default::default()
                }],
            }),
        )),
        Record::Metric(metric(
            "hist",
            metric::Data::Histogram(Histogram {
                data_points: vec![HistogramDataPoint {
                    count: 3,
                    sum: Some(6.0),
                    min: Some(1.0),
                    max: None,
                    bucket_counts: vec![1, 2],
                    explicit_bounds: vec![2.5],
                    ..Default::default()
                }],
                aggregation_temporality: 2,
            }),
        )),
        Record::Metric(metric(
            "exp",
            metric::Data::ExponentialHistogram(ExponentialHistogram {
                data_points: vec![ExponentialHistogramDataPoint {
                    count: 5,
                    sum: None,
                    min: Some(0.5),
                    max: Some(8.0),
                    scale: 1,
                    zero_count: 1,
                    positive: Some(Buckets {
                        offset: -1,
                        bucket_counts: vec![1, 3],
                    }),
                    ..Default::default()
                }],
                aggregation_temporality: 1,
            }),
        )),
    ];
    let mut docs = String::new();
    for record in points {
        let env = Envelope {
            id: vec![7; 16],
            source: "otlp".into(),
            observed_time_unix_nano: 1_700_000_001_000_000_000,
            record: Some(record),
            ..Default::default()
        };
        let mut out = Vec::new();
        write(&mut out, &test_events::stored(&env));
        docs.push_str(&String::from_utf8(out).unwrap());
        docs.push('\n');
    }
    assert_eq!(docs, EXPECTED_POINTS, "{docs}");
}

/// Written by the code before the array and attribute writers were shared.
const EXPECTED_POINTS: &str = concat!(
    r#"{"@timestamp":"2023-11-14T22:13:20.000Z","observed_timestamp":"2023-11-14T22:13:21.000Z","event_id":"07070707070707070707070707070707","source":"otlp","signal":"traces","trace_id":"01010101010101010101010101010101","span_id":"0202020202020202","name":"GET /","kind":"UNSPECIFIED","start_timestamp":"2023-11-14T22:13:20.000Z","end_timestamp":"2023-11-14T22:13:20.500Z","duration_ms":500,"attributes":{"http.method":"GET"},"events":[{"timestamp":"2023-11-14T22:13:20.100Z","name":"retry","attributes":{"n":2}},{"timestamp":"1970-01-01T00:00:00.000Z","name":"done"}],"links":[{"trace_id":"03030303030303030303030303030303","span_id":"0404040404040404","attributes":{"why":"follows"}},{"trace_id":"05050505050505050505050505050505","span_id":"0606060606060606"}]}"#,
    "\n",
    r#"{"@timestamp":"2023-11-14T22:13:21.000Z","observed_timestamp":"2023-11-14T22:13:21.000Z","event_id":"07070707070707070707070707070707","source":"otlp","signal":"metrics","metric":{"name":"lat","type":"summary"},"attributes":{"route":"/"},"count":4,"sum":2.5,"quantiles":[{"quantile":0.5,"value":0.25},{"quantile":0.99,"value":1}]}"#,
    "\n",
    r#"{"@timestamp":"2023-11-14T22:13:21.000Z","observed_timestamp":"2023-11-14T22:13:21.000Z","event_id":"07070707070707070707070707070707","source":"otlp","signal":"metrics","metric":{"name":"hist","type":"histogram"},"count":3,"sum":6,"min":1,"bucket_counts":[1,2],"explicit_bounds":[2.5],"temporality":"cumulative"}"#,
    "\n",
    r#"{"@timestamp":"2023-11-14T22:13:21.000Z","observed_timestamp":"2023-11-14T22:13:21.000Z","event_id":"07070707070707070707070707070707","source":"otlp","signal":"metrics","metric":{"name":"exp","type":"exponential_histogram"},"count":5,"min":0.5,"max":8,"scale":1,"zero_count":1,"positive":{"offset":-1,"bucket_counts":[1,3]},"temporality":"delta"}"#,
    "\n",
);
