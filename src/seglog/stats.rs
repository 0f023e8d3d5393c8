//! A point-in-time picture of the log for `holdfast inspect` and metrics.

use super::format::{self, SEGMENT_HEADER_LEN};
use super::segment::{self, Mark, MARK_STEP};
use super::state::{Counters, LossReason, State};

/// The log as a whole.
#[derive(Debug, Clone)]
pub struct LogStats {
    pub segments: usize,
    /// Bytes of all segment files.
    pub bytes: u64,
    /// The oldest sequence number still on disk.
    pub first_seq: u64,
    /// One past the newest acknowledged event.
    pub next_seq: u64,
    /// Append time of the oldest event on disk, in unix milliseconds.
    pub oldest_append_ms: Option<u64>,
    pub consumers: Vec<ConsumerStats>,
    /// Retention holds and their positions (none in a read-only view).
    pub holds: Vec<(String, u64)>,
    pub counters: Counters,
    /// Every segment, oldest first.
    pub segment_list: Vec<SegmentStats>,
}

/// One segment file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentStats {
    pub base_seq: u64,
    pub bytes: u64,
    /// Its format version (1: written before version 2's compressed
    /// blocks; 0: header damaged and not read yet).
    pub format: u16,
    pub sealed: bool,
}

/// One consumer's position and losses.
#[derive(Debug, Clone)]
pub struct ConsumerStats {
    pub name: String,
    /// Everything below this is done.
    pub committed: u64,
    /// Events not yet committed.
    pub lag_events: u64,
    /// Bytes of segment data from the committed position to the end.
    pub lag_bytes: u64,
    /// Append time of the oldest event not yet committed.
    pub oldest_unread_ms: Option<u64>,
    /// Events lost before this consumer finished them, by reason.
    pub lost: Vec<(LossReason, u64)>,
    /// Evicted events whose delivery is unknown: they were on the wire when
    /// a crash (or an abandoned sink) ended their request.
    pub in_doubt: u64,
}

/// Where the frame holding `seq` starts, and its append time. Hops over frame
/// headers without checking CRCs; good enough to measure lag.
///
/// Every scrape of the metrics asks this for the oldest event and each
/// consumer's position, so it must neither walk a whole segment each time
/// nor leave the pages it walked resident: it starts from the nearest
/// [`Mark`] (set by earlier walks, about one per [`MARK_STEP`]) and gives
/// the pages it passed back to the page cache (a walk from a segment's
/// start, the first time, would otherwise make all of it resident).
/// `release`: false for a read-only log, whose active segment is an image
/// in memory, not a map of the file.
fn locate(st: &mut State, seq: u64, release: bool) -> Option<(usize, u64, u64)> {
    if seq >= st.next_seq {
        return None;
    }
    let i = st.index_containing(seq);
    let seg = &mut st.segments[i];
    let map = seg.map().ok()?;
    let version = seg.header.version;
    let k = seg.marks.partition_point(|m| m.first_seq <= seq);
    let mut at = match k {
        0 => SEGMENT_HEADER_LEN,
        _ => seg.marks[k - 1].offset as usize,
    };
    let mut released = at;
    // `get`: a damaged sealed segment may be shorter than its header.
    let found = loop {
        let Some((h, len)) = map.get(at..).and_then(|b| format::peek_frame(b, version)) else {
            break None;
        };
        let due = seg
            .marks
            .last()
            .is_none_or(|m| at as u64 >= m.offset + MARK_STEP);
        if due {
            seg.marks.push(Mark {
                first_seq: h.first_seq,
                offset: at as u64,
            });
        }
        if h.end_seq() > seq {
            break Some((i, at as u64, h.append_ms));
        }
        at += len;
        if release && at >= released + MARK_STEP as usize {
            segment::release_pages(&map, at);
            released = at;
        }
    };
    if release && at > released {
        segment::release_pages(&map, at);
    }
    if found.is_some() {
        return found;
    }
    // Damage hides the frame: count from the segment start.
    let start = (SEGMENT_HEADER_LEN as u64).min(seg.readable_len);
    Some((i, start, seg.header.created_ms))
}

pub(crate) fn collect(st: &mut State, release: bool) -> LogStats {
    let first_seq = st.floor();
    let oldest_append_ms = locate(st, first_seq, release).map(|(_, _, ms)| ms);
    let names: Vec<(String, u64)> = st
        .consumers
        .iter()
        .map(|(n, c)| (n.clone(), st.effective(c)))
        .collect();
    let mut consumers = Vec::with_capacity(names.len());
    for (name, committed) in names {
        let (lag_bytes, oldest_unread_ms) = match locate(st, committed, release) {
            Some((i, offset, ms)) => {
                let rest: u64 = st.segments.iter().skip(i + 1).map(|s| s.readable_len).sum();
                (st.segments[i].readable_len - offset + rest, Some(ms))
            }
            None => (0, None),
        };
        let c = &st.consumers[&name];
        consumers.push(ConsumerStats {
            lost: LossReason::ALL.iter().map(|&r| (r, c.lost(r))).collect(),
            in_doubt: c.in_doubt,
            name,
            committed,
            lag_events: st.next_seq - committed,
            lag_bytes,
            oldest_unread_ms,
        });
    }
    LogStats {
        segments: st.segments.len(),
        bytes: st.total_bytes,
        first_seq,
        next_seq: st.next_seq,
        oldest_append_ms,
        consumers,
        holds: st
            .holds
            .iter()
            .map(|(n, &p)| (n.clone(), p.max(first_seq)))
            .collect(),
        counters: st.counters.clone(),
        segment_list: st
            .segments
            .iter()
            .map(|s| SegmentStats {
                base_seq: s.header.base_seq,
                bytes: s.readable_len,
                format: s.header.version,
                sealed: s.sealed,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seglog::{Batch, Compression, FsyncPolicy, Log, LogOptions};

    #[test]
    fn lookups_from_marks_find_what_a_walk_from_the_start_finds() {
        let dir = tempfile::tempdir().unwrap();
        let opts = LogOptions {
            fsync: FsyncPolicy::Never,
            compression: Compression::None,
            ..LogOptions::default()
        };
        let log = Log::open(dir.path(), opts).unwrap();
        // About 4 MiB of frames in the one segment: several marks.
        let payload = vec![b'x'; 4000];
        for _ in 0..1000 {
            let mut b = Batch::new();
            b.push(&payload);
            b.push(&payload[..100]);
            log.append_blocking(b).unwrap();
        }
        let end = log.next_seq();
        let mut st = log.shared().lock();
        let from_start = |st: &mut State, seq| {
            st.segments[0].marks.clear();
            locate(st, seq, true)
        };
        let seqs: Vec<u64> = (0..end).step_by(97).chain([end - 1, 1, 0]).collect();
        let expected: Vec<_> = seqs.iter().map(|&s| from_start(&mut st, s)).collect();
        // Marks are set along the way; lookups in any order use them.
        st.segments[0].marks.clear();
        for (&s, want) in seqs.iter().zip(&expected).rev() {
            assert_eq!(locate(&mut st, s, true), *want, "seq {s}");
        }
        let marks = st.segments[0].marks.clone();
        assert!(marks.len() >= 3, "{marks:?}");
        assert!(marks
            .windows(2)
            .all(|w| w[0].first_seq < w[1].first_seq && w[1].offset >= w[0].offset + MARK_STEP));
        for (&s, want) in seqs.iter().zip(&expected) {
            assert_eq!(locate(&mut st, s, true), *want, "seq {s}");
        }
        assert_eq!(locate(&mut st, end, true), None);
        drop(st);
        log.close_blocking().unwrap();
    }
}
