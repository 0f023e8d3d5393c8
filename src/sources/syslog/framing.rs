/*!
Splitting a TCP stream into syslog messages (RFC 6587). The first byte a
connection sends chooses its framing for good: a digit is octet counting
(`LEN SP MSG`, RFC 5425 and rsyslog's `TCP_Framing="octet-counted"`),
anything else is newline framing (each message ends with LF).

Bounds: a message longer than `max` keeps its first `max` bytes (the rest
is read and thrown away, and the message says how long it was), so the
buffer never holds more than one message's `max` plus one read. An octet
count that is not a number (or over ten digits, or `0`) cannot be
resynchronised: [`FrameError`] ends the connection, and the caller keeps
what was buffered as one message. At the end of the stream a last message
without its newline is kept, and so is a partial octet-counted one
(marked cut short).
*/

use bytes::{Bytes, BytesMut};

/// One message out of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub bytes: Bytes,
    /// The message's length when `bytes` holds only its start.
    pub original_len: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Nothing received yet.
    Unknown,
    OctetCounted,
    Newline,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("octet-counted framing expected a length and a space, got {0:?}")]
    BadOctetCount(String),
}

/// What a message cut at `max` still owes.
#[derive(Debug)]
enum Skip {
    None,
    /// Octet counting: bytes of the current message still to discard.
    Bytes(usize),
    /// Newline framing: the kept head, and the length seen so far; the
    /// head goes out when the newline comes.
    Line {
        head: Bytes,
        seen: usize,
    },
}

/// The framing state of one connection, with its read buffer.
#[derive(Debug)]
pub struct Framer {
    buf: BytesMut,
    mode: Mode,
    max: usize,
    skip: Skip,
}

impl Framer {
    pub fn new(max: usize) -> Framer {
        Framer {
            buf: BytesMut::with_capacity(Framer::initial_capacity(max)),
            mode: Mode::Unknown,
            max,
            skip: Skip::None,
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The size of the read buffer [`Framer::new`] allocates.
    pub fn initial_capacity(max: usize) -> usize {
        max.min(64 << 10)
    }

    /// Whether it keeps the head of an overlong line until the line ends
    /// (a slice of the buffer it was read into, which stays allocated).
    pub fn holds_head(&self) -> bool {
        matches!(self.skip, Skip::Line { .. })
    }

    /// The buffer to read into.
    pub fn buffer(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// The next whole message in the buffer, if any.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        loop {
            match std::mem::replace(&mut self.skip, Skip::None) {
                Skip::None => {}
                Skip::Bytes(n) => {
                    let k = n.min(self.buf.len());
                    let _ = self.buf.split_to(k);
                    if k < n {
                        self.skip = Skip::Bytes(n - k);
                        return Ok(None);
                    }
                }
                Skip::Line { head, seen } => match memchr::memchr(b'\n', &self.buf) {
                    Some(i) => {
                        let _ = self.buf.split_to(i + 1);
                        return Ok(Some(Frame {
                            bytes: head,
                            original_len: Some(seen + i),
                        }));
                    }
                    None => {
                        let n = self.buf.len();
                        self.buf.clear();
                        self.skip = Skip::Line {
                            head,
                            seen: seen + n,
                        };
                        return Ok(None);
                    }
                },
            }
            if self.mode == Mode::Unknown {
                match self.buf.first() {
                    None => return Ok(None),
                    Some(b) if b.is_ascii_digit() => self.mode = Mode::OctetCounted,
                    Some(_) => self.mode = Mode::Newline,
                }
            }
            let frame = match self.mode {
                Mode::OctetCounted => self.octet_counted()?,
                _ => self.newline(),
            };
            match frame {
                // An empty line between messages is no message.
                Some(f) if f.bytes.is_empty() && f.original_len.is_none() => continue,
                f => return Ok(f),
            }
        }
    }

    fn newline(&mut self) -> Option<Frame> {
        match memchr::memchr(b'\n', &self.buf) {
            Some(i) if i <= self.max => {
                let line = self.buf.split_to(i + 1).freeze();
                Some(Frame {
                    bytes: line.slice(..i),
                    original_len: None,
                })
            }
            Some(i) => {
                let head = self.buf.split_to(self.max).freeze();
                let _ = self.buf.split_to(i + 1 - self.max);
                Some(Frame {
                    bytes: head,
                    original_len: Some(i),
                })
            }
            None if self.buf.len() > self.max => {
                let head = self.buf.split_to(self.max).freeze();
                let seen = self.max + self.buf.len();
                self.buf.clear();
                self.skip = Skip::Line { head, seen };
                None
            }
            None => None,
        }
    }

    fn octet_counted(&mut self) -> Result<Option<Frame>, FrameError> {
        let digits = self
            .buf
            .iter()
            .take(11)
            .take_while(|b| b.is_ascii_digit())
            .count();
        let bad = || {
            let shown = &self.buf[..self.buf.len().min(16)];
            FrameError::BadOctetCount(String::from_utf8_lossy(shown).into_owned())
        };
        if digits == self.buf.len() && digits <= 10 {
            // The length is still arriving (or nothing is left).
            return Ok(None);
        }
        if digits == 0 || digits > 10 || self.buf[0] == b'0' || self.buf[digits] != b' ' {
            return Err(bad());
        }
        let len: usize = std::str::from_utf8(&self.buf[..digits])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)?;
        let header = digits + 1;
        let keep = len.min(self.max);
        if self.buf.len() < header + keep {
            return Ok(None);
        }
        let _ = self.buf.split_to(header);
        let bytes = self.buf.split_to(keep).freeze();
        if len > keep {
            self.skip = Skip::Bytes(len - keep);
            return Ok(Some(Frame {
                bytes,
                original_len: Some(len),
            }));
        }
        Ok(Some(Frame {
            bytes,
            original_len: None,
        }))
    }

    /// At the end of the stream: what is left, as a last message.
    pub fn finish(&mut self) -> Option<Frame> {
        match std::mem::replace(&mut self.skip, Skip::None) {
            Skip::Line { head, seen } => {
                return Some(Frame {
                    bytes: head,
                    original_len: Some(seen),
                })
            }
            Skip::Bytes(_) | Skip::None => {}
        }
        if self.buf.is_empty() {
            return None;
        }
        if self.mode == Mode::OctetCounted {
            let digits = self.buf.iter().take_while(|b| b.is_ascii_digit()).count();
            if digits > 0 && self.buf.get(digits) == Some(&b' ') {
                let len = std::str::from_utf8(&self.buf[..digits])
                    .ok()
                    .and_then(|s| s.parse::<usize>().ok());
                let _ = self.buf.split_to(digits + 1);
                let bytes = self.buf.split().freeze();
                return Some(Frame {
                    original_len: len.filter(|&l| l != bytes.len()),
                    bytes,
                });
            }
        }
        self.rest()
    }

    /// What is buffered, as one message (after a [`FrameError`]), cut at
    /// `max` like any other.
    pub fn rest(&mut self) -> Option<Frame> {
        if self.buf.is_empty() {
            return None;
        }
        let len = self.buf.len();
        let bytes = self.buf.split_to(len.min(self.max)).freeze();
        self.buf.clear();
        Some(Frame {
            original_len: (len > self.max).then_some(len),
            bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` in pieces of `step` bytes; returns the frames, the
    /// error if one ended the stream, and the last message.
    fn run(input: &[u8], max: usize, step: usize) -> (Vec<Frame>, Option<FrameError>) {
        let mut f = Framer::new(max);
        let mut out = Vec::new();
        for chunk in input.chunks(step.max(1)) {
            f.buffer().extend_from_slice(chunk);
            loop {
                match f.next_frame() {
                    Ok(Some(fr)) => out.push(fr),
                    Ok(None) => break,
                    Err(e) => {
                        out.extend(f.rest());
                        return (out, Some(e));
                    }
                }
            }
        }
        out.extend(f.finish());
        (out, None)
    }

    fn msg(b: &[u8]) -> Frame {
        Frame {
            bytes: Bytes::copy_from_slice(b),
            original_len: None,
        }
    }

    /// Both framings, the input cut at every step, give the same frames.
    #[test]
    fn both_framings_in_any_pieces() {
        let cases: [(&[u8], [&[u8]; 3]); 2] = [
            // Newlines: a CR is kept, an empty line is no message.
            (
                b"<13>one\n<13>two\r\n\n<13>three",
                [b"<13>one", b"<13>two\r", b"<13>three"],
            ),
            // Octet counting: newlines inside a message are its own.
            (
                b"7 <13>one9 <13>two\n\n5 <13>t",
                [b"<13>one", b"<13>two\n\n", b"<13>t"],
            ),
        ];
        for (input, want) in cases {
            for step in 1..input.len() {
                let (frames, err) = run(input, 100, step);
                assert_eq!(err, None);
                assert_eq!(frames, want.map(msg), "{input:?} step {step}");
            }
        }
    }

    #[test]
    fn overlong_messages_keep_their_head_and_length() {
        for step in [1, 3, 64] {
            let (frames, _) = run(b"<13>abcdefghij\n<13>ok\n", 6, step);
            assert_eq!(
                frames[0],
                Frame {
                    bytes: Bytes::from_static(b"<13>ab"),
                    original_len: Some(14)
                }
            );
            assert_eq!(frames[1], msg(b"<13>ok"));
            let (frames, _) = run(b"14 <13>abcdefghij6 <13>ok", 6, step);
            assert_eq!(frames[0].original_len, Some(14));
            assert_eq!(frames[0].bytes, &b"<13>ab"[..]);
            assert_eq!(frames[1], msg(b"<13>ok"));
        }
        // Cut short at the end of the stream.
        let (frames, _) = run(b"<13>abcdefghij", 6, 4);
        assert_eq!(frames[0].original_len, Some(14));
        let (frames, _) = run(b"10 <13>abc", 100, 4);
        assert_eq!(frames[0].bytes, &b"<13>abc"[..]);
        assert_eq!(frames[0].original_len, Some(10));
    }

    #[test]
    fn a_bad_octet_count_ends_the_stream_keeping_the_bytes() {
        for bad in [&b"5 <13>x12x <13>y"[..], b"012 <13>x", b"99999999999 x"] {
            let (frames, err) = run(bad, 100, 100);
            assert!(matches!(err, Some(FrameError::BadOctetCount(_))), "{bad:?}");
            let kept: usize = frames.iter().map(|f| f.bytes.len()).sum();
            assert!(kept > 0);
        }
        // What is left after a bad count is cut at max like any message.
        let (frames, _) = run(b"9x 0123456789abcdef", 8, 100);
        assert_eq!(frames[0].bytes, &b"9x 01234"[..]);
        assert_eq!(frames[0].original_len, Some(19));
    }
}
