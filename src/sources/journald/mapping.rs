//! A journal entry as an event: its identity (cursor, seqnum, stable id)
//! and its OpenTelemetry log record, encoded in format 2 (see
//! `event/stored.rs`).
//!
//! | journal field | event |
//! |---|---|
//! | `MESSAGE` | body: a string if UTF-8, else bytes |
//! | `PRIORITY` 0..7 | severity number (FATAL, ERROR3, ERROR2, ERROR, WARN, INFO2, INFO, DEBUG) and text (`emerg` … `debug`) |
//! | `__REALTIME_TIMESTAMP` (µs) | time |
//! | `_HOSTNAME` | resource `host.name` (one group per host in a batch) |
//! | `_SYSTEMD_UNIT`, `SYSLOG_IDENTIFIER`, `_COMM`, `_BOOT_ID`, configured `fields` | string attributes named as the field |
//! | `_PID` | integer attribute `_PID` |
//!
//! The id is derived from the entry's place in its journal: the seqnum id
//! and seqnum (from `__SEQNUM_ID`/`__SEQNUM`, or the cursor's `s=` and `i=`
//! on systemd before 254), else the boot id and monotonic time. The same
//! entry read again, after a crash or a restart, gets the same id; it is
//! stored in the event (16 bytes) because, unlike a file line's, it cannot
//! be derived from the batch.

use bytes::{BufMut, BytesMut};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use super::export::Entry;
use crate::event::{Context, Envelope, EventId, Group, Record};

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

/// Where an entry is in the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// `__CURSOR`, what `journalctl --cursor` takes.
    pub cursor: String,
    /// The seqnum id (32 hex digits) and seqnum, if known.
    pub seqnum: Option<(String, u64)>,
}

impl Position {
    /// The seqnum id and seqnum a cursor names (`s=` and `i=`, hex).
    pub fn of_cursor(cursor: &str) -> Option<(String, u64)> {
        let mut s = None;
        let mut i = None;
        for part in cursor.split(';') {
            if let Some(v) = part.strip_prefix("s=") {
                s = Some(v.to_string());
            } else if let Some(v) = part.strip_prefix("i=") {
                i = u64::from_str_radix(v, 16).ok();
            }
        }
        Some((s?, i?))
    }

    fn of(entry: &Entry) -> Option<Position> {
        let cursor = entry.text("__CURSOR")?.to_string();
        let seqnum = match (entry.text("__SEQNUM_ID"), entry.text("__SEQNUM")) {
            (Some(id), Some(n)) => n.parse().ok().map(|n| (id.to_string(), n)),
            _ => None,
        }
        .or_else(|| Position::of_cursor(&cursor));
        Some(Position { cursor, seqnum })
    }

    /// Whether this entry is `other` or was written before it in the same
    /// sequence (same seqnum id, lower or equal seqnum).
    pub fn at_or_before(&self, other: &Position) -> bool {
        if self.cursor == other.cursor {
            return true;
        }
        match (&self.seqnum, &other.seqnum) {
            (Some((a, i)), Some((b, j))) => a == b && i <= j,
            _ => false,
        }
    }
}

/// The stable id of an entry (see the module doc). An entry with neither
/// seqnum nor boot id and monotonic time (not written by journald) takes it
/// from its cursor, which is as stable.
pub fn entry_id(entry: &Entry, pos: &Position) -> EventId {
    let mut input = Vec::with_capacity(64);
    let mono = entry
        .text("__MONOTONIC_TIMESTAMP")
        .and_then(|m| m.parse::<u64>().ok());
    match (&pos.seqnum, entry.get("_BOOT_ID"), mono) {
        (Some((id, n)), _, _) => {
            input.extend_from_slice(b"hf-jseq1");
            input.extend_from_slice(id.as_bytes());
            input.extend_from_slice(&n.to_le_bytes());
        }
        (None, Some(boot), Some(mono)) => {
            input.extend_from_slice(b"hf-jmon1");
            input.extend_from_slice(boot);
            input.extend_from_slice(&mono.to_le_bytes());
        }
        _ => {
            input.extend_from_slice(b"hf-jcur1");
            input.extend_from_slice(pos.cursor.as_bytes());
        }
    }
    EventId(xxhash_rust::xxh3::xxh3_128(&input).to_le_bytes())
}

/// OpenTelemetry severity number and text of a syslog priority.
pub fn severity(priority: u8) -> Option<(i32, &'static str)> {
    Some(match priority {
        0 => (21, "emerg"),
        1 => (19, "alert"),
        2 => (18, "crit"),
        3 => (17, "err"),
        4 => (13, "warning"),
        5 => (10, "notice"),
        6 => (9, "info"),
        7 => (5, "debug"),
        _ => return None,
    })
}

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn text_or_bytes(v: &[u8]) -> any_value::Value {
    match std::str::from_utf8(v) {
        Ok(s) => any_value::Value::StringValue(s.to_string()),
        Err(_) => any_value::Value::BytesValue(v.to_vec()),
    }
}

/// One entry, mapped and identified.
#[derive(Debug)]
pub struct Mapped {
    pub pos: Position,
    pub id: EventId,
    pub host: Option<String>,
    pub record: LogRecord,
}

/// Maps `entry`; `None` if it has no cursor (never the case in export
/// output, which the reader counts as unusable). `fields` are the configured extra attributes.
pub fn map(entry: &Entry, fields: &[String]) -> Option<Mapped> {
    let pos = Position::of(entry)?;
    let id = entry_id(entry, &pos);
    let mut record = LogRecord {
        time_unix_nano: entry
            .text("__REALTIME_TIMESTAMP")
            .and_then(|t| t.parse::<u64>().ok())
            .map_or(0, |us| us.saturating_mul(1000)),
        body: entry.get("MESSAGE").map(|m| AnyValue {
            value: Some(text_or_bytes(m)),
        }),
        ..Default::default()
    };
    if let Some((n, text)) = entry
        .text("PRIORITY")
        .and_then(|p| p.parse::<u8>().ok())
        .and_then(severity)
    {
        record.severity_number = n;
        record.severity_text = text.to_string();
    }
    let extra = fields.iter().map(String::as_str);
    for name in DEFAULT_FIELDS.into_iter().chain(extra) {
        let Some(v) = entry.get(name) else { continue };
        let value = match (
            name,
            std::str::from_utf8(v).ok().and_then(|s| s.parse().ok()),
        ) {
            ("_PID", Some(pid)) => any_value::Value::IntValue(pid),
            _ => text_or_bytes(v),
        };
        record.attributes.push(kv(name, value));
    }
    if entry.truncated {
        record
            .attributes
            .push(kv(ATTR_TRUNCATED, any_value::Value::BoolValue(true)));
    }
    Some(Mapped {
        pos,
        id,
        host: entry.text("_HOSTNAME").map(str::to_string),
        record,
    })
}

/// Builds one batch's context and events: a group per host.
pub struct BatchEncoder {
    source: String,
    observed_ns: u64,
    hosts: Vec<Option<String>>,
}

impl BatchEncoder {
    pub fn new(source: &str, observed_ns: u64) -> BatchEncoder {
        BatchEncoder {
            source: source.to_string(),
            observed_ns,
            hosts: Vec::new(),
        }
    }

    /// Appends `m`'s event to `out`, framed (its length, then its bytes),
    /// as [`Batch::from_framed`](crate::seglog::Batch::from_framed) takes
    /// it; its group is chosen here.
    pub fn encode_into(&mut self, m: Mapped, out: &mut BytesMut) {
        let group = match self.hosts.iter().position(|h| *h == m.host) {
            Some(g) => g,
            None => {
                self.hosts.push(m.host);
                self.hosts.len() - 1
            }
        };
        let ev = Envelope {
            id: m.id.0.to_vec(),
            record: Some(Record::Log(m.record)),
            group: group as u32,
            ..Default::default()
        };
        let len = ev.encoded_len();
        out.reserve(4 + len);
        out.put_u32_le(len as u32);
        // Cannot fail: the room was reserved.
        let _ = ev.encode(out);
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
                        .map(|h| vec![kv("host.name", any_value::Value::StringValue(h))])
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
mod tests {
    use super::*;
    use crate::event::Decoder;

    fn entry(fields: &[(&str, &[u8])]) -> Entry {
        Entry {
            fields: fields
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_vec()))
                .collect(),
            ..Default::default()
        }
    }

    const CURSOR: &[u8] = b"s=483a5a22b1704c33a6a5eb33a8e77067;i=1f;b=0123;m=3e8;t=60a;x=ff";

    #[test]
    fn an_entry_maps_to_a_record_with_its_fields() {
        let e = entry(&[
            ("__CURSOR", CURSOR),
            ("__REALTIME_TIMESTAMP", b"1700000000000001"),
            ("MESSAGE", b"hello"),
            ("PRIORITY", b"3"),
            ("_HOSTNAME", b"box"),
            ("_SYSTEMD_UNIT", b"ssh.service"),
            ("_PID", b"42"),
            ("CUSTOM", b"\xff"),
        ]);
        let m = map(&e, &["CUSTOM".to_string()]).unwrap();
        assert_eq!(
            m.pos.seqnum,
            Some(("483a5a22b1704c33a6a5eb33a8e77067".into(), 0x1f))
        );
        assert_eq!(m.record.time_unix_nano, 1_700_000_000_000_001_000);
        assert_eq!(
            (m.record.severity_number, m.record.severity_text.as_str()),
            (17, "err")
        );
        let keys: Vec<_> = m.record.attributes.iter().map(|a| a.key.as_str()).collect();
        assert_eq!(keys, ["_SYSTEMD_UNIT", "_PID", "CUSTOM"]);
        assert_eq!(
            m.record.attributes[1].value.as_ref().unwrap().value,
            Some(any_value::Value::IntValue(42))
        );
        assert_eq!(
            m.record.attributes[2].value.as_ref().unwrap().value,
            Some(any_value::Value::BytesValue(vec![0xff]))
        );

        // The same entry has the same id; another seqnum another.
        let id = m.id;
        assert_eq!(map(&e, &[]).unwrap().id, id);
        let mut other = e.clone();
        other.fields[0].1 = b"s=483a5a22b1704c33a6a5eb33a8e77067;i=20".to_vec();
        assert_ne!(map(&other, &[]).unwrap().id, id);

        let mut enc = BatchEncoder::new("journal", 5);
        let mut framed = BytesMut::new();
        enc.encode_into(m, &mut framed);
        let len = u32::from_le_bytes(framed[..4].try_into().unwrap()) as usize;
        assert_eq!(len + 4, framed.len());
        let ctx = bytes::Bytes::from(enc.context());
        let stored = Decoder::new().decode(&framed[4..], &ctx, 0).unwrap();
        assert_eq!(stored.id, id);
        assert_eq!(stored.source(), "journal");
        assert_eq!(stored.observed_time_unix_nano(), 5);
        let j = stored.to_json(0);
        assert_eq!(j["record"]["body"]["stringValue"], "hello");
        assert_eq!(
            j["resource"]["attributes"][0]["value"]["stringValue"],
            "box"
        );
    }

    #[test]
    fn binary_messages_and_positions() {
        let e = entry(&[("__CURSOR", CURSOR), ("MESSAGE", b"a\x00\xfe")]);
        let m = map(&e, &[]).unwrap();
        assert_eq!(
            m.record.body.unwrap().value,
            Some(any_value::Value::BytesValue(b"a\x00\xfe".to_vec()))
        );
        let p = |c: &str| Position {
            cursor: c.into(),
            seqnum: Position::of_cursor(c),
        };
        assert!(p("s=a;i=1").at_or_before(&p("s=a;i=2")));
        assert!(!p("s=a;i=3").at_or_before(&p("s=a;i=2")));
        assert!(!p("s=b;i=1").at_or_before(&p("s=a;i=2")));
        assert!(p("x").at_or_before(&p("x")));
        // Without a seqnum, boot id and monotonic time identify it.
        let e = entry(&[
            ("__CURSOR", b"opaque"),
            ("_BOOT_ID", b"b1"),
            ("__MONOTONIC_TIMESTAMP", b"77"),
        ]);
        let by_boot = map(&e, &[]).unwrap().id;
        let by_cursor = map(&entry(&[("__CURSOR", b"opaque")]), &[]).unwrap().id;
        assert_ne!(by_boot, by_cursor);
        assert!(map(&entry(&[("MESSAGE", b"x")]), &[]).is_none());
        assert_eq!(severity(8), None);
    }
}
