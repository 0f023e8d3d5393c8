//! The wait between retries, one kind for every retry loop: exponential
//! from a first wait, doubled after each failed try up to a cap, back to
//! the first after a success. Used by the sources' appends
//! (`append_retry.rs`: `journald`, `syslog`; the `file` appender), the `file` source's
//! checkpoint barrier, and the daemon's supervisor; the sinks' per-event
//! retries take [`Backoff::ceiling`] and [`full_jitter`] (a wait drawn
//! uniformly under the ceiling), since their exponent is an event's count
//! of failures rather than one loop's.
//!
//! The loops that wait alone (one source, the supervisor) wait the ceiling
//! itself: nobody else retries in step with them. Full jitter is for many
//! senders retrying against one receiver, which would otherwise come back
//! at the same instant.

use std::time::Duration;

use rand::Rng;

/// A retry loop's wait: [`current`](Backoff::current) before the next try,
/// [`grow`](Backoff::grow) after it failed, [`reset`](Backoff::reset) on
/// success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    current: Duration,
}

impl Backoff {
    /// Starts at `first`, doubles up to `max` (a `max` equal to `first`
    /// makes a constant wait).
    pub const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            current: first,
        }
    }

    /// The wait before the next try.
    pub fn current(&self) -> Duration {
        self.current
    }

    /// Whether no try has failed since the start or the last reset: the
    /// first failure of a run is the one worth a log line.
    pub fn is_first(&self) -> bool {
        self.current == self.first
    }

    /// After a failed try: the next wait is twice this one, at most `max`.
    pub fn grow(&mut self) {
        self.current = self.current.saturating_mul(2).min(self.max);
    }

    /// After a success: the next failure waits `first` again.
    pub fn reset(&mut self) {
        self.current = self.first;
    }

    /// The exponential ceiling of the `attempt`-th consecutive wait (1-based)
    /// without a loop's state: `min(max, first × 2^(attempt-1))`.
    pub fn ceiling(first: Duration, max: Duration, attempt: u32) -> Duration {
        let shift = attempt.saturating_sub(1).min(30);
        first.saturating_mul(1u32 << shift).min(max)
    }
}

/// Full jitter: a wait drawn uniformly from zero to `ceiling`, both
/// included.
pub fn full_jitter(ceiling: Duration, rng: &mut impl Rng) -> Duration {
    let nanos = ceiling.as_nanos().min(u64::MAX as u128) as u64;
    if nanos == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(rng.random_range(0..=nanos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    const MS: Duration = Duration::from_millis(1);

    /// The loops' ranges as they were written by hand: 50 ms doubling to
    /// 2 s (sources), 1 s doubling to 60 s (supervisor), back on success.
    #[test]
    fn doubles_to_the_cap_and_resets() {
        let mut b = Backoff::new(50 * MS, 2000 * MS);
        let mut seen = Vec::new();
        for _ in 0..8 {
            seen.push(b.current().as_millis());
            b.grow();
        }
        assert_eq!(seen, [50, 100, 200, 400, 800, 1600, 2000, 2000]);
        assert!(!b.is_first());
        b.reset();
        assert!(b.is_first());
        assert_eq!(b.current(), 50 * MS);

        let mut constant = Backoff::new(1000 * MS, 1000 * MS);
        constant.grow();
        assert_eq!(constant.current(), 1000 * MS);
    }

    /// The stateless ceiling is the loop's wait after `attempt - 1`
    /// failures, and does not overflow on a long outage.
    #[test]
    fn the_ceiling_matches_the_loop() {
        let mut b = Backoff::new(100 * MS, Duration::from_secs(10));
        for attempt in 1..=12 {
            assert_eq!(
                Backoff::ceiling(100 * MS, Duration::from_secs(10), attempt),
                b.current()
            );
            b.grow();
        }
        assert_eq!(
            Backoff::ceiling(Duration::from_secs(1), Duration::MAX, u32::MAX),
            Duration::from_secs(1 << 30)
        );
    }

    #[test]
    fn full_jitter_stays_under_the_ceiling_and_spreads() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let draws: Vec<Duration> = (0..200).map(|_| full_jitter(100 * MS, &mut rng)).collect();
        assert!(draws.iter().all(|d| *d <= 100 * MS));
        assert!(draws.iter().any(|d| *d < 20 * MS) && draws.iter().any(|d| *d > 80 * MS));
        assert_eq!(full_jitter(Duration::ZERO, &mut rng), Duration::ZERO);
    }
}
