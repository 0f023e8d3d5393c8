//! Writing a format-2 log event straight into a batch's buffer, from
//! borrowed parts, without building a `LogRecord`.
//!
//! Sources that make many small records (a syslog message, a journal entry)
//! spent most of their time allocating: a `String` per attribute key and
//! value, a `Vec` per record, then prost walking it all again to encode.
//! Here the record's fields are written as they are known, into one reused
//! buffer, and the event is framed around it: one copy of the record, no
//! allocation per event once the buffers have grown.
//!
//! The bytes are exactly what prost writes for the same [`Envelope`] with
//! only `record` (field 8), `group` (12) and `observed_delta` (13) set: the
//! unit tests decode them with prost and compare.
//!
//! [`Envelope`]: crate::event::Envelope

use bytes::BufMut;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, ArrayValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};

/// What a source's mapping writes a record's fields to: the
/// [`LogRecordWriter`] on the hot path, or a prost [`LogRecord`] where a
/// caller wants the record as a value (a processing step, a fuzz check).
/// One mapping then serves both, so they cannot drift apart. Fields come in
/// tag order: time, severity, body, attributes.
pub trait LogFields {
    /// `time_unix_nano` (field 1); 0 means none.
    fn time(&mut self, unix_nano: u64);
    /// `severity_number` (2) and `severity_text` (3); 0 / "" mean none.
    fn severity(&mut self, number: i32, text: &str);
    /// `body` (5): a string if UTF-8, else bytes.
    fn body(&mut self, body: &[u8]);
    /// One attribute (6).
    fn attr(&mut self, key: &str, value: AttrValue<'_>);
    /// One attribute whose value is an array of strings.
    fn attr_strs(&mut self, key: &str, values: &[&str]);
}

/// One log record being written. Fields must be added in tag order (time,
/// severity, body, attributes) for the bytes to be prost's own; a decoder
/// accepts any order.
#[derive(Debug, Default)]
pub struct LogRecordWriter {
    rec: Vec<u8>,
}

/// What an attribute's value is.
#[derive(Debug, Clone, Copy)]
pub enum AttrValue<'a> {
    Str(&'a str),
    /// Bytes that should be text: a string when UTF-8, else bytes.
    Text(&'a [u8]),
    Int(i64),
    Bool(bool),
}

impl LogRecordWriter {
    /// Starts a new record (the buffer is kept).
    pub fn start(&mut self) {
        self.rec.clear();
    }

    /// Attributes already encoded as `LogRecord` field-6 entries (constant
    /// marks).
    pub fn raw(&mut self, encoded: &[u8]) {
        self.rec.put_slice(encoded);
    }

    /// Frames the record as a format-2 event at the end of `framed` (u32
    /// little-endian length, then the envelope): in context group `group`,
    /// observed `observed_delta` ns after the group. Returns the event's
    /// length (without the 4 framing bytes).
    pub fn finish(&self, group: u32, observed_delta: u64, framed: &mut impl BufMut) -> usize {
        let rec = self.rec.len();
        let total = key_len(8)
            + encoded_len_varint(rec as u64)
            + rec
            + varint_field_len(12, u64::from(group))
            + varint_field_len(13, observed_delta);
        framed.put_u32_le(total as u32);
        let mut head = [0u8; 20];
        let mut h = &mut head[..];
        encode_key(8, WireType::LengthDelimited, &mut h);
        encode_varint(rec as u64, &mut h);
        let used = 20 - h.len();
        framed.put_slice(&head[..used]);
        framed.put_slice(&self.rec);
        let mut tail = [0u8; 24];
        let mut t = &mut tail[..];
        put_varint_field(12, u64::from(group), &mut t);
        put_varint_field(13, observed_delta, &mut t);
        let used = 24 - t.len();
        framed.put_slice(&tail[..used]);
        total
    }
}

impl LogFields for LogRecordWriter {
    fn time(&mut self, unix_nano: u64) {
        if unix_nano != 0 {
            encode_key(1, WireType::SixtyFourBit, &mut self.rec);
            self.rec.put_u64_le(unix_nano);
        }
    }

    fn severity(&mut self, number: i32, text: &str) {
        if number != 0 {
            encode_key(2, WireType::Varint, &mut self.rec);
            encode_varint(number as u64, &mut self.rec);
        }
        if !text.is_empty() {
            put_bytes(3, text.as_bytes(), &mut self.rec);
        }
    }

    fn body(&mut self, body: &[u8]) {
        let any = text_len(body);
        encode_key(5, WireType::LengthDelimited, &mut self.rec);
        encode_varint(any as u64, &mut self.rec);
        put_text(body, &mut self.rec);
    }

    fn attr(&mut self, key: &str, value: AttrValue<'_>) {
        let any = value_len(value);
        self.put_kv_head(key, any);
        put_value(value, &mut self.rec);
    }

    fn attr_strs(&mut self, key: &str, values: &[&str]) {
        // AnyValue { array_value (5): ArrayValue { values (1): AnyValue* } }
        let array: usize = values
            .iter()
            .map(|v| {
                let one = bytes_len(1, v.len());
                key_len(1) + encoded_len_varint(one as u64) + one
            })
            .sum();
        let any = key_len(5) + encoded_len_varint(array as u64) + array;
        self.put_kv_head(key, any);
        encode_key(5, WireType::LengthDelimited, &mut self.rec);
        encode_varint(array as u64, &mut self.rec);
        for v in values {
            encode_key(1, WireType::LengthDelimited, &mut self.rec);
            encode_varint(bytes_len(1, v.len()) as u64, &mut self.rec);
            put_bytes(1, v.as_bytes(), &mut self.rec);
        }
    }
}

impl LogRecordWriter {
    /// An attribute's `KeyValue` up to its value's bytes (`any` long).
    fn put_kv_head(&mut self, key: &str, any: usize) {
        let kv = bytes_len(1, key.len()) + key_len(2) + encoded_len_varint(any as u64) + any;
        encode_key(6, WireType::LengthDelimited, &mut self.rec);
        encode_varint(kv as u64, &mut self.rec);
        put_bytes(1, key.as_bytes(), &mut self.rec);
        encode_key(2, WireType::LengthDelimited, &mut self.rec);
        encode_varint(any as u64, &mut self.rec);
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

    fn body(&mut self, body: &[u8]) {
        let v = match std::str::from_utf8(body) {
            Ok(s) => any_value::Value::StringValue(s.to_string()),
            Err(_) => any_value::Value::BytesValue(body.to_vec()),
        };
        self.body = Some(AnyValue { value: Some(v) });
    }

    fn attr(&mut self, key: &str, value: AttrValue<'_>) {
        let v = match value {
            AttrValue::Str(s) => any_value::Value::StringValue(s.to_string()),
            AttrValue::Text(b) => match std::str::from_utf8(b) {
                Ok(s) => any_value::Value::StringValue(s.to_string()),
                Err(_) => any_value::Value::BytesValue(b.to_vec()),
            },
            AttrValue::Int(i) => any_value::Value::IntValue(i),
            AttrValue::Bool(b) => any_value::Value::BoolValue(b),
        };
        self.attributes.push(key_value(key, v));
    }

    fn attr_strs(&mut self, key: &str, values: &[&str]) {
        let values = values
            .iter()
            .map(|s| AnyValue {
                value: Some(any_value::Value::StringValue(s.to_string())),
            })
            .collect();
        let v = any_value::Value::ArrayValue(ArrayValue { values });
        self.attributes.push(key_value(key, v));
    }
}

fn key_value(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

fn bytes_len(tag: u32, len: usize) -> usize {
    key_len(tag) + encoded_len_varint(len as u64) + len
}

fn put_bytes(tag: u32, b: &[u8], out: &mut impl BufMut) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(b.len() as u64, out);
    out.put_slice(b);
}

/// `AnyValue` of text: `string_value` (1) when UTF-8, `bytes_value` (7)
/// when not.
fn text_len(b: &[u8]) -> usize {
    let tag = if std::str::from_utf8(b).is_ok() { 1 } else { 7 };
    bytes_len(tag, b.len())
}

fn put_text(b: &[u8], out: &mut impl BufMut) {
    let tag = if std::str::from_utf8(b).is_ok() { 1 } else { 7 };
    put_bytes(tag, b, out);
}

fn value_len(v: AttrValue<'_>) -> usize {
    match v {
        AttrValue::Str(s) => bytes_len(1, s.len()),
        AttrValue::Text(b) => text_len(b),
        AttrValue::Bool(_) => key_len(2) + 1,
        AttrValue::Int(i) => key_len(3) + encoded_len_varint(i as u64),
    }
}

fn put_value(v: AttrValue<'_>, out: &mut impl BufMut) {
    match v {
        AttrValue::Str(s) => put_bytes(1, s.as_bytes(), out),
        AttrValue::Text(b) => put_text(b, out),
        AttrValue::Bool(b) => {
            encode_key(2, WireType::Varint, out);
            encode_varint(u64::from(b), out);
        }
        AttrValue::Int(i) => {
            encode_key(3, WireType::Varint, out);
            encode_varint(i as u64, out);
        }
    }
}

fn varint_field_len(tag: u32, v: u64) -> usize {
    if v == 0 {
        0
    } else {
        key_len(tag) + encoded_len_varint(v)
    }
}

fn put_varint_field(tag: u32, v: u64, out: &mut impl BufMut) {
    if v != 0 {
        encode_key(tag, WireType::Varint, out);
        encode_varint(v, out);
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::common::v1::any_value;
    use opentelemetry_proto::tonic::logs::v1::LogRecord;
    use prost::Message;

    use super::*;
    use crate::event::{Envelope, Record};

    fn fill(body: &[u8], out: &mut impl LogFields) {
        out.time(1_700_000_000_123_456_789);
        out.severity(17, "err");
        out.body(body);
        out.attr("a", AttrValue::Str("v"));
        out.attr("t", AttrValue::Text(b"\xc3"));
        out.attr("u", AttrValue::Text("ü".as_bytes()));
        out.attr("i", AttrValue::Int(-4));
        out.attr("b", AttrValue::Bool(true));
        out.attr_strs("arr", &["1", "", "three"]);
    }

    /// The writer's bytes are prost's for the same envelope, for text and
    /// binary bodies, every value kind, and group/delta zero or not.
    #[test]
    fn writes_what_prost_writes() {
        for (body, group, delta) in [
            (&b"hello"[..], 0, 0),
            (b"\xff\xfe not utf-8", 3, 1_000_000),
            (&[b'x'; 300][..], 200, u64::MAX),
        ] {
            let mut w = LogRecordWriter::default();
            w.start();
            fill(body, &mut w);
            let mut mark = Vec::new();
            let mut m = LogRecord::default();
            m.attr("r", AttrValue::Int(7));
            m.encode(&mut mark).unwrap();
            w.raw(&mark);
            let mut framed = Vec::new();
            let len = w.finish(group, delta, &mut framed);
            assert_eq!(framed.len(), 4 + len);
            assert_eq!(
                u32::from_le_bytes(framed[..4].try_into().unwrap()) as usize,
                len
            );

            let mut r = LogRecord::default();
            fill(body, &mut r);
            r.attr("r", AttrValue::Int(7));
            assert!(matches!(
                r.attributes[1]
                    .value
                    .as_ref()
                    .and_then(|v| v.value.as_ref()),
                Some(any_value::Value::BytesValue(_))
            ));
            let want = Envelope {
                record: Some(Record::Log(r)),
                group,
                observed_delta: delta,
                ..Default::default()
            };
            assert_eq!(framed[4..], want.encode_to_vec()[..]);
        }
    }
}
