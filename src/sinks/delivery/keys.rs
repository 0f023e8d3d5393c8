//! Idempotency keys: what a receiver can use to drop the duplicates that
//! at-least-once delivery produces (`DESIGN.md`, "What each signal
//! tolerates").
//!
//! * logs: the event id (fixed before the append, kept across retries,
//!   replays and restarts);
//! * spans: trace id + span id, which identify a span wherever it came from;
//! * metric points: the series identity (resource, scope, metric name and
//!   the point's attributes, hashed) + the point's timestamp.
//!
//! Keys are ASCII (hex and digits), at most 66 bytes: fit for an
//! Elasticsearch `_id`.

use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::{metric, Metric};
use prost::Message;

use crate::event::{Record, Stored};

/// Appends the key of `ev` to `out`; true when the key is the event id in
/// hex (a log record's), which its document can then reuse.
pub(crate) fn idempotency_key(ev: &Stored, out: &mut String) -> bool {
    let id = &ev.id;
    match ev.record() {
        Some(Record::Span(s)) if s.trace_id.len() == 16 && s.span_id.len() == 8 => {
            push_hex(out, &s.trace_id);
            push_hex(out, &s.span_id);
            false
        }
        Some(Record::Metric(m)) => match point(m) {
            Some(p) => {
                let series = series_identity(ev, m, p.attributes);
                push_hex(out, &series.to_be_bytes());
                out.push('-');
                out.push_str(&p.time_unix_nano.to_string());
                false
            }
            None => {
                push_hex(out, &id.0);
                true
            }
        },
        _ => {
            push_hex(out, &id.0);
            true
        }
    }
}

/// The key as a new string.
#[cfg(test)]
pub(crate) fn key_of(ev: &Stored) -> String {
    let mut s = String::with_capacity(66);
    idempotency_key(ev, &mut s);
    s
}

/// The one data point of a metric envelope.
pub(crate) struct Point<'a> {
    pub attributes: &'a [KeyValue],
    pub time_unix_nano: u64,
    pub start_time_unix_nano: u64,
}

pub(crate) fn point(m: &Metric) -> Option<Point<'_>> {
    macro_rules! first {
        ($points:expr) => {
            $points.first().map(|p| Point {
                attributes: &p.attributes,
                time_unix_nano: p.time_unix_nano,
                start_time_unix_nano: p.start_time_unix_nano,
            })
        };
    }
    match m.data.as_ref()? {
        metric::Data::Gauge(g) => first!(g.data_points),
        metric::Data::Sum(s) => first!(s.data_points),
        metric::Data::Histogram(h) => first!(h.data_points),
        metric::Data::ExponentialHistogram(h) => first!(h.data_points),
        metric::Data::Summary(s) => first!(s.data_points),
    }
}

/// A 128-bit hash of what makes a series: resource attributes, scope name
/// and version, metric name, point attributes, each attribute list in key
/// order so that the order a producer happened to use does not matter.
fn series_identity(ev: &Stored, m: &Metric, attributes: &[KeyValue]) -> u128 {
    let mut buf = Vec::with_capacity(256);
    buf.extend_from_slice(b"hf-series1");
    let resource = ev.resource().map_or(&[][..], |r| r.attributes.as_slice());
    canonical(resource, &mut buf);
    if let Some(s) = ev.scope() {
        field(&mut buf, s.name.as_bytes());
        field(&mut buf, s.version.as_bytes());
    } else {
        field(&mut buf, b"");
        field(&mut buf, b"");
    }
    field(&mut buf, m.name.as_bytes());
    canonical(attributes, &mut buf);
    xxhash_rust::xxh3::xxh3_128(&buf)
}

fn field(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    buf.extend_from_slice(bytes);
}

fn canonical(attributes: &[KeyValue], buf: &mut Vec<u8>) {
    let mut sorted: Vec<&KeyValue> = attributes.iter().collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    buf.extend_from_slice(&(sorted.len() as u32).to_le_bytes());
    for kv in sorted {
        field(buf, &kv.encode_to_vec());
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends `bytes` in lower-case hex to a byte buffer.
pub(crate) fn push_hex_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len() * 2);
    for &b in bytes {
        out.push(HEX[(b >> 4) as usize]);
        out.push(HEX[(b & 15) as usize]);
    }
}

pub(crate) fn push_hex(out: &mut String, bytes: &[u8]) {
    out.reserve(bytes.len() * 2);
    for &b in bytes {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 15) as usize] as char);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Envelope, EventId};
    use crate::sinks::test_events::{kv, stored};
    use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
    use opentelemetry_proto::tonic::logs::v1::LogRecord;
    use opentelemetry_proto::tonic::metrics::v1::{number_data_point, Gauge, NumberDataPoint};
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::Span;

    fn gauge(attrs: Vec<KeyValue>, t: u64, value: f64) -> Envelope {
        Envelope {
            id: EventId::random().0.to_vec(),
            resource: Some(Resource {
                attributes: vec![kv("host.name", "a")],
                ..Default::default()
            }),
            scope: Some(InstrumentationScope {
                name: "m".into(),
                ..Default::default()
            }),
            record: Some(Record::Metric(Metric {
                name: "cpu".into(),
                data: Some(metric::Data::Gauge(Gauge {
                    data_points: vec![NumberDataPoint {
                        attributes: attrs,
                        time_unix_nano: t,
                        value: Some(number_data_point::Value::AsDouble(value)),
                        ..Default::default()
                    }],
                })),
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    fn key(env: &Envelope) -> String {
        key_of(&stored(env))
    }

    #[test]
    fn logs_are_keyed_by_event_id() {
        let id = EventId::for_file_line(1, 0, 0);
        let env = Envelope {
            id: id.0.to_vec(),
            record: Some(Record::Log(LogRecord::default())),
            ..Default::default()
        };
        assert_eq!(key(&env), id.to_hex());
    }

    #[test]
    fn spans_are_keyed_by_trace_and_span_id() {
        let env = Envelope {
            id: EventId::random().0.to_vec(),
            record: Some(Record::Span(Span {
                trace_id: vec![0xab; 16],
                span_id: vec![0x01; 8],
                ..Default::default()
            })),
            ..Default::default()
        };
        assert_eq!(key(&env), format!("{}{}", "ab".repeat(16), "01".repeat(8)));
    }

    #[test]
    fn metric_points_are_keyed_by_series_and_time() {
        let a = gauge(vec![kv("cpu", "0"), kv("mode", "idle")], 1000, 1.0);
        // Same series, same time, another value and id, attributes in
        // another order: the same key (a resend of the same point).
        let b = gauge(vec![kv("mode", "idle"), kv("cpu", "0")], 1000, 2.0);
        assert_eq!(key(&a), key(&b));
        assert!(key(&a).ends_with("-1000"));
        assert!(key(&a).len() <= 66);
        assert_ne!(
            key(&a),
            key(&gauge(vec![kv("cpu", "1"), kv("mode", "idle")], 1000, 1.0))
        );
        assert_ne!(
            key(&a),
            key(&gauge(vec![kv("cpu", "0"), kv("mode", "idle")], 1001, 1.0))
        );
    }
}
