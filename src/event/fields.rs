//! A log record's fields, written as bytes from borrowed parts without
//! building a `LogRecord`: the one writer of `LogRecord` fields in holdfast.
//!
//! Sources that make many small records (a file line, a syslog message, a
//! journal entry) spent most of their time allocating: a `String` per
//! attribute key and value, a `Vec` per record, then prost walking it all
//! again to encode. Here the record's fields are written as they are known
//! through [`LogFields`]:
//!
//! * [`LogRecordWriter`](super::LogRecordWriter) into one reused buffer, framed as an event
//!   afterwards (syslog, journald): one copy of the record, no allocation
//!   per event once the buffer has grown;
//! * [`FieldWriter`] straight into a caller's buffer (a processing chain's
//!   fields; through [`write_event`](super::write_event), a file line's
//!   record straight into its chunk, measured first, copied never);
//! * a prost [`LogRecord`], where a caller wants the record as a value (a
//!   processing step, a fuzz check): one mapping serves both, so they
//!   cannot drift apart.
//!
//! The bytes are exactly what prost writes for the same `LogRecord` when
//! the fields come in tag order (time, severity, body, attributes, observed
//! time): the unit tests decode them with prost and compare.

use bytes::BufMut;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, ArrayValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use prost::Message;

use super::wire::{
    bytes_len, fixed64_len, put_bytes, put_fixed64, put_head, put_varint, put_varint_field,
    varint_field_len, varint_len,
};

/// `LogRecord` fields.
const TIME: u32 = 1;
const SEVERITY_NUMBER: u32 = 2;
const SEVERITY_TEXT: u32 = 3;
const BODY: u32 = 5;
const ATTRIBUTES: u32 = 6;
const OBSERVED_TIME: u32 = 11;
/// `KeyValue` fields.
const KEY: u32 = 1;
const VALUE: u32 = 2;
/// `AnyValue` fields (a oneof: always written, defaults included).
const STRING_VALUE: u32 = 1;
const BOOL_VALUE: u32 = 2;
const INT_VALUE: u32 = 3;
const DOUBLE_VALUE: u32 = 4;
const ARRAY_VALUE: u32 = 5;
const BYTES_VALUE: u32 = 7;
/// `ArrayValue` field.
const ARRAY_VALUES: u32 = 1;

/// What a source's mapping writes a record's fields to (see the module
/// doc). Fields come in tag order: time, severity, body, attributes.
pub trait LogFields {
    /// `time_unix_nano` (field 1); 0 means none.
    fn time(&mut self, unix_nano: u64);
    /// `severity_number` (2) and `severity_text` (3); 0 / "" mean none.
    fn severity(&mut self, number: i32, text: &str);
    /// `body` (5).
    fn body(&mut self, body: AttrValue<'_>);
    /// One attribute (6).
    fn attr(&mut self, key: &str, value: AttrValue<'_>);
    /// One attribute whose value is an array of strings.
    fn attr_strs(&mut self, key: &str, values: &[&str]);
}

/// [`LogFields`] and what only a writer of bytes takes.
pub trait RawLogFields: LogFields {
    /// Fields already encoded as `LogRecord` fields (constant attributes
    /// encoded once, a processing chain's fields), spliced as they are.
    fn raw(&mut self, encoded: &[u8]);
    /// `observed_time_unix_nano` (11), written even when 0: the file
    /// source's format 1 has always stored it.
    fn observed_time(&mut self, unix_nano: u64);
}

/// An attribute's (or the body's) value: an `AnyValue`.
#[derive(Debug, Clone, Copy)]
pub enum AttrValue<'a> {
    Str(&'a str),
    /// Bytes that should be text: a string when UTF-8, else bytes.
    Text(&'a [u8]),
    Bytes(&'a [u8]),
    Int(i64),
    Double(f64),
    Bool(bool),
    /// A value of any shape (an array, a map), encoded by prost in place.
    Any(&'a AnyValue),
}

impl<'a> AttrValue<'a> {
    /// `Text` as `Str` or `Bytes`, so that its UTF-8 is checked once.
    #[inline]
    fn resolve(self) -> AttrValue<'a> {
        match self {
            AttrValue::Text(b) => match std::str::from_utf8(b) {
                Ok(s) => AttrValue::Str(s),
                Err(_) => AttrValue::Bytes(b),
            },
            v => v,
        }
    }

    /// The encoded `AnyValue`'s length.
    #[inline]
    fn len(self) -> usize {
        match self {
            AttrValue::Str(s) => bytes_len(STRING_VALUE, s.len()),
            AttrValue::Text(_) => self.resolve().len(),
            AttrValue::Bytes(b) => bytes_len(BYTES_VALUE, b.len()),
            AttrValue::Int(i) => varint_len(INT_VALUE, i as u64),
            AttrValue::Double(_) => fixed64_len(DOUBLE_VALUE),
            AttrValue::Bool(b) => varint_len(BOOL_VALUE, u64::from(b)),
            AttrValue::Any(a) => a.encoded_len(),
        }
    }

    #[inline]
    fn put(self, out: &mut impl BufMut) {
        match self {
            AttrValue::Str(s) => put_bytes(STRING_VALUE, s.as_bytes(), out),
            AttrValue::Text(_) => self.resolve().put(out),
            AttrValue::Bytes(b) => put_bytes(BYTES_VALUE, b, out),
            // An int64 is written as its two's complement, ten bytes when
            // negative, as prost does.
            AttrValue::Int(i) => put_varint(INT_VALUE, i as u64, out),
            AttrValue::Double(d) => put_fixed64(DOUBLE_VALUE, d.to_bits(), out),
            AttrValue::Bool(b) => put_varint(BOOL_VALUE, u64::from(b), out),
            AttrValue::Any(a) => a.encode_raw(out),
        }
    }

    /// The value as prost's `AnyValue`.
    fn to_any(self) -> AnyValue {
        let v = match self {
            AttrValue::Str(s) => any_value::Value::StringValue(s.to_string()),
            AttrValue::Text(b) => match std::str::from_utf8(b) {
                Ok(s) => any_value::Value::StringValue(s.to_string()),
                Err(_) => any_value::Value::BytesValue(b.to_vec()),
            },
            AttrValue::Bytes(b) => any_value::Value::BytesValue(b.to_vec()),
            AttrValue::Int(i) => any_value::Value::IntValue(i),
            AttrValue::Double(d) => any_value::Value::DoubleValue(d),
            AttrValue::Bool(b) => any_value::Value::BoolValue(b),
            AttrValue::Any(a) => return a.clone(),
        };
        AnyValue { value: Some(v) }
    }
}

/// A `KeyValue` of `key` and a value `any` bytes long.
#[inline]
fn kv_len(key: &str, any: usize) -> usize {
    bytes_len(KEY, key.len()) + bytes_len(VALUE, any)
}

/// The `ArrayValue` of `values` (strings), and the `AnyValue` holding it.
#[inline]
fn strs_len(values: &[&str]) -> (usize, usize) {
    let array = values
        .iter()
        .map(|v| bytes_len(ARRAY_VALUES, bytes_len(STRING_VALUE, v.len())))
        .sum();
    (array, bytes_len(ARRAY_VALUE, array))
}

/// Writes record fields straight into a caller's buffer.
pub struct FieldWriter<'b, B: BufMut> {
    out: &'b mut B,
}

impl<'b, B: BufMut> FieldWriter<'b, B> {
    #[inline]
    pub fn new(out: &'b mut B) -> FieldWriter<'b, B> {
        FieldWriter { out }
    }
}

impl<B: BufMut> LogFields for FieldWriter<'_, B> {
    #[inline]
    fn time(&mut self, unix_nano: u64) {
        if unix_nano != 0 {
            put_fixed64(TIME, unix_nano, self.out);
        }
    }

    #[inline]
    fn severity(&mut self, number: i32, text: &str) {
        // An enum is an int32: a negative one takes ten bytes, as in prost.
        put_varint_field(SEVERITY_NUMBER, number as u64, self.out);
        if !text.is_empty() {
            put_bytes(SEVERITY_TEXT, text.as_bytes(), self.out);
        }
    }

    #[inline]
    fn body(&mut self, body: AttrValue<'_>) {
        let body = body.resolve();
        put_head(BODY, body.len(), self.out);
        body.put(self.out);
    }

    #[inline]
    fn attr(&mut self, key: &str, value: AttrValue<'_>) {
        let value = value.resolve();
        let any = value.len();
        put_head(ATTRIBUTES, kv_len(key, any), self.out);
        put_bytes(KEY, key.as_bytes(), self.out);
        put_head(VALUE, any, self.out);
        value.put(self.out);
    }

    fn attr_strs(&mut self, key: &str, values: &[&str]) {
        let (array, any) = strs_len(values);
        put_head(ATTRIBUTES, kv_len(key, any), self.out);
        put_bytes(KEY, key.as_bytes(), self.out);
        put_head(VALUE, any, self.out);
        put_head(ARRAY_VALUE, array, self.out);
        for v in values {
            put_head(ARRAY_VALUES, bytes_len(STRING_VALUE, v.len()), self.out);
            put_bytes(STRING_VALUE, v.as_bytes(), self.out);
        }
    }
}

impl<B: BufMut> RawLogFields for FieldWriter<'_, B> {
    #[inline]
    fn raw(&mut self, encoded: &[u8]) {
        self.out.put_slice(encoded);
    }

    #[inline]
    fn observed_time(&mut self, unix_nano: u64) {
        put_fixed64(OBSERVED_TIME, unix_nano, self.out);
    }
}

/// Measures the record fields written to it: what a [`FieldWriter`]
/// would write, in bytes, for the length before a record.
#[derive(Debug, Default)]
pub(super) struct FieldLen(pub(super) usize);

impl LogFields for FieldLen {
    #[inline]
    fn time(&mut self, unix_nano: u64) {
        if unix_nano != 0 {
            self.0 += fixed64_len(TIME);
        }
    }

    #[inline]
    fn severity(&mut self, number: i32, text: &str) {
        self.0 += varint_field_len(SEVERITY_NUMBER, number as u64);
        if !text.is_empty() {
            self.0 += bytes_len(SEVERITY_TEXT, text.len());
        }
    }

    #[inline]
    fn body(&mut self, body: AttrValue<'_>) {
        self.0 += bytes_len(BODY, body.len());
    }

    #[inline]
    fn attr(&mut self, key: &str, value: AttrValue<'_>) {
        self.0 += bytes_len(ATTRIBUTES, kv_len(key, value.len()));
    }

    fn attr_strs(&mut self, key: &str, values: &[&str]) {
        self.0 += bytes_len(ATTRIBUTES, kv_len(key, strs_len(values).1));
    }
}

impl RawLogFields for FieldLen {
    #[inline]
    fn raw(&mut self, encoded: &[u8]) {
        self.0 += encoded.len();
    }

    #[inline]
    fn observed_time(&mut self, _: u64) {
        self.0 += fixed64_len(OBSERVED_TIME);
    }
}

impl LogFields for LogRecord {
    fn time(&mut self, unix_nano: u64) {
        self.time_unix_nano = unix_nano;
    }

    fn severity(&mut self, number: i32, text: &str) {
        self.severity_number = number;
        self.severity_text = text.to_string();
    }

    fn body(&mut self, body: AttrValue<'_>) {
        self.body = Some(body.to_any());
    }

    fn attr(&mut self, key: &str, value: AttrValue<'_>) {
        self.attributes.push(KeyValue {
            key: key.to_string(),
            value: Some(value.to_any()),
            ..Default::default()
        });
    }

    fn attr_strs(&mut self, key: &str, values: &[&str]) {
        let values = values
            .iter()
            .map(|s| AnyValue {
                value: Some(any_value::Value::StringValue(s.to_string())),
            })
            .collect();
        self.attributes.push(KeyValue {
            key: key.to_string(),
            value: Some(AnyValue {
                value: Some(any_value::Value::ArrayValue(ArrayValue { values })),
            }),
            ..Default::default()
        });
    }
}

#[cfg(test)]
pub(super) mod tests;
