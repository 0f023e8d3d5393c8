//! The segment log against a model (STYLE.md habit 8; DESIGN.md promises 2,
//! 3 and 9). Random sequences of appends, reads, commits, rewinds, cursor
//! syncs, clean restarts and crashes run against the real log and against a
//! plain in-memory model: a `Vec` of every event ever appended (its index is
//! the sequence number) and, per consumer, its committed and read positions.
//!
//! After every step:
//!
//! * every event read is the model's event with that sequence number, and
//!   reads continue exactly where the reader stood (or, under `drop_oldest`,
//!   at the oldest event still on disk when it was evicted past);
//! * `stats().next_seq` is the model's length, so no sequence number is ever
//!   handed out twice, across restarts and crashes alike;
//! * nothing is ever counted as corrupt or torn;
//! * under `block` nothing is lost; under `drop_oldest` each consumer's
//!   `LossReason::Size` count is exactly the number of evicted events it
//!   had not committed when they were evicted, read or not;
//! * after a clean restart consumers resume exactly at their commit; after a
//!   crash (every handle dropped without `close`) they resume at or before it
//!   and never past what was last known to be persisted.

#[path = "common/seglog.rs"]
mod common;

use std::collections::HashSet;
use std::time::Duration;

use holdfast::seglog::{
    Batch, Compression, Consumer, Event, FsyncPolicy, Log, LogOptions, LossReason, StartAt,
    WhenFull,
};
use proptest::prelude::*;
use proptest::sample::Index;

use common::TestDir;

const SEGMENT_BYTES: u64 = 2048;
/// The largest append a segment takes, as framed events (`encoded_len`):
/// its size less a segment header, a frame header, a block header and the
/// block's context length. Compression never makes a block larger (one
/// that does not shrink is stored plain), so this holds for every codec.
const MAX_APPEND: usize = SEGMENT_BYTES as usize - 32 - 28 - 16 - 4;
const NAMES: [&str; 2] = ["a", "b"];

#[derive(Debug, Clone)]
enum Op {
    /// One batch, split into several appends if it would not fit a segment.
    Append(Vec<Vec<u8>>),
    Read {
        consumer: usize,
        max_events: usize,
        max_bytes: Option<usize>,
    },
    /// Commit somewhere between the current commit and the read position.
    Commit {
        consumer: usize,
        at: Index,
    },
    Rewind {
        consumer: usize,
    },
    SyncCursors,
    /// `close`, drop everything, open again.
    Reopen,
    /// Drop everything without `close`, open again.
    Crash,
}

fn event() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => proptest::collection::vec(any::<u8>(), 0..48),
        1 => proptest::collection::vec(any::<u8>(), 0..=600),
        // What compresses: one byte repeated, and log lines that differ
        // only in a number.
        1 => (any::<u8>(), 0..=600usize).prop_map(|(b, n)| vec![b; n]),
        2 => (any::<u32>(), 0..8usize).prop_map(|(n, words)| {
            let mut l = format!("Jun 14 15:16:01 combo sshd[{n}]: session opened for user");
            for w in 0..words {
                l.push_str(&format!(" key{w}=value{}", n % (w as u32 + 2)));
            }
            l.into_bytes()
        }),
    ]
}

fn codec() -> impl Strategy<Value = Compression> {
    prop_oneof![
        Just(Compression::None),
        Just(Compression::Zstd { level: 1 }),
        Just(Compression::Lz4),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let consumer = 0..NAMES.len();
    prop_oneof![
        6 => proptest::collection::vec(event(), 1..=8).prop_map(Op::Append),
        6 => (
            consumer.clone(),
            1..=40usize,
            proptest::option::weighted(0.25, 0..2000usize)
        )
            .prop_map(|(consumer, max_events, max_bytes)| Op::Read {
                consumer,
                max_events,
                max_bytes
            }),
        4 => (consumer.clone(), any::<Index>())
            .prop_map(|(consumer, at)| Op::Commit { consumer, at }),
        1 => consumer.prop_map(|consumer| Op::Rewind { consumer }),
        1 => Just(Op::SyncCursors),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
    ]
}

/// Cursors persisted only on request and at close, or on nearly every
/// wake-up of the writer (so a crash finds them anywhere in between).
fn cursor_sync_interval() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::from_secs(3600)),
        Just(Duration::from_millis(1))
    ]
}

fn options(
    when_full: WhenFull,
    max_bytes: u64,
    cursor_sync_interval: Duration,
    compression: Compression,
) -> LogOptions {
    LogOptions {
        segment_bytes: SEGMENT_BYTES,
        compression,
        max_bytes,
        when_full,
        // Crashes here are process crashes: the page cache survives them,
        // so syncing would only slow the test down.
        fsync: FsyncPolicy::Never,
        append_timeout: Duration::from_secs(5),
        cursor_sync_interval,
        ..LogOptions::default()
    }
}

/// What the model knows about one consumer.
#[derive(Debug, Default)]
struct ModelConsumer {
    /// The last commit (or the position resumed at after a restart).
    committed: u64,
    /// The next sequence number the reader hands out.
    pos: u64,
    /// The persisted cursor is known to be at least this.
    persisted_at_least: u64,
    /// Since the last open: where the reader resumed, what it was handed,
    /// and its `Size` loss count at open.
    resumed: u64,
    delivered: HashSet<u64>,
    size_lost_at_open: u64,
    /// Events evicted before this consumer committed them, since the last
    /// open: what its `Size` count must have grown by.
    evicted_uncommitted: u64,
}

struct Run {
    t: TestDir,
    drop_oldest: bool,
    /// `None` only while reopening.
    log: Option<Log>,
    readers: Vec<Consumer>,
    events: Vec<Vec<u8>>,
    model: Vec<ModelConsumer>,
}

impl Run {
    fn start(opts: LogOptions) -> Run {
        let drop_oldest = opts.when_full == WhenFull::DropOldest;
        let t = TestDir::with_options(opts);
        let log = t.open();
        let readers = NAMES
            .iter()
            .map(|n| log.consumer(n, StartAt::Oldest).unwrap())
            .collect();
        Run {
            t,
            drop_oldest,
            log: Some(log),
            readers,
            events: Vec::new(),
            model: NAMES.iter().map(|_| ModelConsumer::default()).collect(),
        }
    }

    fn log(&self) -> &Log {
        self.log.as_ref().expect("the log is open")
    }

    /// The oldest event on disk.
    fn floor(&self) -> u64 {
        self.log().stats().first_seq
    }

    /// Where a consumer really stands: under `drop_oldest` a commit below
    /// the oldest event counts as the oldest event.
    fn effective(&self, committed: u64) -> u64 {
        committed.max(self.floor())
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Append(events) => self.append(events),
            Op::Read {
                consumer,
                max_events,
                max_bytes,
            } => {
                let max_bytes = max_bytes.unwrap_or(usize::MAX);
                self.read(*consumer, *max_events, max_bytes);
            }
            Op::Commit { consumer, at } => {
                let m = &mut self.model[*consumer];
                assert!(m.committed <= m.pos);
                let to = m.committed + at.index((m.pos - m.committed + 1) as usize) as u64;
                self.readers[*consumer].commit(to).unwrap();
                m.committed = to;
            }
            Op::Rewind { consumer } => {
                self.readers[*consumer].rewind();
                let pos = self.effective(self.model[*consumer].committed);
                self.model[*consumer].pos = pos;
                assert_eq!(self.readers[*consumer].position(), pos, "rewind");
            }
            Op::SyncCursors => {
                self.log().sync_cursors_blocking().unwrap();
                for m in &mut self.model {
                    m.persisted_at_least = m.committed;
                }
            }
            Op::Reopen => {
                self.log().close_blocking().unwrap();
                self.reopen();
                // `close` deletes every segment all consumers are done with.
                let done = self.model.iter().map(|m| m.committed).min().unwrap();
                let segments = self.t.segments();
                assert!(
                    segments.len() == 1 || segments[1].0 > self.effective(done),
                    "a finished segment survived close: {segments:?}, all done below {done}"
                );
                for (i, name) in NAMES.iter().enumerate() {
                    let expected = self.effective(self.model[i].committed);
                    let got = self.readers[i].committed();
                    assert_eq!(got, expected, "{name}: resumed after a clean restart");
                    self.resumed(i, got);
                }
            }
            Op::Crash => {
                self.reopen();
                for (i, name) in NAMES.iter().enumerate() {
                    let m = &self.model[i];
                    let got = self.readers[i].committed();
                    let floor = self.floor();
                    assert!(
                        got <= m.committed.max(floor),
                        "{name}: resumed at {got}, past its commit {}",
                        m.committed
                    );
                    assert!(
                        got >= m.persisted_at_least.max(floor),
                        "{name}: resumed at {got}, behind the persisted cursor {}",
                        m.persisted_at_least
                    );
                    self.resumed(i, got);
                }
            }
        }
        self.check();
    }

    fn append(&mut self, events: &[Vec<u8>]) {
        let mut rest = events;
        while !rest.is_empty() {
            let mut batch = Batch::new();
            let mut n = 0;
            while n < rest.len() && batch.encoded_len() + 4 + rest[n].len() <= MAX_APPEND {
                batch.push(&rest[n]);
                n += 1;
            }
            let start = self.events.len() as u64;
            let floor_before = self.floor();
            let range = self.log().append_blocking(batch).unwrap();
            // What the append evicted: for each consumer, everything from
            // its commit (or the old floor) to the new floor. Segments every
            // consumer had committed past may go too, counting nothing.
            let floor_after = self.floor();
            for m in &mut self.model {
                let from = m.committed.max(floor_before);
                m.evicted_uncommitted += floor_after.saturating_sub(from);
            }
            assert_eq!(
                (range.start, range.end),
                (start, start + n as u64),
                "sequence numbers continue from the last acknowledged event"
            );
            self.events.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
        }
    }

    fn read(&mut self, i: usize, max_events: usize, max_bytes: usize) {
        let floor = self.floor();
        let m = &self.model[i];
        if !self.drop_oldest {
            assert!(floor <= m.pos, "{}: unread events were deleted", NAMES[i]);
        }
        // Evicted events are skipped; everything else is read in order.
        let start = m.pos.max(floor);
        let got = self.readers[i].read(max_events, max_bytes).unwrap();

        let mut expected = 0;
        let mut bytes = 0;
        while expected < max_events && start + (expected as u64) < self.events.len() as u64 {
            let len = self.events[start as usize + expected].len();
            if expected > 0 && bytes + len > max_bytes {
                break;
            }
            bytes += len;
            expected += 1;
        }
        assert_eq!(
            got.len(),
            expected,
            "{}: read {} events from {start} (max {max_events} events, {max_bytes} bytes)",
            NAMES[i],
            got.len()
        );
        for (k, e) in got.iter().enumerate() {
            self.assert_is_appended(e, start + k as u64);
        }
        let m = &mut self.model[i];
        m.delivered.extend(got.iter().map(|e| e.seq));
        m.pos = start + got.len() as u64;
        assert_eq!(self.readers[i].position(), m.pos);
    }

    fn assert_is_appended(&self, e: &Event, seq: u64) {
        assert_eq!(e.seq, seq, "events are handed out in order, without gaps");
        assert!(
            e.data.as_ref() == self.events[seq as usize].as_slice(),
            "event {seq} differs from what was appended"
        );
    }

    /// Drops every handle (after `close` or not), opens the log again and
    /// reattaches both consumers.
    fn reopen(&mut self) {
        self.readers.clear();
        self.log = None;
        let log = self.t.open();
        self.readers = NAMES
            .iter()
            .map(|n| log.consumer(n, StartAt::Oldest).unwrap())
            .collect();
        self.log = Some(log);
        assert_eq!(
            self.log().stats().next_seq,
            self.events.len() as u64,
            "every acknowledged event survives, and no sequence number is reused"
        );
    }

    fn resumed(&mut self, i: usize, at: u64) {
        assert_eq!(self.readers[i].position(), at);
        let size_lost = common::lost(self.log(), NAMES[i], LossReason::Size);
        let m = &mut self.model[i];
        m.committed = at;
        m.pos = at;
        m.persisted_at_least = at;
        m.resumed = at;
        m.delivered.clear();
        m.size_lost_at_open = size_lost;
        m.evicted_uncommitted = 0;
    }

    fn check(&self) {
        let stats = self.log().stats();
        assert_eq!(stats.next_seq, self.events.len() as u64);
        let c = &stats.counters;
        assert_eq!(
            (c.corrupt_frames, c.corrupt_headers, c.torn_tails),
            (0, 0, 0)
        );
        assert_eq!(c.damaged_cursor_files, 0);
        if self.drop_oldest {
            assert!(
                stats.bytes <= self.log().options().max_bytes,
                "{} bytes on disk",
                stats.bytes
            );
        }
        for (i, name) in NAMES.iter().enumerate() {
            let m = &self.model[i];
            let s = stats.consumers.iter().find(|s| s.name == *name).unwrap();
            assert_eq!(s.committed, m.committed.max(stats.first_seq), "{name}");
            let lost = |r| s.lost.iter().find(|(x, _)| *x == r).unwrap().1;
            assert_eq!(lost(LossReason::Corrupt), 0, "{name}");
            assert_eq!(lost(LossReason::Age), 0, "{name}");
            // Every event this consumer was owed since the last open and
            // that is no longer on disk was either handed to it or counted.
            let never_had = (m.resumed..stats.first_seq)
                .filter(|s| !m.delivered.contains(s))
                .count() as u64;
            if !self.drop_oldest {
                assert_eq!(never_had, 0, "{name}: deleted before it was read");
            }
            // Read or not, an event evicted before its commit is counted.
            assert!(lost(LossReason::Size) - m.size_lost_at_open >= never_had);
            assert_eq!(
                lost(LossReason::Size) - m.size_lost_at_open,
                m.evicted_uncommitted,
                "{name}: events evicted uncommitted since the last open"
            );
        }
    }

    /// Reads both consumers to the end and checks what they get.
    fn drain(&mut self) {
        for i in 0..NAMES.len() {
            loop {
                let before = self.model[i].pos;
                self.read(i, 1000, usize::MAX);
                if self.model[i].pos == before || self.model[i].pos == self.events.len() as u64 {
                    break;
                }
            }
            assert_eq!(self.model[i].pos, self.events.len() as u64);
        }
        self.check();
    }
}

fn run(opts: LogOptions, ops: &[Op]) {
    let mut run = Run::start(opts);
    for op in ops {
        run.apply(op);
    }
    run.drain();
    run.log().close_blocking().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// `block` with room to spare: nothing is ever lost, consumed segments
    /// are deleted, and restarts resume where the model says.
    #[test]
    fn block_matches_the_model(
        sync in cursor_sync_interval(),
        compression in codec(),
        ops in proptest::collection::vec(op(), 1..150),
    ) {
        run(options(WhenFull::Block, 64 << 20, sync, compression), &ops);
    }

    /// `drop_oldest` on a budget of two or three segments: every event is
    /// either delivered intact and in order or counted as lost to size.
    #[test]
    fn drop_oldest_delivers_or_counts_every_event(
        sync in cursor_sync_interval(),
        compression in codec(),
        segments in 2..=3u64,
        ops in proptest::collection::vec(op(), 1..150),
    ) {
        run(
            options(WhenFull::DropOldest, segments * SEGMENT_BYTES, sync, compression),
            &ops,
        );
    }
}
