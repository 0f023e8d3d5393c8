//! Finding and identifying files: scans, rotation, copies and new generations.

use std::collections::hash_map::Entry;
use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Instant, SystemTime};

use tracing::{debug, info};

use super::super::beat::Step;
use super::super::discovery::FoundFile;
use super::super::identity::{self, FileMeta, Prefix};
use super::super::open::Opened;
use super::super::StartAt;
use super::rotation::{self, Copy, Next, Reopened, Unattached};
use super::stream::TAIL_BYTES;
use super::{unix_ms, Stream, StreamId, Streams, Tailer};

impl Tailer {
    pub(super) fn scan(&mut self, now: Instant) {
        self.last_scan = Some(now);
        self.rescan = false;
        self.out.c.beat.step(Step::Scanning);
        self.skips.scan_started();
        let found = self.patterns.scan(&mut self.opener);
        for (path, why) in std::mem::take(&mut self.patterns.skipped) {
            self.skipped(&path, why);
        }
        self.watch.ensure(&self.patterns.watch_dirs());
        let mut seen: HashSet<StreamId> = HashSet::with_capacity(found.len());
        let mut unknown = Vec::new();
        for f in found {
            match self.streams.with_inode(f.meta.inode()) {
                Some(id) => {
                    if seen.insert(id) {
                        self.seen_known(id, f);
                    }
                }
                None => unknown.push(f),
            }
        }
        let missing: Vec<StreamId> = self
            .streams
            .iter()
            .filter(|(id, s)| s.attached && !seen.contains(id))
            .map(|(id, _)| id)
            .collect();
        for id in missing {
            self.unseen(id, now);
        }
        let unknown_inodes: HashSet<(u64, u64)> = unknown.iter().map(|f| f.meta.inode()).collect();
        for f in unknown {
            self.discover(f, now);
        }
        self.deferred.retain(|k, _| unknown_inodes.contains(k));
        // Listings serve this scan only: none is held between scans, and a
        // file renamed after this one is looked for again at the next.
        self.listings.clear();
        self.skips.scan_ended();
        self.first_start = false;
        // Never needed again once every file has been seen once.
        self.found = None;
        self.out
            .c
            .files_watched
            .set(self.streams.attached_files() as i64);
    }

    fn seen_known(&mut self, id: StreamId, f: FoundFile) {
        let Some(s) = self.streams.get_mut(id) else {
            return;
        };
        s.unseen_since = None;
        if s.unseen_unix_ms.take().is_some() {
            // Back in the globs: the checkpoint no longer says it left them.
            self.out.upserts.push((id, s.record()));
        }
        let seen = rotation::sighting(s, &f, self.s.opts.fingerprint_bytes);
        if seen.renamed {
            // Renamed to another matching name (app.log → app.log.1), or
            // found again after a restart under its rotated name.
            info!(source = %self.s.name, from = %s.path.display(), to = %f.path.display(), "followed file renamed");
            s.template = self.out.enc.template(&f.path);
            self.streams.rename(id, f.path.clone());
            if let Some(s) = self.streams.get(id) {
                self.out.upserts.push((id, s.record()));
            }
            self.out.c.rotations.inc();
        }
        let Some(s) = self.streams.get_mut(id) else {
            return;
        };
        s.meta.len = f.meta.len;
        match seen.next {
            Next::Nothing => {}
            Next::Read => s.dirty = true,
            Next::Reopen => self.want(id),
        }
    }

    /// A followed file is no longer found at any path the globs match: it is
    /// drained (read on every pass, through its descriptor) until it has been
    /// idle for `rotate_wait`. A stream without an open descriptor (closed as
    /// idle or for the descriptor cap, or restored from the checkpoint after
    /// a restart) first looks for its file in the directory it was last seen
    /// in (`app.log.1` when only `app.log` is included); only if it is not
    /// there is the stream detached, its tail unread.
    fn unseen(&mut self, id: StreamId, now: Instant) {
        let Some(s) = self.streams.get_mut(id) else {
            return;
        };
        if s.unseen_since.is_none() {
            s.unseen_since = Some(now);
            s.unseen_unix_ms = s.unseen_unix_ms.or(Some(unix_ms(SystemTime::now())));
            self.out.c.rotations.inc();
            info!(source = %self.s.name, path = %s.path.display(),
                "followed file was deleted or rotated out of the include patterns; reading what is left of it");
            let rec = s.record();
            self.out.upserts.push((id, rec));
        }
        if s.file.is_none() && !self.find_moved(id, now) {
            // Nothing left to read it by.
            self.detach(id, now);
        }
    }

    /// Opens the file of a stream that left the globs and has no descriptor,
    /// found again by identity in its last directory, and positions it where
    /// reading stopped. True if found.
    fn find_moved(&mut self, id: StreamId, now: Instant) -> bool {
        let Some(s) = self.streams.get(id) else {
            return false;
        };
        let Some(dir) = s.path.parent().map(|d| d.to_path_buf()) else {
            return false;
        };
        let known = identity::Known {
            dev: s.meta.dev,
            ino: s.meta.ino,
            btime: s.meta.btime,
            prefix: s.prefix,
            read_pos: s.read_pos,
        };
        let listing = match self.listings.entry(dir.clone()) {
            Entry::Occupied(l) => l.into_mut(),
            Entry::Vacant(v) => match identity::list_inodes(&dir) {
                Ok(l) => v.insert(l),
                Err(e) => {
                    self.read_error("cannot look for a rotated file in its directory", &dir, &e);
                    return false;
                }
            },
        };
        let found = match identity::open_moved(&self.opener, listing, &known, &mut self.pbuf) {
            Ok(Some(m)) => m,
            Ok(None) => return false,
            Err(e) => {
                self.read_error("cannot look for a rotated file in its directory", &dir, &e);
                return false;
            }
        };
        let mut file = found.file;
        let Some(s) = self.streams.get_mut(id) else {
            return false;
        };
        if let Err(e) = file.seek(SeekFrom::Start(s.read_pos)) {
            self.read_error("cannot seek in a rotated file", &found.path, &e);
            return false;
        }
        info!(source = %self.s.name, path = %s.path.display(), now_at = %found.path.display(),
            offset = s.read_pos, len = found.meta.len,
            "found a followed file, not read to its end, under a name outside the include patterns; reading it until it is idle for rotate_wait");
        s.meta.len = found.meta.len;
        s.file = Some(file);
        s.at_eof = false;
        s.last_data = now;
        self.open += 1;
        self.make_room(id);
        true
    }

    /// Identifies a file no stream is attached to: the copy of a detached
    /// stream, a possible copy of a live one (set aside for a while), or a
    /// new stream.
    fn discover(&mut self, f: FoundFile, now: Instant) {
        let (file, meta) = match self.opener.open(&f.path) {
            Ok(Opened::File(file, m)) => (file, FileMeta::of(&m)),
            Ok(Opened::Skipped(why)) => return self.skipped(&f.path, why),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(e) => return self.read_error("cannot open a matched file", &f.path, &e),
        };
        if meta.inode() != f.meta.inode() || self.streams.with_inode(meta.inode()).is_some() {
            self.rescan = true;
            return;
        }
        self.identify(f.path, file, meta, now);
    }

    /// Decides what an open file no stream is attached to is (see
    /// [`Tailer::discover`]) and follows it accordingly.
    fn identify(&mut self, path: PathBuf, file: File, meta: FileMeta, now: Instant) {
        let fp = self.fp();
        if let Err(e) = identity::read_prefix(&file, fp, &mut self.pbuf) {
            return self.read_error("cannot read a matched file", &path, &e);
        }
        let prefix = Prefix::of(&self.pbuf);
        let mut already_read = false;
        if prefix.is_full(fp) {
            if self.streams.has_full_prefix(prefix.hash) && self.settle_truncations(prefix, now) {
                // Settling read other first bytes into the buffer.
                if let Err(e) = identity::read_prefix(&file, fp, &mut self.pbuf) {
                    return self.read_error("cannot read a matched file", &path, &e);
                }
            }
            let copy = self.find_copy_of(prefix, &file, meta.len);
            let rotate_wait = self.s.opts.rotate_wait;
            let set_aside_for = || {
                (self.streams.has_full_prefix(prefix.hash)
                    && may_be_copy_of_live(&self.streams, prefix, &file, meta.len))
                .then(|| now.duration_since(*self.deferred.entry(meta.inode()).or_insert(now)))
            };
            match rotation::unattached(copy, rotate_wait, set_aside_for) {
                Unattached::Continues(oid) => return self.adopt(oid, path, meta, file, now),
                Unattached::SetAside => {
                    debug!(source = %self.s.name, path = %path.display(),
                        "new file starts like a followed one: waiting to see whether it is a copy");
                    return;
                }
                Unattached::New {
                    already_read: from_end,
                } => {
                    if let Some(o) = copy.and_then(|(oid, _)| self.streams.get(oid)) {
                        info!(source = %self.s.name, path = %path.display(), was = %o.path.display(),
                            len = meta.len, emitted = o.emitted, read_pos = o.read_pos,
                            "a copy of lines already read; following it from its end");
                    }
                    already_read = from_end;
                }
            }
        }
        let mut key = identity::derive_key(&meta, &self.pbuf);
        while key == 0 || self.streams.key_in_use(key) {
            key = xxhash_rust::xxh3::xxh3_64(&key.to_le_bytes());
        }
        let mut start = 0;
        let mut ahead = Vec::new();
        if already_read || (self.first_start && self.s.opts.start_at == StartAt::End) {
            start = meta.len;
        } else if let Some(found) = &mut self.found {
            if let Some((p, rest)) = found.resume_unknown(key, 0).filter(|r| r.0 <= meta.len) {
                info!(source = %self.s.name, path = %path.display(), offset = p,
                    "resuming a file after the lines of it found in the log");
                start = p;
                ahead = rest;
            }
        }
        let id = self.new_id();
        let mut file = file;
        if start > 0 {
            if let Err(e) = file.seek(SeekFrom::Start(start)) {
                return self.read_error("cannot seek in a matched file", &path, &e);
            }
        }
        let template = self.out.enc.template(&path);
        let mut st = Stream::new(key, 0, path.clone(), template, meta, prefix, start, now);
        st.file = Some(file);
        st.ahead = ahead;
        self.out.upserts.push((id, st.record()));
        self.out.barrier = true;
        self.streams.insert(id, st);
        self.open += 1;
        debug!(source = %self.s.name, path = %path.display(), ino = meta.ino, len = meta.len, prefix_len = prefix.len, offset = start, "following a new file");
        self.make_room(id);
    }

    /// Checks the followed files whose first bytes are `prefix` for a
    /// truncation not yet seen, and starts their next generation if so.
    /// A file that may be a copy is judged against these streams:
    /// copytruncate copies, truncates, and the application writes on, all
    /// perhaps before the truncated file is read again; judged against what
    /// was read before the truncation, the copy would look like a new file
    /// and be read again from its start. True if a stream was truncated.
    fn settle_truncations(&mut self, prefix: Prefix, now: Instant) -> bool {
        let ids: Vec<StreamId> = self
            .streams
            .iter()
            .filter(|(_, s)| s.attached && s.file.is_some() && s.prefix == prefix)
            .map(|(id, _)| id)
            .collect();
        let mut any = false;
        for id in ids {
            let Some(s) = self.streams.get(id) else {
                continue;
            };
            let Some(file) = s.file.as_ref() else {
                continue;
            };
            let (Ok(m), Ok(same)) = (
                file.metadata(),
                identity::prefix_matches(file, s.prefix, &mut self.pbuf),
            ) else {
                // Reading it says what is wrong.
                continue;
            };
            if !same || m.len() < s.read_pos {
                self.truncated(id, now);
                any = true;
            }
        }
        any
    }

    /// A file found empty has its first bytes, and nothing of it was
    /// emitted yet: it is identified again, as if found only now. It may be
    /// copytruncate's copy, found between its creation and the first write
    /// of its contents; followed as the new file it seemed to be, every line
    /// of it would be read a second time.
    pub(super) fn reidentify(&mut self, id: StreamId, now: Instant) {
        let Some(mut s) = self.remove(id) else {
            return;
        };
        let Some(mut file) = s.file.take() else {
            return;
        };
        let meta = match file.metadata() {
            Ok(m) => FileMeta::of(&m),
            Err(e) => return self.read_error("cannot stat a matched file", &s.path, &e),
        };
        if let Err(e) = file.seek(SeekFrom::Start(0)) {
            return self.read_error("cannot seek in a matched file", &s.path, &e);
        }
        debug!(source = %self.s.name, path = %s.path.display(), ino = meta.ino,
            "a file found empty starts like a followed one: identifying it again");
        self.identify(s.path, file, meta, now);
    }

    /// Forgets a stream at once (its record goes from the checkpoint too).
    pub(super) fn remove(&mut self, id: StreamId) -> Option<Stream> {
        let s = self.streams.remove(id)?;
        if s.file.is_some() {
            self.open -= 1;
        }
        self.out.forget.push(id);
        Some(s)
    }

    /// The detached stream `file` (first bytes `prefix`, `len` long) is a
    /// copy of, if any, and what it is to it (see [`rotation::copy_of`]).
    fn find_copy_of(&self, prefix: Prefix, file: &File, len: u64) -> Option<(StreamId, Copy)> {
        let fp = self.fp();
        self.streams.detached().find_map(|(id, s)| {
            let read_at = |b: &mut [u8], at: u64| file.read_exact_at(b, at).is_ok();
            rotation::copy_of(s, prefix, len, fp, read_at).map(|c| (id, c))
        })
    }

    fn adopt(&mut self, id: StreamId, path: PathBuf, meta: FileMeta, mut file: File, now: Instant) {
        let Some(s) = self.streams.get_mut(id) else {
            return;
        };
        if let Err(e) = file.seek(SeekFrom::Start(s.emitted)) {
            let p = s.path.clone();
            return self.read_error("cannot seek in a matched file", &p, &e);
        }
        info!(source = %self.s.name, path = %path.display(), was = %s.path.display(), offset = s.emitted,
            "continuing a rotated-away file from its copy");
        s.path = path;
        s.template = self.out.enc.template(&s.path);
        s.meta = meta;
        s.read_pos = s.emitted;
        s.file = Some(file);
        s.split.reset();
        s.group = None;
        s.at_eof = false;
        s.last_data = now;
        self.open += 1;
        self.streams.attach(id);
        if let Some(s) = self.streams.get(id) {
            self.out.upserts.push((id, s.record()));
        }
        self.out.barrier = true;
        self.make_room(id);
    }

    /// Closes the idlest open files while more than `max_open` are open
    /// (down to three quarters, so this runs once per many opens). Files
    /// read to their end go first; a file closed with data left is queued to
    /// be opened again. Rotated files being drained are never closed.
    fn make_room(&mut self, keep: StreamId) {
        if self.open <= self.s.max_open {
            return;
        }
        let target = self.s.max_open * 3 / 4;
        let mut idle: Vec<(bool, Instant, StreamId)> = self
            .streams
            .iter()
            .filter(|(id, s)| *id != keep && s.file.is_some() && s.unseen_since.is_none())
            .map(|(id, s)| (!s.at_eof, s.last_data, id))
            .collect();
        idle.sort_unstable();
        for (_, _, id) in idle {
            if self.open <= target {
                break;
            }
            let Some(s) = self.streams.get_mut(id) else {
                continue;
            };
            let pending = !s.at_eof;
            s.file = None;
            self.open -= 1;
            if pending {
                self.want(id);
            }
        }
    }

    /// Opens a closed, attached stream again, checking that its path still
    /// leads to its file and that the file is still what was read.
    pub(super) fn reopen(&mut self, id: StreamId, now: Instant) {
        let Some(s) = self.streams.get(id) else {
            return;
        };
        if s.file.is_some() || !s.attached {
            return;
        }
        let path = s.path.clone();
        let (mut file, meta) = match self.opener.open(&path) {
            Ok(Opened::File(f, m)) => (f, FileMeta::of(&m)),
            Ok(Opened::Skipped(why)) => {
                // Replaced by a FIFO or a link since it was last read: a
                // scan finds the stream's file gone and ends it.
                self.skipped(&path, why);
                self.rescan = true;
                return;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.rescan = true;
                return;
            }
            Err(e) => return self.read_error("cannot open a followed file", &path, &e),
        };
        let Some(s) = self.streams.get(id) else {
            return;
        };
        let pbuf = &mut self.pbuf;
        let prefix_ok = || identity::prefix_matches(&file, s.prefix, pbuf);
        let pos = s.read_pos;
        match rotation::reopened(s, &meta, prefix_ok) {
            Err(e) => self.read_error("cannot read a followed file", &path, &e),
            Ok(Reopened::OtherFile) => {
                // A scan sorts it out.
                self.rescan = true;
            }
            Ok(Reopened::Same) => {
                if let Err(e) = file.seek(SeekFrom::Start(pos)) {
                    return self.read_error("cannot seek in a followed file", &path, &e);
                }
                let Some(s) = self.streams.get_mut(id) else {
                    return;
                };
                s.file = Some(file);
                s.at_eof = false;
                self.open += 1;
                self.make_room(id);
            }
            Ok(Reopened::Truncated) => self.new_generation(id, file, meta, now),
            Ok(Reopened::Replaced) => {
                info!(source = %self.s.name, path = %path.display(), "inode reused by a new file");
                self.detach(id, now);
                self.discover(FoundFile { path, meta }, now);
            }
        }
    }

    /// The stream's file was truncated in place: what was read stays with
    /// the old generation (detached, so a copy of it can continue it), and
    /// the file is read from its start as the next generation.
    pub(super) fn new_generation(
        &mut self,
        id: StreamId,
        mut file: File,
        meta: FileMeta,
        now: Instant,
    ) {
        self.out.c.truncations.inc();
        let Some(had_file) = self.streams.get(id).map(|s| s.file.is_some()) else {
            return;
        };
        self.detach_keeping(id, now);
        let Some(s) = self.streams.get_mut(id) else {
            return;
        };
        s.truncated_away = true;
        let (key, path, read) = (s.key, s.path.clone(), s.read_pos);
        let generation = self.streams.next_generation(key);
        info!(source = %self.s.name, path = %path.display(), read, now = meta.len, generation,
            "file truncated in place; reading it from the start as a new generation");
        let fp = self.fp();
        if let Err(e) = identity::read_prefix(&file, fp, &mut self.pbuf) {
            return self.read_error("cannot read a followed file", &path, &e);
        }
        if let Err(e) = file.seek(SeekFrom::Start(0)) {
            return self.read_error("cannot seek in a followed file", &path, &e);
        }
        let nid = self.new_id();
        let template = self.out.enc.template(&path);
        let prefix = Prefix::of(&self.pbuf);
        let mut st = Stream::new(key, generation, path, template, meta, prefix, 0, now);
        st.file = Some(file);
        self.out.upserts.push((nid, st.record()));
        self.out.barrier = true;
        self.streams.insert(nid, st);
        self.open += 1;
        if !had_file {
            self.make_room(nid);
        }
        if !self.deferred.is_empty() {
            // A file set aside as a possible copy of this one is one now.
            self.rescan = true;
        }
    }
}

/// Whether `file` could be a copy, still being made or not yet followed
/// by the truncation, of a followed file with the same first bytes:
/// its last bytes equal that file's bytes at the same offset. A file
/// that merely starts the same (a common header) is not held back.
fn may_be_copy_of_live(streams: &Streams, prefix: Prefix, file: &File, len: u64) -> bool {
    let n = (TAIL_BYTES as u64).min(len) as usize;
    let mut ours = [0u8; TAIL_BYTES];
    if file.read_exact_at(&mut ours[..n], len - n as u64).is_err() {
        return true;
    }
    let mut theirs = [0u8; TAIL_BYTES];
    streams.iter().any(|(_, s)| {
        s.attached
            && s.prefix == prefix
            && match &s.file {
                Some(f) => {
                    f.read_exact_at(&mut theirs[..n], len - n as u64).is_ok()
                        && ours[..n] == theirs[..n]
                }
                None => true,
            }
    })
}
