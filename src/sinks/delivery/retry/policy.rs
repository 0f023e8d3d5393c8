//! The retry policy of one sink: its settings. What it decides is in
//! `classify.rs` (the verdicts) and `backoff.rs` (the waits), each an
//! `impl Policy` of its own.

use std::time::Duration;

/// The policy of one sink.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Answers asking for a retry that an event may get before it is
    /// rejected with "retries exhausted" (at least 1).
    pub max_attempts: u32,
}
