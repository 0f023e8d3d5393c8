//! A source's append, retried the way every source retries it: what a
//! refusal from the log means ([`Refusal`]: the log full, the disk failing,
//! a batch too large, or the log gone) and the loop that tries again
//! ([`append`]) while the source holds its input back, so nothing is
//! acknowledged or read past what is durable.
//!
//! | refusal | retried? | when given up |
//! |---|---|---|
//! | full (`when_full = "block"`) | yes, until `stop` | the caller counts `log_full` |
//! | I/O error (disk full, failing) | yes, after a [`Backoff`], until `stop` | the caller counts `log_error` |
//! | too large for one append | never | the caller counts `too_large` |
//! | closed, or anything else | never | the source ends (or counts `log_error`) |
//!
//! The `journald` and `syslog` sources run their appends through
//! [`append`]; the `file` source keeps several appends in flight, so it
//! retries in its own queue, with the same [`Refusal`] and [`Backoff`].

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::seglog::{Batch, Log, LogError, SeqRange};

/// What a refused append means for a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The log is full (`when_full = "block"` and no room within the
    /// wait): sinks free space, then it succeeds.
    Full,
    /// Writing to the disk failed (full, or failing for now); the log
    /// carries on by itself when it works again.
    Io,
    /// Larger than one append can ever be: waiting will not help, and the
    /// batch is dropped.
    TooLarge,
    /// The log is closed, or refused it for a reason waiting cannot fix.
    Fatal,
}

impl Refusal {
    pub fn of(e: &LogError) -> Refusal {
        match e {
            LogError::Full { .. } => Refusal::Full,
            LogError::Io { .. } => Refusal::Io,
            LogError::TooLarge { .. } => Refusal::TooLarge,
            _ => Refusal::Fatal,
        }
    }

    /// Worth trying again later: nothing of a refused append was
    /// acknowledged.
    pub fn is_retryable(self) -> bool {
        matches!(self, Refusal::Full | Refusal::Io)
    }
}

/// How a source retries.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// How long one try waits for room in a full log; `None`: the log's
    /// `append_timeout`.
    pub wait_for_room: Option<Duration>,
    /// Whether refusals worth it are retried at all (a UDP socket cannot
    /// hold its senders back, so it gives up at once).
    pub retry: bool,
    /// Whether a full log is also waited out with the backoff, or tried
    /// again at once (the try itself waited `wait_for_room`).
    pub back_off_when_full: bool,
}

/// How [`append`] ended.
#[derive(Debug)]
pub enum Appended {
    Done(SeqRange),
    /// Refused for good: see [`Refusal::TooLarge`].
    TooLarge(LogError),
    /// A retryable refusal ([`Refusal::Full`] or [`Refusal::Io`]) given up
    /// on: retries are off, or `stop` was cancelled.
    GaveUp(Refusal, LogError),
    /// [`Refusal::Fatal`].
    Failed(LogError),
}

/// Appends the batch `make` builds (again for each try), retrying full-log
/// and I/O refusals as `how` says, waiting `backoff` between tries (reset
/// on success) and giving up when `stop` is cancelled. `refused` is called
/// before each wait with the error and the wait about to start (zero for a
/// full log tried again at once): the source's log line.
pub async fn append(
    log: &Log,
    mut make: impl FnMut() -> Batch,
    how: Retry,
    backoff: &mut Backoff,
    stop: &CancellationToken,
    mut refused: impl FnMut(&LogError, Duration),
) -> Appended {
    loop {
        let tried = match how.wait_for_room {
            Some(wait) => log.append_timeout(make(), wait).await,
            None => log.append(make()).await,
        };
        let e = match tried {
            Ok(range) => {
                backoff.reset();
                return Appended::Done(range);
            }
            Err(e) => e,
        };
        let kind = Refusal::of(&e);
        match kind {
            Refusal::TooLarge => return Appended::TooLarge(e),
            Refusal::Fatal => return Appended::Failed(e),
            Refusal::Full | Refusal::Io if !how.retry => return Appended::GaveUp(kind, e),
            Refusal::Full if !how.back_off_when_full => {
                // The try already waited for room: straight on, unless
                // stopping.
                if stop.is_cancelled() {
                    return Appended::GaveUp(kind, e);
                }
                refused(&e, Duration::ZERO);
            }
            Refusal::Full | Refusal::Io => {
                let wait = backoff.current();
                refused(&e, wait);
                tokio::select! {
                    _ = stop.cancelled() => return Appended::GaveUp(kind, e),
                    _ = tokio::time::sleep(wait) => {}
                }
                backoff.grow();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seglog::{IoHook, LogOptions};
    use std::path::Path;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};

    /// A disk that refuses the next `fail` writes (ENOSPC).
    #[derive(Debug, Default)]
    struct FullDisk {
        fail: AtomicU32,
    }

    impl IoHook for FullDisk {
        fn allow_write(&self, _: &Path, _: u64, len: usize) -> std::io::Result<usize> {
            let left = self.fail.load(Ordering::SeqCst);
            if left == 0 {
                return Ok(len);
            }
            self.fail.store(left - 1, Ordering::SeqCst);
            Err(std::io::Error::from_raw_os_error(28))
        }
    }

    fn one_event() -> Batch {
        let mut b = Batch::new();
        b.push(b"event");
        b
    }

    const MS: Duration = Duration::from_millis(1);
    const RETRY: Retry = Retry {
        wait_for_room: None,
        retry: true,
        back_off_when_full: true,
    };

    /// A failing disk is waited out with the backoff, growing, and the
    /// batch lands once the disk works; the backoff starts over.
    #[tokio::test]
    async fn io_errors_are_retried_with_a_growing_wait_until_the_append_lands() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Arc::new(FullDisk::default());
        let log = crate::seglog::Log::open(
            dir.path(),
            LogOptions {
                io_hook: Some(disk.clone()),
                ..Default::default()
            },
        )
        .unwrap();
        disk.fail.store(3, Ordering::SeqCst);
        let mut backoff = Backoff::new(MS, 4 * MS);
        let waits = Mutex::new(Vec::new());
        let stop = CancellationToken::new();
        let r = append(&log, one_event, RETRY, &mut backoff, &stop, |e, wait| {
            assert_eq!(Refusal::of(e), Refusal::Io, "{e}");
            waits.lock().unwrap().push(wait);
        })
        .await;
        assert!(matches!(r, Appended::Done(_)), "{r:?}");
        assert_eq!(*waits.lock().unwrap(), [MS, 2 * MS, 4 * MS]);
        assert!(backoff.is_first());

        // Stopping gives up on a refused batch, saying which refusal.
        disk.fail.store(u32::MAX, Ordering::SeqCst);
        stop.cancel();
        let r = append(&log, one_event, RETRY, &mut backoff, &stop, |_, _| {}).await;
        assert!(matches!(r, Appended::GaveUp(Refusal::Io, _)), "{r:?}");
        let no_retry = Retry {
            retry: false,
            ..RETRY
        };
        let r = append(&log, one_event, no_retry, &mut backoff, &stop, |_, _| {
            panic!("no retry, no wait")
        })
        .await;
        assert!(matches!(r, Appended::GaveUp(Refusal::Io, _)), "{r:?}");
    }

    /// The verdicts the three sources acted on before they shared them.
    #[test]
    fn refusals_are_classified_as_the_sources_did() {
        let io = LogError::Io {
            op: "writing",
            path: "/x".into(),
            source: std::sync::Arc::new(std::io::Error::from_raw_os_error(28)),
        };
        let full = LogError::Full {
            max_bytes: 1,
            waited: Duration::ZERO,
        };
        let too_large = LogError::TooLarge { bytes: 2, max: 1 };
        assert_eq!(Refusal::of(&io), Refusal::Io);
        assert_eq!(Refusal::of(&full), Refusal::Full);
        assert_eq!(Refusal::of(&too_large), Refusal::TooLarge);
        assert_eq!(Refusal::of(&LogError::Closed), Refusal::Fatal);
        assert!(Refusal::Io.is_retryable() && Refusal::Full.is_retryable());
        assert!(!Refusal::TooLarge.is_retryable() && !Refusal::Fatal.is_retryable());
    }
}
