//! Retention holds: a position below which a party other than a consumer
//! still needs the log's events.
//!
//! The `file` source needs one. After a crash it reads the log from its last
//! *durable* checkpoint's `log_seq` to find the lines it had appended since
//! (see `sources/file/recovery.rs`); if the segments holding them had been
//! deleted because every sink had finished them, it would append those
//! lines again — and in a crash loop whose instances live shorter than the
//! checkpoint interval, again and again. A hold keeps every segment at or
//! past its position from being deleted *as consumed* while there is room.
//! It never makes the log refuse an append or grow past its bounds: at
//! `max_bytes` the consumed segments go even if held (logged), and eviction
//! (`when_full = "drop_oldest"`, `max_age`) applies as always. After a crash
//! the file source then appends again the lines of those segments that its
//! last durable checkpoint did not cover (its known limit).
//!
//! Holds live in memory. The daemon creates them when it opens the log
//! ([`Log::open_with_holds`]), before any sink can commit, so the first
//! deletion already honours them; the source then moves its hold to its
//! checkpoint's `log_seq` once it has read it, and forward after every
//! durable checkpoint.

use super::error::Result;
use super::{Log, LogError};

/// A named hold on the log; see the module docs. Cheap to create again by
/// name: [`Log::hold`] returns the existing hold at its position.
#[derive(Clone)]
pub struct Hold {
    log: Log,
    name: String,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold")
            .field("name", &self.name)
            .field("position", &self.position())
            .finish()
    }
}

impl Hold {
    pub(crate) fn new(log: Log, name: String) -> Hold {
        Hold { log, name }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Everything at or past this sequence number is kept (unless evicted).
    pub fn position(&self) -> u64 {
        let st = self.log.shared().lock();
        st.holds
            .get(&self.name)
            .map_or(st.floor(), |&p| p.max(st.floor()))
    }

    /// Lets the log delete consumed segments below `seq`. A hold never
    /// moves back: a lower value is ignored.
    pub fn release_below(&self, seq: u64) {
        let shared = self.log.shared();
        let mut st = shared.lock();
        let frees = match st.holds.get_mut(&self.name) {
            Some(p) if seq > *p => {
                *p = seq;
                st.segments.len() > 1 && seq >= st.end_of(0)
            }
            _ => false,
        };
        drop(st);
        if frees {
            self.log.wake_writer();
        }
    }

    /// Removes the hold: it no longer keeps anything.
    pub fn remove(self) {
        let shared = self.log.shared();
        let removed = shared.lock().holds.remove(&self.name).is_some();
        if removed {
            self.log.wake_writer();
        }
    }
}

impl Log {
    /// The hold named `name`, created at the oldest event still in the log
    /// if it does not exist. See the [`hold`](super::hold) module.
    pub fn hold(&self, name: &str) -> Result<Hold> {
        if self.is_read_only() {
            return Err(LogError::ReadOnly);
        }
        {
            let mut st = self.shared().lock();
            let floor = st.floor();
            st.holds.entry(name.to_string()).or_insert(floor);
        }
        Ok(Hold::new(self.clone(), name.to_string()))
    }

    /// Names and positions of the holds.
    pub fn holds(&self) -> Vec<(String, u64)> {
        let st = self.shared().lock();
        let floor = st.floor();
        st.holds
            .iter()
            .map(|(n, &p)| (n.clone(), p.max(floor)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::super::{Batch, LogOptions, StartAt, WhenFull};
    use super::*;

    fn fill(log: &Log, n: usize) {
        for i in 0..n {
            let mut b = Batch::new();
            b.push(format!("event {i:04} ........................................").as_bytes());
            log.append_blocking(b).unwrap();
        }
    }

    fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn a_hold_keeps_consumed_segments_until_released_and_never_moves_back() {
        let dir = tempfile::tempdir().unwrap();
        let opts = LogOptions {
            segment_bytes: 1024,
            max_bytes: 1 << 20,
            ..LogOptions::default()
        };
        let log = Log::open_with_holds(dir.path(), opts, &["file:app"]).unwrap();
        let hold = log.hold("file:app").unwrap();
        assert_eq!(hold.position(), 0);
        let mut c = log.consumer("sink", StartAt::Oldest).unwrap();
        fill(&log, 100);
        let end = log.next_seq();
        while c.position() < end {
            c.read(1000, 1 << 20).unwrap();
        }
        c.commit(end).unwrap();
        let segments = log.stats().segments;
        assert!(segments > 3);
        // The sink has finished everything, but nothing goes while held.
        // The writer answers a cursor sync as it takes it, and maintains
        // after taking what is queued: the second answer comes after a
        // round of maintenance that saw the commit.
        log.sync_cursors_blocking().unwrap();
        log.sync_cursors_blocking().unwrap();
        assert_eq!(log.stats().first_seq, 0);
        assert_eq!(log.stats().segments, segments);

        hold.release_below(50);
        hold.release_below(10);
        assert_eq!(hold.position(), 50);
        assert_eq!(log.holds(), vec![("file:app".to_string(), 50)]);
        wait_for("deletion up to the hold", || log.stats().first_seq > 0);
        let s = log.stats();
        assert!(s.first_seq <= 50, "deleted past the hold: {}", s.first_seq);
        // Asking again by name keeps the position.
        assert_eq!(log.hold("file:app").unwrap().position(), 50);

        hold.remove();
        wait_for("deletion of everything consumed", || {
            log.stats().segments == 1
        });
        log.close_blocking().unwrap();
    }

    /// A log of four 1 KiB segments at most, held by `file:app`, whose
    /// appends never wait for space.
    fn small_held_log(dir: &std::path::Path, when_full: WhenFull) -> (Log, Hold) {
        let opts = LogOptions {
            segment_bytes: 1024,
            max_bytes: 4096,
            when_full,
            append_timeout: Duration::ZERO,
            ..LogOptions::default()
        };
        let log = Log::open_with_holds(dir, opts, &["file:app"]).unwrap();
        let hold = log.hold("file:app").unwrap();
        (log, hold)
    }

    #[test]
    fn a_hold_never_makes_a_full_log_refuse_appends() {
        let dir = tempfile::tempdir().unwrap();
        let (log, hold) = small_held_log(dir.path(), WhenFull::Block);
        let mut c = log.consumer("sink", StartAt::Oldest).unwrap();
        for _ in 0..20 {
            // Fails with `Full` at once if the held segments are kept.
            fill(&log, 10);
            let end = log.next_seq();
            while c.position() < end {
                c.read(1000, 1 << 20).unwrap();
            }
            c.commit(end).unwrap();
        }
        assert!(log.stats().bytes <= 4096);
        assert!(hold.position() > 0);
        log.close_blocking().unwrap();
    }

    #[test]
    fn eviction_still_applies_to_held_segments() {
        let dir = tempfile::tempdir().unwrap();
        let (log, hold) = small_held_log(dir.path(), WhenFull::DropOldest);
        fill(&log, 200);
        assert!(log.stats().bytes <= 4096);
        // The hold is where the oldest event now is.
        assert_eq!(hold.position(), log.stats().first_seq);
        assert!(hold.position() > 0);
        log.close_blocking().unwrap();
    }
}
