//! The writer thread: the only code that writes segment files.
//!
//! Appenders send requests over a channel and wait on a oneshot. The thread
//! takes every request that has queued up, writes them as one frame with one
//! vectored `write`, syncs once (under `fsync = "always"`), and only then
//! answers them all — group commit: while one sync is in progress the next
//! group gathers, so concurrency raises throughput instead of queueing on the
//! disk. Under `always` the thread also waits briefly for the appenders it
//! has just answered to come back before starting the next write (see
//! [`Gather`]). The same thread rolls segments, deletes consumed ones, evicts by
//! size and age (`retention.rs`), syncs on an interval and persists cursors
//! (`cursor_store.rs`), so no two pieces of code ever race on the files.

use std::collections::VecDeque;
use std::fs::File;
use std::io::IoSlice;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tracing::{error, warn};

use super::active::ActiveSegment;
use super::error::{LogError, Result};
use super::format::{FrameHeader, FRAME_HEADER_LEN, SEGMENT_HEADER_LEN};
use super::janitor::Janitor;
use super::options::FsyncPolicy;
pub(super) use super::request::{AppendReq, Msg, Reply};
use super::retention;
use super::segment::{self, Segment};
use super::state::{now_ms, LossReason, Shared, State};
use super::SeqRange;

/// A group never grows beyond this many payload bytes, so one slow write
/// does not hold back the acknowledgement of everything queued behind it.
const MAX_GROUP_BYTES: usize = 8 << 20;
/// How often the writer wakes with nothing to do, to check age and timers.
const TICK: Duration = Duration::from_millis(200);
/// The longest the writer waits to gather a group (and never more than half
/// the last `fdatasync`).
const MAX_GATHER: Duration = Duration::from_micros(500);

/// The writer thread's state, made by [`Writer::new`].
pub struct Writer {
    pub(super) shared: Arc<Shared>,
    /// Deletes segment files on its own thread; drained when the writer ends.
    janitor: Janitor,
    rx: Receiver<Msg>,
    active: ActiveSegment,
    next_seq: u64,
    pending: VecDeque<AppendReq>,
    /// When cursors were last stored on the `cursor_sync_interval` timer.
    last_cursor_sync: Instant,
    last_age_check: Instant,
    /// Set while the front of `pending` waits for space under `block`.
    blocked_since: Option<Instant>,
    gather: Gather,
    ending: Ending,
}

/// Group-commit gathering under `fsync = "always"`.
///
/// Without it, concurrent appenders settle into two alternating half-size
/// groups: the writer starts a group with whoever is queued the moment the
/// previous sync returns, and the appenders it has just answered arrive a
/// few microseconds later, too late, so each of them waits through two
/// syncs. Measured on a virtual disk with 4 appenders of 100 events, groups
/// held 2.4 batches instead of 4; with 64 single-event appenders, 33
/// events instead of 64. So before each write the writer waits until as many
/// appends are queued as were in flight at the last acknowledgement (those it
/// answered plus those already waiting), but at most half the last sync's
/// duration and [`MAX_GATHER`]. A lone appender never waits; an appender
/// that does not come back costs the others at most that bound, once.
#[derive(Debug, Default)]
pub struct Gather {
    /// Appends in flight at the last acknowledgement.
    expect: usize,
    /// Duration of the last successful `fdatasync`.
    last_sync: Duration,
}

/// A request to end the writer, taken from the channel in the middle of a
/// round; acted on once the round's writes are done.
#[derive(Default)]
pub struct Ending {
    close: Option<Reply>,
    stop: bool,
}

impl Writer {
    /// The writer of the log recovery found: `shared` holds its state and
    /// its cursor slots, `active` the active segment opened for appending.
    /// Syncs the cursor slot recovery chose (see
    /// [`CursorSlots::sync_recovered`](super::cursor_store::CursorSlots::sync_recovered))
    /// and starts the janitor.
    pub fn new(shared: Arc<Shared>, rx: Receiver<Msg>, active: File) -> Writer {
        let (active, next_seq) = {
            let st = shared.lock();
            let active = ActiveSegment::resume(active, st.segments.back());
            (active, st.next_seq)
        };
        shared.cursor_slots().sync_recovered(&shared);
        Writer {
            janitor: Janitor::start(
                shared.dir.clone(),
                shared.opts.fsync.syncs_directory(),
                shared.fs.clone(),
            ),
            shared,
            rx,
            active,
            next_seq,
            pending: VecDeque::new(),
            last_cursor_sync: Instant::now(),
            // The first round checks ages at once.
            last_age_check: Instant::now() - Duration::from_secs(60),
            blocked_since: None,
            gather: Gather::default(),
            ending: Ending::default(),
        }
    }

    /// Runs the writer on its own thread until the log closes or stops.
    pub fn spawn(self) -> Result<JoinHandle<()>> {
        let dir = self.shared.dir.clone();
        std::thread::Builder::new()
            .name("seglog-writer".into())
            .spawn(move || self.run())
            .map_err(|e| LogError::io("starting the writer thread for", dir, e))
    }

    fn run(mut self) {
        loop {
            let msg = match self.rx.recv_timeout(self.wait_time()) {
                Ok(m) => Some(m),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return self.stop(),
            };
            if let Some(m) = msg {
                self.take(m);
            }
            self.take_queued();
            self.maintain();
            self.write_pending();
            // Commits made while the group waited for its appenders or
            // its fdatasync: written now rather than next round.
            self.write_moved_cursors();
            if self.ending.close.is_some() {
                // Left in place while closing, so that nothing waits to
                // gather a group any more.
                let r = self.close();
                if let Some(reply) = self.ending.close.take() {
                    reply.send(r);
                }
                return;
            }
            if self.ending.stop {
                return self.stop();
            }
        }
    }

    fn take(&mut self, m: Msg) {
        match m {
            Msg::Append(r) => self.pending.push_back(r),
            Msg::Maintain => self.shared.maintain_queued.store(false, Ordering::Release),
            Msg::PersistCursors(reply) => reply.send(self.store_cursors(true)),
            Msg::Close(reply) => self.ending.close = Some(reply),
            Msg::Stop => self.ending.stop = true,
        }
    }

    /// Takes every message already in the channel.
    fn take_queued(&mut self) {
        while let Ok(m) = self.rx.try_recv() {
            self.take(m);
        }
    }

    /// Waits for the appenders of the last group to come back; see [`Gather`].
    fn gather(&mut self) {
        if self.shared.opts.fsync != FsyncPolicy::Always
            || self.pending.len() >= self.gather.expect
            || self.blocked_since.is_some()
        {
            return;
        }
        let queued: usize = self.pending.iter().map(|r| r.block.stored_len()).sum();
        if queued >= MAX_GROUP_BYTES {
            return;
        }
        let until = Instant::now() + (self.gather.last_sync / 2).min(MAX_GATHER);
        while self.pending.len() < self.gather.expect
            && self.ending.close.is_none()
            && !self.ending.stop
        {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            match self.rx.recv_timeout(left) {
                Ok(m) => {
                    self.take(m);
                    // A commit woke the writer while it waits anyway.
                    self.write_moved_cursors();
                }
                Err(_) => return,
            }
        }
    }

    fn wait_time(&self) -> Duration {
        let mut t = TICK;
        if self.shared.cursor_slots().is_unsynced() {
            t = t.min(
                self.shared
                    .opts
                    .cursor_sync_interval
                    .saturating_sub(self.last_cursor_sync.elapsed()),
            );
        }
        if let FsyncPolicy::Interval(i) = self.shared.opts.fsync {
            if self.active.is_unsynced() {
                t = t.min(i.saturating_sub(self.active.since_sync()));
            }
        }
        if self.blocked_since.is_some() {
            if let Some(r) = self.pending.front() {
                t = t.min(r.deadline.saturating_duration_since(Instant::now()));
            }
        }
        t.max(Duration::from_millis(1))
    }

    fn stop(mut self) {
        for r in self.pending.drain(..) {
            let _ = r.reply.send(Err(LogError::Closed));
        }
        self.shared.lock().closed = true;
        self.shared.durable.send_modify(|_| {});
    }

    fn close(&mut self) -> Result<()> {
        // Everything queued before `close` is written; later appends find
        // the channel closed.
        while !self.pending.is_empty() && self.blocked_since.is_none() {
            self.write_pending();
        }
        for r in self.pending.drain(..) {
            let _ = r.reply.send(Err(LogError::Closed));
        }
        let synced = if self.active.is_unsynced() || self.shared.opts.fsync != FsyncPolicy::Always {
            self.sync_active()
        } else {
            Ok(())
        };
        let stored = self.store_cursors(true);
        // A clean close leaves no consumed segment behind.
        self.janitor.finish();
        self.shared.lock().closed = true;
        self.shared.durable.send_modify(|_| {});
        synced.and(stored)
    }

    /// Timers and retention: interval sync, cursor persistence, deletion of
    /// consumed segments, age and size eviction.
    /// Writes the cursors, unsynced, if a commit left its cursor to the
    /// writer (it found the cursor slots locked, or the slot rule wanted a
    /// sync). A kill -9 keeps the page cache, so a crash then replays only
    /// what was on the wire.
    fn write_moved_cursors(&mut self) {
        if self.shared.cursors_moved.swap(false, Ordering::AcqRel) {
            if let Err(e) = self.store_cursors(false) {
                warn!(error = %e, "could not write consumer cursors; will retry");
                // Left for the next round's maintenance to try again.
                self.shared.cursors_moved.store(true, Ordering::Release);
            }
        }
    }

    fn maintain(&mut self) {
        let shared = self.shared.clone();
        let opts = &shared.opts;
        if let FsyncPolicy::Interval(i) = opts.fsync {
            if self.active.is_unsynced() && self.active.since_sync() >= i {
                if let Err(e) = self.sync_active() {
                    error!(error = %e, "interval fsync failed: appends acknowledged since the last sync may not survive a power cut");
                }
            }
        }
        // A commit writes its cursor itself unless the slots were locked
        // (`cursor_store.rs`); one left to the writer is written now (and
        // after the group commit, and while a group gathers:
        // `write_moved_cursors`). The sync for power cuts waits for the
        // interval.
        let moved = self.shared.cursors_moved.swap(false, Ordering::AcqRel);
        if self.last_cursor_sync.elapsed() >= opts.cursor_sync_interval {
            self.last_cursor_sync = Instant::now();
            if let Err(e) = self.store_cursors(opts.fsync.syncs_directory()) {
                warn!(error = %e, "could not persist consumer cursors; will retry");
            }
        } else if moved {
            if let Err(e) = self.store_cursors(false) {
                warn!(error = %e, "could not write consumer cursors; will retry");
            }
        }
        retention::delete_consumed(self);
        if let Some(max_age) = opts.max_age {
            if self.last_age_check.elapsed() >= Duration::from_secs(1) {
                self.last_age_check = Instant::now();
                retention::evict_by_age(self, max_age, now_ms());
            }
        }
    }

    /// Makes room for `needed` bytes (`retention.rs`); false while the
    /// front append waits for space under `block`.
    fn make_space(&mut self, needed: u64) -> bool {
        let shared = self.shared.clone();
        let opts = &shared.opts;
        if retention::make_space(self, needed, opts.max_bytes, opts.when_full) {
            return true;
        }
        if self.blocked_since.is_none() {
            self.blocked_since = Some(Instant::now());
            warn!(
                max_bytes = opts.max_bytes,
                "the log is full; appends wait for consumers to catch up (when_full = \"block\")"
            );
        }
        false
    }

    /// Writes as many groups as the queue, the segment and the byte budget allow.
    fn write_pending(&mut self) {
        while !self.pending.is_empty() {
            self.gather();
            let Some(front) = self.pending.front() else {
                return;
            };
            let front_len = (FRAME_HEADER_LEN + front.block.stored_len()) as u64;
            let segment_bytes = self.shared.opts.segment_bytes;
            let rolling = self.active.has_frames()
                && (self.active.must_roll() || front_len > self.active.room(segment_bytes));
            let room = if rolling {
                segment_bytes - SEGMENT_HEADER_LEN as u64
            } else {
                self.active.room(segment_bytes)
            };
            let needed = front_len
                + if rolling {
                    SEGMENT_HEADER_LEN as u64
                } else {
                    0
                };
            if !self.make_space(needed) {
                self.expire_blocked();
                return;
            }
            self.blocked_since = None;
            // Gather the group: as many queued appends as fit the segment,
            // the group cap and the byte budget.
            let budget = {
                let st = self.shared.lock();
                self.shared
                    .opts
                    .max_bytes
                    .saturating_sub(st.total_bytes)
                    .saturating_sub(if rolling {
                        SEGMENT_HEADER_LEN as u64
                    } else {
                        0
                    })
            };
            let limit = room
                .min(budget)
                .min((FRAME_HEADER_LEN + MAX_GROUP_BYTES) as u64);
            let mut group_len = FRAME_HEADER_LEN as u64;
            let mut n = 0;
            for r in &self.pending {
                let l = r.block.stored_len() as u64;
                if n > 0 && group_len + l > limit {
                    break;
                }
                group_len += l;
                n += 1;
            }
            if rolling {
                if let Err(e) = self.roll() {
                    error!(error = %e, "could not start a new segment; failing the waiting appends");
                    self.active.forbid_writes();
                    self.fail(n, &e);
                    continue;
                }
            }
            let group: Vec<AppendReq> = self.pending.drain(..n).collect();
            self.write_group(group);
        }
    }

    /// Under `block`, answers `Full` to appends whose wait has run out.
    fn expire_blocked(&mut self) {
        let now = Instant::now();
        let since = self.blocked_since.unwrap_or(now);
        let max_bytes = self.shared.opts.max_bytes;
        let mut expired = 0;
        self.pending.retain_mut(|r| {
            if r.deadline > now {
                return true;
            }
            expired += 1;
            let (tx, _) = oneshot::channel();
            let reply = std::mem::replace(&mut r.reply, tx);
            let _ = reply.send(Err(LogError::Full {
                max_bytes,
                waited: now - since,
            }));
            false
        });
        if expired > 0 {
            self.shared.lock().counters.full_rejections += expired;
        }
    }

    fn fail(&mut self, n: usize, e: &LogError) {
        for r in self.pending.drain(..n) {
            let _ = r.reply.send(Err(e.clone()));
        }
    }

    /// Seals the active segment and starts the next one.
    fn roll(&mut self) -> Result<()> {
        self.active.repair(&self.shared.fs)?;
        let policy = self.shared.opts.fsync;
        if policy != FsyncPolicy::Always && self.active.is_unsynced() {
            // Sealing is a natural sync point for the weaker policies.
            self.sync_active()?;
        }
        let dir = &self.shared.dir;
        let fs = &self.shared.fs;
        let sync = policy.syncs_directory();
        let created_ms = now_ms();
        let (path, file) = segment::create(fs, dir, self.next_seq, created_ms, sync)?;
        if sync {
            if let Err(e) = segment::sync_dir(fs, dir) {
                let _ = fs.remove(&path);
                return Err(e);
            }
        }
        let read_handle = match File::open(&path) {
            Ok(f) => f,
            Err(e) => {
                // Else the next attempt would find the file already there.
                let _ = fs.remove(&path);
                return Err(LogError::io("opening segment", &path, e));
            }
        };
        {
            let mut st = self.shared.lock();
            if let Some(old) = st.segments.back_mut() {
                old.sealed = true;
            }
            let header = super::format::SegmentHeader {
                base_seq: self.next_seq,
                created_ms,
                version: super::format::FORMAT_VERSION,
            };
            let (len, file) = (SEGMENT_HEADER_LEN as u64, Arc::new(read_handle));
            st.segments
                .push_back(Segment::new(header, path.clone(), len, false, file));
            st.total_bytes += SEGMENT_HEADER_LEN as u64;
        }
        self.active.replace(file, path);
        Ok(())
    }

    fn sync_active(&mut self) -> Result<()> {
        let r = self.active.sync(&self.shared.fs);
        let mut st = self.shared.lock();
        match r {
            Ok(took) => {
                st.counters.record_fsync(took);
                Ok(())
            }
            Err(e) => {
                e.step.count_failure(&mut st.counters);
                Err(e.into_log_error(self.active.path()))
            }
        }
    }

    fn write_group(&mut self, group: Vec<AppendReq>) {
        let fs = &self.shared.fs;
        if let Err(e) = self.active.repair(fs) {
            for r in group {
                let _ = r.reply.send(Err(e.clone()));
            }
            return;
        }
        let count: u32 = group.iter().map(|r| r.count).sum();
        let payload: Vec<IoSlice<'_>> = group
            .iter()
            .flat_map(|r| [IoSlice::new(&r.block.head), IoSlice::new(&r.block.body)])
            .filter(|s| !s.is_empty())
            .collect();
        let header = FrameHeader {
            first_seq: self.next_seq,
            count,
            append_ms: now_ms(),
        }
        .encode(&payload);
        let mut slices = Vec::with_capacity(group.len() + 1);
        slices.push(IoSlice::new(&header));
        slices.extend(payload.iter().copied());
        let always = self.shared.opts.fsync == FsyncPolicy::Always;
        let written = self.active.write_frame(fs, &mut slices, always);
        drop(slices);
        drop(payload);
        let frame_len = match written {
            Ok(w) => {
                if let Some(took) = w.synced_in {
                    self.gather.last_sync = took;
                    self.shared.lock().counters.record_fsync(took);
                    // Everything that queued up during the sync plus this
                    // group is what is in flight: the next group waits for
                    // as many.
                    self.take_queued();
                    self.gather.expect = group.len() + self.pending.len();
                }
                w.len
            }
            Err(e) => {
                e.step.count_failure(&mut self.shared.lock().counters);
                let op = e.step.op();
                error!(segment = %self.active.path().display(), error = %e.source, "{op} failed; the appends in this group were not acknowledged");
                let err = e.into_log_error(self.active.path());
                for r in group {
                    let _ = r.reply.send(Err(err.clone()));
                }
                return;
            }
        };
        let mut st = self.shared.lock();
        let first = self.next_seq;
        self.next_seq += count as u64;
        if let Some(active) = st.segments.back_mut() {
            active.readable_len = self.active.len();
        }
        st.next_seq = self.next_seq;
        st.total_bytes += frame_len;
        st.counters.frames_written += 1;
        st.counters.bytes_written += frame_len;
        st.counters.appended_events += count as u64;
        st.counters.appended_bytes += group.iter().map(|r| r.event_bytes).sum::<u64>();
        drop(st);
        self.shared.durable.send_replace(self.next_seq);

        let mut seq = first;
        for r in group {
            let range = SeqRange {
                start: seq,
                end: seq + r.count as u64,
            };
            seq = range.end;
            let _ = r.reply.send(Ok(range));
        }
    }
}

impl retention::Segments for Writer {
    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    fn removed(&mut self, seg: Segment, reason: Option<LossReason>) {
        if reason.is_some() {
            if let Err(e) = self.store_cursors(self.shared.opts.fsync.syncs_directory()) {
                // The space is needed all the same; a crash before the next
                // successful store re-reads nothing (the file is gone) and
                // restores the older counts.
                warn!(error = %e, segment = %seg.path.display(),
                    "could not persist the eviction counts before deleting the segment");
            }
        }
        self.janitor.delete(seg.path);
    }
}

impl Writer {
    /// [`CursorSlots::store`](super::cursor::CursorSlots) from the writer
    /// thread (`cursor_store.rs`). A commit that found the slots locked by
    /// this store left its cursor to the writer (`cursors_moved`): written
    /// right after, not after the next group.
    pub(super) fn store_cursors(&mut self, sync: bool) -> Result<()> {
        let moved = &self.shared.cursors_moved;
        moved.store(false, Ordering::Release);
        self.shared.cursor_slots().store(&self.shared, sync)?;
        if moved.swap(false, Ordering::AcqRel) {
            if let Err(e) = self.shared.cursor_slots().store(&self.shared, false) {
                moved.store(true, Ordering::Release);
                return Err(e);
            }
        }
        Ok(())
    }
}
