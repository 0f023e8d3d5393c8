//! What leaves the log: deleting segments every consumer has finished
//! (unless a retention hold keeps them), evicting by age and, under
//! `drop_oldest`, by size — counting what each consumer loses — and making
//! room for an append under `max_bytes`.

use std::time::{Duration, Instant};

use tracing::warn;

use super::options::WhenFull;
use super::state::{now_ms, LossReason};
use super::writer::Writer;

impl Writer {
    /// Deletes sealed segments that every consumer has passed and no hold
    /// keeps.
    pub(super) fn delete_consumed(&mut self) {
        self.delete_passed(true);
    }

    /// Deletes sealed segments that every consumer has passed, keeping
    /// those a hold points into when `honour_holds`.
    pub(super) fn delete_passed(&mut self, honour_holds: bool) {
        loop {
            let st = self.shared.lock();
            let needed = if honour_holds {
                st.min_needed()
            } else {
                st.min_committed()
            };
            let passed = st.segments.len() > 1 && needed.is_some_and(|m| m >= st.end_of(0));
            drop(st);
            if !passed {
                return;
            }
            self.delete_front(None);
        }
    }

    pub(super) fn evict_by_age(&mut self, max_age: Duration) {
        let cutoff = now_ms().saturating_sub(max_age.as_millis() as u64);
        loop {
            // Every event of a sealed segment was appended before the next
            // segment was created, so the next one's creation time bounds
            // the age of its newest event without reading it.
            let expired = {
                let st = self.shared.lock();
                st.segments.len() > 1 && st.segments[1].created_ms < cutoff
            };
            if !expired {
                return;
            }
            self.delete_front(Some(LossReason::Age));
        }
    }

    /// Removes the oldest segment. With a reason, every event of it that a
    /// consumer had not finished is accounted for (`ConsumerState::evict`):
    /// counted lost now, or, if on the wire, when its answer comes. The
    /// cursors, which carry those counts and the moved commit points, reach
    /// disk before the file is deleted: a crash then either finds the file
    /// still there and nothing counted, or the file gone and everything
    /// counted, never counts twice and never forgets.
    pub(super) fn delete_front(&mut self, reason: Option<LossReason>) {
        let seg = {
            let mut st = self.shared.lock();
            let end = st.end_of(0);
            let Some(seg) = st.segments.pop_front() else {
                return;
            };
            st.total_bytes -= seg.readable_len;
            if let Some(reason) = reason {
                st.counters.segments_evicted += 1;
                for (name, c) in st.consumers.iter_mut() {
                    let lost = c.evict(seg.base_seq, end, reason);
                    if lost > 0 {
                        warn!(consumer = %name, events = lost, reason = reason.as_str(),
                            segment = %seg.path.display(), "evicted events this consumer had not finished");
                    }
                }
            } else {
                st.counters.segments_deleted += 1;
            }
            seg
        };
        if reason.is_some() {
            if let Err(e) = self.store_cursors(self.shared.opts.fsync.syncs_directory()) {
                // The space is needed all the same; a crash before the next
                // successful store re-reads nothing (the file is gone) and
                // restores the older counts.
                warn!(error = %e, segment = %seg.path.display(),
                    "could not persist the eviction counts before deleting the segment");
            }
        }
        self.janitor.delete(seg.path);
    }

    /// Ensures `needed` more bytes fit in `max_bytes`: deletes consumed
    /// segments, then evicts under `drop_oldest`. False while blocked.
    pub(super) fn make_space(&mut self, needed: u64) -> bool {
        let max = self.shared.opts.max_bytes;
        let fits = |w: &Self| w.shared.lock().total_bytes + needed <= max;
        if fits(self) {
            return true;
        }
        self.delete_consumed();
        if fits(self) {
            return true;
        }
        // A hold never makes the log refuse an append: at `max_bytes` the
        // segments every consumer has finished go even if held (a crash of
        // the holding file source then appends their lines again), before
        // anything unsent is evicted or an append waits.
        let held = self.shared.lock().segments.len();
        self.delete_passed(false);
        if self.shared.lock().segments.len() < held {
            warn!("the log is full: deleted finished segments that a file source's last checkpoint still points into (a crash before its next checkpoint appends their lines again)");
        }
        if fits(self) {
            return true;
        }
        if self.shared.opts.when_full == WhenFull::DropOldest {
            while !fits(self) && self.shared.lock().segments.len() > 1 {
                self.delete_front(Some(LossReason::Size));
            }
            // The active segment alone always fits, since max_bytes is at
            // least two segments.
            return true;
        }
        if self.blocked_since.is_none() {
            self.blocked_since = Some(Instant::now());
            warn!(
                max_bytes = max,
                "the log is full; appends wait for consumers to catch up (when_full = \"block\")"
            );
        }
        false
    }
}
