//! File identity: deciding whether a file on disk is a stream we already
//! know, a new generation of it, or a different file.
//!
//! A stream is known by the device and inode it lives on, its birth time
//! where the file system records one, and a *prefix*: the hash of its first
//! `fingerprint_bytes` bytes (fewer while the file is shorter; the prefix
//! grows with the file until it is full, and only ever by checking that the
//! bytes already hashed are unchanged). The inode recognises a renamed file;
//! the prefix and birth time tell a reused inode, or a file truncated and
//! rewritten in place, from the file we read before.
//!
//! Each stream also has a *key*, fixed when it is first seen and kept in the
//! checkpoint, from which every line's [`EventId`](crate::event::EventId) is
//! derived together with the rotation generation and the line's offset. The
//! key hashes device, inode, birth time and the first bytes at first sight,
//! so two files with identical first bytes never share ids, and a file seen
//! again after a lost checkpoint gets the same key when it was at least
//! `fingerprint_bytes` long when first seen.
//!
//! A stream not read to its end whose file left the globs (logrotate's
//! `app.log` → `app.log.1` with only `app.log` included) is found again by
//! [`open_moved`]: in the directory of its last known path (listed once per
//! scan by [`list_inodes`]), the entry with its device and inode, accepted
//! only if [`judge`] says it is the same file.

use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{DirEntryExt, FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use super::open::{Opened, Opener};

/// What `stat` says about a file, as far as identity goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileMeta {
    pub dev: u64,
    pub ino: u64,
    /// Birth time in unix nanoseconds, where the file system records one.
    pub btime: Option<i64>,
    pub len: u64,
}

impl FileMeta {
    pub fn of(m: &Metadata) -> FileMeta {
        let btime = m
            .created()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos().min(i64::MAX as u128) as i64);
        FileMeta {
            dev: m.dev(),
            ino: m.ino(),
            btime,
            len: m.len(),
        }
    }

    pub fn inode(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }
}

/// The hash of a file's first `len` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Prefix {
    pub len: u32,
    pub hash: u64,
}

impl Prefix {
    pub fn of(bytes: &[u8]) -> Prefix {
        Prefix {
            len: bytes.len() as u32,
            hash: xxh3_64(bytes),
        }
    }

    /// Whether the prefix covers the whole fingerprint (identity is settled).
    pub fn is_full(&self, fingerprint_bytes: usize) -> bool {
        self.len as usize >= fingerprint_bytes
    }
}

/// Reads up to `n` bytes from the start of `file` into `buf` (fewer if the
/// file is shorter). Uses positioned reads, so the file's offset is untouched.
pub fn read_prefix(file: &File, n: usize, buf: &mut Vec<u8>) -> io::Result<()> {
    buf.clear();
    buf.resize(n, 0);
    let mut got = 0;
    while got < n {
        match file.read_at(&mut buf[got..], got as u64) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(got);
    Ok(())
}

/// Whether `file` still starts with the bytes `prefix` was computed from.
pub fn prefix_matches(file: &File, prefix: Prefix, buf: &mut Vec<u8>) -> io::Result<bool> {
    if prefix.len == 0 {
        return Ok(true);
    }
    read_prefix(file, prefix.len as usize, buf)?;
    Ok(buf.len() == prefix.len as usize && xxh3_64(buf) == prefix.hash)
}

/// The key of a stream first seen as `meta` with first bytes `first`.
pub fn derive_key(meta: &FileMeta, first: &[u8]) -> u64 {
    let mut h = Xxh3::new();
    h.update(b"hf-fkey1");
    h.update(&meta.dev.to_le_bytes());
    h.update(&meta.ino.to_le_bytes());
    h.update(&meta.btime.unwrap_or(i64::MIN).to_le_bytes());
    h.update(first);
    h.digest()
}

/// What became of a known stream whose device and inode were found again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The same file, at least as long as what was read of it.
    Same,
    /// Truncated (and perhaps rewritten) in place: copytruncate, or `> file`.
    /// The stream continues in a new generation from offset 0.
    Truncated,
    /// The inode now belongs to a different file (the old one was deleted
    /// and its inode reused): a new stream.
    Replaced,
}

/// Judges a known stream (`known_btime`, read up to `read_pos`) against what
/// is on disk now. `prefix_ok` says whether the file still starts with the
/// stream's prefix. Without birth times a reused inode cannot be told from a
/// truncated file; both are then read from the start as a new generation, so
/// the outcome for the data is the same.
pub fn judge(known_btime: Option<i64>, read_pos: u64, now: &FileMeta, prefix_ok: bool) -> Verdict {
    if let (Some(a), Some(b)) = (known_btime, now.btime) {
        if a != b {
            return Verdict::Replaced;
        }
    }
    if !prefix_ok || now.len < read_pos {
        return Verdict::Truncated;
    }
    Verdict::Same
}

/// What is known of a stream whose file is to be found again.
#[derive(Debug, Clone, Copy)]
pub struct Known {
    pub dev: u64,
    pub ino: u64,
    pub btime: Option<i64>,
    pub prefix: Prefix,
    /// Bytes of it already read: the file found must be at least this long.
    pub read_pos: u64,
}

/// A file found again by [`find_moved`], open, and what `stat` said of it.
#[derive(Debug)]
pub struct Moved {
    pub path: PathBuf,
    pub file: File,
    pub meta: FileMeta,
}

/// The entries of a directory by inode, read from the directory itself (no
/// `stat` per entry); empty if it does not exist. Read once per directory
/// and scan, however many streams look for their file in it.
pub fn list_inodes(dir: &Path) -> io::Result<HashMap<u64, Vec<PathBuf>>> {
    let mut by_ino: HashMap<u64, Vec<PathBuf>> = HashMap::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(by_ino),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        by_ino.entry(entry.ino()).or_default().push(entry.path());
    }
    Ok(by_ino)
}

/// Opens the file `known` describes among the entries of its directory
/// (`listing`, from [`list_inodes`]): the entry with its inode, then, once
/// open, the same device, birth time and first bytes, and at least
/// `read_pos` bytes. Only the same directory is searched: logrotate and
/// the applications that rotate their own logs rename within it, and a
/// search wider than that would cost a walk of the file system per stream.
/// `None` if no such file is there (deleted, compressed, moved elsewhere,
/// truncated, or its inode reused by another file).
pub fn open_moved(
    opener: &Opener,
    listing: &HashMap<u64, Vec<PathBuf>>,
    known: &Known,
    buf: &mut Vec<u8>,
) -> io::Result<Option<Moved>> {
    for path in listing.get(&known.ino).into_iter().flatten() {
        let path = path.clone();
        let (file, m) = match opener.open(&path) {
            Ok(Opened::File(f, m)) => (f, m),
            // Not a file the source may read: not the one it followed.
            Ok(Opened::Skipped(_)) => continue,
            // Renamed or deleted since the directory was read.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let meta = FileMeta::of(&m);
        if meta.inode() != (known.dev, known.ino) {
            continue;
        }
        let same = prefix_matches(&file, known.prefix, buf)?;
        if judge(known.btime, known.read_pos, &meta, same) != Verdict::Same {
            return Ok(None);
        }
        return Ok(Some(Moved { path, file, meta }));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn meta(btime: Option<i64>, len: u64) -> FileMeta {
        FileMeta {
            dev: 1,
            ino: 2,
            btime,
            len,
        }
    }

    #[test]
    fn verdicts() {
        assert_eq!(judge(Some(5), 10, &meta(Some(5), 10), true), Verdict::Same);
        assert_eq!(judge(Some(5), 10, &meta(Some(5), 99), true), Verdict::Same);
        // Shorter than what was read: truncated in place.
        assert_eq!(
            judge(Some(5), 10, &meta(Some(5), 3), true),
            Verdict::Truncated
        );
        // Rewritten past the old offset with other first bytes.
        assert_eq!(
            judge(Some(5), 10, &meta(Some(5), 50), false),
            Verdict::Truncated
        );
        // Inode reused: another birth time, whatever the content says.
        assert_eq!(
            judge(Some(5), 10, &meta(Some(6), 50), true),
            Verdict::Replaced
        );
        // No birth time known: content decides.
        assert_eq!(judge(None, 10, &meta(Some(6), 50), true), Verdict::Same);
        assert_eq!(judge(None, 10, &meta(None, 50), false), Verdict::Truncated);
    }

    #[test]
    fn keys_differ_by_inode_and_content_and_prefixes_check_bytes() {
        let a = derive_key(&meta(Some(1), 0), b"hello");
        assert_eq!(a, derive_key(&meta(Some(1), 0), b"hello"));
        assert_ne!(a, derive_key(&meta(Some(1), 0), b"hellp"));
        assert_ne!(
            a,
            derive_key(
                &FileMeta {
                    ino: 3,
                    ..meta(Some(1), 0)
                },
                b"hello"
            )
        );
        assert_ne!(a, derive_key(&meta(Some(2), 0), b"hello"));

        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let mut f = File::create(&p).unwrap();
        f.write_all(b"0123456789").unwrap();
        let f = File::open(&p).unwrap();
        let mut buf = Vec::new();
        read_prefix(&f, 4, &mut buf).unwrap();
        assert_eq!(buf, b"0123");
        read_prefix(&f, 64, &mut buf).unwrap();
        assert_eq!(buf, b"0123456789");
        assert!(prefix_matches(&f, Prefix::of(b"0123"), &mut buf).unwrap());
        assert!(!prefix_matches(&f, Prefix::of(b"0124"), &mut buf).unwrap());
        // A prefix longer than the file no longer matches.
        assert!(!prefix_matches(&f, Prefix::of(b"0123456789a"), &mut buf).unwrap());
        assert!(Prefix::of(b"0123").is_full(4));
        assert!(!Prefix::of(b"012").is_full(4));
    }

    fn find_moved(dir: &Path, known: &Known, buf: &mut Vec<u8>) -> io::Result<Option<Moved>> {
        let opener = Opener::new(
            super::super::open::FollowSymlinks::Always,
            Default::default(),
        );
        open_moved(&opener, &list_inodes(dir)?, known, buf)
    }

    fn known_of(path: &Path, prefix: &[u8], read_pos: u64) -> Known {
        let m = FileMeta::of(&std::fs::metadata(path).unwrap());
        Known {
            dev: m.dev,
            ino: m.ino,
            btime: m.btime,
            prefix: Prefix::of(prefix),
            read_pos,
        }
    }

    /// A file renamed to a name no glob matches is found by its inode, and
    /// only if it is still the file that was read.
    #[test]
    fn a_renamed_file_is_found_again_in_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("app.log");
        std::fs::write(&live, b"first line\nsecond line\n").unwrap();
        let known = known_of(&live, b"first line", 11);
        std::fs::rename(&live, dir.path().join("app.log.1")).unwrap();
        // The new live file, a neighbour with the same first bytes.
        std::fs::write(&live, b"first line\nsecond line\nthird\n").unwrap();
        let mut buf = Vec::new();
        let found = find_moved(dir.path(), &known, &mut buf).unwrap().unwrap();
        assert_eq!(found.path, dir.path().join("app.log.1"));
        assert_eq!(found.meta.inode(), (known.dev, known.ino));
        assert_eq!(found.meta.len, 23);

        // Read further than the file is long: truncated, not ours to continue.
        let longer = Known {
            read_pos: 99,
            ..known
        };
        assert!(find_moved(dir.path(), &longer, &mut buf).unwrap().is_none());
        // Other first bytes: rewritten in place.
        let other = Known {
            prefix: Prefix::of(b"first linf"),
            ..known
        };
        assert!(find_moved(dir.path(), &other, &mut buf).unwrap().is_none());
        // Another birth time: the inode belongs to another file now.
        if let Some(b) = known.btime {
            let reborn = Known {
                btime: Some(b + 1),
                ..known
            };
            assert!(find_moved(dir.path(), &reborn, &mut buf).unwrap().is_none());
        }
        // Moved out of the directory, or deleted: not found.
        let elsewhere = tempfile::tempdir_in(dir.path()).unwrap();
        std::fs::rename(
            dir.path().join("app.log.1"),
            elsewhere.path().join("app.log.1"),
        )
        .unwrap();
        assert!(find_moved(dir.path(), &known, &mut buf).unwrap().is_none());
        assert!(find_moved(&dir.path().join("gone"), &known, &mut buf)
            .unwrap()
            .is_none());
    }
}
