//! The `elasticsearch` sink against a test receiver that answers `_bulk`
//! exactly as Elasticsearch documents it, with scripted faults. Every test
//! checks, while it waits, that the cursor never passes an event that is not
//! at the receiver or in the quarantine; and at the end that nothing was
//! lost and every duplicate is explained by a lost answer.

#[path = "common/sink_harness.rs"]
mod harness;
#[path = "common/receivers.rs"]
mod receivers;

use std::time::Duration;

use harness::Harness;
use holdfast::sinks::Auth;
use receivers::{Api, Fault};

async fn es() -> Harness {
    Harness::new(Api::Elasticsearch).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_with_errors_true_is_judged_item_by_item() {
    let mut h = es().await;
    h.options.batch_max_events = 20;
    h.options.concurrency = 1;
    let ids = h.append(10).await;
    {
        let mut st = h.receiver.state();
        // Already delivered earlier (its answer lost then): a 409 now.
        st.stored.insert(ids[1].clone(), 1);
        st.explained.insert(ids[1].clone());
        // Busy once, then accepted.
        st.item_status.insert(ids[2].clone(), [429].into());
        // A mapping error: never accepted.
        st.reject.insert(ids[3].clone());
        // Unavailable twice, then accepted.
        st.item_status.insert(ids[4].clone(), [503, 503].into());
        // Unavailable every time: max_attempts (3) answers, then
        // quarantined.
        st.item_status
            .insert(ids[5].clone(), [503, 503, 503, 503].into());
        // Busy many times: pushback, retried until accepted.
        st.item_status
            .insert(ids[6].clone(), [429, 429, 429, 429, 429].into());
    }
    h.start();
    h.wait_caught_up().await;
    h.stop().await;

    // Every answer was an HTTP 200, and yet two events are not delivered.
    assert!(h.receiver.state().statuses.iter().all(|&s| s == 200));
    let q = h.quarantined();
    assert_eq!(q.len(), 2, "{q:#?}");
    let mapping = q.iter().find(|r| r.id == ids[3]).unwrap();
    assert_eq!(mapping.kind, "rejected");
    assert_eq!(mapping.status, Some(400));
    assert!(
        mapping
            .error
            .starts_with("mapper_parsing_exception: failed to parse field"),
        "{}",
        mapping.error
    );
    assert_eq!(mapping.attempts, 1);
    let busy = q.iter().find(|r| r.id == ids[5]).unwrap();
    assert_eq!(busy.kind, "retries_exhausted");
    assert_eq!(busy.reason, "retries exhausted");
    assert_eq!(busy.status, Some(503));
    assert_eq!(busy.attempts, 3);
    assert!(busy.error.starts_with("unavailable_shards_exception"));

    let st = h.receiver.state();
    for (i, id) in ids.iter().enumerate() {
        if i != 3 && i != 5 {
            assert_eq!(st.stored.get(id), Some(&1), "event {i}");
        }
    }
    // Retries resent only the events that needed it, with the same _id.
    assert_eq!(st.arrivals[&ids[0]], 1);
    assert_eq!(st.arrivals[&ids[2]], 2);
    assert_eq!(st.arrivals[&ids[4]], 3);
    assert_eq!(st.arrivals[&ids[5]], 3);
    assert_eq!(st.arrivals[&ids[6]], 6);
    assert_eq!(st.conflicts, [ids[1].clone()]);
    drop(st);
    assert_eq!(h.counter("sent"), 7);
    assert_eq!(h.counter("duplicates"), 1);
    assert_eq!(h.by_reason("retries", "item_429"), 6);
    assert_eq!(h.by_reason("retries", "item_5xx"), 4);
    assert_eq!(h.by_reason("quarantined", "rejected"), 1);
    assert_eq!(h.by_reason("quarantined", "retries_exhausted"), 1);
    h.assert_nothing_lost();
    h.assert_duplicates_explained();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_retried_until_accepted() {
    let mut h = es().await;
    h.receiver.script([
        Fault::status(500),
        Fault::status(502),
        Fault::status(503),
        Fault::status(504),
        Fault::status(408),
        Fault::status(429),
        Fault::status(500),
        Fault::status(500),
    ]);
    h.append(50).await;
    h.start();
    h.wait_caught_up().await;
    h.stop().await;
    assert!(h.quarantined().is_empty());
    assert!(h.by_reason("retries", "http_5xx") >= 6 * 10);
    assert_eq!(h.counter("sent"), 50);
    h.assert_nothing_lost();
    h.assert_duplicates_explained();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_honoured() {
    let mut h = es().await;
    h.options.concurrency = 1;
    h.receiver.script([Fault::Status {
        status: 503,
        retry_after: Some("1".into()),
    }]);
    h.append(3).await;
    h.start();
    h.wait_caught_up().await;
    h.stop().await;
    let st = h.receiver.state();
    assert_eq!(st.statuses[..2], [503, 200]);
    let gap = st.times[1] - st.times[0];
    // backoff_max is 50ms: only Retry-After explains the wait.
    assert!(gap >= Duration::from_secs(1), "resent after {gap:?}");
    drop(st);
    h.assert_nothing_lost();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_answer_is_resent_with_the_same_ids_and_the_409s_count_as_delivered() {
    let mut h = es().await;
    h.options.concurrency = 1;
    h.receiver.script([Fault::LoseAnswer]);
    let ids = h.append(10).await;
    h.start();
    h.wait_caught_up().await;
    h.stop().await;
    let st = h.receiver.state();
    assert_eq!(st.statuses[0], 0, "the first answer was lost");
    // The receiver had stored all ten; the resend carried the same _ids and
    // got 409 for each: delivered, not stored twice.
    assert_eq!(st.batches[0], st.batches[1]);
    assert_eq!(st.conflicts, ids);
    assert!(ids.iter().all(|id| st.stored[id] == 1));
    drop(st);
    assert_eq!(h.counter("duplicates"), 10);
    assert_eq!(h.counter("sent"), 0);
    assert!(h.by_reason("retries", "connection") >= 10);
    assert!(h.quarantined().is_empty());
    h.assert_nothing_lost();
    h.assert_duplicates_explained();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_is_resent_and_the_receiver_keeps_one_copy() {
    let mut h = es().await;
    h.options.concurrency = 1;
    h.options.request_timeout = Duration::from_millis(300);
    h.receiver.script([Fault::Slow(Duration::from_millis(900))]);
    let ids = h.append(5).await;
    h.start();
    h.wait_caught_up().await;
    h.stop().await;
    assert!(h.by_reason("retries", "timeout") >= 5);
    assert_eq!(h.counter("duplicates"), 5);
    assert_eq!(h.receiver.state().conflicts, ids);
    h.assert_nothing_lost();
    h.assert_duplicates_explained();
}

/// With several requests in flight, a slow first request holds the cursor
/// at its first event while later ones are delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cursor_waits_for_the_slowest_request_in_flight() {
    let mut h = es().await;
    h.options.concurrency = 4;
    h.options.batch_max_events = 5;
    h.receiver.script([Fault::Slow(Duration::from_millis(700))]);
    let ids = h.append(40).await;
    h.start();
    h.wait_for("later batches delivered", Duration::from_secs(10), |h| {
        let st = h.receiver.state();
        st.stored.len() >= 25
    })
    .await;
    // The slow request's events are at the receiver but their answer has
    // not come back: they are not finished, so the cursor stays at the
    // first of them although later requests were answered.
    let first_slow = {
        let st = h.receiver.state();
        assert_eq!(st.explained.len(), 5);
        ids.iter().position(|id| st.explained.contains(id)).unwrap() as u64
    };
    assert!(
        h.committed() <= first_slow,
        "committed {} passed {first_slow}",
        h.committed()
    );
    h.wait_caught_up().await;
    h.stop().await;
    assert_eq!(h.counter("sent"), 40);
    h.assert_nothing_lost();
    h.assert_duplicates_explained();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_keep_the_data_until_they_work() {
    let mut h = es().await;
    let token = h.dir.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    h.http.auth = Some(Auth::Bearer { token_file: token });
    h.options.concurrency = 1;
    h.receiver
        .script([Fault::status(401), Fault::status(401), Fault::status(403)]);
    h.append(10).await;
    h.start();
    h.wait_caught_up().await;
    h.stop().await;
    assert!(
        h.quarantined().is_empty(),
        "a key problem never quarantines"
    );
    assert_eq!(h.counter("auth_failures"), 3);
    assert_eq!(h.counter("sent"), 10);
    let st = h.receiver.state();
    assert!(st
        .authorization
        .iter()
        .all(|a| a.as_deref() == Some("Bearer s3cret")));
    drop(st);
    h.assert_nothing_lost();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_large_requests_are_split_and_a_single_oversized_event_quarantined() {
    let mut h = es().await;
    h.options.batch_max_events = 16;
    h.options.concurrency = 1;
    let mut envs: Vec<_> = (0..16)
        .map(|i| harness::log_event(i, harness::SOURCE, "dev1"))
        .collect();
    if let Some(holdfast::event::Record::Log(l)) = &mut envs[7].record {
        l.body = Some(opentelemetry_proto::tonic::common::v1::AnyValue {
            value: Some(
                opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(
                    "x".repeat(8000),
                ),
            ),
        });
    }
    let ids = h.append_envelopes(&envs).await;
    // Room for about four ordinary events per request.
    h.receiver.state().max_body = Some(2500);
    h.start();
    h.wait_caught_up().await;
    h.stop().await;
    let q = h.quarantined();
    assert_eq!(q.len(), 1);
    assert_eq!(q[0].id, ids[7]);
    assert_eq!(q[0].kind, "too_large");
    assert_eq!(q[0].status, Some(413));
    assert!(h.receiver.state().statuses.contains(&413));
    assert!(h.by_reason("retries", "too_large_split") > 0);
    assert_eq!(h.counter("sent"), 15);
    h.assert_nothing_lost();
    h.assert_duplicates_explained();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_receiver_holds_everything() {
    let mut h = es().await;
    // A port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    h.append(5).await;
    let mut kind = h.kind();
    if let holdfast::sinks::SinkKind::Elasticsearch(o) = &mut kind {
        o.endpoints = vec![format!("http://127.0.0.1:{port}").parse().unwrap()];
    }
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(kind.run(&holdfast::component::ComponentContext::new(
        harness::SINK.into(),
        h.log.clone(),
        h.metrics.clone(),
        stop.clone(),
    )));
    h.wait_for("connection retries", Duration::from_secs(10), |h| {
        h.by_reason("retries", "connect") >= 15
    })
    .await;
    stop.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(h.committed(), 0);
    assert!(h.quarantined().is_empty());
    // Once the receiver is there, everything goes.
    h.start();
    h.wait_caught_up().await;
    h.stop().await;
    h.assert_nothing_lost();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_go_to_templated_indices_with_basic_or_api_key_auth() {
    for (auth, expect) in [
        ("basic", "Basic ZWxhc3RpYzpwYXNzIHdvcmQ="),
        (
            "apikey",
            "ApiKey VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw==",
        ),
    ] {
        let mut h = es().await;
        let secret = h.dir.path().join("secret");
        h.http.auth = Some(match auth {
            "basic" => {
                std::fs::write(&secret, "pass word\n").unwrap();
                Auth::Basic {
                    user: "elastic".into(),
                    password_file: secret,
                }
            }
            _ => {
                std::fs::write(
                    &secret,
                    "VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw==",
                )
                .unwrap();
                Auth::ApiKey { key_file: secret }
            }
        });
        h.http.compression = holdfast::sinks::Compression::Gzip;
        h.index = holdfast::sinks::Template::parse("logs-{source}-{date}").unwrap();
        let ids = h.append(3).await;
        h.start();
        h.wait_caught_up().await;
        h.stop().await;
        let st = h.receiver.state();
        assert!(st
            .authorization
            .iter()
            .all(|a| a.as_deref() == Some(expect)));
        assert!(st
            .content_encodings
            .iter()
            .all(|e| e.as_deref() == Some("gzip")));
        let doc = &st.docs[&ids[0]];
        assert_eq!(st.indices[&ids[0]], "logs-app-2024.05.01");
        // Lean documents: the `_id` the doc is keyed by carries the id.
        assert!(doc.get("event_id").is_none(), "{doc}");
        assert_eq!(doc["message"], "event 0");
        assert_eq!(doc["@timestamp"], "2024-05-01T12:00:00.000Z");
        assert_eq!(doc["resource"]["host.name"], "dev1");
        assert_eq!(doc["severity_text"], "INFO");
    }
}

/// A stop in the middle and a restart: the sink resumes from its cursor;
/// whatever it sends twice is explained by answers it never got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_resumes_from_the_cursor() {
    let mut h = es().await;
    h.options.concurrency = 2;
    h.options.batch_max_events = 5;
    h.receiver
        .script([Fault::status(503), Fault::Slow(Duration::from_millis(200))]);
    h.append(30).await;
    h.start();
    h.wait_for("some progress", Duration::from_secs(10), |h| {
        h.committed() > 0
    })
    .await;
    h.stop().await;
    let at = h.committed();
    {
        // Events delivered past the cursor — read ahead of one still
        // unfinished (waiting for its retry) when the sink stopped — are
        // sent again after the restart by design (docs/sinks.md), and
        // answered 409.
        let ahead: Vec<String> = h.ids[at as usize..].to_vec();
        let mut st = h.receiver.state();
        for id in ahead {
            if st.stored.contains_key(&id) {
                st.explained.insert(id);
            }
        }
    }
    h.append(10).await;
    h.start();
    h.wait_caught_up().await;
    h.stop().await;
    assert!(at > 0);
    h.assert_nothing_lost();
    h.assert_duplicates_explained();
    // Each event stored once: resends after the restart were 409s.
    assert_eq!(h.counter("sent"), 40);
}
