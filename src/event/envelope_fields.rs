//! The envelope's field numbers, and readers of single fields that do not
//! decode the whole event.
//!
//! The numbers are those of the prost messages in `event.rs` and
//! `stored.rs` (whose derive attributes cannot name a constant); the
//! writers (`framing.rs`) use them, and the byte-equality tests against
//! prost hold the two together.
//!
//! A sink's input filter reads an event's `source` (format 1) or its
//! `group` and each group's `source` (format 2) here, per event and
//! without allocating, instead of decoding envelopes it may not want.

use super::metric_point::varint;

/// [`Envelope`](super::Envelope) fields.
pub(super) const ID: u32 = 1;
pub(super) const SOURCE: u32 = 2;
pub(super) const OBSERVED_TIME: u32 = 3;
pub(super) const LOG_RECORD: u32 = 8;
pub(super) const SPAN: u32 = 9;
pub(super) const METRIC: u32 = 10;
pub(super) const ORIGIN: u32 = 11;
pub(super) const GROUP: u32 = 12;
pub(super) const OBSERVED_DELTA: u32 = 13;

/// The key that opens an envelope's record, length-delimited, for a writer
/// that frames a record prost encodes (the OTLP receiver's split: the
/// record's own fields are prost's, the envelope's are written here).
pub const LOG_RECORD_KEY: u8 = key(LOG_RECORD);
pub const SPAN_KEY: u8 = key(SPAN);
pub const METRIC_KEY: u8 = key(METRIC);

const fn key(field: u32) -> u8 {
    (field << 3 | 2) as u8
}

/// Writes an envelope's `id` (format 1 stores it; format 2 derives it).
pub fn put_id(id: &[u8; 16], out: &mut Vec<u8>) {
    out.push(key(ID));
    out.push(16);
    out.extend_from_slice(id);
}

/// Writes a format-2 event's `group` (its index in the batch's context);
/// group 0 is the default and is not written.
pub fn put_group(group: u64, out: &mut Vec<u8>) {
    if group != 0 {
        prost::encoding::encode_key(GROUP, prost::encoding::WireType::Varint, out);
        prost::encoding::encode_varint(group, out);
    }
}

/// Writes the head of one group of a batch's `Context`: the group's
/// encoded fields (`len` bytes) follow.
pub fn put_context_group_head(len: usize, out: &mut Vec<u8>) {
    prost::encoding::encode_key(
        CONTEXT_GROUPS,
        prost::encoding::WireType::LengthDelimited,
        out,
    );
    prost::encoding::encode_varint(len as u64, out);
}

/// [`FileOrigin`](super::FileOrigin) fields (1, the path, comes encoded).
pub(super) const ORIGIN_FINGERPRINT: u32 = 2;
pub(super) const ORIGIN_GENERATION: u32 = 3;
pub(super) const ORIGIN_OFFSET: u32 = 4;
pub(super) const ORIGIN_END_OFFSET: u32 = 5;

/// [`Context`](super::Context) field: its groups.
const CONTEXT_GROUPS: u32 = 1;
/// [`Group`](super::Group) field: its source.
const GROUP_SOURCE: u32 = 1;

/// One field of a protobuf message, as [`walk`] hands it out.
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// Calls `f` with each field of the message in `b`; `None` if the bytes
/// are not a protobuf message.
fn walk<'a>(mut b: &'a [u8], mut f: impl FnMut(u32, Field<'a>)) -> Option<()> {
    while !b.is_empty() {
        let key = varint(&mut b)?;
        // A field number past u32 matches none of ours: handed out as 0.
        let (field, wire) = (u32::try_from(key >> 3).unwrap_or(0), key & 7);
        match wire {
            0 => {
                let v = varint(&mut b)?;
                f(field, Field::Varint(v));
            }
            1 => {
                b = b.get(8..)?;
                f(field, Field::Fixed);
            }
            2 => {
                let len = usize::try_from(varint(&mut b)?).ok()?;
                let v = b.get(..len)?;
                b = &b[len..];
                f(field, Field::Bytes(v));
            }
            5 => {
                b = b.get(4..)?;
                f(field, Field::Fixed);
            }
            _ => return None,
        }
    }
    Some(())
}

/// The `source` of a format-1 event (empty when absent); `None` if the
/// bytes are not a protobuf message.
pub fn source_of(event: &[u8]) -> Option<&[u8]> {
    bytes_field(event, SOURCE)
}

/// The bytes of field `number` of message `b` (empty when absent).
fn bytes_field(b: &[u8], number: u32) -> Option<&[u8]> {
    let mut found: &[u8] = b"";
    walk(b, |field, v| {
        // The last occurrence wins in protobuf.
        match v {
            Field::Bytes(s) if field == number => found = s,
            _ => {}
        }
    })?;
    Some(found)
}

/// The `group` of a format-2 event (0 when absent); `None` if the bytes
/// are not a protobuf message.
pub fn group_of(event: &[u8]) -> Option<u64> {
    let mut group = 0;
    walk(event, |field, v| {
        if let (GROUP, Field::Varint(g)) = (field, v) {
            group = g;
        }
    })?;
    Some(group)
}

/// The `source` of each group of a batch context, in order; `None` if the
/// context or one of its groups is not a protobuf message.
pub fn group_sources(context: &[u8]) -> Option<Vec<&[u8]>> {
    let mut groups = Vec::new();
    let mut ok = true;
    walk(context, |field, v| {
        if let (CONTEXT_GROUPS, Field::Bytes(g)) = (field, v) {
            match bytes_field(g, GROUP_SOURCE) {
                Some(s) => groups.push(s),
                None => ok = false,
            }
        }
    })?;
    ok.then_some(groups)
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::logs::v1::LogRecord;
    use prost::Message;

    use super::*;
    use crate::event::{Context, Envelope, EventId, FileOrigin, Group, Record};

    fn envelope() -> Envelope {
        Envelope {
            id: EventId::random().0.to_vec(),
            source: "syslog".into(),
            observed_time_unix_nano: 42,
            record: Some(Record::Log(LogRecord {
                severity_number: 9,
                ..Default::default()
            })),
            origin: Some(FileOrigin {
                path: "/x".into(),
                fingerprint: 3,
                ..Default::default()
            }),
            group: 300,
            observed_delta: 5,
            ..Default::default()
        }
    }

    /// The readers find what prost wrote, past fields of every wire type.
    #[test]
    fn fields_read_without_decoding_are_prosts() {
        let bytes = envelope().encode_to_vec();
        assert_eq!(source_of(&bytes), Some(&b"syslog"[..]));
        assert_eq!(group_of(&bytes), Some(300));
        let bare = Envelope::default().encode_to_vec();
        assert_eq!(source_of(&bare), Some(&b""[..]));
        assert_eq!(group_of(&bare), Some(0));
        let ctx = Context {
            groups: ["a", "", "c"]
                .map(|s| Group {
                    source: s.into(),
                    observed_time_unix_nano: 7,
                    ..Default::default()
                })
                .to_vec(),
        }
        .encode_to_vec();
        assert_eq!(
            group_sources(&ctx),
            Some(vec![&b"a"[..], &b""[..], &b"c"[..]])
        );
    }

    #[test]
    fn damaged_bytes_are_no_message() {
        assert_eq!(source_of(b"\xff\xff\xff"), None);
        assert_eq!(group_of(b"\x12\x05ab"), None);
        // A group that is not a message makes the context unreadable.
        assert_eq!(group_sources(b"\x0a\x01\xff"), None);
        // A field number beyond u32 is skipped, not taken for another.
        let mut b = vec![0x80 | 0x60, 0x80, 0x80, 0x80, 0x80, 0x01, 9];
        b.extend_from_slice(&envelope().encode_to_vec());
        assert_eq!(group_of(&b), Some(300));
    }
}
