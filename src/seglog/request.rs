//! What appenders, consumers and the log handle send the writer thread:
//! an append with the oneshot it is answered on, and the control messages.

use std::time::Instant;

use tokio::sync::oneshot;

use super::block::Encoded;
use super::error::Result;
use super::SeqRange;

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
