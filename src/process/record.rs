//! An event's fields besides its body as `LogRecord` bytes: time (1),
//! severity number (2) and text (3), attributes (6). The file source
//! splices them into the record it writes after the body, so a processed
//! line is still encoded without building a `LogRecord`.

use bytes::BufMut;
use opentelemetry_proto::tonic::common::v1::AnyValue;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
use prost::Message;

use super::{Event, Value};

/// Appends `ev`'s time, severity and attributes (record fields 1, 2, 3, 6).
pub fn encode(ev: &Event<'_>, out: &mut Vec<u8>) {
    if ev.time_unix_nano != 0 {
        encode_key(1, WireType::SixtyFourBit, out);
        out.put_u64_le(ev.time_unix_nano);
    }
    if ev.severity_number != 0 {
        encode_key(2, WireType::Varint, out);
        encode_varint(ev.severity_number as u64, out);
    }
    if !ev.severity_text.is_empty() {
        put_str(3, &ev.severity_text, out);
    }
    for (k, v) in &ev.attrs {
        let any = any_len(v);
        let kv = str_len(1, k) + key_len(2) + encoded_len_varint(any as u64) + any;
        encode_key(6, WireType::LengthDelimited, out);
        encode_varint(kv as u64, out);
        put_str(1, k, out);
        encode_key(2, WireType::LengthDelimited, out);
        encode_varint(any as u64, out);
        put_any(v, out);
    }
}

fn str_len(tag: u32, s: &str) -> usize {
    key_len(tag) + encoded_len_varint(s.len() as u64) + s.len()
}

fn put_str(tag: u32, s: &str, out: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(s.len() as u64, out);
    out.put_slice(s.as_bytes());
}

/// `AnyValue`'s length: `string_value` 1, `bool_value` 2, `int_value` 3,
/// `double_value` 4, or a nested value encoded by prost.
fn any_len(v: &Value) -> usize {
    match v {
        Value::Str(s) => str_len(1, s),
        Value::Bool(_) => key_len(2) + 1,
        Value::Int(i) => key_len(3) + encoded_len_varint(*i as u64),
        Value::Double(_) => key_len(4) + 8,
        Value::Any(a) => a.encoded_len(),
    }
}

fn put_any(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Str(s) => put_str(1, s, out),
        Value::Bool(b) => {
            encode_key(2, WireType::Varint, out);
            encode_varint(*b as u64, out);
        }
        Value::Int(i) => {
            encode_key(3, WireType::Varint, out);
            encode_varint(*i as u64, out);
        }
        Value::Double(d) => {
            encode_key(4, WireType::SixtyFourBit, out);
            out.put_f64_le(*d);
        }
        Value::Any(a) => a.encode_raw(out),
    }
}

/// An `AnyValue` of a borrowed [`Value`] (a copy; [`Value::into_any`]
/// moves), for an OTLP record's attributes and `holdfast check --sample`.
pub fn to_any(v: &Value) -> AnyValue {
    v.clone().into_any()
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
    use opentelemetry_proto::tonic::logs::v1::LogRecord;

    use super::*;
    use crate::event::EventId;

    #[test]
    fn fields_decode_as_a_log_record() {
        let mut ev = Event::new("hi", EventId([0; 16]));
        ev.time_unix_nano = 1_700_000_000_000_000_000;
        ev.severity_number = 17;
        ev.severity_text = "ERROR".into();
        ev.set("s", Value::Str("x".into()));
        ev.set("i", Value::Int(-3));
        ev.set("d", Value::Double(1.5));
        ev.set("b", Value::Bool(true));
        let nested = AnyValue {
            value: Some(any_value::Value::StringValue("n".into())),
        };
        ev.set("n", Value::Any(nested.clone()));
        let mut out = Vec::new();
        encode(&ev, &mut out);
        let r = LogRecord::decode(out.as_slice()).expect("a record");
        assert_eq!(r.time_unix_nano, ev.time_unix_nano);
        assert_eq!(r.severity_number, 17);
        assert_eq!(r.severity_text, "ERROR");
        let want: Vec<KeyValue> = ev
            .attrs
            .iter()
            .map(|(k, v)| KeyValue {
                key: k.clone(),
                value: Some(to_any(v)),
                ..Default::default()
            })
            .collect();
        assert_eq!(r.attributes, want);
        assert_eq!(r.attributes[4].value, Some(nested));
        assert_eq!(
            r.attributes[1].value.as_ref().and_then(|v| v.value.clone()),
            Some(any_value::Value::IntValue(-3))
        );
    }
}
