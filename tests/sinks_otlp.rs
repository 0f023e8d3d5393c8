//! The `otlp_http` sink against a test OTLP/HTTP receiver: requests
//! regrouped by resource and scope, one endpoint per signal, protobuf and
//! JSON, gzip, and `partial_success` handled as the issue says.

#[path = "common/sink_harness.rs"]
mod harness;
#[path = "common/receivers.rs"]
mod receivers;

use harness::{kv, log_event, Harness, SOURCE};
use holdfast::event::{Envelope, EventId, Record};
use holdfast::sinks::{Compression, OtlpEncoding};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, Gauge, Metric, NumberDataPoint,
};
use opentelemetry_proto::tonic::trace::v1::Span;
use receivers::{Api, Fault};

fn span(n: u8) -> Envelope {
    let id = EventId::random();
    Envelope {
        id: id.0.to_vec(),
        source: SOURCE.into(),
        record: Some(Record::Span(Span {
            trace_id: vec![n; 16],
            span_id: vec![n; 8],
            name: "GET /".into(),
            attributes: vec![kv("test.id", &id.to_hex())],
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn gauge(n: u64) -> Envelope {
    let id = EventId::random();
    Envelope {
        id: id.0.to_vec(),
        source: SOURCE.into(),
        record: Some(Record::Metric(Metric {
            name: "temperature".into(),
            data: Some(metric::Data::Gauge(Gauge {
                data_points: vec![NumberDataPoint {
                    attributes: vec![kv("test.id", &id.to_hex())],
                    time_unix_nano: 1_714_564_800_000_000_000 + n,
                    value: Some(number_data_point::Value::AsDouble(21.5)),
                    ..Default::default()
                }],
            })),
            ..Default::default()
        })),
        ..Default::default()
    }
}

async fn mixed(h: &mut Harness) {
    let mut envs = Vec::new();
    for i in 0..6u64 {
        envs.push(log_event(i, SOURCE, if i % 2 == 0 { "a" } else { "b" }));
    }
    envs.push(span(1));
    envs.push(gauge(1));
    envs.push(span(2));
    envs.push(gauge(2));
    // Another source: not this sink's input, skipped (and committed past).
    envs.push(log_event(99, "other", "a"));
    h.append_envelopes(&envs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_go_to_their_endpoints_regrouped_by_resource_and_scope() {
    for encoding in [OtlpEncoding::Protobuf, OtlpEncoding::Json] {
        let mut h = Harness::new(Api::Otlp).await;
        h.otlp_encoding = encoding;
        h.options.batch_max_events = 100;
        h.options.batch_timeout = std::time::Duration::from_millis(50);
        h.http.compression = Compression::Gzip;
        mixed(&mut h).await;
        h.start();
        h.wait_caught_up().await;
        h.stop().await;
        let st = h.receiver.state();
        assert_eq!(st.stored.len(), 10, "the other source's event is not sent");
        let mut shapes = st.otlp_shapes.clone();
        shapes.sort();
        assert_eq!(
            shapes,
            [
                ("/v1/logs".to_string(), 2, 2, 6),
                ("/v1/metrics".to_string(), 1, 1, 2),
                ("/v1/traces".to_string(), 1, 1, 2),
            ],
            "{encoding:?}"
        );
        assert!(st
            .content_encodings
            .iter()
            .all(|e| e.as_deref() == Some("gzip")));
        drop(st);
        assert!(!h.ids.is_empty());
        assert_eq!(h.counter("sent"), 10);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_success_quarantines_the_whole_request() {
    for encoding in [OtlpEncoding::Protobuf, OtlpEncoding::Json] {
        let mut h = Harness::new(Api::Otlp).await;
        h.otlp_encoding = encoding;
        h.options.batch_max_events = 10;
        h.options.batch_timeout = std::time::Duration::from_millis(50);
        h.options.concurrency = 1;
        h.receiver
            .state()
            .partial
            .push_back((2, "2 records were too old".into()));
        let ids = h.append(20).await;
        h.start();
        h.wait_caught_up().await;
        h.stop().await;
        let q = h.quarantined();
        assert_eq!(q.len(), 10, "{encoding:?}");
        let first: std::collections::HashSet<&String> = ids[..10].iter().collect();
        for r in &q {
            assert!(first.contains(&r.id));
            assert_eq!(r.kind, "partially_rejected");
            assert_eq!(
                r.reason,
                "partially rejected: 2 of 10; receiver did not say which"
            );
            assert_eq!(r.error, "2 records were too old");
            assert_eq!(r.status, Some(200));
        }
        assert_eq!(h.counter("partially_rejected"), 2);
        assert_eq!(h.by_reason("quarantined", "partially_rejected"), 10);
        // Not retried: the OTLP specification forbids it.
        assert_eq!(h.receiver.state().arrivals[&ids[0]], 1);
        assert_eq!(h.counter("sent"), 10);
        h.assert_nothing_lost();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warning_without_rejections_is_delivered_and_counted() {
    let mut h = Harness::new(Api::Otlp).await;
    h.options.concurrency = 1;
    h.receiver
        .state()
        .partial
        .push_back((0, "the field severity_text is deprecated".into()));
    h.append(10).await;
    h.start();
    h.wait_caught_up().await;
    h.stop().await;
    assert!(h.quarantined().is_empty());
    assert_eq!(h.counter("warnings"), 1);
    assert_eq!(h.counter("sent"), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_retried_or_rejected_by_status() {
    let mut h = Harness::new(Api::Otlp).await;
    h.options.concurrency = 1;
    h.options.batch_max_events = 5;
    h.receiver.script([
        Fault::status(503),
        Fault::status(429),
        Fault::status(400),
        Fault::LoseAnswer,
    ]);
    let ids = h.append(10).await;
    h.start();
    h.wait_caught_up().await;
    h.stop().await;
    // The 400 rejected one request of five events for good, with the
    // receiver's google.rpc.Status message.
    let q = h.quarantined();
    assert_eq!(q.len(), 5, "{q:#?}");
    assert!(q.iter().all(|r| r.kind == "rejected"
        && r.status == Some(400)
        && r.reason == "request rejected by the receiver (HTTP 400)"
        && r.error == "failure"));
    // The lost answer: OTLP has no ids, so those five are at the receiver
    // twice — and exactly those.
    let st = h.receiver.state();
    let twice: Vec<&String> = ids
        .iter()
        .filter(|id| st.stored.get(*id) == Some(&2))
        .collect();
    assert_eq!(twice.len(), 5);
    drop(st);
    h.assert_nothing_lost();
    h.assert_duplicates_explained();
}
