//! The byte layout of a segment file: its header and its frames. Pure
//! functions over byte slices; no I/O here, so the decoder can be fuzzed and
//! the damage tests can reason about exact offsets.
//!
//! All integers are little-endian.
//!
//! ```text
//! segment header (32 bytes)
//!   0  4  magic            "HFSG"
//!   4  2  format version   2 (1: segments written before blocks, still read)
//!   6  1  checksum         1 = CRC-32 (IEEE, as computed by crc32fast)
//!   7  1  reserved         0
//!   8  8  base sequence    sequence number of the first event in the segment
//!  16  8  created          unix time in milliseconds
//!  24  4  reserved         0
//!  28  4  header CRC       CRC-32 of bytes 0..28
//!
//! frame (28-byte header + payload), repeated until the end of the file
//!   0  4  length           bytes after the CRC field: 20 + payload length
//!   4  4  CRC              CRC-32 of the `length` bytes that follow
//!   8  8  first sequence   sequence number of the frame's first event
//!  16  4  event count      >= 1
//!  20  8  append time      unix time in milliseconds when the frame was written
//!  28  …  payload          format 2: blocks (see `block.rs`), their counts summing
//!                           to `count`; format 1: `count` times u32 event length,
//!                           event bytes
//! ```

use std::io::IoSlice;

pub const SEGMENT_MAGIC: [u8; 4] = *b"HFSG";
/// The format new segments are written in.
pub const FORMAT_VERSION: u16 = 2;
/// The format of segments written before batches became compressed blocks
/// with a shared context; read, never written.
pub const FORMAT_V1: u16 = 1;
pub const CHECKSUM_CRC32: u8 = 1;
pub const SEGMENT_HEADER_LEN: usize = 32;
pub const FRAME_HEADER_LEN: usize = 28;
/// Bytes of the frame header covered by its length field.
const FRAME_FIXED_BODY: usize = FRAME_HEADER_LEN - 8;
/// Per-event framing inside the payload.
pub const EVENT_HEADER_LEN: usize = 4;
/// A frame's payload never exceeds this, whatever the segment size, so that a
/// damaged length field cannot make a reader believe in a huge frame.
pub const MAX_FRAME_PAYLOAD: usize = 64 << 20;

/// The decoded segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    pub base_seq: u64,
    pub created_ms: u64,
    /// [`FORMAT_VERSION`] or [`FORMAT_V1`].
    pub version: u16,
}

impl SegmentHeader {
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN] {
        let mut b = [0u8; SEGMENT_HEADER_LEN];
        b[0..4].copy_from_slice(&SEGMENT_MAGIC);
        b[4..6].copy_from_slice(&self.version.to_le_bytes());
        b[6] = CHECKSUM_CRC32;
        b[8..16].copy_from_slice(&self.base_seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.created_ms.to_le_bytes());
        let crc = crc32fast::hash(&b[0..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and checks a header; the error says what is wrong with it.
    pub fn decode(b: &[u8]) -> Result<SegmentHeader, String> {
        if b.len() < SEGMENT_HEADER_LEN {
            return Err(format!(
                "segment header is {} bytes, expected {SEGMENT_HEADER_LEN}",
                b.len()
            ));
        }
        if b[0..4] != SEGMENT_MAGIC {
            return Err("not a holdfast segment (bad magic)".into());
        }
        let crc = u32_at(b, 28);
        if crc32fast::hash(&b[0..28]) != crc {
            return Err("segment header checksum mismatch".into());
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != FORMAT_VERSION && version != FORMAT_V1 {
            return Err(format!(
                "segment format version {version} is not supported (this build reads versions {FORMAT_V1} and {FORMAT_VERSION})"
            ));
        }
        if b[6] != CHECKSUM_CRC32 {
            return Err(format!("unknown checksum algorithm {}", b[6]));
        }
        Ok(SegmentHeader {
            base_seq: u64_at(b, 8),
            created_ms: u64_at(b, 16),
            version,
        })
    }
}

/// The fixed part of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub first_seq: u64,
    pub count: u32,
    pub append_ms: u64,
}

impl FrameHeader {
    /// One past the last sequence number in the frame. Saturates: a header
    /// read without its CRC checked ([`peek_frame`]) may hold anything, and
    /// [`decode_frame`] refuses a frame whose range does not fit.
    pub fn end_seq(&self) -> u64 {
        self.first_seq.saturating_add(self.count as u64)
    }

    /// Encodes the header for a frame whose payload is the concatenation of
    /// `payload`, computing the CRC over the header's tail and every slice so
    /// the payload never has to be copied into one buffer.
    pub fn encode(&self, payload: &[IoSlice<'_>]) -> [u8; FRAME_HEADER_LEN] {
        let payload_len: usize = payload.iter().map(|s| s.len()).sum();
        let mut b = [0u8; FRAME_HEADER_LEN];
        b[0..4].copy_from_slice(&((FRAME_FIXED_BODY + payload_len) as u32).to_le_bytes());
        b[8..16].copy_from_slice(&self.first_seq.to_le_bytes());
        b[16..20].copy_from_slice(&self.count.to_le_bytes());
        b[20..28].copy_from_slice(&self.append_ms.to_le_bytes());
        let mut h = crc32fast::Hasher::new();
        h.update(&b[8..]);
        for s in payload {
            h.update(s);
        }
        b[4..8].copy_from_slice(&h.finalize().to_le_bytes());
        b
    }
}

/// Why the bytes at an offset are not a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Damage {
    /// The length field is impossible (too small or too large).
    BadLength(u32),
    /// The checksum does not match the bytes.
    BadChecksum,
    /// The checksum matches but the events (format 1) or blocks (format 2)
    /// do not fill the payload exactly.
    BadPayload,
    /// The checksum matches but the sequence numbers run past 2^64.
    BadSequence,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Damage::BadLength(l) => write!(f, "impossible frame length {l}"),
            Damage::BadChecksum => f.write_str("frame checksum mismatch"),
            Damage::BadPayload => f.write_str("frame events do not match its payload length"),
            Damage::BadSequence => f.write_str("frame sequence numbers overflow"),
        }
    }
}

/// The outcome of decoding at one offset.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A whole, valid frame; `len` is its total size in bytes.
    Frame {
        header: FrameHeader,
        payload: &'a [u8],
        len: usize,
    },
    /// The buffer ends exactly here.
    End,
    /// The buffer ends inside a frame (a torn write, if this is the end of a file).
    Truncated,
    /// The bytes here are not a valid frame.
    Damaged(Damage),
}

/// Decodes the frame of a segment in format `version` starting at `buf[0]`,
/// checking length, CRC and that the events (format 1) or the blocks'
/// headers (format 2) fill the payload exactly.
pub fn decode_frame(buf: &[u8], version: u16) -> Decoded<'_> {
    if buf.is_empty() {
        return Decoded::End;
    }
    if buf.len() < 8 {
        return Decoded::Truncated;
    }
    let len = u32_at(buf, 0);
    if (len as usize) < FRAME_FIXED_BODY + min_payload(version)
        || len as usize > FRAME_FIXED_BODY + MAX_FRAME_PAYLOAD
    {
        return Decoded::Damaged(Damage::BadLength(len));
    }
    let total = 8 + len as usize;
    if buf.len() < total {
        return Decoded::Truncated;
    }
    let crc = u32_at(buf, 4);
    if crc32fast::hash(&buf[8..total]) != crc {
        return Decoded::Damaged(Damage::BadChecksum);
    }
    let header = FrameHeader {
        first_seq: u64_at(buf, 8),
        count: u32_at(buf, 16),
        append_ms: u64_at(buf, 20),
    };
    let payload = &buf[FRAME_HEADER_LEN..total];
    let consistent = if version == FORMAT_V1 {
        payload_is_consistent(payload, header.count)
    } else {
        super::block::blocks_are_consistent(payload, header.count)
    };
    if header.count == 0 || !consistent {
        return Decoded::Damaged(Damage::BadPayload);
    }
    if header.first_seq.checked_add(header.count as u64).is_none() {
        return Decoded::Damaged(Damage::BadSequence);
    }
    Decoded::Frame {
        header,
        payload,
        len: total,
    }
}

/// The smallest payload a frame can have: one empty event (format 1) or one
/// block header (format 2).
fn min_payload(version: u16) -> usize {
    if version == FORMAT_V1 {
        EVENT_HEADER_LEN
    } else {
        super::block::BLOCK_HEADER_LEN
    }
}

/// Reads only the fixed header fields and the total length, without checking
/// the CRC: for cheap hops over frames already known to be good.
pub fn peek_frame(buf: &[u8], version: u16) -> Option<(FrameHeader, usize)> {
    if buf.len() < FRAME_HEADER_LEN {
        return None;
    }
    let len = u32_at(buf, 0) as usize;
    if !(FRAME_FIXED_BODY + min_payload(version)..=FRAME_FIXED_BODY + MAX_FRAME_PAYLOAD)
        .contains(&len)
        || buf.len() < 8 + len
    {
        return None;
    }
    Some((
        FrameHeader {
            first_seq: u64_at(buf, 8),
            count: u32_at(buf, 16),
            append_ms: u64_at(buf, 20),
        },
        8 + len,
    ))
}

fn payload_is_consistent(payload: &[u8], count: u32) -> bool {
    let mut at = 0usize;
    for _ in 0..count {
        if payload.len() - at < EVENT_HEADER_LEN {
            return false;
        }
        let n = u32_at(payload, at) as usize;
        at += EVENT_HEADER_LEN;
        if payload.len() - at < n {
            return false;
        }
        at += n;
    }
    at == payload.len()
}

/// After damage at `from`, finds the next offset at which a valid frame with
/// `first_seq >= min_seq` starts. Candidates are filtered on their length and
/// sequence fields before the CRC is computed, so a scan over a damaged region
/// costs little more than reading it.
pub fn resync(buf: &[u8], from: usize, min_seq: u64, version: u16) -> Option<usize> {
    let mut at = from;
    while at + FRAME_HEADER_LEN <= buf.len() {
        if let Some((h, _)) = peek_frame(&buf[at..], version) {
            if h.first_seq >= min_seq && h.count > 0 {
                if let Decoded::Frame { .. } = decode_frame(&buf[at..], version) {
                    return Some(at);
                }
            }
        }
        at += 1;
    }
    None
}

/// Iterates over the events of a valid frame's payload.
pub struct EventIter<'a> {
    payload: &'a [u8],
    at: usize,
}

impl<'a> EventIter<'a> {
    pub fn new(payload: &'a [u8]) -> Self {
        EventIter { payload, at: 0 }
    }
}

impl<'a> Iterator for EventIter<'a> {
    /// The event's byte range within the payload.
    type Item = std::ops::Range<usize>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.payload.len() - self.at < EVENT_HEADER_LEN {
            return None;
        }
        let n = u32_at(self.payload, self.at) as usize;
        let start = self.at + EVENT_HEADER_LEN;
        let end = start.checked_add(n).filter(|&e| e <= self.payload.len())?;
        self.at = end;
        Some(start..end)
    }
}

/// The format of a segment whose header is damaged, from its first frame
/// whose CRC holds: the version whose payload rule it satisfies (format 2
/// when nothing tells, as the writer would continue in it).
pub fn detect_version(buf: &[u8]) -> u16 {
    let mut at = SEGMENT_HEADER_LEN.min(buf.len());
    while at + FRAME_HEADER_LEN <= buf.len() {
        let len = u32_at(buf, at) as usize;
        if (FRAME_FIXED_BODY + EVENT_HEADER_LEN..=FRAME_FIXED_BODY + MAX_FRAME_PAYLOAD)
            .contains(&len)
            && at + 8 + len <= buf.len()
            && crc32fast::hash(&buf[at + 8..at + 8 + len]) == u32_at(buf, at + 4)
        {
            for v in [FORMAT_VERSION, FORMAT_V1] {
                if let Decoded::Frame { .. } = decode_frame(&buf[at..], v) {
                    return v;
                }
            }
        }
        at += 1;
    }
    FORMAT_VERSION
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(first_seq: u64, events: &[&[u8]]) -> Vec<u8> {
        let mut payload = Vec::new();
        for e in events {
            payload.extend_from_slice(&(e.len() as u32).to_le_bytes());
            payload.extend_from_slice(e);
        }
        let h = FrameHeader {
            first_seq,
            count: events.len() as u32,
            append_ms: 42,
        };
        let mut out = h.encode(&[IoSlice::new(&payload)]).to_vec();
        out.extend_from_slice(&payload);
        out
    }

    #[test]
    fn header_round_trips_and_rejects_damage() {
        let h = SegmentHeader {
            base_seq: 7,
            created_ms: 99,
            version: FORMAT_VERSION,
        };
        let mut b = h.encode();
        assert_eq!(SegmentHeader::decode(&b), Ok(h));
        b[10] ^= 1;
        assert!(SegmentHeader::decode(&b).unwrap_err().contains("checksum"));
    }

    #[test]
    fn frame_round_trips() {
        let f = frame(10, &[b"a", b"", b"hello"]);
        match decode_frame(&f, FORMAT_V1) {
            Decoded::Frame {
                header,
                payload,
                len,
            } => {
                assert_eq!(header.first_seq, 10);
                assert_eq!(header.count, 3);
                assert_eq!(len, f.len());
                let evs: Vec<&[u8]> = EventIter::new(payload).map(|r| &payload[r]).collect();
                assert_eq!(evs, vec![&b"a"[..], b"", b"hello"]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_prefix_is_truncated_and_every_bit_flip_is_caught() {
        let f = frame(1, &[b"abc", b"defgh"]);
        assert_eq!(decode_frame(&[], FORMAT_V1), Decoded::End);
        for cut in 1..f.len() {
            let d = decode_frame(&f[..cut], FORMAT_V1);
            assert!(
                matches!(d, Decoded::Truncated | Decoded::Damaged(_)),
                "cut {cut}: {d:?}"
            );
        }
        for bit in 0..f.len() * 8 {
            let mut g = f.clone();
            g[bit / 8] ^= 1 << (bit % 8);
            let d = decode_frame(&g, FORMAT_V1);
            assert!(!matches!(d, Decoded::Frame { .. }), "bit {bit} undetected");
        }
    }

    /// A format-2 frame of one block per entry of `batches` (context,
    /// events), stored with `c`.
    fn frame_v2(
        first_seq: u64,
        batches: &[(&[u8], &[&[u8]])],
        c: super::super::block::Compression,
    ) -> Vec<u8> {
        let mut payload = Vec::new();
        let mut count = 0;
        for (ctx, events) in batches {
            let mut framed = Vec::new();
            for e in *events {
                framed.extend_from_slice(&(e.len() as u32).to_le_bytes());
                framed.extend_from_slice(e);
            }
            let b = super::super::block::encode(ctx, framed.into(), events.len() as u32, c);
            payload.extend_from_slice(&b.head);
            payload.extend_from_slice(&b.body);
            count += events.len() as u32;
        }
        let h = FrameHeader {
            first_seq,
            count,
            append_ms: 42,
        };
        let mut out = h.encode(&[IoSlice::new(&payload)]).to_vec();
        out.extend_from_slice(&payload);
        out
    }

    const CODECS: [super::super::block::Compression; 3] = [
        super::super::block::Compression::None,
        super::super::block::Compression::Zstd { level: 1 },
        super::super::block::Compression::Lz4,
    ];

    #[test]
    fn format_2_frames_round_trip_and_every_bit_flip_is_caught() {
        let line: &[u8] = b"Jun 14 15:16:01 combo sshd(pam_unix)[19939]: check pass; user unknown";
        for c in CODECS {
            let f = frame_v2(5, &[(b"ctx", &[line, line, b""]), (b"", &[line])], c);
            match decode_frame(&f, FORMAT_VERSION) {
                Decoded::Frame {
                    header,
                    payload,
                    len,
                } => {
                    assert_eq!((header.first_seq, header.count, len), (5, 4, f.len()));
                    let counts: Vec<u32> = super::super::block::Blocks::new(payload)
                        .map(|(h, _)| h.count)
                        .collect();
                    assert_eq!(counts, [3, 1], "{c:?}");
                }
                other => panic!("{c:?}: {other:?}"),
            }
            // Read as format 1, a format-2 frame is not a frame.
            assert_eq!(
                decode_frame(&f, FORMAT_V1),
                Decoded::Damaged(Damage::BadPayload)
            );
            for bit in 0..f.len() * 8 {
                let mut g = f.clone();
                g[bit / 8] ^= 1 << (bit % 8);
                let d = decode_frame(&g, FORMAT_VERSION);
                assert!(!matches!(d, Decoded::Frame { .. }), "{c:?}: bit {bit}");
            }
            for cut in 1..f.len() {
                let d = decode_frame(&f[..cut], FORMAT_VERSION);
                assert!(
                    matches!(d, Decoded::Truncated | Decoded::Damaged(_)),
                    "{c:?}: cut {cut}: {d:?}"
                );
            }
        }
    }

    #[test]
    fn a_frame_whose_block_counts_do_not_add_up_is_damaged() {
        // Two blocks of 1 and 2 events in a frame that claims 4: the CRC
        // holds, the payload does not.
        let f = frame_v2(
            0,
            &[(b"", &[b"a"]), (b"", &[b"b", b"c"])],
            super::super::block::Compression::None,
        );
        let mut g = f.clone();
        g[16..20].copy_from_slice(&4u32.to_le_bytes());
        let crc = crc32fast::hash(&g[8..]);
        g[4..8].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode_frame(&g, FORMAT_VERSION),
            Decoded::Damaged(Damage::BadPayload)
        );
        // A reserved byte of a block header set, CRC recomputed.
        let mut g = f.clone();
        g[FRAME_HEADER_LEN + 14] = 1;
        let crc = crc32fast::hash(&g[8..]);
        g[4..8].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode_frame(&g, FORMAT_VERSION),
            Decoded::Damaged(Damage::BadPayload)
        );
    }

    #[test]
    fn the_version_of_a_segment_with_a_damaged_header_comes_from_its_frames() {
        let mut v1 = SegmentHeader {
            base_seq: 0,
            created_ms: 1,
            version: FORMAT_V1,
        }
        .encode()
        .to_vec();
        v1.extend(frame(0, &[b"an event of format 1", b""]));
        let mut v2 = SegmentHeader {
            base_seq: 0,
            created_ms: 1,
            version: FORMAT_VERSION,
        }
        .encode()
        .to_vec();
        v2.extend(frame_v2(
            0,
            &[(b"c", &[b"an event of format 2"])],
            super::super::block::Compression::None,
        ));
        for (img, want) in [(&mut v1, FORMAT_V1), (&mut v2, FORMAT_VERSION)] {
            img[29] ^= 0x40; // the header CRC
            assert!(SegmentHeader::decode(img).is_err());
            assert_eq!(detect_version(img), want);
            // Garbage before the first frame does not change the answer.
            img.splice(SEGMENT_HEADER_LEN..SEGMENT_HEADER_LEN, [7u8; 13]);
            assert_eq!(detect_version(img), want);
        }
        assert_eq!(detect_version(&v1[..SEGMENT_HEADER_LEN]), FORMAT_VERSION);
        assert_eq!(detect_version(&[]), FORMAT_VERSION);
    }

    #[test]
    fn a_header_of_an_unknown_version_is_refused() {
        for v in [0u16, 3, 0xffff] {
            let mut b = SegmentHeader {
                base_seq: 1,
                created_ms: 2,
                version: FORMAT_VERSION,
            }
            .encode();
            b[4..6].copy_from_slice(&v.to_le_bytes());
            let crc = crc32fast::hash(&b[0..28]);
            b[28..32].copy_from_slice(&crc.to_le_bytes());
            let e = SegmentHeader::decode(&b).unwrap_err();
            assert!(e.contains("not supported"), "{e}");
        }
    }

    #[test]
    fn resync_finds_the_next_good_frame() {
        let mut buf = frame(1, &[b"one"]);
        let second = buf.len();
        buf.extend(frame(2, &[b"two"]));
        buf[5] ^= 0xff; // damage the first frame's CRC
        assert!(matches!(decode_frame(&buf, FORMAT_V1), Decoded::Damaged(_)));
        assert_eq!(resync(&buf, 1, 1, FORMAT_V1), Some(second));
        assert_eq!(resync(&buf, second + 1, 1, FORMAT_V1), None);
    }
}
