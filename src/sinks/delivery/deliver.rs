//! One batch on its way: the task that owns a `concurrency` slot while its
//! requests are sent and answered, until every event of its batch is
//! finished (delivered, duplicate, or durably quarantined) or handed back
//! to the runtime's retry queue, or until the sink stops.
//! What it hands back after an answer is built in `requeue.rs`; rejected
//! events go to the quarantine through `quarantining.rs`.
//!
//! It sends through the sink's transport, lets the transport judge the
//! answer and the [`Policy`] classify it per event, reports finished events to the runtime as soon as they are
//! finished, and hands the events that must be sent again back to the
//! runtime with the time they may go (their backoff, or the receiver's
//! `Retry-After`): they rejoin later requests — the same envelopes, so the
//! same ids and idempotency keys — and the slot does not sit through the
//! wait. A 413 splits the request in halves, sent at once; a configuration
//! problem (401/403, wrong endpoint) holds the whole request here and
//! retries slowly, loudly. Every answer is reported to the sink's adaptive
//! [`Limit`]; an answer that shows the receiver working releases the
//! retry queue's backoffs ([`Back::Alive`]).
//!
//! Before each send, the claimed events the transport can never send
//! ([`Transport::unsendable`]: a log record to a metrics receiver) are
//! finished and counted dropped, and those it knows the receiver refuses
//! ([`Transport::foreknown`]) are quarantined unsent. A refusal of some
//! unknown events ([`Answer::SomeRefused`]) is told to the transport
//! ([`Transport::learn_refusal`]) and halves the request like a 413, the
//! newer half first when the transport says so.
//!
//! Eviction (`when_full = "drop_oldest"`, `max_age`): every log event is
//! claimed from the log's [`Ledger`] right before each send and released with
//! its outcome when the answer is in. An event the log evicted before the
//! claim was counted lost and is dropped unsent; one evicted while on the
//! wire is not counted if the answer delivers or quarantines it, and is
//! counted and dropped if the answer asks for a retry. Either way the
//! dropped event is reported finished, so the watermark passes it. What is
//! sent is a slice of a memory map of the segment (or of its decompressed
//! block), valid even after the file is unlinked.
//!
//! Stopping: no request is started and no backoff waited for after the
//! sink's stop token fires; a request already sent is allowed to finish (its
//! results still count), bounded by `request_timeout`. Events not finished
//! are simply not reported: the cursor stays below them and they are sent
//! again after the restart.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use rand::SeedableRng;
use tracing::{debug, error, warn};

use super::item::{Item, Raw};
use super::quarantining::{quarantine, quarantine_invalid};
use super::requeue::{pushed_back, requeue, signal};
use super::retry::{Decision, Outcome, Rejection, Verdict};
use super::shared::{pause, Back, Shared, Which};
use super::transport::{Answer, BodyVerdict, Refusal, Sent, Transport};
use super::turn::Turn;
use crate::event::Decoder;
use crate::pool::{Items, Pool};

/// The vectors requests' items are gathered in: a request's decoded events
/// (500 by default, about 730 bytes each) take a few hundred KiB, worth
/// reusing rather than asking the allocator for with every request
/// (src/pool.rs).
static ITEMS: Pool<Items<Item>> = Pool::new(8);

/// Delivers one batch to its end (or until the sink stops); its first
/// request is prepared in its `turn`.
pub(crate) async fn deliver<T: Transport>(sh: Arc<Shared<T>>, raw: Vec<Raw>, mut turn: Turn) {
    let mut items = ITEMS.take().0;
    items.reserve(raw.len());
    let mut invalid = Vec::new();
    // One decoder for the batch: the events of one log batch share their
    // context, decoded once here and borrowed by each event.
    let mut decoder = Decoder::new();
    let lean = sh.transport.reads_points_in_place();
    for r in raw {
        let decoded = if lean {
            decoder.decode_lean(&r.data, &r.context, r.index)
        } else {
            decoder.decode(&r.data, &r.context, r.index)
        };
        match decoded {
            Ok(ev) => items.push(Item {
                pos: r.pos,
                data: r.data,
                context: r.context,
                index: r.index,
                ev,
                attempts: r.attempts,
                retries: r.retries,
                failures: r.failures,
            }),
            Err(e) => invalid.push((r, e.to_string())),
        }
    }
    if !invalid.is_empty() && !quarantine_invalid(&sh, invalid).await {
        return;
    }

    // One request per route (OTLP: per signal), in order of appearance.
    let mut queue: VecDeque<Vec<Item>> = VecDeque::new();
    let of_item: Vec<u64> = items.iter().map(|it| sh.transport.route(&it.ev)).collect();
    if of_item.windows(2).all(|w| w[0] == w[1]) {
        // The usual case: the batch is one request as it is.
        if !items.is_empty() {
            queue.push_back(items);
        }
    } else {
        let mut routes: Vec<u64> = Vec::new();
        for (it, r) in items.into_iter().zip(of_item) {
            match routes.iter().position(|&x| x == r) {
                Some(i) => queue[i].push(it),
                None => {
                    routes.push(r);
                    queue.push_back(vec![it]);
                }
            }
        }
    }

    let mut rng = rand::rngs::SmallRng::from_os_rng();
    while let Some(mut batch) = queue.pop_front() {
        if sh.stop.is_cancelled() {
            return;
        }
        sh.claim(&mut batch);
        drop_unsendable(&sh, &mut batch);
        if !refuse_foreknown(&sh, &mut batch).await {
            return;
        }
        if batch.is_empty() {
            continue;
        }
        let endpoint = sh.requests.fetch_add(1, Ordering::Relaxed);
        for it in &mut batch {
            it.attempts += 1;
        }
        // Built before the clock starts: the latency the adaptive limit
        // follows is the exchange's, not the encoding's (a transport that
        // encodes each event as it sends it, like NATS, builds little here).
        turn.wait().await;
        let request = sh.transport.prepare(&batch, endpoint);
        turn.pass();
        sh.m.in_flight.inc();
        let started = Instant::now();
        let Sent {
            target: url,
            reply,
            wire,
        } = sh.transport.send(request).await;
        let rtt = started.elapsed();
        sh.m.latency.observe(rtt.as_secs_f64());
        sh.m.in_flight.dec();
        let answer = sh.transport.judge(reply, batch.len());

        let mut transport_message = None;
        let outcome = match &answer {
            Answer::Transport { kind, message } => {
                sh.status("error");
                transport_message = Some(message.as_str());
                Outcome::Transport { kind: *kind }
            }
            Answer::Read { status, verdict } => {
                sh.status(status_class(*status));
                sh.answers_too_large.store(false, Ordering::Relaxed);
                Outcome::Success {
                    status: *status,
                    body: verdict,
                }
            }
            Answer::TooLarge { status, limit } => {
                sh.status(status_class(*status));
                if !sh.answers_too_large.swap(true, Ordering::Relaxed) {
                    // Once until an answer is readable again: every retry
                    // of it would say the same.
                    error!(sink = %sh.name, %url, status, limit_bytes = limit, events = batch.len(),
                        "the receiver's answer is longer than this request's limit (4 KiB per event, \
                        between 1 MiB and 64 MiB) and was not read further: the events are kept and \
                        sent again with backoff; check what answers on this endpoint (a broken or \
                        hostile receiver or proxy)");
                }
                Outcome::ResponseTooLarge
            }
            Answer::SomeRefused {
                status,
                reason,
                error,
                ..
            } => {
                sh.status(status_class(*status));
                let refusal = Refusal {
                    kind: reason,
                    status: *status,
                    error: error.clone(),
                };
                sh.transport.learn_refusal(&batch, &refusal);
                Outcome::SomeRefused {
                    status: *status,
                    reason,
                    error,
                }
            }
            Answer::Refused {
                status,
                retry_after,
                error,
            } => {
                sh.status(status_class(*status));
                Outcome::Status {
                    status: *status,
                    retry_after: *retry_after,
                    error,
                }
            }
        };
        let retries: Vec<u32> = batch.iter().map(|i| i.retries).collect();
        let decision = sh.policy.classify(&outcome, &retries);
        sh.limit.observe(
            tokio::time::Instant::now(),
            signal(&outcome, &decision, rtt),
        );
        if let Outcome::Success { body, .. } = &outcome {
            match body {
                BodyVerdict::AcceptedWithWarning(message) => {
                    sh.m.warnings.inc();
                    warn!(sink = %sh.name, %url, events = batch.len(), %message,
                        "the receiver accepted every event but sent a warning");
                }
                BodyVerdict::PartiallyRejected { rejected, message } => {
                    sh.m.partial.inc_by(*rejected);
                    warn!(sink = %sh.name, %url, rejected, events = batch.len(), %message,
                        "the receiver rejected some events without saying which: quarantining the whole request");
                }
                _ => {}
            }
        }
        match decision {
            Decision::Split { reason } => {
                sh.release_retry(&mut batch);
                let second = batch.split_off(batch.len() / 2);
                sh.count(Which::Retries, reason, (batch.len() + second.len()) as u64);
                let events = batch.len() + second.len();
                if let Outcome::SomeRefused { reason, error, .. } = &outcome {
                    // Each one found is quarantined with a warning of its
                    // own: a backlog of them would log every halving twice.
                    debug!(sink = %sh.name, %url, events, refused = reason, response = error,
                        "the receiver refused some events of the request without saying which: \
                        sending it in two halves to find them (they are quarantined alone)");
                } else {
                    warn!(sink = %sh.name, %url, events,
                        "the receiver refused the request as too large (413): sending it in two halves");
                }
                if matches!(
                    answer,
                    Answer::SomeRefused {
                        newer_first: true,
                        ..
                    }
                ) {
                    queue.push_front(batch);
                    queue.push_front(second);
                } else {
                    queue.push_front(second);
                    queue.push_front(batch);
                }
            }
            Decision::Hold {
                reason,
                status,
                message,
            } => {
                if reason == "auth" {
                    sh.m.auth_failures.inc();
                }
                sh.count(Which::Retries, reason, batch.len() as u64);
                let wait = sh.policy.hold(&mut rng);
                let what = if reason == "auth" {
                    "the receiver refused the credentials: fix the sink's auth settings (the events are kept and sent once it accepts them)"
                } else {
                    "the receiver says the endpoint is wrong: fix the sink's endpoint (the events are kept and sent once it answers)"
                };
                error!(sink = %sh.name, %url, status, response = %message, events = batch.len(),
                    retry_in = ?wait, "{what}");
                sh.release_retry(&mut batch);
                if batch.is_empty() {
                    continue;
                }
                queue.push_front(batch);
                if !pause(&sh.stop, wait).await {
                    return;
                }
            }
            Decision::PerEvent {
                verdicts,
                retry_after,
            } => {
                let mut finished = Vec::new();
                let mut again = Vec::new();
                // Per-item 429s: pushback, paced apart (see `pushed_back`).
                let mut busy = Vec::new();
                let mut rejected = Vec::new();
                let (mut sent, mut dups) = (0u64, 0u64);
                let mut retry_reason = "";
                // Finished events first, by reference: the usual answer
                // finishes them all, and the batch then goes back to its pool whole
                // rather than moved out event by event.
                for (item, v) in batch.iter().zip(&verdicts) {
                    match v {
                        Verdict::Delivered => sent += 1,
                        Verdict::Duplicate => dups += 1,
                        _ => continue,
                    }
                    finished.push(item.pos);
                }
                if finished.len() == batch.len() {
                    ITEMS.give(Items(batch));
                } else {
                    for (mut item, v) in batch.into_iter().zip(verdicts) {
                        match v {
                            Verdict::Delivered | Verdict::Duplicate => {}
                            Verdict::Retry { reason, counted } => {
                                sh.count(Which::Retries, reason, 1);
                                retry_reason = reason;
                                if counted {
                                    item.retries += 1;
                                }
                                if reason == "item_429" {
                                    busy.push(item);
                                } else {
                                    again.push(item);
                                }
                            }
                            Verdict::Reject(r) => rejected.push((item, r)),
                        }
                    }
                }
                if matches!(outcome, Outcome::Success { .. }) {
                    sh.m.bytes.inc_by(wire as u64);
                }
                sh.m.sent.inc_by(sent);
                sh.m.duplicates.inc_by(dups);
                sh.finished(finished);
                if !rejected.is_empty() {
                    for (_, r) in &rejected {
                        sh.count(Which::Rejected, r.kind, 1);
                    }
                    if !quarantine(&sh, rejected).await {
                        return;
                    }
                }
                sh.release_retry(&mut again);
                sh.release_retry(&mut busy);
                if sent + dups > 0 {
                    let _ = sh.back.send(Back::Alive);
                }
                if !busy.is_empty() {
                    pushed_back(&sh, busy, &mut rng);
                }
                if !again.is_empty() {
                    requeue(&sh, again, &outcome, retry_after, &mut rng, |wait, n| {
                        match transport_message {
                            Some(m) => warn!(sink = %sh.name, %url, events = n, error = %m,
                                retry_in = ?wait, "request failed; sending again"),
                            None => {
                                warn!(sink = %sh.name, %url, events = n, reason = retry_reason,
                                retry_in = ?wait, "the receiver asked for a retry")
                            }
                        }
                    });
                }
            }
        }
    }
}

/// Finishes, unsent, the claimed events of `batch` the transport can never
/// send (a log record to a metrics receiver), counting them in
/// `holdfast_dropped_events_total` under the transport's reason.
fn drop_unsendable<T: Transport>(sh: &Shared<T>, batch: &mut Vec<Item>) {
    if batch
        .iter()
        .all(|i| sh.transport.unsendable(&i.ev).is_none())
    {
        return;
    }
    let mut gone = Vec::new();
    batch.retain(|i| match sh.transport.unsendable(&i.ev) {
        None => true,
        Some(reason) => {
            sh.metrics
                .drop_events(&format!("sink:{}", sh.name), reason, 1);
            gone.push(i.pos);
            false
        }
    });
    sh.finished(gone);
}

/// Quarantines, unsent, the claimed events of `batch` the transport knows
/// the receiver refuses ([`Transport::foreknown`]). False when the sink
/// stopped while the quarantine was full.
async fn refuse_foreknown<T: Transport>(sh: &Arc<Shared<T>>, batch: &mut Vec<Item>) -> bool {
    if batch
        .iter()
        .all(|i| sh.transport.foreknown(&i.ev).is_none())
    {
        return true;
    }
    let mut refused = Vec::new();
    let mut kept = Vec::with_capacity(batch.len());
    for item in batch.drain(..) {
        match sh.transport.foreknown(&item.ev) {
            None => kept.push(item),
            Some(r) => {
                sh.count(Which::Rejected, r.kind, 1);
                let rejection = Rejection {
                    kind: r.kind,
                    reason: format!(
                        "refused by the receiver (HTTP {}): {}; known from earlier answers, not sent",
                        r.status, r.kind
                    ),
                    status: Some(r.status),
                    error: r.error,
                };
                refused.push((item, rejection));
            }
        }
    }
    *batch = kept;
    // The transport may have learnt more between the two looks.
    refused.is_empty() || quarantine(sh, refused).await
}

/// The `status` label of `holdfast_sink_requests_total` for an answer's
/// status.
fn status_class(status: u16) -> &'static str {
    match status {
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}
