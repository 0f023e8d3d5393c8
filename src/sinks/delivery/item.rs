//! The events on their way through a sink: where each came from ([`Pos`]),
//! as the runtime keeps it between sends ([`Raw`]: its stored bytes only),
//! and as a delivery task hands it to the transport ([`Item`]: decoded).

use bytes::Bytes;

use crate::event::Stored;

/// Where an event in a sink came from, so that finishing it moves the right
/// thing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pos {
    /// The log, at this sequence number.
    Log(u64),
    /// A replay file in the quarantine's inbox; `seq` is where the event
    /// once was in the log, for the record.
    Replay { file: u64, seq: Option<u64> },
}

impl Pos {
    /// The log sequence number, original for replayed events.
    pub fn seq(&self) -> Option<u64> {
        match *self {
            Pos::Log(s) => Some(s),
            Pos::Replay { seq, .. } => seq,
        }
    }
}

/// One event on its way to a receiver.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub pos: Pos,
    /// The event's own bytes exactly as stored in the log.
    pub data: Bytes,
    /// Its batch's context (empty for a format-1 event): with `index`, what
    /// it takes to decode `data` again when the event is handed back.
    pub context: Bytes,
    /// Its index in its batch.
    pub index: u64,
    /// The event decoded: its own fields, the shared ones borrowed from the
    /// batch's context (decoded once per delivery task), its id in `ev.id`.
    pub ev: Stored,
    /// Times this event was sent.
    pub attempts: u32,
    /// Answers that asked for a retry and count toward `max_attempts`.
    pub retries: u32,
    /// Consecutive answers that asked for a retry: the backoff exponent.
    pub failures: u32,
}

/// An event handed to a delivery task, not yet decoded.
#[derive(Debug, Clone)]
pub(crate) struct Raw {
    pub pos: Pos,
    /// The event's own bytes.
    pub data: Bytes,
    /// Its batch's context, shared with the batch's other events (a
    /// reference, not a copy); empty for format 1 and replayed events.
    pub context: Bytes,
    /// Its index in its batch (`seq - batch_start`): derived ids need it.
    pub index: u64,
    /// Sends so far (non-zero for replayed events).
    pub attempts: u32,
    /// Answers that asked for a retry and count toward `max_attempts`.
    pub retries: u32,
    /// Consecutive answers that asked for a retry: the backoff exponent.
    pub failures: u32,
}

impl Raw {
    /// A self-contained (format-1) event from a replay file, never sent by
    /// this run.
    pub fn new(pos: Pos, data: Bytes, attempts: u32) -> Raw {
        Raw::with_context(pos, data, Bytes::new(), 0, attempts)
    }

    /// An event read from the log: its own bytes, its batch's context and
    /// its index in that batch.
    pub fn with_context(pos: Pos, data: Bytes, context: Bytes, index: u64, attempts: u32) -> Raw {
        Raw {
            pos,
            data,
            context,
            index,
            attempts,
            retries: 0,
            failures: 0,
        }
    }
}
