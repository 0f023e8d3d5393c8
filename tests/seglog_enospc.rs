//! A full disk, injected through the log's file-system seam: writes that run
//! out of space half-way, syncs that report ENOSPC, segments that cannot be
//! created. Each time the append fails with a clean error, no half frame
//! ever becomes visible, the file is cut back to its last acknowledged
//! frame, and once space returns the next append succeeds with the next
//! sequence number — no restart. Everything acknowledged before is intact
//! after reopening.
//!
//! `tests/disk_full.rs` fills a real (tmpfs) file system under the daemon;
//! this file covers what a tmpfs cannot produce (a failing `fdatasync`, a
//! failing creation) and runs where mounting is not allowed.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use holdfast::seglog::{Batch, Compression, IoHook, IoOp, Log, LogError, LogOptions};

const CODECS: [Compression; 3] = [
    Compression::None,
    Compression::Zstd { level: 1 },
    Compression::Lz4,
];

/// A disk that fills on demand.
#[derive(Debug, Default)]
struct Disk {
    /// Bytes that may still be written; `None` is plenty.
    space: Mutex<Option<u64>>,
    fail_syncs: AtomicBool,
    fail_creates: AtomicBool,
    fail_dir_syncs: AtomicBool,
    /// Operations refused so far.
    refused: AtomicU64,
}

fn enospc() -> io::Error {
    io::Error::from_raw_os_error(28)
}

impl Disk {
    fn fill(&self, bytes_left: u64) {
        *self.space.lock().unwrap() = Some(bytes_left);
    }

    fn free(&self) {
        *self.space.lock().unwrap() = None;
        self.fail_syncs.store(false, Ordering::SeqCst);
        self.fail_creates.store(false, Ordering::SeqCst);
        self.fail_dir_syncs.store(false, Ordering::SeqCst);
    }

    fn refuse(&self) -> io::Result<()> {
        self.refused.fetch_add(1, Ordering::SeqCst);
        Err(enospc())
    }
}

impl IoHook for Disk {
    fn allow_write(&self, _path: &Path, _offset: u64, len: usize) -> io::Result<usize> {
        let mut space = self.space.lock().unwrap();
        match *space {
            None => Ok(len),
            Some(0) => {
                self.refuse()?;
                unreachable!()
            }
            Some(n) => {
                let take = (len as u64).min(n);
                *space = Some(n - take);
                Ok(take as usize)
            }
        }
    }

    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        let fail = match op {
            IoOp::SyncData { .. } => self.fail_syncs.load(Ordering::SeqCst),
            IoOp::Create { .. } => self.fail_creates.load(Ordering::SeqCst),
            IoOp::SyncDir { .. } => self.fail_dir_syncs.load(Ordering::SeqCst),
            _ => false,
        };
        if fail {
            self.refuse()?;
        }
        Ok(())
    }
}

fn options(disk: &Arc<Disk>, compression: Compression) -> LogOptions {
    LogOptions {
        segment_bytes: 4096,
        compression,
        max_bytes: 1 << 20,
        append_timeout: Duration::from_secs(5),
        cursor_sync_interval: Duration::from_secs(3600),
        io_hook: Some(disk.clone() as Arc<dyn IoHook>),
        ..LogOptions::default()
    }
}

fn event(i: u64) -> Vec<u8> {
    format!("event {i:05} {}", "x".repeat((i % 40) as usize)).into_bytes()
}

fn append(log: &Log, from: u64, n: u64) -> Result<holdfast::seglog::SeqRange, LogError> {
    let mut b = Batch::new();
    for i in from..from + n {
        b.push(&event(i));
    }
    log.append_blocking(b)
}

/// The error a full disk must produce: I/O, with the kernel's kind.
fn assert_no_space(r: Result<holdfast::seglog::SeqRange, LogError>) {
    match r {
        Err(LogError::Io { source, .. }) => {
            assert_eq!(source.kind(), io::ErrorKind::StorageFull, "{source}")
        }
        other => panic!("expected an ENOSPC error, got {other:?}"),
    }
}

/// Every event a fresh reader sees, checked against [`event`].
fn read_all(log: &Log) -> Vec<u64> {
    let mut r = log.reader(0);
    let mut seqs = Vec::new();
    loop {
        let got = r.read(1000, 1 << 20).unwrap();
        if got.is_empty() {
            return seqs;
        }
        for e in got {
            assert_eq!(&e.data[..], &event(e.seq)[..], "event {} damaged", e.seq);
            seqs.push(e.seq);
        }
    }
}

fn segment_lengths(dir: &Path) -> Vec<(String, u64)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".seg"))
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_write_that_runs_out_of_space_is_cut_back_and_appends_resume() {
    for codec in CODECS {
        write_runs_out_of_space(codec);
    }
}

fn write_runs_out_of_space(codec: Compression) {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(Disk::default());
    let log = Log::open(dir.path(), options(&disk, codec)).unwrap();
    for i in 0..10 {
        append(&log, i * 3, 3).unwrap();
    }
    let before = segment_lengths(dir.path());

    // 40 bytes left: the next frame is written half-way, then ENOSPC.
    disk.fill(40);
    assert_no_space(append(&log, 30, 3));
    assert_no_space(append(&log, 30, 1));
    assert_eq!(
        segment_lengths(dir.path()),
        before,
        "the half frame was not cut"
    );
    assert_eq!(log.next_seq(), 30);
    assert_eq!(read_all(&log), (0..30).collect::<Vec<_>>());
    let c = log.stats().counters;
    assert!(c.write_errors >= 2, "{c:?}");

    disk.free();
    let r = append(&log, 30, 3).unwrap();
    assert_eq!((r.start, r.end), (30, 33));
    assert_eq!(read_all(&log), (0..33).collect::<Vec<_>>());
    log.close_blocking().unwrap();
    drop(log);

    let log = Log::open(dir.path(), options(&disk, codec)).unwrap();
    assert_eq!(read_all(&log), (0..33).collect::<Vec<_>>());
    assert_eq!(log.stats().counters.torn_tails, 0);
    log.close_blocking().unwrap();
}

#[test]
fn a_failed_sync_is_not_acknowledged_and_its_frame_is_removed() {
    for codec in CODECS {
        failed_sync(codec);
    }
}

fn failed_sync(codec: Compression) {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(Disk::default());
    let log = Log::open(dir.path(), options(&disk, codec)).unwrap();
    append(&log, 0, 5).unwrap();
    let before = segment_lengths(dir.path());

    // Some file systems report a full disk only at fdatasync (delayed
    // allocation, thin provisioning, NFS).
    disk.fail_syncs.store(true, Ordering::SeqCst);
    assert_no_space(append(&log, 5, 2));
    assert_eq!(segment_lengths(dir.path()), before);
    assert_eq!(read_all(&log), (0..5).collect::<Vec<_>>());
    assert!(log.stats().counters.sync_errors >= 1);

    disk.free();
    assert_eq!(append(&log, 5, 2).unwrap().start, 5);
    log.close_blocking().unwrap();
    drop(log);
    let log = Log::open(dir.path(), options(&disk, codec)).unwrap();
    assert_eq!(read_all(&log), (0..7).collect::<Vec<_>>());
    log.close_blocking().unwrap();
}

#[test]
fn a_segment_that_cannot_be_created_fails_appends_until_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(Disk::default());
    // Stored plain: the test needs an append that cannot fit what is left
    // of a segment, which its size in events then tells.
    let codec = Compression::None;
    // Events of at least 12 bytes: 16 of them in one block take at least
    // 28 + 16 + 4 + 16 × 16 = 304 bytes, more than the at most 296 left
    // once the segment holds 3800.
    const BIG: u64 = 16;
    let log = Log::open(dir.path(), options(&disk, codec)).unwrap();
    // Fill the first segment close to its end.
    let mut next = 0;
    while segment_lengths(dir.path())[0].1 < 3800 {
        append(&log, next, 4).unwrap();
        next += 4;
    }
    let acked = next;

    // Each way a roll can fail: no inode for the file, no room for its
    // header, a directory sync that fails (after which the file is removed).
    for how in 0..3 {
        match how {
            0 => disk.fail_creates.store(true, Ordering::SeqCst),
            1 => disk.fill(10),
            _ => disk.fail_dir_syncs.store(true, Ordering::SeqCst),
        }
        // Too big for what is left of the segment: needs a new one.
        assert_no_space(append(&log, next, BIG));
        // Once a roll has failed, nothing more goes into the old segment,
        // not even what would fit: the failed attempt may have left the new
        // file behind, and after a power cut it would pass for the end of
        // the log.
        assert_no_space(append(&log, next, 1));
        assert_eq!(log.next_seq(), acked);
        assert_eq!(segment_lengths(dir.path()).len(), 1);
        disk.free();
    }
    // Debris of an attempt whose removal failed too: it must not block the
    // next roll.
    std::fs::write(
        dir.path().join(format!("{acked:020}.seg")),
        b"half a header",
    )
    .unwrap();

    // Space is back: the roll succeeds (reusing the debris) and appends go on.
    let r = append(&log, next, BIG).unwrap();
    assert_eq!(r.start, acked);
    let segs = segment_lengths(dir.path());
    assert_eq!(segs.len(), 2, "{segs:?}");
    assert_eq!(read_all(&log), (0..acked + BIG).collect::<Vec<_>>());
    log.close_blocking().unwrap();
    drop(log);

    let log = Log::open(dir.path(), options(&disk, codec)).unwrap();
    assert_eq!(read_all(&log), (0..acked + BIG).collect::<Vec<_>>());
    assert!(disk.refused.load(Ordering::SeqCst) >= 6);
    log.close_blocking().unwrap();
}
