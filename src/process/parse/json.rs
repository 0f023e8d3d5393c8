//! `json`: a JSON object's members become attributes, in the order
//! written. Strings, integers, floats and booleans map to their OTLP
//! values; nested objects and arrays to `kvlist` / `array` values; `null`
//! is skipped. Members are streamed into the event, never collected into
//! a map first, and each nested value is built once, bottom up, by move:
//! the cost is linear in the line whatever its nesting.
//!
//! A line nested deeper than the step's `max_depth` is not parsed at all
//! (kept whole, marked unparsed and counted): cutting the deep part off
//! would store something the application never wrote.

use std::fmt;

use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, KeyValue, KeyValueList,
};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::Sink;
use crate::process::Value;

/// The default and highest `max_depth`: the line's object is depth 1, an
/// object or array in it depth 2, and so on. Each JSON level is three
/// nested protobuf messages in the stored record (`AnyValue`,
/// `KeyValueList`, `KeyValue`), under the four of an export request
/// (request, resource, scope, record): 32 levels are the most that stay
/// within the recursion limit of 100 nested messages that prost (holdfast's
/// own log reader and OTLP input), protobuf-java and the C++ / Python
/// runtimes apply by default. A deeper value would be stored but could not
/// be read back or sent. `tests::max_depth_is_what_an_export_request_holds`
/// pins it.
pub const MAX_DEPTH: usize = 32;

/// Parses `input` as one JSON object into `sink`; false if it is not one,
/// or nests objects and arrays more than `max_depth` deep.
pub fn parse(input: &str, max_depth: usize, sink: &mut Sink<'_, '_>) -> bool {
    let mut de = serde_json::Deserializer::from_str(input);
    ObjectSeed { sink, max_depth }.deserialize(&mut de).is_ok() && de.end().is_ok()
}

struct ObjectSeed<'s, 'e, 'a> {
    sink: &'s mut Sink<'e, 'a>,
    max_depth: usize,
}

impl<'de> DeserializeSeed<'de> for ObjectSeed<'_, '_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ObjectSeed<'_, '_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let inner = ValueSeed {
            depth: 2,
            max_depth: self.max_depth,
        };
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if let Some(v) = map.next_value_seed(inner)? {
                self.sink.put(&key, v);
            }
        }
        Ok(())
    }
}

/// Reads one value at `depth` (the depth an object or array there would
/// have): `None` for `null`, nested objects and arrays as OTLP `kvlist` /
/// `array` values.
#[derive(Clone, Copy)]
struct ValueSeed {
    depth: usize,
    max_depth: usize,
}

impl ValueSeed {
    /// The seed for the values inside an object or array at this depth, or
    /// the error that makes the whole line unparsed.
    fn enter<E: serde::de::Error>(self) -> Result<ValueSeed, E> {
        if self.depth > self.max_depth {
            return Err(E::custom(format_args!(
                "objects and arrays nested more than {} deep (the step's max_depth)",
                self.max_depth
            )));
        }
        Ok(ValueSeed {
            depth: self.depth + 1,
            ..self
        })
    }
}

impl<'de> DeserializeSeed<'de> for ValueSeed {
    type Value = Option<Value>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<Value>, D::Error> {
        d.deserialize_any(self)
    }
}

/// A nested value as OTLP's (`null` as the empty `AnyValue`), moved, not
/// copied.
fn any(v: Option<Value>) -> AnyValue {
    v.map_or_else(AnyValue::default, Value::into_any)
}

impl<'de> Visitor<'de> for ValueSeed {
    type Value = Option<Value>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> Result<Option<Value>, E> {
        Ok(Some(Value::Bool(b)))
    }
    fn visit_i64<E>(self, i: i64) -> Result<Option<Value>, E> {
        Ok(Some(Value::Int(i)))
    }
    fn visit_u64<E>(self, u: u64) -> Result<Option<Value>, E> {
        Ok(Some(match i64::try_from(u) {
            Ok(i) => Value::Int(i),
            Err(_) => Value::Double(u as f64),
        }))
    }
    fn visit_f64<E>(self, f: f64) -> Result<Option<Value>, E> {
        Ok(Some(Value::Double(f)))
    }
    fn visit_str<E>(self, s: &str) -> Result<Option<Value>, E> {
        Ok(Some(Value::Str(s.to_string())))
    }
    fn visit_string<E>(self, s: String) -> Result<Option<Value>, E> {
        Ok(Some(Value::Str(s)))
    }
    fn visit_unit<E>(self) -> Result<Option<Value>, E> {
        Ok(None)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<Value>, A::Error> {
        let inner = self.enter::<A::Error>()?;
        let mut values = Vec::new();
        while let Some(v) = seq.next_element_seed(inner)? {
            values.push(any(v));
        }
        Ok(Some(Value::Any(AnyValue {
            value: Some(any_value::Value::ArrayValue(ArrayValue { values })),
        })))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Value>, A::Error> {
        let inner = self.enter::<A::Error>()?;
        let mut values = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let v = map.next_value_seed(inner)?;
            values.push(KeyValue {
                key,
                value: Some(any(v)),
                ..Default::default()
            });
        }
        Ok(Some(Value::Any(AnyValue {
            value: Some(any_value::Value::KvlistValue(KeyValueList { values })),
        })))
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use prost::Message;

    use super::*;
    use crate::event::EventId;
    use crate::process::{record, Event};

    /// `{"a":{"a":...{"a":1}...}}` with `depth` objects in all.
    fn nested(depth: usize) -> String {
        format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth))
    }

    fn parse_line(line: &str, max_depth: usize) -> Option<Event<'static>> {
        let mut ev = Event::new("", EventId([0; 16]));
        let mut sink = Sink::new(&mut ev, None);
        parse(line, max_depth, &mut sink).then_some(ev)
    }

    /// How many objects deep an attribute value goes (the line's is 1).
    fn depth_of(v: &AnyValue) -> usize {
        match &v.value {
            Some(any_value::Value::KvlistValue(l)) => {
                1 + l
                    .values
                    .iter()
                    .filter_map(|kv| kv.value.as_ref())
                    .map(depth_of)
                    .max()
                    .unwrap_or(0)
            }
            Some(any_value::Value::ArrayValue(a)) => {
                1 + a.values.iter().map(depth_of).max().unwrap_or(0)
            }
            _ => 0,
        }
    }

    #[test]
    fn nesting_up_to_max_depth_is_kept_whole() {
        for depth in [2, 10, 45, 60] {
            let ev = parse_line(&nested(depth), 64).expect("parses");
            let a = ev.attrs[0].1.clone().into_any();
            assert_eq!(1 + depth_of(&a), depth, "depth {depth}");
        }
        let ev = parse_line(r#"{"a":[[{"b":[1,"x",null,true]}],2.5]}"#, 5).expect("parses");
        let want = AnyValue {
            value: Some(any_value::Value::ArrayValue(ArrayValue {
                values: vec![
                    AnyValue {
                        value: Some(any_value::Value::ArrayValue(ArrayValue {
                            values: vec![AnyValue {
                                value: Some(any_value::Value::KvlistValue(KeyValueList {
                                    values: vec![KeyValue {
                                        key: "b".into(),
                                        value: Some(AnyValue {
                                            value: Some(any_value::Value::ArrayValue(ArrayValue {
                                                values: vec![
                                                    Value::Int(1).into_any(),
                                                    Value::Str("x".into()).into_any(),
                                                    AnyValue::default(),
                                                    Value::Bool(true).into_any(),
                                                ],
                                            })),
                                        }),
                                        ..Default::default()
                                    }],
                                })),
                            }],
                        })),
                    },
                    Value::Double(2.5).into_any(),
                ],
            })),
        };
        assert_eq!(ev.attrs, vec![("a".to_string(), Value::Any(want))]);
    }

    #[test]
    fn a_line_deeper_than_max_depth_is_not_parsed() {
        assert!(parse_line(&nested(8), 8).is_some());
        assert!(parse_line(&nested(9), 8).is_none());
        assert!(parse_line(r#"{"a":[[1]]}"#, 2).is_none());
        assert!(parse_line(r#"{"a":[1],"b":{}}"#, 2).is_some());
        assert!(parse_line(&nested(MAX_DEPTH + 1), MAX_DEPTH).is_none());
        // serde_json's own limit (128), whatever the depth allowed.
        assert!(parse_line(&nested(129), usize::MAX).is_none());
    }

    /// The line's event as a receiver decodes it: one record in an export
    /// request, through prost's default recursion limit.
    fn decodes_as_export_request(depth: usize) -> bool {
        let ev = parse_line(&nested(depth), usize::MAX).expect("parses");
        let mut rec = Vec::new();
        record::encode(&ev, &mut rec);
        // Deeper than a request can hold is deeper than a record can.
        let Ok(rec) = LogRecord::decode(rec.as_slice()) else {
            return false;
        };
        let req = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs {
                    log_records: vec![rec],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        ExportLogsServiceRequest::decode(req.encode_to_vec().as_slice()).is_ok()
    }

    #[test]
    fn max_depth_is_what_an_export_request_holds() {
        assert!(decodes_as_export_request(MAX_DEPTH));
        assert!(!decodes_as_export_request(MAX_DEPTH + 1));
    }
}
