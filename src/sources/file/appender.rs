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
//! When the log is full (`LogError::Full` under `when_full = "block"`), the
//! refused chunk is kept and appended again after a backoff; meanwhile no
//! new chunk is taken, the channel from the tailer fills, and the tailer
//! stops reading. Every chunk is kept (in memory, bounded by the number in
//! flight) until its append is acknowledged.

use std::collections::{BTreeMap, VecDeque};
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
use super::tailer::{Chunk, Counters, StreamId, Update};
use crate::seglog::{Batch, Log, LogError, SeqRange};

/// Appends in flight at once.
pub const MAX_IN_FLIGHT: usize = 4;
/// How often acknowledged progress is checkpointed (it is also written when
/// a new stream appears and when the source stops). Between two checkpoints
/// the log itself holds the progress: see `recovery.rs`.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
const RETRY_MIN: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(2);

type AppendFuture = Pin<Box<dyn Future<Output = Result<SeqRange, LogError>> + Send>>;

enum State {
    InFlight(AppendFuture),
    Done,
    /// Refused because the log was full: to be appended again.
    Full,
}

struct Pending {
    /// The chunk's positions and counts; its events have moved to `framed`.
    chunk: Chunk,
    /// The chunk's events, shared with the append in flight rather than
    /// copied for it, and kept to append again if the log refuses them.
    framed: Bytes,
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
    queue: VecDeque<Pending>,
    dirty: bool,
    last_checkpoint: Instant,
    backoff: Duration,
    full_since: Option<Instant>,
}

enum Event {
    Stop,
    Acked(Result<SeqRange, LogError>),
    Received(Option<Update>),
    Retry,
    Tick,
}

/// Submits an append and polls it once, so it is queued at the writer now.
async fn submit(log: &Log, framed: &Bytes, events: u32) -> anyhow::Result<State> {
    let batch = Batch::from_framed(framed.clone(), events)
        .context("a chunk from the tailer does not hold the events it counts")?;
    let log = log.clone();
    let mut fut: AppendFuture = Box::pin(async move { log.append(batch).await });
    match std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await {
        Poll::Pending => Ok(State::InFlight(fut)),
        Poll::Ready(Ok(_)) => Ok(State::Done),
        Poll::Ready(Err(LogError::Full { .. })) => Ok(State::Full),
        Poll::Ready(Err(e)) => Err(e.into()),
    }
}

impl Appender {
    pub fn new(
        name: String,
        log: Log,
        dir: PathBuf,
        records: BTreeMap<StreamId, Record>,
        counters: Counters,
    ) -> Appender {
        Appender {
            name,
            log,
            dir,
            records,
            counters,
            queue: VecDeque::new(),
            dirty: true,
            last_checkpoint: Instant::now(),
            backoff: RETRY_MIN,
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
        loop {
            self.apply_done();
            if !open && self.queue.is_empty() {
                return Ok(());
            }
            let blocked = matches!(
                self.queue.front(),
                Some(Pending {
                    state: State::Full,
                    ..
                })
            );
            if stopping && blocked {
                info!(source = %self.name, "stopping while the log is full: unappended lines will be read again at the next start");
                return Ok(());
            }
            if self.dirty && self.last_checkpoint.elapsed() >= CHECKPOINT_INTERVAL {
                if let Err(e) = self.checkpoint().await {
                    // Not fatal: the log holds the progress meanwhile.
                    error!(source = %self.name, error = format!("{e:#}"), "writing the checkpoint failed; will retry");
                }
            }
            let can_take = open && !blocked && self.queue.len() < MAX_IN_FLIGHT;
            let tick = CHECKPOINT_INTERVAL.saturating_sub(self.last_checkpoint.elapsed());
            let backoff = self.backoff;
            let dirty = self.dirty;
            let front = match self.queue.front_mut() {
                Some(Pending {
                    state: State::InFlight(f),
                    ..
                }) => Some(f),
                _ => None,
            };
            let in_flight = front.is_some();
            let ev = tokio::select! {
                biased;
                _ = stop.cancelled(), if !stopping => Event::Stop,
                r = async { front.unwrap().as_mut().await }, if in_flight => Event::Acked(r),
                m = rx.recv(), if can_take => Event::Received(m),
                _ = tokio::time::sleep(backoff), if blocked => Event::Retry,
                _ = tokio::time::sleep(tick), if dirty => Event::Tick,
            };
            match ev {
                Event::Stop => {
                    stopping = true;
                    wake.stop();
                }
                Event::Acked(r) => {
                    let p = self
                        .queue
                        .front_mut()
                        .expect("an acknowledged append is queued");
                    match r {
                        Ok(_) => {
                            p.state = State::Done;
                            self.backoff = RETRY_MIN;
                            if let Some(since) = self.full_since.take() {
                                info!(source = %self.name, waited_ms = since.elapsed().as_millis() as u64,
                                    "the log has room again; reading resumes");
                            }
                        }
                        Err(LogError::Full { .. }) => {
                            p.state = State::Full;
                            if self.full_since.is_none() {
                                self.full_since = Some(Instant::now());
                                warn!(source = %self.name, "the log is full (when_full = \"block\"): reading paused until a sink frees space");
                            }
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
                            // The acknowledged offset moves only with acks.
                            Some(old) => {
                                *old = Record {
                                    offset: old.offset,
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
                    if barrier {
                        self.checkpoint()
                            .await
                            .context("a new file's identity must be checkpointed before its lines are appended")?;
                    }
                }
                Event::Received(Some(Update::Chunk(mut chunk))) => {
                    let floor = self.log.next_seq();
                    let payload_bytes = chunk.payload_bytes();
                    let framed = Bytes::from(std::mem::take(&mut chunk.data));
                    let state = if chunk.events == 0 {
                        State::Done
                    } else {
                        submit(&self.log, &framed, chunk.events)
                            .await
                            .with_context(|| {
                                format!("source {}: appending to the log", self.name)
                            })?
                    };
                    self.queue.push_back(Pending {
                        chunk,
                        framed,
                        payload_bytes,
                        floor,
                        state,
                    });
                }
                Event::Retry => {
                    self.backoff = (self.backoff * 2).min(RETRY_MAX);
                    let p = self.queue.front_mut().expect("a refused append is queued");
                    p.state = submit(&self.log, &p.framed, p.chunk.events)
                        .await
                        .with_context(|| format!("source {}: appending to the log", self.name))?;
                }
                Event::Tick => {}
            }
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
                }
            }
            self.dirty |= !p.chunk.positions.is_empty();
            self.counters.events.inc_by(p.chunk.events as u64);
            self.counters.event_bytes.inc_by(p.payload_bytes);
        }
    }

    /// Waits for every append still in flight, applying those acknowledged
    /// in order; the first refused one (and all after it) is dropped: its
    /// lines are read again at the next start.
    async fn settle(&mut self) {
        for p in self.queue.iter_mut() {
            if let State::InFlight(f) = &mut p.state {
                p.state = match f.as_mut().await {
                    Ok(_) => State::Done,
                    Err(_) => State::Full,
                };
            }
        }
        self.apply_done();
        self.queue.clear();
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

    async fn checkpoint(&mut self) -> anyhow::Result<()> {
        let ck = Checkpoint {
            source: self.name.clone(),
            log_seq: self.log_seq(),
            written_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            records: self.records.values().cloned().collect(),
        };
        let dir = self.dir.clone();
        let r = tokio::task::spawn_blocking(move || checkpoint::save(&dir, &ck))
            .await
            .context("the checkpoint writer panicked")?;
        self.last_checkpoint = Instant::now();
        match r {
            Ok(()) => {
                self.dirty = false;
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
}
