//! A log record written into a buffer of its own, then framed as an
//! event: for sources whose mapping writes a record once, with work it
//! would not repeat to measure it first (syslog builds structured-data
//! names, journald reads its fields once). One copy of the record per
//! event; no allocation per event once the buffer has grown. The file
//! source, whose line is cheap to measure, skips the buffer (see
//! `framing.rs`).

use super::fields::{AttrValue, FieldWriter, LogFields, RawLogFields};
use super::framing::{write_event, EventBuf, EventFields, WriteRecord};

/// One log record being written into a buffer of its own (kept from record
/// to record), then framed as an event. Fields must be added in tag order
/// (time, severity, body, attributes) for the bytes to be prost's own; a
/// decoder accepts any order.
#[derive(Debug, Default)]
pub struct LogRecordWriter {
    rec: Vec<u8>,
}

impl LogRecordWriter {
    /// Starts a new record (the buffer is kept).
    pub fn start(&mut self) {
        self.rec.clear();
    }

    fn fields(&mut self) -> FieldWriter<'_, Vec<u8>> {
        FieldWriter::new(&mut self.rec)
    }

    /// Frames the record as an event with `own`'s envelope fields at the
    /// end of `framed` (u32 little-endian length, then the envelope).
    /// Returns the event's length (without the 4 framing bytes).
    pub fn finish(&self, own: &EventFields<'_>, framed: &mut impl EventBuf) -> usize {
        write_event(self, own, framed)
    }
}

impl WriteRecord for LogRecordWriter {
    fn write_record(&self, out: &mut impl RawLogFields) {
        out.raw(&self.rec);
    }
}

impl LogFields for LogRecordWriter {
    fn time(&mut self, unix_nano: u64) {
        self.fields().time(unix_nano);
    }

    fn severity(&mut self, number: i32, text: &str) {
        self.fields().severity(number, text);
    }

    fn body(&mut self, body: AttrValue<'_>) {
        self.fields().body(body);
    }

    fn attr(&mut self, key: &str, value: AttrValue<'_>) {
        self.fields().attr(key, value);
    }

    fn attr_strs(&mut self, key: &str, values: &[&str]) {
        self.fields().attr_strs(key, values);
    }
}

impl RawLogFields for LogRecordWriter {
    fn raw(&mut self, encoded: &[u8]) {
        self.fields().raw(encoded);
    }

    fn observed_time(&mut self, unix_nano: u64) {
        self.fields().observed_time(unix_nano);
    }
}

#[cfg(test)]
mod tests;
