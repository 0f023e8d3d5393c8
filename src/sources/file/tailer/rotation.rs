//! Rotation identity as decisions: what a file seen on disk means for the
//! stream it may belong to, returned as a value for the tailer to act on.
//!
//! Each function here looks at facts already gathered (a stream, what a
//! scan or a `stat` said, bytes already read from the file) and does no
//! I/O of its own beyond reading through the closure it is given, so every
//! case of rotation is a unit test:
//!
//! * [`sighting`]: a scan found a followed file's inode at a matching path
//!   (renamed within the globs, grown, changed while closed);
//! * [`first_bytes`]: after a read, do the file's first bytes still say it
//!   is the stream's file (truncated in place or rewritten: a new
//!   generation; an empty file that now starts like a followed one: judged
//!   again as a possible copy; a prefix that grew);
//! * [`copy_of`]: is a new file a copy of a detached stream's file
//!   (copytruncate's `app.log.1`), to continue or already read;
//! * [`unattached`]: what a new file whose first bytes are those of a
//!   stream is (a copy to continue, lines already read, set aside as a
//!   possible copy still being made, or new);
//! * [`reopened`]: a closed stream's path opened again (another file now,
//!   the same, truncated in place, or its inode reused by a new file; the
//!   last three as [`judge`] says, which also vets a file found again by
//!   inode after it left the globs).

use std::io;
use std::time::Duration;

use super::super::discovery::FoundFile;
use super::super::identity::{judge, FileMeta, Prefix, Verdict};
use super::protocol::StreamId;
use super::stream::Stream;

/// What a scan's sighting of a followed file (by its inode, at a path the
/// globs match) asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Sighting {
    /// Found under another matching name: renamed within the globs
    /// (`app.log` → `app.log.1`), or found under its rotated name after a
    /// restart. The stream follows it there.
    pub(super) renamed: bool,
    pub(super) next: Next,
}

/// What to do next with a followed file a scan saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Nothing new to read.
    Nothing,
    /// Open: its length differs from what was read, read it.
    Read,
    /// Closed, and renamed or changed (length, birth time, or a prefix that
    /// can grow): open it again, which judges it first.
    Reopen,
}

/// Judges a scan's sighting `found` of the stream `s` (attached to the
/// same inode).
pub(super) fn sighting(s: &Stream, found: &FoundFile, fingerprint_bytes: usize) -> Sighting {
    let renamed = s.path != found.path;
    let next = if s.file.is_none() {
        let changed = found.meta.len != s.read_pos
            || found.meta.btime != s.meta.btime
            || (s.prefix.len as u64) < found.meta.len.min(fingerprint_bytes as u64);
        if renamed || changed {
            Next::Reopen
        } else {
            Next::Nothing
        }
    } else if found.meta.len != s.read_pos {
        Next::Read
    } else {
        Next::Nothing
    };
    Sighting { renamed, next }
}

/// What a stream's file's first bytes, read again after a read, say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FirstBytes {
    /// Still the stream's prefix, no longer than it.
    Same,
    /// The stream's prefix, and more of it: identity settles as the file
    /// grows (up to `fingerprint_bytes`).
    Grown(Prefix),
    /// Not the stream's prefix any more (fingerprint mismatch, or shorter
    /// than it): truncated, perhaps rewritten, in place. What was just read
    /// may belong to the new contents: the stream ends before it and the
    /// file is read from 0 as the next generation.
    Changed,
    /// The file was found empty and now starts like a followed file, or one
    /// just truncated away: it may be copytruncate's copy, found between its
    /// creation and the first write of its contents, so it is identified
    /// again as if found only now.
    Reidentify,
}

/// Judges the first bytes `first` of the stream `s`'s file (read up to
/// `fingerprint_bytes`). `like_followed` says whether a full prefix is that
/// of an attached stream or of a stream just truncated away; it is asked
/// only of a file found empty whose prefix has just become full.
pub(super) fn first_bytes(
    s: &Stream,
    first: &[u8],
    fingerprint_bytes: usize,
    like_followed: impl FnOnce(Prefix) -> bool,
) -> FirstBytes {
    let plen = s.prefix.len as usize;
    if first.len() < plen || xxhash_rust::xxh3::xxh3_64(&first[..plen]) != s.prefix.hash {
        return FirstBytes::Changed;
    }
    if plen == 0
        && s.read_pos == 0
        && s.generation == 0
        && s.attached
        && s.unseen_since.is_none()
        && first.len() >= fingerprint_bytes
        // Only as a copy of a followed file, or of one just truncated: a
        // new file that merely starts like a file rotated away long ago is
        // not held against it.
        && like_followed(Prefix::of(first))
    {
        return FirstBytes::Reidentify;
    }
    if first.len() > plen {
        FirstBytes::Grown(Prefix::of(first))
    } else {
        FirstBytes::Same
    }
}

/// What a new file is to a detached stream whose full prefix it shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Copy {
    /// A copy (copytruncate's `app.log.1`, or a file moved across file
    /// systems): continue the detached stream from its position in it.
    Continues,
    /// Shorter than what was emitted of the stream: the copy was taken
    /// before the original was read to its end, and holds nothing new.
    AlreadyRead,
}

/// Whether a file `len` bytes long whose full prefix is `prefix` is a copy
/// of the detached stream `s`'s file. If it is longer than what was emitted
/// of the stream, the bytes just before the stream's position must match
/// the last bytes read (or, for a stream restored from a checkpoint without
/// them, be a line end). `read_at` reads the new file's bytes at an offset,
/// false if it cannot.
pub(super) fn copy_of(
    s: &Stream,
    prefix: Prefix,
    len: u64,
    fingerprint_bytes: usize,
    mut read_at: impl FnMut(&mut [u8], u64) -> bool,
) -> Option<Copy> {
    if s.prefix != prefix || !s.prefix.is_full(fingerprint_bytes) {
        return None;
    }
    if len < s.emitted {
        return Some(Copy::AlreadyRead);
    }
    let mut buf = [0u8; super::stream::TAIL_BYTES];
    let ok = match s.tail.within(len) {
        Some((at, tail)) => {
            let b = &mut buf[..tail.len()];
            read_at(b, at) && *b == *tail
        }
        None => {
            let b = &mut buf[..1];
            s.emitted == 0 || (read_at(b, s.emitted - 1) && b[0] == b'\n')
        }
    };
    ok.then_some(Copy::Continues)
}

/// What a file no stream is attached to, with a full prefix, is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unattached {
    /// A copy of this detached stream's file: the stream continues in it.
    Continues(StreamId),
    /// It may be the copy of a followed file about to be truncated
    /// (copytruncate copies first): set aside, judged again at the next
    /// scan, for up to `rotate_wait`.
    SetAside,
    /// A new stream; from the file's end if it holds only lines already
    /// read (a copy taken before its original was read to its end).
    New { already_read: bool },
}

/// Judges a file with a full prefix no stream is attached to: `copy` is
/// what it is to the detached streams ([`copy_of`]); `set_aside_for`, asked
/// only if it is no copy of theirs, says for how long it has been set
/// aside as a possible copy of a followed file (`None` if it cannot be one).
pub(super) fn unattached(
    copy: Option<(StreamId, Copy)>,
    rotate_wait: Duration,
    set_aside_for: impl FnOnce() -> Option<Duration>,
) -> Unattached {
    match copy {
        Some((id, Copy::Continues)) => Unattached::Continues(id),
        Some((_, Copy::AlreadyRead)) => Unattached::New { already_read: true },
        None if set_aside_for().is_some_and(|d| d < rotate_wait) => Unattached::SetAside,
        None => Unattached::New {
            already_read: false,
        },
    }
}

/// What a closed stream's path leads to, opened again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reopened {
    /// Another inode: the file was replaced at its path (renamed away and a
    /// new one created, or deleted and created again). A scan sorts out
    /// both files.
    OtherFile,
    /// The stream's file, at least as long as what was read: read on.
    Same,
    /// The stream's inode, truncated or rewritten in place: the next
    /// generation, from offset 0.
    Truncated,
    /// The stream's inode with another birth time: the file was deleted and
    /// its inode reused by a new file. The stream ends; the file is new.
    Replaced,
}

/// Judges the file the closed stream `s`'s path now leads to (`now`, as
/// `stat` saw it). `prefix_ok` reads whether the file still starts with
/// the stream's prefix; it is asked only of the stream's own inode.
pub(super) fn reopened(
    s: &Stream,
    now: &FileMeta,
    prefix_ok: impl FnOnce() -> io::Result<bool>,
) -> io::Result<Reopened> {
    if now.inode() != s.meta.inode() {
        return Ok(Reopened::OtherFile);
    }
    Ok(match judge(s.meta.btime, s.read_pos, now, prefix_ok()?) {
        Verdict::Same => Reopened::Same,
        Verdict::Truncated => Reopened::Truncated,
        Verdict::Replaced => Reopened::Replaced,
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Instant;

    use super::super::super::identity::FileMeta;
    use super::super::stream::LastBytes;
    use super::*;

    const FP: usize = 8;

    fn meta(len: u64) -> FileMeta {
        FileMeta {
            dev: 1,
            ino: 2,
            btime: Some(7),
            len,
        }
    }

    /// A stream of `app.log` with first bytes `first`, read (and emitted)
    /// up to `pos`.
    fn stream(first: &[u8], pos: u64) -> Stream {
        Stream::sample("/var/log/app.log", 2, first, pos)
    }

    fn found(path: &str, len: u64) -> FoundFile {
        FoundFile {
            path: PathBuf::from(path),
            meta: meta(len),
        }
    }

    fn open(mut s: Stream) -> Stream {
        s.file = Some(std::fs::File::open("/dev/null").expect("/dev/null opens"));
        s
    }

    #[test]
    fn a_sighting_of_an_unchanged_file_asks_for_nothing() {
        let s = stream(b"01234567", 100);
        let f = found("/var/log/app.log", 100);
        let want = Sighting {
            renamed: false,
            next: Next::Nothing,
        };
        assert_eq!(sighting(&s, &f, FP), want);
        assert_eq!(sighting(&open(s), &f, FP), want);
    }

    #[test]
    fn a_file_renamed_within_the_globs_is_followed_there() {
        let f = found("/var/log/app.log.1", 100);
        // Open: its descriptor reads on, nothing to reopen.
        let s = open(stream(b"01234567", 100));
        assert_eq!(
            sighting(&s, &f, FP),
            Sighting {
                renamed: true,
                next: Next::Nothing
            }
        );
        // Renamed and written to since it was read.
        let f = found("/var/log/app.log.1", 150);
        assert_eq!(sighting(&s, &f, FP).next, Next::Read);
        // Closed (idle, or the descriptor cap): opened at its new name.
        let f = found("/var/log/app.log.1", 100);
        let s = stream(b"01234567", 100);
        assert_eq!(
            sighting(&s, &f, FP),
            Sighting {
                renamed: true,
                next: Next::Reopen
            }
        );
    }

    #[test]
    fn a_closed_file_that_changed_is_opened_again() {
        let s = stream(b"01234567", 100);
        // Grown, or shorter (truncated: reopening judges it).
        assert_eq!(
            sighting(&s, &found("/var/log/app.log", 150), FP).next,
            Next::Reopen
        );
        assert_eq!(
            sighting(&s, &found("/var/log/app.log", 10), FP).next,
            Next::Reopen
        );
        // Same length, another birth time: its inode was reused.
        let mut f = found("/var/log/app.log", 100);
        f.meta.btime = Some(8);
        assert_eq!(sighting(&s, &f, FP).next, Next::Reopen);
        // A prefix shorter than the file allows can grow.
        let short = stream(b"0123", 100);
        assert_eq!(
            sighting(&short, &found("/var/log/app.log", 100), FP).next,
            Next::Reopen
        );
        // An open file read to its end: nothing to do however it looks.
        let s = open(stream(b"01234567", 100));
        let mut f = found("/var/log/app.log", 100);
        f.meta.btime = Some(8);
        assert_eq!(sighting(&s, &f, FP).next, Next::Nothing);
    }

    #[test]
    fn first_bytes_that_still_match_keep_the_stream() {
        let s = stream(b"01234567", 100);
        assert_eq!(first_bytes(&s, b"01234567", FP, |_| true), FirstBytes::Same);
        // A prefix still short grows with the file.
        let s = stream(b"0123", 4);
        assert_eq!(
            first_bytes(&s, b"012345", FP, |_| true),
            FirstBytes::Grown(Prefix::of(b"012345"))
        );
    }

    #[test]
    fn a_fingerprint_mismatch_or_a_shorter_file_is_a_new_generation() {
        // Truncated in place and rewritten with other first bytes.
        let s = stream(b"01234567", 100);
        assert_eq!(
            first_bytes(&s, b"abcdefgh", FP, |_| true),
            FirstBytes::Changed
        );
        // Truncated below the prefix (copytruncate, `> file`).
        assert_eq!(first_bytes(&s, b"0123", FP, |_| true), FirstBytes::Changed);
        assert_eq!(first_bytes(&s, b"", FP, |_| true), FirstBytes::Changed);
    }

    #[test]
    fn a_file_found_empty_that_starts_like_a_followed_one_is_judged_again() {
        // Found empty: copytruncate's copy, created but not written yet.
        let s = stream(b"", 0);
        assert_eq!(
            first_bytes(&s, b"01234567", FP, |p| p == Prefix::of(b"01234567")),
            FirstBytes::Reidentify
        );
        // Like no followed file (or one rotated away long ago): a new file.
        assert_eq!(
            first_bytes(&s, b"01234567", FP, |_| false),
            FirstBytes::Grown(Prefix::of(b"01234567"))
        );
        // Not judged before its prefix is full.
        assert_eq!(
            first_bytes(&s, b"0123", FP, |_| panic!("asked too early")),
            FirstBytes::Grown(Prefix::of(b"0123"))
        );
        // A later generation, or a file being drained, is not a copy.
        let mut next = stream(b"", 0);
        next.generation = 1;
        assert_eq!(
            first_bytes(&next, b"01234567", FP, |_| true),
            FirstBytes::Grown(Prefix::of(b"01234567"))
        );
        let mut leaving = stream(b"", 0);
        leaving.unseen_since = Some(Instant::now());
        assert_eq!(
            first_bytes(&leaving, b"01234567", FP, |_| true),
            FirstBytes::Grown(Prefix::of(b"01234567"))
        );
    }

    /// A detached stream of a file holding `content`, read to `pos`, with
    /// the last bytes read remembered.
    fn detached(content: &[u8], pos: usize) -> Stream {
        let mut s = stream(&content[..FP], pos as u64);
        s.attached = false;
        s.read_pos = 0;
        s.remember_tail(&content[..pos]);
        s.read_pos = pos as u64;
        s
    }

    fn reader(bytes: &[u8]) -> impl FnMut(&mut [u8], u64) -> bool + '_ {
        move |b: &mut [u8], at: u64| {
            let at = at as usize;
            match bytes.get(at..at + b.len()) {
                Some(src) => {
                    b.copy_from_slice(src);
                    true
                }
                None => false,
            }
        }
    }

    #[test]
    fn copytruncates_copy_continues_the_detached_stream() {
        let original = b"first line\nsecond line\nthird line\n";
        let s = detached(original, 23);
        let p = Prefix::of(&original[..FP]);
        // The copy holds everything read and more: continue from 23.
        assert_eq!(
            copy_of(&s, p, original.len() as u64, FP, reader(original)),
            Some(Copy::Continues)
        );
        // Exactly what was read.
        assert_eq!(
            copy_of(&s, p, 23, FP, reader(&original[..23])),
            Some(Copy::Continues)
        );
        // Copied before the original was read to its end: nothing new.
        assert_eq!(
            copy_of(&s, p, 11, FP, reader(&original[..11])),
            Some(Copy::AlreadyRead)
        );
    }

    #[test]
    fn a_file_that_only_starts_the_same_is_no_copy() {
        let original = b"first line\nsecond line\nthird line\n";
        let s = detached(original, 23);
        let p = Prefix::of(&original[..FP]);
        // Same first bytes, other bytes where the stream stopped.
        let other = b"first line\nsecond lime\nthird line\n";
        assert_eq!(copy_of(&s, p, other.len() as u64, FP, reader(other)), None);
        // Other first bytes.
        assert_eq!(
            copy_of(&s, Prefix::of(b"other li"), 40, FP, reader(original)),
            None
        );
        // A prefix not full yet identifies nothing.
        assert_eq!(copy_of(&s, p, 40, 2 * FP, reader(original)), None);
    }

    #[test]
    fn a_stream_restored_without_its_last_bytes_needs_a_line_end() {
        let original = b"first line\nsecond line\nthird line\n";
        let mut s = detached(original, 23);
        s.tail = LastBytes::default();
        let p = Prefix::of(&original[..FP]);
        assert_eq!(
            copy_of(&s, p, 40, FP, reader(original)),
            Some(Copy::Continues)
        );
        s.emitted = 20;
        assert_eq!(copy_of(&s, p, 40, FP, reader(original)), None);
        // Nothing emitted: any copy continues it from its start.
        s.emitted = 0;
        assert_eq!(copy_of(&s, p, 40, FP, reader(b"")), Some(Copy::Continues));
    }

    #[test]
    fn a_reopened_path_is_judged_by_inode_birth_time_and_first_bytes() {
        let s = stream(b"01234567", 100);
        let ok = || Ok(true);
        assert_eq!(reopened(&s, &meta(100), ok).ok(), Some(Reopened::Same));
        assert_eq!(reopened(&s, &meta(150), ok).ok(), Some(Reopened::Same));
        // Replaced by a new inode at the same path (rename and create):
        // its first bytes are not even read.
        let other = FileMeta {
            ino: 3,
            ..meta(150)
        };
        let unread = || -> io::Result<bool> { panic!("read another file's first bytes") };
        assert_eq!(reopened(&s, &other, unread).ok(), Some(Reopened::OtherFile));
        // Truncated in place (copytruncate, `> file`).
        assert_eq!(reopened(&s, &meta(10), ok).ok(), Some(Reopened::Truncated));
        // Rewritten in place past what was read: a fingerprint mismatch.
        let changed = || Ok(false);
        assert_eq!(
            reopened(&s, &meta(150), changed).ok(),
            Some(Reopened::Truncated)
        );
        // The same inode reused by a new file: another birth time.
        let reborn = FileMeta {
            btime: Some(8),
            ..meta(150)
        };
        assert_eq!(reopened(&s, &reborn, ok).ok(), Some(Reopened::Replaced));
        // Without birth times only the content can tell.
        let mut unknown = stream(b"01234567", 100);
        unknown.meta.btime = None;
        assert_eq!(reopened(&unknown, &reborn, ok).ok(), Some(Reopened::Same));
        assert_eq!(
            reopened(&unknown, &reborn, changed).ok(),
            Some(Reopened::Truncated)
        );
        // A failed read is the caller's to report.
        let failed = || Err(io::Error::other("EIO"));
        assert!(reopened(&s, &meta(150), failed).is_err());
    }

    #[test]
    fn a_new_file_like_a_followed_one_is_a_copy_set_aside_or_new() {
        let wait = Duration::from_secs(5);
        let never = || -> Option<Duration> { panic!("a copy is not set aside") };
        assert_eq!(
            unattached(Some((4, Copy::Continues)), wait, never),
            Unattached::Continues(4)
        );
        assert_eq!(
            unattached(Some((4, Copy::AlreadyRead)), wait, never),
            Unattached::New { already_read: true }
        );
        // Copytruncate's copy made before the truncation: waited for.
        let new = Unattached::New {
            already_read: false,
        };
        let set_aside = |secs| move || Some(Duration::from_secs(secs));
        assert_eq!(unattached(None, wait, set_aside(0)), Unattached::SetAside);
        assert_eq!(unattached(None, wait, set_aside(4)), Unattached::SetAside);
        // Not truncated within rotate_wait: a file that only starts the same.
        assert_eq!(unattached(None, wait, set_aside(5)), new);
        assert_eq!(unattached(None, wait, || None), new);
    }
}
