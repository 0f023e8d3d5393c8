//! Events waiting to be sent again, and the probe that ends an outage early.
//!
//! A delivery task does not wait out a backoff: the events of its request
//! that must be retried come back here with a *not-before* time, and its
//! `concurrency` slot is free at once. The runtime's batch former draws the
//! events that are due ahead of new reads from the log, so they rejoin later
//! requests next to fresh events. An event keeps its position, its id, its
//! attempts, its counted retries and its consecutive failures (the backoff
//! exponent) through the queue. Queued events are read and not finished:
//! they stay inside the sink's window and below the watermark.
//!
//! Each group also has a *floor*: the earliest it may go whatever happens.
//! A `Retry-After` and pushback (429, whole or per item) set the floor to
//! the not-before time; a receiver that was down (no answer, 408, 5xx) sets
//! it to the failure, so that the wait can be cut short: when a request
//! finds the receiver working again, [`RetryQueue::reset`] makes every such
//! group due at once, whatever its backoff had grown to.
//!
//! While everything backs off (or the runtime holds every batch because the
//! receiver is down) and nothing is in flight, [`Probe`] sends one event
//! alone about every [`PROBE_INTERVAL`]: a small request that finds out
//! whether the receiver is back without hammering one that is still down.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::item::Raw;

/// How often a receiver that every waiting event backs off from is probed.
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Events of one answer that must be sent again.
#[derive(Debug)]
pub(crate) struct Waiting {
    pub items: Vec<Raw>,
    /// Not sent again before this.
    pub not_before: Instant,
    /// Not sent again before this even after a [`RetryQueue::reset`].
    pub floor: Instant,
}

/// Groups by not-before time, earliest first.
#[derive(Debug, Default)]
pub(crate) struct RetryQueue {
    groups: VecDeque<Waiting>,
    events: usize,
}

impl RetryQueue {
    pub fn push(&mut self, w: Waiting) {
        if w.items.is_empty() {
            return;
        }
        self.events += w.items.len();
        let at = self
            .groups
            .partition_point(|g| g.not_before <= w.not_before);
        self.groups.insert(at, w);
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.events
    }

    pub fn is_empty(&self) -> bool {
        self.events == 0
    }

    /// When the next group is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.groups.front().map(|g| g.not_before)
    }

    /// Takes due events, oldest-due first, up to `max_events` and about
    /// `max_bytes` (at least one event when one is due).
    pub fn take_ready(&mut self, now: Instant, max_events: usize, max_bytes: usize) -> Vec<Raw> {
        let mut out = Vec::new();
        let mut bytes = 0;
        while out.len() < max_events && (bytes < max_bytes || out.is_empty()) {
            let Some(g) = self.groups.front_mut().filter(|g| g.not_before <= now) else {
                break;
            };
            // In request order, so that a resend looks like the request it
            // repeats.
            let mut take = 0;
            for r in &g.items {
                if out.len() + take >= max_events || (bytes >= max_bytes && !out.is_empty()) {
                    break;
                }
                bytes += r.data.len();
                take += 1;
            }
            out.extend(g.items.drain(..take));
            if g.items.is_empty() {
                self.groups.pop_front();
            }
        }
        self.events -= out.len();
        out
    }

    /// The receiver works again: every group whose wait was only a backoff
    /// is due now (or at its floor), and its events' backoff starts over.
    /// Returns how many events became due sooner.
    pub fn reset(&mut self, now: Instant) -> usize {
        let mut n = 0;
        for g in &mut self.groups {
            let at = g.floor.max(now);
            if at < g.not_before {
                g.not_before = at;
                n += g.items.len();
                for r in &mut g.items {
                    r.failures = 0;
                }
            }
        }
        self.groups.make_contiguous().sort_by_key(|g| g.not_before);
        n
    }

    /// Whether some group waits only for its backoff (a reset would make
    /// it due sooner): only those are worth a probe. A wait the receiver
    /// asked for is honoured, probe or not.
    fn probeable(&self) -> Option<usize> {
        self.groups.iter().position(|g| g.floor < g.not_before)
    }

    /// One event to probe the receiver with: the first of the first group
    /// that waits only for its backoff.
    pub fn take_probe(&mut self) -> Option<Raw> {
        let i = self.probeable()?;
        let g = &mut self.groups[i];
        let r = g.items.remove(0);
        if g.items.is_empty() {
            self.groups.remove(i);
        }
        self.events -= 1;
        Some(r)
    }
}

/// When to probe: [`PROBE_INTERVAL`] after the last request was started, if
/// by then nothing is in flight and nothing is due.
#[derive(Debug)]
pub(crate) struct Probe {
    last_request: Instant,
}

impl Probe {
    pub fn new(now: Instant) -> Probe {
        Probe { last_request: now }
    }

    /// A request (any request, a probe too) was started.
    pub fn sent(&mut self, now: Instant) {
        self.last_request = now;
    }

    /// The time to send a probe, if one is wanted: nothing is in flight,
    /// and either every batch is held because the receiver is down (until
    /// `held`), or events wait only for their backoff and the next is due
    /// later than the probe would go.
    pub fn due(
        &self,
        in_flight: usize,
        queue: &RetryQueue,
        held: Option<Instant>,
    ) -> Option<Instant> {
        let at = self.last_request + PROBE_INTERVAL;
        if in_flight > 0 {
            return None;
        }
        let blocked = held.is_some_and(|h| h > at);
        let backing_off =
            queue.probeable().is_some() && queue.next_due().is_some_and(|next| next > at);
        (blocked || backing_off).then_some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::delivery::item::Pos;
    use bytes::Bytes;

    fn raw(seq: u64) -> Raw {
        Raw {
            pos: Pos::Log(seq),
            data: Bytes::from_static(b"0123456789"),
            context: Bytes::new(),
            index: 0,
            attempts: 1,
            retries: 0,
            failures: 3,
        }
    }

    fn group(seqs: std::ops::Range<u64>, not_before: Instant, floor: Instant) -> Waiting {
        Waiting {
            items: seqs.map(raw).collect(),
            not_before,
            floor,
        }
    }

    fn seqs(v: &[Raw]) -> Vec<u64> {
        let mut s: Vec<u64> = v.iter().filter_map(|r| r.pos.seq()).collect();
        s.sort();
        s
    }

    #[tokio::test(start_paused = true)]
    async fn events_are_handed_out_when_due_earliest_first_within_the_batch_bounds() {
        let t = Instant::now();
        let mut q = RetryQueue::default();
        q.push(group(10..14, t + Duration::from_secs(2), t));
        q.push(group(0..3, t + Duration::from_secs(1), t));
        q.push(group(20..21, t + Duration::from_secs(5), t));
        assert_eq!(q.len(), 8);
        assert_eq!(q.next_due(), Some(t + Duration::from_secs(1)));
        assert!(q.take_ready(Instant::now(), 100, 1 << 20).is_empty());

        tokio::time::sleep(Duration::from_secs(2)).await;
        // Two groups due; a batch of five takes the earlier one whole.
        let first = q.take_ready(Instant::now(), 5, 1 << 20);
        let order: Vec<u64> = first.iter().filter_map(|r| r.pos.seq()).collect();
        assert_eq!(order, [0, 1, 2, 10, 11]);
        // Bytes bound: ten bytes each, 15 bytes → two events.
        let second = q.take_ready(Instant::now(), 100, 15);
        assert_eq!(seqs(&second), [12, 13]);
        assert!(q.take_ready(Instant::now(), 100, 1 << 20).is_empty());
        assert_eq!(q.len(), 1);
        // Everything keeps its attempts and its backoff exponent.
        assert!(first.iter().all(|r| r.attempts == 1 && r.failures == 3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_reset_makes_backoffs_due_now_but_never_before_a_floor() {
        let t = Instant::now();
        let mut q = RetryQueue::default();
        // A long backoff after 500s: resettable.
        q.push(group(0..3, t + Duration::from_secs(30), t));
        // Retry-After 10 s: not before then, reset or not.
        q.push(group(
            3..5,
            t + Duration::from_secs(10),
            t + Duration::from_secs(10),
        ));
        // Pushback (per-item 429): its own wait stands.
        q.push(group(
            5..6,
            t + Duration::from_secs(4),
            t + Duration::from_secs(4),
        ));

        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = Instant::now();
        assert_eq!(q.reset(now), 3);
        assert_eq!(q.next_due(), Some(now));
        let ready = q.take_ready(now, 100, 1 << 20);
        assert_eq!(seqs(&ready), [0, 1, 2]);
        assert!(ready.iter().all(|r| r.failures == 0), "backoff starts over");
        assert_eq!(q.next_due(), Some(t + Duration::from_secs(4)));
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(seqs(&q.take_ready(Instant::now(), 100, 1 << 20)), [5]);
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(seqs(&q.take_ready(Instant::now(), 100, 1 << 20)), [3, 4]);
        assert!(q.is_empty());
    }

    /// An outage: every event backs off far longer than a second. One probe
    /// a second, none while something is in flight or due; the probe is the
    /// lowest event of the group due first.
    #[tokio::test(start_paused = true)]
    async fn a_probe_goes_about_every_second_while_everything_backs_off() {
        let t = Instant::now();
        let mut q = RetryQueue::default();
        let mut p = Probe::new(t);
        assert_eq!(p.due(0, &q, None), None, "nothing waits");
        q.push(group(0..4, t + Duration::from_secs(40), t));
        assert_eq!(
            p.due(1, &q, None),
            None,
            "a request in flight finds out by itself"
        );
        let mut probes = Vec::new();
        while Instant::now() < t + Duration::from_secs(10) {
            let at = p.due(0, &q, None).expect("a probe is wanted");
            tokio::time::sleep_until(at).await;
            let r = q.take_probe().unwrap();
            probes.push((Instant::now() - t, r.pos.seq().unwrap()));
            p.sent(Instant::now());
            // It failed: back with a longer backoff.
            q.push(Waiting {
                items: vec![r],
                not_before: Instant::now() + Duration::from_secs(60),
                floor: Instant::now(),
            });
        }
        assert_eq!(probes.len(), 10, "{probes:?}");
        for (i, (at, _)) in probes.iter().enumerate() {
            assert_eq!(*at, Duration::from_secs(i as u64 + 1));
        }
        assert_eq!(probes[0].1, 0);
        // A group due within the interval needs no probe.
        let mut q = RetryQueue::default();
        let p = Probe::new(Instant::now());
        q.push(group(0..1, Instant::now() + Duration::from_millis(300), t));
        assert_eq!(p.due(0, &q, None), None);
        // Nor one the receiver asked to wait for (Retry-After, 429): its
        // wait is honoured.
        let mut q = RetryQueue::default();
        let later = Instant::now() + Duration::from_secs(30);
        q.push(group(0..1, later, later));
        assert_eq!(p.due(0, &q, None), None);
        assert!(q.take_probe().is_none());
    }

    /// While batches are held because the receiver is down, a probe goes
    /// every interval even with nothing in the queue due later.
    #[tokio::test(start_paused = true)]
    async fn held_batches_are_probed_every_interval() {
        let t = Instant::now();
        let q = RetryQueue::default();
        let mut p = Probe::new(t);
        let held = Some(t + Duration::from_secs(30));
        assert_eq!(p.due(0, &q, held), Some(t + PROBE_INTERVAL));
        assert_eq!(p.due(2, &q, held), None);
        p.sent(t + Duration::from_secs(5));
        assert_eq!(p.due(0, &q, held), Some(t + Duration::from_secs(6)));
        // The hold ends before the probe would go: no probe.
        assert_eq!(p.due(0, &q, Some(t + Duration::from_millis(5500))), None);
    }

    /// The probe succeeds: everything that waited only for its backoff goes
    /// at once.
    #[tokio::test(start_paused = true)]
    async fn the_first_success_after_an_outage_releases_every_waiting_event() {
        let t = Instant::now();
        let mut q = RetryQueue::default();
        for i in 0..5u64 {
            let wait = Duration::from_secs(2u64.pow(i as u32 + 2));
            q.push(group(i * 10..i * 10 + 10, t + wait, t));
        }
        let mut p = Probe::new(t);
        let at = p.due(0, &q, None).unwrap();
        tokio::time::sleep_until(at).await;
        let probe = q.take_probe().unwrap();
        p.sent(Instant::now());
        assert_eq!(probe.pos.seq(), Some(0));
        // Its answer: delivered.
        let now = Instant::now();
        assert_eq!(q.reset(now), 49);
        assert_eq!(q.take_ready(now, 1000, 1 << 20).len(), 49);
        assert!(q.is_empty());
    }
}
