//! Framing a log record as an event: the envelope fields an event stores
//! beside its record, written around it, behind the u32 little-endian
//! length the log's batches take
//! ([`Batch::from_framed`](crate::seglog::Batch::from_framed)).
//!
//! What each writer stores (see `stored.rs` for what the reader rebuilds):
//!
//! | writer | id | shared | observed | origin | group, delta |
//! |---|---|---|---|---|---|
//! | file line, format 2 | derived | the group's | the group's + delta | offset from the group's, length | yes |
//! | file line, format 1 | stored | encoded once per source | stored | whole | no |
//! | syslog message | derived | the group's | the group's + delta | none | yes |
//! | journal entry | stored | the group's | the group's | none | group |
//!
//! The record is measured first ([`WriteRecord`] writes it twice: to a
//! counter, then into the buffer), so the event is written in one pass,
//! straight into the batch, without a buffer of its own.

use bytes::{BufMut, BytesMut};

use super::envelope_fields::{
    GROUP, ID, LOG_RECORD, OBSERVED_DELTA, OBSERVED_TIME, ORIGIN, ORIGIN_END_OFFSET,
    ORIGIN_FINGERPRINT, ORIGIN_GENERATION, ORIGIN_OFFSET,
};
use super::fields::{FieldLen, FieldWriter, RawLogFields};
use super::wire::{
    bytes_len, fixed64_len, put_bytes, put_fixed64, put_head, put_varint_field, varint_field_len,
};
use super::EventId;

/// A log record that writes its fields on demand: once to measure them,
/// once into the event. Both calls must write the same fields.
pub trait WriteRecord {
    fn write_record(&self, out: &mut impl RawLogFields);
}

/// A buffer events are framed into.
pub trait EventBuf: BufMut {
    /// Makes room for `additional` bytes at once.
    fn reserve_event(&mut self, additional: usize);
    /// The bytes written so far.
    fn filled(&self) -> usize;
}

impl EventBuf for Vec<u8> {
    #[inline]
    fn reserve_event(&mut self, additional: usize) {
        self.reserve(additional);
    }

    #[inline]
    fn filled(&self) -> usize {
        self.len()
    }
}

impl EventBuf for BytesMut {
    #[inline]
    fn reserve_event(&mut self, additional: usize) {
        self.reserve(additional);
    }

    #[inline]
    fn filled(&self) -> usize {
        self.len()
    }
}

/// The fields an event stores beside its log record, in the order they are
/// written: id, shared, observed time, (the record), origin, group, delta.
/// What is left out the reader takes from the event's group.
#[derive(Debug, Clone, Copy, Default)]
pub struct EventFields<'a> {
    /// Field 1, for an id the reader cannot derive.
    pub id: Option<EventId>,
    /// Envelope fields already encoded (format 1: source, resource and
    /// scope, the same for every event of a source).
    pub shared: &'a [u8],
    /// Field 3, written even when 0 (format 1 has always stored it).
    pub observed: Option<u64>,
    /// Field 11, where in a file the record came from.
    pub origin: Option<OriginFields<'a>>,
    /// Field 12, the event's group in its batch's context (0 not stored).
    pub group: u32,
    /// Field 13, the observed time minus its group's (0 not stored).
    pub observed_delta: u64,
}

/// A file origin's fields as stored: whole in format 1; in format 2 only
/// `offset` (from the group's) and `end_offset` (the length), the rest
/// the group's. Numbers that are 0 are not stored.
#[derive(Debug, Clone, Copy, Default)]
pub struct OriginFields<'a> {
    /// Field 1, the path, already encoded (empty: not stored).
    pub path: &'a [u8],
    pub fingerprint: u64,
    pub generation: u32,
    pub offset: u64,
    pub end_offset: u64,
}

impl OriginFields<'_> {
    #[inline]
    fn len(&self) -> usize {
        self.path.len()
            + if self.fingerprint == 0 {
                0
            } else {
                fixed64_len(ORIGIN_FINGERPRINT)
            }
            + varint_field_len(ORIGIN_GENERATION, u64::from(self.generation))
            + varint_field_len(ORIGIN_OFFSET, self.offset)
            + varint_field_len(ORIGIN_END_OFFSET, self.end_offset)
    }

    #[inline]
    fn put(&self, out: &mut impl BufMut) {
        put_head(ORIGIN, self.len(), out);
        out.put_slice(self.path);
        if self.fingerprint != 0 {
            put_fixed64(ORIGIN_FINGERPRINT, self.fingerprint, out);
        }
        put_varint_field(ORIGIN_GENERATION, u64::from(self.generation), out);
        put_varint_field(ORIGIN_OFFSET, self.offset, out);
        put_varint_field(ORIGIN_END_OFFSET, self.end_offset, out);
    }
}

impl EventFields<'_> {
    /// The envelope's length around a record of `record` bytes.
    #[inline]
    fn len(&self, record: usize) -> usize {
        self.id.map_or(0, |_| bytes_len(ID, 16))
            + self.shared.len()
            + self.observed.map_or(0, |_| fixed64_len(OBSERVED_TIME))
            + bytes_len(LOG_RECORD, record)
            + self.origin.map_or(0, |o| bytes_len(ORIGIN, o.len()))
            + varint_field_len(GROUP, u64::from(self.group))
            + varint_field_len(OBSERVED_DELTA, self.observed_delta)
    }

    #[inline]
    fn put_before_record(&self, out: &mut impl BufMut) {
        if let Some(id) = &self.id {
            put_bytes(ID, &id.0, out);
        }
        out.put_slice(self.shared);
        if let Some(t) = self.observed {
            put_fixed64(OBSERVED_TIME, t, out);
        }
    }

    #[inline]
    fn put_after_record(&self, out: &mut impl BufMut) {
        if let Some(o) = &self.origin {
            o.put(out);
        }
        put_varint_field(GROUP, u64::from(self.group), out);
        put_varint_field(OBSERVED_DELTA, self.observed_delta, out);
    }
}

/// Appends one event to `out`: its length (u32 little-endian), then the
/// envelope of `record` with `own`'s fields. Returns the event's length
/// (without the 4 framing bytes).
#[inline]
pub fn write_event(
    record: &impl WriteRecord,
    own: &EventFields<'_>,
    out: &mut impl EventBuf,
) -> usize {
    let mut measured = FieldLen::default();
    record.write_record(&mut measured);
    let rec = measured.0;
    let total = own.len(rec);
    out.reserve_event(4 + total);
    out.put_u32_le(total as u32);
    let before = out.filled();
    own.put_before_record(out);
    put_head(LOG_RECORD, rec, out);
    record.write_record(&mut FieldWriter::new(out));
    own.put_after_record(out);
    debug_assert_eq!(out.filled() - before, total, "measured and written differ");
    total
}

/// Appends one event encoded elsewhere (the OTLP split's) to `out`,
/// behind its length, as [`write_event`] frames the events it writes.
#[inline]
pub fn put_encoded_event(event: &[u8], out: &mut impl EventBuf) {
    out.reserve_event(4 + event.len());
    out.put_u32_le(event.len() as u32);
    out.put_slice(event);
}

#[cfg(test)]
mod tests;
