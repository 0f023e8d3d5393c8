use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, summary_data_point::ValueAtQuantile, AggregationTemporality,
    ExponentialHistogram, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint, Sum,
    Summary, SummaryDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::convert::{encode_request, point_millis, unsendable, write_request, STALE_NAN};
use super::proto::{Label, MetricType, Sample, TimeSeries, WriteRequest};
use super::*;
use crate::event::{Decoder, Envelope, EventId, Record, Stored};
use crate::sinks::test_events;
use prost::Message;

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

fn resource(attrs: &[(&str, &str)]) -> Resource {
    Resource {
        attributes: attrs.iter().map(|(k, v)| kv(k, v)).collect(),
        ..Default::default()
    }
}

fn event(res: &[(&str, &str)], m: Metric) -> Item {
    let env = Envelope {
        id: EventId::random().0.to_vec(),
        resource: Some(resource(res)),
        record: Some(Record::Metric(m)),
        observed_time_unix_nano: 9_000_000_000,
        ..Default::default()
    };
    test_events::item(&env, 0)
}

const MS: u64 = 1_000_000;

fn point(t_ms: u64, v: f64, attrs: &[(&str, &str)]) -> NumberDataPoint {
    NumberDataPoint {
        time_unix_nano: t_ms * MS,
        value: Some(number_data_point::Value::AsDouble(v)),
        attributes: attrs.iter().map(|(k, v)| kv(k, v)).collect(),
        ..Default::default()
    }
}

fn gauge(name: &str, unit: &str, p: NumberDataPoint) -> Metric {
    Metric {
        name: name.into(),
        unit: unit.into(),
        data: Some(metric::Data::Gauge(Gauge {
            data_points: vec![p],
        })),
        ..Default::default()
    }
}

fn sum(name: &str, unit: &str, monotonic: bool, p: NumberDataPoint) -> Metric {
    Metric {
        name: name.into(),
        unit: unit.into(),
        data: Some(metric::Data::Sum(Sum {
            data_points: vec![p],
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: monotonic,
        })),
        ..Default::default()
    }
}

const HOST: &[(&str, &str)] = &[
    ("service.name", "holdfast"),
    ("service.instance.id", "edge-1"),
    ("host.name", "edge-1"),
];

/// The events as the sink's delivery task decodes them: gauges and sums
/// left in their stored bytes.
fn lean(items: &[Item]) -> Vec<Stored> {
    let mut d = Decoder::new();
    items
        .iter()
        .map(|i| {
            d.decode_lean(&i.data, &i.context, i.index)
                .expect("decodes")
        })
        .collect()
}

/// The request for `items`; every test also checks that points read in
/// place give the bytes of the same points decoded.
fn request(items: &[Item], resource_to_labels: bool) -> WriteRequest {
    let decoded = encode_request(items.iter().map(|i| &i.ev), resource_to_labels);
    let lean = lean(items);
    assert_eq!(
        encode_request(lean.iter(), resource_to_labels),
        decoded,
        "read in place or decoded, the same request"
    );
    write_request(items.iter().map(|i| &i.ev), resource_to_labels)
}

/// Each series as `name{k="v",…}` → its samples, for readable asserts.
fn series(req: &WriteRequest) -> Vec<(String, Vec<(i64, f64)>)> {
    req.timeseries
        .iter()
        .map(|s| {
            let name = s
                .labels
                .iter()
                .find(|l| l.name == "__name__")
                .map(|l| l.value.clone())
                .unwrap_or_default();
            let rest: Vec<String> = s
                .labels
                .iter()
                .filter(|l| l.name != "__name__")
                .map(|l| format!("{}=\"{}\"", l.name, l.value))
                .collect();
            let samples = s.samples.iter().map(|x| (x.timestamp, x.value)).collect();
            (format!("{name}{{{}}}", rest.join(",")), samples)
        })
        .collect()
}

#[test]
fn gauges_and_sums_become_named_series_with_job_and_instance() {
    let items = vec![
        event(
            HOST,
            gauge(
                "system.memory.usage",
                "By",
                point(1000, 42.0, &[("state", "used")]),
            ),
        ),
        event(
            HOST,
            sum(
                "system.cpu.time",
                "s",
                true,
                point(1000, 7.5, &[("cpu.mode", "idle")]),
            ),
        ),
        event(
            HOST,
            sum(
                "system.processes.count",
                "{processes}",
                false,
                point(1000, 3.0, &[]),
            ),
        ),
    ];
    let req = request(&items, false);
    assert_eq!(
        series(&req),
        [
            (
                "system_memory_usage_bytes{instance=\"edge-1\",job=\"holdfast\",state=\"used\"}"
                    .to_string(),
                vec![(1000, 42.0)]
            ),
            (
                "system_cpu_time_seconds_total{cpu_mode=\"idle\",instance=\"edge-1\",job=\"holdfast\"}"
                    .to_string(),
                vec![(1000, 7.5)]
            ),
            (
                "system_processes_count{instance=\"edge-1\",job=\"holdfast\"}".to_string(),
                vec![(1000, 3.0)]
            ),
        ]
    );
    // Metadata once per family, with the type the expansion gave.
    let types: Vec<(String, i32)> = req
        .metadata
        .iter()
        .map(|m| (m.metric_family_name.clone(), m.r#type))
        .collect();
    assert!(types.contains(&(
        "system_cpu_time_seconds_total".into(),
        MetricType::Counter as i32
    )));
    assert!(types.contains(&("system_processes_count".into(), MetricType::Gauge as i32)));
}

#[test]
fn labels_are_sorted_with_the_name_among_them() {
    let items = vec![event(
        HOST,
        gauge("g", "", point(1, 1.0, &[("Zone", "z"), ("a", "x")])),
    )];
    let req = request(&items, false);
    let names: Vec<&str> = req.timeseries[0]
        .labels
        .iter()
        .map(|l| l.name.as_str())
        .collect();
    assert_eq!(names, ["Zone", "__name__", "a", "instance", "job"]);
}

#[test]
fn series_of_a_request_are_grouped_with_their_samples_in_time_order() {
    let items: Vec<Item> = [3000, 1000, 2000]
        .iter()
        .map(|t| event(HOST, gauge("g", "", point(*t, *t as f64, &[("k", "v")]))))
        .chain([event(HOST, gauge("g", "", point(1500, 0.0, &[("k", "w")])))])
        .collect();
    let req = request(&items, false);
    assert_eq!(req.timeseries.len(), 2);
    assert_eq!(
        series(&req)[0].1,
        [(1000, 1000.0), (2000, 2000.0), (3000, 3000.0)]
    );
}

#[test]
fn job_takes_the_namespace_and_other_resource_attributes_only_when_asked() {
    let res = &[
        ("service.name", "api"),
        ("service.namespace", "shop"),
        ("service.instance.id", "i-1"),
        ("host.name", "h"),
        ("cloud.region", "eu"),
    ];
    let items = vec![event(res, gauge("g", "", point(1, 1.0, &[])))];
    assert_eq!(
        series(&request(&items, false))[0].0,
        "g{instance=\"i-1\",job=\"shop/api\"}"
    );
    assert_eq!(
        series(&request(&items, true))[0].0,
        "g{cloud_region=\"eu\",host_name=\"h\",instance=\"i-1\",job=\"shop/api\"}"
    );
}

#[test]
fn conflicting_keys_join_their_values_and_empty_values_are_no_labels() {
    let items = vec![event(
        &[],
        gauge(
            "g",
            "",
            point(
                1,
                1.0,
                &[
                    ("a.b", "2"),
                    ("a_b", "1"),
                    ("empty", ""),
                    ("__name__", "spoof"),
                ],
            ),
        ),
    )];
    // Sorted by original key: "a.b" before "a_b".
    assert_eq!(
        series(&request(&items, false))[0].0,
        "g{a_b=\"2;1\",key__name__=\"spoof\"}"
    );
}

#[test]
fn a_point_attribute_never_overrides_the_resource_job() {
    let items = vec![event(
        HOST,
        gauge(
            "g",
            "",
            point(1, 1.0, &[("job", "spoofed"), ("instance", "x")]),
        ),
    )];
    assert_eq!(
        series(&request(&items, false))[0].0,
        "g{instance=\"edge-1\",job=\"holdfast\"}"
    );
}

#[test]
fn histograms_expand_to_cumulative_buckets_sum_and_count() {
    let m = Metric {
        name: "http.server.duration".into(),
        unit: "ms".into(),
        data: Some(metric::Data::Histogram(Histogram {
            data_points: vec![HistogramDataPoint {
                time_unix_nano: 5000 * MS,
                count: 10,
                sum: Some(123.5),
                bucket_counts: vec![1, 2, 3, 4],
                explicit_bounds: vec![0.5, 1.0, 25.0],
                attributes: vec![kv("route", "/a")],
                ..Default::default()
            }],
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        })),
        ..Default::default()
    };
    let req = request(&[event(HOST, m)], false);
    let base = "instance=\"edge-1\",job=\"holdfast\"";
    let want: Vec<(String, Vec<(i64, f64)>)> = vec![
        (
            format!("http_server_duration_milliseconds_bucket{{{base},le=\"0.5\",route=\"/a\"}}"),
            vec![(5000, 1.0)],
        ),
        (
            format!("http_server_duration_milliseconds_bucket{{{base},le=\"1\",route=\"/a\"}}"),
            vec![(5000, 3.0)],
        ),
        (
            format!("http_server_duration_milliseconds_bucket{{{base},le=\"25\",route=\"/a\"}}"),
            vec![(5000, 6.0)],
        ),
        (
            format!("http_server_duration_milliseconds_bucket{{{base},le=\"+Inf\",route=\"/a\"}}"),
            vec![(5000, 10.0)],
        ),
        (
            format!("http_server_duration_milliseconds_sum{{{base},route=\"/a\"}}"),
            vec![(5000, 123.5)],
        ),
        (
            format!("http_server_duration_milliseconds_count{{{base},route=\"/a\"}}"),
            vec![(5000, 10.0)],
        ),
    ];
    assert_eq!(series(&req), want);
}

#[test]
fn summaries_expand_to_quantiles_sum_and_count() {
    let m = Metric {
        name: "rpc_latency_seconds".into(),
        data: Some(metric::Data::Summary(Summary {
            data_points: vec![SummaryDataPoint {
                time_unix_nano: 7000 * MS,
                count: 4,
                sum: 2.0,
                quantile_values: vec![
                    ValueAtQuantile {
                        quantile: 0.5,
                        value: 0.25,
                    },
                    ValueAtQuantile {
                        quantile: 0.99,
                        value: 1.5,
                    },
                ],
                ..Default::default()
            }],
        })),
        ..Default::default()
    };
    let req = request(&[event(&[], m)], false);
    assert_eq!(
        series(&req),
        [
            (
                "rpc_latency_seconds{quantile=\"0.5\"}".to_string(),
                vec![(7000, 0.25)]
            ),
            (
                "rpc_latency_seconds{quantile=\"0.99\"}".to_string(),
                vec![(7000, 1.5)]
            ),
            ("rpc_latency_seconds_sum{}".to_string(), vec![(7000, 2.0)]),
            ("rpc_latency_seconds_count{}".to_string(), vec![(7000, 4.0)]),
        ]
    );
}

#[test]
fn a_point_without_a_recorded_value_is_the_staleness_marker_and_nan_stays_nan() {
    let mut stale = point(1, 5.0, &[("k", "stale")]);
    stale.flags = 1;
    let items = vec![
        event(&[], gauge("g", "", stale)),
        event(&[], gauge("g", "", point(1, f64::NAN, &[("k", "nan")]))),
    ];
    let req = request(&items, false);
    assert_eq!(req.timeseries[0].samples[0].value.to_bits(), STALE_NAN);
    let nan = req.timeseries[1].samples[0].value;
    assert!(nan.is_nan() && nan.to_bits() != STALE_NAN);
}

#[test]
fn what_has_no_remote_write_form_is_named() {
    let log = {
        let env = Envelope {
            id: EventId::random().0.to_vec(),
            record: Some(Record::Log(LogRecord::default())),
            ..Default::default()
        };
        test_events::item(&env, 0)
    };
    let expo = event(
        &[],
        Metric {
            name: "e".into(),
            data: Some(metric::Data::ExponentialHistogram(
                ExponentialHistogram::default(),
            )),
            ..Default::default()
        },
    );
    let mut delta = sum("d", "", true, point(1, 1.0, &[]));
    if let Some(metric::Data::Sum(s)) = &mut delta.data {
        s.aggregation_temporality = AggregationTemporality::Delta as i32;
    }
    let mut delta_gauge = sum("d", "", false, point(1, 1.0, &[]));
    if let Some(metric::Data::Sum(s)) = &mut delta_gauge.data {
        s.aggregation_temporality = AggregationTemporality::Delta as i32;
    }
    assert_eq!(unsendable(&log.ev), Some("not_a_metric"));
    assert_eq!(unsendable(&expo.ev), Some("exponential_histogram"));
    assert_eq!(unsendable(&event(&[], delta).ev), Some("delta_temporality"));
    // A non-monotonic delta sum is a gauge: its value stands alone.
    assert_eq!(unsendable(&event(&[], delta_gauge.clone()).ev), None);
    let empty = Metric {
        name: "x".into(),
        ..Default::default()
    };
    assert_eq!(unsendable(&event(&[], empty).ev), Some("no_data_point"));
    // Read in place, the same reasons.
    let mut delta = sum("d", "", true, point(1, 1.0, &[]));
    if let Some(metric::Data::Sum(s)) = &mut delta.data {
        s.aggregation_temporality = AggregationTemporality::Delta as i32;
    }
    let items = [
        log,
        expo,
        event(&[], delta),
        event(&[], delta_gauge),
        event(&[], gauge("g", "", point(3, 1.0, &[]))),
    ];
    let lean = lean(&items);
    assert!(lean[2].metric_points().is_some() && lean[4].metric_points().is_some());
    for (l, i) in lean.iter().zip(&items) {
        assert_eq!(unsendable(l), unsendable(&i.ev));
        assert_eq!(point_millis(l), point_millis(&i.ev));
        // What the quarantine keeps is the whole event.
        assert_eq!(l.to_envelope(), i.ev.to_envelope());
    }
}

fn api() -> RemoteWrite {
    RemoteWrite {
        url: reqwest::Url::parse("http://p:9090/api/v1/write").unwrap(),
        resource_to_labels: false,
        floor: std::sync::Mutex::new(None),
    }
}

#[test]
fn samples_no_newer_than_a_request_refused_as_too_old_are_known_refused() {
    let api = api();
    let at = |t: u64| event(&[], gauge("g", "", point(t, 1.0, &[])));
    let too_old = Refusal {
        kind: "too_old",
        status: 400,
        error: "out of bounds".into(),
    };
    assert_eq!(api.foreknown(&at(1).ev), None);
    // Out of order says nothing about other series.
    api.learn_refusal(
        &[at(5000)],
        &Refusal {
            kind: "out_of_order",
            ..too_old.clone()
        },
    );
    assert_eq!(api.foreknown(&at(1).ev), None);
    // One of 3000..=9000 is older than the cutoff: so is all up to 3000.
    api.learn_refusal(&[at(9000), at(3000), at(4000)], &too_old);
    assert_eq!(api.foreknown(&at(3000).ev), Some(too_old.clone()));
    assert_eq!(api.foreknown(&at(2999).ev), Some(too_old.clone()));
    assert_eq!(api.foreknown(&at(3001).ev), None);
    // The floor never moves back.
    api.learn_refusal(&[at(100)], &too_old);
    assert_eq!(api.foreknown(&at(3000).ev), Some(too_old.clone()));
    // Newer first only where the receiver takes late samples.
    assert_eq!(
        api.refused_events(400, "out of bounds"),
        Some(("too_old", false))
    );
    assert_eq!(
        api.refused_events(500, "too old sample"),
        Some(("too_old", true))
    );
    assert_eq!(
        api.refused_events(400, "out of order sample"),
        Some(("out_of_order", false))
    );
}

#[test]
fn the_body_is_snappy_protobuf_with_the_published_field_numbers() {
    let api = api();
    let items = vec![event(&[], gauge("g", "", point(5, 1.0, &[("a", "b")])))];
    let req = api.encode(&items, 0);
    assert_eq!(req.content_type, "application/x-protobuf");
    assert!(req.headers.contains(&("Content-Encoding", "snappy")));
    assert!(req
        .headers
        .contains(&("X-Prometheus-Remote-Write-Version", "0.1.0")));
    let raw = snap::raw::Decoder::new()
        .decompress_vec(&req.body)
        .expect("snappy block format");
    let back = WriteRequest::decode(raw.as_slice()).unwrap();
    assert_eq!(back, request(&items, false));

    // Field numbers, byte for byte: WriteRequest.timeseries = 1,
    // TimeSeries.labels = 1 and samples = 2, Label.name = 1 and value = 2,
    // Sample.value = 1 (double) and timestamp = 2 (int64).
    let one = WriteRequest {
        timeseries: vec![TimeSeries {
            labels: vec![Label {
                name: "a".into(),
                value: "b".into(),
            }],
            samples: vec![Sample {
                value: 1.0,
                timestamp: 5,
            }],
        }],
        metadata: vec![],
    };
    let mut sample = vec![0x09];
    sample.extend_from_slice(&1.0f64.to_le_bytes());
    sample.extend_from_slice(&[0x10, 0x05]);
    let mut ts = vec![
        0x0a,
        0x06,
        0x0a,
        0x01,
        b'a',
        0x12,
        0x01,
        b'b',
        0x12,
        sample.len() as u8,
    ];
    ts.extend_from_slice(&sample);
    let mut want = vec![0x0a, ts.len() as u8];
    want.extend_from_slice(&ts);
    assert_eq!(one.encode_to_vec(), want);
    // Metadata is field 3: type 1, family name 2, help 4, unit 5.
    let meta = WriteRequest {
        timeseries: vec![],
        metadata: vec![proto::MetricMetadata {
            r#type: MetricType::Counter as i32,
            metric_family_name: "c".into(),
            help: "h".into(),
            unit: "u".into(),
        }],
    };
    assert_eq!(
        meta.encode_to_vec(),
        [0x1a, 0x0b, 0x08, 0x01, 0x12, 0x01, b'c', 0x22, 0x01, b'h', 0x2a, 0x01, b'u']
    );
}

#[test]
fn refusals_of_old_or_out_of_order_samples_are_told_apart() {
    for (status, text, want) in [
        (400, "out of bounds", Some("too_old")),
        (400, "too old sample", Some("too_old")),
        (500, "too old sample", Some("too_old")),
        (400, "out of order sample", Some("out_of_order")),
        (400, "duplicate sample for timestamp", Some("out_of_order")),
        (
            400,
            "the sample has been rejected because its timestamp is too old (err-mimir-sample-too-old)",
            Some("too_old"),
        ),
        (500, "out of bounds", None),
        (500, "internal error", None),
        (400, "invalid metric name", None),
        (429, "too old sample", None),
    ] {
        assert_eq!(refusal(status, text), want, "{status} {text}");
    }
}

/// Events of a format-2 batch share their resource through groups; their
/// labels (made once per group) are those the same events give alone, as
/// format 1 stores them, with groups interleaved.
#[test]
fn grouped_events_give_the_labels_of_self_contained_ones() {
    let envs: Vec<Envelope> = [
        (HOST, 1.0),
        (&[("service.name", "b")][..], 2.0),
        (HOST, 3.0),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (res, v))| Envelope {
        id: EventId::random().0.to_vec(),
        resource: Some(resource(res)),
        record: Some(Record::Metric(gauge(
            "g",
            "",
            point(5 + i as u64, v, &[("k", "x")]),
        ))),
        observed_time_unix_nano: 9_000_000_000,
        ..Default::default()
    })
    .collect();
    let pairs = test_events::both_formats(&envs, 0);
    let v1: Vec<Item> = pairs.iter().map(|p| p.0.clone()).collect();
    let v2: Vec<Item> = pairs.iter().map(|p| p.1.clone()).collect();
    assert!(v2[0].ev.shared_with().is_some());
    for to_labels in [false, true] {
        assert_eq!(request(&v2, to_labels), request(&v1, to_labels));
    }
    assert_eq!(
        series(&request(&v2, false)),
        vec![
            (
                "g{instance=\"edge-1\",job=\"holdfast\",k=\"x\"}".to_string(),
                vec![(5, 1.0), (7, 3.0)]
            ),
            ("g{job=\"b\",k=\"x\"}".to_string(), vec![(6, 2.0)]),
        ]
    );
}
