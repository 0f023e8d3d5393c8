//! Consumers: named readers with a durable cursor.
//!
//! A consumer reads frames straight out of a memory map of the segment and
//! hands out events as slices of it (`Bytes`), so reading copies nothing and
//! holds no segment on the heap. Sealed segments are mapped once and shared;
//! the active one is re-mapped as its acknowledged end grows. Every frame's
//! CRC is checked before any of its events is handed out.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use tracing::warn;

use super::error::{LogError, Result};
use super::format::{self, Decoded, SEGMENT_HEADER_LEN};
use super::frame_cursor::{Event, FrameCursor, Peek};
use super::ledger::Ledger;
use super::options::WhenFull;
use super::state::{LossReason, State};
use super::Log;

fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no memory-safety preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
    })
}

/// Where a consumer will start the first time it is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    /// The oldest event still in the log.
    Oldest,
    /// Only events appended from now on.
    Latest,
}

/// A named reader. Reading is in sequence order; [`commit`](Self::commit)
/// records how far processing has finished, which is what survives a restart.
pub struct Consumer {
    log: Log,
    /// Empty for a reader without a cursor ([`Log::reader`]).
    name: String,
    /// The segment being read and the offset of the next frame in it.
    seg_base: u64,
    offset: u64,
    /// The next sequence number to hand out.
    next_seq: u64,
    frame: Option<FrameCursor>,
    /// The segment, and the offset in it, up to which this reader has given
    /// back the mapped pages it passed (see [`Consumer::release_behind`]).
    released: (u64, usize),
}

/// A reader gives back the pages it has passed every this many bytes
/// (a `madvise` call each: about a hundred a second while draining a
/// backlog at full speed)...
const RELEASE_STEP: usize = 256 << 10;
/// ...except the last this many. So a reader keeps at most
/// `RELEASE_LAG + RELEASE_STEP` bytes of its segment mapped (plus the frame
/// it is in): the mapped-window budget in docs/configuration.md ("Memory").
/// A format-2 block is decompressed once into its own buffer, so what a
/// sink decodes later is seldom in the map: the lag matters for format 1
/// and for blocks stored plain, whose events a sink decodes within a
/// batch or two of reading them (a page given back too early only costs a
/// minor fault).
const RELEASE_LAG: usize = 256 << 10;

impl Consumer {
    pub(crate) fn new(log: Log, name: String, at: u64) -> Consumer {
        Consumer {
            log,
            name,
            seg_base: u64::MAX,
            offset: 0,
            next_seq: at,
            frame: None,
            released: (u64::MAX, 0),
        }
    }

    pub(crate) fn unregistered(log: Log, at: u64) -> Consumer {
        Consumer::new(log, String::new(), at)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The next sequence number this reader will hand out.
    pub fn position(&self) -> u64 {
        self.next_seq
    }

    /// The committed position: everything below it is done.
    pub fn committed(&self) -> u64 {
        let st = self.log.shared().lock();
        st.consumers
            .get(&self.name)
            .map_or(st.floor(), |c| st.effective(c))
    }

    /// Moves the reader back to the committed position, e.g. to re-read
    /// events whose delivery was abandoned.
    pub fn rewind(&mut self) {
        self.next_seq = self.committed();
        self.seg_base = u64::MAX;
        self.frame = None;
    }

    /// Records that every event below `next_seq` is done. Commits never move
    /// backwards (a lower value is ignored) and never past the acknowledged
    /// end of the log. The commit is in the cursor file when this returns
    /// (surviving a crash of the process; if the log's writer held the file,
    /// it writes it right after) and synced every `cursor_sync_interval`
    /// (surviving a power cut), or at once with [`Log::sync_cursors`].
    pub fn commit(&self, next_seq: u64) -> Result<()> {
        if self.log.is_read_only() {
            return Err(LogError::ReadOnly);
        }
        if self.name.is_empty() {
            return Err(LogError::NoCursor);
        }
        let shared = self.log.shared();
        let mut st = shared.lock();
        if next_seq > st.next_seq {
            return Err(LogError::CommitBeyondDurable {
                consumer: self.name.clone(),
                seq: next_seq,
                durable: st.next_seq,
            });
        }
        let c = st.consumers.entry(self.name.clone()).or_default();
        if next_seq <= c.committed {
            return Ok(());
        }
        c.commit(next_seq);
        drop(st);
        // The cursor goes to the file now, unsynced, unless the writer
        // thread is storing the cursors itself (then it is left to it, as
        // is a write the slot rule would have to sync): a commit made while
        // the writer is inside a group's fdatasync is in the file at once,
        // so a kill -9 replays only what is in flight (`cursor_store.rs`).
        let written = match shared.cursor_slots.try_lock() {
            Ok(mut slots) => slots.store_unsynced(shared).unwrap_or_else(|e| {
                warn!(consumer = %self.name, error = %e, "could not write the cursor file; the log's writer will retry");
                false
            }),
            Err(_) => false,
        };
        if !written {
            shared.cursors_moved.store(true, Ordering::Release);
        }
        // Wakes the writer to free a segment this commit passed (and write
        // the cursor if it was left to it); see `Writer::maintain`.
        self.log.wake_writer();
        Ok(())
    }

    /// A shareable handle on this consumer's claims, for the tasks that
    /// send what it reads.
    pub fn ledger(&self) -> Ledger {
        let opts = self.log.options();
        Ledger::new(
            self.log.clone(),
            self.name.clone(),
            opts.when_full == WhenFull::DropOldest || opts.max_age.is_some(),
        )
    }

    /// Waits until there is something to read beyond this reader's position
    /// (or the log is closed).
    pub async fn wait(&self) {
        let mut rx = self.log.shared().durable.subscribe();
        let next = self.next_seq;
        let shared = self.log.shared();
        let _ = rx.wait_for(|&end| end > next || shared.lock().closed).await;
    }

    /// Reads up to `max_events` events and about `max_bytes` of event data
    /// (always at least one event if any is available). Returns an empty
    /// batch when caught up; never blocks on new data.
    pub fn read(&mut self, max_events: usize, max_bytes: usize) -> Result<Vec<Event>> {
        let mut out = Vec::new();
        let mut bytes = 0usize;
        if self.next_seq < self.log.shared().lock().floor() {
            // What this reader held was evicted (and counted) meanwhile.
            self.frame = None;
        }
        while out.len() < max_events {
            if let Some(f) = &mut self.frame {
                match f.peek() {
                    Peek::Event(r) => {
                        if !out.is_empty() && bytes + r.len() > max_bytes {
                            break;
                        }
                        bytes += r.len();
                        let e = f.take(r);
                        self.next_seq = e.seq + 1;
                        if out.capacity() == 0 {
                            // Once there is something to return, not on every empty poll.
                            out.reserve(max_events.min(1024));
                        }
                        out.push(e);
                        continue;
                    }
                    Peek::Damaged {
                        to,
                        offset,
                        bytes,
                        reason,
                    } => {
                        self.damaged_block(to, offset, bytes, &reason);
                        continue;
                    }
                    Peek::End => {}
                }
                self.frame = None;
            }
            if !self.next_frame()? {
                break;
            }
        }
        let shared = self.log.shared();
        let mut st = shared.lock();
        if let Some(c) = st.consumers.get_mut(&self.name) {
            c.read_next = c.read_next.max(self.next_seq);
        }
        Ok(out)
    }

    /// Like [`read`](Self::read), but waits for at least one event.
    pub async fn read_wait(&mut self, max_events: usize, max_bytes: usize) -> Result<Vec<Event>> {
        loop {
            let batch = self.read(max_events, max_bytes)?;
            if !batch.is_empty() {
                return Ok(batch);
            }
            if self.log.shared().lock().closed {
                return Err(LogError::Closed);
            }
            self.wait().await;
        }
    }

    /// Positions `self.frame` on the next frame holding events at or after
    /// `next_seq`. False when caught up with the acknowledged end.
    fn next_frame(&mut self) -> Result<bool> {
        loop {
            let shared = self.log.shared().clone();
            let (map, sealed, end, version) = {
                let mut st = shared.lock();
                self.reposition(&mut st);
                let Some(i) = st.index_of(self.seg_base) else {
                    return Ok(false);
                };
                let seg = &st.segments[i];
                if self.offset >= seg.readable_len {
                    if !seg.sealed {
                        return Ok(false);
                    }
                    // On to the next segment; a gap between the end of this
                    // one and the start of the next is events lost to damage
                    // or to a deleted file.
                    let next_base = st.segments[i + 1].header.base_seq;
                    if next_base > self.next_seq {
                        let path = seg.path.display().to_string();
                        self.lose(&mut st, next_base, &path, "events missing between segments");
                    }
                    // Drop the shared map of the segment left behind: kept,
                    // every page a reader touched would stay mapped until the
                    // segment is deleted, so while a lagging consumer holds
                    // segments back, the process's RSS would grow toward the
                    // size of the log. A reader still inside maps it again.
                    st.segments[i].map = None;
                    self.seg_base = next_base;
                    self.offset = SEGMENT_HEADER_LEN as u64;
                    continue;
                }
                let sealed = seg.sealed;
                let end = st.end_of(i);
                let map = st.segments[i].map()?;
                (map, sealed, end, st.segments[i].header.version)
            };
            let at = self.offset as usize;
            self.release_behind(&map, at);
            match format::decode_frame(&map[at..], version) {
                Decoded::Frame {
                    header,
                    payload,
                    len,
                } => {
                    self.offset += len as u64;
                    if header.end_seq() <= self.next_seq {
                        continue;
                    }
                    if header.first_seq >= end {
                        // Sequence numbers the next segment or the log's end
                        // already owns (a segment file from elsewhere, or a
                        // CRC collision): handed out, they would be numbers
                        // new appends reuse. Only the headers of sealed
                        // segments are checked on open, so it is caught here.
                        let mut st = shared.lock();
                        if st.damage_seen.insert((self.seg_base, at as u64)) {
                            st.counters.corrupt_frames += 1;
                            st.counters.corrupt_bytes += len as u64;
                            warn!(
                                segment_base = self.seg_base,
                                offset = at,
                                first_seq = header.first_seq,
                                segment_end = end,
                                "skipping a frame whose sequence numbers lie past its segment"
                            );
                        }
                        continue;
                    }
                    if header.first_seq > self.next_seq {
                        let mut st = shared.lock();
                        let path = st
                            .segments
                            .iter()
                            .find(|s| s.header.base_seq == self.seg_base)
                            .map(|s| s.path.display().to_string())
                            .unwrap_or_default();
                        self.lose(
                            &mut st,
                            header.first_seq,
                            &path,
                            "events missing before a frame",
                        );
                    }
                    let start = at + format::FRAME_HEADER_LEN;
                    self.frame = Some(FrameCursor::new(
                        map.clone(),
                        start..start + payload.len(),
                        header,
                        version,
                        self.next_seq..end,
                    ));
                    return Ok(true);
                }
                Decoded::End => return Ok(false),
                damage => {
                    // Bad bytes inside the readable part of a segment: skip
                    // to the next valid frame (or the segment's end) and
                    // count what could not be read.
                    let reason = match damage {
                        Decoded::Damaged(d) => d.to_string(),
                        _ => "segment ends inside a frame".to_string(),
                    };
                    // Resync to the very next valid frame of this segment,
                    // not the next one starting at or after `next_seq`: the
                    // reader may stand inside a later intact frame (after a
                    // restart or a rewind), which must not be skipped.
                    let resume =
                        format::resync(&map, at + 1, self.seg_base, version).unwrap_or(map.len());
                    let mut st = shared.lock();
                    let key = (self.seg_base, at as u64);
                    if st.damage_seen.insert(key) {
                        st.counters.corrupt_frames += 1;
                        st.counters.corrupt_bytes += (resume - at) as u64;
                        let path = st
                            .index_of(self.seg_base)
                            .map(|i| st.segments[i].path.display().to_string());
                        warn!(segment = path.unwrap_or_default(), offset = at, %reason, sealed,
                            skipped_bytes = resume - at, "skipping damaged data in the log");
                    }
                    self.offset = resume as u64;
                }
            }
        }
    }

    /// Follows evictions and deletions: a reader whose segment is gone moves
    /// to the segment that now holds its position.
    /// Gives back the pages of `map` (the current segment's) that this
    /// reader has passed, every [`RELEASE_STEP`] bytes. A page of a file
    /// mapping stays in the process's resident set once touched, until the
    /// map is dropped; a sealed segment's map lives until every reader has
    /// left it, so without this, reading a 64 MiB segment would add 64 MiB to
    /// RSS. The data stays in the page cache: a page touched again (by a
    /// slower consumer sharing the map, or by a sink decoding an event it
    /// read ahead) is mapped back in by a minor fault. The whole passed range
    /// is given back each time, not only the last step, so pages faulted
    /// back in that way do not stay resident either; the last
    /// [`RELEASE_LAG`] bytes are kept, as what a sink has read but not yet
    /// decoded is mostly there.
    fn release_behind(&mut self, map: &Bytes, at: usize) {
        if self.released.0 != self.seg_base {
            self.released = (self.seg_base, 0);
        }
        let page = page_size();
        let end = (at.min(map.len()).saturating_sub(RELEASE_LAG) / page) * page;
        if end < self.released.1 + RELEASE_STEP || !(map.as_ptr() as usize).is_multiple_of(page) {
            return;
        }
        // SAFETY: `[0, end)` lies inside `map` (end <= map.len()), a live
        // read-only MAP_SHARED mapping of a segment file
        // (`segment::map_file`), starting on a page boundary (checked).
        // MADV_DONTNEED on a shared file mapping only drops this process's
        // page-table entries for the range: no memory is freed, the mapping
        // stays valid, and the next access faults the same bytes back in
        // from the file, whose contents below `readable_len` never change.
        // Every `Bytes` slice of the map therefore keeps reading what it
        // read before.
        let rc =
            unsafe { libc::madvise(map.as_ptr() as *mut libc::c_void, end, libc::MADV_DONTNEED) };
        if rc != 0 {
            // Advisory only: the pages stay resident until the map goes.
            warn!(error = %std::io::Error::last_os_error(), "madvise(MADV_DONTNEED) on a segment map failed");
        }
        self.released.1 = end;
    }

    fn reposition(&mut self, st: &mut State) {
        let floor = st.floor();
        if self.next_seq < floor {
            // Eviction already counted these events for this consumer.
            self.next_seq = floor;
            self.seg_base = u64::MAX;
            self.frame = None;
        }
        if st.index_of(self.seg_base).is_none() {
            let i = st.index_containing(self.next_seq);
            self.seg_base = st.segments[i].header.base_seq;
            self.offset = SEGMENT_HEADER_LEN as u64;
        }
    }

    /// A block of the current frame whose body cannot be read (its CRC held,
    /// so the bytes were written this way): counted like a damaged frame,
    /// its events lost, the reader goes on with the next block.
    fn damaged_block(&mut self, to: u64, offset: usize, bytes: usize, reason: &str) {
        let shared = self.log.shared().clone();
        let mut st = shared.lock();
        let path = st
            .index_of(self.seg_base)
            .map(|i| st.segments[i].path.display().to_string())
            .unwrap_or_default();
        if st.damage_seen.insert((self.seg_base, offset as u64)) {
            st.counters.corrupt_frames += 1;
            st.counters.corrupt_bytes += bytes as u64;
            warn!(segment = %path, offset, %reason, skipped_bytes = bytes,
                "skipping a block of the log that cannot be read");
        }
        if to > self.next_seq {
            self.lose(&mut st, to, &path, "events in a damaged block");
        }
    }

    /// Skips this consumer forward to `to`, counting the skipped events as lost.
    fn lose(&mut self, st: &mut State, to: u64, segment: &str, what: &str) {
        let n = to - self.next_seq;
        if let Some(c) = st.consumers.get_mut(&self.name) {
            // Count each loss once per consumer, even if the reader rewinds
            // or the process restarts before the consumer commits past it.
            if c.lost_through < to {
                let counted_from = c.lost_through.max(self.next_seq);
                c.add_lost(LossReason::Corrupt, to - counted_from);
                c.lost_through = to;
            }
            // Counted: eviction must not count these again.
            c.finish_range(self.next_seq, to);
            c.read_next = c.read_next.max(to);
        }
        warn!(consumer = %self.name, %segment, from = self.next_seq, to, events = n, "{what}: they cannot be delivered");
        self.next_seq = to;
    }
}
