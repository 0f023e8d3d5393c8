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
//! size and age, syncs on an interval and persists cursors, so no two pieces
//! of code ever race on the files.

use std::collections::VecDeque;
use std::fs::File;
use std::io::IoSlice;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;
use tracing::{error, warn};

use super::cursor::{self, CursorMap};
use super::error::{LogError, Result};
use super::format::{FrameHeader, FRAME_HEADER_LEN, SEGMENT_HEADER_LEN};
use super::janitor::Janitor;
use super::options::{FsyncPolicy, WhenFull};
use super::segment::{self, Segment};
use super::state::{now_ms, LossReason, Shared};
use super::SeqRange;

/// A group never grows beyond this many payload bytes, so one slow write
/// does not hold back the acknowledgement of everything queued behind it.
const MAX_GROUP_BYTES: usize = 8 << 20;
/// How often the writer wakes with nothing to do, to check age and timers.
const TICK: Duration = Duration::from_millis(200);
/// The longest the writer waits to gather a group (and never more than half
/// the last `fdatasync`).
const MAX_GATHER: Duration = Duration::from_micros(500);

pub struct AppendReq {
    /// Events already framed by [`Batch`](super::Batch): u32 length + bytes each.
    pub payload: Bytes,
    pub count: u32,
    pub deadline: Instant,
    pub reply: oneshot::Sender<Result<SeqRange>>,
}

/// Where the writer answers a control request: an async waiter, or a plain
/// thread (a std channel, which may block even inside a runtime's thread —
/// used only for rare calls like consumer registration).
pub enum Reply {
    Async(oneshot::Sender<Result<()>>),
    Blocking(std::sync::mpsc::SyncSender<Result<()>>),
}

impl Reply {
    pub fn send(self, r: Result<()>) {
        match self {
            Reply::Async(tx) => {
                let _ = tx.send(r);
            }
            Reply::Blocking(tx) => {
                let _ = tx.send(r);
            }
        }
    }
}

pub enum Msg {
    Append(AppendReq),
    /// A commit may have freed a segment.
    Maintain,
    PersistCursors(Reply),
    Close(Reply),
    /// The last handle was dropped without `close`: stop as a crash would,
    /// without persisting cursors.
    Stop,
}

pub struct Writer {
    pub shared: Arc<Shared>,
    /// Deletes segment files on its own thread; drained when the writer ends.
    pub janitor: Janitor,
    pub rx: Receiver<Msg>,
    pub active: File,
    /// The active segment's path, for errors and the I/O seam.
    pub active_path: PathBuf,
    /// Bytes in the active segment file (acknowledged or not).
    pub active_len: u64,
    /// The active file must be cut back to this length before the next write:
    /// set when a write or sync failed part-way.
    pub repair_to: Option<u64>,
    pub next_seq: u64,
    pub pending: VecDeque<AppendReq>,
    pub unsynced: bool,
    pub last_sync: Instant,
    /// When cursors were last stored on the `cursor_sync_interval` timer.
    pub last_cursor_sync: Instant,
    pub last_age_check: Instant,
    /// The generation last written to a cursor slot (synced or not).
    pub cursor_generation: u64,
    pub stored_cursors: CursorMap,
    /// The slot holding the newest *synced* generation, if known. Unsynced
    /// writes go only into the other slot, see [`Writer::store_cursors`].
    pub durable_slot: Option<usize>,
    /// The newest generation was written but not synced.
    pub cursors_unsynced: bool,
    /// A slot file created by an unsynced write: its directory entry is not
    /// durable until the directory is synced.
    pub slot_needs_dir_sync: [bool; 2],
    /// Set while the front of `pending` waits for space under `block`.
    pub blocked_since: Option<Instant>,
    /// A roll failed: no frame may go into the active segment any more. The
    /// failed attempt may have left the next segment's file behind (its
    /// removal is not durable until a directory sync), and after a power cut
    /// recovery would take that file for the end of the log: frames written
    /// to the old segment after it would get their sequence numbers again.
    pub must_roll: bool,
    pub gather: Gather,
    pub ending: Ending,
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
    pub fn run(mut self) {
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
        let queued: usize = self.pending.iter().map(|r| r.payload.len()).sum();
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
                Ok(m) => self.take(m),
                Err(_) => return,
            }
        }
    }

    fn wait_time(&self) -> Duration {
        let mut t = TICK;
        if self.cursors_unsynced {
            t = t.min(
                self.shared
                    .opts
                    .cursor_sync_interval
                    .saturating_sub(self.last_cursor_sync.elapsed()),
            );
        }
        if let FsyncPolicy::Interval(i) = self.shared.opts.fsync {
            if self.unsynced {
                t = t.min(i.saturating_sub(self.last_sync.elapsed()));
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
        let synced = if self.unsynced || self.shared.opts.fsync != FsyncPolicy::Always {
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
    fn maintain(&mut self) {
        let shared = self.shared.clone();
        let opts = &shared.opts;
        if let FsyncPolicy::Interval(i) = opts.fsync {
            if self.unsynced && self.last_sync.elapsed() >= i {
                if let Err(e) = self.sync_active() {
                    error!(error = %e, "interval fsync failed: appends acknowledged since the last sync may not survive a power cut");
                }
            }
        }
        // A commit that moved a cursor woke the writer: its slot is written
        // now, in the same round as the next group commit (or alone when
        // appends are idle), so a kill -9 (which keeps the page cache)
        // replays at most the commits of one round. The sync for power cuts
        // waits for the interval.
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
        self.delete_consumed();
        if let Some(max_age) = opts.max_age {
            if self.last_age_check.elapsed() >= Duration::from_secs(1) {
                self.last_age_check = Instant::now();
                self.evict_by_age(max_age);
            }
        }
    }

    /// Writes every cursor into a slot, syncing it when `sync`.
    ///
    /// The slot rule: an unsynced write never goes into the slot holding
    /// the newest *synced* generation, only into the other one, and the
    /// slots trade places only after a sync. A power cut can tear or undo
    /// any unsynced write, but then the durable slot is still whole, so
    /// recovery always finds the last synced cursors (or newer ones). Were
    /// unsynced writes to alternate, one could land on the only durable
    /// slot while the other was still unsynced, and a cut could tear both.
    fn store_cursors(&mut self, sync: bool) -> Result<()> {
        let current: CursorMap = {
            let st = self.shared.lock();
            st.consumers
                .iter()
                .map(|(n, c)| {
                    let e = cursor::Entry {
                        next: st.effective(c),
                        lost: c.lost_all(),
                        lost_through: c.lost_through,
                        in_doubt: c.in_doubt,
                        pending_in_doubt: c.pending_in_doubt(),
                    };
                    (n.clone(), e)
                })
                .collect()
        };
        if current == self.stored_cursors && self.cursor_generation > 0 {
            if sync && self.cursors_unsynced {
                return self.sync_cursor_slot();
            }
            return Ok(());
        }
        // Without a known durable slot (a sync at open failed), only a
        // synced write is safe, as before this rule.
        let syncs = self.shared.opts.fsync.syncs_directory();
        let sync = sync || (syncs && self.durable_slot.is_none());
        let slot = match self.durable_slot {
            Some(d) => 1 - d,
            None => ((self.cursor_generation + 1) % 2) as usize,
        };
        let generation = cursor::next_generation(self.cursor_generation, slot);
        let created = !cursor::slot_paths(&self.shared.dir)[slot].exists();
        cursor::store(
            &self.shared.fs,
            &self.shared.dir,
            generation,
            &current,
            sync,
        )?;
        self.cursor_generation = generation;
        self.stored_cursors = current;
        if sync {
            if self.slot_needs_dir_sync[slot] {
                segment::sync_dir(&self.shared.fs, &self.shared.dir)?;
                self.slot_needs_dir_sync[slot] = false;
            }
            self.durable_slot = syncs.then_some(slot);
            self.cursors_unsynced = false;
        } else {
            self.cursors_unsynced = true;
            self.slot_needs_dir_sync[slot] |= created;
        }
        Ok(())
    }

    /// Syncs the slot holding the newest, unsynced generation: it becomes
    /// the durable slot.
    fn sync_cursor_slot(&mut self) -> Result<()> {
        let slot = (self.cursor_generation % 2) as usize;
        let dir = &self.shared.dir;
        let path = &cursor::slot_paths(dir)[slot];
        let f = File::open(path).map_err(|e| LogError::io("opening cursor file", path, e))?;
        self.shared
            .fs
            .sync_data(&f, path)
            .map_err(|e| LogError::io("syncing cursor file", path, e))?;
        if self.slot_needs_dir_sync[slot] {
            segment::sync_dir(&self.shared.fs, dir)?;
            self.slot_needs_dir_sync[slot] = false;
        }
        self.durable_slot = Some(slot);
        self.cursors_unsynced = false;
        Ok(())
    }

    /// Deletes sealed segments that every consumer has passed and no hold
    /// keeps.
    fn delete_consumed(&mut self) {
        self.delete_passed(true);
    }

    /// Deletes sealed segments that every consumer has passed, keeping
    /// those a hold points into when `honour_holds`.
    fn delete_passed(&mut self, honour_holds: bool) {
        loop {
            let st = self.shared.lock();
            let needed = if honour_holds {
                st.min_needed()
            } else {
                st.min_committed()
            };
            let passed = st.segments.len() > 1 && needed.is_some_and(|m| m >= st.end_of(0));
            drop(st);
            if !passed {
                return;
            }
            self.delete_front(None);
        }
    }

    fn evict_by_age(&mut self, max_age: Duration) {
        let cutoff = now_ms().saturating_sub(max_age.as_millis() as u64);
        loop {
            // Every event of a sealed segment was appended before the next
            // segment was created, so the next one's creation time bounds
            // the age of its newest event without reading it.
            let expired = {
                let st = self.shared.lock();
                st.segments.len() > 1 && st.segments[1].created_ms < cutoff
            };
            if !expired {
                return;
            }
            self.delete_front(Some(LossReason::Age));
        }
    }

    /// Removes the oldest segment. With a reason, every event of it that a
    /// consumer had not finished is accounted for (`ConsumerState::evict`):
    /// counted lost now, or, if on the wire, when its answer comes. The
    /// cursors, which carry those counts and the moved commit points, reach
    /// disk before the file is deleted: a crash then either finds the file
    /// still there and nothing counted, or the file gone and everything
    /// counted, never counts twice and never forgets.
    fn delete_front(&mut self, reason: Option<LossReason>) {
        let seg = {
            let mut st = self.shared.lock();
            let end = st.end_of(0);
            let Some(seg) = st.segments.pop_front() else {
                return;
            };
            st.total_bytes -= seg.readable_len;
            if let Some(reason) = reason {
                st.counters.segments_evicted += 1;
                for (name, c) in st.consumers.iter_mut() {
                    let lost = c.evict(seg.base_seq, end, reason);
                    if lost > 0 {
                        warn!(consumer = %name, events = lost, reason = reason.as_str(),
                            segment = %seg.path.display(), "evicted events this consumer had not finished");
                    }
                }
            } else {
                st.counters.segments_deleted += 1;
            }
            seg
        };
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

    fn segment_room(&self) -> u64 {
        self.shared
            .opts
            .segment_bytes
            .saturating_sub(self.active_len)
    }

    fn active_has_frames(&self) -> bool {
        self.active_len > SEGMENT_HEADER_LEN as u64
    }

    /// Writes as many groups as the queue, the segment and the byte budget allow.
    fn write_pending(&mut self) {
        while !self.pending.is_empty() {
            self.gather();
            let Some(front) = self.pending.front() else {
                return;
            };
            let front_len = (FRAME_HEADER_LEN + front.payload.len()) as u64;
            let rolling =
                self.active_has_frames() && (self.must_roll || front_len > self.segment_room());
            let room = if rolling {
                self.shared.opts.segment_bytes - SEGMENT_HEADER_LEN as u64
            } else {
                self.segment_room()
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
                let l = r.payload.len() as u64;
                if n > 0 && group_len + l > limit {
                    break;
                }
                group_len += l;
                n += 1;
            }
            if rolling {
                if let Err(e) = self.roll() {
                    error!(error = %e, "could not start a new segment; failing the waiting appends");
                    self.must_roll = true;
                    self.fail(n, &e);
                    continue;
                }
                self.must_roll = false;
            }
            let group: Vec<AppendReq> = self.pending.drain(..n).collect();
            self.write_group(group);
        }
    }

    /// Ensures `needed` more bytes fit in `max_bytes`: deletes consumed
    /// segments, then evicts under `drop_oldest`. False while blocked.
    fn make_space(&mut self, needed: u64) -> bool {
        let max = self.shared.opts.max_bytes;
        let fits = |w: &Self| w.shared.lock().total_bytes + needed <= max;
        if fits(self) {
            return true;
        }
        self.delete_consumed();
        if fits(self) {
            return true;
        }
        // A hold never makes the log refuse an append: at `max_bytes` the
        // segments every consumer has finished go even if held (a crash of
        // the holding file source then appends their lines again), before
        // anything unsent is evicted or an append waits.
        let held = self.shared.lock().segments.len();
        self.delete_passed(false);
        if self.shared.lock().segments.len() < held {
            warn!("the log is full: deleted finished segments that a file source's last checkpoint still points into (a crash before its next checkpoint appends their lines again)");
        }
        if fits(self) {
            return true;
        }
        if self.shared.opts.when_full == WhenFull::DropOldest {
            while !fits(self) && self.shared.lock().segments.len() > 1 {
                self.delete_front(Some(LossReason::Size));
            }
            // The active segment alone always fits, since max_bytes is at
            // least two segments.
            return true;
        }
        if self.blocked_since.is_none() {
            self.blocked_since = Some(Instant::now());
            warn!(
                max_bytes = max,
                "the log is full; appends wait for consumers to catch up (when_full = \"block\")"
            );
        }
        false
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
            let _ = r.reply.send(Err(copy_error(e)));
        }
    }

    /// Seals the active segment and starts the next one.
    fn roll(&mut self) -> Result<()> {
        self.repair()?;
        let policy = self.shared.opts.fsync;
        if policy != FsyncPolicy::Always && self.unsynced {
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
            st.segments.push_back(Segment {
                base_seq: self.next_seq,
                path: path.clone(),
                readable_len: SEGMENT_HEADER_LEN as u64,
                sealed: false,
                created_ms,
                file: Arc::new(read_handle),
                map: None,
            });
            st.total_bytes += SEGMENT_HEADER_LEN as u64;
        }
        self.active = file;
        self.active_path = path;
        self.active_len = SEGMENT_HEADER_LEN as u64;
        Ok(())
    }

    /// Cuts off the remains of a failed write, if any, and makes the cut
    /// durable before anything else is written. Otherwise a power cut could
    /// bring the failed frame back — whole, if its bytes reached the disk
    /// although the write or its sync reported an error — with the sequence
    /// numbers the next frame reuses: if the segment is sealed meanwhile,
    /// recovery does not scan it, and readers would take the unacknowledged
    /// events for the acknowledged ones.
    fn repair(&mut self) -> Result<()> {
        if let Some(len) = self.repair_to {
            let fs = &self.shared.fs;
            fs.set_len(&self.active, &self.active_path, len)
                .and_then(|_| fs.sync_data(&self.active, &self.active_path))
                .map_err(|e| {
                    LogError::io("cutting back a failed write in", &self.active_path, e)
                })?;
            self.active_len = len;
            self.repair_to = None;
        }
        Ok(())
    }

    fn sync_active(&mut self) -> Result<()> {
        let started = Instant::now();
        let r = self.shared.fs.sync_data(&self.active, &self.active_path);
        let mut st = self.shared.lock();
        match r {
            Ok(()) => {
                st.counters.record_fsync(started.elapsed());
                self.unsynced = false;
                self.last_sync = Instant::now();
                Ok(())
            }
            Err(e) => {
                st.counters.sync_errors += 1;
                Err(LogError::io("syncing segment", &self.active_path, e))
            }
        }
    }

    fn write_group(&mut self, group: Vec<AppendReq>) {
        if let Err(e) = self.repair() {
            for r in group {
                let _ = r.reply.send(Err(copy_error(&e)));
            }
            return;
        }
        let count: u32 = group.iter().map(|r| r.count).sum();
        let payload: Vec<IoSlice<'_>> = group.iter().map(|r| IoSlice::new(&r.payload)).collect();
        let header = FrameHeader {
            first_seq: self.next_seq,
            count,
            append_ms: now_ms(),
        }
        .encode(&payload);
        let mut slices = Vec::with_capacity(group.len() + 1);
        slices.push(IoSlice::new(&header));
        slices.extend(payload.iter().copied());
        let frame_len: u64 = slices.iter().map(|s| s.len() as u64).sum();
        let start_len = self.active_len;

        let fs = &self.shared.fs;
        let mut result = fs
            .write_all(&mut self.active, &self.active_path, start_len, &mut slices)
            .map_err(|e| ("writing segment", e));
        if result.is_ok() && self.shared.opts.fsync == FsyncPolicy::Always {
            let started = Instant::now();
            result = fs
                .sync_data(&self.active, &self.active_path)
                .map_err(|e| ("syncing segment", e));
            if result.is_ok() {
                self.gather.last_sync = started.elapsed();
                self.shared
                    .lock()
                    .counters
                    .record_fsync(self.gather.last_sync);
                // Everything that queued up during the sync plus this group
                // is what is in flight: the next group waits for as many.
                self.take_queued();
                self.gather.expect = group.len() + self.pending.len();
            }
        }
        drop(slices);
        drop(payload);

        let mut st = self.shared.lock();
        if let Err((op, e)) = result {
            // Nothing of this group is acknowledged; cut the file back so a
            // later group does not sit behind a half-written frame.
            if op == "syncing segment" {
                st.counters.sync_errors += 1;
            } else {
                st.counters.write_errors += 1;
            }
            drop(st);
            self.repair_to = Some(start_len);
            let _ = self.repair();
            error!(segment = %self.active_path.display(), error = %e, "{op} failed; the appends in this group were not acknowledged");
            let err = LogError::io(op, &self.active_path, e);
            for r in group {
                let _ = r.reply.send(Err(copy_error(&err)));
            }
            return;
        }
        self.active_len = start_len + frame_len;
        let first = self.next_seq;
        self.next_seq += count as u64;
        if self.shared.opts.fsync != FsyncPolicy::Always {
            self.unsynced = true;
        }
        if let Some(active) = st.segments.back_mut() {
            active.readable_len = self.active_len;
        }
        st.next_seq = self.next_seq;
        st.total_bytes += frame_len;
        st.counters.frames_written += 1;
        st.counters.bytes_written += frame_len;
        st.counters.appended_events += count as u64;
        st.counters.appended_bytes += group
            .iter()
            .map(|r| r.payload.len() as u64 - 4 * r.count as u64)
            .sum::<u64>();
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

/// `io::Error` is not `Clone`; every appender of a failed group gets an
/// error with the same kind and message.
fn copy_error(e: &LogError) -> LogError {
    match e {
        LogError::Io { op, path, source } => LogError::Io {
            op,
            path: path.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        LogError::Full { max_bytes, waited } => LogError::Full {
            max_bytes: *max_bytes,
            waited: *waited,
        },
        other => LogError::Io {
            op: "appending",
            path: Default::default(),
            source: std::io::Error::other(other.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Mutex;

    use super::super::{Batch, IoHook, IoOp, Log, LogOptions, StartAt};
    use super::*;

    /// Per cursor slot: written since its last sync, and ever synced.
    #[derive(Debug, Default)]
    struct Slots {
        dirty: [bool; 2],
        synced: [bool; 2],
        unsynced_writes: u64,
        syncs: u64,
        violations: Vec<String>,
    }

    #[derive(Debug, Default)]
    struct Watch(Mutex<Slots>);

    fn slot_of(p: &Path) -> Option<usize> {
        match p.file_name()?.to_str()? {
            "cursors.0" => Some(0),
            "cursors.1" => Some(1),
            _ => None,
        }
    }

    impl IoHook for Watch {
        fn before(&self, op: &IoOp<'_>) -> std::io::Result<()> {
            let mut s = self.0.lock().unwrap();
            if let IoOp::Write { path, .. } | IoOp::SetLen { path, .. } = *op {
                if let Some(i) = slot_of(path) {
                    // Once a slot was synced, one must stay synced and
                    // untouched: a power cut may tear every dirty slot.
                    let ever_synced = s.synced[0] || s.synced[1];
                    if ever_synced && (!s.synced[1 - i] || s.dirty[1 - i]) {
                        let msg = format!("write to slot {i} while {s:?}");
                        s.violations.push(msg);
                    }
                    s.dirty[i] = true;
                }
            }
            Ok(())
        }

        fn after(&self, op: &IoOp<'_>) {
            let mut s = self.0.lock().unwrap();
            if let IoOp::SyncData { path } = *op {
                if let Some(i) = slot_of(path) {
                    if !s.dirty[i] && s.synced[i] {
                        return;
                    }
                    s.dirty[i] = false;
                    s.synced[i] = true;
                    s.syncs += 1;
                }
            }
            if let IoOp::Write { path, .. } = *op {
                if slot_of(path).is_some() {
                    s.unsynced_writes += 1;
                }
            }
        }
    }

    /// Commits write the cursor slot at once without a sync, never into
    /// the slot holding the newest synced cursors; the interval syncs.
    #[test]
    fn unsynced_cursor_writes_never_touch_the_durable_slot() {
        let dir = tempfile::tempdir().unwrap();
        let watch = Arc::new(Watch::default());
        let opts = LogOptions {
            cursor_sync_interval: Duration::from_millis(30),
            io_hook: Some(watch.clone()),
            ..LogOptions::default()
        };
        let log = Log::open(dir.path(), opts).unwrap();
        let mut c = log.consumer("sink", StartAt::Oldest).unwrap();
        let until = Instant::now() + Duration::from_millis(300);
        let mut last_written = 0;
        while Instant::now() < until {
            let mut b = Batch::new();
            b.push(b"event");
            log.append_blocking(b).unwrap();
            let got = c.read(10, 1 << 20).unwrap();
            if let Some(e) = got.last() {
                c.commit(e.seq + 1).unwrap();
                last_written = e.seq + 1;
            }
            // The cursor reaches the slot file without a sync or a close.
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let on_disk = cursor::load(dir.path()).unwrap().cursors["sink"].next;
                if on_disk == last_written {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "cursor {on_disk} never reached {last_written}"
                );
                std::thread::yield_now();
            }
        }
        drop(c);
        log.close_blocking().unwrap();
        let s = watch.0.lock().unwrap();
        assert!(s.violations.is_empty(), "{:?}", s.violations);
        assert!(s.unsynced_writes > 2 * s.syncs, "{s:?}");
        assert!(s.syncs >= 3, "{s:?}");
        assert!(
            !s.dirty[0] && !s.dirty[1],
            "close leaves a slot unsynced: {s:?}"
        );
    }

    #[test]
    fn generations_keep_their_slot_parity() {
        assert_eq!(cursor::next_generation(0, 1), 1);
        assert_eq!(cursor::next_generation(0, 0), 2);
        assert_eq!(cursor::next_generation(5, 0), 6);
        assert_eq!(cursor::next_generation(5, 1), 7);
    }
}
