/*!
The segment log: holdfast's durable, bounded, append-only store.

Sources append batches of opaque events; each event gets the next 64-bit
sequence number. Consumers (one per sink) read in sequence order from their
own cursor and commit "everything below N is done". Nothing here knows what
an event means.

```no_run
# async fn demo() -> Result<(), holdfast::seglog::LogError> {
use holdfast::seglog::{Batch, Log, LogOptions, StartAt};

let log = Log::open("/var/lib/holdfast/log", LogOptions::default())?;
let mut batch = Batch::new();
batch.push(b"first event");
batch.push(b"second event");
let range = log.append(batch).await?; // durable under the fsync policy

let mut consumer = log.consumer("my-sink", StartAt::Oldest)?;
let events = consumer.read_wait(1000, 1 << 20).await?;
consumer.commit(events.last().unwrap().seq + 1)?;
log.close().await?;
# Ok(()) }
```

# On disk

A log directory holds:

* `LOCK` — held with `flock` by the process that has the log open; a second
  process fails with [`LogError::Locked`].
* `NNNNNNNNNNNNNNNNNNNN.seg` — segments, named by the sequence number of
  their first event (20 digits, so they sort). The newest is the *active*
  segment; the others are *sealed* and never change again.
* `cursors.0`, `cursors.1` — every consumer's committed position, with a
  generation number and a CRC (see `cursor.rs` for which slot is written
  when).

A segment is a 32-byte header followed by frames; a frame is one group
commit: a 28-byte header (length, CRC-32 of everything after the CRC, first
sequence number, event count, append time) and one *block* per append in
the group (format 2): a 16-byte block header, then the batch's context and
its events (each a u32 length and the bytes), compressed together with
[`LogOptions::compression`] in the appending task. Segments of format 1
(frames holding the events directly) are still read; new segments are
always format 2. The exact layout is in `format.rs`, `block.rs` and
`docs/on-disk-format.md`. A frame never spans segments.

# Invariants

1. An append returns its [`SeqRange`] only once its frame is written and,
   under [`FsyncPolicy::Always`], `fdatasync`ed; many concurrent appends share
   one write and one sync (group commit). Creating or deleting a segment is
   followed by a directory sync (except under `Never`).
2. Sequence numbers increase by one per event, across segments and restarts,
   and are never reused.
3. Consumers see only acknowledged events; a commit can never point past them.
4. No frame whose CRC fails is ever handed to a consumer. On open, a torn or
   partial last frame of the active segment is truncated (and logged with the
   segment and offset); damage followed by valid frames, anywhere, is skipped
   and counted, and the events it held are counted as lost for each consumer.
5. A sealed segment is deleted once every consumer has committed past it
   and no retention [`Hold`] is at or before its end (at `max_bytes`, holds
   give way rather than make an append wait), or by eviction: `max_age` always applies, `max_bytes` applies under
   [`WhenFull::DropOldest`]; the active segment is never evicted. Every event
   a consumer had not finished when it was evicted is counted once per
   consumer and [`LossReason`], read or not: consumers tell the log through
   a [`Ledger`] what they finished out of order and what is on the wire; an
   evicted event on the wire is counted if its answer asks for a retry, and
   if the process ends first it is counted as in doubt at the next open. The
   consumer's commit moves past the evicted segment, and the cursors reach
   disk before the segment file is deleted.
6. Opening reads only the headers of sealed segments and scans the active one,
   so its cost depends on the active segment's size, not the log's.

# Full disks and power cuts

A write that runs out of space (or fails otherwise) is never acknowledged:
its appenders get [`LogError::Io`] (kind `StorageFull` for `ENOSPC`), the
active segment is cut back to its last acknowledged frame before anything
else is written, and the next append simply tries again — so the log
carries on by itself once space returns. A failed `fdatasync` is handled
the same way. A segment that cannot be created (no inode, no room for its
header, a failed directory sync) fails the appends that needed it, and from
then on no frame goes into the old segment until a new one exists: the
failed attempt may leave the new file behind, and after a power cut
recovery would take it for the end of the log. A file left that way is
emptied and reused by the next attempt.

# The file-system seam

Every operation that changes durable state — writes, `fdatasync`, directory
syncs, creating, removing and resizing files — goes through `io.rs`. A test
may put an [`IoHook`] in [`LogOptions::io_hook`] to watch each one and to
fail it or shorten a write; without a hook the seam is one branch per group
commit. `tests/seglog_enospc.rs` injects full disks through it, and
`tests/seglog_powercut.rs` records what each sync made durable to rebuild the
directory as a power cut could leave it, checking that under
[`FsyncPolicy::Always`] nothing acknowledged is lost.

# Limits

* One append is at most one block of one frame: stored (compressed), it
  must fit in one segment (`segment_bytes` − 60 bytes); uncompressed, its
  context and events in 64 MiB.
* `max_bytes` must be at least two segments.
* A commit writes the cursor file itself, without syncing it, unless the
  writer thread is storing the cursors at that moment (then the writer
  writes it right after); the writer syncs the file every
  `cursor_sync_interval` and at [`Log::close`]. A kill -9 replays no
  committed event (only what a sink had in flight); a power cut at most
  `cursor_sync_interval` of progress (at-least-once delivery either way).
*/

mod active;
pub mod block;
mod consumer;
mod cursor;
mod cursor_store;
mod error;
pub mod format;
mod frame_cursor;
pub mod hold;
mod io;
mod janitor;
mod ledger;
mod options;
mod recovery;
mod request;
mod retention;
pub(crate) mod segment;
mod state;
mod stats;
mod writer;

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::{oneshot, watch};

pub use block::Compression;
pub use consumer::{Consumer, StartAt};
pub use error::{LogError, Result};
pub use frame_cursor::Event;
pub use hold::Hold;
/// The file-system seam, for the state files outside the log
/// (`src/state_file.rs`).
pub use io::Fs;
/// Creating state under `data_dir` private whatever the umask (`io.rs`).
pub use io::{
    create_private_dir_all, private_file, sync_dir, tighten_tree, write_private, PRIVATE_DIR,
    PRIVATE_FILE,
};
#[doc(hidden)]
pub use io::{IoHook, IoOp};
pub use ledger::Ledger;
pub use options::{FsyncPolicy, LogOptions, WhenFull};
pub use state::{Counters, LossReason, Outcome, FSYNC_BUCKETS_SECONDS};
pub use stats::{ConsumerStats, LogStats, SegmentStats};

use cursor::CursorSlots;
use format::{EVENT_HEADER_LEN, FRAME_HEADER_LEN, MAX_FRAME_PAYLOAD, SEGMENT_HEADER_LEN};
use state::Shared;
use writer::{AppendReq, Msg, Reply, Writer};

/// A half-open range of sequence numbers, `start..end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqRange {
    pub start: u64,
    pub end: u64,
}

impl SeqRange {
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

/// Events to append together. Each [`push`](Self::push) frames the event into
/// one buffer in the caller's task, so the writer thread only has to hand the
/// buffer to the kernel. A clone copies the events (a source that must
/// offer the same batch again after a refusal keeps one).
#[derive(Debug, Default, Clone)]
pub struct Batch {
    buf: BytesMut,
    /// Events framed elsewhere and shared ([`Batch::from_framed`]); when
    /// set, `buf` is empty.
    framed: Option<Bytes>,
    count: u32,
    /// What every event of the batch shares, stored once with them.
    context: Bytes,
}

impl Batch {
    pub fn new() -> Self {
        Self::default()
    }

    /// A batch with room for `bytes` of event data without reallocating.
    pub fn with_capacity(bytes: usize) -> Self {
        Batch {
            buf: BytesMut::with_capacity(bytes),
            framed: None,
            count: 0,
            context: Bytes::new(),
        }
    }

    /// A batch of `count` events already framed as [`push`](Self::push)
    /// frames them (each a u32 little-endian length, then its bytes),
    /// appended without copying them: for a source that keeps its buffer
    /// to append it again if the log refuses it. `None` unless `framed`
    /// holds exactly `count` whole events.
    pub fn from_framed(framed: Bytes, count: u32) -> Option<Batch> {
        let mut at = 0usize;
        for _ in 0..count {
            let len = framed.get(at..at + EVENT_HEADER_LEN)?;
            let len = u32::from_le_bytes(len.try_into().ok()?) as usize;
            at = at.checked_add(EVENT_HEADER_LEN + len)?;
        }
        (at == framed.len()).then_some(Batch {
            buf: BytesMut::new(),
            framed: Some(framed),
            count,
            context: Bytes::new(),
        })
    }

    /// [`from_framed`](Self::from_framed) without the walk over every
    /// event's length: for the crate's own sources, whose framing is
    /// tested, the walk is a dependent load per event through a buffer
    /// larger than the cache (some 2% of the file source's CPU). Checked in
    /// debug builds; a wrong count written anyway reads back as a damaged
    /// block, never as other events.
    pub(crate) fn from_framed_trusted(framed: Bytes, count: u32) -> Batch {
        debug_assert!(Batch::from_framed(framed.clone(), count).is_some());
        Batch {
            buf: BytesMut::new(),
            framed: Some(framed),
            count,
            context: Bytes::new(),
        }
    }

    /// Bytes every event of this batch shares (what they have in common,
    /// encoded however the embedder likes): written once per batch and
    /// handed back with each of its events as [`Event::context`]. At most
    /// 16 MiB.
    pub fn set_context(&mut self, context: Bytes) {
        self.context = context;
    }

    /// [`set_context`](Self::set_context), builder style.
    pub fn with_context(mut self, context: Bytes) -> Batch {
        self.context = context;
        self
    }

    pub fn push(&mut self, event: &[u8]) {
        if let Some(f) = self.framed.take() {
            self.buf = BytesMut::from(&f[..]);
        }
        self.buf.reserve(EVENT_HEADER_LEN + event.len());
        self.buf.put_u32_le(event.len() as u32);
        self.buf.put_slice(event);
        self.count += 1;
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes this batch occupies in a frame's payload.
    pub fn encoded_len(&self) -> usize {
        self.framed.as_ref().map_or(self.buf.len(), |f| f.len())
    }

    /// The batch as a format-2 block, compressed.
    fn into_block(self, compression: Compression) -> block::Encoded {
        let framed = match self.framed {
            Some(f) => f,
            None => self.buf.freeze(),
        };
        block::encode(&self.context, framed, self.count, compression)
    }
}

/// A handle to an open log; cheap to clone. The log stays open while any
/// handle or consumer exists. Dropping the last one without [`close`](Self::close)
/// stops the writer as a crash would: every acknowledged append is on disk
/// (per the fsync policy) but cursor progress since the last sync is not.
#[derive(Clone)]
pub struct Log {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    /// Requests to the writer thread; the thread stops on `Close`, `Stop`
    /// or when every sender is gone.
    tx: Sender<Msg>,
    /// Joined on drop so that the directory lock is free once the last
    /// handle is gone.
    thread: Mutex<Option<JoinHandle<()>>>,
    read_only: bool,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
    }
}

impl Log {
    /// Opens (creating if needed) the log in `dir`, recovering from whatever
    /// state the last process left. Blocking: call it from `spawn_blocking`
    /// in async code.
    pub fn open(dir: impl AsRef<Path>, opts: LogOptions) -> Result<Log> {
        Self::open_with_holds(dir, opts, &[])
    }

    /// [`open`](Self::open), with the named retention [holds](hold) in
    /// place at the oldest event before the writer can delete anything.
    pub fn open_with_holds(dir: impl AsRef<Path>, opts: LogOptions, holds: &[&str]) -> Result<Log> {
        opts.validate().map_err(LogError::Options)?;
        let dir = dir.as_ref().to_path_buf();
        let sync = opts.fsync.syncs_directory();
        let fs = io::Fs::new(opts.io_hook.clone());
        let mut rec = recovery::recover(&dir, recovery::Mode::ReadWrite { sync }, &fs)?;
        let floor = rec.state.floor();
        for h in holds {
            rec.state.holds.insert(h.to_string(), floor);
        }
        let Some(active) = rec.active else {
            return Err(LogError::Closed);
        };
        let next_seq = rec.state.next_seq;
        let (durable, _) = watch::channel(next_seq);
        let cursor_slots = Mutex::new(CursorSlots::recovered(rec.cursor_generation, &rec.state));
        let shared = Arc::new(Shared {
            dir,
            opts,
            fs,
            state: Mutex::new(rec.state),
            cursor_slots,
            durable,
            maintain_queued: AtomicBool::new(false),
            cursors_moved: AtomicBool::new(false),
            _lock: rec.lock,
        });
        let (tx, rx) = mpsc::channel();
        let thread = Writer::new(shared.clone(), rx, active).spawn()?;
        Ok(Log {
            inner: Arc::new(Inner {
                shared,
                tx,
                thread: Mutex::new(Some(thread)),
                read_only: false,
            }),
        })
    }

    /// Opens a read-only view of the log in `dir` for operator tools: takes
    /// no lock and changes nothing, so it works beside a running daemon. The
    /// view is a snapshot of the moment it was opened. Appends, consumer
    /// registration and commits fail with [`LogError::ReadOnly`]; use
    /// [`reader`](Self::reader) and [`stats`](Self::stats).
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<Log> {
        let dir = dir.as_ref().to_path_buf();
        let rec = recovery::recover(&dir, recovery::Mode::ReadOnly, &io::Fs::default())?;
        let (durable, _) = watch::channel(rec.state.next_seq);
        let mut state = rec.state;
        state.closed = true;
        let shared = Arc::new(Shared {
            dir,
            opts: LogOptions::default(),
            fs: io::Fs::default(),
            state: Mutex::new(state),
            cursor_slots: Mutex::default(),
            durable,
            maintain_queued: AtomicBool::new(false),
            cursors_moved: AtomicBool::new(false),
            _lock: None,
        });
        // No writer: every request finds the channel closed.
        let (tx, _) = mpsc::channel();
        Ok(Log {
            inner: Arc::new(Inner {
                shared,
                tx,
                thread: Mutex::new(None),
                read_only: true,
            }),
        })
    }

    /// A reader without a cursor, starting at `seq` (or the oldest event if
    /// that was evicted): for `holdfast dump` and debugging. It cannot commit.
    pub fn reader(&self, seq: u64) -> Consumer {
        Consumer::unregistered(self.clone(), seq)
    }

    pub fn dir(&self) -> &Path {
        &self.inner.shared.dir
    }

    pub fn options(&self) -> &LogOptions {
        &self.inner.shared.opts
    }

    /// One past the newest acknowledged event.
    pub fn next_seq(&self) -> u64 {
        self.inner.shared.lock().next_seq
    }

    /// Appends a batch; returns the sequence numbers it was given once it is
    /// durable under the fsync policy. Under `when_full = "block"` waits up
    /// to the configured `append_timeout` for space.
    pub async fn append(&self, batch: Batch) -> Result<SeqRange> {
        self.append_timeout(batch, self.inner.shared.opts.append_timeout)
            .await
    }

    /// [`append`](Self::append) with the caller's own wait for space; zero
    /// fails at once with [`LogError::Full`] when there is none.
    pub async fn append_timeout(&self, batch: Batch, wait: Duration) -> Result<SeqRange> {
        let rx = self.submit(batch, wait)?;
        rx.await.unwrap_or(Err(LogError::Closed))
    }

    /// [`append`](Self::append) for threads outside an async runtime.
    pub fn append_blocking(&self, batch: Batch) -> Result<SeqRange> {
        let rx = self.submit(batch, self.inner.shared.opts.append_timeout)?;
        rx.blocking_recv().unwrap_or(Err(LogError::Closed))
    }

    fn submit(&self, batch: Batch, wait: Duration) -> Result<oneshot::Receiver<Result<SeqRange>>> {
        self.writable()?;
        if batch.is_empty() {
            return Err(LogError::Empty);
        }
        let opts = &self.inner.shared.opts;
        let max = (opts.segment_bytes as usize - SEGMENT_HEADER_LEN - FRAME_HEADER_LEN)
            .min(MAX_FRAME_PAYLOAD);
        let raw = block::BLOCK_HEADER_LEN + 4 + batch.context.len() + batch.encoded_len();
        if raw - block::BLOCK_HEADER_LEN > block::MAX_BLOCK_RAW {
            return Err(LogError::TooLarge {
                bytes: raw as u64,
                max: block::MAX_BLOCK_RAW as u64,
            });
        }
        let count = batch.count;
        let event_bytes = (batch.encoded_len() - EVENT_HEADER_LEN * count as usize) as u64;
        let block = batch.into_block(opts.compression);
        if block.stored_len() > max {
            return Err(LogError::TooLarge {
                bytes: block.stored_len() as u64,
                max: max as u64,
            });
        }
        let (reply, rx) = oneshot::channel();
        let req = AppendReq {
            block,
            event_bytes,
            count,
            deadline: Instant::now() + wait,
            reply,
        };
        self.inner
            .tx
            .send(Msg::Append(req))
            .map_err(|_| LogError::Closed)?;
        Ok(rx)
    }

    /// Opens the named consumer, registering it at `start` if it is new.
    /// Registration is persisted at once, so that the log keeps the
    /// consumer's unread events from then on.
    pub fn consumer(&self, name: &str, start: StartAt) -> Result<Consumer> {
        if name.is_empty()
            || name.len() > 64
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return Err(LogError::BadConsumerName { name: name.into() });
        }
        self.writable()?;
        let (at, new) = {
            let mut st = self.inner.shared.lock();
            let at = match start {
                StartAt::Oldest => st.floor(),
                StartAt::Latest => st.next_seq,
            };
            let floor = st.floor();
            match st.consumers.get_mut(name) {
                Some(c) => {
                    c.reset_claims();
                    (c.committed.max(floor), false)
                }
                None => {
                    st.consumers
                        .insert(name.to_string(), state::ConsumerState::at(at));
                    (at, true)
                }
            }
        };
        if new {
            self.sync_cursors_blocking()?;
        }
        Ok(Consumer::new(self.clone(), name.to_string(), at))
    }

    /// Forgets a consumer: its cursor no longer holds back deletion.
    pub fn remove_consumer(&self, name: &str) -> Result<()> {
        let removed = self.inner.shared.lock().consumers.remove(name).is_some();
        if removed {
            self.sync_cursors_blocking()?;
            self.send(Msg::Maintain);
        }
        Ok(())
    }

    /// Names of the registered consumers.
    pub fn consumers(&self) -> Vec<String> {
        self.inner.shared.lock().consumers.keys().cloned().collect()
    }

    /// Writes every consumer's committed position to disk now.
    pub async fn sync_cursors(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .tx
            .send(Msg::PersistCursors(Reply::Async(tx)))
            .map_err(|_| LogError::Closed)?;
        rx.await.unwrap_or(Err(LogError::Closed))
    }

    /// [`sync_cursors`](Self::sync_cursors) for threads outside an async
    /// runtime (or rare calls inside one: it blocks the calling thread).
    pub fn sync_cursors_blocking(&self) -> Result<()> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.inner
            .tx
            .send(Msg::PersistCursors(Reply::Blocking(tx)))
            .map_err(|_| LogError::Closed)?;
        rx.recv().unwrap_or(Err(LogError::Closed))
    }

    /// Segments, bytes, positions, per-consumer lag and the counters.
    pub fn stats(&self) -> LogStats {
        stats::collect(&mut self.inner.shared.lock(), !self.inner.read_only)
    }

    /// Writes what is queued, syncs, persists every cursor and stops the
    /// writer. Appends after this fail with [`LogError::Closed`].
    pub async fn close(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        if self.inner.tx.send(Msg::Close(Reply::Async(tx))).is_err() {
            return Ok(());
        }
        rx.await.unwrap_or(Ok(()))
    }

    /// [`close`](Self::close) for threads outside an async runtime.
    pub fn close_blocking(&self) -> Result<()> {
        let (tx, rx) = mpsc::sync_channel(1);
        if self.inner.tx.send(Msg::Close(Reply::Blocking(tx))).is_err() {
            return Ok(());
        }
        rx.recv().unwrap_or(Ok(()))
    }

    fn writable(&self) -> Result<()> {
        if self.inner.read_only {
            return Err(LogError::ReadOnly);
        }
        Ok(())
    }

    pub(crate) fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    pub(crate) fn send(&self, msg: Msg) {
        let _ = self.inner.tx.send(msg);
    }

    /// Asks the writer for a maintenance round (store cursors, delete what
    /// is no longer needed); however many ask before it runs, one message.
    pub(crate) fn wake_writer(&self) {
        if !self
            .inner
            .shared
            .maintain_queued
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            self.send(Msg::Maintain);
        }
    }
}
