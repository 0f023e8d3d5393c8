//! What a delivery task hands back to the runtime after an answer: events
//! to send again with the time they may go (their own backoff, the
//! receiver's `Retry-After`, or about a round trip for a per-item 429),
//! whether the receiver looks down, and what the answer tells the adaptive
//! limit.

use std::time::Duration;

use bytes::Bytes;

use super::item::{Item, Raw};
use super::limit::Signal;
use super::retry::{Decision, Outcome, Verdict};
use super::retry_queue::Waiting;
use super::shared::{Back, Shared};
use super::transport::{Transport, TransportKind};

/// Hands back events a receiver refused with a per-item 429. Their wait
/// does not grow with their failures: a resent event rejoins a later request
/// in place of a new one, so resending it soon adds no request — the
/// adaptive limit, not the backoff, sets the pace under pushback — while a
/// growing wait would leave the unlucky few of a steady share of 429s
/// holding the watermark (and so the window) for seconds. They wait about a
/// round trip: a uniform draw up to the mean the limit measures, at most
/// `backoff_initial`. Their backoff exponent is kept for other
/// failures.
pub(super) fn pushed_back<T: Transport>(
    sh: &Shared<T>,
    busy: Vec<Item>,
    rng: &mut rand::rngs::SmallRng,
) {
    use rand::Rng;
    let pace = sh.limit.round_trip().min(sh.policy.backoff_initial);
    let nanos = pace.as_nanos().min(u64::MAX as u128) as u64;
    let wait = Duration::from_nanos(rng.random_range(0..=nanos));
    let not_before = tokio::time::Instant::now() + wait;
    let mut own = Detached::default();
    let items = busy
        .into_iter()
        .map(|i| {
            let failures = i.failures;
            own.back_to_raw(i, failures)
        })
        .collect();
    let _ = sh.back.send(Back::Retry(Waiting {
        items,
        not_before,
        floor: not_before,
    }));
}

/// Hands events to retry back to the runtime. Each waits by its own
/// backoff: events that failed once wait as after one failure even when
/// they travelled with events that failed five times (lumping them would
/// push everyone's wait up to the unluckiest's). `log` is called once,
/// with the shortest wait and the number of events.
pub(super) fn requeue<T: Transport>(
    sh: &Shared<T>,
    mut again: Vec<Item>,
    outcome: &Outcome<'_>,
    retry_after: Option<Duration>,
    rng: &mut rand::rngs::SmallRng,
    log: impl FnOnce(Duration, usize),
) {
    let now = tokio::time::Instant::now();
    let n = again.len();
    // Stable: request order within each group.
    again.sort_by_key(|i| i.failures);
    let mut groups: Vec<Waiting> = Vec::new();
    let mut shortest: Option<Duration> = None;
    let mut last_failures = None;
    let mut own = Detached::default();
    for i in again {
        let failures = i.failures + 1;
        if last_failures != Some(failures) {
            last_failures = Some(failures);
            let wait = sh.policy.backoff(failures, retry_after, rng);
            shortest = Some(shortest.map_or(wait, |s| s.min(wait)));
            let not_before = now + wait;
            // Only a wait the receiver did not ask for may be cut short when
            // it works again.
            let floor = if retry_after.is_none() && holds(sh, outcome) {
                now
            } else {
                not_before
            };
            groups.push(Waiting {
                items: Vec::new(),
                not_before,
                floor,
            });
        }
        if let Some(g) = groups.last_mut() {
            g.items.push(own.back_to_raw(i, failures));
        }
    }
    log(shortest.unwrap_or_default(), n);
    if holds(sh, outcome) {
        if let Some(until) = groups.iter().map(|g| g.not_before).max() {
            let _ = sh.back.send(Back::Down { until });
        }
    }
    for g in groups {
        let _ = sh.back.send(Back::Retry(g));
    }
}

/// Events handed back as the runtime keeps them: their stored bytes and
/// counters, without the decoded fields (decoded again when resent).
///
/// Their bytes are copied out of the decompressed block they were read
/// from: an event read from the log is a slice of its block (one append,
/// up to a file chunk), and a few events waiting for a retry would
/// otherwise keep every block of the read-ahead window alive. The events
/// of one batch share one copy of its context.
#[derive(Default)]
struct Detached {
    /// The last context copied: the original's address and length, and
    /// the copy.
    context: Option<(usize, usize, Bytes)>,
}

impl Detached {
    /// `i` with `failures` as the caller counts them.
    fn back_to_raw(&mut self, i: Item, failures: u32) -> Raw {
        let key = (i.context.as_ptr() as usize, i.context.len());
        let context = match &self.context {
            _ if i.context.is_empty() => Bytes::new(),
            Some((at, len, copy)) if (*at, *len) == key => copy.clone(),
            _ => {
                let copy = Bytes::copy_from_slice(&i.context);
                self.context = Some((key.0, key.1, copy.clone()));
                copy
            }
        };
        Raw {
            pos: i.pos,
            data: Bytes::copy_from_slice(&i.data),
            context,
            index: i.index,
            attempts: i.attempts,
            retries: i.retries,
            failures,
        }
    }
}

/// Whether an outcome holds every batch: the receiver is down, or pushes
/// back on a sink whose receiver needs its events in time order.
fn holds<T: Transport>(sh: &Shared<T>, outcome: &Outcome<'_>) -> bool {
    down(outcome)
        || (sh.transport.in_order() && matches!(outcome, Outcome::Status { status: 429, .. }))
}

/// Whether an outcome says the receiver is down (no answer, 408, a 5xx)
/// rather than pushing back (429) or judging events.
fn down(outcome: &Outcome<'_>) -> bool {
    match *outcome {
        Outcome::Transport { .. } => true,
        Outcome::Status { status, .. } => status == 408 || (500..600).contains(&status),
        Outcome::Success { .. } | Outcome::ResponseTooLarge | Outcome::SomeRefused { .. } => false,
    }
}

/// What an answer tells the adaptive limit.
pub(super) fn signal(outcome: &Outcome<'_>, decision: &Decision, rtt: Duration) -> Signal {
    match *outcome {
        Outcome::Transport {
            kind: TransportKind::Timeout,
        } => Signal::Pushback,
        Outcome::Transport { .. } => Signal::Other,
        Outcome::Status {
            status: 429 | 503, ..
        } => Signal::Pushback,
        Outcome::Status { .. } | Outcome::ResponseTooLarge | Outcome::SomeRefused { .. } => {
            Signal::Other
        }
        Outcome::Success { .. } => {
            let (items, busy) = match decision {
                Decision::PerEvent { verdicts, .. } => (
                    verdicts.len(),
                    verdicts
                        .iter()
                        .filter(|v| {
                            matches!(
                                v,
                                Verdict::Retry {
                                    reason: "item_429",
                                    ..
                                }
                            )
                        })
                        .count(),
                ),
                _ => (0, 0),
            };
            Signal::Answered { rtt, items, busy }
        }
    }
}
