//! A point-in-time picture of the log for `holdfast inspect` and metrics.

use super::format::{self, SEGMENT_HEADER_LEN};
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
fn locate(st: &mut State, seq: u64) -> Option<(usize, u64, u64)> {
    if seq >= st.next_seq {
        return None;
    }
    let i = st.index_containing(seq);
    let map = st.segments[i].map().ok()?;
    let version = st.segments[i].format;
    let mut at = SEGMENT_HEADER_LEN;
    // `get`: a damaged sealed segment may be shorter than its header.
    while let Some((h, len)) = map.get(at..).and_then(|b| format::peek_frame(b, version)) {
        if h.end_seq() > seq {
            return Some((i, at as u64, h.append_ms));
        }
        at += len;
    }
    // Damage hides the frame: count from the segment start.
    let start = (SEGMENT_HEADER_LEN as u64).min(st.segments[i].readable_len);
    Some((i, start, st.segments[i].created_ms))
}

pub(crate) fn collect(st: &mut State) -> LogStats {
    let first_seq = st.floor();
    let oldest_append_ms = locate(st, first_seq).map(|(_, _, ms)| ms);
    let names: Vec<(String, u64)> = st
        .consumers
        .iter()
        .map(|(n, c)| (n.clone(), st.effective(c)))
        .collect();
    let mut consumers = Vec::with_capacity(names.len());
    for (name, committed) in names {
        let (lag_bytes, oldest_unread_ms) = match locate(st, committed) {
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
                base_seq: s.base_seq,
                bytes: s.readable_len,
                format: s.format,
                sealed: s.sealed,
            })
            .collect(),
    }
}
