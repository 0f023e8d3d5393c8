//! Recovering positions from the log after a crash.
//!
//! The checkpoint is written after the appends it describes, so a crash can
//! leave lines in the log that the checkpoint does not yet cover. On startup
//! the source reads the log from the checkpoint's `log_seq` to its end,
//! decodes only the `source` and `origin` fields of each event (the record
//! itself is skipped unparsed), and collects for each stream (key and
//! generation) the spans `offset..end` of its lines. A stream then resumes
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

use crate::seglog::{Log, LogError};

/// The fields of an [`Envelope`](crate::event::Envelope) recovery needs; the
/// rest is skipped by the decoder.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OriginView {
    #[prost(string, tag = "2")]
    pub source: String,
    #[prost(message, optional, tag = "11")]
    pub origin: Option<OriginNumbers>,
}

/// `FileOrigin` without its path, with the `end` field (see `encode.rs`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct OriginNumbers {
    #[prost(fixed64, tag = "2")]
    pub fingerprint: u64,
    #[prost(uint32, tag = "3")]
    pub generation: u32,
    #[prost(uint64, tag = "4")]
    pub offset: u64,
    #[prost(uint64, tag = "5")]
    pub end: u64,
}

pub fn decode_origin(bytes: &[u8]) -> Result<OriginView, prost::DecodeError> {
    <OriginView as prost::Message>::decode(bytes)
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
    loop {
        let events = reader.read(16_384, 16 << 20)?;
        if events.is_empty() {
            break;
        }
        for e in events {
            found.scanned += 1;
            let Ok(view) = decode_origin(&e.data) else {
                continue;
            };
            if view.source != source {
                continue;
            }
            found.events += 1;
            match view.origin {
                Some(o) if o.end > o.offset => {
                    found.add(o.fingerprint, o.generation, o.offset, o.end)
                }
                _ => found.unusable += 1,
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

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
