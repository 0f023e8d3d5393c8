use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, ArrayValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Exemplar, Gauge, Histogram,
    HistogramDataPoint, Metric, NumberDataPoint, Sum,
};
use prost::Message;

use super::*;

fn kv(k: &str, v: Option<any_value::Value>) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: v }),
        ..Default::default()
    }
}

fn s(v: &str) -> Option<any_value::Value> {
    Some(any_value::Value::StringValue(v.into()))
}

fn points() -> Vec<NumberDataPoint> {
    vec![
        NumberDataPoint {
            time_unix_nano: 1_700_000_000_123_000_000,
            start_time_unix_nano: 5,
            value: Some(number_data_point::Value::AsDouble(2.5)),
            attributes: vec![
                kv("device", s("sda")),
                kv("empty", s("")),
                kv("nothing", None),
                KeyValue {
                    key: "absent".into(),
                    value: None,
                    ..Default::default()
                },
                kv("n", Some(any_value::Value::IntValue(-3))),
                kv(
                    "list",
                    Some(any_value::Value::ArrayValue(ArrayValue {
                        values: vec![AnyValue { value: s("x") }],
                    })),
                ),
            ],
            exemplars: vec![Exemplar {
                time_unix_nano: 1,
                ..Default::default()
            }],
            flags: 1,
        },
        NumberDataPoint {
            value: Some(number_data_point::Value::AsInt(-7)),
            ..Default::default()
        },
        NumberDataPoint::default(),
    ]
}

fn metric(data: metric::Data) -> Metric {
    Metric {
        name: "system.disk.io".into(),
        description: "Disk bytes transferred.".into(),
        unit: "By".into(),
        data: Some(data),
        metadata: vec![kv("m", s("v"))],
    }
}

/// A metric's name, description, unit and points (time, value, flags,
/// attributes as text): what the reader and prost are compared by.
type View = (
    String,
    String,
    String,
    Vec<(u64, Option<Number>, u32, Vec<(String, String)>)>,
);

/// What prost decodes, in the reader's terms.
fn prost_view(bytes: &[u8]) -> View {
    let m = Metric::decode(bytes).expect("prost decodes");
    let points = match m.data {
        Some(metric::Data::Gauge(g)) => g.data_points,
        Some(metric::Data::Sum(s)) => s.data_points,
        _ => panic!("a number metric"),
    };
    let points = points
        .into_iter()
        .map(|p| {
            let value = p.value.map(|v| match v {
                number_data_point::Value::AsDouble(d) => Number::Double(d),
                number_data_point::Value::AsInt(i) => Number::Int(i),
            });
            let attrs = p
                .attributes
                .iter()
                .map(|a| {
                    (
                        a.key.clone(),
                        format!("{:?}", a.value.as_ref().and_then(|v| v.value.clone())),
                    )
                })
                .collect();
            (p.time_unix_nano, value, p.flags, attrs)
        })
        .collect();
    (m.name, m.description, m.unit, points)
}

fn reader_view(bytes: &[u8]) -> View {
    let m = MetricPoints::read(bytes).expect("read in place");
    let points = m
        .points()
        .map(|p| {
            let attrs = p
                .attributes()
                .map(|a| {
                    let v = match a.value {
                        ValueRef::None => None,
                        ValueRef::Str(s) => Some(any_value::Value::StringValue(s.into())),
                        ValueRef::Other(b) => AnyValue::decode(b).expect("checked").value,
                    };
                    (a.key.to_string(), format!("{v:?}"))
                })
                .collect();
            (p.time_unix_nano, p.value, p.flags, attrs)
        })
        .collect();
    (m.name.into(), m.description.into(), m.unit.into(), points)
}

/// Gauges and sums read in place give what prost decodes, field by field.
#[test]
fn points_read_in_place_are_prosts() {
    let gauge = metric(metric::Data::Gauge(Gauge {
        data_points: points(),
    }))
    .encode_to_vec();
    assert_eq!(reader_view(&gauge), prost_view(&gauge));
    assert_eq!(MetricPoints::read(&gauge).unwrap().kind, NumberKind::Gauge);
    for (monotonic, temporality) in [
        (true, AggregationTemporality::Cumulative),
        (false, AggregationTemporality::Delta),
    ] {
        let sum = metric(metric::Data::Sum(Sum {
            data_points: points(),
            aggregation_temporality: temporality as i32,
            is_monotonic: monotonic,
        }))
        .encode_to_vec();
        assert_eq!(reader_view(&sum), prost_view(&sum));
        assert_eq!(
            MetricPoints::read(&sum).unwrap().kind,
            NumberKind::Sum {
                monotonic,
                temporality: temporality as i32
            }
        );
    }
    // A bare gauge: empty strings, no points.
    let bare = Metric {
        data: Some(metric::Data::Gauge(Gauge::default())),
        ..Default::default()
    }
    .encode_to_vec();
    assert_eq!(reader_view(&bare), prost_view(&bare));
}

/// What the reader does not read in place is left to prost.
#[test]
fn other_records_are_declined() {
    let histogram = metric(metric::Data::Histogram(Histogram {
        data_points: vec![HistogramDataPoint::default()],
        aggregation_temporality: 2,
    }))
    .encode_to_vec();
    assert!(MetricPoints::read(&histogram).is_none());
    let no_data = Metric {
        name: "x".into(),
        ..Default::default()
    }
    .encode_to_vec();
    assert!(MetricPoints::read(&no_data).is_none());
    let gauge = metric(metric::Data::Gauge(Gauge {
        data_points: points(),
    }))
    .encode_to_vec();
    // Cut short anywhere: never read as something else.
    for n in 0..gauge.len() {
        if let Some(m) = MetricPoints::read(&gauge[..n]) {
            assert_eq!(
                Some(reader_view(&gauge[..n])),
                Metric::decode(&gauge[..n])
                    .ok()
                    .map(|_| prost_view(&gauge[..n]))
            );
            let _ = m;
        }
    }
    // Two gauges in one record: protobuf merges them, prost reads that.
    let mut twice = gauge.clone();
    twice.extend_from_slice(&gauge);
    assert!(MetricPoints::read(&twice).is_none());
    // A name that is not UTF-8.
    let mut bad = Metric {
        name: "ab".into(),
        data: Some(metric::Data::Gauge(Gauge::default())),
        ..Default::default()
    }
    .encode_to_vec();
    bad[2] = 0xff;
    assert!(MetricPoints::read(&bad).is_none());
    assert!(Metric::decode(bad.as_slice()).is_err());
}

/// An event decoded lean is the event decoded, its gauge left in place;
/// any other record is decoded as always.
#[test]
fn lean_events_are_the_decoded_ones() {
    use crate::event::{Context, Decoder, Envelope, Group, Record};
    use bytes::Bytes;

    let ctx = Context {
        groups: vec![Group {
            source: "scrape".into(),
            id_seed: vec![7; 16],
            observed_time_unix_nano: 100,
            ..Default::default()
        }],
    };
    let context = Bytes::from(ctx.encode_to_vec());
    let gauge = metric(metric::Data::Gauge(Gauge {
        data_points: points(),
    }));
    let histogram = metric(metric::Data::Histogram(Histogram {
        data_points: vec![HistogramDataPoint::default()],
        aggregation_temporality: 2,
    }));
    for (m, in_place) in [(gauge, true), (histogram, false)] {
        let env = Envelope {
            record: Some(Record::Metric(m)),
            observed_delta: 5,
            ..Default::default()
        };
        let data = Bytes::from(env.encode_to_vec());
        let full = Decoder::new().decode(&data, &context, 3).expect("decodes");
        let lean = Decoder::new()
            .decode_lean(&data, &context, 3)
            .expect("decodes");
        assert_eq!(lean.metric_points().is_some(), in_place);
        assert_eq!(lean.record().is_none(), in_place);
        assert_eq!(lean.id, full.id);
        assert_eq!(lean.signal(), full.signal());
        assert_eq!(lean.observed_time_unix_nano(), 105);
        assert_eq!(lean.to_envelope(), full.to_envelope());
        // Format 1: the whole envelope, its id stored.
        let whole = Bytes::from(full.to_envelope().encode_to_vec());
        let none = Bytes::new();
        let full1 = Decoder::new().decode(&whole, &none, 0).expect("decodes");
        let lean1 = Decoder::new()
            .decode_lean(&whole, &none, 0)
            .expect("decodes");
        assert_eq!(lean1.metric_points().is_some(), in_place);
        assert_eq!(lean1.to_envelope(), full1.to_envelope());
    }
    // A format-1 event without its id is refused either way.
    let bare = Bytes::from(
        Envelope {
            record: Some(Record::Metric(metric(
                metric::Data::Gauge(Gauge::default()),
            ))),
            ..Default::default()
        }
        .encode_to_vec(),
    );
    assert!(Decoder::new().decode_lean(&bare, &Bytes::new(), 0).is_err());
}
