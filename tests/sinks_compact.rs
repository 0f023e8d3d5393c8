//! Network sinks reading format-2 events from a real log: the same events
//! appended whole (format 1) and in the compact form (one batch context,
//! each event only its own fields, ids derived from the context's seed and
//! the event's index) reach the receiver as the same bytes; and a sink that
//! resumes in the middle of a compact batch sends exactly the events after
//! its cursor, with the ids their index in the batch gives them.

#[path = "common/sink_harness.rs"]
mod harness;
#[path = "common/receivers.rs"]
mod receivers;

use std::collections::HashMap;

use bytes::Bytes;
use harness::{kv, log_event, Harness, SINK, SOURCE};
use holdfast::event::{Context, Envelope, EventId, Group, Record};
use holdfast::seglog::{Batch, StartAt};
use prost::Message;
use receivers::Api;

const SEED: [u8; 16] = [9; 16];
const N: u64 = 25;

/// Event `i` of the batch, whole: its id derived from the seed and its
/// index, a shared attribute before its own `test.id`.
fn whole(i: u64) -> Envelope {
    let mut e = log_event(i, SOURCE, "dev1");
    let id = EventId::derived(&SEED, i);
    e.id = id.0.to_vec();
    if let Some(Record::Log(l)) = &mut e.record {
        l.attributes = vec![kv("deployment", "edge"), kv("test.id", &id.to_hex())];
    }
    e
}

/// The batch in the compact form: its context and each event's own bytes.
fn compact() -> (Bytes, Vec<Vec<u8>>) {
    let first = whole(0);
    let context = Context {
        groups: vec![Group {
            source: first.source.clone(),
            resource: first.resource.clone(),
            scope: first.scope.clone(),
            attributes: vec![kv("deployment", "edge")],
            id_seed: SEED.to_vec(),
            observed_time_unix_nano: first.observed_time_unix_nano,
            ..Default::default()
        }],
    };
    let own = (0..N)
        .map(|i| {
            let mut e = whole(i);
            e.id.clear();
            e.source.clear();
            e.resource = None;
            e.scope = None;
            e.observed_delta = e.observed_time_unix_nano - first.observed_time_unix_nano;
            e.observed_time_unix_nano = 0;
            if let Some(Record::Log(l)) = &mut e.record {
                l.attributes.remove(0);
            }
            e.encode_to_vec()
        })
        .collect();
    (Bytes::from(context.encode_to_vec()), own)
}

async fn append_compact(h: &mut Harness) {
    let (context, own) = compact();
    let mut b = Batch::new().with_context(context);
    for e in &own {
        b.push(e);
    }
    let r = h.log.append(b).await.unwrap();
    assert_eq!(r.start, 0);
    h.ids = (0..N)
        .map(|i| EventId::derived(&SEED, i).to_hex())
        .collect();
}

/// What the receiver got: id → the bytes of its action and document.
fn received(h: &Harness) -> HashMap<String, Vec<String>> {
    h.receiver.state().raw.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_events_reach_the_receiver_as_the_same_bytes() {
    let mut v1 = Harness::new(Api::Elasticsearch).await;
    let envs: Vec<Envelope> = (0..N).map(whole).collect();
    v1.append_envelopes(&envs).await;
    v1.start();
    v1.wait_caught_up().await;
    v1.stop().await;
    v1.assert_nothing_lost();

    let mut v2 = Harness::new(Api::Elasticsearch).await;
    append_compact(&mut v2).await;
    let first = v2.log.reader(0).read(1, 1 << 20).unwrap();
    assert!(!first[0].context.is_empty(), "the log keeps batch contexts");
    v2.start();
    v2.wait_caught_up().await;
    v2.stop().await;
    v2.assert_nothing_lost();

    let (a, b) = (received(&v1), received(&v2));
    assert_eq!(a.len(), N as usize);
    assert_eq!(a, b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_resuming_inside_a_compact_batch_sends_exactly_the_rest() {
    let mut h = Harness::new(Api::Elasticsearch).await;
    append_compact(&mut h).await;
    let from = 10;
    // Events before the cursor are not this run's to deliver.
    for id in &mut h.ids[..from as usize] {
        id.clear();
    }
    {
        let c = h.log.consumer(SINK, StartAt::Oldest).unwrap();
        c.commit(from).unwrap();
    }
    h.start();
    h.wait_for(
        "the sink to catch up",
        std::time::Duration::from_secs(30),
        |h| h.committed() == N,
    )
    .await;
    h.stop().await;
    let got = received(&h);
    let mut v1 = Harness::new(Api::Elasticsearch).await;
    let envs: Vec<Envelope> = (0..N).map(whole).collect();
    v1.append_envelopes(&envs).await;
    v1.start();
    v1.wait_caught_up().await;
    v1.stop().await;
    let expected = received(&v1);
    assert_eq!(got.len(), (N - from) as usize);
    for i in 0..N {
        let id = EventId::derived(&SEED, i).to_hex();
        if i < from {
            assert!(!got.contains_key(&id), "event {i} is before the cursor");
        } else {
            assert_eq!(got.get(&id), expected.get(&id), "event {i}");
        }
    }
}
