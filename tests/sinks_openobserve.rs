//! The `openobserve` sink against a test receiver answering `_json`
//! ingestion with OpenObserve's `status[]` counts.

#[path = "common/sink_harness.rs"]
mod harness;
#[path = "common/receivers.rs"]
mod receivers;

use harness::Harness;
use receivers::{Api, Fault};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_reach_their_stream() {
    let mut h = Harness::new(Api::OpenObserve).await;
    h.receiver.script([Fault::status(500), Fault::status(503)]);
    let ids = h.append(30).await;
    h.start();
    h.wait_caught_up().await;
    h.stop().await;
    let st = h.receiver.state();
    assert!(st.paths.iter().all(|p| p == "/api/default/logs/_json"));
    let doc = &st.docs[&ids[3]];
    assert_eq!(doc["_timestamp"], 1_714_564_800_000_000i64);
    assert_eq!(doc["message"], "event 3");
    drop(st);
    assert_eq!(h.counter("sent"), 30);
    h.assert_nothing_lost();
    h.assert_duplicates_explained();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_counts_quarantine_the_request() {
    let mut h = Harness::new(Api::OpenObserve).await;
    h.options.concurrency = 1;
    h.receiver.state().failed.push_back(3);
    h.append(20).await;
    h.start();
    h.wait_caught_up().await;
    h.stop().await;
    let q = h.quarantined();
    assert_eq!(q.len(), 10);
    for r in &q {
        assert_eq!(
            r.reason,
            "partially rejected: 3 of 10; receiver did not say which"
        );
        assert_eq!(r.error, "too old data, only last 5h data can be ingested");
    }
    assert_eq!(h.counter("partially_rejected"), 3);
    assert_eq!(h.counter("sent"), 10);
    h.assert_nothing_lost();
}
