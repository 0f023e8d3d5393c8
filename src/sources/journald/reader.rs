//! The reading half of a `journald` source: libsystemd's sd-journal, on a
//! thread of its own (`reader/sd_journal.rs`), reads the entries, encodes
//! them (`mapping.rs`) and hands them, a batch at a time, to the appender
//! over a bounded channel. This file is that channel's contract.
//!
//! The journal handle stays on this one thread (sd-journal is not safe to
//! move between threads while in use). Back-pressure is the channel's:
//! while the appender waits for room in the log, the channel stays full,
//! the thread blocks on it and reads nothing that could be lost.
//!
//! A batch is sent when it is full or as soon as the appender has finished
//! the previous one, so a quiet journal's entries reach the log at once and
//! a busy one's in appends that grow with the time an append takes (one
//! sync per batch). At the end of the journal the thread waits for new
//! entries with `sd_journal_wait` (which returns as soon as one is written,
//! and sees rotations), for at most [`WAIT`], so that it notices promptly
//! when the source stops.
//!
//! sd-journal is the only part of holdfast that needs libsystemd, so it
//! alone is left out of a build without the `journald` feature.

use std::collections::HashSet;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::mapping::Position;
use super::JournaldOptions;
use crate::event::EventId;
use crate::metrics::Metrics;

#[cfg(feature = "journald")]
mod sd_journal;
#[cfg(feature = "journald")]
pub use sd_journal::run;

/// Where reading starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// The oldest entry.
    Beginning,
    /// After the newest entry, which is reported at once (`Chunk::save_now`)
    /// so that entries written while holdfast is stopped are read next time.
    End,
    /// At this cursor (the entry itself is skipped).
    Cursor(String),
}

/// A batch is sent at this many bytes of events (or fewer if the log's
/// segments are small).
const BATCH_BYTES: usize = 1 << 20;
/// A batch is sent at this many entries.
const MAX_EVENTS: u32 = 8192;
/// While entries are read without reaching the end of the journal, a batch
/// waits for this many before it goes to a free appender.
const MIN_EVENTS: u32 = 512;
/// The longest the thread waits for new entries before it looks whether
/// the source is stopping.
const WAIT: Duration = Duration::from_millis(100);
/// While a batch waits for the appender to be free.
const WAIT_BUSY: Duration = Duration::from_millis(5);

/// One append's worth of entries, in journal order.
#[derive(Debug)]
pub struct Chunk {
    /// Events framed for [`Batch::from_framed`](crate::seglog::Batch::from_framed)
    /// (empty when every entry read was skipped).
    pub framed: Bytes,
    pub context: Bytes,
    pub events: u32,
    /// Bytes of the entries' values.
    pub bytes: u64,
    /// The cursor of the last entry read (appended or skipped).
    pub last: String,
    /// Entries found in the log at start are still expected: the log
    /// position recovery reads from must not move yet.
    pub recovering: bool,
    /// Checkpoint at once (the end of the journal on a first start).
    pub save_now: bool,
}

/// What the thread tells the appender.
#[derive(Debug)]
pub enum Msg {
    Chunk(Chunk),
    /// Reading failed (the error).
    Ended(String),
}

/// How the thread skips what is already in the log.
#[derive(Debug, Default)]
pub struct Skip {
    /// The checkpointed entry: it and entries before it in its sequence.
    pub through: Option<Position>,
    /// Ids of entries found in the log after the checkpoint.
    pub ids: HashSet<EventId>,
}

/// The reading thread's settings.
pub struct Settings {
    pub name: String,
    pub opts: JournaldOptions,
    /// The most bytes of events one append may hold: bounds entries and
    /// batches.
    pub max_frame: usize,
    pub metrics: Arc<Metrics>,
    /// Set when a batch is sent, cleared by the appender once it is
    /// appended: while set, the reader keeps filling the next batch.
    pub busy: Arc<AtomicBool>,
}

/// A build without libsystemd has no journal to read. `check` refuses a
/// `journald` source in such a build, so a source never gets here; if one
/// did, it ends with the same reason instead of reading nothing in silence.
#[cfg(not(feature = "journald"))]
pub fn run(_: Settings, _: Start, _: Skip, tx: tokio::sync::mpsc::Sender<Msg>) {
    let _ = tx.blocking_send(Msg::Ended(super::config::NOT_BUILT.to_string()));
}
