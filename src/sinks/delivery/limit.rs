//! Adaptive request concurrency: how many requests a sink keeps in flight,
//! between 1 and its `concurrency`, following what the receiver says.
//!
//! Additive increase, multiplicative decrease, in the spirit of TCP
//! congestion control and of Vector's adaptive request concurrency. Time is
//! cut into intervals about one round trip long. At the end of each:
//!
//! * **decrease** (the limit × 0.9, rounded down, at least 1) when the
//!   receiver pushed back during the interval: a whole-request 429 or 503, a
//!   timeout, per-item 429s on half the items or more, a share of per-item
//!   429s clearly above its moving average, or a mean round trip clearly
//!   above its moving average (more than 2.5 standard deviations);
//! * **increase** by one when there was no pushback, the limit was reached
//!   (there is no evidence for more otherwise), and neither the round trip
//!   nor the share of per-item 429s rose above its average;
//! * else keep it.
//!
//! Per-item 429s are judged by their *rise*, not their presence: a receiver
//! that refuses one item in ten whatever the load (a hot shard, a noisy
//! neighbour) gains nothing from fewer requests, while one whose write queue
//! overflows refuses more as the load grows. Other failures (connection
//! refused, 500) say nothing about load: the backoff and the probe of
//! [`super::retry_queue`] handle an outage.
//!
//! With `adaptive_concurrency = false` the limit stays at `concurrency`.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::time::Instant;

/// Weight of the newest interval in the moving averages.
const ALPHA: f64 = 0.4;
/// How many standard deviations above its average a measure must be to
/// count as rising.
const DEVIATIONS: f64 = 2.5;
/// A rise in the share of per-item 429s smaller than this is noise.
const BUSY_MARGIN: f64 = 0.02;
/// From this share of per-item 429s on, the receiver is overloaded whatever
/// the trend.
const BUSY_OVERLOAD: f64 = 0.5;
const DECREASE: f64 = 0.9;
/// Bounds of an interval, whatever the round trip.
const MIN_INTERVAL: Duration = Duration::from_millis(5);
const MAX_INTERVAL: Duration = Duration::from_secs(5);

/// What one answered (or failed) request says about the receiver's load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Signal {
    /// A 2xx answer after `rtt`, with `busy` of its `items` answered 429.
    Answered {
        rtt: Duration,
        items: usize,
        busy: usize,
    },
    /// 429 or 503 for the whole request, or a timeout.
    Pushback,
    /// Anything else (connection refused, a 500, 4xx): not about load.
    Other,
}

/// A moving average and variance.
#[derive(Debug, Clone, Copy)]
struct Ewma {
    mean: f64,
    var: f64,
}

impl Ewma {
    fn update(slot: &mut Option<Ewma>, x: f64) {
        *slot = Some(match *slot {
            None => Ewma { mean: x, var: 0.0 },
            Some(e) => {
                let d = x - e.mean;
                let mean = e.mean + ALPHA * d;
                Ewma {
                    mean,
                    var: (1.0 - ALPHA) * (e.var + ALPHA * d * d),
                }
            }
        });
    }

    fn above(&self, x: f64, margin: f64) -> bool {
        x > self.mean + (DEVIATIONS * self.var.sqrt()).max(margin)
    }
}

#[derive(Debug)]
struct Inner {
    current: usize,
    /// The end of the interval being measured; `None` before the first
    /// answer.
    until: Option<Instant>,
    rtt_sum: f64,
    rtt_n: u32,
    items: usize,
    busy: usize,
    pushback: bool,
    reached: bool,
    past_rtt: Option<Ewma>,
    past_busy: Option<Ewma>,
}

/// The limit of one sink, shared by its runtime (which spawns requests up
/// to it) and its delivery tasks (which report each answer).
#[derive(Debug)]
pub(crate) struct Limit {
    max: usize,
    adaptive: bool,
    inner: Mutex<Inner>,
    /// `holdfast_sink_concurrency_limit`.
    gauge: Gauge,
}

impl Limit {
    /// Starts at `max`: a receiver that keeps up never sees less than the
    /// configured concurrency.
    pub fn new(max: usize, adaptive: bool, gauge: Gauge) -> Limit {
        let max = max.max(1);
        gauge.set(max as i64);
        Limit {
            max,
            adaptive,
            inner: Mutex::new(Inner {
                current: max,
                until: None,
                rtt_sum: 0.0,
                rtt_n: 0,
                items: 0,
                busy: 0,
                pushback: false,
                reached: false,
                past_rtt: None,
                past_busy: None,
            }),
            gauge,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Requests that may be in flight now.
    pub fn current(&self) -> usize {
        self.lock().current
    }

    /// The moving average of answered requests' round trips (`MIN_INTERVAL`
    /// before the first answer).
    pub fn round_trip(&self) -> Duration {
        self.lock()
            .past_rtt
            .map_or(MIN_INTERVAL, |p| interval(p.mean))
    }

    /// The runtime has `in_flight` requests out after starting one: when
    /// that is the limit, more might have been used.
    pub fn started(&self, in_flight: usize) {
        let mut i = self.lock();
        if in_flight >= i.current {
            i.reached = true;
        }
    }

    /// One request's outcome, at `now`.
    pub fn observe(&self, now: Instant, signal: Signal) {
        let mut i = self.lock();
        match signal {
            Signal::Answered { rtt, items, busy } => {
                i.rtt_sum += rtt.as_secs_f64();
                i.rtt_n += 1;
                i.items += items;
                i.busy += busy;
            }
            Signal::Pushback => i.pushback = true,
            Signal::Other => {}
        }
        let Some(until) = i.until else {
            // The first answer opens the first interval.
            if i.rtt_n > 0 {
                let rtt = i.rtt_sum / f64::from(i.rtt_n);
                Ewma::update(&mut i.past_rtt, rtt);
                if i.items > 0 {
                    let share = i.busy as f64 / i.items as f64;
                    Ewma::update(&mut i.past_busy, share);
                }
                i.until = Some(now + interval(rtt));
                clear(&mut i);
            } else if i.pushback {
                // Pushback before any answer: judged at the end of a short
                // first interval.
                i.until = Some(now + MIN_INTERVAL);
            }
            return;
        };
        if now < until {
            return;
        }
        let rtt = (i.rtt_n > 0).then(|| i.rtt_sum / f64::from(i.rtt_n));
        let share = (i.items > 0).then(|| i.busy as f64 / i.items as f64);
        let rtt_rose = matches!((rtt, i.past_rtt), (Some(r), Some(p)) if p.above(r, 0.0));
        let busy_rose = match (share, i.past_busy) {
            (Some(s), Some(p)) => s >= BUSY_OVERLOAD || p.above(s, BUSY_MARGIN),
            (Some(s), None) => s >= BUSY_OVERLOAD,
            _ => false,
        };
        let calm = rtt.is_some()
            && !rtt_rose
            && rtt.zip(i.past_rtt).is_none_or(|(r, p)| r <= p.mean)
            && share
                .zip(i.past_busy)
                .is_none_or(|(s, p)| s <= p.mean + BUSY_MARGIN);
        if self.adaptive {
            if i.pushback || rtt_rose || busy_rose {
                i.current = ((i.current as f64 * DECREASE) as usize).max(1);
            } else if calm && i.reached && i.current < self.max {
                i.current += 1;
            }
        }
        if let Some(r) = rtt {
            Ewma::update(&mut i.past_rtt, r);
        }
        if let Some(s) = share {
            Ewma::update(&mut i.past_busy, s);
        }
        let next = i.past_rtt.map_or(MIN_INTERVAL, |p| interval(p.mean));
        i.until = Some(now + next);
        clear(&mut i);
        self.gauge.set(i.current as i64);
    }
}

fn interval(rtt: f64) -> Duration {
    Duration::from_secs_f64(rtt.max(0.0)).clamp(MIN_INTERVAL, MAX_INTERVAL)
}

fn clear(i: &mut Inner) {
    i.rtt_sum = 0.0;
    i.rtt_n = 0;
    i.items = 0;
    i.busy = 0;
    i.pushback = false;
    i.reached = false;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(max: usize) -> Limit {
        Limit::new(max, true, Gauge::default())
    }

    /// `times` pushbacks, one every 25 ms.
    async fn push_back(l: &Limit, times: usize) {
        for _ in 0..times {
            l.observe(Instant::now(), Signal::Pushback);
            tokio::time::sleep(Duration::from_millis(25)).await;
            l.observe(Instant::now(), Signal::Other);
        }
    }

    /// Drives `rounds` intervals of `per` answers each, every answer taking
    /// `rtt` on the paused clock, with `in_flight` requests out.
    async fn drive(l: &Limit, rounds: usize, rtt: Duration, busy: usize, in_flight: usize) {
        for _ in 0..rounds {
            l.started(in_flight);
            tokio::time::sleep(rtt).await;
            l.observe(
                Instant::now(),
                Signal::Answered {
                    rtt,
                    items: 100,
                    busy,
                },
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn steady_load_settles_at_what_the_receiver_keeps_up_with() {
        // A receiver that keeps up keeps the configured concurrency; most
        // per-item 429s are load even when steady: down to 1.
        for (rounds, refused, settles) in [(200, 0, 8), (100, 80, 1)] {
            let l = limit(8);
            drive(&l, rounds, Duration::from_millis(20), refused, 8).await;
            assert_eq!(l.current(), settles, "{refused}% refused");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_share_of_429s_is_a_quota_and_does_not_hold_the_limit_at_its_floor() {
        // A proxy's quota refuses one item in ten whatever the load: the
        // limit, pushed to its floor by a burst of real pushback, climbs back
        // to the ceiling while the share stays where it is (issue 32).
        let l = limit(8);
        push_back(&l, 40).await;
        assert_eq!(l.current(), 1);
        drive(&l, 300, Duration::from_millis(20), 10, 8).await;
        assert_eq!(l.current(), 8, "a steady 10% of 429s kept the limit down");
        // The same share rising, as an overloaded receiver's does, is load.
        for busy in [20, 35, 50] {
            drive(&l, 5, Duration::from_millis(20), busy, 8).await;
        }
        assert!(
            l.current() < 8,
            "a rising share of 429s left the limit at {}",
            l.current()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn pushback_halves_within_a_few_intervals_and_calm_climbs_back_one_by_one() {
        let l = limit(16);
        drive(&l, 3, Duration::from_millis(20), 0, 16).await;
        push_back(&l, 7).await;
        assert!(l.current() <= 8, "{}", l.current());
        let low = l.current();
        // Calm again, and using every slot: one more per interval.
        drive(&l, 4, Duration::from_millis(20), 0, 64).await;
        let up = l.current();
        assert!(up > low && up <= low + 4, "{low} -> {up}");
        drive(&l, 200, Duration::from_millis(20), 0, 64).await;
        assert_eq!(l.current(), 16);
    }

    #[tokio::test(start_paused = true)]
    async fn no_increase_without_evidence_that_more_would_be_used() {
        let l = limit(8);
        push_back(&l, 30).await;
        assert_eq!(l.current(), 1, "never below 1");
        // Only one request out at a time: the limit (1) is reached; with
        // two out of a limit of 3 it is not.
        drive(&l, 3, Duration::from_millis(20), 0, 1).await;
        let c = l.current();
        drive(&l, 20, Duration::from_millis(20), 0, c.saturating_sub(1)).await;
        assert_eq!(l.current(), c);
    }

    #[tokio::test(start_paused = true)]
    async fn rising_latency_or_a_rising_share_of_429s_decreases() {
        // (what rises; calm requests and percent refused, the limit staying;
        // then requests, latency and percent refused). One in ten refused
        // whatever the load is not overload; the share jumping is.
        let cases = [("latency", 50, 0, 3, 200, 0), ("429s", 200, 10, 2, 20, 40)];
        for (what, calm, calm_refused, n, ms, refused) in cases {
            let l = limit(8);
            drive(&l, calm, Duration::from_millis(20), calm_refused, 8).await;
            assert_eq!(l.current(), 8, "{what}");
            drive(&l, n, Duration::from_millis(ms), refused, 8).await;
            assert!(l.current() < 8, "{what}: {}", l.current());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_fixed_concurrency_never_moves() {
        let g = Gauge::default();
        let l = Limit::new(4, false, g.clone());
        push_back(&l, 30).await;
        assert_eq!(l.current(), 4);
        assert_eq!(g.get(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn the_gauge_follows_the_limit() {
        let g = Gauge::default();
        let l = Limit::new(4, true, g.clone());
        assert_eq!(g.get(), 4);
        push_back(&l, 10).await;
        assert_eq!(g.get(), 1);
        assert_eq!(l.current(), 1);
    }
}
