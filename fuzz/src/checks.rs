//! What each fuzz target does with one input, and what it asserts.
//!
//! Shared by the libFuzzer targets (`fuzz_targets/*.rs`, nightly) and by
//! `tests/fuzz_regressions.rs`, which includes this file with `#[path]` and
//! replays the saved inputs under `tests/fixtures/fuzz/` on stable. So it
//! may use only what the holdfast crate's tests can: holdfast itself, the
//! codec crates holdfast depends on (zstd, lz4_flex), crc32fast, prost and
//! the standard library. Every check panics on failure, which libFuzzer
//! reports as a crash.

#![allow(dead_code)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};

fn le32(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// What the oracle makes of a frame: its first sequence number, append
/// time, total length, and its events, by block (format 1: one block
/// holding every event, with an empty context).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OracleFrame<'a> {
    pub first: u64,
    pub append_ms: u64,
    pub len: usize,
    pub blocks: Vec<OracleBlock<'a>>,
}

/// One block of a frame as the oracle reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OracleBlock<'a> {
    pub count: u64,
    /// Format 2: (stored length, raw length, codec) and where the body
    /// lies in the frame's payload; format 1: none.
    pub header: Option<(usize, usize, u8, std::ops::Range<usize>)>,
    /// The context and the events, or `None` when the body does not
    /// decompress to its raw length or is not filled exactly by them: the
    /// block's events are lost, the frame stays valid.
    pub body: Option<(Vec<u8>, Vec<Vec<u8>>)>,
    /// Format 1 only: the events as slices of the frame.
    pub v1_events: Vec<&'a [u8]>,
}

impl OracleFrame<'_> {
    pub fn count(&self) -> u64 {
        self.blocks.iter().map(|b| b.count).sum()
    }

    /// Every event the frame delivers: (sequence number, first sequence
    /// number of its block, context, bytes). A block whose body is damaged
    /// delivers none.
    pub fn events(&self) -> Vec<(u64, u64, Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        let mut seq = self.first;
        for b in &self.blocks {
            if let Some((ctx, evs)) = &b.body {
                for (i, e) in evs.iter().enumerate() {
                    out.push((seq + i as u64, seq, ctx.clone(), e.clone()));
                }
            }
            seq += b.count;
        }
        out
    }
}

/// An independent decoder of one frame of a segment in format `version`,
/// written from the layout in `docs/on-disk-format.md` rather than reusing
/// `format.rs` or `block.rs`, so the checks do not share the code they
/// check; bodies are decompressed with the codec crates' plain one-shot
/// calls. `None` when the bytes are not a valid frame.
pub fn oracle_frame(b: &[u8], version: u16) -> Option<OracleFrame<'_>> {
    if b.len() < 28 {
        return None;
    }
    let len = le32(b, 0);
    // Format 1: at least one empty event; format 2: at least one block header.
    let min_payload = if version == 1 { 4 } else { 16 };
    if !(20 + min_payload..=20 + (64 << 20)).contains(&len) || b.len() < 8 + len {
        return None;
    }
    if crc32fast::hash(&b[8..8 + len]) != le32(b, 4) as u32 {
        return None;
    }
    let (first, count, append_ms) = (le64(b, 8), le32(b, 16) as u64, le64(b, 20));
    // Sequence numbers must fit in 64 bits.
    if count == 0 || first.checked_add(count).is_none() {
        return None;
    }
    let payload = &b[28..8 + len];
    let blocks = if version == 1 {
        let events = oracle_events(payload, count)?;
        vec![OracleBlock {
            count,
            header: None,
            body: Some((Vec::new(), events.iter().map(|e| e.to_vec()).collect())),
            v1_events: events,
        }]
    } else {
        let mut blocks = Vec::new();
        let mut at = 0;
        let mut sum = 0u64;
        while at < payload.len() {
            let (block, next) = oracle_block(payload, at)?;
            sum += block.count;
            blocks.push(block);
            at = next;
        }
        if sum != count {
            return None;
        }
        blocks
    };
    Some(OracleFrame {
        first,
        append_ms,
        len: 8 + len,
        blocks,
    })
}

/// `count` events (u32 length, bytes) filling `b` exactly.
fn oracle_events(b: &[u8], count: u64) -> Option<Vec<&[u8]>> {
    let mut events = Vec::new();
    let mut at = 0;
    for _ in 0..count {
        if b.len() - at < 4 {
            return None;
        }
        let n = le32(b, at);
        at += 4;
        if b.len() - at < n {
            return None;
        }
        events.push(&b[at..at + n]);
        at += n;
    }
    (at == b.len()).then_some(events)
}

/// The block whose header is at `payload[at]` and the offset after it;
/// `None` if its header is invalid or its body does not fit.
fn oracle_block(payload: &[u8], at: usize) -> Option<(OracleBlock<'static>, usize)> {
    if payload.len() - at < 16 {
        return None;
    }
    let h = &payload[at..at + 16];
    let (stored, count, raw, codec) = (le32(h, 0), le32(h, 4) as u64, le32(h, 8), h[12]);
    if h[13..16] != [0, 0, 0] || count == 0 || !(8..=64 << 20).contains(&raw) {
        return None;
    }
    match codec {
        0 if stored != raw => return None,
        0..=2 => {}
        _ => return None,
    }
    let body_at = at + 16;
    if payload.len() - body_at < stored {
        return None;
    }
    let body = &payload[body_at..body_at + stored];
    Some((
        OracleBlock {
            count,
            header: Some((stored, raw, codec, body_at..body_at + stored)),
            body: oracle_body(body, codec, raw, count),
            v1_events: Vec::new(),
        },
        body_at + stored,
    ))
}

/// A block's body decompressed and split: a u32 context length, the
/// context, `count` events, exactly `raw` bytes in all.
pub fn oracle_body(
    stored: &[u8],
    codec: u8,
    raw: usize,
    count: u64,
) -> Option<(Vec<u8>, Vec<Vec<u8>>)> {
    let bytes = match codec {
        0 => stored.to_vec(),
        1 => zstd::bulk::decompress(stored, raw).ok()?,
        2 => lz4_flex::block::decompress(stored, raw).ok()?,
        _ => return None,
    };
    if bytes.len() != raw || raw < 4 {
        return None;
    }
    let ctx = le32(&bytes, 0);
    if raw - 4 < ctx {
        return None;
    }
    let events = oracle_events(&bytes[4 + ctx..], count)?;
    Some((
        bytes[4..4 + ctx].to_vec(),
        events.into_iter().map(|e| e.to_vec()).collect(),
    ))
}

/// The format a segment image is read in: its header's version when the
/// header is valid, else the first frame with a good CRC decides (format 2
/// when it is one, else format 1), else format 2.
pub fn oracle_version(image: &[u8]) -> u16 {
    if image.len() >= 32
        && image[0..4] == *b"HFSG"
        && crc32fast::hash(&image[0..28]) == le32(image, 28) as u32
        && image[6] == 1
    {
        let v = u16::from_le_bytes([image[4], image[5]]);
        if v == 1 || v == 2 {
            return v;
        }
    }
    for at in 32..image.len() {
        for v in [2, 1] {
            if oracle_frame(&image[at..], v).is_some() {
                return v;
            }
        }
    }
    2
}

// ---------------------------------------------------------------------------

pub mod seglog_scan {
    //! The recovery scan over one arbitrary segment image, and the frame
    //! and block decoders at every offset of it, in both formats.

    use super::{oracle_frame, oracle_version, OracleFrame};
    use holdfast::fuzzing::scan_segment;
    use holdfast::seglog::block::{self, Blocks};
    use holdfast::seglog::format::{self, Decoded, EventIter, SegmentHeader};

    /// `decode_frame` and `peek_frame` in format `version` at `buf[0]`
    /// against the oracle, and for format 2 every block's header and body.
    pub fn check_frame(buf: &[u8], version: u16, at: usize) {
        let d = format::decode_frame(buf, version);
        let o = oracle_frame(buf, version);
        let (header, payload, len, o) = match (d, o) {
            (
                Decoded::Frame {
                    header,
                    payload,
                    len,
                },
                Some(o),
            ) => (header, payload, len, o),
            (Decoded::Frame { .. }, None) => {
                panic!("at {at}, v{version}: decoded a frame the oracle rejects")
            }
            (d, Some(_)) => panic!("at {at}, v{version}: rejected a valid frame: {d:?}"),
            (_, None) => return,
        };
        let OracleFrame {
            first,
            append_ms,
            len: olen,
            ref blocks,
        } = o;
        assert_eq!(
            (header.first_seq, header.append_ms),
            (first, append_ms),
            "at {at}, v{version}"
        );
        assert_eq!(header.count as u64, o.count(), "at {at}, v{version}");
        assert_eq!(len, olen, "at {at}, v{version}");
        assert_eq!(
            format::peek_frame(buf, version),
            Some((header, len)),
            "at {at}, v{version}"
        );
        if version == format::FORMAT_V1 {
            let got: Vec<&[u8]> = EventIter::new(payload).map(|r| &payload[r]).collect();
            assert_eq!(got, blocks[0].v1_events, "at {at}");
            return;
        }
        let got: Vec<_> = Blocks::new(payload).collect();
        assert_eq!(got.len(), blocks.len(), "at {at}: blocks");
        for (i, ((h, range), ob)) in got.into_iter().zip(blocks).enumerate() {
            let (stored, raw, codec, ref orange) = ob.header.clone().unwrap();
            assert_eq!(
                (
                    h.stored_len as usize,
                    h.count as u64,
                    h.raw_len as usize,
                    h.codec
                ),
                (stored, ob.count, raw, codec),
                "at {at}, block {i}"
            );
            assert_eq!(&range, orange, "at {at}, block {i}");
            let body = block::open(&h, bytes::Bytes::copy_from_slice(&payload[range]));
            match (body, &ob.body) {
                (Ok(b), Some((ctx, events))) => {
                    assert_eq!(&b.context[..], &ctx[..], "at {at}, block {i}");
                    let got: Vec<&[u8]> = b.events().map(|r| &b.bytes[r]).collect();
                    let want: Vec<&[u8]> = events.iter().map(|e| &e[..]).collect();
                    assert_eq!(got, want, "at {at}, block {i}");
                }
                (Ok(_), None) => panic!("at {at}, block {i}: opened a body the oracle rejects"),
                (Err(e), Some(_)) => panic!("at {at}, block {i}: refused a valid body: {e}"),
                (Err(_), None) => {}
            }
        }
    }

    pub fn check(data: &[u8]) {
        let _ = SegmentHeader::decode(data);
        // The base the file name would give: the header's, if there is one.
        let base = data
            .get(8..16)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()));

        for at in 0..data.len() {
            for version in [format::FORMAT_V1, format::FORMAT_VERSION] {
                check_frame(&data[at..], version, at);
            }
        }

        let version = oracle_version(data);
        if data.len() >= 32 {
            let by_code = SegmentHeader::decode(data)
                .map(|h| h.version)
                .unwrap_or_else(|_| format::detect_version(data));
            assert_eq!(by_code, version, "the segment's format");
        }
        let s = scan_segment(data, base);
        let len = data.len() as u64;
        assert!(s.valid_end <= len);
        assert!(s.next_seq >= base);
        if data.len() >= 32 {
            // Everything is either valid frames, skipped damage, or the torn tail.
            let torn = s.torn.map_or(0, |(at, n)| {
                assert_eq!(at, s.valid_end, "torn tail starts where valid data ends");
                n
            });
            assert_eq!(s.valid_end + torn, len);
        } else {
            assert_eq!(s.valid_end, len);
            assert_eq!((s.next_seq, s.torn, s.damaged.len()), (base, None, 0));
            return;
        }

        // Replay the scan's path with the oracle: from the header, frame to
        // frame, jumping over each damaged region it reports.
        let frame_at = |i: usize| oracle_frame(&data[i..], version);
        let mut at = 32usize;
        let mut next = base;
        let mut skipped = 0u64;
        let mut damaged = s.damaged.iter().peekable();
        while (at as u64) < s.valid_end {
            if let Some((off, _, n)) = damaged.peek() {
                if *off == at as u64 {
                    assert!(*n > 0);
                    // The region really is damaged from `next`'s point of
                    // view, and no acceptable frame starts inside it.
                    for i in at..at + *n as usize {
                        if let Some(f) = frame_at(i) {
                            assert!(f.first < next, "a valid frame at {i} was skipped as damage");
                        }
                    }
                    at += *n as usize;
                    damaged.next();
                    continue;
                }
            }
            let f =
                frame_at(at).unwrap_or_else(|| panic!("scan accepted an invalid frame at {at}"));
            assert!(f.first >= next, "frame at {at} goes back in sequence");
            skipped += f.first - next;
            next = f
                .first
                .checked_add(f.count())
                .unwrap_or_else(|| panic!("frame at {at}: sequence numbers overflow"));
            at += f.len;
        }
        assert!(
            damaged.next().is_none(),
            "damage reported past the valid end"
        );
        assert_eq!(at as u64, s.valid_end);
        assert_eq!(s.next_seq, next);
        assert_eq!(s.events_skipped, skipped);
        if let Some((t, _)) = s.torn {
            // Truncating the tail loses no frame that would have been accepted.
            for i in t as usize..data.len() {
                if let Some(f) = frame_at(i) {
                    assert!(
                        f.first < next,
                        "a valid frame at {i} is inside the torn tail"
                    );
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------

pub mod seglog_recover {
    //! A whole data directory built from the input, opened read-only and
    //! read-write (which repairs), read back through readers and consumers.
    //!
    //! Input: parts separated by [`SEP`]. A part starting with `HFCU` is a
    //! cursor file (`cursors.0`, then `cursors.1`); any other part is a
    //! segment file, named after the base sequence in its header (bytes
    //! 8..16) or one past the previous segment's, whichever is larger.

    use super::*;
    use holdfast::seglog::{Batch, Event, FsyncPolicy, Log, LogOptions, StartAt};

    pub const SEP: &[u8] = b"#HF#";
    const APPENDED: &[u8] = b"appended after recovery";
    const MAX_SEGMENTS: usize = 8;

    /// An event as delivered: sequence number, append time, bytes, context,
    /// its batch's first sequence number, the format of its segment.
    type Key = (u64, u64, Vec<u8>, Vec<u8>, u64, u16);

    fn key(e: &Event) -> Key {
        (
            e.seq,
            e.append_ms,
            e.data.to_vec(),
            e.context.to_vec(),
            e.batch_start,
            e.format,
        )
    }

    /// Writes the directory image; returns every event (as [`Key`]) that
    /// any valid frame anywhere in any segment carries, each segment read
    /// in the format its header gives (or, with a damaged header, its
    /// frames).
    pub fn write_dir(data: &[u8], dir: &Path) -> HashSet<Key> {
        let mut valid = HashSet::new();
        let mut cursor_slot = 0;
        let mut prev: Option<u64> = None;
        let mut segments = 0;
        for part in split(data, SEP) {
            if part.starts_with(b"HFCU") && cursor_slot < 2 {
                std::fs::write(dir.join(format!("cursors.{cursor_slot}")), part).unwrap();
                cursor_slot += 1;
                continue;
            }
            if prev.is_some_and(|p| p == u64::MAX) {
                break;
            }
            let from_header = part
                .get(8..16)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap()));
            let base = match (prev, from_header) {
                (None, h) => h.unwrap_or(0),
                (Some(p), h) => h.unwrap_or(0).max(p + 1),
            };
            prev = Some(base);
            segments += 1;
            std::fs::write(dir.join(format!("{base:020}.seg")), part).unwrap();
            let version = oracle_version(part);
            for at in 32..part.len() {
                if let Some(f) = oracle_frame(&part[at..], version) {
                    for (seq, batch, ctx, e) in f.events() {
                        valid.insert((seq, f.append_ms, e, ctx, batch, version));
                    }
                }
            }
            if segments >= MAX_SEGMENTS {
                break;
            }
        }
        valid
    }

    fn split<'a>(data: &'a [u8], sep: &[u8]) -> Vec<&'a [u8]> {
        let mut parts = Vec::new();
        let mut rest = data;
        while let Some(i) = rest.windows(sep.len()).position(|w| w == sep) {
            parts.push(&rest[..i]);
            rest = &rest[i + sep.len()..];
        }
        parts.push(rest);
        parts
    }

    fn opts() -> LogOptions {
        LogOptions {
            // Nothing here is about durability; syncing would only slow the
            // fuzzer down.
            fsync: FsyncPolicy::Never,
            ..LogOptions::default()
        }
    }

    /// Every event a reader without a cursor sees, from the oldest, each one
    /// checked against what valid frames carry.
    fn read_all(log: &Log, valid: &HashSet<Key>) -> Vec<(u64, Vec<u8>)> {
        let mut r = log.reader(0);
        drain(&mut r, valid, log.next_seq())
    }

    /// Reads until caught up; `end` is the log's acknowledged end.
    fn drain(
        r: &mut holdfast::seglog::Consumer,
        valid: &HashSet<Key>,
        end: u64,
    ) -> Vec<(u64, Vec<u8>)> {
        let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
        loop {
            let batch: Vec<Event> = match r.read(64, 1 << 20) {
                Ok(b) => b,
                // An unreadable segment is an error, not a panic.
                Err(_) => break,
            };
            if batch.is_empty() {
                break;
            }
            for e in batch {
                let key = key(&e);
                assert!(
                    valid.contains(&key),
                    "delivered event {} ({} bytes) that no valid frame carries",
                    e.seq,
                    e.data.len()
                );
                assert!(
                    e.seq < end,
                    "delivered event {} at or past the log's end {end}",
                    e.seq
                );
                if let Some((last, _)) = out.last() {
                    assert!(e.seq > *last, "sequence went back: {} after {last}", e.seq);
                }
                out.push((e.seq, e.data.to_vec()));
            }
        }
        out
    }

    fn from(events: &[(u64, Vec<u8>)], min: u64) -> Vec<(u64, Vec<u8>)> {
        events.iter().filter(|(s, _)| *s >= min).cloned().collect()
    }

    /// The lowest committed position: below it, the writer may delete
    /// sealed segments at any moment, so reads there are not comparable.
    fn min_committed(log: &Log) -> u64 {
        let st = log.stats();
        st.consumers.iter().map(|c| c.committed).min().unwrap_or(0)
    }

    pub fn check(data: &[u8]) {
        let root = scratch_dir();
        let dir = root.join("log");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let valid = write_dir(data, &dir);
        check_dir(&dir, &valid);
        let _ = std::fs::remove_dir_all(&dir);
    }

    pub fn check_dir(dir: &Path, valid: &HashSet<Key>) {
        // Read-only first: it must change nothing and take no lock.
        let before = Log::open_read_only(dir).ok().map(|log| {
            let _ = log.stats();
            read_all(&log, valid)
        });

        // Read-write: repairs, then the same events from wherever the
        // consumers' commits protect them.
        let Ok(log) = Log::open(dir, opts()) else {
            return;
        };
        let _ = log.stats();
        let floor = min_committed(&log);
        let first = read_all(&log, valid);
        if let Some(before) = &before {
            assert_eq!(
                from(before, floor),
                from(&first, floor),
                "read-only and read-write differ"
            );
        }
        log.close_blocking().unwrap();
        drop(log);

        // Opened again: repair is idempotent.
        let log = Log::open(dir, opts()).unwrap();
        let floor = floor.max(min_committed(&log));
        let second = read_all(&log, valid);
        assert_eq!(
            from(&first, floor),
            from(&second, floor),
            "second open differs"
        );

        // Each consumer reads what is left for it and commits it all.
        let mut committed = Vec::new();
        for name in log.consumers() {
            let mut c = log.consumer(&name, StartAt::Oldest).unwrap();
            let at = c.committed();
            let got = drain(&mut c, valid, log.next_seq());
            if let Some((s, _)) = got.first() {
                assert!(*s >= at, "consumer {name} read {s}, below its commit {at}");
            }
            let end = got.last().map_or(at, |(s, _)| s + 1);
            c.commit(end).unwrap();
            committed.push((name, end));
        }

        // Sequence numbers are never reused: an append after recovery gets
        // numbers above every event any reader saw, and reads back.
        let end = log.next_seq();
        let mut batch = Batch::new();
        batch.push(APPENDED);
        let r = log
            .append_blocking(batch)
            .expect("an append after recovery failed");
        assert_eq!(r.start, end);
        if let Some((last, _)) = first.iter().chain(&second).max() {
            assert!(r.start > *last, "append reused sequence {}", r.start);
        }
        let back = log.reader(r.start).read(1, 1 << 20).unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!((back[0].seq, &back[0].data[..]), (r.start, APPENDED));
        let mut valid = valid.clone();
        assert_eq!(
            (back[0].batch_start, back[0].format, back[0].context.len()),
            (r.start, 2, 0),
            "appended in format 2"
        );
        valid.insert(key(&back[0]));
        log.close_blocking().unwrap();
        drop(log);

        // The commits survived the close.
        let log = Log::open_read_only(dir).unwrap();
        let st = log.stats();
        for (name, end) in committed {
            let c = st.consumers.iter().find(|c| c.name == name).unwrap();
            assert!(
                c.committed >= end,
                "consumer {name}: committed {end}, reopened at {}",
                c.committed
            );
        }
        let floor = floor.max(min_committed(&log));
        let third = read_all(&log, &valid);
        assert_eq!(third.last(), Some(&(end, APPENDED.to_vec())));
        assert_eq!(
            from(&second, floor),
            from(&third[..third.len() - 1], floor),
            "read-only after close differs"
        );
    }

    /// One directory per process, on tmpfs when there is one.
    fn scratch_dir() -> PathBuf {
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let d = base.join(format!("holdfast-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}

// ---------------------------------------------------------------------------

pub mod seglog_block {
    //! `block::open`, the decompression and split of one format-2 block,
    //! over arbitrary bodies under each codec, and `block::encode` then
    //! `open` over arbitrary batches.
    //!
    //! Input: byte 0 selects the codec (`% 3`: none, zstd, LZ4), bytes 1..3
    //! are the raw length the header claims (u16, little-endian; ignored
    //! for `none`, whose raw length is the stored one), byte 3 the event
    //! count; the rest is the stored body. The same bytes, split into a
    //! context and events by [`batch_of`], are also encoded and opened
    //! again under every codec.

    use super::oracle_body;
    use bytes::{BufMut, Bytes, BytesMut};
    use holdfast::seglog::block::{self, BlockHeader, BLOCK_HEADER_LEN};
    use holdfast::seglog::Compression;

    const CODECS: [Compression; 3] = [
        Compression::None,
        Compression::Zstd { level: 1 },
        Compression::Lz4,
    ];

    /// A context and events made from `data`: its first byte (mod 64) is
    /// the context length, each event's length is the next byte (mod 32).
    pub fn batch_of(data: &[u8]) -> (Vec<u8>, Vec<Vec<u8>>) {
        let Some((&c, mut rest)) = data.split_first() else {
            return (Vec::new(), vec![Vec::new()]);
        };
        let c = (c as usize % 64).min(rest.len());
        let ctx = rest[..c].to_vec();
        rest = &rest[c..];
        let mut events = Vec::new();
        while let Some((&n, tail)) = rest.split_first() {
            let n = (n as usize % 32).min(tail.len());
            events.push(tail[..n].to_vec());
            rest = &tail[n..];
        }
        if events.is_empty() {
            events.push(Vec::new());
        }
        (ctx, events)
    }

    fn framed(events: &[Vec<u8>]) -> Bytes {
        let mut b = BytesMut::new();
        for e in events {
            b.put_u32_le(e.len() as u32);
            b.put_slice(e);
        }
        b.freeze()
    }

    pub fn check(data: &[u8]) {
        if data.len() < 4 {
            return;
        }
        let codec = data[0] % 3;
        let stored = &data[4..];
        let raw = if codec == 0 {
            stored.len()
        } else {
            u16::from_le_bytes([data[1], data[2]]) as usize
        };
        let count = data[3] as u32;
        let mut head = [0u8; BLOCK_HEADER_LEN];
        head[0..4].copy_from_slice(&(stored.len() as u32).to_le_bytes());
        head[4..8].copy_from_slice(&count.to_le_bytes());
        head[8..12].copy_from_slice(&(raw as u32).to_le_bytes());
        head[12] = codec;
        // What the frame check lets through is all `open` ever sees.
        if let Some(h) = BlockHeader::decode(&head) {
            assert_eq!(h.encode(), head);
            let got = block::open(&h, Bytes::copy_from_slice(stored));
            let want = oracle_body(stored, codec, raw, count as u64);
            match (got, want) {
                (Ok(b), Some((ctx, events))) => {
                    // `Ok` only for a body filled exactly.
                    assert_eq!(b.bytes.len(), raw);
                    assert_eq!(&b.context[..], &ctx[..]);
                    let got: Vec<&[u8]> = b.events().map(|r| &b.bytes[r]).collect();
                    let want: Vec<&[u8]> = events.iter().map(|e| &e[..]).collect();
                    assert_eq!(got, want);
                }
                (Ok(_), None) => panic!("opened a body that is not whole"),
                (Err(e), Some(_)) => panic!("refused a whole body: {e}"),
                (Err(_), None) => {}
            }
        }

        // Round trip: whatever the batch, every codec gives it back.
        let (ctx, events) = batch_of(stored);
        let raw_len = 4 + ctx.len() + events.iter().map(|e| 4 + e.len()).sum::<usize>();
        for c in CODECS {
            let e = block::encode(&ctx, framed(&events), events.len() as u32, c);
            let mut all = e.head.to_vec();
            all.extend_from_slice(&e.body);
            assert_eq!(all.len(), e.stored_len());
            // Never larger than the batch stored plain.
            assert!(all.len() <= BLOCK_HEADER_LEN + raw_len, "{c:?}");
            assert!(block::blocks_are_consistent(&all, events.len() as u32));
            let h = BlockHeader::decode(&all).expect("an encoded block's header decodes");
            assert_eq!(
                (h.count as usize, h.raw_len as usize),
                (events.len(), raw_len)
            );
            let b = block::open(&h, Bytes::copy_from_slice(&all[BLOCK_HEADER_LEN..]))
                .unwrap_or_else(|e| panic!("{c:?}: an encoded block does not open: {e}"));
            assert_eq!(&b.context[..], &ctx[..], "{c:?}");
            let got: Vec<&[u8]> = b.events().map(|r| &b.bytes[r]).collect();
            let want: Vec<&[u8]> = events.iter().map(|e| &e[..]).collect();
            assert_eq!(got, want, "{c:?}");
            // And the oracle reads it the same.
            let o = oracle_body(
                &all[BLOCK_HEADER_LEN..],
                h.codec,
                raw_len,
                events.len() as u64,
            )
            .expect("the oracle reads an encoded block");
            assert_eq!((o.0, o.1), (ctx.clone(), events.clone()), "{c:?}");
        }
    }
}

// ---------------------------------------------------------------------------

pub mod otlp_decode {
    //! The OTLP/HTTP handler's path from body bytes to envelopes.
    //!
    //! Input: one selector byte, then the body. The selector picks the
    //! signal (`b % 3`: logs, traces, metrics), the encoding (`b / 3 % 2`:
    //! protobuf, JSON) and the compression (`b / 6 % 3`: identity, gzip,
    //! deflate).

    use holdfast::event::{Envelope, Record};
    use holdfast::fuzzing::{otlp_prepare, Compression, Signal};
    use prost::Message;

    const MAX_BODY: u64 = 1 << 20;
    const OBSERVED: u64 = 1_700_000_000_000_000_000;

    pub fn selector(signal: Signal, json: bool, c: Compression) -> u8 {
        let s = match signal {
            Signal::Logs => 0,
            Signal::Traces => 1,
            Signal::Metrics => 2,
        };
        let c = match c {
            Compression::Identity => 0,
            Compression::Gzip => 1,
            Compression::Deflate => 2,
        };
        s + 3 * u8::from(json) + 6 * c
    }

    pub fn check(data: &[u8]) {
        let Some((&sel, body)) = data.split_first() else {
            return;
        };
        let signal = [Signal::Logs, Signal::Traces, Signal::Metrics][(sel % 3) as usize];
        let json = (sel / 3) % 2 == 1;
        let c = [
            Compression::Identity,
            Compression::Gzip,
            Compression::Deflate,
        ][((sel / 6) % 3) as usize];
        let Ok(p) = otlp_prepare(signal, json, c, body, MAX_BODY, OBSERVED) else {
            return;
        };
        assert!(p.body_len as u64 <= MAX_BODY.max(body.len() as u64));
        assert_eq!(
            p.envelopes.len() as u64,
            p.records,
            "one envelope per record"
        );
        let mut stripped = Vec::with_capacity(p.envelopes.len());
        for bytes in &p.envelopes {
            let mut env = Envelope::decode_event(bytes).expect("an envelope we made decodes");
            assert_eq!(env.signal(), Some(signal));
            assert_eq!(
                (env.source.as_str(), env.observed_time_unix_nano),
                ("fuzz", OBSERVED)
            );
            assert!(env.origin.is_none());
            // The split's hand-assembled bytes are what prost would write.
            assert_eq!(
                &env.encode_to_vec(),
                bytes,
                "split encodes differently from prost"
            );
            if let Some(Record::Metric(m)) = &env.record {
                let points = holdfast::sources::otlp_http::data_points(m);
                assert_eq!(points, 1, "a metric envelope holds exactly one point");
            }
            env.id.clear();
            stripped.push(env.encode_to_vec());
        }

        // The same request as protobuf gives the same envelopes: JSON and
        // protobuf decoding agree, and protobuf decoding is stable. The
        // memory bounds of the two encodings differ (`cost/`): a request
        // near the budget may fit in one and not the other.
        let again = match otlp_prepare(
            signal,
            false,
            Compression::Identity,
            &p.protobuf,
            MAX_BODY,
            OBSERVED,
        ) {
            Ok(again) => again,
            Err(e) if e.starts_with("decoding this request would take more than") => return,
            Err(e) => panic!("the request re-encoded as protobuf is refused: {e}"),
        };
        assert_eq!(
            again.protobuf, p.protobuf,
            "protobuf re-encoding is not stable"
        );
        assert_eq!(again.records, p.records);
        let again: Vec<Vec<u8>> = again
            .envelopes
            .iter()
            .map(|b| {
                let mut env = Envelope::decode(&b[..]).unwrap();
                env.id.clear();
                env.encode_to_vec()
            })
            .collect();
        assert_eq!(again, stripped, "envelopes differ between encodings");
    }
}

// ---------------------------------------------------------------------------

pub mod config_parse {
    //! `holdfast::config::parse` over arbitrary text.

    use holdfast::config::{parse, ConfigError};

    pub const PATH: &str = "/etc/holdfast/holdfast.toml";

    pub fn check(data: &[u8]) {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        let result = parse(text, PATH);
        let lines = text.lines().count().max(1) + 1;
        match &result {
            Ok(s) => {
                // A config `check` accepts starts: its log options are valid.
                s.log
                    .validate()
                    .expect("accepted config has invalid log options");
                for sink in s.sinks.values() {
                    for input in &sink.inputs {
                        assert!(
                            s.sources.contains_key(input),
                            "sink input {input} is not a source"
                        );
                    }
                }
                for w in s.warnings() {
                    assert!(!w.is_error());
                    let _ = w.to_string();
                }
                let _ = s.describe();
            }
            Err(ConfigError::Invalid { problems }) => {
                assert!(!problems.is_empty(), "refused without a reason");
                for p in problems {
                    assert!(p.is_error());
                    assert!(!p.message.is_empty());
                    if let Some(pos) = p.position {
                        assert!(pos.line >= 1 && pos.column >= 1, "{pos:?}");
                        assert!(pos.line <= lines, "line {} of {lines}: {p}", pos.line);
                    }
                }
                let _ = result.as_ref().map_err(|e| e.to_string());
            }
            Err(e @ ConfigError::Read { .. }) => panic!("parse read a file: {e}"),
        }
        // Deterministic: the same text gives the same verdict.
        let again = parse(text, PATH);
        assert_eq!(
            again
                .as_ref()
                .map(|s| s.describe())
                .map_err(|e| e.to_string()),
            result
                .as_ref()
                .map(|s| s.describe())
                .map_err(|e| e.to_string())
        );
    }
}

// ------------------------------------------------------------------ syslog

pub mod syslog {
    //! The syslog parser (`holdfast::syslog_format`) and TCP framing
    //! (`holdfast::sources::syslog`)
    //! over arbitrary bytes: never a panic, parts within bounds, framing
    //! independent of how the stream is cut into reads.

    use holdfast::calendar::TimeZone;
    use holdfast::sources::syslog::{Frame, Framer};
    use holdfast::syslog_format::parse::{parse, Format, ParseOptions};
    use holdfast::syslog_format::record::record;

    /// Frames `data` fed in pieces of `step` bytes, with the rest after a
    /// framing error and what the end of the stream leaves.
    fn frames(data: &[u8], max: usize, step: usize) -> (Vec<Frame>, bool) {
        let mut f = Framer::new(max);
        let mut out = Vec::new();
        for chunk in data.chunks(step.max(1)) {
            f.buffer().extend_from_slice(chunk);
            loop {
                match f.next_frame() {
                    Ok(Some(fr)) => out.push(fr),
                    Ok(None) => break,
                    Err(_) => {
                        out.extend(f.rest());
                        return (out, true);
                    }
                }
            }
        }
        out.extend(f.finish());
        (out, false)
    }

    pub fn check(data: &[u8]) {
        let zones = [TimeZone::Utc, TimeZone::Fixed(-9 * 3600 - 1800)];
        for (i, time_zone) in zones.into_iter().enumerate() {
            let opts = ParseOptions {
                time_zone,
                now_unix: 1_796_191_200 + i as i64 * 200 * 86400,
            };
            let p = parse(data, &opts);
            let range = data.as_ptr_range();
            assert!(range.contains(&p.message.as_ptr()) || p.message.is_empty());
            assert!(p.message.len() <= data.len());
            assert!(p.facility.is_none_or(|f| f <= 23));
            assert!(p.severity.is_none_or(|s| s <= 7));
            assert_eq!(p.format == Format::Unparsed, p.error.is_some());
            if p.format != Format::Rfc5424 {
                assert!(p.structured_data.is_empty());
            }
            assert_eq!(parse(data, &opts), p, "deterministic");
            let _ = record(&p);
        }

        let max = 64;
        let (whole, broke) = frames(data, max, data.len());
        let (bytewise, broke_bytewise) = frames(data, max, 1);
        // Only a bad octet count stops the stream, and it is found however
        // the bytes arrive; up to it, the same frames.
        assert_eq!(broke, broke_bytewise);
        if !broke {
            assert_eq!(whole, bytewise, "framing depends on the reads");
        }
        let total: usize = whole.iter().map(|f| f.bytes.len()).sum();
        assert!(total <= data.len());
        for f in whole.iter().chain(&bytewise) {
            assert!(f.bytes.len() <= max, "a frame over max");
            if let Some(len) = f.original_len {
                assert!(len > f.bytes.len() || len == 0);
            }
        }
    }
}
