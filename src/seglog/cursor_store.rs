//! Storing the cursors: the slot rule that lets a commit reach the cursor
//! file promptly without a sync (a kill -9 keeps it) while a power cut
//! still finds the last synced cursors whole.
//!
//! Two writers, one at a time ([`Shared::cursor_slots`] is their lock): the
//! log's writer thread (syncs on the interval and at close, and writes what
//! commits left to it), and a sink's own commit, which writes the cursors
//! unsynced itself when nobody holds the lock. So a commit made while the
//! writer is inside a group's write and fdatasync is in the file at once,
//! and a kill -9 replays only what was in flight, however long that sync.

use std::fs::File;
use std::sync::{MutexGuard, PoisonError};

use super::cursor::{self, CursorMap, CursorSlots};
use super::error::{LogError, Result};
use super::segment;
use super::state::{Shared, State};

impl CursorSlots {
    /// The slots as recovery found them: `generation` from the cursor
    /// file, the cursors it holds in `st`, and no slot known synced yet
    /// (see [`durable_slot`]).
    pub fn recovered(generation: u64, st: &State) -> CursorSlots {
        CursorSlots {
            generation,
            stored: recovered_cursors(st),
            ..CursorSlots::default()
        }
    }

    pub fn is_unsynced(&self) -> bool {
        self.unsynced
    }

    /// Writes every cursor into a slot, syncing it when `sync`.
    ///
    /// The slot rule: an unsynced write never goes into the slot holding
    /// the newest *synced* generation, only into the other one, and the
    /// slots trade places only after a sync. A power cut can tear or undo
    /// any unsynced write, but then the durable slot is still whole, so
    /// recovery always finds the last synced cursors (or newer ones). Were
    /// unsynced writes to alternate, one could land on the only durable
    /// slot while the other was still unsynced, and a cut could tear both.
    pub fn store(&mut self, shared: &Shared, sync: bool) -> Result<()> {
        let current = current_cursors(shared);
        if current == self.stored && self.generation > 0 {
            if sync && self.unsynced {
                return self.sync_slot(shared);
            }
            return Ok(());
        }
        // Without a known durable slot (a sync at open failed), only a
        // synced write is safe, as before this rule.
        let syncs = shared.opts.fsync.syncs_directory();
        let sync = sync || (syncs && self.durable_slot.is_none());
        let slot = match self.durable_slot {
            Some(d) => 1 - d,
            None => ((self.generation + 1) % 2) as usize,
        };
        let generation = cursor::next_generation(self.generation, slot);
        let created = !cursor::slot_paths(&shared.dir)[slot].exists();
        cursor::store(&shared.fs, &shared.dir, generation, &current, sync)?;
        self.generation = generation;
        self.stored = current;
        if sync {
            if self.slot_needs_dir_sync[slot] {
                segment::sync_dir(&shared.fs, &shared.dir)?;
                self.slot_needs_dir_sync[slot] = false;
            }
            self.durable_slot = syncs.then_some(slot);
            self.unsynced = false;
        } else {
            self.unsynced = true;
            self.slot_needs_dir_sync[slot] |= created;
        }
        Ok(())
    }

    /// [`store`](Self::store) without a sync, for a commit on a sink's
    /// thread; `Ok(false)` where the slot rule would need a sync (no slot
    /// known durable), which is the writer thread's to do.
    pub fn store_unsynced(&mut self, shared: &Shared) -> Result<bool> {
        if shared.opts.fsync.syncs_directory() && self.durable_slot.is_none() {
            return Ok(false);
        }
        self.store(shared, false).map(|()| true)
    }

    /// The winning slot at open may hold an unsynced write that survived a
    /// kill -9 in the page cache: synced, it is the durable slot no unsynced
    /// write lands on. Left unknown if the sync fails (then writes sync).
    pub fn sync_recovered(&mut self, shared: &Shared) {
        if self.generation == 0 || !shared.opts.fsync.syncs_directory() {
            return;
        }
        let slot = (self.generation % 2) as usize;
        let path = &cursor::slot_paths(&shared.dir)[slot];
        self.durable_slot = File::open(path)
            .and_then(|f| shared.fs.sync_data(&f, path))
            .ok()
            .map(|()| slot);
    }

    /// Syncs the slot holding the newest, unsynced generation: it becomes
    /// the durable slot.
    pub fn sync_slot(&mut self, shared: &Shared) -> Result<()> {
        let slot = (self.generation % 2) as usize;
        let dir = &shared.dir;
        let path = &cursor::slot_paths(dir)[slot];
        let f = File::open(path).map_err(|e| LogError::io("opening cursor file", path, e))?;
        shared
            .fs
            .sync_data(&f, path)
            .map_err(|e| LogError::io("syncing cursor file", path, e))?;
        if self.slot_needs_dir_sync[slot] {
            segment::sync_dir(&shared.fs, dir)?;
            self.slot_needs_dir_sync[slot] = false;
        }
        self.durable_slot = Some(slot);
        self.unsynced = false;
        Ok(())
    }
}

impl Shared {
    /// Locks the cursor slots (see the module docs). A panic while they
    /// were held left them consistent field by field, as for the state.
    pub fn cursor_slots(&self) -> MutexGuard<'_, CursorSlots> {
        self.cursor_slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Every consumer's cursor as it stands now.
fn current_cursors(shared: &Shared) -> CursorMap {
    let st = shared.lock();
    st.consumers
        .iter()
        .map(|(n, c)| {
            let e = cursor::Entry {
                next: st.effective(c),
                lost: c.lost_all(),
                lost_through: c.lost_through,
                in_doubt: c.in_doubt,
                pending_in_doubt: c.pending_in_doubt(),
            };
            (n.clone(), e)
        })
        .collect()
}

/// The cursors as recovery loaded them: what the cursor file holds, so the
/// first store writes only what changed since.
fn recovered_cursors(st: &State) -> CursorMap {
    st.consumers
        .iter()
        .map(|(n, c)| {
            let e = cursor::Entry {
                next: c.committed,
                lost: c.lost_all(),
                lost_through: c.lost_through,
                in_doubt: c.in_doubt,
                pending_in_doubt: 0,
            };
            (n.clone(), e)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Mutex;

    use super::super::{Batch, IoHook, IoOp, Log, LogOptions, StartAt};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;

    /// Per cursor slot: written since its last sync, and ever synced.
    #[derive(Debug, Default)]
    struct Slots {
        dirty: [bool; 2],
        synced: [bool; 2],
        unsynced_writes: u64,
        syncs: u64,
        violations: Vec<String>,
    }

    #[derive(Debug, Default)]
    struct Watch(Mutex<Slots>);

    fn slot_of(p: &Path) -> Option<usize> {
        match p.file_name()?.to_str()? {
            "cursors.0" => Some(0),
            "cursors.1" => Some(1),
            _ => None,
        }
    }

    impl IoHook for Watch {
        fn before(&self, op: &IoOp<'_>) -> std::io::Result<()> {
            let mut s = self.0.lock().unwrap();
            if let IoOp::Write { path, .. } | IoOp::SetLen { path, .. } = *op {
                if let Some(i) = slot_of(path) {
                    // Once a slot was synced, one must stay synced and
                    // untouched: a power cut may tear every dirty slot.
                    let ever_synced = s.synced[0] || s.synced[1];
                    if ever_synced && (!s.synced[1 - i] || s.dirty[1 - i]) {
                        let msg = format!("write to slot {i} while {s:?}");
                        s.violations.push(msg);
                    }
                    s.dirty[i] = true;
                }
            }
            Ok(())
        }

        fn after(&self, op: &IoOp<'_>) {
            let mut s = self.0.lock().unwrap();
            if let IoOp::SyncData { path } = *op {
                if let Some(i) = slot_of(path) {
                    if !s.dirty[i] && s.synced[i] {
                        return;
                    }
                    s.dirty[i] = false;
                    s.synced[i] = true;
                    s.syncs += 1;
                }
            }
            if let IoOp::Write { path, .. } = *op {
                if slot_of(path).is_some() {
                    s.unsynced_writes += 1;
                }
            }
        }
    }

    /// Commits write the cursor slot at once without a sync, never into
    /// the slot holding the newest synced cursors; the interval syncs.
    #[test]
    fn unsynced_cursor_writes_never_touch_the_durable_slot() {
        let dir = tempfile::tempdir().unwrap();
        let watch = Arc::new(Watch::default());
        let opts = LogOptions {
            cursor_sync_interval: Duration::from_millis(30),
            io_hook: Some(watch.clone()),
            ..LogOptions::default()
        };
        let log = Log::open(dir.path(), opts).unwrap();
        let mut c = log.consumer("sink", StartAt::Oldest).unwrap();
        let until = Instant::now() + Duration::from_millis(300);
        let mut last_written = 0;
        while Instant::now() < until {
            let mut b = Batch::new();
            b.push(b"event");
            log.append_blocking(b).unwrap();
            let got = c.read(10, 1 << 20).unwrap();
            if let Some(e) = got.last() {
                c.commit(e.seq + 1).unwrap();
                last_written = e.seq + 1;
            }
            // The cursor reaches the slot file without a sync or a close.
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let on_disk = cursor::load(dir.path()).unwrap().cursors["sink"].next;
                if on_disk == last_written {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "cursor {on_disk} never reached {last_written}"
                );
                std::thread::yield_now();
            }
        }
        drop(c);
        log.close_blocking().unwrap();
        let s = watch.0.lock().unwrap();
        assert!(s.violations.is_empty(), "{:?}", s.violations);
        assert!(s.unsynced_writes > 2 * s.syncs, "{s:?}");
        assert!(s.syncs >= 3, "{s:?}");
        assert!(
            !s.dirty[0] && !s.dirty[1],
            "close leaves a slot unsynced: {s:?}"
        );
    }

    #[test]
    fn generations_keep_their_slot_parity() {
        assert_eq!(cursor::next_generation(0, 1), 1);
        assert_eq!(cursor::next_generation(0, 0), 2);
        assert_eq!(cursor::next_generation(5, 0), 6);
        assert_eq!(cursor::next_generation(5, 1), 7);
    }
}
