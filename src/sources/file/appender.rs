//! The appender: the async half of a `file` source. It takes the tailer's
//! chunks in order, appends them with several appends in flight (the log's
//! group commit shares one sync among them), applies each chunk's positions
//! only once it and every chunk before it are acknowledged, and writes the
//! checkpoint from those acknowledged positions.
//!
//! Order matters twice. Appends are *submitted* in chunk order (each append
//! is polled once as soon as it is made, which queues it at the log's
//! writer), so a file's lines reach the log in file order. Positions are
//! *applied* in chunk order, so a checkpoint never covers a chunk whose
//! predecessor is not yet durable.
//!
//! When the log is full (`LogError::Full` under `when_full = "block"`) or
//! the disk under it is (an I/O error such as `ENOSPC`: nothing was
//! acknowledged, and the log has cut back what it half wrote), the refused
//! chunk is kept and appended again after a backoff; meanwhile no new chunk
//! is taken, the channel from the tailer fills, and the tailer stops
//! reading. The source does not fail and restart: it resumes by itself as
//! soon as an append succeeds again. Every chunk is kept (in memory, bounded
//! by the number in flight) until its append is acknowledged. Chunks already
//! in flight behind the refused one may still land (a smaller one fits where
//! it did not): the checkpoint then records their lines as spans *ahead* of
//! the streams' offsets, so that a restart before the refused chunk lands
//! reads its lines again but not theirs (see `recovery.rs`).
//!
//! Checkpoints come in two strengths. After acknowledged appends, at most
//! every [`RECENT_INTERVAL`], the appender writes `checkpoint.recent` without
//! syncing it (a kill -9
//! keeps the page cache, so it survives a crash of the process; a power cut
//! may tear or undo it, and a torn one is ignored). Every
//! [`CHECKPOINT_INTERVAL`], at a new file and when stopping it writes the
//! durable `checkpoint.json` (`checkpoint.rs`: synced, renamed, directory
//! synced), and only then moves the source's retention hold on the log
//! (`seglog/hold.rs`) to that checkpoint's `log_seq`: the log never deletes
//! a segment that the durable checkpoint's recovery would still read. On
//! start the newer of the two checkpoints is used (`load_recent`); either
//! is correct, the recent one only makes the scan of the log shorter.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::checkpoint::{self, Checkpoint, Record};
use super::discovery::Wake;
use super::tailer::protocol::{Chunk, Counters, StreamId, Update};
use crate::append_retry::Refusal;
use crate::backoff::Backoff;
use crate::seglog::{Batch, Fs, Hold, Log, LogError, SeqRange};
use crate::state_file;

/// Appends in flight at once.
pub const MAX_IN_FLIGHT: usize = 4;
/// How often acknowledged progress is checkpointed durably (it is also
/// written when a new stream appears and when the source stops). Between
/// two durable checkpoints the log itself holds the progress (see
/// `recovery.rs`), kept by the source's hold; `checkpoint.recent` holds it
/// too, without a sync.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
/// The checkpoint written after acknowledged appends, unsynced.
pub const RECENT_FILE: &str = "checkpoint.recent";
/// The least time between two writes of `checkpoint.recent`. The appender
/// waits for each write, and while it does no chunk is submitted: written
/// after every append group it made the groups smaller and cost the whole
/// pipeline about 12% of its throughput (`benches/e2e`). It only shortens
/// the scan of the log after a crash (the hold keeps what that scan reads),
/// so a tenth of a second of staleness costs a few more events scanned.
const RECENT_INTERVAL: Duration = Duration::from_millis(100);
const RECENT_TMP: &str = "checkpoint.recent.tmp";
/// After a stop, how long the tailer has to send what it holds and close
/// the channel. A tailer stuck in a system call never does: past this the
/// channel is closed from this end, so the stop stays prompt (its unsent
/// lines are read again at the next start).
const TAILER_STOP_GRACE: Duration = Duration::from_secs(5);
/// A refused append (or a failed barrier checkpoint) is tried again after
/// 50 ms, doubling up to 2 s.
const RETRY_BACKOFF: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));

type AppendFuture = Pin<Box<dyn Future<Output = Result<SeqRange, LogError>> + Send>>;

enum State {
    InFlight(AppendFuture),
    Done,
    /// Refused because the log or the disk was full: to be appended again.
    Refused,
}

/// Whether an append refused with `e` is tried again later rather than
/// ending the source: the log is full (`block`), or writing to the disk
/// failed (full, or failing for now). Nothing of a refused append was
/// acknowledged. Anything else (the log closed, a chunk too large) is not
/// going to get better by waiting: the source ends (a chunk never exceeds
/// what one append takes, so too large is a bug, not input).
fn retryable(e: &LogError) -> bool {
    Refusal::of(e).is_retryable()
}

struct Pending {
    /// The chunk's positions and counts; its events have moved to `framed`.
    chunk: Chunk,
    /// The chunk's events and their context, shared with the append in
    /// flight rather than copied for it, and kept to append again if the
    /// log refuses them.
    framed: Bytes,
    context: Bytes,
    payload_bytes: u64,
    /// The log's end when the chunk was first submitted: a lower bound for
    /// the sequence numbers it gets, whenever it lands.
    floor: u64,
    state: State,
}

pub struct Appender {
    pub name: String,
    pub log: Log,
    pub dir: PathBuf,
    pub records: BTreeMap<StreamId, Record>,
    pub counters: Counters,
    /// Kept by the log at the last durable checkpoint's `log_seq`.
    hold: Hold,
    queue: VecDeque<Pending>,
    dirty: bool,
    /// Progress not yet in `checkpoint.recent`.
    recent_dirty: bool,
    last_recent: Instant,
    last_checkpoint: Instant,
    backoff: Backoff,
    full_since: Option<Instant>,
}

enum Event {
    Stop,
    Acked(Result<SeqRange, LogError>),
    Received(Option<Update>),
    Retry,
    Tick,
    /// The tailer did not close the channel within [`TAILER_STOP_GRACE`].
    TailerLate,
}

/// Submits an append and polls it once, so it is queued at the writer now.
/// The chunk was framed by the tailer, which counted its events: no walk
/// over them again (see [`Batch::from_framed_trusted`]).
async fn submit(
    log: &Log,
    framed: &Bytes,
    context: &Bytes,
    events: u32,
) -> Result<State, LogError> {
    let batch = Batch::from_framed_trusted(framed.clone(), events).with_context(context.clone());
    let log = log.clone();
    let mut fut: AppendFuture = Box::pin(async move { log.append(batch).await });
    match std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await {
        Poll::Pending => Ok(State::InFlight(fut)),
        Poll::Ready(Ok(_)) => Ok(State::Done),
        Poll::Ready(Err(e)) => Err(e),
    }
}

impl Appender {
    pub fn new(
        name: String,
        log: Log,
        dir: PathBuf,
        records: BTreeMap<StreamId, Record>,
        counters: Counters,
        hold: Hold,
    ) -> Appender {
        Appender {
            name,
            log,
            dir,
            records,
            counters,
            hold,
            queue: VecDeque::new(),
            dirty: true,
            recent_dirty: false,
            last_recent: Instant::now(),
            last_checkpoint: Instant::now(),
            backoff: RETRY_BACKOFF,
            full_since: None,
        }
    }

    /// Runs until the tailer is done (after `stop`) and everything taken is
    /// appended, or until an error. Always leaves nothing in flight.
    pub async fn run(
        mut self,
        mut rx: mpsc::Receiver<Update>,
        stop: CancellationToken,
        wake: Arc<Wake>,
    ) -> anyhow::Result<()> {
        let r = self.main(&mut rx, &stop, &wake).await;
        wake.stop();
        // Whatever happened, nothing may stay queued at the log's writer
        // unseen: a restart reads the log to find where it stopped.
        self.settle().await;
        let end = self.checkpoint().await;
        match (r, end) {
            (Err(e), _) => Err(e),
            (Ok(()), Err(e)) => Err(e),
            (Ok(()), Ok(())) => Ok(()),
        }
    }

    async fn main(
        &mut self,
        rx: &mut mpsc::Receiver<Update>,
        stop: &CancellationToken,
        wake: &Wake,
    ) -> anyhow::Result<()> {
        let mut stopping = false;
        let mut open = true;
        // When the tailer must have closed the channel by, once stopping.
        let mut tailer_due: Option<tokio::time::Instant> = None;
        loop {
            self.apply_done();
            if !open && self.queue.is_empty() {
                return Ok(());
            }
            let blocked = matches!(
                self.queue.front(),
                Some(Pending {
                    state: State::Refused,
                    ..
                })
            );
            if stopping && blocked {
                info!(source = %self.name, "stopping while appends are refused: unappended lines will be read again at the next start");
                return Ok(());
            }
            if self.dirty && self.last_checkpoint.elapsed() >= CHECKPOINT_INTERVAL {
                if let Err(e) = self.checkpoint().await {
                    // Not fatal: the log holds the progress meanwhile.
                    error!(source = %self.name, error = format!("{e:#}"), "writing the checkpoint failed; will retry");
                }
            } else if self.recent_dirty && self.last_recent.elapsed() >= RECENT_INTERVAL {
                self.checkpoint_recent().await;
            }
            let can_take = open && !blocked && self.queue.len() < MAX_IN_FLIGHT;
            let tick = CHECKPOINT_INTERVAL.saturating_sub(self.last_checkpoint.elapsed());
            let backoff = self.backoff.current();
            let dirty = self.dirty;
            let front = match self.queue.front_mut() {
                Some(Pending {
                    state: State::InFlight(f),
                    ..
                }) => Some(f),
                _ => None,
            };
            let in_flight = front.is_some();
            let late = tailer_due.filter(|_| open);
            let ev = tokio::select! {
                biased;
                _ = stop.cancelled(), if !stopping => Event::Stop,
                r = async { front.unwrap().as_mut().await }, if in_flight => Event::Acked(r),
                m = rx.recv(), if can_take => Event::Received(m),
                _ = tokio::time::sleep(backoff), if blocked => Event::Retry,
                _ = tokio::time::sleep(tick), if dirty => Event::Tick,
                _ = tokio::time::sleep_until(late.unwrap_or_else(tokio::time::Instant::now)), if late.is_some() => Event::TailerLate,
            };
            match ev {
                Event::Stop => {
                    stopping = true;
                    tailer_due = Some(tokio::time::Instant::now() + TAILER_STOP_GRACE);
                    wake.stop();
                }
                Event::TailerLate => {
                    warn!(source = %self.name, grace_s = TAILER_STOP_GRACE.as_secs(),
                        "the tailer thread did not finish after the stop (stuck in a system call?); stopping without it, its unsent lines are read again at the next start");
                    rx.close();
                    tailer_due = None;
                }
                Event::Acked(r) => {
                    let p = self
                        .queue
                        .front_mut()
                        .expect("an acknowledged append is queued");
                    match r {
                        Ok(_) => {
                            p.state = State::Done;
                            self.resumed();
                        }
                        Err(e) if retryable(&e) => {
                            p.state = State::Refused;
                            self.paused(&e);
                        }
                        Err(e) => {
                            return Err(e).with_context(|| {
                                format!("source {}: appending to the log", self.name)
                            })
                        }
                    }
                }
                Event::Received(None) => open = false,
                Event::Received(Some(Update::Records {
                    upserts,
                    forget,
                    barrier,
                })) => {
                    for (id, r) in upserts {
                        match self.records.get_mut(&id) {
                            // The acknowledged offset moves only with acks,
                            // and the spans ahead of it go only as it
                            // passes them.
                            Some(old) => {
                                *old = Record {
                                    offset: old.offset,
                                    ahead: std::mem::take(&mut old.ahead),
                                    ..r
                                }
                            }
                            None => {
                                self.records.insert(id, r);
                            }
                        }
                    }
                    for id in forget {
                        self.records.remove(&id);
                    }
                    self.dirty = true;
                    self.recent_dirty = true;
                    if barrier {
                        self.checkpoint_barrier(stop).await?;
                    }
                }
                Event::Received(Some(Update::Chunk(mut chunk))) => {
                    let floor = self.log.next_seq();
                    let payload_bytes = chunk.payload_bytes();
                    let framed = crate::pool::CHUNKS.freeze(std::mem::take(&mut chunk.data));
                    let context = std::mem::take(&mut chunk.context);
                    let state = if chunk.events == 0 {
                        State::Done
                    } else {
                        self.submit(&framed, &context, chunk.events).await?
                    };
                    self.queue.push_back(Pending {
                        chunk,
                        framed,
                        context,
                        payload_bytes,
                        floor,
                        state,
                    });
                }
                Event::Retry => {
                    self.backoff.grow();
                    let p = self.queue.front().expect("a refused append is queued");
                    let (framed, context, events) =
                        (p.framed.clone(), p.context.clone(), p.chunk.events);
                    let state = self.submit(&framed, &context, events).await?;
                    self.queue
                        .front_mut()
                        .expect("a refused append is queued")
                        .state = state;
                }
                Event::Tick => {}
            }
        }
    }

    /// Writes the checkpoint a new file's identity needs before its lines
    /// are appended, retrying while it fails (a full disk) instead of ending
    /// the source; gives up only when the source is stopping.
    async fn checkpoint_barrier(&mut self, stop: &CancellationToken) -> anyhow::Result<()> {
        let mut wait = RETRY_BACKOFF;
        loop {
            let e = match self.checkpoint().await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if stop.is_cancelled() {
                return Err(e).context(
                    "a new file's identity must be checkpointed before its lines are appended",
                );
            }
            if wait.is_first() {
                error!(source = %self.name, error = format!("{e:#}"),
                    "cannot write the checkpoint a new file needs before its lines are appended (is the disk full?); retrying");
            }
            tokio::select! {
                _ = tokio::time::sleep(wait.current()) => {}
                _ = stop.cancelled() => {}
            }
            wait.grow();
        }
    }

    /// Submits a chunk's append; a refusal worth retrying becomes
    /// [`State::Refused`], anything else ends the source.
    async fn submit(
        &mut self,
        framed: &Bytes,
        context: &Bytes,
        events: u32,
    ) -> anyhow::Result<State> {
        match submit(&self.log, framed, context, events).await {
            Ok(State::Done) => {
                self.resumed();
                Ok(State::Done)
            }
            Ok(s) => Ok(s),
            Err(e) if retryable(&e) => {
                self.paused(&e);
                Ok(State::Refused)
            }
            Err(e) => Err(e).with_context(|| format!("source {}: appending to the log", self.name)),
        }
    }

    /// An append was refused: reading pauses until one succeeds.
    fn paused(&mut self, e: &LogError) {
        if self.full_since.is_some() {
            return;
        }
        self.full_since = Some(Instant::now());
        match e {
            LogError::Full { .. } => warn!(source = %self.name,
                "the log is full (when_full = \"block\"): reading paused until a sink frees space"),
            _ => error!(source = %self.name, error = %e,
                "cannot write to the log (is the disk full?): reading paused; the same lines are appended again until it works"),
        }
    }

    /// An append succeeded: if reading was paused, it resumes.
    fn resumed(&mut self) {
        self.backoff.reset();
        if let Some(since) = self.full_since.take() {
            info!(source = %self.name, waited_ms = since.elapsed().as_millis() as u64,
                "appends succeed again; reading resumes");
        }
    }

    /// Applies the chunks acknowledged in order at the front of the queue.
    fn apply_done(&mut self) {
        while let Some(Pending {
            state: State::Done, ..
        }) = self.queue.front()
        {
            let p = self.queue.pop_front().unwrap();
            for (id, pos) in &p.chunk.positions {
                if let Some(r) = self.records.get_mut(id) {
                    r.offset = *pos;
                    r.ahead.retain(|&(_, end)| end > *pos);
                }
            }
            self.dirty |= !p.chunk.positions.is_empty();
            self.recent_dirty |= !p.chunk.positions.is_empty();
            self.counters.events.inc_by(p.chunk.events as u64);
            self.counters.event_bytes.inc_by(p.payload_bytes);
        }
    }

    /// Waits for every append still in flight, applying those acknowledged
    /// in order; the first refused one is dropped (its lines are read
    /// again at the next start), and the lines of those after it that were
    /// acknowledged are kept as spans ahead of the streams' offsets.
    async fn settle(&mut self) {
        for p in self.queue.iter_mut() {
            if let State::InFlight(f) = &mut p.state {
                p.state = match f.as_mut().await {
                    Ok(_) => State::Done,
                    Err(_) => State::Refused,
                };
            }
        }
        self.apply_done();
        for (id, span) in self.landed_ahead() {
            if let Some(r) = self.records.get_mut(&id) {
                add_ahead(&mut r.ahead, span);
            }
        }
        self.queue.clear();
    }

    /// Lines in the log past a chunk that is not: a chunk refused because
    /// the log was full was overtaken by a later one. Their spans go into
    /// the checkpoint (`Record::ahead`), so that the lines are not appended
    /// again after a restart while those of the refused chunk are.
    fn landed_ahead(&self) -> Vec<(StreamId, (u64, u64))> {
        let mut last: HashMap<StreamId, u64> = HashMap::new();
        let mut gap = false;
        let mut out = Vec::new();
        for p in &self.queue {
            let done = matches!(p.state, State::Done);
            gap |= !done;
            for &(id, pos) in &p.chunk.positions {
                // A stream's lines in a chunk start where its previous
                // chunk ended, or at its acknowledged offset.
                let start = *last
                    .entry(id)
                    .or_insert_with(|| self.records.get(&id).map_or(pos, |r| r.offset));
                if gap && done && pos > start {
                    out.push((id, (start, pos)));
                }
                last.insert(id, pos);
            }
        }
        out
    }

    /// A sequence number at or below every line not covered by the
    /// positions in the checkpoint being written.
    fn log_seq(&self) -> u64 {
        self.queue
            .iter()
            .map(|p| p.floor)
            .min()
            .unwrap_or_else(|| self.log.next_seq())
    }

    /// The checkpoint of what is acknowledged now.
    fn current(&self) -> Checkpoint {
        Checkpoint {
            source: self.name.clone(),
            log_seq: self.log_seq(),
            written_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            records: {
                let mut records = self.records.clone();
                for (id, span) in self.landed_ahead() {
                    if let Some(r) = records.get_mut(&id) {
                        add_ahead(&mut r.ahead, span);
                    }
                }
                records.into_values().collect()
            },
        }
    }

    /// Writes the durable checkpoint, then lets the log delete what its
    /// recovery no longer needs.
    async fn checkpoint(&mut self) -> anyhow::Result<()> {
        let ck = self.current();
        let log_seq = ck.log_seq;
        let dir = self.dir.clone();
        let r = tokio::task::spawn_blocking(move || {
            checkpoint::save(&dir, &ck)?;
            // A recent checkpoint exists only if written after the last
            // durable one: nothing else (a restore, an operator's edit of
            // checkpoint.json) is ever overridden by a stale one.
            match std::fs::remove_file(dir.join(RECENT_FILE)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            }
        })
        .await
        .context("the checkpoint writer panicked")?;
        self.last_checkpoint = Instant::now();
        match r {
            Ok(()) => {
                self.dirty = false;
                self.recent_dirty = false;
                self.hold.release_below(log_seq);
                Ok(())
            }
            Err(e) => {
                self.counters.checkpoint_errors.inc();
                Err(e).with_context(|| {
                    format!(
                        "writing the checkpoint in {}",
                        self.dir.join(checkpoint::FILE).display()
                    )
                })
            }
        }
    }

    /// Writes `checkpoint.recent` without a sync. A failure only costs a
    /// longer scan of the log at the next start; the durable checkpoint
    /// reports errors.
    async fn checkpoint_recent(&mut self) {
        self.recent_dirty = false;
        self.last_recent = Instant::now();
        let ck = self.current();
        let dir = self.dir.clone();
        let r = tokio::task::spawn_blocking(move || save_recent(&dir, &ck)).await;
        if let Ok(Err(e)) = r {
            tracing::debug!(source = %self.name, error = %e, "writing checkpoint.recent failed");
        }
    }
}

/// Writes `ck` as `checkpoint.recent`: a whole new file renamed over the
/// old one, so a crash of the process leaves the old or the new, never a
/// mix; nothing is synced.
fn save_recent(dir: &std::path::Path, ck: &Checkpoint) -> std::io::Result<()> {
    state_file::replace(
        &Fs::default(),
        dir,
        RECENT_TMP,
        RECENT_FILE,
        &checkpoint::encode(ck),
        state_file::Sync::ProcessCrash,
    )
}

/// The checkpoint to start from: `durable` (from `checkpoint.json`), or
/// `checkpoint.recent` in `dir` if it is valid and newer. Both describe only
/// acknowledged appends, so either is correct. (A recent one older than the
/// durable one is only left by a power cut that undid its removal.)
pub fn load_recent(dir: &std::path::Path, source: &str, durable: Checkpoint) -> Checkpoint {
    let Ok(bytes) = std::fs::read(dir.join(RECENT_FILE)) else {
        return durable;
    };
    match checkpoint::decode(&bytes, source) {
        Ok(recent)
            if (recent.log_seq, recent.written_unix_ms)
                > (durable.log_seq, durable.written_unix_ms) =>
        {
            recent
        }
        _ => durable,
    }
}

/// Adds a span to sorted, merged spans.
fn add_ahead(spans: &mut Vec<(u64, u64)>, span: (u64, u64)) {
    spans.push(span);
    spans.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
    for &(start, end) in spans.iter() {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    *spans = merged;
}

#[cfg(test)]
mod tests;
