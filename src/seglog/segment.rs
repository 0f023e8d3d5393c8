//! Segment files: naming, creation, memory maps, and the scan that recovers
//! the active segment after a crash.

use std::fs::{File, OpenOptions};
use std::io::IoSlice;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use super::error::{LogError, Result};
use super::format::{self, Damage, Decoded, SegmentHeader, SEGMENT_HEADER_LEN};
use super::io::Fs;

const SUFFIX: &str = ".seg";

/// `00000000000000001234.seg`: the base sequence, zero-padded so that a
/// directory listing sorts in log order.
pub fn file_name(base_seq: u64) -> String {
    format!("{base_seq:020}{SUFFIX}")
}

pub fn parse_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Makes creations, renames and deletions in `dir` durable.
pub fn sync_dir(fs: &Fs, dir: &Path) -> Result<()> {
    fs.sync_dir(dir)
        .map_err(|e| LogError::io("syncing directory", dir, e))
}

/// One segment as the log tracks it in memory.
#[derive(Debug)]
pub struct Segment {
    /// What its header says. `version` is 0 while unknown (a damaged
    /// header of a sealed segment: found from its frames when first read,
    /// with `created_ms` the file's modification time meanwhile).
    pub(super) header: SegmentHeader,
    pub(super) path: PathBuf,
    /// Bytes readers may see: the whole file once sealed; for the active
    /// segment, the end of the last acknowledged frame.
    pub(super) readable_len: u64,
    pub(super) sealed: bool,
    /// A read-only handle, shared by readers for mapping.
    pub(super) file: Arc<File>,
    /// The most recent map of this segment, shared by readers. For a sealed
    /// segment it covers the whole file; for the active one it may be shorter
    /// than `readable_len` and is replaced when a reader needs more.
    pub(super) map: Option<Bytes>,
    /// Frames found by earlier lookups ([`crate::seglog::stats`]), about
    /// one per [`MARK_STEP`] bytes, in order: a later lookup walks from
    /// the nearest one instead of the segment's start.
    pub(super) marks: Vec<Mark>,
}

/// Where a frame starts, for lookups by sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub first_seq: u64,
    pub offset: u64,
}

/// The least distance between two [`Mark`]s: a lookup walks at most this
/// much of frame headers past the nearest mark.
pub const MARK_STEP: u64 = 1 << 20;

impl Segment {
    /// A segment as found or created: no map yet, no marks.
    pub(super) fn new(
        header: SegmentHeader,
        path: PathBuf,
        readable_len: u64,
        sealed: bool,
        file: Arc<File>,
    ) -> Segment {
        Segment {
            header,
            path,
            readable_len,
            sealed,
            file,
            map: None,
            marks: Vec::new(),
        }
    }

    /// A map covering at least `readable_len`, reusing the cached one.
    pub fn map(&mut self) -> Result<Bytes> {
        if let Some(m) = &self.map {
            if m.len() as u64 >= self.readable_len {
                return Ok(m.clone());
            }
        }
        let m = map_file(&self.file, self.readable_len as usize, &self.path)?;
        if self.header.version == 0 {
            self.header.version = format::detect_version(&m);
        }
        self.map = Some(m.clone());
        Ok(m)
    }
}

/// Maps the first `len` bytes of a segment file read-only.
pub fn map_file(file: &File, len: usize, path: &Path) -> Result<Bytes> {
    if len == 0 {
        return Ok(Bytes::new());
    }
    // SAFETY: a segment file never shrinks below a length that has been made
    // readable. The log truncates only during recovery, before any map of
    // that segment exists, and when undoing a failed write, which only cuts
    // bytes beyond `readable_len`; `len` never exceeds `readable_len`. The
    // data-directory lock keeps other holdfast processes from writing, and
    // deleting a file leaves existing maps valid on Linux.
    let map = unsafe { memmap2::MmapOptions::new().len(len).map(file) }
        .map_err(|e| LogError::io("mapping segment", path, e))?;
    Ok(Bytes::from_owner(map))
}

/// Drops this process's page-table entries for the first `end` bytes
/// (rounded down to a page) of `map`, a read-only shared map of a segment
/// file (from [`map_file`]): the pages leave the resident set but stay in
/// the page cache, and the next access faults the same bytes back in.
/// Advisory: a failure only leaves the pages resident.
pub fn release_pages(map: &[u8], end: usize) {
    let page = page_size();
    let end = (end.min(map.len()) / page) * page;
    if end == 0 || !(map.as_ptr() as usize).is_multiple_of(page) {
        return;
    }
    // SAFETY: `[0, end)` lies inside `map` and starts on a page boundary
    // (checked); `map` is a read-only MAP_SHARED file mapping, for which
    // MADV_DONTNEED frees nothing and keeps every byte readable (the next
    // access reads the file again, whose contents below `readable_len`
    // never change).
    let rc = unsafe { libc::madvise(map.as_ptr() as *mut libc::c_void, end, libc::MADV_DONTNEED) };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "madvise(MADV_DONTNEED) on a segment map failed");
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// Creates a new segment file with its header and returns a handle for
/// appending. The caller syncs the directory.
///
/// A file already there under that name is the remains of an earlier
/// attempt that failed half-way (e.g. the disk filled between creating it
/// and syncing the directory, and removing it failed too): the caller never
/// asks for the name of a segment that holds events, so it is emptied and
/// reused rather than blocking every later attempt.
pub fn create(
    fs: &Fs,
    dir: &Path,
    base_seq: u64,
    created_ms: u64,
    sync: bool,
) -> Result<(PathBuf, File)> {
    let path = dir.join(file_name(base_seq));
    let mut f = fs
        .create(
            OpenOptions::new().read(true).append(true).create(true),
            &path,
        )
        .map_err(|e| LogError::io("creating segment", &path, e))?;
    let stale = f
        .metadata()
        .map_err(|e| LogError::io("reading metadata of", &path, e))?
        .len();
    if stale > 0 {
        tracing::warn!(segment = %path.display(), bytes = stale,
            "emptying the remains of a segment whose creation failed earlier");
        fs.set_len(&f, &path, 0)
            .map_err(|e| LogError::io("emptying segment", &path, e))?;
    }
    let header = SegmentHeader {
        base_seq,
        created_ms,
        version: format::FORMAT_VERSION,
    }
    .encode();
    let written = fs
        .write_all(&mut f, &path, 0, &mut [IoSlice::new(&header)])
        .and_then(|_| {
            if sync {
                fs.sync_data(&f, &path)
            } else {
                Ok(())
            }
        });
    if let Err(e) = written {
        // Leave no half-made segment behind; the next attempt starts over.
        let _ = fs.remove(&path);
        return Err(LogError::io("writing segment header", &path, e));
    }
    Ok((path, f))
}

/// What recovery found in a segment's frames.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// Offset just past the last valid frame.
    pub valid_end: u64,
    /// One past the last sequence number found (the base if no frame).
    pub next_seq: u64,
    /// Append time of the newest valid frame.
    pub last_append_ms: Option<u64>,
    /// Damaged regions followed by valid frames: (offset, what, bytes skipped).
    pub damaged: Vec<(u64, Damage, u64)>,
    /// Events known to be missing because of skipped damage.
    pub events_skipped: u64,
    /// A torn tail: (offset, bytes after it).
    pub torn: Option<(u64, u64)>,
}

/// Walks every frame of a segment image in format `version`, checking each
/// CRC. Damage followed by a valid frame is skipped and reported; damage or
/// a partial frame with nothing valid after it is a torn tail, to be
/// truncated.
pub fn scan(buf: &[u8], base_seq: u64, version: u16) -> Scan {
    scan_with(buf, base_seq, version, |_| {})
}

/// [`scan`], calling `passed` with the offset below which the scan will
/// not look again, after each frame.
pub fn scan_with(buf: &[u8], base_seq: u64, version: u16, mut passed: impl FnMut(usize)) -> Scan {
    let mut s = Scan {
        valid_end: SEGMENT_HEADER_LEN.min(buf.len()) as u64,
        next_seq: base_seq,
        ..Scan::default()
    };
    let mut at = SEGMENT_HEADER_LEN;
    while at <= buf.len() {
        match format::decode_frame(&buf[at..], version) {
            Decoded::Frame { header, len, .. } if header.first_seq >= s.next_seq => {
                s.events_skipped += header.first_seq - s.next_seq;
                s.next_seq = header.end_seq();
                s.last_append_ms = Some(header.append_ms);
                at += len;
                s.valid_end = at as u64;
                passed(at);
            }
            Decoded::End => break,
            Decoded::Frame { .. } | Decoded::Truncated | Decoded::Damaged(_) => {
                let damage = match format::decode_frame(&buf[at..], version) {
                    Decoded::Damaged(d) => d,
                    _ => Damage::BadPayload,
                };
                match format::resync(buf, at + 1, s.next_seq, version) {
                    Some(next) => {
                        s.damaged.push((at as u64, damage, (next - at) as u64));
                        at = next;
                    }
                    None => {
                        s.torn = Some((at as u64, (buf.len() - at) as u64));
                        break;
                    }
                }
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seglog::format::FrameHeader;

    /// A segment image of `version`: one frame per entry, whose payload
    /// `payload` makes of its events, framed, and their count.
    fn image_of(
        version: u16,
        frames: &[(u64, &[&[u8]])],
        payload: impl Fn(Vec<u8>, u32) -> Vec<u8>,
    ) -> Vec<u8> {
        let mut b = SegmentHeader {
            base_seq: 0,
            created_ms: 1,
            version,
        }
        .encode()
        .to_vec();
        for (first, events) in frames {
            let mut framed = Vec::new();
            for e in *events {
                framed.extend_from_slice(&(e.len() as u32).to_le_bytes());
                framed.extend_from_slice(e);
            }
            let p = payload(framed, events.len() as u32);
            let h = FrameHeader {
                first_seq: *first,
                count: events.len() as u32,
                append_ms: 5,
            };
            b.extend_from_slice(&h.encode(&[IoSlice::new(&p)]));
            b.extend_from_slice(&p);
        }
        b
    }

    fn image(frames: &[(u64, &[&[u8]])]) -> Vec<u8> {
        image_of(format::FORMAT_V1, frames, |framed, _| framed)
    }

    #[test]
    fn names_sort_and_parse() {
        assert_eq!(file_name(42), "00000000000000000042.seg");
        assert_eq!(parse_name(&file_name(42)), Some(42));
        assert_eq!(parse_name("42.seg"), None);
        assert_eq!(parse_name("cursors.0"), None);
    }

    #[test]
    fn scan_truncates_a_torn_tail() {
        let full = image(&[(0, &[b"a", b"b"]), (2, &[b"c"])]);
        let cut = full.len() - 2;
        let s = scan(&full[..cut], 0, format::FORMAT_V1);
        assert_eq!(s.next_seq, 2);
        assert!(s.torn.is_some());
        assert_eq!(s.valid_end as usize + s.torn.unwrap().1 as usize, cut);
    }

    /// A format-2 image: one frame per entry, each of one uncompressed
    /// block of the given events.
    fn image_v2(frames: &[(u64, &[&[u8]])]) -> Vec<u8> {
        image_of(format::FORMAT_VERSION, frames, |framed, count| {
            let blk = super::super::block::encode(
                b"",
                framed.into(),
                count,
                super::super::block::Compression::None,
            );
            let mut p = blk.head.to_vec();
            p.extend_from_slice(&blk.body);
            p
        })
    }

    #[test]
    fn scan_of_a_format_2_image_skips_damage_and_truncates_a_torn_tail() {
        let b = image_v2(&[(0, &[b"a", b"b"]), (2, &[b"c"]), (3, &[b"d"])]);
        let whole = scan(&b, 0, format::FORMAT_VERSION);
        assert_eq!(
            (whole.next_seq, whole.torn, whole.damaged.len()),
            (4, None, 0)
        );
        assert_eq!(whole.valid_end as usize, b.len());
        // Read as format 1, none of it is a frame: all torn.
        let v1 = scan(&b, 0, format::FORMAT_V1);
        assert_eq!((v1.next_seq, v1.valid_end), (0, SEGMENT_HEADER_LEN as u64));
        // The second frame (28 + 16 + 4 + 5 bytes after the first, itself
        // 28 + 16 + 4 + 5 + 5) damaged in its block header.
        let second = SEGMENT_HEADER_LEN + 58;
        let mut d = b.clone();
        d[second + 28 + 4] ^= 0x02; // the block's count
        let s = scan(&d, 0, format::FORMAT_VERSION);
        assert_eq!((s.next_seq, s.events_skipped, s.damaged.len()), (4, 1, 1));
        assert_eq!(s.damaged[0].0 as usize, second);
        let cut = scan(&b[..b.len() - 3], 0, format::FORMAT_VERSION);
        assert_eq!(cut.next_seq, 3);
        assert!(cut.torn.is_some());
    }

    #[test]
    fn scan_skips_damage_followed_by_valid_frames() {
        let mut b = image(&[(0, &[b"a"]), (1, &[b"b"]), (2, &[b"c"])]);
        let second = SEGMENT_HEADER_LEN + 8 + 20 + 5;
        b[second + 30] ^= 0x10; // payload bit of the second frame
        let s = scan(&b, 0, format::FORMAT_V1);
        assert_eq!(s.next_seq, 3);
        assert_eq!(s.damaged.len(), 1);
        assert_eq!(s.events_skipped, 1);
        assert_eq!(s.torn, None);
        assert_eq!(s.valid_end as usize, b.len());
    }
}
