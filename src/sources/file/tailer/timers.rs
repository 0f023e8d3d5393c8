//! Timers: emitting what quiet files hold, ending rotated files, closing idle ones.

use std::time::{Duration, Instant};

use tracing::debug;

use super::{Lines, Stream, Tailer, FORGET_AFTER};

impl Tailer {
    /// Emits unfinished lines and multiline events of quiet files, stops
    /// following rotated files after `rotate_wait`, closes idle files and
    /// forgets old detached streams. Before a timeout ends something for a
    /// file, the file is checked for bytes not read yet (the last read may
    /// be a while ago): those are read first, and the timeout looked at
    /// again after. True if some file is to be read again at once.
    pub(super) fn timers(&mut self, now: Instant) -> bool {
        let o = &self.s.opts;
        let (idle_line, idle_close, rotate_wait) =
            (o.line_idle_timeout, o.idle_close, o.rotate_wait);
        let ml_timeout = o.multiline.as_ref().map(|m| m.timeout);
        let mut flush = Vec::new();
        let mut flush_group = Vec::new();
        let mut finish = Vec::new();
        let mut close = Vec::new();
        let mut forget = Vec::new();
        let mut unread = Vec::new();
        // Whether the open file holds bytes past what was read.
        let behind = |s: &Stream| {
            s.file
                .as_ref()
                .is_some_and(|f| f.metadata().is_ok_and(|m| m.len() != s.read_pos))
        };
        for (id, s) in self.streams.iter() {
            let quiet = now.duration_since(s.last_data);
            let line_due = s.split.has_partial() && quiet >= idle_line && s.at_eof && !s.wanted;
            let group_due = match (&s.group, ml_timeout) {
                (Some(g), Some(t)) => now.duration_since(g.last) >= t,
                _ => false,
            };
            let finish_due = s.attached
                && s.unseen_since
                    .is_some_and(|since| drained(since, s.last_data, now, rotate_wait))
                && (s.at_eof || s.file.is_none());
            if (line_due || group_due || finish_due) && behind(s) {
                unread.push(id);
                continue;
            }
            if line_due {
                flush.push(id);
            }
            if group_due {
                flush_group.push(id);
            }
            if s.attached {
                if s.unseen_since.is_some() {
                    if finish_due {
                        finish.push(id);
                        continue;
                    }
                } else if s.file.is_some() && s.at_eof && quiet >= idle_close {
                    close.push(id);
                }
            } else if let Some((at, _)) = s.detached_at {
                if now.duration_since(at) >= FORGET_AFTER {
                    forget.push(id);
                }
            }
        }
        for id in flush {
            let Some(s) = self.streams.get_mut(id) else {
                continue;
            };
            debug!(source = %self.s.name, path = %s.path.display(), read_pos = s.read_pos,
                quiet_ms = now.duration_since(s.last_data).as_millis() as u64,
                "the file ends in an unfinished line and was quiet for line_idle_timeout: emitting it");
            let mut to = Lines::new(&mut self.out, &self.s.opts, self.keep, now);
            s.flush_line(id, &mut to);
        }
        for id in flush_group {
            if let Some(s) = self.streams.get_mut(id) {
                s.flush_group(id, &mut self.out);
            }
        }
        for id in finish {
            self.detach(id, now);
        }
        for id in close {
            if let Some(s) = self.streams.get_mut(id) {
                s.file = None;
                self.open -= 1;
            }
        }
        for id in forget {
            self.remove(id);
        }
        for &id in &unread {
            if let Some(s) = self.streams.get_mut(id) {
                s.dirty = true;
            }
        }
        !unread.is_empty()
    }
}

/// Whether a file that left the globs at `left` (or was found again after
/// a restart then) is finished: nothing new was read from it for
/// `rotate_wait`, counted from its last data or from when it left,
/// whichever is later. A writer that keeps writing keeps it followed.
fn drained(left: Instant, last_data: Instant, now: Instant, rotate_wait: Duration) -> bool {
    now.saturating_duration_since(left.max(last_data)) >= rotate_wait
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotated_file_is_followed_until_idle_for_rotate_wait() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let wait = s(5);
        // Left the globs, nothing read since: finished rotate_wait later.
        assert!(!drained(t0, t0, t0 + s(4), wait));
        assert!(drained(t0, t0, t0 + s(5), wait));
        // Data read after it left pushes the end back, however long ago it left.
        assert!(!drained(t0, t0 + s(30), t0 + s(34), wait));
        assert!(drained(t0, t0 + s(30), t0 + s(35), wait));
        // Data read long before it left does not end it early.
        assert!(!drained(t0 + s(60), t0, t0 + s(61), wait));
        // A clock read before the stamps (a pass that began earlier) is not idle.
        assert!(!drained(t0 + s(1), t0 + s(2), t0, wait));
    }
}
