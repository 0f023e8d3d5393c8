//! A journal entry as an event: its identity (cursor, seqnum, stable id)
//! and its OpenTelemetry log record, encoded in format 2 (see
//! `event/stored.rs`) straight from the entry's fields.
//!
//! | journal field | event |
//! |---|---|
//! | `MESSAGE` | body: a string if UTF-8, else bytes |
//! | `PRIORITY` 0..7 | severity number (FATAL, ERROR3, ERROR2, ERROR, WARN, INFO2, INFO, DEBUG) and text (`emerg` … `debug`) |
//! | the entry's realtime timestamp (µs) | time |
//! | `_HOSTNAME` | resource `host.name` (one group per host in a batch) |
//! | `_SYSTEMD_UNIT`, `SYSLOG_IDENTIFIER`, `_COMM`, `_BOOT_ID`, configured `fields` | string attributes named as the field |
//! | `_PID` | integer attribute `_PID` |
//!
//! The id is derived from the entry's place in its journal: the seqnum id
//! and seqnum (the cursor's `s=` and `i=`), else the boot id and monotonic
//! time. The same entry read again, after a crash or a restart, gets the
//! same id (the same as the journalctl-based reader of 0.x gave it); it is
//! stored in the event (16 bytes) because, unlike a file line's, it cannot
//! be derived from the batch.
//!
//! The reader copies the fields the mapping reads into [`Fields`] (buffers
//! reused from entry to entry) and [`BatchEncoder::encode`] writes the
//! event through `event::LogRecordWriter`, as the syslog source does: no
//! `LogRecord` is built and nothing is allocated per field.

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use crate::event::{AttrValue, Context, EventFields, EventId, Group, LogFields, LogRecordWriter};
use crate::syslog_format::severity;

/// The instrumentation scope name of journal records.
pub const SCOPE_NAME: &str = "holdfast.sources.journald";
/// Marks an entry cut at `max_entry_bytes`, as the file source marks lines.
pub const ATTR_TRUNCATED: &str = "log.record.truncated";
/// The attributes every record gets when the entry has the field.
pub const DEFAULT_FIELDS: [&str; 5] = [
    "_SYSTEMD_UNIT",
    "SYSLOG_IDENTIFIER",
    "_PID",
    "_COMM",
    "_BOOT_ID",
];

/// Slots of [`Fields`]: the body, the severity, the host, then the
/// attributes in the order they are written.
const MESSAGE: usize = 0;
const PRIORITY: usize = 1;
const HOSTNAME: usize = 2;
const FIRST_ATTR: usize = 3;
/// `_SYSTEMD_UNIT`'s slot (for `exclude_units`).
const UNIT: usize = FIRST_ATTR;
const PID: usize = FIRST_ATTR + 2;
const BOOT_ID: usize = FIRST_ATTR + 4;

/// Where an entry is in the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// The cursor, what `sd_journal_seek_cursor` takes.
    pub cursor: String,
    /// The seqnum id (32 hex digits) and seqnum, if known.
    pub seqnum: Option<(String, u64)>,
}

/// The seqnum id and seqnum a cursor names (`s=` and `i=`, hex).
pub fn seqnum_of(cursor: &str) -> Option<(&str, u64)> {
    let mut s = None;
    let mut i = None;
    for part in cursor.split(';') {
        if let Some(v) = part.strip_prefix("s=") {
            s = Some(v);
        } else if let Some(v) = part.strip_prefix("i=") {
            i = u64::from_str_radix(v, 16).ok();
        }
    }
    Some((s?, i?))
}

impl Position {
    pub fn of_cursor(cursor: &str) -> Position {
        Position {
            cursor: cursor.to_string(),
            seqnum: seqnum_of(cursor).map(|(s, i)| (s.to_string(), i)),
        }
    }

    /// Whether the entry at `cursor` is this one or was written before it
    /// in the same sequence (same seqnum id, lower or equal seqnum).
    pub fn holds(&self, cursor: &str) -> bool {
        if self.cursor == cursor {
            return true;
        }
        match (seqnum_of(cursor), &self.seqnum) {
            (Some((a, i)), Some((b, j))) => a == b && i <= *j,
            _ => false,
        }
    }
}

/// The stable id of the entry at `cursor` (see the module doc); `mono`
/// (boot id, monotonic µs) is asked for only when the cursor has no seqnum.
/// An entry with neither (not written by journald) takes it from its
/// cursor, which is as stable.
pub fn entry_id(cursor: &str, mono: impl FnOnce() -> Option<(Vec<u8>, u64)>) -> EventId {
    if let Some((id, n)) = seqnum_of(cursor) {
        // The common case, on the stack.
        let mut input = [0u8; 8 + 64 + 8];
        if id.len() <= 64 {
            input[..8].copy_from_slice(b"hf-jseq1");
            input[8..8 + id.len()].copy_from_slice(id.as_bytes());
            input[8 + id.len()..16 + id.len()].copy_from_slice(&n.to_le_bytes());
            return EventId(xxhash_rust::xxh3::xxh3_128(&input[..16 + id.len()]).to_le_bytes());
        }
    }
    let mut input = Vec::with_capacity(64);
    match mono() {
        Some((boot, mono)) => {
            input.extend_from_slice(b"hf-jmon1");
            input.extend_from_slice(&boot);
            input.extend_from_slice(&mono.to_le_bytes());
        }
        None => {
            input.extend_from_slice(b"hf-jcur1");
            input.extend_from_slice(cursor.as_bytes());
        }
    }
    EventId(xxhash_rust::xxh3::xxh3_128(&input).to_le_bytes())
}

/// The fields of one entry that the mapping reads, copied out of
/// sd-journal's buffers (valid only until the next field is read) into
/// buffers kept from entry to entry.
#[derive(Debug)]
pub struct Fields {
    /// Attribute names: [`DEFAULT_FIELDS`], then the configured ones.
    attrs: Vec<String>,
    values: Vec<Vec<u8>>,
    present: Vec<bool>,
    /// The entry's realtime timestamp, µs.
    pub realtime_us: u64,
    /// A value was cut, or left out, to keep the entry within its budget.
    pub truncated: bool,
}

impl Fields {
    /// `extra`: the configured fields kept as attributes.
    pub fn new(extra: &[String]) -> Fields {
        let mut attrs: Vec<String> = DEFAULT_FIELDS.iter().map(|f| f.to_string()).collect();
        for f in extra {
            if !attrs.contains(f) && !["MESSAGE", "PRIORITY", "_HOSTNAME"].contains(&f.as_str()) {
                attrs.push(f.clone());
            }
        }
        let n = FIRST_ATTR + attrs.len();
        Fields {
            attrs,
            values: vec![Vec::new(); n],
            present: vec![false; n],
            realtime_us: 0,
            truncated: false,
        }
    }

    pub fn clear(&mut self) {
        self.present.iter_mut().for_each(|p| *p = false);
        self.realtime_us = 0;
        self.truncated = false;
    }

    /// The slot of field `name`, if the mapping reads it.
    pub fn slot(&self, name: &[u8]) -> Option<usize> {
        let fixed = match name {
            b"MESSAGE" => Some(MESSAGE),
            b"PRIORITY" => Some(PRIORITY),
            b"_HOSTNAME" => Some(HOSTNAME),
            b"_SYSTEMD_UNIT" => Some(UNIT),
            b"SYSLOG_IDENTIFIER" => Some(FIRST_ATTR + 1),
            b"_PID" => Some(PID),
            b"_COMM" => Some(FIRST_ATTR + 3),
            b"_BOOT_ID" => Some(BOOT_ID),
            _ => None,
        };
        fixed.or_else(|| {
            self.attrs[DEFAULT_FIELDS.len()..]
                .iter()
                .position(|a| a.as_bytes() == name)
                .map(|i| FIRST_ATTR + DEFAULT_FIELDS.len() + i)
        })
    }

    pub fn set(&mut self, slot: usize, value: &[u8]) {
        let v = &mut self.values[slot];
        v.clear();
        v.extend_from_slice(value);
        self.present[slot] = true;
    }

    fn get(&self, slot: usize) -> Option<&[u8]> {
        self.present[slot].then(|| self.values[slot].as_slice())
    }

    pub fn unit(&self) -> Option<&[u8]> {
        self.get(UNIT)
    }

    pub fn boot_id(&self) -> Option<&[u8]> {
        self.get(BOOT_ID)
    }

    fn host(&self) -> Option<&str> {
        self.get(HOSTNAME).and_then(|h| std::str::from_utf8(h).ok())
    }

    fn severity(&self) -> Option<(i32, &'static str)> {
        let p = std::str::from_utf8(self.get(PRIORITY)?).ok()?;
        // A syslog severity: the table every syslog reader shares.
        severity::otel(p.parse().ok()?)
    }
}

/// Builds one batch's context and events: a group per host.
pub struct BatchEncoder {
    source: String,
    observed_ns: u64,
    hosts: Vec<Option<String>>,
    /// The record of the event being written (its buffer reused).
    writer: LogRecordWriter,
}

/// A field's value: a string if UTF-8, else bytes; an integer for `_PID`
/// when it is one.
fn value(slot: usize, v: &[u8]) -> AttrValue<'_> {
    if slot == PID {
        if let Some(n) = std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
        {
            return AttrValue::Int(n);
        }
    }
    AttrValue::Text(v)
}

impl BatchEncoder {
    pub fn new(source: &str, observed_ns: u64) -> BatchEncoder {
        BatchEncoder {
            source: source.to_string(),
            observed_ns,
            hosts: Vec::new(),
            writer: LogRecordWriter::default(),
        }
    }

    /// Writes the entry's `LogRecord`, fields in tag order as prost writes
    /// them.
    fn write_record(&mut self, f: &Fields) {
        let w = &mut self.writer;
        w.start();
        w.time(f.realtime_us.saturating_mul(1000));
        if let Some((n, text)) = f.severity() {
            w.severity(n, text);
        }
        if let Some(m) = f.get(MESSAGE) {
            w.body(AttrValue::Text(m));
        }
        for (i, name) in f.attrs.iter().enumerate() {
            let slot = FIRST_ATTR + i;
            if let Some(v) = f.get(slot) {
                w.attr(name, value(slot, v));
            }
        }
        if f.truncated {
            w.attr(ATTR_TRUNCATED, AttrValue::Bool(true));
        }
    }

    /// Appends the entry's event to `out`, framed (its length, then its
    /// bytes) as [`Batch::from_framed`](crate::seglog::Batch::from_framed)
    /// takes it: the id, the record and the group (its host's).
    pub fn encode(&mut self, f: &Fields, id: &EventId, out: &mut Vec<u8>) {
        let host = f.host();
        let group = match self.hosts.iter().position(|h| h.as_deref() == host) {
            Some(g) => g,
            None => {
                self.hosts.push(host.map(str::to_string));
                self.hosts.len() - 1
            }
        } as u32;
        self.write_record(f);
        let own = EventFields {
            id: Some(*id),
            group,
            ..Default::default()
        };
        self.writer.finish(&own, out);
    }

    /// The batch's context, once every event is encoded.
    pub fn context(self) -> Vec<u8> {
        let groups = self
            .hosts
            .into_iter()
            .map(|host| Group {
                source: self.source.clone(),
                resource: Some(Resource {
                    attributes: host
                        .map(|h| {
                            vec![KeyValue {
                                key: "host.name".to_string(),
                                value: Some(AnyValue {
                                    value: Some(any_value::Value::StringValue(h)),
                                }),
                                ..Default::default()
                            }]
                        })
                        .unwrap_or_default(),
                    ..Default::default()
                }),
                scope: Some(InstrumentationScope {
                    name: SCOPE_NAME.to_string(),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                    ..Default::default()
                }),
                observed_time_unix_nano: self.observed_ns,
                record_observed: true,
                ..Default::default()
            })
            .collect();
        Context { groups }.encode_to_vec()
    }
}

#[cfg(test)]
mod tests;
