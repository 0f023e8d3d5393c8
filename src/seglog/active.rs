//! The segment being written: its file, how long it is, what a failed write
//! left to cut back, and whether what was written since the last sync is
//! durable. The writer thread owns the one [`ActiveSegment`]; keeping this
//! state together (rather than as loose writer fields) keeps the rule in one
//! place that nothing is written behind a failed frame until it is cut off.
//!
//! A frame's steps fail with a [`StepError`] that says which step it was, so
//! the writer counts a failed write and a failed sync apart without
//! comparing strings.

use std::fs::File;
use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::error::{LogError, Result};
use super::format::{self, SEGMENT_HEADER_LEN};
use super::io::Fs;
use super::segment::Segment;
use super::state::Counters;

/// A step of putting a frame on disk that can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// The vectored write of the frame.
    Write,
    /// The `fdatasync` that makes it durable.
    Sync,
}

impl Step {
    /// What the error message says was being done.
    pub(super) fn op(self) -> &'static str {
        match self {
            Step::Write => "writing segment",
            Step::Sync => "syncing segment",
        }
    }

    /// Counts a failure of this step.
    pub(super) fn count_failure(self, counters: &mut Counters) {
        match self {
            Step::Write => counters.write_errors += 1,
            Step::Sync => counters.sync_errors += 1,
        }
    }
}

/// A failed step on the active segment, with the system's error.
#[derive(Debug, thiserror::Error)]
#[error("{} failed: {source}", step.op())]
pub(super) struct StepError {
    pub(super) step: Step,
    #[source]
    pub(super) source: io::Error,
}

impl StepError {
    /// The error the appenders get: the step's operation on `path`.
    pub(super) fn into_log_error(self, path: &Path) -> LogError {
        LogError::io(self.step.op(), path, self.source)
    }
}

/// A frame written to the active segment.
pub(super) struct Written {
    /// Bytes it took in the file.
    pub(super) len: u64,
    /// How long its `fdatasync` took, if it was synced.
    pub(super) synced_in: Option<Duration>,
}

pub(super) struct ActiveSegment {
    file: File,
    /// For errors and the I/O seam.
    path: PathBuf,
    /// Bytes in the file (acknowledged or not).
    len: u64,
    /// The file must be cut back to this length before the next write: set
    /// when a write or sync failed part-way.
    repair_to: Option<u64>,
    /// Frames were written since the last sync (never under `always`, which
    /// syncs each one).
    unsynced: bool,
    last_sync: Instant,
    /// A roll failed: no frame may go into this segment any more. The
    /// failed attempt may have left the next segment's file behind (its
    /// removal is not durable until a directory sync), and after a power cut
    /// recovery would take that file for the end of the log: frames written
    /// here after it would get their sequence numbers again.
    must_roll: bool,
}

impl ActiveSegment {
    /// The active segment recovery found, opened for appending as `file`.
    /// One written by an older version is not appended to: the next frame
    /// goes into a new segment.
    pub(super) fn resume(file: File, seg: Option<&Segment>) -> ActiveSegment {
        ActiveSegment {
            file,
            path: seg.map(|s| s.path.clone()).unwrap_or_default(),
            len: seg.map_or(0, |s| s.readable_len),
            repair_to: None,
            unsynced: false,
            last_sync: Instant::now(),
            must_roll: seg.is_some_and(|s| s.header.version != format::FORMAT_VERSION),
        }
    }

    /// Takes over a segment just created (its header written): the old one
    /// is sealed.
    pub(super) fn replace(&mut self, file: File, path: PathBuf) {
        self.file = file;
        self.path = path;
        self.len = SEGMENT_HEADER_LEN as u64;
        self.must_roll = false;
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn len(&self) -> u64 {
        self.len
    }

    /// Bytes a segment of `segment_bytes` still has room for.
    pub(super) fn room(&self, segment_bytes: u64) -> u64 {
        segment_bytes.saturating_sub(self.len)
    }

    pub(super) fn has_frames(&self) -> bool {
        self.len > SEGMENT_HEADER_LEN as u64
    }

    pub(super) fn must_roll(&self) -> bool {
        self.must_roll
    }

    /// A roll failed; see the field.
    pub(super) fn forbid_writes(&mut self) {
        self.must_roll = true;
    }

    pub(super) fn is_unsynced(&self) -> bool {
        self.unsynced
    }

    /// Time since the last successful sync.
    pub(super) fn since_sync(&self) -> Duration {
        self.last_sync.elapsed()
    }

    /// `fdatasync`s the file; on success returns how long it took.
    pub(super) fn sync(&mut self, fs: &Fs) -> Result<Duration, StepError> {
        let started = Instant::now();
        fs.sync_data(&self.file, &self.path)
            .map_err(|source| StepError {
                step: Step::Sync,
                source,
            })?;
        let took = started.elapsed();
        self.unsynced = false;
        self.last_sync = Instant::now();
        Ok(took)
    }

    /// Cuts off the remains of a failed write, if any, and makes the cut
    /// durable before anything else is written. Otherwise a power cut could
    /// bring the failed frame back — whole, if its bytes reached the disk
    /// although the write or its sync reported an error — with the sequence
    /// numbers the next frame reuses: if the segment is sealed meanwhile,
    /// recovery does not scan it, and readers would take the unacknowledged
    /// events for the acknowledged ones.
    pub(super) fn repair(&mut self, fs: &Fs) -> Result<()> {
        if let Some(len) = self.repair_to {
            fs.set_len(&self.file, &self.path, len)
                .and_then(|_| fs.sync_data(&self.file, &self.path))
                .map_err(|e| LogError::io("cutting back a failed write in", &self.path, e))?;
            self.len = len;
            self.repair_to = None;
        }
        Ok(())
    }

    /// Writes one frame (`slices`) at the end of the file and, when `sync`,
    /// `fdatasync`s it. A failed step leaves nothing of the frame behind if
    /// the file can be cut back now, and otherwise makes the next write cut
    /// it back first.
    pub(super) fn write_frame(
        &mut self,
        fs: &Fs,
        slices: &mut [IoSlice<'_>],
        sync: bool,
    ) -> Result<Written, StepError> {
        let frame_len: u64 = slices.iter().map(|s| s.len() as u64).sum();
        let start_len = self.len;
        let mut result = fs
            .write_all(&mut self.file, &self.path, start_len, slices)
            .map_err(|source| StepError {
                step: Step::Write,
                source,
            });
        let mut synced_in = None;
        if result.is_ok() && sync {
            let started = Instant::now();
            result = fs
                .sync_data(&self.file, &self.path)
                .map_err(|source| StepError {
                    step: Step::Sync,
                    source,
                });
            synced_in = Some(started.elapsed());
        }
        if let Err(e) = result {
            // Nothing of this frame is acknowledged; cut the file back so a
            // later frame does not sit behind a half-written one.
            self.repair_to = Some(start_len);
            let _ = self.repair(fs);
            return Err(e);
        }
        self.len = start_len + frame_len;
        if !sync {
            self.unsynced = true;
        }
        Ok(Written {
            len: frame_len,
            synced_in,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::seglog::io::{IoHook, IoOp};

    /// Faults for the next operations: a write that lets `short` bytes
    /// through and then fails, a failed `fdatasync`.
    #[derive(Debug, Default)]
    struct Faults {
        short: Mutex<Option<usize>>,
        sync: Mutex<bool>,
    }

    impl IoHook for Faults {
        fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
            let mut sync = self.sync.lock().unwrap();
            if matches!(op, IoOp::SyncData { .. }) && std::mem::take(&mut *sync) {
                return Err(io::Error::other("injected sync failure"));
            }
            Ok(())
        }

        fn allow_write(&self, _: &Path, _: u64, len: usize) -> io::Result<usize> {
            match self.short.lock().unwrap().as_mut() {
                Some(0) => Err(io::ErrorKind::StorageFull.into()),
                Some(n) => Ok(std::mem::take(n).min(len)),
                None => Ok(len),
            }
        }
    }

    /// An active segment of just its header, on a file system with
    /// [`Faults`] under it.
    struct Setup {
        _dir: tempfile::TempDir,
        faults: Arc<Faults>,
        a: ActiveSegment,
        fs: Fs,
    }

    fn setup() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(super::super::segment::file_name(0));
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .unwrap();
        file.write_all(&[0; SEGMENT_HEADER_LEN]).unwrap();
        let active = ActiveSegment {
            file,
            path,
            len: SEGMENT_HEADER_LEN as u64,
            repair_to: None,
            unsynced: false,
            last_sync: Instant::now(),
            must_roll: false,
        };
        let faults = Arc::new(Faults::default());
        Setup {
            _dir: dir,
            fs: Fs::new(Some(faults.clone())),
            faults,
            a: active,
        }
    }

    /// Writes a frame that the faults set up make fail.
    fn failing_frame(s: &mut Setup) -> StepError {
        let frame = &mut [IoSlice::new(b"frame")];
        s.a.write_frame(&s.fs, frame, true).err().unwrap()
    }

    fn file_len(a: &ActiveSegment) -> u64 {
        std::fs::metadata(a.path()).unwrap().len()
    }

    #[test]
    fn frames_grow_the_segment_and_wait_for_a_sync_unless_synced() {
        // Bound whole: the directory goes with `_dir`.
        let Setup {
            mut a, fs, _dir, ..
        } = setup();
        let w = a
            .write_frame(&fs, &mut [IoSlice::new(b"frame")], false)
            .unwrap();
        assert_eq!((w.len, w.synced_in), (5, None));
        assert!(a.is_unsynced() && a.has_frames());
        a.sync(&fs).unwrap();
        assert!(!a.is_unsynced());
        let w = a
            .write_frame(&fs, &mut [IoSlice::new(b"ab"), IoSlice::new(b"c")], true)
            .unwrap();
        assert!(w.synced_in.is_some() && !a.is_unsynced());
        assert_eq!(a.len(), SEGMENT_HEADER_LEN as u64 + 8);
        assert_eq!(file_len(&a), a.len());
    }

    #[test]
    fn a_write_failing_part_way_leaves_nothing_of_the_frame() {
        let mut s = setup();
        *s.faults.short.lock().unwrap() = Some(3);
        let e = failing_frame(&mut s);
        let a = &s.a;
        assert_eq!(e.step, Step::Write);
        assert_eq!(e.source.kind(), io::ErrorKind::StorageFull);
        assert_eq!(a.len(), SEGMENT_HEADER_LEN as u64);
        assert_eq!(file_len(a), a.len());
        let l = e.into_log_error(a.path()).to_string();
        assert!(l.starts_with("writing segment"), "{l}");
    }

    #[test]
    fn a_failed_sync_is_a_sync_error_and_the_frame_is_cut_off() {
        let mut s = setup();
        *s.faults.sync.lock().unwrap() = true;
        let e = failing_frame(&mut s);
        assert_eq!(e.step, Step::Sync);
        let mut counters = Counters::default();
        e.step.count_failure(&mut counters);
        assert_eq!((counters.sync_errors, counters.write_errors), (1, 0));
        assert_eq!(file_len(&s.a), SEGMENT_HEADER_LEN as u64);
        // The next frame goes where the failed one was.
        let next = &mut [IoSlice::new(b"next")];
        s.a.write_frame(&s.fs, next, true).unwrap();
        assert_eq!(file_len(&s.a), SEGMENT_HEADER_LEN as u64 + 4);
    }
}
