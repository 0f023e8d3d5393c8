//! Errors of the segment log. Corruption is kept apart from I/O: an I/O error
//! is about the machine (disk full, permissions), corruption is about bytes
//! already on disk, and the two call for different actions by the operator.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Everything that can go wrong in the segment log.
///
/// Cloned whole when one failure answers several callers (every append of
/// a failed group commit), which is why the I/O error is shared.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LogError {
    /// A file operation failed; `op` says which and `path` on what.
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },

    /// Another process holds the data directory's lock.
    #[error(
        "the log directory {dir} is locked by another process (is another holdfast running with the same data_dir?)"
    )]
    Locked { dir: PathBuf },

    /// Bytes on disk are not what was written and cannot be used.
    #[error("corrupt data in {path} at offset {offset}: {reason}")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },

    /// The log is at `max_bytes` under `when_full = "block"` and no consumer
    /// freed space in time. Nothing was written; retry later.
    #[error("the log is full ({max_bytes} bytes) and no space was freed within {waited:?}")]
    Full { max_bytes: u64, waited: Duration },

    /// One append (or one event) is larger than a segment can hold.
    #[error(
        "an append of {bytes} bytes is larger than the largest frame a segment holds ({max} bytes)"
    )]
    TooLarge { bytes: u64, max: u64 },

    /// An append with no events.
    #[error("an append must contain at least one event")]
    Empty,

    /// A consumer committed a sequence number the log has not yet made durable.
    #[error("consumer {consumer} committed sequence {seq}, beyond the durable end of the log ({durable})")]
    CommitBeyondDurable {
        consumer: String,
        seq: u64,
        durable: u64,
    },

    /// A consumer name that cannot be stored.
    #[error("invalid consumer name {name:?}: use 1 to 64 characters from A-Z a-z 0-9 . _ -")]
    BadConsumerName { name: String },

    /// The options contradict each other.
    #[error("invalid log options: {0}")]
    Options(String),

    /// The log was opened read-only (`holdfast inspect`, `dump`).
    #[error("the log is open read-only; only the daemon that holds its lock may change it")]
    ReadOnly,

    /// A reader made with `Log::reader` has no cursor to commit.
    #[error("this reader has no cursor: open a named consumer to commit")]
    NoCursor,

    /// The log was closed, or its writer stopped after an unrecoverable error.
    #[error("the log is closed")]
    Closed,
}

impl LogError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        LogError::Io {
            op,
            path: path.into(),
            source: Arc::new(source),
        }
    }
}

/// Shorthand used throughout the module.
pub type Result<T, E = LogError> = std::result::Result<T, E>;
