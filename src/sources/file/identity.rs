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

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};

use xxhash_rust::xxh3::{xxh3_64, Xxh3};

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
}
