//! Exact eviction accounting: an evicted event a consumer had not finished
//! is counted for it once — read or not, finished out of order or not, on
//! the wire or not — and the counts survive a close, a crash, and a restart.

use std::time::Duration;

use holdfast::seglog::{
    Batch, Compression, Log, LogOptions, LossReason, Outcome, StartAt, WhenFull,
};

/// Four segments of about eight 500-byte events (stored plain: 500
/// repeated bytes would compress to a few); cursors reach disk only when
/// the log stores them itself (eviction, close), not on a timer.
fn small() -> LogOptions {
    LogOptions {
        segment_bytes: 4096,
        compression: Compression::None,
        max_bytes: 16384,
        when_full: WhenFull::DropOldest,
        cursor_sync_interval: Duration::from_secs(3600),
        append_timeout: Duration::from_millis(200),
        ..LogOptions::default()
    }
}

async fn append(log: &Log, n: usize) {
    let ev = "e".repeat(500);
    for _ in 0..n {
        let mut b = Batch::new();
        b.push(ev.as_bytes());
        log.append(b).await.unwrap();
    }
}

/// Appends until the oldest event on disk is at least `floor`.
async fn append_until_floor(log: &Log, floor: u64) {
    while log.stats().first_seq < floor {
        append(log, 1).await;
    }
}

fn lost_size(log: &Log) -> u64 {
    log.stats().consumers[0].lost[0].1
}

fn in_doubt(log: &Log) -> u64 {
    log.stats().consumers[0].in_doubt
}

#[tokio::test]
async fn read_but_unfinished_events_are_counted_when_evicted() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small()).unwrap();
    let mut c = log.consumer("sink", StartAt::Oldest).unwrap();
    append(&log, 20).await;
    // Read, as a sink reading ahead does, but never finished.
    assert_eq!(c.read(20, usize::MAX).unwrap().len(), 20);
    append_until_floor(&log, 30).await;
    let floor = log.stats().first_seq;
    assert_eq!(lost_size(&log), floor, "every evicted event is counted");
    assert_eq!(c.committed(), floor);
}

#[tokio::test]
async fn events_finished_out_of_order_are_not_counted() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small()).unwrap();
    let mut c = log.consumer("sink", StartAt::Oldest).unwrap();
    append(&log, 10).await;
    c.read(10, usize::MAX).unwrap();
    // 0 is stuck; the others finish in any order.
    c.ledger().finished(&[9, 3, 1, 5, 7]);
    append_until_floor(&log, 10).await;
    let floor = log.stats().first_seq;
    assert_eq!(lost_size(&log), floor - 5);
}

#[tokio::test]
async fn on_the_wire_evicted_events_count_by_their_answer() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small()).unwrap();
    let mut c = log.consumer("sink", StartAt::Oldest).unwrap();
    append(&log, 10).await;
    c.read(10, usize::MAX).unwrap();
    let ledger = c.ledger();
    assert_eq!(ledger.claim(&[0, 1, 2]), [true; 3]);
    append_until_floor(&log, 10).await;
    let floor = log.stats().first_seq;
    assert_eq!(lost_size(&log), floor - 3, "on the wire: not counted yet");

    // Evicted and counted: refused, never sent.
    assert_eq!(ledger.claim(&[3, 4]), [false, false]);
    // Delivered: not counted, nothing to drop.
    assert_eq!(ledger.release(&[0], Outcome::Finished), [false]);
    // Answered "retry": counted now, once, and dropped.
    assert_eq!(ledger.release(&[1], Outcome::Retry), [true]);
    assert_eq!(lost_size(&log), floor - 2);
    assert_eq!(ledger.release(&[1], Outcome::Retry), [true]);
    assert_eq!(lost_size(&log), floor - 2, "counted once");
    // Still on the wire: a retry round may claim it again.
    assert_eq!(ledger.claim(&[2]), [true]);
    assert_eq!(in_doubt(&log), 0);

    // Closed with 2 on the wire: its answer will never come here.
    log.close().await.unwrap();
    drop((c, ledger, log));
    let log = Log::open(dir.path(), small()).unwrap();
    assert_eq!(lost_size(&log), floor - 2);
    assert_eq!(in_doubt(&log), 1);
    assert_eq!(log.stats().consumers[0].committed, floor);
}

#[tokio::test]
async fn counts_survive_a_crash_and_in_flight_evictions_become_in_doubt() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small()).unwrap();
    let mut c = log.consumer("sink", StartAt::Oldest).unwrap();
    append(&log, 10).await;
    c.read(10, usize::MAX).unwrap();
    let ledger = c.ledger();
    ledger.claim(&[4, 5]);
    ledger.finished(&[6]);
    append_until_floor(&log, 10).await;
    let floor = log.stats().first_seq;
    let lost = lost_size(&log);
    assert_eq!(lost, floor - 3);

    // Dropped without close: a crash. Cursors were stored at each eviction,
    // before its segment was deleted.
    drop((c, ledger, log));
    let log = Log::open(dir.path(), small()).unwrap();
    assert_eq!(lost_size(&log), lost);
    assert_eq!(in_doubt(&log), 2, "the answers of 4 and 5 are unknown");
    assert_eq!(log.stats().consumers[0].committed, floor);
    // The read-only view (`holdfast inspect`) sees the same.
    let view = Log::open_read_only(dir.path()).unwrap();
    assert_eq!(view.stats().consumers[0].lost[0], (LossReason::Size, lost));
    assert_eq!(view.stats().consumers[0].in_doubt, 2);

    // A second crash without any new eviction counts nothing twice.
    drop(view);
    drop(log);
    let log = Log::open(dir.path(), small()).unwrap();
    assert_eq!((lost_size(&log), in_doubt(&log)), (lost, 2));
    // After the restart's first store, still the same.
    log.sync_cursors().await.unwrap();
    drop(log);
    let log = Log::open(dir.path(), small()).unwrap();
    assert_eq!((lost_size(&log), in_doubt(&log)), (lost, 2));
}

#[tokio::test]
async fn a_reopened_consumer_voids_the_claims_of_the_one_before() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small()).unwrap();
    let mut c = log.consumer("sink", StartAt::Oldest).unwrap();
    append(&log, 10).await;
    c.read(10, usize::MAX).unwrap();
    let old = c.ledger();
    old.claim(&[0]);
    append_until_floor(&log, 10).await;
    let floor = log.stats().first_seq;
    // A sink restarted in the same process opens its consumer again.
    let c2 = log.consumer("sink", StartAt::Oldest).unwrap();
    assert_eq!(c2.position(), floor);
    assert_eq!((lost_size(&log), in_doubt(&log)), (floor - 1, 1));
    // A late answer to the old claim changes nothing.
    assert_eq!(old.release(&[0], Outcome::Finished), [false]);
    assert_eq!((lost_size(&log), in_doubt(&log)), (floor - 1, 1));
}

#[tokio::test]
async fn age_eviction_counts_the_same_way() {
    let dir = tempfile::tempdir().unwrap();
    let opts = LogOptions {
        when_full: WhenFull::Block,
        max_bytes: 1 << 20,
        max_age: Some(Duration::from_millis(1)),
        ..small()
    };
    let log = Log::open(dir.path(), opts).unwrap();
    let mut c = log.consumer("sink", StartAt::Oldest).unwrap();
    append(&log, 30).await;
    c.read(30, usize::MAX).unwrap();
    let ledger = c.ledger();
    ledger.claim(&[1, 2]);
    ledger.finished(&[3]);
    // Every sealed segment expires; the active one stays.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while log.stats().segments > 1 {
        assert!(std::time::Instant::now() < deadline, "no age eviction");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let s = log.stats();
    let age = s.consumers[0].lost[1];
    assert_eq!(age, (LossReason::Age, s.first_seq - 3));
    assert_eq!(ledger.release(&[1, 2], Outcome::Retry), [true, true]);
    assert_eq!(log.stats().consumers[0].lost[1].1, s.first_seq - 1);
    assert_eq!(lost_size(&log), 0);
}

#[tokio::test]
async fn an_answer_to_an_evicted_request_reaches_disk_before_a_crash_can_doubt_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small()).unwrap();
    let mut c = log.consumer("sink", StartAt::Oldest).unwrap();
    append(&log, 10).await;
    c.read(10, usize::MAX).unwrap();
    let ledger = c.ledger();
    ledger.claim(&[4, 5]);
    append_until_floor(&log, 10).await;
    let floor = log.stats().first_seq;
    // 4's answer comes (a retry: counted lost); 5's never does.
    assert_eq!(ledger.release(&[4], Outcome::Retry), [true]);
    // A crash right after: the answer was stored without waiting for the
    // cursor interval (an hour here).
    drop((c, ledger, log));
    let log = Log::open(dir.path(), small()).unwrap();
    assert_eq!((lost_size(&log), in_doubt(&log)), (floor - 1, 1));
}
