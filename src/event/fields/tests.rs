use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValueList};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use prost::Message;

use super::*;

/// A value of every shape `Any` carries: an array holding a map.
pub(in crate::event) fn nested() -> AnyValue {
    let kv = |k: &str, v| KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    };
    AnyValue {
        value: Some(any_value::Value::ArrayValue(ArrayValue {
            values: vec![
                AnyValue {
                    value: Some(any_value::Value::KvlistValue(KeyValueList {
                        values: vec![kv("k", any_value::Value::IntValue(-1))],
                    })),
                },
                AnyValue { value: None },
            ],
        })),
    }
}

pub(in crate::event) fn fill(body: AttrValue<'_>, any: &AnyValue, out: &mut impl LogFields) {
    out.time(1_700_000_000_123_456_789);
    out.severity(17, "err");
    out.body(body);
    out.attr("a", AttrValue::Str("v"));
    out.attr("t", AttrValue::Text(b"\xc3"));
    out.attr("u", AttrValue::Text("ü".as_bytes()));
    out.attr("y", AttrValue::Bytes(b"\x00\xff"));
    out.attr("i", AttrValue::Int(-4));
    out.attr("d", AttrValue::Double(-2.5e-300));
    out.attr("z", AttrValue::Double(0.0));
    out.attr("b", AttrValue::Bool(true));
    out.attr("f", AttrValue::Bool(false));
    out.attr("n", AttrValue::Any(any));
    out.attr("e", AttrValue::Str(""));
    out.attr_strs("arr", &["1", "", "three"]);
}

/// The bodies a record can have, each with what prost holds for it.
pub(in crate::event) fn bodies() -> Vec<(AttrValue<'static>, any_value::Value)> {
    use any_value::Value as V;
    vec![
        (AttrValue::Text(b"hello"), V::StringValue("hello".into())),
        (
            AttrValue::Text(b"\xff\xfe not utf-8"),
            V::BytesValue(b"\xff\xfe not utf-8".to_vec()),
        ),
        (AttrValue::Str("x"), V::StringValue("x".into())),
        (AttrValue::Bytes(b"ok"), V::BytesValue(b"ok".to_vec())),
        (AttrValue::Int(i64::MIN), V::IntValue(i64::MIN)),
        (AttrValue::Double(1.5), V::DoubleValue(1.5)),
        (AttrValue::Bool(false), V::BoolValue(false)),
    ]
}

/// The prost side of the comparison holds what each value means.
#[test]
fn a_log_record_gets_each_value_as_meant() {
    use any_value::Value as V;
    let any = nested();
    for (body, want) in bodies() {
        let mut r = LogRecord::default();
        fill(body, &any, &mut r);
        assert_eq!(r.body.and_then(|b| b.value), Some(want));
        let values: Vec<Option<V>> = r
            .attributes
            .iter()
            .map(|kv| kv.value.clone().and_then(|v| v.value))
            .collect();
        assert_eq!(values[1], Some(V::BytesValue(vec![0xc3])));
        assert_eq!(values[2], Some(V::StringValue("ü".into())));
        assert_eq!(values[3], Some(V::BytesValue(vec![0, 0xff])));
        assert_eq!(values[5], Some(V::DoubleValue(-2.5e-300)));
        assert_eq!(values[9], any.value);
    }
}

/// Fields written straight into a buffer, spliced and observed time
/// included, are prost's record, and measuring them gives their length.
#[test]
fn a_field_writer_writes_and_measures_the_same() {
    let any = nested();
    let mut mark = Vec::new();
    let mut m = LogRecord::default();
    m.attr("log.record.truncated", AttrValue::Bool(true));
    m.encode(&mut mark).unwrap();
    for (body, _) in bodies() {
        let mut out = b"kept".to_vec();
        let mut w = FieldWriter::new(&mut out);
        fill(body, &any, &mut w);
        w.raw(&mark);
        w.observed_time(42);
        let mut len = FieldLen::default();
        fill(body, &any, &mut len);
        len.raw(&mark);
        len.observed_time(42);
        assert_eq!(&out[..4], b"kept");
        assert_eq!(out.len() - 4, len.0);

        let mut r = LogRecord::default();
        fill(body, &any, &mut r);
        r.attr("log.record.truncated", AttrValue::Bool(true));
        r.observed_time_unix_nano = 42;
        assert_eq!(out[4..], r.encode_to_vec()[..]);
    }
    // Nothing set, nothing written; the observed time is written even at 0.
    let mut out = Vec::new();
    let mut w = FieldWriter::new(&mut out);
    w.time(0);
    w.severity(0, "");
    assert!(out.is_empty());
    FieldWriter::new(&mut out).observed_time(0);
    assert_eq!(out, [11 << 3 | 1, 0, 0, 0, 0, 0, 0, 0, 0]);
}
