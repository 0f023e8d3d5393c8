//! The quarantine as operators meet it: records that say everything about
//! a rejected event, private files, a bound with its two policies, and
//! replay of fixed events with their original ids — with the sink running,
//! and with it stopped.

#[path = "common/sink_harness.rs"]
mod harness;
#[path = "common/receivers.rs"]
mod receivers;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use harness::{Harness, SINK};
use holdfast::cli::quarantine::{self, Filter};
use holdfast::event::Envelope;
use holdfast::sinks::QuarantineFull;
use receivers::Api;

fn for_sink() -> Filter {
    Filter {
        sink: Some(SINK.into()),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantined_events_are_complete_private_and_replayable() {
    let mut h = Harness::new(Api::Elasticsearch).await;
    let ids = h.append(20).await;
    let poisoned: Vec<String> = [2usize, 7, 15].iter().map(|&i| ids[i].clone()).collect();
    h.receiver.state().reject.extend(poisoned.iter().cloned());
    h.start();
    h.wait_caught_up().await;

    // The records say what happened, and keep the event as it was.
    let scan = quarantine::scan(&h.quarantine_root(), &Filter::default()).unwrap();
    assert_eq!(scan.entries.len(), 3);
    // `list` shows the receiver's own words, and `--reason` finds them.
    let listed = quarantine::render_list(&scan);
    assert_eq!(
        listed.matches("mapper_parsing_exception").count(),
        3,
        "{listed}"
    );
    let by_words = Filter {
        reason: Some("mapper_parsing_exception".into()),
        ..Default::default()
    };
    let found = quarantine::scan(&h.quarantine_root(), &by_words).unwrap();
    assert_eq!(found.entries.len(), 3);
    for e in &scan.entries {
        let r = e.record();
        let seq = ids.iter().position(|id| id == &r.id).unwrap() as u64;
        assert_eq!(r.seq, Some(seq));
        assert_eq!(r.sink, SINK);
        assert_eq!(r.about.source, "app");
        assert_eq!(r.about.signal, "logs");
        assert_eq!(r.kind, "rejected");
        assert_eq!(r.status, Some(400));
        assert!(r.error.contains("mapper_parsing_exception"));
        assert_eq!(r.attempts, 1);
        assert_eq!(r.holdfast_version, env!("CARGO_PKG_VERSION"));
        assert_eq!(r.config_hash, "testhash");
        assert!(r.time.ends_with('Z'));
        let env = Envelope::decode_event(&r.event).unwrap();
        assert_eq!(env.event_id().unwrap().to_hex(), r.id);
        let mode = std::fs::metadata(e.file()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", e.file().display());
    }
    for dir in [h.quarantine_root(), h.quarantine_root().join(SINK)] {
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", dir.display());
    }
    assert!(quarantine::render_list(&scan).contains("3 event(s) shown"));

    // The operator fixes the mapping and replays, with the sink running.
    h.receiver.state().reject.clear();
    assert_eq!(
        quarantine::replay(&h.quarantine_root(), &for_sink()).unwrap(),
        3
    );
    h.wait_for("replayed events delivered", Duration::from_secs(10), |h| {
        let st = h.receiver.state();
        poisoned.iter().all(|id| st.stored.contains_key(id))
    })
    .await;
    h.wait_for("the inbox emptied", Duration::from_secs(10), |h| {
        quarantine::scan(&h.quarantine_root(), &Filter::default())
            .unwrap()
            .totals
            .waiting_replay
            == 0
    })
    .await;
    h.stop().await;
    assert!(h.quarantined().is_empty());
    let st = h.receiver.state();
    // Same ids: one copy each at the receiver, sent twice in all.
    for id in &poisoned {
        assert_eq!(st.stored[id], 1);
        assert_eq!(st.arrivals[id], 2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_waits_for_a_stopped_sink() {
    let mut h = Harness::new(Api::Elasticsearch).await;
    let ids = h.append(5).await;
    h.receiver.state().reject.insert(ids[1].clone());
    h.start();
    h.wait_caught_up().await;
    h.stop().await;
    h.receiver.state().reject.clear();
    // With the daemon stopped the inbox just waits.
    assert_eq!(
        quarantine::replay(&h.quarantine_root(), &for_sink()).unwrap(),
        1
    );
    assert!(!h.receiver.state().stored.contains_key(&ids[1]));
    h.start();
    h.wait_for("the replayed event", Duration::from_secs(10), |h| {
        h.receiver.state().stored.contains_key(&ids[1])
    })
    .await;
    h.stop().await;
    assert!(h.quarantined().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_quarantine_holds_the_cursor_until_purged() {
    let mut h = Harness::new(Api::Elasticsearch).await;
    h.options.concurrency = 1;
    h.options.batch_max_events = 5;
    // Room for one record (about 750 bytes), not two.
    h.options.quarantine.max_bytes = 1000;
    let ids = h.append(20).await;
    h.receiver
        .state()
        .reject
        .extend([ids[1].clone(), ids[7].clone()]);
    h.start();
    h.wait_for("the alarm", Duration::from_secs(10), |h| {
        h.metrics
            .sinks
            .quarantine_full
            .get_or_create(&holdfast::metrics::SinkLabels { sink: SINK.into() })
            .get()
            == 1
    })
    .await;
    // The second rejected event has nowhere to go: the cursor waits at it,
    // while later events are still delivered.
    h.wait_for("later events delivered", Duration::from_secs(10), |h| {
        h.receiver.state().stored.contains_key(&ids[19])
    })
    .await;
    assert_eq!(h.committed(), 7);
    let purged = quarantine::purge(
        &h.quarantine_root(),
        &Filter {
            id: Some(ids[1].clone()),
            ..Default::default()
        },
        false,
    )
    .unwrap();
    assert_eq!(purged, 1);
    h.wait_caught_up().await;
    h.stop().await;
    assert_eq!(h.quarantined_ids(), [ids[7].clone()].into());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_quarantine_under_drop_counts_what_it_drops() {
    let mut h = Harness::new(Api::Elasticsearch).await;
    h.options.concurrency = 1;
    h.options.batch_max_events = 5;
    h.options.quarantine.max_bytes = 1000;
    h.options.quarantine.when_full = QuarantineFull::Drop;
    let ids = h.append(10).await;
    h.receiver
        .state()
        .reject
        .extend([ids[1].clone(), ids[7].clone()]);
    // The dropped event is lost on purpose (and counted): the harness
    // must not look for it.
    h.ids[7] = String::new();
    h.start();
    h.wait_caught_up().await;
    h.stop().await;
    assert_eq!(h.quarantined().len(), 1);
    assert_eq!(h.quarantined()[0].id, ids[1]);
    let dropped = h
        .metrics
        .dropped
        .get_or_create(&holdfast::metrics::DropLabels::of(
            &format!("sink:{SINK}"),
            "quarantine_full",
        ))
        .get();
    assert_eq!(dropped, 1);
}
