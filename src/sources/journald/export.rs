//! A streaming parser of the journal export format, as `journalctl
//! --output=export` writes it (systemd's `JOURNAL_EXPORT_FORMATS`):
//!
//! ```text
//! __CURSOR=s=…;i=…;b=…;m=…;t=…;x=…\n      a text field: NAME=value\n
//! MESSAGE\n<u64 little-endian length><bytes>\n   a binary-safe field
//! \n                                       an empty line ends the entry
//! ```
//!
//! Memory is bounded by the configured maximum entry size, not by what the
//! stream says: a field whose value does not fit in what is left of the
//! entry's budget keeps its first bytes and the rest is read and discarded
//! (the entry is marked truncated), so a 4 GiB length costs nothing but the
//! time to skip it. Field names are at most [`MAX_NAME`] bytes; anything
//! longer means the stream is not export format (or lost its framing), and
//! the reader stops with [`ExportError::Syntax`] rather than guess.

use std::io::{self, BufRead};

/// Longest field name accepted. systemd allows 64; a little room for
/// variants, and far below anything that costs memory.
pub const MAX_NAME: usize = 256;

/// One journal entry: its fields in stream order (names are ASCII; a name
/// may repeat, as the journal allows).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Entry {
    pub fields: Vec<(String, Vec<u8>)>,
    /// Bytes of field values the stream had for this entry (before any
    /// truncation).
    pub wire_bytes: u64,
    /// Some value was cut to stay within the entry's budget.
    pub truncated: bool,
}

impl Entry {
    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }

    /// The first value of `name`, if it is UTF-8.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(|v| std::str::from_utf8(v).ok())
    }

    #[cfg(test)]
    fn stored(&self) -> usize {
        self.fields.iter().map(|(n, v)| n.len() + v.len()).sum()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("reading the export stream: {0}")]
    Io(#[from] io::Error),
    /// The bytes are not export format: the reader cannot find the next
    /// field, so it stops.
    #[error("not journal export format at byte {offset}: {what}")]
    Syntax { offset: u64, what: &'static str },
    /// The stream ended inside an entry (the writer was stopped mid-entry).
    #[error("the export stream ended inside an entry at byte {offset}")]
    Cut { offset: u64 },
}

/// Reads entries from `R`, each at most `max_entry` bytes of names and
/// values.
pub struct ExportReader<R> {
    r: R,
    max_entry: usize,
    /// Bytes consumed so far, for error messages.
    offset: u64,
    /// Emptied fields of recycled entries: their buffers are filled again
    /// instead of two allocations per field of every entry.
    spare: Vec<(String, Vec<u8>)>,
    spare_list: Vec<(String, Vec<u8>)>,
}

/// Recycled fields kept, and the largest value buffer kept: a bound on
/// what the spare buffers hold (a 2 MiB message is not kept around).
const SPARE_FIELDS: usize = 64;
const SPARE_VALUE_BYTES: usize = 16 << 10;

/// How a value ended.
enum End {
    Newline,
    Eof,
}

impl<R: BufRead> ExportReader<R> {
    pub fn new(r: R, max_entry: usize) -> ExportReader<R> {
        ExportReader {
            r,
            max_entry,
            offset: 0,
            spare: Vec::new(),
            spare_list: Vec::new(),
        }
    }

    /// Gives `e`'s buffers back for the next entries.
    pub fn recycle(&mut self, mut e: Entry) {
        for (mut n, mut v) in e.fields.drain(..) {
            if self.spare.len() < SPARE_FIELDS && v.capacity() <= SPARE_VALUE_BYTES {
                n.clear();
                v.clear();
                self.spare.push((n, v));
            }
        }
        if self.spare_list.capacity() < e.fields.capacity() {
            self.spare_list = e.fields;
        }
    }

    /// The underlying reader (to see whether bytes are already buffered).
    pub fn get_ref(&self) -> &R {
        &self.r
    }

    /// The next entry, or `None` at the end of the stream between entries.
    pub fn next_entry(&mut self) -> Result<Option<Entry>, ExportError> {
        let mut e = Entry {
            fields: std::mem::take(&mut self.spare_list),
            ..Entry::default()
        };
        // What `e.stored()` would say, kept as the fields come.
        let mut stored = 0usize;
        loop {
            let (name, mut value) = self.spare.pop().unwrap_or_default();
            let mut name = name.into_bytes();
            // A name ends at '=' (text value) or '\n' (binary value, or an
            // empty line).
            let (end, sep) = self.read_name(&mut name)?;
            if matches!(end, End::Eof) {
                if name.is_empty() && e.fields.is_empty() {
                    return Ok(None);
                }
                return Err(ExportError::Cut {
                    offset: self.offset,
                });
            }
            if name.is_empty() && sep == b'\n' {
                self.spare.push((String::new(), value));
                if e.fields.is_empty() {
                    // Blank lines between entries carry nothing.
                    continue;
                }
                return Ok(Some(e));
            }
            let name =
                String::from_utf8(name).map_err(|_| self.syntax("a field name is not text"))?;
            // A name that does not fit is not kept either: many empty
            // fields must not grow the entry past its budget.
            let fits = stored + name.len() <= self.max_entry;
            let room = self.max_entry.saturating_sub(stored + name.len());
            let (wire, cut) = if sep == b'=' {
                let (n, end) = self.read_text(&mut value, room)?;
                if matches!(end, End::Eof) {
                    return Err(ExportError::Cut {
                        offset: self.offset,
                    });
                }
                (n as u64, n > room)
            } else {
                let n = self.read_binary(&mut value, room)?;
                (n, n > room as u64)
            };
            e.wire_bytes += wire;
            e.truncated |= cut || !fits;
            if fits {
                stored += name.len() + value.len();
                e.fields.push((name, value));
            } else {
                let mut name = name;
                name.clear();
                value.clear();
                self.spare.push((name, value));
            }
        }
    }

    fn syntax(&self, what: &'static str) -> ExportError {
        ExportError::Syntax {
            offset: self.offset,
            what,
        }
    }

    /// Reads up to and including '=' or '\n'; returns which ended it.
    fn read_name(&mut self, out: &mut Vec<u8>) -> Result<(End, u8), ExportError> {
        loop {
            let buf = self.r.fill_buf()?;
            if buf.is_empty() {
                return Ok((End::Eof, 0));
            }
            match buf.iter().position(|&b| b == b'=' || b == b'\n') {
                Some(i) => {
                    let sep = buf[i];
                    if out.len() + i > MAX_NAME {
                        return Err(self.syntax("a field name is longer than 256 bytes"));
                    }
                    out.extend_from_slice(&buf[..i]);
                    self.consume(i + 1);
                    return Ok((End::Newline, sep));
                }
                None => {
                    let n = buf.len();
                    if out.len() + n > MAX_NAME {
                        return Err(self.syntax("a field name is longer than 256 bytes"));
                    }
                    out.extend_from_slice(buf);
                    self.consume(n);
                }
            }
        }
    }

    fn consume(&mut self, n: usize) {
        self.r.consume(n);
        self.offset += n as u64;
    }

    /// Reads a text value up to its '\n', keeping at most `keep` bytes;
    /// returns the value's whole length.
    fn read_text(&mut self, out: &mut Vec<u8>, keep: usize) -> Result<(usize, End), ExportError> {
        let mut total = 0usize;
        loop {
            let buf = self.r.fill_buf()?;
            if buf.is_empty() {
                return Ok((total, End::Eof));
            }
            let (chunk, done) = match memchr::memchr(b'\n', buf) {
                Some(i) => (i, true),
                None => (buf.len(), false),
            };
            let take = chunk.min(keep.saturating_sub(out.len()));
            out.extend_from_slice(&buf[..take]);
            total += chunk;
            self.consume(chunk + usize::from(done));
            if done {
                return Ok((total, End::Newline));
            }
        }
    }

    /// Reads a binary value (length, bytes, '\n'), keeping at most `keep`
    /// bytes; returns its length.
    fn read_binary(&mut self, out: &mut Vec<u8>, keep: usize) -> Result<u64, ExportError> {
        let mut len = [0u8; 8];
        self.read_exact(&mut len)?;
        let len = u64::from_le_bytes(len);
        let keep = (keep as u64).min(len) as usize;
        out.reserve_exact(keep);
        let mut left = len;
        while left > 0 {
            let buf = self.r.fill_buf()?;
            if buf.is_empty() {
                return Err(ExportError::Cut {
                    offset: self.offset,
                });
            }
            let n = (buf.len() as u64).min(left) as usize;
            let take = n.min(keep - out.len());
            out.extend_from_slice(&buf[..take]);
            self.consume(n);
            left -= n as u64;
        }
        let mut nl = [0u8; 1];
        self.read_exact(&mut nl)?;
        if nl[0] != b'\n' {
            return Err(self.syntax("a binary field does not end with a newline"));
        }
        Ok(len)
    }

    fn read_exact(&mut self, out: &mut [u8]) -> Result<(), ExportError> {
        match self.r.read_exact(out) {
            Ok(()) => {
                self.offset += out.len() as u64;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(ExportError::Cut {
                offset: self.offset,
            }),
            Err(e) => Err(e.into()),
        }
    }
}

/// Writes `fields` as one entry in export format (text where the value
/// allows it, binary otherwise): for tests and the fuzz target's oracle.
pub fn write_entry(out: &mut Vec<u8>, fields: &[(&str, &[u8])]) {
    for (name, value) in fields {
        out.extend_from_slice(name.as_bytes());
        if value.contains(&b'\n') || std::str::from_utf8(value).is_err() {
            out.push(b'\n');
            out.extend_from_slice(&(value.len() as u64).to_le_bytes());
        } else {
            out.push(b'=');
        }
        out.extend_from_slice(value);
        out.push(b'\n');
    }
    out.push(b'\n');
}

/// Parses a whole buffer: the entries before the first error, and the
/// error. For the fuzz target.
pub fn parse_all(bytes: &[u8], max_entry: usize) -> (Vec<Entry>, Option<ExportError>) {
    let mut r = ExportReader::new(io::BufReader::with_capacity(64, bytes), max_entry);
    let mut out = Vec::new();
    loop {
        match r.next_entry() {
            Ok(Some(e)) => out.push(e),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_binary_fields_round_trip() {
        let mut s = Vec::new();
        write_entry(&mut s, &[("__CURSOR", b"s=1;i=2"), ("MESSAGE", b"hello")]);
        s.push(b'\n'); // stray blank lines between entries are ignored
        write_entry(
            &mut s,
            &[("MESSAGE", b"two\nlines\x00\xff"), ("PRIORITY", b"3")],
        );
        let (entries, err) = parse_all(&s, 1 << 20);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].text("MESSAGE"), Some("hello"));
        assert_eq!(entries[0].text("__CURSOR"), Some("s=1;i=2"));
        assert_eq!(entries[1].get("MESSAGE"), Some(&b"two\nlines\x00\xff"[..]));
        assert_eq!(entries[1].text("PRIORITY"), Some("3"));
        assert!(!entries[1].truncated);
    }

    #[test]
    fn values_past_the_budget_are_cut_and_skipped() {
        let big = vec![b'x'; 10_000];
        let mut bin = big.clone();
        bin[0] = 0xff;
        let mut s = Vec::new();
        write_entry(&mut s, &[("MESSAGE", &big), ("A", b"1")]);
        write_entry(&mut s, &[("MESSAGE", &bin), ("B", b"2")]);
        write_entry(&mut s, &[("MESSAGE", b"small")]);
        let (entries, err) = parse_all(&s, 1000);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(entries.len(), 3);
        for e in &entries[..2] {
            assert!(e.truncated);
            assert_eq!(e.get("MESSAGE").unwrap().len(), 1000 - "MESSAGE".len());
            assert_eq!(e.wire_bytes, 10_001);
        }
        assert_eq!(
            entries[0].text("A"),
            None,
            "a field past the budget is not kept"
        );
        assert_eq!(entries[2].text("MESSAGE"), Some("small"));
        assert!(!entries[2].truncated);
    }

    #[test]
    fn many_fields_stay_within_the_budget() {
        let mut s = Vec::new();
        let names: Vec<String> = (0..1000).map(|i| format!("F{i:0>200}")).collect();
        let fields: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b""[..])).collect();
        write_entry(&mut s, &fields);
        let (entries, err) = parse_all(&s, 4096);
        assert!(err.is_none(), "{err:?}");
        assert!(entries[0].truncated);
        assert!(entries[0].stored() <= 4096);
        assert_eq!(entries[0].fields.len(), 4096 / 201);
    }

    #[test]
    fn a_cut_stream_and_garbage_are_errors() {
        let mut s = Vec::new();
        write_entry(&mut s, &[("MESSAGE", b"whole")]);
        let whole = s.len();
        write_entry(&mut s, &[("MESSAGE", b"a\nb")]);
        for cut in whole + 1..s.len() - 1 {
            let (entries, err) = parse_all(&s[..cut], 1 << 20);
            assert_eq!(entries.len(), 1, "cut at {cut}");
            assert!(
                matches!(err, Some(ExportError::Cut { .. })),
                "cut at {cut}: {err:?}"
            );
        }
        let garbage = vec![b'z'; 1000];
        let (entries, err) = parse_all(&garbage, 1 << 20);
        assert!(entries.is_empty());
        assert!(matches!(err, Some(ExportError::Syntax { .. })), "{err:?}");
        // A huge binary length costs no memory: it is skipped, then cut.
        let mut huge = b"MESSAGE\n".to_vec();
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        huge.extend_from_slice(b"abc");
        let (_, err) = parse_all(&huge, 1 << 20);
        assert!(matches!(err, Some(ExportError::Cut { .. })), "{err:?}");
    }
}
