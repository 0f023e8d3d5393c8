//! `json`: a JSON object's members become attributes, in the order
//! written. Strings, integers, floats and booleans map to their OTLP
//! values; nested objects and arrays to `kvlist` / `array` values; `null`
//! is skipped. Members are streamed into the event, never collected into
//! a map first.

use std::fmt;

use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, KeyValue, KeyValueList,
};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};

use super::Sink;
use crate::process::Value;

/// Parses `input` as one JSON object into `sink`; false if it is not one.
pub fn parse(input: &str, sink: &mut Sink<'_, '_>) -> bool {
    let mut de = serde_json::Deserializer::from_str(input);
    ObjectSeed(sink).deserialize(&mut de).is_ok() && de.end().is_ok()
}

struct ObjectSeed<'s, 'e, 'a>(&'s mut Sink<'e, 'a>);

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
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if let Some(v) = map.next_value_seed(ValueSeed)? {
                self.0.put(&key, v);
            }
        }
        Ok(())
    }
}

/// Reads one member's value: `None` for `null`, nested objects and arrays
/// as OTLP `kvlist` / `array` values.
struct ValueSeed;

impl<'de> DeserializeSeed<'de> for ValueSeed {
    type Value = Option<Value>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<Value>, D::Error> {
        d.deserialize_any(self)
    }
}

/// A nested value as OTLP's (`null` as the empty `AnyValue`).
fn any(v: Option<Value>) -> AnyValue {
    v.map_or_else(AnyValue::default, |v| crate::process::record::to_any(&v))
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
    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> Result<Option<Value>, A::Error> {
        let mut values = Vec::new();
        while let Some(v) = seq.next_element_seed(ValueSeed)? {
            values.push(any(v));
        }
        Ok(Some(Value::Any(AnyValue {
            value: Some(any_value::Value::ArrayValue(ArrayValue { values })),
        })))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Value>, A::Error> {
        let mut values = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let v = map.next_value_seed(ValueSeed)?;
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
