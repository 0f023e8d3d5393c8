//! Deletes segment files off the writer thread.
//!
//! Unlinking a 64 MiB file and syncing the directory can take tens of
//! milliseconds on a small disk; done by the writer, every append waiting
//! behind it would wait too. The writer removes a segment from the log's
//! state (so nothing reads it any more) and hands the path here; deletions
//! that queue up meanwhile share one directory sync.
//!
//! A crash in the few milliseconds between the two leaves the file behind,
//! and the next start finds it as the oldest segment. A consumed one costs
//! at most redelivery (at-least-once); an evicted one may be read by a
//! consumer whose persisted cursor was behind it, although its events were
//! counted as evicted. The janitor is drained before `close` answers and
//! before the writer thread ends, so a clean stop leaves nothing behind.

use std::path::PathBuf;
use std::sync::mpsc::{self, Sender};
use std::thread::JoinHandle;

use tracing::{debug, error, warn};

use super::io::Fs;
use super::segment;

pub struct Janitor {
    /// Dropped by `finish` to end the thread once the queue is empty.
    tx: Option<Sender<PathBuf>>,
    thread: Option<JoinHandle<()>>,
    dir: PathBuf,
    sync_dir: bool,
    fs: Fs,
}

impl Janitor {
    pub fn start(dir: PathBuf, sync_dir: bool, fs: Fs) -> Janitor {
        let (tx, rx) = mpsc::channel::<PathBuf>();
        let thread_dir = dir.clone();
        let thread_fs = fs.clone();
        let thread = std::thread::Builder::new()
            .name("seglog-janitor".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let batch: Vec<PathBuf> = std::iter::once(first).chain(rx.try_iter()).collect();
                    remove_all(&thread_fs, &thread_dir, &batch, sync_dir);
                }
            });
        match thread {
            Ok(t) => Janitor {
                tx: Some(tx),
                thread: Some(t),
                dir,
                sync_dir,
                fs,
            },
            Err(e) => {
                warn!(error = %e, "could not start the segment-deleting thread; the writer deletes segments itself");
                Janitor {
                    tx: None,
                    thread: None,
                    dir,
                    sync_dir,
                    fs,
                }
            }
        }
    }

    /// Queues a segment file for deletion (or deletes it now if the thread
    /// is not running).
    pub fn delete(&self, path: PathBuf) {
        let path = match &self.tx {
            Some(tx) => match tx.send(path) {
                Ok(()) => return,
                Err(mpsc::SendError(p)) => p,
            },
            None => path,
        };
        remove_all(&self.fs, &self.dir, &[path], self.sync_dir);
    }

    /// Waits until every queued deletion is done.
    pub fn finish(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Janitor {
    fn drop(&mut self) {
        self.finish();
    }
}

fn remove_all(fs: &Fs, dir: &std::path::Path, paths: &[PathBuf], sync_dir: bool) {
    let mut removed = 0;
    for path in paths {
        debug!(segment = %path.display(), "deleting segment");
        match fs.remove(path) {
            Ok(()) => removed += 1,
            Err(e) => error!(segment = %path.display(), error = %e,
                "could not delete segment; it will be found again at the next start"),
        }
    }
    if removed > 0 && sync_dir {
        if let Err(e) = segment::sync_dir(fs, dir) {
            warn!(error = %e, "directory sync after deleting segments failed");
        }
    }
}
