//! The stream table: every stream of a source by id, and the indexes the
//! tailer finds them by, kept in step here and nowhere else.
//!
//! Rules the indexes keep:
//! * an *attached* stream is indexed by its inode and its path (the last
//!   stream attached to an inode or path owns that entry); a detached one is
//!   in `detached` and in neither;
//! * `full_prefixes` counts the attached streams whose prefix is full
//!   (`fingerprint_bytes` long), by hash: a new file starting with one of
//!   them may be a copy whose original is about to be truncated;
//! * `keys` counts the streams per key and the highest generation each
//!   key reached, so a new file never takes a key in use and a truncated
//!   file's next generation is always new.
//!
//! A missing id is an answer (`None`), not a panic: a scan between two
//! reads may have removed the stream a caller still names.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::super::checkpoint::Record;
use super::super::identity::Prefix;
use super::protocol::StreamId;
use super::stream::Stream;

pub(super) struct Streams {
    all: HashMap<StreamId, Stream>,
    by_inode: HashMap<(u64, u64), StreamId>,
    by_path: HashMap<PathBuf, StreamId>,
    /// Full prefixes of attached streams (hash → count).
    full_prefixes: HashMap<u64, u32>,
    /// Keys in use: streams per key and the highest generation.
    keys: HashMap<u64, (u32, u32)>,
    detached: HashSet<StreamId>,
    /// `fingerprint_bytes`: a prefix this long is full.
    fp: usize,
}

/// What detaching a stream leaves to its caller.
pub(super) struct Detached {
    /// It had a descriptor open (now closed).
    pub(super) had_file: bool,
    /// Its record as detached, for the checkpoint.
    pub(super) record: Record,
    pub(super) path: PathBuf,
}

impl Streams {
    pub(super) fn new(fingerprint_bytes: usize) -> Streams {
        Streams {
            all: HashMap::new(),
            by_inode: HashMap::new(),
            by_path: HashMap::new(),
            full_prefixes: HashMap::new(),
            keys: HashMap::new(),
            detached: HashSet::new(),
            fp: fingerprint_bytes,
        }
    }

    pub(super) fn get(&self, id: StreamId) -> Option<&Stream> {
        self.all.get(&id)
    }

    pub(super) fn get_mut(&mut self, id: StreamId) -> Option<&mut Stream> {
        self.all.get_mut(&id)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (StreamId, &Stream)> {
        self.all.iter().map(|(id, s)| (*id, s))
    }

    /// The detached streams, to recognise a copy of their file.
    pub(super) fn detached(&self) -> impl Iterator<Item = (StreamId, &Stream)> {
        self.detached
            .iter()
            .filter_map(|id| self.all.get(id).map(|s| (*id, s)))
    }

    /// The stream attached to the file `inode` (device, inode).
    pub(super) fn with_inode(&self, inode: (u64, u64)) -> Option<StreamId> {
        self.by_inode.get(&inode).copied()
    }

    /// The stream attached to the file at `path`.
    pub(super) fn at_path(&self, path: &Path) -> Option<StreamId> {
        self.by_path.get(path).copied()
    }

    /// Files followed: attached streams, one per inode.
    pub(super) fn attached_files(&self) -> usize {
        self.by_inode.len()
    }

    /// Whether an attached stream's full prefix hashes to `hash`.
    pub(super) fn has_full_prefix(&self, hash: u64) -> bool {
        self.full_prefixes.contains_key(&hash)
    }

    /// Whether a file whose full prefix is `prefix` starts like a followed
    /// file (an attached stream's full prefix) or like one just truncated
    /// away: only then may it be a copy still being made. A file that
    /// starts like one rotated away long ago is not held against it.
    pub(super) fn starts_like_followed(&self, prefix: Prefix) -> bool {
        self.has_full_prefix(prefix.hash)
            || self
                .detached()
                .any(|(_, d)| d.truncated_away && d.prefix == prefix)
    }

    pub(super) fn key_in_use(&self, key: u64) -> bool {
        self.keys.contains_key(&key)
    }

    /// The generation a truncated file of `key` continues in.
    pub(super) fn next_generation(&self, key: u64) -> u32 {
        self.keys.get(&key).map_or(0, |k| k.1) + 1
    }

    /// Adds a stream; attached unless it was detached (from the checkpoint).
    pub(super) fn insert(&mut self, id: StreamId, st: Stream) {
        let k = self.keys.entry(st.key).or_insert((0, 0));
        k.0 += 1;
        k.1 = k.1.max(st.generation);
        let detached = st.detached_at.is_some();
        self.all.insert(id, st);
        if detached {
            self.detached.insert(id);
        } else {
            self.attach(id);
        }
    }

    /// Follows a stream's file again at its path: indexed by inode and
    /// path, no longer detached, leaving or truncated away.
    pub(super) fn attach(&mut self, id: StreamId) {
        let Some(s) = self.all.get_mut(&id) else {
            return;
        };
        s.attached = true;
        s.detached_at = None;
        s.unseen_since = None;
        s.unseen_unix_ms = None;
        s.truncated_away = false;
        self.detached.remove(&id);
        self.by_inode.insert(s.meta.inode(), id);
        self.by_path.insert(s.path.clone(), id);
        if s.prefix.is_full(self.fp) {
            *self.full_prefixes.entry(s.prefix.hash).or_default() += 1;
        }
    }

    /// Stops following an attached stream's file: its descriptor is closed
    /// and it leaves the indexes, kept only to recognise a copy. `None` if
    /// it was not attached.
    pub(super) fn detach(&mut self, id: StreamId, at: (Instant, u64)) -> Option<Detached> {
        let s = self.all.get_mut(&id)?;
        if !s.attached {
            return None;
        }
        s.attached = false;
        s.detached_at = Some(at);
        let had_file = s.file.take().is_some();
        let (inode, path, full, hash) = (
            s.meta.inode(),
            s.path.clone(),
            s.prefix.is_full(self.fp),
            s.prefix.hash,
        );
        let record = s.record();
        if self.by_inode.get(&inode) == Some(&id) {
            self.by_inode.remove(&inode);
        }
        if self.by_path.get(&path) == Some(&id) {
            self.by_path.remove(&path);
        }
        if full {
            self.unindex_prefix(hash);
        }
        self.detached.insert(id);
        Some(Detached {
            had_file,
            record,
            path,
        })
    }

    /// Forgets a stream: out of every index, its key released.
    pub(super) fn remove(&mut self, id: StreamId) -> Option<Stream> {
        let s = self.all.remove(&id)?;
        self.detached.remove(&id);
        if self.by_inode.get(&s.meta.inode()) == Some(&id) {
            self.by_inode.remove(&s.meta.inode());
        }
        if self.by_path.get(&s.path) == Some(&id) {
            self.by_path.remove(&s.path);
        }
        if s.attached && s.prefix.is_full(self.fp) {
            self.unindex_prefix(s.prefix.hash);
        }
        if let Some(k) = self.keys.get_mut(&s.key) {
            k.0 -= 1;
            if k.0 == 0 {
                self.keys.remove(&s.key);
            }
        }
        Some(s)
    }

    /// Moves an attached stream's path entry to `path` (a rename within the
    /// globs). The caller updates what depends on the path.
    pub(super) fn rename(&mut self, id: StreamId, path: PathBuf) {
        let Some(s) = self.all.get_mut(&id) else {
            return;
        };
        if self.by_path.get(&s.path) == Some(&id) {
            self.by_path.remove(&s.path);
        }
        s.path = path.clone();
        self.by_path.insert(path, id);
    }

    /// The stream's prefix grew with its file to `prefix`; once full, an
    /// attached stream is counted among the full prefixes. A full prefix
    /// never grows (it is read up to `fingerprint_bytes` only).
    pub(super) fn grow_prefix(&mut self, id: StreamId, prefix: Prefix) {
        let Some(s) = self.all.get_mut(&id) else {
            return;
        };
        let was_full = s.prefix.is_full(self.fp);
        s.prefix = prefix;
        if !was_full && s.prefix.is_full(self.fp) && s.attached {
            *self.full_prefixes.entry(s.prefix.hash).or_default() += 1;
        }
    }

    fn unindex_prefix(&mut self, hash: u64) {
        if let Some(n) = self.full_prefixes.get_mut(&hash) {
            *n -= 1;
            if *n == 0 {
                self.full_prefixes.remove(&hash);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const FP: usize = 8;

    fn at() -> (Instant, u64) {
        (Instant::now(), 1)
    }

    #[test]
    fn an_attached_stream_is_found_by_inode_path_prefix_and_key() {
        let mut t = Streams::new(FP);
        t.insert(1, Stream::sample("/l/a.log", 10, b"01234567", 0));
        assert_eq!(t.with_inode((1, 10)), Some(1));
        assert_eq!(t.at_path(Path::new("/l/a.log")), Some(1));
        assert_eq!(t.attached_files(), 1);
        assert!(t.has_full_prefix(Prefix::of(b"01234567").hash));
        assert!(t.starts_like_followed(Prefix::of(b"01234567")));
        assert!(t.key_in_use(10));
        assert_eq!(t.next_generation(10), 1);
        assert_eq!(t.detached().count(), 0);
    }

    #[test]
    fn a_detached_stream_leaves_every_index_but_its_key() {
        let mut t = Streams::new(FP);
        let mut s = Stream::sample("/l/a.log", 10, b"01234567", 5);
        s.file = Some(std::fs::File::open("/dev/null").expect("/dev/null opens"));
        t.insert(1, s);
        let gone = t.detach(1, at()).expect("it was attached");
        assert!(gone.had_file);
        assert_eq!(gone.path, Path::new("/l/a.log"));
        assert_eq!(gone.record.offset, 5);
        assert_eq!(gone.record.detached_unix_ms, Some(1));
        assert_eq!(t.with_inode((1, 10)), None);
        assert_eq!(t.at_path(Path::new("/l/a.log")), None);
        assert!(!t.has_full_prefix(Prefix::of(b"01234567").hash));
        assert_eq!(t.detached().map(|d| d.0).collect::<Vec<_>>(), vec![1]);
        assert!(t.key_in_use(10));
        // Detached once only.
        assert!(t.detach(1, at()).is_none());
        // Truncated away, its first bytes still mark a possible copy.
        assert!(!t.starts_like_followed(Prefix::of(b"01234567")));
        if let Some(s) = t.get_mut(1) {
            s.truncated_away = true;
        }
        assert!(t.starts_like_followed(Prefix::of(b"01234567")));
        // Its copy adopts it: attached again, indexed again.
        t.attach(1);
        assert_eq!(t.with_inode((1, 10)), Some(1));
        assert!(t.has_full_prefix(Prefix::of(b"01234567").hash));
        assert_eq!(t.detached().count(), 0);
        assert!(t
            .get(1)
            .is_some_and(|s| !s.truncated_away && s.detached_at.is_none()));
    }

    #[test]
    fn a_stream_from_the_checkpoint_may_start_detached() {
        let mut t = Streams::new(FP);
        let mut s = Stream::sample("/l/a.log.1", 10, b"01234567", 5);
        s.attached = false;
        s.detached_at = Some(at());
        t.insert(1, s);
        assert_eq!(t.with_inode((1, 10)), None);
        assert_eq!(t.detached().count(), 1);
        assert!(t.key_in_use(10));
    }

    #[test]
    fn removing_a_stream_releases_its_key_and_generations() {
        let mut t = Streams::new(FP);
        t.insert(1, Stream::sample("/l/a.log", 10, b"01234567", 0));
        let mut next = Stream::sample("/l/a.log", 10, b"abcdefgh", 0);
        next.generation = 3;
        t.detach(1, at());
        t.insert(2, next);
        assert_eq!(t.next_generation(10), 4);
        assert!(t.remove(1).is_some());
        assert!(t.remove(1).is_none());
        assert!(t.key_in_use(10));
        assert!(t.remove(2).is_some());
        assert!(!t.key_in_use(10));
        assert_eq!(t.next_generation(10), 1);
        assert_eq!(t.attached_files(), 0);
        assert!(!t.has_full_prefix(Prefix::of(b"abcdefgh").hash));
    }

    #[test]
    fn an_index_entry_belongs_to_the_stream_that_took_it_last() {
        let mut t = Streams::new(FP);
        t.insert(1, Stream::sample("/l/a.log", 10, b"01234567", 0));
        // The next generation of the same file takes its inode and path.
        t.insert(2, Stream::sample("/l/a.log", 10, b"abcdefgh", 0));
        t.detach(1, at());
        assert_eq!(t.with_inode((1, 10)), Some(2));
        assert_eq!(t.at_path(Path::new("/l/a.log")), Some(2));
        t.remove(1);
        assert_eq!(t.with_inode((1, 10)), Some(2));
    }

    #[test]
    fn renames_and_growing_prefixes_keep_the_indexes() {
        let mut t = Streams::new(FP);
        t.insert(1, Stream::sample("/l/a.log", 10, b"0123", 4));
        assert!(!t.has_full_prefix(Prefix::of(b"0123").hash));
        t.grow_prefix(1, Prefix::of(b"01234567"));
        assert!(t.has_full_prefix(Prefix::of(b"01234567").hash));
        t.detach(1, at());
        assert!(!t.has_full_prefix(Prefix::of(b"01234567").hash));
        t.attach(1);
        t.rename(1, PathBuf::from("/l/a.log.1"));
        assert_eq!(t.at_path(Path::new("/l/a.log")), None);
        assert_eq!(t.at_path(Path::new("/l/a.log.1")), Some(1));
        assert!(t.get(1).is_some_and(|s| s.path == Path::new("/l/a.log.1")));
    }

    #[test]
    fn a_missing_id_is_an_answer_not_a_panic() {
        let mut t = Streams::new(FP);
        assert!(t.get(7).is_none() && t.get_mut(7).is_none());
        assert!(t.detach(7, at()).is_none());
        assert!(t.remove(7).is_none());
        t.attach(7);
        t.rename(7, PathBuf::from("/l/x"));
        t.grow_prefix(7, Prefix::of(b"01234567"));
        assert_eq!(t.attached_files(), 0);
        assert_eq!(t.at_path(Path::new("/l/x")), None);
    }
}
