//! Multiline events: a line matching the start pattern begins an event and
//! every following line that does not match belongs to it (stack traces,
//! wrapped messages). The event is handed out when the next start line
//! arrives, when no line has joined it for the configured timeout, or when
//! the file is closed for good. Lines before the first start line form
//! events of their own, one per line, so nothing is held back forever.
//!
//! An event's lines are joined with `\n`. It keeps at most `max_line_bytes`
//! bytes (the rest is counted and the event marked truncated), and it spans
//! from its first line's start to its last line's end, so a checkpoint never
//! points into the middle of an event.

use std::time::Instant;

use super::lines::Line;
use super::Multiline;

/// The event being gathered for one file.
#[derive(Debug)]
pub struct Group {
    buf: Vec<u8>,
    start: u64,
    end: u64,
    /// Full length of the joined content, kept and dropped bytes together.
    len: u64,
    /// When the last line joined.
    pub last: Instant,
}

impl Group {
    fn new(line: &Line<'_>, keep: usize, now: Instant) -> Group {
        let take = line.bytes.len().min(keep);
        Group {
            buf: line.bytes[..take].to_vec(),
            start: line.start,
            end: line.end,
            len: line.len,
            last: now,
        }
    }

    fn join(&mut self, line: &Line<'_>, keep: usize, now: Instant) {
        if self.buf.len() < keep {
            self.buf.push(b'\n');
            let room = keep.saturating_sub(self.buf.len()).min(line.bytes.len());
            self.buf.extend_from_slice(&line.bytes[..room]);
        }
        self.len += 1 + line.len;
        self.end = line.end;
        self.last = now;
    }

    pub fn as_line(&self) -> Line<'_> {
        Line {
            bytes: &self.buf,
            start: self.start,
            end: self.end,
            len: self.len,
        }
    }
}

fn is_start(ml: &Multiline, bytes: &[u8]) -> bool {
    match std::str::from_utf8(bytes) {
        Ok(s) => ml.start_pattern.is_match(s),
        Err(_) => ml.start_pattern.is_match(&String::from_utf8_lossy(bytes)),
    }
}

/// Adds `line` to the file's pending event. If it starts a new event, the
/// pending one is handed to `emit` first.
pub fn push(
    ml: &Multiline,
    group: &mut Option<Group>,
    line: Line<'_>,
    keep: usize,
    now: Instant,
    mut emit: impl FnMut(Line<'_>),
) {
    match group {
        Some(g) if !is_start(ml, line.bytes) => g.join(&line, keep, now),
        _ => {
            if let Some(g) = group.take() {
                emit(g.as_line());
            }
            *group = Some(Group::new(&line, keep, now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn line(s: &str, start: u64) -> Line<'_> {
        Line {
            bytes: s.as_bytes(),
            start,
            end: start + s.len() as u64 + 1,
            len: s.len() as u64,
        }
    }

    #[test]
    fn continuation_lines_join_the_event_they_follow() {
        let ml = Multiline {
            start_pattern: regex::Regex::new(r"^\d{4}-").unwrap(),
            timeout: Duration::from_secs(1),
        };
        let mut g = None;
        let mut out = Vec::new();
        let now = Instant::now();
        let mut off = 0;
        for s in [
            "  orphan continuation",
            "2024-01-01 error",
            "  at a.b(c)",
            "  at d.e(f)",
            "2024-01-02 next",
        ] {
            push(&ml, &mut g, line(s, off), 1000, now, |l| {
                out.push((
                    String::from_utf8_lossy(l.bytes).into_owned(),
                    l.start,
                    l.end,
                    l.len,
                ))
            });
            off += s.len() as u64 + 1;
        }
        assert_eq!(out[0], ("  orphan continuation".into(), 0, 22, 21));
        assert_eq!(
            out[1],
            (
                "2024-01-01 error\n  at a.b(c)\n  at d.e(f)".into(),
                22,
                63,
                40
            )
        );
        let pending = g.as_ref().unwrap().as_line();
        assert_eq!(pending.bytes, b"2024-01-02 next");
        assert_eq!((pending.start, pending.end), (63, 79));
    }

    #[test]
    fn events_keep_bounded_bytes() {
        let ml = Multiline {
            start_pattern: regex::Regex::new("^S").unwrap(),
            timeout: Duration::from_secs(1),
        };
        let mut g = None;
        let now = Instant::now();
        push(&ml, &mut g, line("S123", 0), 6, now, |_| {});
        push(&ml, &mut g, line("abcdef", 5), 6, now, |_| {});
        push(&ml, &mut g, line("ghi", 12), 6, now, |_| {});
        let l = g.as_ref().unwrap().as_line();
        assert_eq!(l.bytes, b"S123\na");
        assert_eq!(l.len, 4 + 1 + 6 + 1 + 3);
        assert_eq!((l.start, l.end), (0, 16));
    }
}
