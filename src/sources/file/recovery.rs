//! Recovering positions from the log after a crash.
//!
//! The checkpoint is written after the appends it describes, so a crash can
//! leave lines in the log that the checkpoint does not yet cover. On startup
//! the source reads the log from the checkpoint's `log_seq` to its end,
//! decodes only the `source` and `origin` fields of each event (the record
//! itself is skipped unparsed; in format 2 the source, fingerprint and
//! generation are those of the event's group in its batch's context, decoded
//! once per batch, and the offsets the event's own), and collects for each
//! stream (key and generation) the spans `offset..end` of its lines. A stream then resumes
//! after the last span that continues, without a gap, from its checkpointed
//! offset. Spans are chained rather than taking the maximum end because an
//! append refused as full (`when_full = "block"`) and retried may land after
//! later ones: if the source stops before the refused one lands, the log
//! holds lines past a gap. The gap is read again (its lines are not in the
//! log), and the spans past it are handed to the tailer as *ahead*: their
//! lines are read and skipped, not appended a second time. The checkpoint
//! keeps them (`Record::ahead`) until the stream's position passes them,
//! since the next checkpoint's `log_seq` no longer reaches back to them.
//!
//! If events at or after `log_seq` were evicted before the restart
//! (`when_full = "drop_oldest"`), the reader starts at the oldest event left;
//! lines whose events were evicted are then read again.

use std::collections::HashMap;

use bytes::Bytes;

use crate::seglog::{Log, LogError};

/// The fields of an [`Envelope`](crate::event::Envelope) recovery needs; the
/// rest is skipped by the decoder. In format 2 only `origin`'s offsets and
/// `group` are the event's own.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OriginView {
    #[prost(string, tag = "2")]
    pub source: String,
    #[prost(message, optional, tag = "11")]
    pub origin: Option<OriginNumbers>,
    #[prost(uint32, tag = "12")]
    pub group: u32,
}

/// The fields of a format-2 [`Context`](crate::event::Context) recovery
/// needs.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContextView {
    #[prost(message, repeated, tag = "1")]
    pub groups: Vec<GroupView>,
}

/// A [`Group`](crate::event::Group)'s source, and its file's fingerprint
/// and generation (the path is skipped).
#[derive(Clone, PartialEq, prost::Message)]
pub struct GroupView {
    #[prost(string, tag = "1")]
    pub source: String,
    #[prost(message, optional, tag = "7")]
    pub origin: Option<OriginNumbers>,
}

crate::event::file_origin_message! {
    /// `FileOrigin` without its path (see `encode.rs`). In format 2 an
    /// event's own `offset` and `end_offset` count from its group's offset.
    pub struct OriginNumbers {}
}

pub fn decode_origin(bytes: &[u8]) -> Result<OriginView, prost::DecodeError> {
    <OriginView as prost::Message>::decode(bytes)
}

/// What one event from the log is to recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peeked {
    /// Not an event of the source (or not readable).
    Other,
    /// The source's, without a usable origin (none is expected).
    Unusable,
    /// The source's line `offset..end` of stream `(key, generation)`.
    Line {
        key: u64,
        generation: u32,
        offset: u64,
        end: u64,
    },
}

/// Reads the origin of events of either format, decoding each batch's
/// context once.
#[derive(Default)]
pub struct Peeker {
    last: Option<(Bytes, ContextView)>,
}

impl Peeker {
    /// What `data` (an event's own bytes, `context` its batch's: empty for
    /// a format-1 event) is to the recovery of `source`.
    pub fn peek(&mut self, data: &[u8], context: &Bytes, source: &str) -> Peeked {
        let Ok(view) = decode_origin(data) else {
            return Peeked::Other;
        };
        if context.is_empty() {
            if view.source != source {
                return Peeked::Other;
            }
            return match view.origin {
                Some(o) if o.end_offset > o.offset => Peeked::Line {
                    key: o.fingerprint,
                    generation: o.generation,
                    offset: o.offset,
                    end: o.end_offset,
                },
                _ => Peeked::Unusable,
            };
        }
        let same = matches!(&self.last, Some((b, _))
            if b.as_ptr() == context.as_ptr() && b.len() == context.len() || b == context);
        if !same {
            let Ok(ctx) = <ContextView as prost::Message>::decode(context.as_ref()) else {
                self.last = None;
                return Peeked::Other;
            };
            self.last = Some((context.clone(), ctx));
        }
        let Some((_, ctx)) = &self.last else {
            return Peeked::Other;
        };
        let Some(g) = ctx.groups.get(view.group as usize) else {
            return Peeked::Other;
        };
        if g.source != source {
            return Peeked::Other;
        }
        // Format 2 stores the offset from the group's and the length.
        match (&g.origin, view.origin) {
            (Some(go), Some(o)) if o.end_offset > 0 => {
                let offset = go.offset.wrapping_add(o.offset);
                Peeked::Line {
                    key: go.fingerprint,
                    generation: go.generation,
                    offset,
                    end: offset.wrapping_add(o.end_offset),
                }
            }
            _ => Peeked::Unusable,
        }
    }
}

/// The spans of each stream's lines found in the log.
#[derive(Debug, Default)]
pub struct Found {
    spans: HashMap<(u64, u32), Vec<(u64, u64)>>,
    /// Events of this source found.
    pub events: u64,
    /// Events read in all.
    pub scanned: u64,
    /// Events of this source without a usable origin (none is expected).
    pub unusable: u64,
}

impl Found {
    pub fn add(&mut self, key: u64, generation: u32, offset: u64, end: u64) {
        let v = self.spans.entry((key, generation)).or_default();
        match v.last_mut() {
            Some(last) if last.1 == offset => last.1 = end,
            _ => v.push((offset, end)),
        }
    }

    fn chain(spans: &mut [(u64, u64)], from: u64) -> u64 {
        spans.sort_unstable();
        let mut pos = from;
        for &(o, e) in spans.iter() {
            if o > pos {
                break;
            }
            pos = pos.max(e);
        }
        pos
    }

    /// Where stream `(key, generation)`, checkpointed at `from` with the
    /// spans `ahead` already known to be in the log, resumes; and the spans
    /// past that point whose lines are in the log (merged, sorted).
    pub fn resume(
        &mut self,
        key: u64,
        generation: u32,
        from: u64,
        ahead: &[(u64, u64)],
    ) -> (u64, Vec<(u64, u64)>) {
        let mut spans: Vec<(u64, u64)> = self
            .spans
            .get(&(key, generation))
            .cloned()
            .unwrap_or_default();
        spans.extend_from_slice(ahead);
        let pos = Self::chain(&mut spans, from);
        let mut rest: Vec<(u64, u64)> = Vec::new();
        for (o, e) in spans {
            if e <= pos || o >= e {
                continue;
            }
            match rest.last_mut() {
                Some(last) if o <= last.1 => last.1 = last.1.max(e),
                _ => rest.push((o, e)),
            }
        }
        (pos, rest)
    }

    /// Where a stream the checkpoint does not know resumes: after the spans
    /// chained from the lowest offset found (lines before it were appended
    /// earlier and have left the log).
    /// Also returns the spans found past a gap, as [`Found::resume`] does.
    pub fn resume_unknown(&mut self, key: u64, generation: u32) -> Option<(u64, Vec<(u64, u64)>)> {
        let low = self
            .spans
            .get(&(key, generation))?
            .iter()
            .map(|s| s.0)
            .min()?;
        Some(self.resume(key, generation, low, &[]))
    }
}

/// Reads the log from `from` to its end and collects `source`'s spans.
/// Blocking (reads memory-mapped segments): run it on a blocking thread.
pub fn scan(log: &Log, source: &str, from: u64) -> Result<Found, LogError> {
    let mut found = Found::default();
    let mut reader = log.reader(from);
    let mut peeker = Peeker::default();
    loop {
        let events = reader.read(16_384, 16 << 20)?;
        if events.is_empty() {
            break;
        }
        for e in events {
            found.scanned += 1;
            match peeker.peek(&e.data, &e.context, source) {
                Peeked::Other => {}
                Peeked::Unusable => {
                    found.events += 1;
                    found.unusable += 1;
                }
                Peeked::Line {
                    key,
                    generation,
                    offset,
                    end,
                } => {
                    found.events += 1;
                    found.add(key, generation, offset, end);
                }
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::file::encode::{Encoder, InGroup, LineMeta};
    use prost::Message;

    /// Both formats' lines are found, with their stream and offsets, and
    /// other sources' are not, whatever group of the context they are in.
    #[test]
    fn lines_of_both_formats_are_peeked() {
        let mine = Encoder::new("app", "box1");
        let theirs = Encoder::new("other", "box1");
        let t = mine.template(std::path::Path::new("/var/log/a.log"));
        let m = LineMeta {
            key: 9,
            generation: 2,
            offset: 100,
            end: 142,
            observed_ns: 5,
            truncated_from: None,
            invalid_utf8: false,
        };
        let line = |key, generation| Peeked::Line {
            key,
            generation,
            offset: 100,
            end: 142,
        };
        let mut p = Peeker::default();
        let mut buf = Vec::new();
        mine.encode(&t, "x", &m, &mut buf);
        assert_eq!(p.peek(&buf[4..], &Bytes::new(), "app"), line(9, 2));
        assert_eq!(p.peek(&buf[4..], &Bytes::new(), "other"), Peeked::Other);

        let ctx = Bytes::from(
            crate::event::Context {
                groups: vec![theirs.group(&t, 1, 0, 60, 5), mine.group(&t, 9, 2, 60, 5)],
            }
            .encode_to_vec(),
        );
        for (group, source, want) in [
            (1, "app", line(9, 2)),
            (0, "app", Peeked::Other),
            (0, "other", line(1, 0)),
            (2, "app", Peeked::Other),
        ] {
            buf.clear();
            mine.encode_own(
                "x",
                &m,
                InGroup {
                    group,
                    offset_base: 60,
                    observed_delta: 0,
                },
                &mut buf,
            );
            assert_eq!(
                p.peek(&buf[4..], &ctx, source),
                want,
                "group {group} for {source}"
            );
        }
        let bad = Bytes::from_static(b"\xff");
        assert_eq!(p.peek(&buf[4..], &bad, "app"), Peeked::Other);
    }

    #[test]
    fn spans_chain_from_the_checkpoint_and_those_past_a_gap_are_ahead() {
        let mut f = Found::default();
        // In log order: a retried append (10..20) landed after 20..30.
        f.add(1, 0, 0, 10);
        f.add(1, 0, 20, 30);
        f.add(1, 0, 10, 20);
        f.add(1, 0, 50, 60); // after a gap: not trusted
        assert_eq!(f.resume(1, 0, 0, &[]), (30, vec![(50, 60)]));
        assert_eq!(f.resume(1, 0, 5, &[]), (30, vec![(50, 60)]));
        assert_eq!(f.resume(1, 0, 40, &[]), (40, vec![(50, 60)]));
        assert_eq!(f.resume(1, 0, 55, &[]), (60, vec![]));
        assert_eq!(f.resume(1, 1, 7, &[]), (7, vec![]));
        assert_eq!(f.resume(2, 0, 7, &[]), (7, vec![]));
        // Spans a checkpoint kept chain and merge with those in the log.
        assert_eq!(f.resume(1, 0, 0, &[(30, 35)]), (35, vec![(50, 60)]));
        assert_eq!(
            f.resume(1, 0, 0, &[(40, 50), (70, 80)]),
            (30, vec![(40, 60), (70, 80)])
        );
        assert_eq!(f.resume(2, 0, 0, &[(10, 20)]), (0, vec![(10, 20)]));
        assert_eq!(f.resume_unknown(1, 0), Some((30, vec![(50, 60)])));
        assert_eq!(f.resume_unknown(3, 0), None);
        f.add(4, 0, 100, 120);
        f.add(4, 0, 120, 130);
        assert_eq!(f.resume_unknown(4, 0), Some((130, vec![])));
    }
}
