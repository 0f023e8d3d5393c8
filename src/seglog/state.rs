//! The in-memory picture of the log, shared by the writer thread, consumers
//! and stats under one mutex. Every field is changed only in short critical
//! sections; no I/O that can block on the disk happens under the lock except
//! creating a memory map.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

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
    /// Everything below this sequence number is done.
    pub committed: u64,
    /// The furthest point any reader of this consumer has been handed.
    pub read_next: u64,
    lost: [u64; 3],
    /// Corruption losses below this are counted (persisted with the cursor).
    pub lost_through: u64,
}

impl ConsumerState {
    pub fn at(seq: u64) -> Self {
        ConsumerState {
            committed: seq,
            read_next: seq,
            lost: [0; 3],
            lost_through: seq,
        }
    }

    /// Restores a consumer from its durable entry.
    pub fn restored(seq: u64, lost: [u64; 3], lost_through: u64) -> Self {
        ConsumerState {
            committed: seq,
            read_next: seq,
            lost,
            lost_through,
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
        self.segments.front().map_or(self.next_seq, |s| s.base_seq)
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
            .binary_search_by_key(&base_seq, |s| s.base_seq)
            .ok()
    }

    /// The segment that holds (or would hold) `seq`.
    pub fn index_containing(&self, seq: u64) -> usize {
        match self.segments.binary_search_by_key(&seq, |s| s.base_seq) {
            Ok(i) => i,
            Err(0) => 0,
            Err(i) => i - 1,
        }
    }

    /// One past the last sequence number of segment `i`.
    pub fn end_of(&self, i: usize) -> u64 {
        self.segments
            .get(i + 1)
            .map_or(self.next_seq, |s| s.base_seq)
    }
}

/// What the log handle, consumers and the writer thread share.
pub struct Shared {
    pub dir: PathBuf,
    pub opts: LogOptions,
    /// Every durable-state operation goes through here (the test seam).
    pub fs: Fs,
    pub state: Mutex<State>,
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
