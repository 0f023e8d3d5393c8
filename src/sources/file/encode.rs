//! Turning a line into the bytes of an [`Envelope`] without building one.
//!
//! The fields that are the same for every line of a source (its name, the
//! resource with `host.name`, the instrumentation scope) and for every line
//! of a file (the `log.file.*` attributes, the origin's path) are encoded
//! once with prost. Per line only the id, the observed time, the body, the
//! marks and the origin's numbers are written, straight into the batch
//! buffer: no allocation per line. A unit test decodes the result with
//! prost and compares it with the [`Envelope`] built the ordinary way.
//!
//! The origin carries `end_offset` (tag 5), the offset where the next line
//! starts: the file source reads it back when it recovers positions from the
//! log after a crash (see `recovery.rs`), because a line's end cannot be
//! derived from its body (truncated, CRLF, invalid UTF-8, multiline, a last
//! line without newline).

use std::path::Path;

use bytes::BufMut;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
use prost::Message;

use crate::event::{Envelope, EventId, FileOrigin};

/// Attribute keys the source sets, as documented in `docs/sources-file.md`.
pub const ATTR_PATH: &str = "log.file.path";
pub const ATTR_NAME: &str = "log.file.name";
pub const ATTR_TRUNCATED: &str = "log.record.truncated";
pub const ATTR_ORIGINAL_BYTES: &str = "log.record.original_bytes";
pub const ATTR_INVALID_UTF8: &str = "log.record.invalid_utf8";
/// The instrumentation scope name of file records.
pub const SCOPE_NAME: &str = "holdfast.sources.file";

/// Tag of the `end` field inside the origin (see the module doc).
pub const ORIGIN_END_TAG: u32 = 5;

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// `LogRecord` field-6 entries (attributes), encoded.
fn attrs(list: Vec<KeyValue>) -> Vec<u8> {
    LogRecord {
        attributes: list,
        ..Default::default()
    }
    .encode_to_vec()
}

/// The per-source constant parts.
#[derive(Debug, Clone)]
pub struct Encoder {
    /// Envelope fields 2 (source), 4 (resource) and 6 (scope).
    head: Vec<u8>,
    truncated: Vec<u8>,
    invalid_utf8: Vec<u8>,
}

/// The per-file constant parts.
#[derive(Debug, Clone, Default)]
pub struct Template {
    /// `log.file.path` and `log.file.name`, as `LogRecord` attributes.
    attrs: Vec<u8>,
    /// `FileOrigin` field 1 (path).
    origin_path: Vec<u8>,
}

/// Where a line was and how it was read.
#[derive(Debug, Clone, Copy)]
pub struct LineMeta {
    pub key: u64,
    pub generation: u32,
    pub offset: u64,
    pub end: u64,
    pub observed_ns: u64,
    /// The content's full length when it was truncated.
    pub truncated_from: Option<u64>,
    pub invalid_utf8: bool,
}

impl Encoder {
    pub fn new(source: &str, host: &str) -> Encoder {
        let head = Envelope {
            source: source.to_string(),
            resource: Some(Resource {
                attributes: vec![kv(
                    "host.name",
                    any_value::Value::StringValue(host.to_string()),
                )],
                ..Default::default()
            }),
            scope: Some(InstrumentationScope {
                name: SCOPE_NAME.to_string(),
                version: env!("CARGO_PKG_VERSION").to_string(),
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec();
        Encoder {
            head,
            truncated: attrs(vec![kv(ATTR_TRUNCATED, any_value::Value::BoolValue(true))]),
            invalid_utf8: attrs(vec![kv(
                ATTR_INVALID_UTF8,
                any_value::Value::BoolValue(true),
            )]),
        }
    }

    pub fn template(&self, path: &Path) -> Template {
        let p = path.to_string_lossy().into_owned();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Template {
            attrs: attrs(vec![
                kv(ATTR_PATH, any_value::Value::StringValue(p.clone())),
                kv(ATTR_NAME, any_value::Value::StringValue(name)),
            ]),
            origin_path: FileOrigin {
                path: p,
                ..Default::default()
            }
            .encode_to_vec(),
        }
    }

    /// Appends the envelope of one line to `out`, framed as a log event
    /// (u32 little-endian length, then the bytes). Returns the envelope's
    /// length.
    pub fn encode(&self, t: &Template, body: &str, m: &LineMeta, out: &mut Vec<u8>) -> usize {
        let original = m.truncated_from.map(|n| {
            attrs(vec![kv(
                ATTR_ORIGINAL_BYTES,
                any_value::Value::IntValue(n as i64),
            )])
        });
        let marks_len = m.truncated_from.map_or(0, |_| self.truncated.len())
            + original.as_ref().map_or(0, |o| o.len())
            + if m.invalid_utf8 {
                self.invalid_utf8.len()
            } else {
                0
            };

        let any_len = key_len(1) + encoded_len_varint(body.len() as u64) + body.len();
        let rec_len = key_len(5)
            + encoded_len_varint(any_len as u64)
            + any_len
            + t.attrs.len()
            + marks_len
            + key_len(11)
            + 8;
        let varint_field = |tag: u32, v: u64| {
            if v == 0 {
                0
            } else {
                key_len(tag) + encoded_len_varint(v)
            }
        };
        let origin_len = t.origin_path.len()
            + if m.key == 0 { 0 } else { key_len(2) + 8 }
            + varint_field(3, m.generation as u64)
            + varint_field(4, m.offset)
            + varint_field(ORIGIN_END_TAG, m.end);
        let total = key_len(1)
            + 1
            + 16
            + self.head.len()
            + key_len(3)
            + 8
            + key_len(8)
            + encoded_len_varint(rec_len as u64)
            + rec_len
            + key_len(11)
            + encoded_len_varint(origin_len as u64)
            + origin_len;

        out.reserve(4 + total);
        out.put_u32_le(total as u32);
        let before = out.len();
        // 1: id
        encode_key(1, WireType::LengthDelimited, out);
        encode_varint(16, out);
        out.put_slice(&EventId::for_file_line(m.key, m.generation, m.offset).0);
        // 2, 4, 6: source, resource, scope
        out.put_slice(&self.head);
        // 3: observed time
        encode_key(3, WireType::SixtyFourBit, out);
        out.put_u64_le(m.observed_ns);
        // 8: the log record
        encode_key(8, WireType::LengthDelimited, out);
        encode_varint(rec_len as u64, out);
        encode_key(5, WireType::LengthDelimited, out);
        encode_varint(any_len as u64, out);
        encode_key(1, WireType::LengthDelimited, out);
        encode_varint(body.len() as u64, out);
        out.put_slice(body.as_bytes());
        out.put_slice(&t.attrs);
        if m.truncated_from.is_some() {
            out.put_slice(&self.truncated);
        }
        if let Some(o) = &original {
            out.put_slice(o);
        }
        if m.invalid_utf8 {
            out.put_slice(&self.invalid_utf8);
        }
        encode_key(11, WireType::SixtyFourBit, out);
        out.put_u64_le(m.observed_ns);
        // 11: the origin
        encode_key(11, WireType::LengthDelimited, out);
        encode_varint(origin_len as u64, out);
        out.put_slice(&t.origin_path);
        if m.key != 0 {
            encode_key(2, WireType::SixtyFourBit, out);
            out.put_u64_le(m.key);
        }
        for (tag, v) in [
            (3, m.generation as u64),
            (4, m.offset),
            (ORIGIN_END_TAG, m.end),
        ] {
            if v != 0 {
                encode_key(tag, WireType::Varint, out);
                encode_varint(v, out);
            }
        }
        debug_assert_eq!(out.len() - before, total);
        total
    }
}

/// The machine's host name for the `host.name` resource attribute.
pub fn host_name() -> String {
    for p in ["/proc/sys/kernel/hostname", "/etc/hostname"] {
        if let Ok(s) = std::fs::read_to_string(p) {
            let s = s.trim();
            if !s.is_empty() {
                return s.to_string();
            }
        }
    }
    std::env::var("HOSTNAME").unwrap_or_else(|_| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Record;

    /// The envelope built the ordinary way, to compare with.
    fn expected(body: &str, m: &LineMeta, path: &str) -> Envelope {
        let mut attributes = vec![
            kv(ATTR_PATH, any_value::Value::StringValue(path.into())),
            kv(
                ATTR_NAME,
                any_value::Value::StringValue(
                    Path::new(path)
                        .file_name()
                        .unwrap()
                        .to_string_lossy()
                        .into(),
                ),
            ),
        ];
        if let Some(n) = m.truncated_from {
            attributes.push(kv(ATTR_TRUNCATED, any_value::Value::BoolValue(true)));
            attributes.push(kv(
                ATTR_ORIGINAL_BYTES,
                any_value::Value::IntValue(n as i64),
            ));
        }
        if m.invalid_utf8 {
            attributes.push(kv(ATTR_INVALID_UTF8, any_value::Value::BoolValue(true)));
        }
        Envelope {
            id: EventId::for_file_line(m.key, m.generation, m.offset)
                .0
                .to_vec(),
            source: "app".into(),
            observed_time_unix_nano: m.observed_ns,
            resource: Some(Resource {
                attributes: vec![kv(
                    "host.name",
                    any_value::Value::StringValue("box1".into()),
                )],
                ..Default::default()
            }),
            scope: Some(InstrumentationScope {
                name: SCOPE_NAME.into(),
                version: env!("CARGO_PKG_VERSION").into(),
                ..Default::default()
            }),
            record: Some(Record::Log(LogRecord {
                observed_time_unix_nano: m.observed_ns,
                body: Some(AnyValue {
                    value: Some(any_value::Value::StringValue(body.into())),
                }),
                attributes,
                ..Default::default()
            })),
            origin: Some(FileOrigin {
                path: path.into(),
                fingerprint: m.key,
                generation: m.generation,
                offset: m.offset,
                end_offset: m.end,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn hand_encoding_decodes_to_the_same_envelope() {
        let enc = Encoder::new("app", "box1");
        let t = enc.template(Path::new("/var/log/app/current.log"));
        let cases = [
            (
                "hello",
                LineMeta {
                    key: 7,
                    generation: 0,
                    offset: 0,
                    end: 6,
                    observed_ns: 1,
                    truncated_from: None,
                    invalid_utf8: false,
                },
            ),
            (
                "",
                LineMeta {
                    key: 0,
                    generation: 3,
                    offset: 1 << 40,
                    end: (1 << 40) + 1,
                    observed_ns: u64::MAX,
                    truncated_from: None,
                    invalid_utf8: false,
                },
            ),
            (
                &"x".repeat(300),
                LineMeta {
                    key: u64::MAX,
                    generation: 1,
                    offset: 5,
                    end: 9999,
                    observed_ns: 42,
                    truncated_from: Some(9000),
                    invalid_utf8: true,
                },
            ),
        ];
        let mut buf = Vec::new();
        for (body, m) in &cases {
            buf.clear();
            let n = enc.encode(&t, body, m, &mut buf);
            assert_eq!(u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize, n);
            assert_eq!(buf.len(), 4 + n);
            let got = Envelope::decode_event(&buf[4..]).unwrap();
            assert_eq!(got, expected(body, m, "/var/log/app/current.log"));
            let back = super::super::recovery::decode_origin(&buf[4..]).unwrap();
            assert_eq!(back.source, "app");
            let o = back.origin.unwrap();
            assert_eq!(
                (o.fingerprint, o.generation, o.offset, o.end),
                (m.key, m.generation, m.offset, m.end)
            );
        }
    }
}
