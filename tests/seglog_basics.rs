//! Behaviour of the segment log through its public API: append, read,
//! commit, restart, segment deletion, eviction and back-pressure.

use std::time::Duration;

use holdfast::seglog::{
    Batch, Compression, FsyncPolicy, Log, LogError, LogOptions, LossReason, StartAt, WhenFull,
};

/// Blocks stored plain: these tests count on 500 repeated bytes taking
/// 500 bytes, so that a few appends fill a segment.
fn small(when_full: WhenFull) -> LogOptions {
    LogOptions {
        segment_bytes: 4096,
        compression: Compression::None,
        max_bytes: 16384,
        when_full,
        append_timeout: Duration::from_millis(200),
        ..LogOptions::default()
    }
}

fn batch(events: &[&str]) -> Batch {
    let mut b = Batch::new();
    for e in events {
        b.push(e.as_bytes());
    }
    b
}

fn texts(events: &[holdfast::seglog::Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| String::from_utf8(e.data.to_vec()).unwrap())
        .collect()
}

#[tokio::test]
async fn appends_are_read_in_order_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    let r1 = log.append(batch(&["a", "b"])).await.unwrap();
    let r2 = log.append(batch(&["c"])).await.unwrap();
    assert_eq!((r1.start, r1.end, r2.start, r2.end), (0, 2, 2, 3));

    let mut c = log.consumer("sink", StartAt::Oldest).unwrap();
    let got = c.read(10, 1 << 20).unwrap();
    assert_eq!(texts(&got), ["a", "b", "c"]);
    assert_eq!(got.iter().map(|e| e.seq).collect::<Vec<_>>(), [0, 1, 2]);
    c.commit(2).unwrap();
    log.close().await.unwrap();
    drop(c);
    drop(log);

    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    let mut c = log.consumer("sink", StartAt::Oldest).unwrap();
    assert_eq!(texts(&c.read(10, 1 << 20).unwrap()), ["c"]);
    let r3 = log.append(batch(&["d"])).await.unwrap();
    assert_eq!(r3.start, 3, "sequence numbers continue across restarts");
    assert_eq!(texts(&c.read(10, 1 << 20).unwrap()), ["d"]);
}

#[tokio::test]
async fn a_commit_beyond_the_durable_end_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    log.append(batch(&["a"])).await.unwrap();
    let c = log.consumer("sink", StartAt::Oldest).unwrap();
    assert!(matches!(
        c.commit(5),
        Err(LogError::CommitBeyondDurable { durable: 1, .. })
    ));
}

#[tokio::test]
async fn consumed_segments_are_deleted_and_block_pushes_back() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small(WhenFull::Block)).unwrap();
    let mut c = log.consumer("sink", StartAt::Oldest).unwrap();
    let ev = "x".repeat(500);
    // Fill the log to its budget: the next append must wait and then fail.
    let mut appended = 0;
    loop {
        match log.append(batch(&[&ev])).await {
            Ok(_) => appended += 1,
            Err(LogError::Full { .. }) => break,
            Err(e) => panic!("{e}"),
        }
        assert!(appended < 100, "never became full");
    }
    assert!(log.stats().bytes <= 16384);
    // Reading and committing frees space.
    let got = c.read(1000, usize::MAX).unwrap();
    assert_eq!(got.len(), appended);
    c.commit(got.last().unwrap().seq + 1).unwrap();
    log.append(batch(&[&ev])).await.unwrap();
    assert!(log.stats().segments <= 2);
    assert_eq!(
        log.stats().consumers[0].lost,
        vec![
            (LossReason::Size, 0),
            (LossReason::Age, 0),
            (LossReason::Corrupt, 0)
        ]
    );
}

#[tokio::test]
async fn drop_oldest_evicts_and_counts_per_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small(WhenFull::DropOldest)).unwrap();
    let mut slow = log.consumer("slow", StartAt::Oldest).unwrap();
    let ev = "y".repeat(500);
    for _ in 0..100 {
        log.append(batch(&[&ev])).await.unwrap();
    }
    let s = log.stats();
    assert!(s.bytes <= 16384, "{} bytes", s.bytes);
    let lost = s.consumers[0].lost[0].1;
    assert!(lost > 0);
    // The consumer moves to the oldest surviving event; lost + read = all.
    let mut read = 0;
    loop {
        let got = slow.read(1000, usize::MAX).unwrap();
        if got.is_empty() {
            break;
        }
        read += got.len() as u64;
    }
    assert_eq!(read + lost, 100);
    assert_eq!(slow.position(), 100);
}

#[tokio::test]
async fn concurrent_appends_share_frames() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        LogOptions {
            fsync: FsyncPolicy::Always,
            ..LogOptions::default()
        },
    )
    .unwrap();
    let mut tasks = Vec::new();
    for t in 0..32 {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..50 {
                log.append(batch(&[&format!("{t}-{i}")])).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let s = log.stats();
    assert_eq!(s.next_seq, 1600);
    assert!(
        s.counters.fsyncs < 1600,
        "{} syncs for 1600 appends: no group commit",
        s.counters.fsyncs
    );
}

#[tokio::test]
async fn a_read_only_view_works_beside_the_writer_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    log.append(batch(&["a", "b", "c"])).await.unwrap();
    let c = log.consumer("sink", StartAt::Oldest).unwrap();
    c.commit(1).unwrap();
    log.sync_cursors().await.unwrap();

    let view = Log::open_read_only(dir.path()).unwrap();
    let s = view.stats();
    assert_eq!((s.first_seq, s.next_seq), (0, 3));
    assert_eq!(s.consumers[0].name, "sink");
    assert_eq!(
        (s.consumers[0].committed, s.consumers[0].lag_events),
        (1, 2)
    );
    let mut r = view.reader(1);
    assert_eq!(texts(&r.read(10, usize::MAX).unwrap()), ["b", "c"]);
    assert!(matches!(r.commit(2), Err(LogError::ReadOnly)));
    assert!(matches!(
        view.append(batch(&["x"])).await,
        Err(LogError::ReadOnly)
    ));
    assert!(matches!(
        view.consumer("other", StartAt::Oldest),
        Err(LogError::ReadOnly)
    ));

    // The writer carries on undisturbed.
    assert_eq!(log.append(batch(&["d"])).await.unwrap().start, 3);
}

#[tokio::test]
async fn eviction_counts_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small(WhenFull::DropOldest)).unwrap();
    let c = log.consumer("slow", StartAt::Oldest).unwrap();
    let ev = "z".repeat(500);
    for _ in 0..60 {
        log.append(batch(&[&ev])).await.unwrap();
    }
    let lost = log.stats().consumers[0].lost[0].1;
    assert!(lost > 0);
    log.close().await.unwrap();
    drop((c, log));
    let view = Log::open_read_only(dir.path()).unwrap();
    assert_eq!(view.stats().consumers[0].lost[0], (LossReason::Size, lost));
}

/// Resident bytes of this process's maps of files whose path contains
/// `needle` (from /proc/self/smaps).
fn mapped_rss_kib(needle: &str) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    let mut kib = 0;
    for l in smaps.lines() {
        let head = l.split_whitespace().next().unwrap_or("");
        if head.contains('-') && !head.ends_with(':') {
            inside = l.contains(needle);
        } else if inside {
            if let Some(v) = l.strip_prefix("Rss:") {
                kib += v
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap();
            }
        }
    }
    kib
}

#[tokio::test]
async fn a_reader_gives_back_the_pages_it_passed_and_held_events_still_read_the_same() {
    let dir = tempfile::Builder::new()
        .prefix("pages-given-back-")
        .tempdir()
        .unwrap();
    // Stored plain: a compressed block is read from a decompressed copy on
    // the heap, never from the map, so only then does the map fill.
    let log = Log::open(
        dir.path(),
        LogOptions {
            fsync: FsyncPolicy::Never,
            compression: Compression::None,
            ..LogOptions::default()
        },
    )
    .unwrap();
    // 24 MiB in one 64 MiB segment: 6,144 events of 4 KiB, each its own.
    let event = |i: usize| -> Vec<u8> {
        let mut e = format!("event {i:06} ").into_bytes();
        e.resize(4096, b'a' + (i % 26) as u8);
        e
    };
    for chunk in 0..96 {
        let mut b = Batch::new();
        for i in chunk * 64..(chunk + 1) * 64 {
            b.push(&event(i));
        }
        log.append(b).await.unwrap();
    }
    let needle = dir.path().to_str().unwrap().to_string();
    let mut c = log.consumer("sink", StartAt::Oldest).unwrap();
    let mut held = Vec::new();
    let mut n = 0;
    loop {
        let got = c.read(500, 4 << 20).unwrap();
        if got.is_empty() {
            break;
        }
        for e in got {
            assert_eq!(e.data[..], event(n)[..], "event {n}");
            if n % 97 == 0 {
                held.push((n, e.data));
            }
            n += 1;
        }
    }
    assert_eq!(n, 6144);
    // Without giving pages back, all 24 MiB read would be resident now.
    let kib = mapped_rss_kib(&needle);
    assert!(kib < 8 << 10, "{kib} KiB of the segment still resident");
    // Events handed out before their pages were given back read the same.
    for (i, data) in &held {
        assert_eq!(data[..], event(*i)[..], "held event {i}");
    }
}
