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
//! written, straight into the chunk's buffer, through `event/`'s writer
//! (`event::write_event`, which measures the record before writing it):
//! no allocation and no copy per line beyond the body's one. The id is
//! not stored: the reader derives it from the group's file and the
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

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use crate::event::{
    write_event, AttrValue, Envelope, EventFields, EventId, FileOrigin, Group, OriginFields,
    RawLogFields, WriteRecord,
};

/// Attribute keys the source sets, as documented in `docs/sources-file.md`.
pub const ATTR_PATH: &str = "log.file.path";
pub const ATTR_NAME: &str = "log.file.name";
pub const ATTR_TRUNCATED: &str = "log.record.truncated";
pub const ATTR_ORIGINAL_BYTES: &str = "log.record.original_bytes";
pub const ATTR_INVALID_UTF8: &str = "log.record.invalid_utf8";
/// The instrumentation scope name of file records.
pub const SCOPE_NAME: &str = "holdfast.sources.file";

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
        let line = LineRecord {
            enc: self,
            body,
            file_attrs: &[],
            m,
            record,
            // The log record's observed time is the envelope's.
            observed: None,
        };
        let own = EventFields {
            // Path, fingerprint, generation: the group's; the numbers
            // small: from the group's offset, and the line's length.
            origin: Some(OriginFields {
                offset: m.offset.wrapping_sub(g.offset_base),
                end_offset: m.end.wrapping_sub(m.offset),
                ..Default::default()
            }),
            group: g.group,
            observed_delta: g.observed_delta,
            ..Default::default()
        };
        write_event(&line, &own, out)
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
        let line = LineRecord {
            enc: self,
            body,
            file_attrs: &t.attrs,
            m,
            record,
            observed: Some(m.observed_ns),
        };
        let own = EventFields {
            id: Some(EventId::for_file_line(m.key, m.generation, m.offset)),
            shared: &self.head,
            observed: Some(m.observed_ns),
            origin: Some(OriginFields {
                path: &t.origin_path,
                fingerprint: m.key,
                generation: m.generation,
                offset: m.offset,
                end_offset: m.end,
            }),
            ..Default::default()
        };
        write_event(&line, &own, out)
    }
}

/// One line's log record: its body, then (format 1) the file's
/// attributes, the line's own marks (truncated, original length, invalid
/// UTF-8), a processing chain's fields and (format 1) the observed time.
struct LineRecord<'a> {
    enc: &'a Encoder,
    body: &'a str,
    /// `log.file.path` and `log.file.name`, encoded (format 1; format 2
    /// keeps them in the group).
    file_attrs: &'a [u8],
    m: &'a LineMeta,
    /// A processing chain's fields, encoded (`process/record.rs`).
    record: &'a [u8],
    observed: Option<u64>,
}

impl WriteRecord for LineRecord<'_> {
    #[inline]
    fn write_record(&self, out: &mut impl RawLogFields) {
        out.body(AttrValue::Str(self.body));
        out.raw(self.file_attrs);
        if let Some(n) = self.m.truncated_from {
            out.raw(&self.enc.truncated);
            // An int64 holds a length as it is.
            out.attr(ATTR_ORIGINAL_BYTES, AttrValue::Int(n as i64));
        }
        if self.m.invalid_utf8 {
            out.raw(&self.enc.invalid_utf8);
        }
        out.raw(self.record);
        if let Some(t) = self.observed {
            out.observed_time(t);
        }
    }
}

#[cfg(test)]
mod tests;
