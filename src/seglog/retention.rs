//! What leaves the log: deleting segments every consumer has finished
//! (unless a retention hold keeps them), evicting by age and, under
//! `drop_oldest`, by size — counting what each consumer loses — and making
//! room for an append under `max_bytes`.
//!
//! The rules read and change only the shared [`State`]; what a removal means
//! beyond it (storing the cursors, deleting the file) is the owner's, through
//! [`Segments`]. The writer thread is the one owner in the log; the unit
//! tests below are another, so that each rule is checked case by case
//! without a writer, a clock or files.

use std::sync::MutexGuard;
use std::time::Duration;

use tracing::warn;

use super::options::WhenFull;
use super::segment::Segment;
use super::state::{LossReason, State};

/// What retention needs from the owner of the log's segments.
pub(super) trait Segments {
    /// The shared state, locked.
    fn state(&self) -> MutexGuard<'_, State>;

    /// `seg` has just left the state, consumed (`reason` none) or evicted:
    /// the owner makes that durable and deletes its file.
    fn removed(&mut self, seg: Segment, reason: Option<LossReason>);
}

/// Deletes sealed segments that every consumer has passed and no hold
/// keeps.
pub(super) fn delete_consumed(s: &mut impl Segments) {
    delete_passed(s, true);
}

/// Deletes sealed segments that every consumer has passed, keeping those a
/// hold points into when `honour_holds`.
pub(super) fn delete_passed(s: &mut impl Segments, honour_holds: bool) {
    while passed(&s.state(), honour_holds) {
        delete_front(s, None);
    }
}

/// The oldest segment is sealed and every consumer (and, when
/// `honour_holds`, every hold) is past its end. Without consumers nothing
/// is passed: the log keeps events until someone reads them.
fn passed(st: &State, honour_holds: bool) -> bool {
    let needed = if honour_holds {
        st.min_needed()
    } else {
        st.min_committed()
    };
    st.segments.len() > 1 && needed.is_some_and(|m| m >= st.end_of(0))
}

/// Evicts sealed segments whose every event is older than `max_age` at
/// `now_ms`.
pub(super) fn evict_by_age(s: &mut impl Segments, max_age: Duration, now_ms: u64) {
    let cutoff = now_ms.saturating_sub(max_age.as_millis() as u64);
    while expired(&s.state(), cutoff) {
        delete_front(s, Some(LossReason::Age));
    }
}

/// Every event of a sealed segment was appended before the next segment
/// was created, so the next one's creation time bounds the age of its
/// newest event without reading it.
fn expired(st: &State, cutoff_ms: u64) -> bool {
    st.segments.len() > 1 && st.segments[1].header.created_ms < cutoff_ms
}

/// Removes the oldest segment. With a reason, every event of it that a
/// consumer had not finished is accounted for (`ConsumerState::evict`):
/// counted lost now, or, if on the wire, when its answer comes. The owner
/// stores the cursors, which carry those counts and the moved commit
/// points, before it deletes the file: a crash then either finds the file
/// still there and nothing counted, or the file gone and everything
/// counted, never counts twice and never forgets.
fn delete_front(s: &mut impl Segments, reason: Option<LossReason>) {
    let seg = {
        let mut st = s.state();
        let end = st.end_of(0);
        let Some(seg) = st.segments.pop_front() else {
            return;
        };
        st.total_bytes -= seg.readable_len;
        if let Some(reason) = reason {
            st.counters.segments_evicted += 1;
            for (name, c) in st.consumers.iter_mut() {
                let lost = c.evict(seg.header.base_seq, end, reason);
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
    s.removed(seg, reason);
}

/// Ensures `needed` more bytes fit in `max_bytes`: deletes consumed
/// segments, then evicts under `drop_oldest`. False when the append must
/// wait (under `block`).
pub(super) fn make_space(
    s: &mut impl Segments,
    needed: u64,
    max_bytes: u64,
    when_full: WhenFull,
) -> bool {
    if fits(s, needed, max_bytes) {
        return true;
    }
    delete_consumed(s);
    if fits(s, needed, max_bytes) {
        return true;
    }
    // A hold never makes the log refuse an append: at `max_bytes` the
    // segments every consumer has finished go even if held (a crash of the
    // holding file source then appends their lines again), before anything
    // unsent is evicted or an append waits.
    let held = s.state().segments.len();
    delete_passed(s, false);
    if s.state().segments.len() < held {
        warn!("the log is full: deleted finished segments that a file source's last checkpoint still points into (a crash before its next checkpoint appends their lines again)");
    }
    if fits(s, needed, max_bytes) {
        return true;
    }
    if when_full == WhenFull::DropOldest {
        while !fits(s, needed, max_bytes) && s.state().segments.len() > 1 {
            delete_front(s, Some(LossReason::Size));
        }
        // The active segment alone always fits, since max_bytes is at
        // least two segments.
        return true;
    }
    false
}

fn fits(s: &impl Segments, needed: u64, max_bytes: u64) -> bool {
    s.state().total_bytes + needed <= max_bytes
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashSet, VecDeque};
    use std::fs::File;
    use std::path::PathBuf;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::seglog::state::{ConsumerState, Counters};

    /// Segments of 100 bytes, each of 10 events, the last one active; the
    /// removals are recorded instead of deleting files.
    struct Log {
        state: Mutex<State>,
        removed: Vec<(u64, Option<LossReason>)>,
    }

    impl Segments for Log {
        fn state(&self) -> MutexGuard<'_, State> {
            self.state.lock().unwrap()
        }

        fn removed(&mut self, seg: Segment, reason: Option<LossReason>) {
            self.removed.push((seg.header.base_seq, reason));
        }
    }

    /// `created` holds each segment's creation time, oldest first.
    fn log(created: &[u64]) -> Log {
        let file = Arc::new(File::open("/dev/null").unwrap());
        let segments: VecDeque<Segment> = created
            .iter()
            .enumerate()
            .map(|(i, &created_ms)| {
                let header = crate::seglog::format::SegmentHeader {
                    base_seq: 10 * i as u64,
                    created_ms,
                    version: crate::seglog::format::FORMAT_VERSION,
                };
                let path = PathBuf::from(format!("{i}.seg"));
                Segment::new(header, path, 100, i + 1 < created.len(), file.clone())
            })
            .collect();
        Log {
            state: Mutex::new(State {
                next_seq: 10 * segments.len() as u64,
                total_bytes: 100 * segments.len() as u64,
                segments,
                consumers: BTreeMap::new(),
                counters: Counters::default(),
                damage_seen: HashSet::new(),
                holds: BTreeMap::new(),
                closed: false,
            }),
            removed: Vec::new(),
        }
    }

    impl Log {
        fn consumer(self, name: &str, committed: u64) -> Log {
            let c = ConsumerState::at(committed);
            self.state.lock().unwrap().consumers.insert(name.into(), c);
            self
        }

        fn hold(self, at: u64) -> Log {
            self.state
                .lock()
                .unwrap()
                .holds
                .insert("file:app".into(), at);
            self
        }

        fn total_bytes(&self) -> u64 {
            self.state().total_bytes
        }

        fn lost(&self, name: &str, reason: LossReason) -> u64 {
            self.state().consumers[name].lost(reason)
        }
    }

    const NONE: &[(u64, Option<LossReason>)] = &[];

    #[test]
    fn an_append_that_fits_deletes_nothing() {
        let mut l = log(&[1, 2, 3]).consumer("sink", 30);
        assert!(make_space(&mut l, 100, 400, WhenFull::Block));
        assert_eq!(l.removed, NONE);
    }

    #[test]
    fn over_budget_consumed_segments_go_first() {
        let mut l = log(&[1, 2, 3]).consumer("sink", 20);
        assert!(make_space(&mut l, 100, 300, WhenFull::Block));
        // Every consumed segment goes, not only as many as the append needs.
        assert_eq!(l.removed, [(0, None), (10, None)]);
        assert_eq!(l.total_bytes(), 100);
        assert_eq!(l.state().counters.segments_deleted, 2);
    }

    #[test]
    fn a_consumer_behind_makes_a_blocking_log_wait() {
        let mut l = log(&[1, 2, 3]).consumer("sink", 5);
        assert!(!make_space(&mut l, 100, 300, WhenFull::Block));
        assert_eq!(l.removed, NONE);
        assert_eq!(l.lost("sink", LossReason::Size), 0);
    }

    #[test]
    fn a_consumer_behind_loses_the_oldest_under_drop_oldest() {
        let mut l = log(&[1, 2, 3]).consumer("sink", 5);
        assert!(make_space(&mut l, 100, 300, WhenFull::DropOldest));
        assert_eq!(l.removed, [(0, Some(LossReason::Size))]);
        // Events 5..10 were not finished.
        assert_eq!(l.lost("sink", LossReason::Size), 5);
        assert_eq!(l.state().counters.segments_evicted, 1);
    }

    #[test]
    fn nothing_to_evict_but_the_active_segment() {
        let mut l = log(&[1]).consumer("sink", 0);
        assert!(!make_space(&mut l, 300, 300, WhenFull::Block));
        assert!(make_space(&mut l, 300, 300, WhenFull::DropOldest));
        assert_eq!(l.removed, NONE);
    }

    #[test]
    fn a_hold_keeps_consumed_segments_until_the_log_is_full() {
        let mut l = log(&[1, 2, 3]).consumer("sink", 30).hold(15);
        delete_consumed(&mut l);
        assert_eq!(l.removed, [(0, None)]);
        assert!(make_space(&mut l, 100, 250, WhenFull::Block));
        assert_eq!(l.removed, [(0, None), (10, None)]);
    }

    #[test]
    fn without_consumers_nothing_is_consumed() {
        let mut l = log(&[1, 2, 3]);
        delete_consumed(&mut l);
        assert_eq!(l.removed, NONE);
        assert!(!make_space(&mut l, 100, 300, WhenFull::Block));
    }

    #[test]
    fn age_evicts_segments_whose_successor_is_older_than_the_cutoff() {
        let mut l = log(&[1_000, 2_000, 3_000, 4_000]).consumer("sink", 12);
        // Cutoff 2_500: segment 0 (next created at 2_000) is all older.
        evict_by_age(&mut l, Duration::from_millis(1_500), 4_000);
        assert_eq!(l.removed, [(0, Some(LossReason::Age))]);
        // Cutoff 10_000: all but the active segment.
        evict_by_age(&mut l, Duration::from_secs(1), 11_000);
        let removed: Vec<u64> = l.removed.iter().map(|r| r.0).collect();
        assert_eq!(removed, [0, 10, 20]);
        assert_eq!(l.state().segments.len(), 1);
        // 12..30 were not finished.
        assert_eq!(l.lost("sink", LossReason::Age), 18);
    }

    #[test]
    fn age_evicts_nothing_young() {
        let mut l = log(&[1_000, 2_000]).consumer("sink", 0);
        evict_by_age(&mut l, Duration::from_secs(1), 2_500);
        assert_eq!(l.removed, NONE);
    }
}
