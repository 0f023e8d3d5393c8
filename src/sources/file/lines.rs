//! Splitting a file's bytes into lines.
//!
//! A line ends at `\n`; a `\r` just before it is dropped too, so CRLF files
//! read like LF files. Lines wholly inside one read buffer are handed out as
//! slices of it (no copy). A line that spans reads is gathered in a per-file
//! buffer that keeps at most `max_line_bytes + 1` bytes and counts the rest,
//! so an endless line costs bounded memory; the consumer of the line sees its
//! full length and truncates. Every line carries the byte offsets of its
//! first byte and of the byte after its newline: the second is where reading
//! resumes, and what a checkpoint records.

use memchr::memchr;

/// A complete line (or a multiline event): its content without the newline
/// and a trailing `\r`, where it starts, where the next one starts, and the
/// content's full length (more than `bytes.len()` when bytes were dropped).
#[derive(Debug, Clone, Copy)]
pub struct Line<'a> {
    pub bytes: &'a [u8],
    pub start: u64,
    pub end: u64,
    pub len: u64,
}

/// The unfinished last line of a file.
#[derive(Debug, Default)]
pub struct Splitter {
    /// Kept bytes of the unfinished line (at most the `keep` passed to `feed`).
    partial: Vec<u8>,
    /// Offset of its first byte.
    start: u64,
    /// Its length so far, kept and dropped bytes together.
    len: u64,
    /// Its last byte, to strip a `\r` even when it was not kept.
    last: u8,
}

/// Above this, a partial-line buffer is given back after use, so 10,000
/// files that once had a long unfinished line do not each keep 256 KiB.
const KEEP_CAPACITY: usize = 64 << 10;

impl Splitter {
    /// Splits `data`, read at file offset `base`, calling `f` for each
    /// complete line. At most `keep` bytes of an unfinished line are kept.
    pub fn feed(&mut self, data: &[u8], base: u64, keep: usize, mut f: impl FnMut(Line<'_>)) {
        let mut i = 0;
        while let Some(k) = memchr(b'\n', &data[i..]) {
            let nl = i + k;
            let end = base + nl as u64 + 1;
            if self.len > 0 {
                self.push(&data[i..nl], keep);
                f(self.view(end));
                self.reset();
            } else {
                let mut b = &data[i..nl];
                if b.last() == Some(&b'\r') {
                    b = &b[..b.len() - 1];
                }
                f(Line {
                    bytes: b,
                    start: base + i as u64,
                    end,
                    len: b.len() as u64,
                });
            }
            i = nl + 1;
        }
        if i < data.len() {
            if self.len == 0 {
                self.start = base + i as u64;
            }
            self.push(&data[i..], keep);
        }
    }

    fn push(&mut self, seg: &[u8], keep: usize) {
        let room = keep.saturating_sub(self.partial.len()).min(seg.len());
        self.partial.extend_from_slice(&seg[..room]);
        self.len += seg.len() as u64;
        if let Some(&b) = seg.last() {
            self.last = b;
        }
    }

    fn view(&self, end: u64) -> Line<'_> {
        let mut len = self.len;
        let mut bytes = &self.partial[..];
        if self.last == b'\r' && len > 0 {
            len -= 1;
            if bytes.len() as u64 > len {
                bytes = &bytes[..len as usize];
            }
        }
        Line {
            bytes,
            start: self.start,
            end,
            len,
        }
    }

    /// Whether part of a line is waiting for its newline.
    pub fn has_partial(&self) -> bool {
        self.len > 0
    }

    /// Hands out the unfinished line as complete (the file went idle or is
    /// being closed for good); it ends where the bytes read so far end.
    pub fn flush(&mut self, mut f: impl FnMut(Line<'_>)) {
        if self.len == 0 {
            return;
        }
        // A trailing `\r` is dropped as before a newline: if it was the
        // first half of a CRLF, its `\n` later makes an empty line.
        f(self.view(self.start + self.len));
        self.reset();
    }

    /// Forgets the unfinished line (the file was truncated under it).
    pub fn reset(&mut self) {
        self.len = 0;
        self.last = 0;
        if self.partial.capacity() > KEEP_CAPACITY {
            self.partial = Vec::new();
        } else {
            self.partial.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&[u8]], keep: usize) -> (Vec<(String, u64, u64, u64)>, Splitter) {
        let mut s = Splitter::default();
        let mut out = Vec::new();
        let mut base = 0;
        for c in chunks {
            s.feed(c, base, keep, |l| {
                out.push((
                    String::from_utf8_lossy(l.bytes).into_owned(),
                    l.start,
                    l.end,
                    l.len,
                ))
            });
            base += c.len() as u64;
        }
        (out, s)
    }

    #[test]
    fn lf_crlf_and_lines_across_reads() {
        let (out, s) = split(&[b"ab\r\ncd\nef", b"gh\r", b"\nij"], 100);
        assert_eq!(
            out,
            vec![
                ("ab".into(), 0, 4, 2),
                ("cd".into(), 4, 7, 2),
                ("efgh".into(), 7, 13, 4),
            ]
        );
        assert!(s.has_partial());
        let mut s = s;
        let mut flushed = Vec::new();
        s.flush(|l| flushed.push((l.bytes.to_vec(), l.start, l.end)));
        assert_eq!(flushed, vec![(b"ij".to_vec(), 13, 15)]);
        assert!(!s.has_partial());
    }

    #[test]
    fn long_lines_keep_bounded_bytes_and_report_their_length() {
        // In one buffer: handed out whole, the caller truncates.
        let (out, _) = split(&[b"0123456789\n"], 4);
        assert_eq!(out, vec![("0123456789".into(), 0, 11, 10)]);
        // Across reads: at most `keep` bytes kept, the length counts all.
        let (out, _) = split(&[b"01234", b"56789", b"ab\r\n"], 4);
        assert_eq!(out, vec![("0123".into(), 0, 14, 12)]);
        // A \r that was not kept is still not counted.
        let (out, _) = split(&[b"01234", b"\r", b"\n"], 4);
        assert_eq!(out, vec![("0123".into(), 0, 7, 5)]);
        let (out, _) = split(&[b"", b"\n", b"\n"], 4);
        assert_eq!(out, vec![("".into(), 0, 1, 0), ("".into(), 1, 2, 0)]);
    }
}
