//! Reading: opening wanted files and reading every open one.

use std::io::{self, Read};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::super::beat::Step;
use super::super::identity::{self, FileMeta};
use super::rotation::{self, FirstBytes};
use super::{Lines, StreamId, Tailer, READ_BUDGET};

impl Tailer {
    /// Opens what is wanted and reads every open file. True if some file has
    /// more to read right away.
    pub(super) fn read_pass(&mut self, poll: bool) -> bool {
        let n = self.wanted.len();
        for _ in 0..n {
            if self.open >= self.s.max_open {
                // Read what is open first, so that closing files to make
                // room closes files read to their end.
                for id in self.open_ids() {
                    self.read_stream(id);
                }
            }
            let Some(id) = self.wanted.pop_front() else {
                break;
            };
            if let Some(s) = self.streams.get_mut(id) {
                s.wanted = false;
            }
            self.reopen(id, Instant::now());
            if self.wake.is_stopped() || self.out.closed {
                return false;
            }
        }
        let mut more = !self.wanted.is_empty();
        for id in self.open_ids() {
            // A scan between two reads may have closed or removed it.
            let Some(s) = self.streams.get_mut(id) else {
                continue;
            };
            // A file rotated out of the globs gets no inotify event under a
            // path we know: it is polled on every pass while it is drained,
            // so lines its writer adds late arrive within a tick, not at the
            // next scan.
            let polled = poll || s.unseen_since.is_some();
            if s.file.is_none() || (s.at_eof && !s.dirty && !polled) {
                continue;
            }
            s.dirty = false;
            more |= self.read_stream(id);
            if self.wake.is_stopped() || self.out.closed {
                return false;
            }
            // Files found by this scan are read in the next pass.
            more |= self.keep_looking();
        }
        more
    }

    fn open_ids(&self) -> Vec<StreamId> {
        let mut v: Vec<StreamId> = self
            .streams
            .iter()
            .filter(|(_, s)| s.file.is_some())
            .map(|(id, _)| id)
            .collect();
        v.sort_unstable();
        v
    }

    /// Reads one open file up to [`READ_BUDGET`]; true if it has more.
    ///
    /// After every read the file's first bytes are checked again: if they
    /// changed, the file was truncated (and rewritten, perhaps past our
    /// offset) since the last check, the bytes just read may belong to the
    /// new contents, and they are dropped; the stream ends there and the
    /// file is read again from 0 as the next generation.
    fn read_stream(&mut self, id: StreamId) -> bool {
        let fp = self.fp();
        let keep = self.keep;
        let mut budget = READ_BUDGET;
        loop {
            self.out.c.beat.step(Step::Reading);
            // The time of this read: a pass may take long (sending blocks
            // while the log is busy), and a line's quiet time counts from
            // when its bytes were really read.
            let now = Instant::now();
            let Some(s) = self.streams.get_mut(id) else {
                return false;
            };
            let Some(file) = s.file.as_mut() else {
                return false;
            };
            if s.at_eof {
                let len = match file.metadata() {
                    Ok(m) => m.len(),
                    Err(e) => {
                        let p = s.path.clone();
                        self.read_error("cannot stat a followed file", &p, &e);
                        return false;
                    }
                };
                if len == s.read_pos {
                    return false;
                }
                if len < s.read_pos {
                    self.truncated(id, now);
                    return true;
                }
                s.at_eof = false;
            }
            let n = match file.read(&mut self.buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let p = s.path.clone();
                    s.file = None;
                    self.open -= 1;
                    self.read_error("cannot read a followed file", &p, &e);
                    self.want(id);
                    return false;
                }
            };
            if n == 0 {
                s.at_eof = true;
                // A truncation below what was read shows at once.
                if file.metadata().is_ok_and(|m| m.len() < s.read_pos) {
                    continue;
                }
                return false;
            }
            // Do the file's first bytes still match (and can the prefix
            // grow towards the full fingerprint)?
            let want = fp.min((s.read_pos + n as u64).max(s.prefix.len as u64) as usize);
            if s.prefix.len > 0 || want > 0 {
                if let Err(e) = identity::read_prefix(file, want, &mut self.pbuf) {
                    let p = s.path.clone();
                    self.read_error("cannot read a followed file", &p, &e);
                    return false;
                }
                let Some(s) = self.streams.get(id) else {
                    return false;
                };
                let like_followed = |first| self.streams.starts_like_followed(first);
                match rotation::first_bytes(s, &self.pbuf, fp, like_followed) {
                    FirstBytes::Same => {}
                    FirstBytes::Changed => {
                        self.truncated(id, now);
                        return true;
                    }
                    FirstBytes::Reidentify => {
                        self.reidentify(id, now);
                        return true;
                    }
                    FirstBytes::Grown(prefix) => {
                        // Identity settles as the file grows.
                        self.streams.grow_prefix(id, prefix);
                        if let Some(s) = self.streams.get(id) {
                            self.out.upserts.push((id, s.record()));
                        }
                    }
                }
            }
            let Some(s) = self.streams.get_mut(id) else {
                return false;
            };
            self.out.observed_ns = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let data = &self.buf[..n];
            s.last_data = now;
            let base = s.read_pos;
            s.remember_tail(data);
            s.read_pos += n as u64;
            self.out.c.bytes.inc_by(n as u64);
            let mut to = Lines::new(&mut self.out, &self.s.opts, keep, now);
            s.feed(id, data, base, &mut to);
            self.out.c.lines.inc_by(std::mem::take(&mut self.out.lines));
            if self.out.closed {
                return false;
            }
            budget = budget.saturating_sub(n);
            if budget == 0 || self.scan_wanted() {
                return true;
            }
        }
    }

    /// An open stream's file was truncated in place.
    pub(super) fn truncated(&mut self, id: StreamId, now: Instant) {
        let Some(s) = self.streams.get_mut(id) else {
            return;
        };
        let Some(file) = s.file.take() else { return };
        self.open -= 1;
        let meta = match file.metadata() {
            Ok(m) => FileMeta::of(&m),
            Err(e) => {
                let p = s.path.clone();
                return self.read_error("cannot stat a followed file", &p, &e);
            }
        };
        self.new_generation(id, file, meta, now);
    }
}
