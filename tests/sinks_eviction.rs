//! A network sink whose events are evicted while a request carries them
//! (`drop_oldest` on a tiny log): counted by the answer. Delivered, they are
//! not counted; answered with a retry (here a timeout), they are counted
//! once and never sent again. Either way the sink goes on to the end.

#[path = "common/sink_harness.rs"]
mod harness;
#[path = "common/receivers.rs"]
mod receivers;

use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::{Harness, SINK};
use holdfast::metrics::Metrics;
use holdfast::seglog::{FsyncPolicy, Log, LogOptions, WhenFull};
use receivers::{Api, Fault};

/// The harness with a log of four 4 KiB segments under `drop_oldest`.
async fn tiny_log(request_timeout: Duration) -> Harness {
    let mut h = Harness::new(Api::Otlp).await;
    h.log = Log::open(
        h.dir.path().join("tiny"),
        LogOptions {
            fsync: FsyncPolicy::Never,
            segment_bytes: 4096,
            max_bytes: 16384,
            when_full: WhenFull::DropOldest,
            ..LogOptions::default()
        },
    )
    .unwrap();
    h.metrics = Arc::new(Metrics::new(Some(h.log.clone())));
    h.options.request_timeout = request_timeout;
    h
}

fn lost(h: &Harness) -> u64 {
    let s = h.log.stats();
    let c = s.consumers.iter().find(|c| c.name == SINK).unwrap();
    c.lost[0].1
}

async fn until(what: &str, limit: Duration, cond: impl Fn() -> bool) {
    let end = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Sends 10 events in a request the receiver answers slowly, and evicts
/// their segment while it waits; then lets the sink finish everything.
async fn evict_while_on_the_wire(h: &mut Harness, slow: Duration) -> Vec<String> {
    let first = h.append(10).await;
    h.receiver.script([Fault::Slow(slow)]);
    h.start();
    until("the slow request", Duration::from_secs(10), || {
        !h.receiver.state().statuses.is_empty()
    })
    .await;
    while h.log.stats().first_seq < 10 {
        h.append(10).await;
    }
    let end = h.ids.len() as u64;
    let log = h.log.clone();
    until("the sink at the end", Duration::from_secs(20), || {
        let s = log.stats();
        s.consumers
            .iter()
            .any(|c| c.name == SINK && c.committed == end)
    })
    .await;
    first
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicted_on_the_wire_then_delivered_is_not_counted() {
    let mut h = tiny_log(Duration::from_secs(5)).await;
    let first = evict_while_on_the_wire(&mut h, Duration::from_millis(1500)).await;
    let st = h.receiver.state();
    assert!(first.iter().all(|id| st.stored.contains_key(id)));
    let delivered = h
        .ids
        .iter()
        .filter(|id| st.stored.contains_key(*id))
        .count() as u64;
    assert_eq!(delivered + lost(&h), h.ids.len() as u64);
    assert_eq!(h.log.stats().consumers[0].in_doubt, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicted_on_the_wire_then_retried_is_counted_once_and_never_sent_again() {
    // The answer comes after the sink gave up: a retry, for the sink.
    let mut h = tiny_log(Duration::from_secs(1)).await;
    let first = evict_while_on_the_wire(&mut h, Duration::from_secs(3)).await;
    let st = h.receiver.state();
    for id in &first {
        assert_eq!(
            st.arrivals.get(id),
            Some(&1),
            "{id} sent after its eviction"
        );
    }
    // Stored by the request the sink timed out, so counted though the
    // receiver has them (the receiver's answer was a timeout); every other
    // event is delivered or counted.
    let others_missing = h.ids[10..]
        .iter()
        .filter(|id| !st.stored.contains_key(*id))
        .count() as u64;
    assert_eq!(lost(&h), first.len() as u64 + others_missing);
}
