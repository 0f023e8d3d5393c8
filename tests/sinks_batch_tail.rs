//! When a network sink's batch goes: full, `batch_timeout` after its first
//! event, or, right after a full batch, once reading finds nothing new for
//! a moment (the tail of a burst: a backlog drained, a file read to its
//! end). A trickle that never fills a batch still waits `batch_timeout`,
//! so it keeps its few large requests (docs/sinks.md, "Batching").

#[path = "common/sink_harness.rs"]
mod harness;
#[path = "common/receivers.rs"]
mod receivers;

use std::time::Duration;

use harness::Harness;
use receivers::Api;

/// An `elasticsearch` sink of batches of 100, one request at a time.
async fn sink(batch_timeout: Duration) -> Harness {
    let mut h = Harness::new(Api::Elasticsearch).await;
    h.options.batch_max_events = 100;
    h.options.concurrency = 1;
    h.options.batch_timeout = batch_timeout;
    h
}

/// Ten events a tenth of a second apart: pauses longer than the tail's
/// lull, all well inside one batch_timeout.
async fn trickle(h: &mut Harness) {
    for _ in 0..10 {
        h.append(1).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The number of events of each request the receiver saw, in order.
fn request_sizes(h: &Harness) -> Vec<usize> {
    h.receiver.state().batches.iter().map(Vec::len).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tail_of_a_burst_goes_without_waiting_out_batch_timeout() {
    // Far longer than the wait below: the last 50 can only have gone as
    // the tail of the burst.
    let mut h = sink(Duration::from_secs(600)).await;
    h.append(250).await;
    h.start();
    h.wait_caught_up().await;
    h.stop().await;
    h.assert_nothing_lost();
    assert_eq!(request_sizes(&h), [100, 100, 50]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickle_that_never_fills_a_batch_waits_for_batch_timeout() {
    let mut h = sink(Duration::from_secs(5)).await;
    h.start();
    trickle(&mut h).await;
    h.wait_caught_up().await;
    h.stop().await;
    h.assert_nothing_lost();
    assert_eq!(request_sizes(&h), [10], "one request for the whole trickle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_tail_of_a_burst_a_trickle_waits_again() {
    let mut h = sink(Duration::from_secs(5)).await;
    h.append(130).await;
    h.start();
    h.wait_for("the burst at the receiver", Duration::from_secs(20), |h| {
        h.receiver.state().stored.len() == 130
    })
    .await;
    trickle(&mut h).await;
    h.wait_caught_up().await;
    h.stop().await;
    h.assert_nothing_lost();
    // The burst's tail (30) went at once; the trickle after it was not cut
    // into a request per event.
    assert_eq!(request_sizes(&h), [100, 30, 10]);
}

/// The `file` sink follows the same rule: its burst's tail is written
/// without waiting out `batch_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_sink_writes_the_tail_of_a_burst_at_once() {
    use holdfast::sinks::file::{run, FileSinkOptions};
    use tokio_util::sync::CancellationToken;

    let mut h = Harness::new(Api::Elasticsearch).await;
    h.append(250).await;
    let out = h.dir.path().join("file-out");
    let opts = FileSinkOptions {
        dir: out.clone(),
        inputs: vec![harness::SOURCE.into()],
        max_file_bytes: 64 << 20,
        max_bytes: 1 << 30,
        batch_max_events: 100,
        batch_timeout: Duration::from_secs(600),
    };
    let stop = CancellationToken::new();
    let task = tokio::spawn(run(
        "file".into(),
        opts,
        h.log.clone(),
        h.metrics.clone(),
        stop.clone(),
    ));
    let lines = || -> usize {
        std::fs::read_dir(&out)
            .map(|d| {
                d.flatten()
                    .map(|e| std::fs::read(e.path()).unwrap_or_default())
                    .map(|b| b.iter().filter(|&&c| c == b'\n').count())
                    .sum()
            })
            .unwrap_or(0)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while lines() < 250 {
        assert!(
            std::time::Instant::now() < deadline,
            "the file sink wrote {} of 250 lines in 20 s (batch_timeout 600 s)",
            lines()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(lines(), 250);
}
