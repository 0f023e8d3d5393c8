//! A small harness for the segment-log integration tests: a log in a
//! temporary directory, events whose bytes follow from their sequence
//! number, a walker over segment files that follows the byte layout of
//! `docs/on-disk-format.md` on its own (so the tests do not trust the decoder
//! they are testing), a writer of format-1 segments (what an older holdfast
//! left behind), and helpers that damage bytes at exact offsets.
//!
//! Included with `#[path = "common/seglog.rs"] mod common;`; not every test
//! file uses every helper.
#![allow(dead_code)]

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use holdfast::seglog::{
    Batch, Compression, Consumer, Event, Log, LogOptions, LossReason, SeqRange,
};

/// Segment header bytes, frame header bytes, block header bytes, the
/// block's context length field and per-event framing, as documented in
/// `docs/on-disk-format.md` (format 2).
pub const SEGMENT_HEADER: u64 = 32;
pub const FRAME_HEADER: u64 = 28;
pub const BLOCK_HEADER: u64 = 16;
pub const CONTEXT_HEADER: u64 = 4;
pub const EVENT_HEADER: u64 = 4;

/// Every codec the log can write.
pub const CODECS: [Compression; 3] = [
    Compression::None,
    Compression::Zstd { level: 1 },
    Compression::Lz4,
];

/// Every event written by [`append_frames`] is this long, so frame sizes and
/// offsets are plain arithmetic.
pub const EVENT_LEN: usize = 60;

/// Small segments (so a few hundred events make several sealed ones), a
/// budget far above what the tests write, cursors that reach disk only when
/// a test asks (explicit sync or close), so every test knows exactly what
/// is in the cursor slots, and blocks stored uncompressed, so that every
/// frame's size and every event's offset is plain arithmetic. 4352 bytes
/// are a segment header and exactly 18 frames of three events
/// ([`frame_len`]`(3)` = 240).
pub fn small_options() -> LogOptions {
    LogOptions {
        segment_bytes: 4352,
        compression: Compression::None,
        max_bytes: 1 << 20,
        cursor_sync_interval: Duration::from_secs(3600),
        append_timeout: Duration::from_secs(5),
        ..LogOptions::default()
    }
}

/// The bytes of event `seq`: its number, then a pattern that depends on it,
/// [`EVENT_LEN`] bytes in all. A frame from the wrong place or with shifted
/// bytes cannot pass for the right one.
pub fn payload(seq: u64) -> Vec<u8> {
    let mut b = format!("event {seq:08} ").into_bytes();
    let mut i = 0u64;
    while b.len() < EVENT_LEN {
        b.push(b'a' + ((seq * 7 + i) % 26) as u8);
        i += 1;
    }
    b
}

/// Size on disk of a frame holding one uncompressed block without context
/// (one append under `Compression::None`) of `events` events of
/// [`EVENT_LEN`] bytes.
pub fn frame_len(events: u64) -> u64 {
    FRAME_HEADER + BLOCK_HEADER + CONTEXT_HEADER + events * (EVENT_HEADER + EVENT_LEN as u64)
}

/// A log directory that outlives the handles opened on it.
pub struct TestDir {
    pub dir: tempfile::TempDir,
    pub opts: LogOptions,
}

impl TestDir {
    pub fn new() -> TestDir {
        TestDir::with_options(small_options())
    }

    pub fn with_options(opts: LogOptions) -> TestDir {
        TestDir {
            dir: tempfile::tempdir().unwrap(),
            opts,
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn open(&self) -> Log {
        Log::open(self.path(), self.opts.clone()).unwrap()
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path().join(name)
    }

    /// The path of the segment whose first event is `base`.
    pub fn segment(&self, base: u64) -> PathBuf {
        self.file(&format!("{base:020}.seg"))
    }

    /// Segments on disk, as (base sequence, file length), oldest first.
    pub fn segments(&self) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = std::fs::read_dir(self.path())
            .unwrap()
            .filter_map(|e| {
                let e = e.unwrap();
                let name = e.file_name().into_string().unwrap();
                let digits = name.strip_suffix(".seg")?;
                if digits.len() != 20 {
                    return None;
                }
                Some((digits.parse().ok()?, e.metadata().unwrap().len()))
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// The frames of segment `base`, walked with the documented layout.
    pub fn frames(&self, base: u64) -> Vec<FrameAt> {
        walk_frames(&std::fs::read(self.segment(base)).unwrap())
    }
}

/// Where a frame sits in its segment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameAt {
    pub offset: u64,
    /// Total bytes: 8 + the length field.
    pub len: u64,
    pub first_seq: u64,
    pub count: u64,
}

impl FrameAt {
    /// Offset of the first payload byte (the first block's header).
    pub fn payload(&self) -> u64 {
        self.offset + FRAME_HEADER
    }

    /// Offset of the first event's length field, in a frame of one
    /// uncompressed block without context.
    pub fn first_event(&self) -> u64 {
        self.payload() + BLOCK_HEADER + CONTEXT_HEADER
    }

    pub fn seqs(&self) -> std::ops::Range<u64> {
        self.first_seq..self.first_seq + self.count
    }
}

/// Follows the length fields of an undamaged segment image.
pub fn walk_frames(image: &[u8]) -> Vec<FrameAt> {
    let u32_at = |at: usize| u32::from_le_bytes(image[at..at + 4].try_into().unwrap());
    let mut frames = Vec::new();
    let mut at = SEGMENT_HEADER as usize;
    while at + FRAME_HEADER as usize <= image.len() {
        let len = 8 + u32_at(at) as usize;
        let first_seq = u64::from_le_bytes(image[at + 8..at + 16].try_into().unwrap());
        frames.push(FrameAt {
            offset: at as u64,
            len: len as u64,
            first_seq,
            count: u32_at(at + 16) as u64,
        });
        at += len;
    }
    assert_eq!(at, image.len(), "segment image does not end on a frame");
    frames
}

/// Appends `frames` frames of `per_frame` events each (one append per
/// frame, awaited before the next, so each append is exactly one frame).
pub fn append_frames(log: &Log, frames: u64, per_frame: u64) -> SeqRange {
    let start = log.next_seq();
    for _ in 0..frames {
        let first = log.next_seq();
        let mut b = Batch::new();
        for seq in first..first + per_frame {
            b.push(&payload(seq));
        }
        let r = log.append_blocking(b).unwrap();
        assert_eq!(
            r,
            SeqRange {
                start: first,
                end: first + per_frame
            }
        );
    }
    SeqRange {
        start,
        end: log.next_seq(),
    }
}

/// Reads until caught up.
pub fn read_all(c: &mut Consumer) -> Vec<Event> {
    let mut out = Vec::new();
    loop {
        let got = c.read(1000, usize::MAX).unwrap();
        if got.is_empty() {
            return out;
        }
        out.extend(got);
    }
}

/// Sequence numbers of `events`, after checking that each event holds
/// exactly the bytes written for its sequence number.
pub fn seqs(events: &[Event]) -> Vec<u64> {
    for e in events {
        assert_eq!(
            e.data.as_ref(),
            payload(e.seq).as_slice(),
            "event {} does not hold what was appended",
            e.seq
        );
    }
    events.iter().map(|e| e.seq).collect()
}

/// Every sequence number in `range`.
pub fn span(range: std::ops::Range<u64>) -> Vec<u64> {
    range.collect()
}

/// `range` without the sequence numbers in `hole`.
pub fn span_without(range: std::ops::Range<u64>, hole: std::ops::Range<u64>) -> Vec<u64> {
    range.filter(|s| !hole.contains(s)).collect()
}

/// `range` without the sequence numbers in any of `holes`.
pub fn span_without_all(range: std::ops::Range<u64>, holes: &[std::ops::Range<u64>]) -> Vec<u64> {
    range
        .filter(|s| !holes.iter().any(|h| h.contains(s)))
        .collect()
}

/// Events `consumer` lost for `reason` since the log was opened.
pub fn lost(log: &Log, consumer: &str, reason: LossReason) -> u64 {
    let stats = log.stats();
    let c = stats
        .consumers
        .iter()
        .find(|c| c.name == consumer)
        .unwrap_or_else(|| panic!("no consumer {consumer}"));
    c.lost.iter().find(|(r, _)| *r == reason).unwrap().1
}

/// Flips one bit of the byte at `offset`.
pub fn flip_bit(path: &Path, offset: u64, bit: u8) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[offset as usize] ^= 1 << bit;
    std::fs::write(path, bytes).unwrap();
}

/// Overwrites `len` bytes at `offset` with zeros.
pub fn zero(path: &Path, offset: u64, len: u64) {
    let mut f = OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(&vec![0u8; len as usize]).unwrap();
}

/// Cuts the file to `len` bytes.
pub fn truncate(path: &Path, len: u64) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

/// One block of a format-2 frame, as the documented layout places it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockAt {
    /// Offset of the block header in the segment file.
    pub offset: u64,
    pub stored_len: u64,
    pub count: u64,
    pub raw_len: u64,
    pub codec: u8,
}

impl BlockAt {
    /// Offset of the first byte of the stored body.
    pub fn body(&self) -> u64 {
        self.offset + BLOCK_HEADER
    }

    /// Header and body: the bytes a damaged block costs.
    pub fn len(&self) -> u64 {
        BLOCK_HEADER + self.stored_len
    }
}

/// The blocks of an undamaged format-2 frame of `image`.
pub fn walk_blocks(image: &[u8], frame: &FrameAt) -> Vec<BlockAt> {
    let u32_at = |at: usize| u32::from_le_bytes(image[at..at + 4].try_into().unwrap()) as u64;
    let mut blocks = Vec::new();
    let mut at = frame.payload();
    let end = frame.offset + frame.len;
    while at < end {
        let b = BlockAt {
            offset: at,
            stored_len: u32_at(at as usize),
            count: u32_at(at as usize + 4),
            raw_len: u32_at(at as usize + 8),
            codec: image[at as usize + 12],
        };
        at += b.len();
        blocks.push(b);
    }
    assert_eq!(at, end, "blocks do not fill the frame");
    assert_eq!(blocks.iter().map(|b| b.count).sum::<u64>(), frame.count);
    blocks
}

/// The CRC field of the frame at `offset`, recomputed over the bytes that
/// follow it (as a writer would have computed it for them).
pub fn fix_frame_crc(image: &mut [u8], offset: u64) {
    let at = offset as usize;
    let len = u32::from_le_bytes(image[at..at + 4].try_into().unwrap()) as usize;
    let crc = crc32fast::hash(&image[at + 8..at + 8 + len]);
    image[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Merges frames `i` and `i + 1` of a segment image into one frame holding
/// both their blocks, as one group commit of the two appends would have
/// written it (first sequence and append time of the first, the counts
/// summed, a new CRC). Returns the new image and the merged frame.
pub fn merge_frames(image: &[u8], i: usize) -> (Vec<u8>, FrameAt) {
    let frames = walk_frames(image);
    let (a, b) = (frames[i], frames[i + 1]);
    let (a_at, b_at) = (a.offset as usize, b.offset as usize);
    let mut out = image[..a_at].to_vec();
    let payload_len = (a.len - FRAME_HEADER) + (b.len - FRAME_HEADER);
    out.extend_from_slice(&((20 + payload_len) as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&a.first_seq.to_le_bytes());
    out.extend_from_slice(&((a.count + b.count) as u32).to_le_bytes());
    out.extend_from_slice(&image[a_at + 20..a_at + 28]);
    out.extend_from_slice(&image[a_at + FRAME_HEADER as usize..b_at]);
    out.extend_from_slice(&image[b_at + FRAME_HEADER as usize..b_at + b.len as usize]);
    out.extend_from_slice(&image[b_at + b.len as usize..]);
    fix_frame_crc(&mut out, a.offset);
    let merged = FrameAt {
        offset: a.offset,
        len: 8 + 20 + payload_len,
        first_seq: a.first_seq,
        count: a.count + b.count,
    };
    (out, merged)
}

/// A segment header in format `version`, written from the documented
/// layout.
pub fn segment_header(version: u16, base_seq: u64, created_ms: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(SEGMENT_HEADER as usize);
    b.extend_from_slice(b"HFSG");
    b.extend_from_slice(&version.to_le_bytes());
    b.push(1); // CRC-32
    b.push(0);
    b.extend_from_slice(&base_seq.to_le_bytes());
    b.extend_from_slice(&created_ms.to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// A format-1 segment as holdfast wrote it before format 2: its header,
/// then one frame per entry of `frames` (events framed one after the
/// other, no block), events numbered from `base_seq` on and holding
/// [`payload`] of their sequence number.
pub fn v1_segment(base_seq: u64, frames: &[u64], append_ms: u64) -> Vec<u8> {
    let mut b = segment_header(1, base_seq, append_ms);
    let mut seq = base_seq;
    for &count in frames {
        let mut body = Vec::new();
        body.extend_from_slice(&seq.to_le_bytes());
        body.extend_from_slice(&(count as u32).to_le_bytes());
        body.extend_from_slice(&append_ms.to_le_bytes());
        for s in seq..seq + count {
            let p = payload(s);
            body.extend_from_slice(&(p.len() as u32).to_le_bytes());
            body.extend_from_slice(&p);
        }
        b.extend_from_slice(&(body.len() as u32).to_le_bytes());
        b.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        b.extend_from_slice(&body);
        seq += count;
    }
    b
}

/// Size of a format-1 frame of `events` events of [`EVENT_LEN`] bytes.
pub fn v1_frame_len(events: u64) -> u64 {
    FRAME_HEADER + events * (EVENT_HEADER + EVENT_LEN as u64)
}
