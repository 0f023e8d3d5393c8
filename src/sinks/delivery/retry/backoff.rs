//! How long an event waits before it is sent again: exponential backoff
//! with full jitter, never less than the receiver's `Retry-After`; and the
//! slow wait of a held request.

use std::time::{Duration, SystemTime};

use rand::Rng;

use super::policy::Policy;
use crate::backoff::{full_jitter, Backoff};

/// The longest `Retry-After` honoured when `backoff_max` is shorter: a
/// receiver asking for an hour is more likely confused than right.
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(300);

impl Policy {
    /// The wait before the `attempt`-th consecutive retry (1-based): full
    /// jitter under an exponential ceiling, never less than `retry_after`.
    pub fn backoff(
        &self,
        attempt: u32,
        retry_after: Option<Duration>,
        rng: &mut impl Rng,
    ) -> Duration {
        let jittered = full_jitter(self.ceiling(attempt), rng);
        match retry_after {
            Some(ra) => jittered.max(ra.min(self.backoff_max.max(RETRY_AFTER_CAP))),
            None => jittered,
        }
    }

    /// The exponential ceiling of the `attempt`-th consecutive wait:
    /// `min(backoff_max, backoff_initial × 2^(attempt-1))`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        Backoff::ceiling(self.backoff_initial, self.backoff_max, attempt)
    }

    /// The wait before resending a held request (credentials, endpoint):
    /// slow, between half and all of `backoff_max`.
    pub fn hold(&self, rng: &mut impl Rng) -> Duration {
        let half = self.backoff_max / 2;
        half + full_jitter(self.backoff_max - half, rng)
    }
}

/// Parses a `Retry-After` value: a number of seconds, or an HTTP date
/// (which yields the time from `now` until then, zero if past).
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn policy() -> Policy {
        Policy::for_tests()
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(parse_retry_after(" 7 ", now), Some(Duration::from_secs(7)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(
            parse_retry_after(&later, now),
            Some(Duration::from_secs(30))
        );
        let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(parse_retry_after(&past, now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
    }

    /// The waits, measured on tokio's paused clock: each one within its
    /// exponential ceiling, the ceiling capped, Retry-After honoured (and
    /// capped), held requests slow.
    #[tokio::test(start_paused = true)]
    async fn backoff_on_paused_time() {
        let p = policy();
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut total = Duration::ZERO;
        for attempt in 1..=12u32 {
            let d = p.backoff(attempt, None, &mut rng);
            let ceiling =
                (Duration::from_millis(100) * 2u32.pow(attempt - 1)).min(Duration::from_secs(10));
            assert!(d <= ceiling, "attempt {attempt}: {d:?} > {ceiling:?}");
            let start = tokio::time::Instant::now();
            tokio::time::sleep(d).await;
            // The paused clock moves in whole milliseconds.
            let slept = start.elapsed();
            assert!(
                slept >= d && slept <= d + Duration::from_millis(1),
                "{slept:?} for {d:?}"
            );
            total += d;
        }
        // Full jitter: the draws are spread, not all at the ceiling.
        assert!(total < Duration::from_secs(12 * 10));
        assert!(total > Duration::from_secs(1));

        let start = tokio::time::Instant::now();
        let d = p.backoff(1, Some(Duration::from_secs(7)), &mut rng);
        tokio::time::sleep(d).await;
        assert!(start.elapsed() >= Duration::from_secs(7));
        // A huge Retry-After is capped.
        let d = p.backoff(1, Some(Duration::from_secs(86_400)), &mut rng);
        assert_eq!(d, RETRY_AFTER_CAP);

        for _ in 0..100 {
            let h = p.hold(&mut rng);
            assert!(h >= Duration::from_secs(5) && h <= Duration::from_secs(10));
        }
    }
}
