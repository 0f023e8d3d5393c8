use super::*;
use crate::event::Record;
use crate::sinks::test_events::kv;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    exponential_histogram_data_point, number_data_point, summary_data_point,
    ExponentialHistogramDataPoint, HistogramDataPoint, NumberDataPoint, ResourceMetrics,
    ScopeMetrics, SummaryDataPoint,
};

fn run(d: Decoded) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let s = split(d, "otlp", 42, usize::MAX, |e| out.push(e.to_vec())).unwrap();
    assert_eq!(s.events as usize, out.len());
    assert_eq!(s.bytes as usize, out.iter().map(Vec::len).sum::<usize>());
    out
}

/// Splits into format 2 and reads the events back as the log's readers
/// do (`Decoder`, the batch's context, each event's index), checking the
/// ids are derived from one seed; returns the whole envelopes without
/// their ids, and the number of groups.
fn run2(d: Decoded) -> (Vec<Envelope>, usize) {
    use crate::event::{Context, Decoder};
    let mut out = Vec::new();
    let s = split_as(d, "otlp", 42, usize::MAX, true, |e| out.push(e.to_vec())).unwrap();
    assert_eq!(s.events as usize, out.len());
    assert_eq!(s.bytes as usize, out.iter().map(Vec::len).sum::<usize>());
    let ctx = Context::decode(s.context.as_ref()).unwrap();
    assert!(ctx
        .groups
        .iter()
        .all(|g| g.id_seed == ctx.groups[0].id_seed));
    assert_eq!(ctx.groups[0].id_seed.len(), 16);
    let mut dec = Decoder::new();
    let mut ids = std::collections::HashSet::new();
    let envs = out
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let got = dec.decode(e, &s.context, i as u64).unwrap();
            assert_eq!(got.id, EventId::derived(&ctx.groups[0].id_seed, i as u64));
            assert!(ids.insert(got.id), "ids are distinct");
            let mut env = got.to_envelope();
            assert_eq!(env.id, got.id.0.to_vec());
            env.id.clear();
            env
        })
        .collect();
    (envs, ctx.groups.len())
}

/// Decodes, checks the bytes are prost's own encoding, and drops the id.
fn envelopes(events: &[Vec<u8>]) -> Vec<Envelope> {
    events
        .iter()
        .map(|e| {
            let mut env = Envelope::decode_event(e).unwrap();
            assert_eq!(&env.encode_to_vec(), e, "not the canonical encoding");
            env.id.clear();
            env
        })
        .collect()
}

#[test]
fn logs_keep_resource_scope_and_schema_urls() {
    let res = Resource {
        attributes: vec![kv("service.name", "a")],
        ..Default::default()
    };
    let scope = InstrumentationScope {
        name: "lib".into(),
        version: "1".into(),
        ..Default::default()
    };
    let rec = |b: &str| LogRecord {
        time_unix_nano: 7,
        body: Some(AnyValue {
            value: Some(any_value::Value::StringValue(b.into())),
        }),
        ..Default::default()
    };
    let req = ExportLogsServiceRequest {
        resource_logs: vec![
            ResourceLogs {
                resource: Some(res.clone()),
                schema_url: "https://r".into(),
                scope_logs: vec![
                    ScopeLogs {
                        scope: Some(scope.clone()),
                        schema_url: "https://s".into(),
                        log_records: vec![rec("1"), rec("2")],
                    },
                    ScopeLogs {
                        scope: None,
                        schema_url: String::new(),
                        log_records: vec![rec("3")],
                    },
                ],
            },
            ResourceLogs {
                resource: None,
                schema_url: String::new(),
                scope_logs: vec![ScopeLogs {
                    scope: Some(scope.clone()),
                    schema_url: String::new(),
                    log_records: vec![rec("4")],
                }],
            },
            // The first resource and scope again (clients that send
            // one ResourceLogs per record): the same group.
            ResourceLogs {
                resource: Some(res.clone()),
                schema_url: "https://r".into(),
                scope_logs: vec![ScopeLogs {
                    scope: Some(scope.clone()),
                    schema_url: "https://s".into(),
                    log_records: vec![rec("5")],
                }],
            },
        ],
    };
    let (v2, groups) = run2(Decoded::Logs(req.clone()));
    assert_eq!(groups, 3);
    let events = run(Decoded::Logs(req));
    let ids: std::collections::HashSet<_> = events.iter().map(|e| e[2..18].to_vec()).collect();
    assert_eq!(ids.len(), 5, "ids are distinct");
    let envs = envelopes(&events);
    let want = |resource: Option<Resource>,
                rs: &str,
                scope: Option<InstrumentationScope>,
                ss: &str,
                b: &str| Envelope {
        source: "otlp".into(),
        observed_time_unix_nano: 42,
        resource,
        resource_schema_url: rs.into(),
        scope,
        scope_schema_url: ss.into(),
        record: Some(Record::Log(rec(b))),
        ..Default::default()
    };
    // Records 1, 2 and 5 are in the first resource and scope.
    let in_first = |b: &str| {
        want(
            Some(res.clone()),
            "https://r",
            Some(scope.clone()),
            "https://s",
            b,
        )
    };
    assert_eq!(
        envs,
        vec![
            in_first("1"),
            in_first("2"),
            want(Some(res.clone()), "https://r", None, "", "3"),
            want(None, "", Some(scope.clone()), "", "4"),
            in_first("5"),
        ]
    );
    assert_eq!(v2, envs, "format 2 reads back as format 1");
}

#[test]
fn every_metric_kind_becomes_one_envelope_per_point() {
    let num = |v: i64| NumberDataPoint {
        time_unix_nano: v as u64,
        value: Some(number_data_point::Value::AsInt(v)),
        ..Default::default()
    };
    let shell = |name: &str| Metric {
        name: name.into(),
        description: "d".into(),
        unit: "ms".into(),
        metadata: vec![kv("m", "x")],
        data: None,
    };
    let with = |name: &str, data: Data| Metric {
        data: Some(data),
        ..shell(name)
    };
    let exponential_point = ExponentialHistogramDataPoint {
        scale: -2,
        positive: Some(exponential_histogram_data_point::Buckets {
            offset: -1,
            bucket_counts: vec![0, 4],
        }),
        ..Default::default()
    };
    let metrics = vec![
        with(
            "g",
            Data::Gauge(Gauge {
                data_points: vec![num(1), num(2)],
            }),
        ),
        with(
            "s",
            Data::Sum(Sum {
                data_points: vec![num(3)],
                aggregation_temporality: 2,
                is_monotonic: true,
            }),
        ),
        with(
            "h",
            Data::Histogram(Histogram {
                data_points: vec![HistogramDataPoint {
                    count: 2,
                    bucket_counts: vec![1, 1],
                    explicit_bounds: vec![5.0],
                    sum: Some(3.0),
                    ..Default::default()
                }],
                aggregation_temporality: 1,
            }),
        ),
        with(
            "e",
            Data::ExponentialHistogram(ExponentialHistogram {
                data_points: vec![exponential_point],
                aggregation_temporality: 2,
            }),
        ),
        with(
            "q",
            Data::Summary(Summary {
                data_points: vec![SummaryDataPoint {
                    quantile_values: vec![summary_data_point::ValueAtQuantile {
                        quantile: 0.5,
                        value: 1.5,
                    }],
                    ..Default::default()
                }],
            }),
        ),
        with("empty", Data::Gauge(Gauge::default())),
    ];
    let req = ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            scope_metrics: vec![ScopeMetrics {
                metrics: metrics.clone(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let (v2, _) = run2(Decoded::Metrics(req.clone()));
    let envs = envelopes(&run(Decoded::Metrics(req)));
    assert_eq!(v2, envs, "format 2 reads back as format 1");
    let got: Vec<Metric> = envs
        .into_iter()
        .map(|e| match e.record {
            Some(Record::Metric(m)) => m,
            other => panic!("not a metric: {other:?}"),
        })
        .collect();
    let mut want = Vec::new();
    for m in metrics {
        let one = |d| Metric {
            data: Some(d),
            ..shell(&m.name)
        };
        match m.data.unwrap() {
            Data::Gauge(g) => want.extend(g.data_points.into_iter().map(|p| {
                one(Data::Gauge(Gauge {
                    data_points: vec![p],
                }))
            })),
            Data::Sum(s) => want.extend(s.data_points.iter().map(|p| {
                one(Data::Sum(Sum {
                    data_points: vec![p.clone()],
                    ..s.clone()
                }))
            })),
            d => want.push(one(d)),
        }
    }
    assert_eq!(got, want);
}

#[test]
fn a_metric_without_data_is_refused() {
    let req = ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "future".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let e = split(Decoded::Metrics(req), "s", 1, usize::MAX, |_| {}).unwrap_err();
    assert!(
        e.to_string()
            .contains("resourceMetrics[0].scopeMetrics[0].metrics[0]"),
        "{e}"
    );
}

#[test]
fn the_limit_counts_framed_bytes() {
    let req = ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: vec![LogRecord::default(); 10],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let one = run(Decoded::Logs(ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: vec![LogRecord::default()],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }))[0]
        .len();
    let exact = 10 * (one + 4);
    assert!(split(Decoded::Logs(req.clone()), "otlp", 42, exact, |_| {}).is_ok());
    let e = split(Decoded::Logs(req.clone()), "otlp", 42, exact - 1, |_| {}).unwrap_err();
    assert!(matches!(e, SplitError::TooLarge { .. }));
    // Format 2: the context counts too.
    let s = split_as(
        Decoded::Logs(req.clone()),
        "otlp",
        42,
        usize::MAX,
        true,
        |_| {},
    )
    .unwrap();
    let exact = (s.bytes + 4 * s.events) as usize + s.context.len();
    assert!(split_as(Decoded::Logs(req.clone()), "otlp", 42, exact, true, |_| {}).is_ok());
    let e = split_as(Decoded::Logs(req), "otlp", 42, exact - 1, true, |_| {}).unwrap_err();
    assert!(matches!(e, SplitError::TooLarge { .. }));
}

/// A request like the e2e benchmark's (a resource of six attributes, a
/// scope, 100 records with a 150-byte body, two attributes, times,
/// severity, trace context): what a record costs in each format.
#[test]
fn a_record_costs_its_own_bytes_and_a_share_of_one_context() {
    let rec = |n: usize| LogRecord {
        time_unix_nano: 1_700_000_000_000_000_000 + n as u64,
        observed_time_unix_nano: 1_700_000_000_000_000_007 + n as u64,
        severity_number: 9,
        severity_text: "INFO".into(),
        body: Some(AnyValue {
            value: Some(any_value::Value::StringValue(format!("{n:0150}"))),
        }),
        attributes: vec![kv("log.iostream", "stdout"), kv("thread.id", "7")],
        flags: 1,
        trace_id: vec![n as u8; 16],
        span_id: vec![n as u8; 8],
        ..Default::default()
    };
    let req = ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: [
                    ("service.name", "checkout"),
                    ("service.version", "1.4.2"),
                    (
                        "service.instance.id",
                        "7233be56-33bb-4d09-8d46-649d95da0b2b",
                    ),
                    ("host.name", "gateway-017"),
                    ("telemetry.sdk.name", "opentelemetry"),
                    ("telemetry.sdk.language", "python"),
                ]
                .iter()
                .map(|(k, v)| kv(k, v))
                .collect(),
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: "checkout.http".into(),
                    version: "1.4.2".into(),
                    ..Default::default()
                }),
                log_records: (0..100).map(rec).collect(),
                schema_url: String::new(),
            }],
            schema_url: "https://opentelemetry.io/schemas/1.21.0".into(),
        }],
    };
    let record = rec(0).encoded_len();
    let one = split(Decoded::Logs(req.clone()), "otlp", 42, usize::MAX, |_| {}).unwrap();
    let two = split_as(Decoded::Logs(req), "otlp", 42, usize::MAX, true, |_| {}).unwrap();
    let per = |s: &Split| (s.bytes as f64 + s.context.len() as f64) / s.events as f64;
    eprintln!(
        "record {record} bytes; format 1: {:.1} bytes per record; format 2: {:.1} own + {:.1} of the context ({} bytes)",
        per(&one),
        two.bytes as f64 / 100.0,
        two.context.len() as f64 / 100.0,
        two.context.len()
    );
    // Own: the record's key and length, nothing else.
    assert_eq!(two.bytes as usize, 100 * (record + 3));
    assert!(per(&one) > (record + 250) as f64);
    assert!(per(&two) < (record + 7) as f64);
}

/// Spans and their resources, and how few bytes a record's own event
/// takes beyond the record.
#[test]
fn format_2_events_hold_only_the_record_and_its_group() {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    let span = |n: u8| Span {
        trace_id: vec![n; 16],
        span_id: vec![n; 8],
        name: format!("op{n}"),
        ..Default::default()
    };
    let rs = |svc: &str, spans: Vec<Span>| ResourceSpans {
        resource: Some(Resource {
            attributes: vec![kv("service.name", svc)],
            ..Default::default()
        }),
        scope_spans: vec![ScopeSpans {
            spans,
            ..Default::default()
        }],
        ..Default::default()
    };
    let req = ExportTraceServiceRequest {
        resource_spans: vec![rs("a", vec![span(1), span(2)]), rs("b", vec![span(3)])],
    };
    let (v2, groups) = run2(Decoded::Traces(req.clone()));
    assert_eq!(groups, 2);
    assert_eq!(v2, envelopes(&run(Decoded::Traces(req.clone()))));
    let mut own = Vec::new();
    split_as(Decoded::Traces(req), "otlp", 42, usize::MAX, true, |e| {
        own.push(e.to_vec())
    })
    .unwrap();
    for (e, (n, group)) in own.iter().zip([(1u8, 0usize), (2, 0), (3, 1)]) {
        let record = span(n).encoded_len();
        let extra = if group == 0 { 0 } else { 2 };
        assert_eq!(e.len(), 2 + record + extra);
    }
}
