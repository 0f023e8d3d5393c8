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

#[cfg(test)]
impl Policy {
    /// The policy the unit tests of `classify.rs` and `backoff.rs` use:
    /// 100 ms doubling to 10 s, three attempts.
    pub(super) fn for_tests() -> Policy {
        Policy {
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
            max_attempts: 3,
        }
    }
}
