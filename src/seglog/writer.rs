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
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tracing::{error, warn};

use super::block::Encoded;
use super::cursor::CursorMap;
use super::error::{LogError, Result};
use super::format::{FrameHeader, FRAME_HEADER_LEN, SEGMENT_HEADER_LEN};
use super::janitor::Janitor;
use super::options::FsyncPolicy;
use super::segment::{self, Segment};
use super::state::{now_ms, Shared};
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
    /// The batch as a block, compressed in the appending task.
    pub block: Encoded,
    /// Bytes of its events as given, for the counters.
    pub event_bytes: u64,
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
            let front_len = (FRAME_HEADER_LEN + front.block.stored_len()) as u64;
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
                format: super::format::FORMAT_VERSION,
                file: Arc::new(read_handle),
                map: None,
                marks: Vec::new(),
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
