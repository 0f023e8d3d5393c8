//! The in-memory picture of the log, shared by the writer thread, consumers
//! and stats under one mutex. Every field is changed only in short critical
//! sections; no I/O that can block on the disk happens under the lock except
//! creating a memory map.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use super::cursor::CursorSlots;
use super::io::Fs;
use super::options::LogOptions;
use super::segment::Segment;

/// Why a consumer lost events without reading them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LossReason {
    /// Evicted by `when_full = "drop_oldest"` at `max_bytes`.
    Size,
    /// Evicted by `max_age`.
    Age,
    /// Unreadable: a damaged frame or a missing segment file.
    Corrupt,
}

impl LossReason {
    pub const ALL: [LossReason; 3] = [LossReason::Size, LossReason::Age, LossReason::Corrupt];

    /// The label value used in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            LossReason::Size => "size",
            LossReason::Age => "age",
            LossReason::Corrupt => "corrupt",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Debug, Clone, Default)]
pub struct ConsumerState {
    /// Everything below this sequence number is done (finished, or evicted
    /// and accounted for).
    pub committed: u64,
    /// The furthest point any reader of this consumer has been handed.
    pub read_next: u64,
    lost: [u64; 3],
    /// Corruption losses below this are counted (persisted with the cursor).
    pub lost_through: u64,
    /// Events at or above `committed` that are already finished, out of
    /// order (a sink finishes its requests in any order): eviction does not
    /// count them.
    finished: Ranges,
    /// Events claimed for sending ([`ConsumerState::claim`]) whose outcome is
    /// not known yet: eviction does not count them either, but remembers them
    /// in `evicted_on_wire` until their answer says what became of them.
    on_wire: BTreeSet<u64>,
    /// Events evicted while on the wire, with the reason of their eviction:
    /// lost if their answer asks for a retry, not lost if it says delivered
    /// or quarantined. Below `committed`, so never claimed again.
    evicted_on_wire: BTreeMap<u64, LossReason>,
    /// Events evicted while on the wire whose answer a crash (or an abandoned
    /// sink) made unknown: monotonic, persisted with the cursor. They may
    /// have been delivered or not, so they are counted here, never as lost.
    pub in_doubt: u64,
}

/// What became of an event handed back with [`Ledger::release`](super::Ledger::release).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Delivered, a duplicate of something delivered, or durably
    /// quarantined (or dropped and counted by the sink itself).
    Finished,
    /// Not finished: to be sent again.
    Retry,
}

impl ConsumerState {
    pub fn at(seq: u64) -> Self {
        ConsumerState {
            committed: seq,
            read_next: seq,
            lost_through: seq,
            ..Default::default()
        }
    }

    /// Restores a consumer from its durable entry. Evicted events that were
    /// on the wire when the last process ended have an unknown outcome: they
    /// join `in_doubt`.
    pub fn restored(seq: u64, lost: [u64; 3], lost_through: u64, in_doubt: u64) -> Self {
        ConsumerState {
            committed: seq,
            read_next: seq,
            lost,
            lost_through,
            in_doubt,
            ..Default::default()
        }
    }

    pub fn lost_all(&self) -> [u64; 3] {
        self.lost
    }

    pub fn lost(&self, reason: LossReason) -> u64 {
        self.lost[reason.index()]
    }

    pub fn add_lost(&mut self, reason: LossReason, n: u64) {
        self.lost[reason.index()] += n;
    }

    /// Evicted events still on the wire: what a crash now would add to
    /// `in_doubt`. Persisted with the cursor for that reason.
    pub fn pending_in_doubt(&self) -> u64 {
        self.evicted_on_wire.len() as u64
    }

    /// Moves the commit point (never backwards) and forgets the bookkeeping
    /// below it.
    pub fn commit(&mut self, next: u64) {
        if next > self.committed {
            self.committed = next;
            self.finished.remove_below(next);
            if self.on_wire.first().is_some_and(|&s| s < next) {
                // A reader that commits past its own claims (the file sink
                // commits its batch as a whole): nothing left to account for.
                self.on_wire = self.on_wire.split_off(&next);
            }
        }
    }

    /// Records events finished above the commit point.
    pub fn finish(&mut self, seqs: impl IntoIterator<Item = u64>) {
        let mut seqs: Vec<u64> = seqs.into_iter().filter(|&s| s >= self.committed).collect();
        if !self.on_wire.is_empty() {
            for s in &seqs {
                self.on_wire.remove(s);
            }
        }
        // A batch is mostly one run of consecutive numbers: one insert each.
        seqs.sort_unstable();
        let mut runs = seqs.into_iter().peekable();
        while let Some(start) = runs.next() {
            let mut end = start + 1;
            while runs.next_if(|&s| s <= end).is_some_and(|s| {
                end = end.max(s + 1);
                true
            }) {}
            self.finished.insert(start, end);
        }
    }

    /// Records a range as finished: events lost to damage, already counted.
    pub fn finish_range(&mut self, from: u64, to: u64) {
        let from = from.max(self.committed);
        if from < to {
            self.finished.insert(from, to);
        }
    }

    /// Claims one event for sending: false if it is gone (evicted, and
    /// counted for this consumer), true if the sink may send it. Claiming
    /// an event already on the wire is allowed (a retry of a request whose
    /// answer is in).
    pub fn claim(&mut self, seq: u64, floor: u64) -> bool {
        if self.evicted_on_wire.contains_key(&seq) {
            return true;
        }
        if seq < self.committed.max(floor) {
            return false;
        }
        // Already finished (sent again after an answer was lost): eviction
        // has nothing to count whatever happens to this copy.
        if self.finished.count_in(seq, seq + 1) == 0 {
            self.on_wire.insert(seq);
        }
        true
    }

    /// Hands back claimed events with their outcome. For each, true when the
    /// sink must drop it: it was evicted and has now been counted lost, so it
    /// is never sent again (the sink treats it as finished). Finished events
    /// cost one insert per run of consecutive numbers.
    pub fn release_all(&mut self, seqs: &[u64], outcome: Outcome) -> Vec<bool> {
        let drops = seqs.iter().map(|&s| self.release_one(s, outcome)).collect();
        if outcome == Outcome::Finished {
            self.finish(seqs.iter().copied());
        }
        drops
    }

    /// The claim bookkeeping of `release_all` for one event.
    fn release_one(&mut self, seq: u64, outcome: Outcome) -> bool {
        if let Some(reason) = self.evicted_on_wire.remove(&seq) {
            if outcome == Outcome::Retry {
                self.add_lost(reason, 1);
                return true;
            }
            return false;
        }
        self.on_wire.remove(&seq);
        // Below the commit: evicted while not on the wire (or its claim was
        // voided by a reopen), so counted at the eviction.
        seq < self.committed && outcome == Outcome::Retry
    }

    /// Accounts for the eviction of `[from, end)`, `from` being the oldest
    /// event on disk: what this consumer had not finished and had not on the
    /// wire is lost now; what it had on the wire waits for its answer. The
    /// commit point moves to `end`, since everything below is accounted for.
    /// Returns the events counted lost.
    pub fn evict(&mut self, from: u64, end: u64, reason: LossReason) -> u64 {
        let from = from.max(self.committed);
        if from >= end {
            return 0;
        }
        let done = self.finished.count_in(from, end);
        let wire: Vec<u64> = self.on_wire.range(from..end).copied().collect();
        for s in &wire {
            self.on_wire.remove(s);
            self.evicted_on_wire.insert(*s, reason);
        }
        // Finished and on-the-wire events are disjoint (a finished event is
        // never put on the wire), so this does not go below zero.
        let lost = (end - from).saturating_sub(done + wire.len() as u64);
        self.add_lost(reason, lost);
        self.commit(end);
        lost
    }

    /// A new reader takes this consumer over: claims of the one before are
    /// void. Evicted events it had on the wire will never be answered here,
    /// and whether they reached the receiver is unknown.
    pub fn reset_claims(&mut self) {
        self.in_doubt += self.evicted_on_wire.len() as u64;
        self.evicted_on_wire.clear();
        self.on_wire.clear();
    }
}

/// A set of sequence numbers as disjoint half-open ranges (start → end), so
/// that long runs (a damaged stretch, a batch finished in order) cost one
/// entry.
#[derive(Debug, Clone, Default)]
struct Ranges(BTreeMap<u64, u64>);

impl Ranges {
    fn insert(&mut self, mut start: u64, mut end: u64) {
        // Merge with a range that starts before and reaches `start`.
        if let Some((&s, &e)) = self.0.range(..=start).next_back() {
            if e >= start {
                if e >= end {
                    return;
                }
                start = s;
            }
        }
        // Swallow every range that starts inside the new one (no
        // allocation: this runs for every run of finished events).
        while let Some((&s, &e)) = self.0.range(start..=end).next() {
            self.0.remove(&s);
            end = end.max(e);
        }
        self.0.insert(start, end);
    }

    fn remove_below(&mut self, at: u64) {
        let mut keep = self.0.split_off(&at);
        if let Some((_, &e)) = self.0.iter().next_back() {
            if e > at {
                keep.insert(at, e);
            }
        }
        self.0 = keep;
    }

    /// How many members lie in `[from, to)`.
    fn count_in(&self, from: u64, to: u64) -> u64 {
        let first = self.0.range(..from).next_back().map(|(&s, &e)| (s, e));
        first
            .into_iter()
            .chain(self.0.range(from..to).map(|(&s, &e)| (s, e)))
            .map(|(s, e)| e.min(to).saturating_sub(s.max(from)))
            .sum()
    }
}

/// Totals since the log was opened, for metrics and `inspect`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Events and payload bytes acknowledged to appenders.
    pub appended_events: u64,
    pub appended_bytes: u64,
    /// Frames written (one per group commit) and bytes written to segment files.
    pub frames_written: u64,
    pub bytes_written: u64,
    /// `fdatasync` calls on segment data and their total duration.
    pub fsyncs: u64,
    pub fsync_nanos: u64,
    /// `fdatasync` durations by upper bound, see [`FSYNC_BUCKETS_SECONDS`].
    pub fsync_buckets: [u64; FSYNC_BUCKETS_SECONDS.len()],
    /// Failed writes or syncs; the affected appends were not acknowledged
    /// (except an `interval` sync, which is reported loudly in the log).
    pub write_errors: u64,
    pub sync_errors: u64,
    /// Appends refused because the log stayed full under `block`.
    pub full_rejections: u64,
    /// Damaged frames found (each counted once) and the bytes skipped with them.
    pub corrupt_frames: u64,
    pub corrupt_bytes: u64,
    /// Segment headers that failed their check.
    pub corrupt_headers: u64,
    /// Torn tails truncated at open, and their bytes.
    pub torn_tails: u64,
    pub torn_bytes: u64,
    /// Cursor slots found damaged at open.
    pub damaged_cursor_files: u64,
    /// Segments deleted because every consumer had passed them, and evicted.
    pub segments_deleted: u64,
    pub segments_evicted: u64,
}

/// Upper bounds of the fsync duration histogram, in seconds.
pub const FSYNC_BUCKETS_SECONDS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

impl Counters {
    pub fn record_fsync(&mut self, d: std::time::Duration) {
        self.fsyncs += 1;
        self.fsync_nanos += d.as_nanos() as u64;
        let s = d.as_secs_f64();
        if let Some(i) = FSYNC_BUCKETS_SECONDS.iter().position(|&b| s <= b) {
            self.fsync_buckets[i] += 1;
        }
    }
}

pub struct State {
    /// Oldest first; the last is the active segment, and there is always one.
    pub segments: VecDeque<Segment>,
    /// One past the last acknowledged event.
    pub next_seq: u64,
    pub consumers: BTreeMap<String, ConsumerState>,
    /// Sum of segment file lengths.
    pub total_bytes: u64,
    pub counters: Counters,
    /// Damage already counted, by (segment base, offset), so that several
    /// consumers reading the same bad frame count it once.
    pub damage_seen: HashSet<(u64, u64)>,
    /// Retention holds by name: consumed segments at or past a hold's
    /// position are not deleted (see `hold.rs`).
    pub holds: BTreeMap<String, u64>,
    pub closed: bool,
}

impl State {
    /// The oldest sequence number still on disk.
    pub fn floor(&self) -> u64 {
        self.segments
            .front()
            .map_or(self.next_seq, |s| s.header.base_seq)
    }

    /// Where a consumer really stands: its commit, or the oldest event if
    /// what it had not finished was evicted.
    pub fn effective(&self, c: &ConsumerState) -> u64 {
        c.committed.max(self.floor())
    }

    /// The lowest position any consumer or hold still needs; `None`
    /// without consumers. Only deletion of consumed segments honours holds;
    /// eviction does not ask.
    pub fn min_needed(&self) -> Option<u64> {
        let consumers = self.min_committed()?;
        let holds = self.holds.values().map(|&p| p.max(self.floor())).min();
        Some(holds.map_or(consumers, |h| h.min(consumers)))
    }

    /// The lowest position any consumer still needs, holds aside; `None`
    /// without consumers.
    pub fn min_committed(&self) -> Option<u64> {
        self.consumers.values().map(|c| self.effective(c)).min()
    }

    pub fn index_of(&self, base_seq: u64) -> Option<usize> {
        self.segments
            .binary_search_by_key(&base_seq, |s| s.header.base_seq)
            .ok()
    }

    /// The segment that holds (or would hold) `seq`.
    pub fn index_containing(&self, seq: u64) -> usize {
        match self
            .segments
            .binary_search_by_key(&seq, |s| s.header.base_seq)
        {
            Ok(i) => i,
            Err(0) => 0,
            Err(i) => i - 1,
        }
    }

    /// One past the last sequence number of segment `i`.
    pub fn end_of(&self, i: usize) -> u64 {
        self.segments
            .get(i + 1)
            .map_or(self.next_seq, |s| s.header.base_seq)
    }
}

/// What the log handle, consumers and the writer thread share.
pub struct Shared {
    pub dir: PathBuf,
    pub opts: LogOptions,
    /// Every durable-state operation goes through here (the test seam).
    pub fs: Fs,
    pub state: Mutex<State>,
    /// Where the cursors stand in the cursor file, locked by whoever writes
    /// it (`cursor_store.rs`). Never locked while `state` is held.
    pub cursor_slots: Mutex<CursorSlots>,
    /// The acknowledged end of the log (`State::next_seq`), for consumers
    /// waiting for new events.
    pub durable: watch::Sender<u64>,
    /// Set while a maintenance nudge is queued, so commits do not flood the
    /// writer with them.
    pub maintain_queued: AtomicBool,
    /// A commit moved a cursor since the writer last wrote the cursor slot.
    pub cursors_moved: AtomicBool,
    /// The data-directory lock, released when the last handle goes; `None`
    /// for a read-only view.
    pub _lock: Option<File>,
}

impl Shared {
    /// Locks the state. A panic while holding the lock would be a bug in this
    /// module; the state is still consistent field by field, so carry on
    /// rather than turn one bug into a crash loop.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_count() {
        let mut r = Ranges::default();
        r.insert(5, 6);
        r.insert(7, 8);
        r.insert(6, 7);
        assert_eq!(r.0.len(), 1);
        r.insert(20, 30);
        r.insert(2, 4);
        assert_eq!(r.count_in(0, 100), 2 + 3 + 10);
        assert_eq!(r.count_in(6, 25), 2 + 5);
        r.insert(3, 21);
        assert_eq!(r.0.len(), 1);
        assert_eq!(r.count_in(0, 100), 28);
        r.remove_below(10);
        assert_eq!(r.count_in(0, 100), 20);
        r.remove_below(40);
        assert_eq!(r.count_in(0, 100), 0);
    }

    #[test]
    fn finished_runs_are_counted_whatever_the_order() {
        let mut c = ConsumerState::at(10);
        c.finish([14, 12, 13, 20, 5, 21, 11, 13]);
        assert_eq!(c.finished.0.len(), 2, "{:?}", c.finished);
        assert_eq!(c.finished.count_in(0, 100), 6);
        assert_eq!(c.release_all(&[30, 31], Outcome::Finished), [false, false]);
        assert_eq!(c.finished.count_in(0, 100), 8);
    }

    #[test]
    fn eviction_counts_what_is_neither_finished_nor_on_the_wire() {
        let mut c = ConsumerState::at(0);
        c.finish([3, 4, 7]);
        assert!(c.claim(5, 0) && c.claim(6, 0));
        // [0, 10): 3 finished, 2 on the wire.
        assert_eq!(c.evict(0, 10, LossReason::Size), 5);
        assert_eq!((c.committed, c.pending_in_doubt()), (10, 2));
        assert!(!c.claim(2, 10), "evicted and counted: never sent");
        assert!(
            !c.release_all(&[5], Outcome::Finished)[0],
            "delivered: not counted"
        );
        assert!(
            c.release_all(&[6], Outcome::Retry)[0],
            "to retry: counted, dropped"
        );
        assert_eq!(c.lost(LossReason::Size), 6);
        assert!(
            c.release_all(&[6], Outcome::Retry)[0],
            "still gone, not counted twice"
        );
        assert_eq!(c.lost(LossReason::Size), 6);
        assert_eq!(c.pending_in_doubt(), 0);
        // A second eviction of what was already accounted for counts nothing.
        assert_eq!(c.evict(0, 10, LossReason::Size), 0);
    }
}
