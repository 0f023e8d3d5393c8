//! An event's fields besides its body as `LogRecord` bytes: time (1),
//! severity number (2) and text (3), attributes (6), written by the
//! record writer of `event/`. The file source splices them into the record
//! it writes after the body, so a processed line is still encoded without
//! building a `LogRecord`.

use opentelemetry_proto::tonic::common::v1::AnyValue;

use super::{Event, Value};
use crate::event::{AttrValue, FieldWriter, LogFields};

/// Appends `ev`'s time, severity and attributes (record fields 1, 2, 3, 6).
pub fn encode(ev: &Event<'_>, out: &mut Vec<u8>) {
    let mut w = FieldWriter::new(out);
    w.time(ev.time_unix_nano);
    w.severity(ev.severity_number, &ev.severity_text);
    for (k, v) in &ev.attrs {
        w.attr(k, v.as_attr());
    }
}

impl Value {
    /// The value as the record writer takes it (borrowed; a nested value
    /// is encoded in place).
    #[inline]
    pub fn as_attr(&self) -> AttrValue<'_> {
        match self {
            Value::Str(s) => AttrValue::Str(s),
            Value::Int(i) => AttrValue::Int(*i),
            Value::Double(d) => AttrValue::Double(*d),
            Value::Bool(b) => AttrValue::Bool(*b),
            Value::Any(a) => AttrValue::Any(a),
        }
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
    use prost::Message;

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
