//! A network sink against a receiver that pushes back or goes down (issue
//! 11, items 4 and 5): it keeps delivering under pushback without
//! quarantining anything for a 429, adapts its requests in flight, and
//! resumes within about a second of a receiver's return after an outage,
//! probing it about once a second meanwhile. Every test checks, while it
//! waits, that the cursor never passes an event that is not at the receiver
//! or in the quarantine; and at the end that nothing was lost and every
//! duplicate is explained by a lost answer.

#[path = "common/sink_harness.rs"]
mod harness;
#[path = "common/receivers.rs"]
mod receivers;

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use harness::{Harness, SINK};
use holdfast::metrics::SinkLabels;
use receivers::{Api, RateLimit};

fn limit_now(h: &Harness) -> i64 {
    h.metrics
        .sinks
        .concurrency_limit
        .get_or_create(&SinkLabels { sink: SINK.into() })
        .get()
}

/// A receiver that takes at most R documents a second and answers per-item
/// 429 above that, the way Elasticsearch's write queue does: everything
/// arrives, nothing is quarantined for 429 (even with `max_attempts = 2`),
/// and the sink lowered its requests in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_receiver_gets_everything_and_nothing_is_quarantined_for_429() {
    let mut h = Harness::new(Api::Elasticsearch).await;
    h.options.batch_max_events = 100;
    h.options.concurrency = 8;
    h.options.max_attempts = 2;
    h.options.backoff_initial = Duration::from_millis(50);
    h.options.backoff_max = Duration::from_secs(1);
    h.receiver.state().rate = Some(RateLimit::new(1000));
    for _ in 0..4 {
        h.append(1000).await;
    }
    h.start();
    let lowest = AtomicI64::new(i64::MAX);
    let n = h.ids.len() as u64;
    h.wait_for(
        "the cursor to pass every event",
        Duration::from_secs(60),
        |h| {
            lowest.fetch_min(limit_now(h), Ordering::Relaxed);
            h.committed() == n
        },
    )
    .await;
    h.stop().await;

    assert!(
        h.receiver.state().busy > 0,
        "the receiver never had to push back"
    );
    assert!(h.by_reason("retries", "item_429") > 0);
    assert!(
        h.quarantined().is_empty(),
        "quarantined under pushback: {:?}",
        h.quarantined().iter().map(|r| &r.kind).collect::<Vec<_>>()
    );
    assert_eq!(h.by_reason("rejected", "retries_exhausted"), 0);
    let lowest = lowest.load(Ordering::Relaxed);
    assert!(lowest < 8, "the concurrency limit never moved ({lowest})");
    h.assert_nothing_lost();
    h.assert_duplicates_explained();
}

/// One event in ten refused with a per-item 429, three times each, with
/// `max_attempts = 2`: a per-item 429 is pushback, retried until accepted,
/// never quarantined; and a steady share of refusals does not throttle the
/// sink to one request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_item_429s_are_retried_until_accepted_without_counting() {
    let mut h = Harness::new(Api::Elasticsearch).await;
    h.options.batch_max_events = 50;
    h.options.concurrency = 4;
    h.options.max_attempts = 2;
    let ids = h.append(1000).await;
    {
        let mut st = h.receiver.state();
        for id in ids.iter().step_by(10) {
            st.item_status.insert(id.clone(), [429, 429, 429].into());
        }
    }
    h.start();
    h.wait_caught_up().await;
    h.stop().await;
    assert!(h.quarantined().is_empty());
    assert_eq!(h.by_reason("retries", "item_429"), 300);
    assert_eq!(h.counter("sent"), 1000);
    let st = h.receiver.state();
    for id in ids.iter().step_by(10) {
        assert_eq!(st.arrivals[id], 4, "three refusals, then accepted");
    }
    drop(st);
    h.assert_nothing_lost();
    h.assert_duplicates_explained();
}

/// The receiver answers 500 long enough for the backoff to grow to many
/// seconds. Meanwhile it sees about one small request a second (a probe),
/// not a retry of every batch; once it answers again, delivery resumes
/// within about a second, whatever the backoff had grown to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_outage_delivery_resumes_within_about_a_second() {
    let mut h = Harness::new(Api::Elasticsearch).await;
    h.options.concurrency = 2;
    h.options.batch_max_events = 10;
    h.options.backoff_initial = Duration::from_millis(500);
    h.options.backoff_max = Duration::from_secs(60);
    h.receiver.state().failing = Some(500);
    h.append(200).await;
    h.start();
    // The first batches, then six probes: the backoff (500 ms doubling) of
    // the events probed has grown past 8 s by then.
    h.wait_for("eight failed requests", Duration::from_secs(30), |h| {
        h.receiver.state().requests >= 8
    })
    .await;
    let (during, first_at) = {
        let st = h.receiver.state();
        (st.requests, st.times[0])
    };
    let outage = first_at.elapsed();
    assert_eq!(h.committed(), 0);
    // Not hammered: the first batches, then about one request a second.
    let allowed = 2 + outage.as_secs_f64().ceil() as u64 + 2;
    assert!(
        during <= allowed,
        "{during} requests in {outage:?} while the receiver was down"
    );

    let back = Instant::now();
    h.receiver.state().failing = None;
    h.wait_caught_up().await;
    h.stop().await;
    let st = h.receiver.state();
    let first_ok = st
        .statuses
        .iter()
        .zip(&st.times)
        .find(|(&s, &t)| s == 200 && t >= back)
        .map(|(_, &t)| t)
        .expect("an answer after the return");
    let resumed = first_ok - back;
    assert!(
        resumed < Duration::from_millis(2000),
        "delivery resumed {resumed:?} after the receiver came back"
    );
    drop(st);
    assert!(h.quarantined().is_empty());
    assert!(h.by_reason("retries", "http_5xx") > 0);
    h.assert_nothing_lost();
    h.assert_duplicates_explained();
}
