//! Turning a line into the bytes of an event without building an
//! [`Envelope`].
//!
//! Format 2 (see `event/stored.rs`): what every line of a file shares (the
//! source's name, the resource with `host.name`, the instrumentation scope,
//! the `log.file.*` attributes, the origin's path, fingerprint and
//! generation) is one [`Group`] of the chunk's
//! [`Context`](crate::event::Context), stored once per
//! append. Per line only the body, its own marks (truncated, original
//! length, invalid UTF-8), the origin's offsets, the group's index (if not
//! 0) and the observed time's distance from the group's (if not 0) are
//! written, straight into the chunk's buffer: no allocation per line. The
//! id is not stored: the reader derives it from the group's file and the
//! line's offset, exactly as format 1 stored it. The offsets are stored as
//! small numbers: the distance from the group's offset (the offset of its
//! first line) and the line's length. A 150-byte line costs 168 bytes in the
//! log plus its 4-byte framing (format 1: about 410 with a 40-byte path).
//!
//! Format 1 (the whole envelope per line, what earlier versions wrote) is
//! kept behind [`crate::sources::WRITE_FORMAT_2`] and is the reference the
//! unit tests compare format 2 with.
//!
//! The origin carries `end_offset` (tag 5), the offset where the next line
//! starts: the file source reads it back when it recovers positions from the
//! log after a crash (see `recovery.rs`), because a line's end cannot be
//! derived from its body (truncated, CRLF, invalid UTF-8, multiline, a last
//! line without newline).

use std::path::Path;
use std::sync::Arc;

use bytes::BufMut;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
use prost::Message;

use crate::event::{Envelope, EventId, FileOrigin, Group};

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

fn varint_field_len(tag: u32, v: u64) -> usize {
    if v == 0 {
        0
    } else {
        key_len(tag) + encoded_len_varint(v)
    }
}

fn put_varint_field(tag: u32, v: u64, out: &mut Vec<u8>) {
    if v != 0 {
        encode_key(tag, WireType::Varint, out);
        encode_varint(v, out);
    }
}

/// The per-source constant parts.
#[derive(Debug, Clone)]
pub struct Encoder {
    /// Envelope fields 2 (source), 4 (resource) and 6 (scope).
    head: Vec<u8>,
    /// The same fields as a context group's, for format 2.
    base: Group,
    truncated: Vec<u8>,
    invalid_utf8: Vec<u8>,
    /// A processing chain's labels (issue 17): the resource's are in
    /// `head` and `base`, the record's go into each file's shared
    /// attributes, never into an event.
    labels: crate::process::Labels,
}

/// The per-file constant parts.
#[derive(Debug, Clone, Default)]
pub struct Template {
    /// `log.file.path` and `log.file.name`, as `LogRecord` attributes.
    attrs: Vec<u8>,
    /// `FileOrigin` field 1 (path).
    origin_path: Vec<u8>,
    /// The path, shared by the chunk groups of this file.
    path: Arc<str>,
}

impl Template {
    pub fn path(&self) -> &Arc<str> {
        &self.path
    }
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

/// A line's place in its chunk's context (format 2).
#[derive(Debug, Clone, Copy)]
pub struct InGroup {
    /// Index of the line's group in the chunk's context.
    pub group: u32,
    /// The group's `origin.offset`, which the line's offset counts from.
    pub offset_base: u64,
    /// The line's observed time minus its group's (wrapping: a clock that
    /// stepped back gives a large delta, still exact).
    pub observed_delta: u64,
}

impl Encoder {
    pub fn new(source: &str, host: &str) -> Encoder {
        let resource = Resource {
            attributes: vec![kv(
                "host.name",
                any_value::Value::StringValue(host.to_string()),
            )],
            ..Default::default()
        };
        let scope = InstrumentationScope {
            name: SCOPE_NAME.to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            ..Default::default()
        };
        let head = Envelope {
            source: source.to_string(),
            resource: Some(resource.clone()),
            scope: Some(scope.clone()),
            ..Default::default()
        }
        .encode_to_vec();
        Encoder {
            head,
            base: Group {
                source: source.to_string(),
                resource: Some(resource),
                scope: Some(scope),
                record_observed: true,
                ..Default::default()
            },
            truncated: attrs(vec![kv(ATTR_TRUNCATED, any_value::Value::BoolValue(true))]),
            invalid_utf8: attrs(vec![kv(
                ATTR_INVALID_UTF8,
                any_value::Value::BoolValue(true),
            )]),
            labels: Default::default(),
        }
    }

    /// The encoder with a processing chain's labels: stored once per
    /// chunk's context group (format 2) or in the per-source and per-file
    /// constant parts (format 1), so labelling costs nothing per line.
    pub fn with_labels(mut self, labels: &crate::process::Labels) -> Encoder {
        if let Some(r) = self.base.resource.as_mut() {
            labels.apply_resource(&mut r.attributes);
        }
        self.head = Envelope {
            source: self.base.source.clone(),
            resource: self.base.resource.clone(),
            scope: self.base.scope.clone(),
            ..Default::default()
        }
        .encode_to_vec();
        self.labels = labels.clone();
        self
    }

    /// The attributes every line of the file at `path` carries: its path
    /// and name, then the processing chain's record labels.
    fn file_attributes(&self, path: &str) -> Vec<KeyValue> {
        let name = Path::new(path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut attributes = vec![
            kv(ATTR_PATH, any_value::Value::StringValue(path.to_string())),
            kv(ATTR_NAME, any_value::Value::StringValue(name)),
        ];
        self.labels.apply_attributes(&mut attributes);
        attributes
    }

    pub fn template(&self, path: &Path) -> Template {
        let p = path.to_string_lossy().into_owned();
        Template {
            attrs: attrs(self.file_attributes(&p)),
            origin_path: FileOrigin {
                path: p.clone(),
                ..Default::default()
            }
            .encode_to_vec(),
            path: p.into(),
        }
    }

    /// The context group of the lines of file `t` (identity `key`,
    /// `generation`) whose observed times count from `observed_ns` and
    /// offsets from `offset`.
    pub fn group(
        &self,
        t: &Template,
        key: u64,
        generation: u32,
        offset: u64,
        observed_ns: u64,
    ) -> Group {
        let path = t.path.to_string();
        Group {
            attributes: self.file_attributes(&path),
            origin: Some(FileOrigin {
                path,
                fingerprint: key,
                generation,
                offset,
                ..Default::default()
            }),
            observed_time_unix_nano: observed_ns,
            ..self.base.clone()
        }
    }

    /// The lengths of the body (a string `AnyValue`) and of the whole log
    /// record: body, marks, `record` and `other` bytes of further fields.
    fn record_lens(&self, body: &str, m: &LineMeta, record: &[u8], other: usize) -> (usize, usize) {
        let any_len = key_len(1) + encoded_len_varint(body.len() as u64) + body.len();
        let rec_len = key_len(5)
            + encoded_len_varint(any_len as u64)
            + any_len
            + self.marks_len(m)
            + record.len()
            + other;
        (any_len, rec_len)
    }

    /// Length of the line's own attributes (the marks).
    fn marks_len(&self, m: &LineMeta) -> usize {
        m.truncated_from
            .map_or(0, |n| self.truncated.len() + original_bytes_len(n))
            + if m.invalid_utf8 {
                self.invalid_utf8.len()
            } else {
                0
            }
    }

    fn put_marks(&self, m: &LineMeta, out: &mut Vec<u8>) {
        if let Some(n) = m.truncated_from {
            out.put_slice(&self.truncated);
            put_original_bytes(n, out);
        }
        if m.invalid_utf8 {
            out.put_slice(&self.invalid_utf8);
        }
    }

    /// Appends the format-2 event of one line to `out`, framed as a log
    /// event (u32 little-endian length, then the bytes): an [`Envelope`]
    /// with only the record (body and marks), the origin's offsets, the
    /// group index and the observed delta. Returns the event's length.
    #[cfg(test)]
    pub fn encode_own(&self, body: &str, m: &LineMeta, g: InGroup, out: &mut Vec<u8>) -> usize {
        self.encode_own_with(body, &[], m, g, out)
    }

    /// [`Encoder::encode_own`] with `record`: further `LogRecord` fields
    /// (a processing chain's time, severity and attributes, see
    /// `process/record.rs`), written after the body and marks.
    pub fn encode_own_with(
        &self,
        body: &str,
        record: &[u8],
        m: &LineMeta,
        g: InGroup,
        out: &mut Vec<u8>,
    ) -> usize {
        let (any_len, rec_len) = self.record_lens(body, m, record, 0);
        // Small numbers: from the group's offset, and the line's length.
        let offset = m.offset.wrapping_sub(g.offset_base);
        let len = m.end.wrapping_sub(m.offset);
        let origin_len = varint_field_len(4, offset) + varint_field_len(ORIGIN_END_TAG, len);
        let total = key_len(8)
            + encoded_len_varint(rec_len as u64)
            + rec_len
            + key_len(11)
            + encoded_len_varint(origin_len as u64)
            + origin_len
            + varint_field_len(12, g.group as u64)
            + varint_field_len(13, g.observed_delta);

        out.reserve(4 + total);
        out.put_u32_le(total as u32);
        let before = out.len();
        // 8: the log record (its observed time is the envelope's)
        put_record_start(rec_len, any_len, body, out);
        self.put_marks(m, out);
        out.put_slice(record);
        // 11: the origin's offset and length (path, fingerprint,
        // generation: the group's)
        encode_key(11, WireType::LengthDelimited, out);
        encode_varint(origin_len as u64, out);
        put_varint_field(4, offset, out);
        put_varint_field(ORIGIN_END_TAG, len, out);
        // 12, 13: group, observed delta
        put_varint_field(12, g.group as u64, out);
        put_varint_field(13, g.observed_delta, out);
        debug_assert_eq!(out.len() - before, total);
        total
    }

    /// Appends the whole format-1 envelope of one line to `out`, framed as
    /// a log event (u32 little-endian length, then the bytes). Returns the
    /// envelope's length.
    #[cfg(test)]
    pub fn encode(&self, t: &Template, body: &str, m: &LineMeta, out: &mut Vec<u8>) -> usize {
        self.encode_with(t, body, &[], m, out)
    }

    /// [`Encoder::encode`] with further record fields (see
    /// [`Encoder::encode_own_with`]).
    pub fn encode_with(
        &self,
        t: &Template,
        body: &str,
        record: &[u8],
        m: &LineMeta,
        out: &mut Vec<u8>,
    ) -> usize {
        // Further record fields: the file's attributes and the observed time.
        let (any_len, rec_len) = self.record_lens(body, m, record, t.attrs.len() + key_len(11) + 8);
        let origin_len = t.origin_path.len()
            + if m.key == 0 { 0 } else { key_len(2) + 8 }
            + varint_field_len(3, m.generation as u64)
            + varint_field_len(4, m.offset)
            + varint_field_len(ORIGIN_END_TAG, m.end);
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
        put_record_start(rec_len, any_len, body, out);
        out.put_slice(&t.attrs);
        self.put_marks(m, out);
        out.put_slice(record);
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
        put_varint_field(3, m.generation as u64, out);
        put_varint_field(4, m.offset, out);
        put_varint_field(ORIGIN_END_TAG, m.end, out);
        debug_assert_eq!(out.len() - before, total);
        total
    }
}

/// Starts the log record (envelope field 8, `rec_len` bytes) with its body,
/// a string `AnyValue` of `any_len` bytes; the record's other fields follow.
fn put_record_start(rec_len: usize, any_len: usize, body: &str, out: &mut Vec<u8>) {
    encode_key(8, WireType::LengthDelimited, out);
    encode_varint(rec_len as u64, out);
    encode_key(5, WireType::LengthDelimited, out);
    encode_varint(any_len as u64, out);
    encode_key(1, WireType::LengthDelimited, out);
    encode_varint(body.len() as u64, out);
    out.put_slice(body.as_bytes());
}

/// The `log.record.original_bytes` attribute (`LogRecord` field 6, a
/// `KeyValue` with an int value), hand-encoded: its value differs per line.
fn original_bytes_inner(n: u64) -> (usize, usize) {
    let any_len = key_len(3) + encoded_len_varint(n);
    let kv_len = key_len(1)
        + encoded_len_varint(ATTR_ORIGINAL_BYTES.len() as u64)
        + ATTR_ORIGINAL_BYTES.len()
        + key_len(2)
        + encoded_len_varint(any_len as u64)
        + any_len;
    (any_len, kv_len)
}

fn original_bytes_len(n: u64) -> usize {
    let (_, kv_len) = original_bytes_inner(n);
    key_len(6) + encoded_len_varint(kv_len as u64) + kv_len
}

fn put_original_bytes(n: u64, out: &mut Vec<u8>) {
    let (any_len, kv_len) = original_bytes_inner(n);
    encode_key(6, WireType::LengthDelimited, out);
    encode_varint(kv_len as u64, out);
    encode_key(1, WireType::LengthDelimited, out);
    encode_varint(ATTR_ORIGINAL_BYTES.len() as u64, out);
    out.put_slice(ATTR_ORIGINAL_BYTES.as_bytes());
    encode_key(2, WireType::LengthDelimited, out);
    encode_varint(any_len as u64, out);
    // AnyValue.int_value (tag 3) is an int64: a length fits in a varint as is.
    encode_key(3, WireType::Varint, out);
    encode_varint(n, out);
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
mod tests;
