use super::*;
use crate::metrics::Metrics;
use crate::seglog::LogOptions;

fn record(offset: u64) -> Record {
    Record {
        key: 1,
        generation: 0,
        path: "a.log".into(),
        dev: 0,
        ino: 0,
        btime: None,
        prefix_len: 0,
        prefix_hash: 0,
        offset,
        detached_unix_ms: None,
        rotated_unix_ms: None,
        tail: None,
        ahead: Vec::new(),
    }
}

#[tokio::test]
async fn lines_acknowledged_past_a_refused_chunk_are_checkpointed_as_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path().join("log"), LogOptions::default()).unwrap();
    let metrics = Arc::new(Metrics::new(Some(log.clone())));
    let hold = log.hold("file:app").unwrap();
    let mut a = Appender::new(
        "app".into(),
        log,
        dir.path().join("ck"),
        BTreeMap::from([(1, record(10)), (2, record(0))]),
        Counters::new(&metrics, "app"),
        hold,
    );
    let chunks = [
        (vec![(1, 20)], State::Done),
        (vec![(1, 30), (2, 5)], State::Refused),
        (vec![(1, 40)], State::Done),
        (vec![(2, 9), (1, 50)], State::Done),
    ];
    for (positions, state) in chunks {
        a.queue.push_back(Pending {
            chunk: Chunk {
                positions,
                ..Chunk::default()
            },
            framed: Bytes::new(),
            context: Bytes::new(),
            payload_bytes: 0,
            floor: 0,
            state,
        });
    }
    a.apply_done();
    assert_eq!(a.records[&1].offset, 20);
    assert_eq!(
        a.landed_ahead(),
        vec![(1, (30, 40)), (2, (5, 9)), (1, (40, 50))]
    );
    a.settle().await;
    assert!(a.queue.is_empty());
    assert_eq!(
        (a.records[&1].offset, &a.records[&1].ahead[..]),
        (20, &[(30, 50)][..])
    );
    assert_eq!(
        (a.records[&2].offset, &a.records[&2].ahead[..]),
        (0, &[(5, 9)][..])
    );
    // Once the refused lines are acknowledged, the offset passes them.
    a.queue.push_back(Pending {
        chunk: Chunk {
            positions: vec![(1, 35), (2, 9)],
            ..Chunk::default()
        },
        framed: Bytes::new(),
        context: Bytes::new(),
        payload_bytes: 0,
        floor: 0,
        state: State::Done,
    });
    a.apply_done();
    assert_eq!(&a.records[&1].ahead[..], &[(30, 50)][..]);
    assert!(a.records[&2].ahead.is_empty());
}
