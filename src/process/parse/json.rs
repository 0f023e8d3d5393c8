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
use serde::Deserialize;

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
            if let Some(v) = map.next_value::<Json>()?.0 {
                self.0.put(&key, v);
            }
        }
        Ok(())
    }
}

/// One member's value (`None` for `null`).
struct Json(Option<Value>);

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Json, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> Result<Json, E> {
        Ok(Json(Some(Value::Bool(b))))
    }
    fn visit_i64<E>(self, i: i64) -> Result<Json, E> {
        Ok(Json(Some(Value::Int(i))))
    }
    fn visit_u64<E>(self, u: u64) -> Result<Json, E> {
        Ok(Json(Some(match i64::try_from(u) {
            Ok(i) => Value::Int(i),
            Err(_) => Value::Double(u as f64),
        })))
    }
    fn visit_f64<E>(self, f: f64) -> Result<Json, E> {
        Ok(Json(Some(Value::Double(f))))
    }
    fn visit_str<E>(self, s: &str) -> Result<Json, E> {
        Ok(Json(Some(Value::Str(s.to_string()))))
    }
    fn visit_string<E>(self, s: String) -> Result<Json, E> {
        Ok(Json(Some(Value::Str(s))))
    }
    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json(None))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut values = Vec::new();
        while let Some(Json(v)) = seq.next_element()? {
            values.push(v.map_or_else(AnyValue::default, |v| crate::process::record::to_any(&v)));
        }
        Ok(Json(Some(Value::Any(AnyValue {
            value: Some(any_value::Value::ArrayValue(ArrayValue { values })),
        }))))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut values = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let Json(v) = map.next_value()?;
            values.push(KeyValue {
                key,
                value: Some(
                    v.map_or_else(AnyValue::default, |v| crate::process::record::to_any(&v)),
                ),
                ..Default::default()
            });
        }
        Ok(Json(Some(Value::Any(AnyValue {
            value: Some(any_value::Value::KvlistValue(KeyValueList { values })),
        }))))
    }
}
