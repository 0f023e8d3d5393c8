use super::*;
use crate::sources::otlp_http::cost::schema::{sz, EXPONENTIAL_POINT, METRIC, SPAN};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use prost::Message;

fn logs(records: Vec<LogRecord>) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn record(attrs: usize) -> LogRecord {
    LogRecord {
        body: Some(AnyValue {
            value: Some(any_value::Value::StringValue("a line of text".repeat(4))),
        }),
        attributes: (0..attrs)
            .map(|i| KeyValue {
                key: format!("key{i}"),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue("value".into())),
                }),
                ..Default::default()
            })
            .collect(),
        trace_id: vec![1; 16],
        span_id: vec![2; 8],
        ..Default::default()
    }
}

#[test]
fn counts_records_and_bounds_what_prost_holds() {
    let req = logs((0..1000).map(|i| record(i % 7)).collect());
    let body = req.encode_to_vec();
    let b = bound(Signal::Logs, &body, u64::MAX).unwrap();
    assert_eq!(b.records, 1000);
    // At least the structs themselves, and not wildly more than the
    // body times the record's size over its encoding.
    let structs = 1000 * sz::<LogRecord>();
    assert!(b.bytes > structs, "{} <= {structs}", b.bytes);
    assert!(
        b.bytes < 4 * structs + 16 * body.len() as u64,
        "{}",
        b.bytes
    );
    assert_eq!(ExportLogsServiceRequest::decode(&body[..]).unwrap(), req);
}

/// The general walk alone over one message.
fn walked(inner: &[u8], d: &Desc) -> Result<u64, WalkError> {
    let mut w = Walk {
        bound: Bound::default(),
        limit: u64::MAX,
    };
    w.message(inner, d, 1)?;
    Ok(w.bound.bytes)
}

#[test]
fn the_shortcuts_sum_what_the_general_walk_sums() {
    let s = |v: &str| AnyValue {
        value: Some(any_value::Value::StringValue(v.into())),
    };
    let kv = |k: &str, v: Option<AnyValue>| KeyValue {
        key: k.into(),
        value: v,
        ..Default::default()
    };
    let anys = [
        s(""),
        s("x"),
        s(&"y".repeat(127)),
        s(&"z".repeat(128)),
        AnyValue {
            value: Some(any_value::Value::IntValue(7)),
        },
        AnyValue::default(),
    ];
    let mut taken = 0;
    for a in &anys {
        let body = a.encode_to_vec();
        if let Some(c) = shortcut(&body, &ANY_VALUE) {
            taken += 1;
            assert_eq!(Ok(c), walked(&body, &ANY_VALUE), "{a:?}");
        }
        for key in ["", "k", &"k".repeat(127), &"k".repeat(128)] {
            for v in [Some(a.clone()), None] {
                let kv = kv(key, v);
                let body = kv.encode_to_vec();
                if let Some(c) = shortcut(&body, &KEY_VALUE) {
                    taken += 1;
                    assert_eq!(Ok(c), walked(&body, &KEY_VALUE), "{kv:?}");
                }
            }
        }
    }
    assert_eq!(taken, 7, "the short forms were not all taken");
    // A string with a field after it, or cut short, is the general
    // walk's to judge.
    assert_eq!(shortcut(&[0x0a, 1, b'a', 0x18, 1], &ANY_VALUE), None);
    assert_eq!(shortcut(&[0x0a, 2, b'a'], &ANY_VALUE), None);
    assert_eq!(
        shortcut(&[0x0a, 1, b'k', 0x12, 3, 0x0a, 1], &KEY_VALUE),
        None
    );
}

#[test]
fn the_log_record_walk_sums_what_the_general_walk_sums() {
    let kvlist = AnyValue {
        value: Some(any_value::Value::KvlistValue(
            opentelemetry_proto::tonic::common::v1::KeyValueList {
                values: record(4).attributes,
            },
        )),
    };
    let mut odd = record(2);
    odd.body = Some(kvlist.clone());
    odd.attributes.push(KeyValue {
        key: "nested".into(),
        value: Some(kvlist),
        ..Default::default()
    });
    odd.attributes.push(KeyValue::default());
    odd.severity_text = "WARN".into();
    odd.event_name = "x".repeat(300);
    let mut with_unknown = record(1).encode_to_vec();
    // Unknown varint, fixed64 and length-delimited fields, and field 5
    // as a varint (a wire type prost refuses for it: nothing counted).
    with_unknown.extend_from_slice(&[0x98, 0x06, 0x01, 0x21, 0, 0, 0, 0, 0, 0, 0, 0]);
    with_unknown.extend_from_slice(&[0xa2, 0x06, 0x02, b'h', b'i', 0x28, 0x05]);
    let bodies = [
        record(0).encode_to_vec(),
        record(5).encode_to_vec(),
        record(40).encode_to_vec(),
        LogRecord::default().encode_to_vec(),
        odd.encode_to_vec(),
        with_unknown,
    ];
    for body in &bodies {
        let mut w = Walk {
            bound: Bound::default(),
            limit: u64::MAX,
        };
        w.log_record(body, 3).unwrap();
        assert_eq!(Ok(w.bound.bytes), walked(body, &LOG_RECORD));
    }
    // Cut short: both refuse it alike.
    let cut = &bodies[1][..bodies[1].len() - 3];
    let mut w = Walk {
        bound: Bound::default(),
        limit: u64::MAX,
    };
    assert_eq!(w.log_record(cut, 3), walked(cut, &LOG_RECORD).map(drop));
}

#[test]
fn every_field_that_allocates_is_found_by_its_number() {
    for d in [&LOG_RECORD, &SPAN, &METRIC, &EXPONENTIAL_POINT, &ANY_VALUE] {
        for (i, &(n, _)) in d.fields.iter().enumerate() {
            assert_eq!(d.field(n).map(|(j, _)| j), Some(i));
        }
        assert!(d.field(0).is_none() && d.field(99).is_none());
    }
}

#[test]
fn stops_at_the_limit() {
    let body = logs(vec![LogRecord::default(); 100_000]).encode_to_vec();
    match bound(Signal::Logs, &body, 1 << 20) {
        Err(WalkError::Over(o)) => {
            assert!(o.bytes > 1 << 20);
            assert!(o.records < 100_000);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_input_is_refused_where_prost_refuses_it() {
    let mut body = logs(vec![record(2)]).encode_to_vec();
    body.extend_from_slice(&[0x0a, 0x05]);
    assert!(ExportLogsServiceRequest::decode(&body[..]).is_err());
    assert_eq!(
        bound(Signal::Logs, &body, u64::MAX),
        Err(WalkError::Malformed("buffer underflow"))
    );
}

#[test]
fn unknown_fields_and_groups_are_skipped_like_prost_does() {
    let mut body = logs(vec![record(1)]).encode_to_vec();
    // Field 99 as a varint, field 98 as a group holding a fixed64.
    body.extend_from_slice(&[0x98, 0x06, 0x01]);
    body.extend_from_slice(&[0x93, 0x06, 0x09, 1, 2, 3, 4, 5, 6, 7, 8, 0x94, 0x06]);
    ExportLogsServiceRequest::decode(&body[..]).unwrap();
    let b = bound(Signal::Logs, &body, u64::MAX).unwrap();
    assert_eq!(b.records, 1);
}
