//! Format 2's unit inside a frame: one appended batch as a *block*, its
//! context stored once and the whole compressed as one. Pure functions over
//! byte slices (plus the codecs), so the decoder can be fuzzed.
//!
//! ```text
//! block header (16 bytes)
//!   0  4  stored length    bytes of the body as stored, after this header
//!   4  4  event count      >= 1
//!   8  4  raw length       bytes of the body once decompressed (= stored for none)
//!  12  1  codec            0 = none, 1 = zstd, 2 = LZ4 block
//!  13  3  reserved         0
//!  16  …  body             compressed with the codec; once decompressed:
//!                            u32 context length, the context,
//!                            `count` times: u32 event length, event bytes
//! ```
//!
//! A frame's payload is one or more blocks back to back (one per append in
//! its group commit); the frame's CRC covers them as stored. The headers are
//! checked with the CRC ([`blocks_are_consistent`]); a body is checked when
//! a reader opens it ([`open`]): a body that does not decompress to exactly
//! its raw length, or whose context and events do not fill it exactly, is
//! damage, counted and skipped like a damaged frame.

use std::cell::RefCell;
use std::ops::Range;
use std::sync::Mutex;

use bytes::{BufMut, Bytes, BytesMut};

use super::format::{u32_at, EventIter, EVENT_HEADER_LEN, MAX_FRAME_PAYLOAD};
use crate::pool;

/// How each appended batch is compressed on disk (format 2). The batch is
/// compressed in the appending task, before it joins a group commit, so
/// compression never holds other appenders up behind the writer thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Stored as given.
    None,
    /// zstd at this level (1 = fastest; negative levels are faster still).
    Zstd { level: i32 },
    /// LZ4 block format: less CPU than zstd, larger on disk.
    Lz4,
}

impl Default for Compression {
    fn default() -> Self {
        Compression::Zstd { level: 1 }
    }
}

pub const BLOCK_HEADER_LEN: usize = 16;
/// A body never decompresses to more than this: a reader's memory per
/// block is bounded whatever the bytes on disk claim.
pub const MAX_BLOCK_RAW: usize = MAX_FRAME_PAYLOAD;

pub const CODEC_NONE: u8 = 0;
pub const CODEC_ZSTD: u8 = 1;
pub const CODEC_LZ4: u8 = 2;

/// The fixed part of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHeader {
    pub stored_len: u32,
    pub count: u32,
    pub raw_len: u32,
    pub codec: u8,
}

impl BlockHeader {
    pub fn encode(&self) -> [u8; BLOCK_HEADER_LEN] {
        let mut b = [0u8; BLOCK_HEADER_LEN];
        b[0..4].copy_from_slice(&self.stored_len.to_le_bytes());
        b[4..8].copy_from_slice(&self.count.to_le_bytes());
        b[8..12].copy_from_slice(&self.raw_len.to_le_bytes());
        b[12] = self.codec;
        b
    }

    /// Decodes a header and checks what can be checked without the body.
    pub fn decode(b: &[u8]) -> Option<BlockHeader> {
        if b.len() < BLOCK_HEADER_LEN || b[13..16] != [0, 0, 0] {
            return None;
        }
        let h = BlockHeader {
            stored_len: u32_at(b, 0),
            count: u32_at(b, 4),
            raw_len: u32_at(b, 8),
            codec: b[12],
        };
        let codec_ok = match h.codec {
            CODEC_NONE => h.stored_len == h.raw_len,
            CODEC_ZSTD | CODEC_LZ4 => true,
            _ => false,
        };
        let raw_ok = (4 + EVENT_HEADER_LEN..=MAX_BLOCK_RAW).contains(&(h.raw_len as usize));
        (codec_ok && raw_ok && h.count > 0).then_some(h)
    }
}

/// The blocks of a format-2 payload: each header and its stored body's
/// range within the payload. Stops at the first header that does not fit.
pub struct Blocks<'a> {
    payload: &'a [u8],
    at: usize,
}

impl<'a> Blocks<'a> {
    pub fn new(payload: &'a [u8]) -> Blocks<'a> {
        Blocks { payload, at: 0 }
    }

    /// Offset of the next block within the payload.
    pub fn offset(&self) -> usize {
        self.at
    }
}

impl Iterator for Blocks<'_> {
    type Item = (BlockHeader, Range<usize>);

    fn next(&mut self) -> Option<Self::Item> {
        let h = BlockHeader::decode(self.payload.get(self.at..)?)?;
        let start = self.at + BLOCK_HEADER_LEN;
        let end = start
            .checked_add(h.stored_len as usize)
            .filter(|&e| e <= self.payload.len())?;
        self.at = end;
        Some((h, start..end))
    }
}

/// Whether a frame's payload is whole blocks whose counts sum to `count`.
pub fn blocks_are_consistent(payload: &[u8], count: u32) -> bool {
    let mut blocks = Blocks::new(payload);
    let mut sum = 0u64;
    for (h, _) in blocks.by_ref() {
        sum += h.count as u64;
    }
    blocks.offset() == payload.len() && sum == count as u64
}

/// Why a block's body cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    #[error("block does not decompress: {0}")]
    Decompress(String),
    #[error("block decompresses to {got} bytes, its header says {want}")]
    RawLength { got: usize, want: usize },
    #[error("block's context and events do not fill it")]
    Layout,
}

/// A block's body, decompressed and checked.
#[derive(Debug, Clone)]
pub struct Body {
    pub bytes: Bytes,
    pub context: Bytes,
    /// Where the events start in `bytes`.
    pub events_at: usize,
}

impl Body {
    /// The events' byte ranges within `bytes`.
    pub fn events(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        let at = self.events_at;
        EventIter::new(&self.bytes[at..]).map(move |r| r.start + at..r.end + at)
    }
}

thread_local! {
    static ZSTD_D: RefCell<Option<zstd::zstd_safe::DCtx<'static>>> = const { RefCell::new(None) };
}

/// Compression contexts not in use. A context is big (about 1 MiB at level
/// 1 for a 512 KiB chunk: its window and tables) and worth keeping, since
/// making one costs more than compressing a small batch. Shared by all
/// threads, not one per thread: appends compress without awaiting, so the
/// contexts that ever exist are the compressions that ever ran at the same
/// time (one per source appending at once), not every runtime thread an
/// appender's task was ever scheduled on (docs/configuration.md, "Memory").
static ZSTD_C: Mutex<Vec<zstd::zstd_safe::CCtx<'static>>> = Mutex::new(Vec::new());
const ZSTD_WINDOW_LOG: u32 = 17;

/// Decompresses and checks a block's body. `stored` is the body as stored
/// (a slice of the segment's map: for `none` it is used as it is, copying
/// nothing).
pub fn open(h: &BlockHeader, stored: Bytes) -> Result<Body, BlockError> {
    let raw = h.raw_len as usize;
    let bytes = match h.codec {
        CODEC_NONE => stored,
        CODEC_ZSTD => {
            let mut out = pool::BLOCKS.take_with(raw);
            let n = ZSTD_D.with(|d| {
                let mut d = d.borrow_mut();
                let dctx = d.get_or_insert_with(zstd::zstd_safe::DCtx::create);
                dctx.decompress(&mut out, &stored).map_err(|code| {
                    BlockError::Decompress(zstd::zstd_safe::get_error_name(code).into())
                })
            })?;
            if n != raw {
                return Err(BlockError::RawLength { got: n, want: raw });
            }
            pool::BLOCKS.freeze(out)
        }
        CODEC_LZ4 => {
            let mut out = pool::BLOCKS.take_with(raw);
            out.resize(raw, 0);
            let n = lz4_flex::block::decompress_into(&stored, &mut out)
                .map_err(|e| BlockError::Decompress(e.to_string()))?;
            if n != raw {
                return Err(BlockError::RawLength { got: n, want: raw });
            }
            pool::BLOCKS.freeze(out)
        }
        _ => return Err(BlockError::Layout),
    };
    if bytes.len() != raw || raw < 4 {
        return Err(BlockError::RawLength {
            got: bytes.len(),
            want: raw,
        });
    }
    let ctx_len = u32_at(&bytes, 0) as usize;
    let events_at = 4usize
        .checked_add(ctx_len)
        .filter(|&e| e <= raw)
        .ok_or(BlockError::Layout)?;
    let mut at = events_at;
    for _ in 0..h.count {
        if raw - at < EVENT_HEADER_LEN {
            return Err(BlockError::Layout);
        }
        let n = u32_at(&bytes, at) as usize;
        at += EVENT_HEADER_LEN;
        if raw - at < n {
            return Err(BlockError::Layout);
        }
        at += n;
    }
    if at != raw {
        return Err(BlockError::Layout);
    }
    Ok(Body {
        context: bytes.slice(4..events_at),
        bytes,
        events_at,
    })
}

/// A block ready for the writer: `head` then `body`, back to back.
#[derive(Debug)]
pub struct Encoded {
    pub head: Bytes,
    pub body: Bytes,
}

impl Encoded {
    /// Bytes the block takes in a frame.
    pub fn stored_len(&self) -> usize {
        self.head.len() + self.body.len()
    }
}

/// Builds the block of a batch: `framed` holds `count` events framed (u32
/// length, bytes). Runs in the appending task, so that compression happens
/// beside the other appenders, not behind the writer thread.
pub fn encode(context: &[u8], framed: Bytes, count: u32, compression: Compression) -> Encoded {
    let raw_len = 4 + context.len() + framed.len();
    let ctx_len = (context.len() as u32).to_le_bytes();
    let pieces: [&[u8]; 3] = [&ctx_len, context, &framed];
    let compressed = match compression {
        Compression::None => None,
        Compression::Zstd { level } => {
            zstd_compress(&pieces, raw_len, level).map(|b| (CODEC_ZSTD, b))
        }
        Compression::Lz4 => {
            let mut input = pool::COMPRESS.take_with(raw_len);
            for p in pieces {
                input.extend_from_slice(p);
            }
            let mut out = pool::COMPRESS.take();
            out.resize(
                BLOCK_HEADER_LEN + lz4_flex::block::get_maximum_output_size(raw_len),
                0,
            );
            let n = lz4_flex::block::compress_into(&input, &mut out[BLOCK_HEADER_LEN..]);
            pool::COMPRESS.give(input);
            match n {
                Ok(n) => {
                    out.truncate(BLOCK_HEADER_LEN + n);
                    Some((CODEC_LZ4, out))
                }
                Err(_) => {
                    pool::COMPRESS.give(out);
                    None
                }
            }
        }
    };
    match compressed {
        // Stored as it is when compression does not pay: never larger
        // than the raw bytes plus a header.
        Some((codec, mut out)) if out.len() - BLOCK_HEADER_LEN < raw_len => {
            let h = BlockHeader {
                stored_len: (out.len() - BLOCK_HEADER_LEN) as u32,
                count,
                raw_len: raw_len as u32,
                codec,
            };
            out[..BLOCK_HEADER_LEN].copy_from_slice(&h.encode());
            // Copied out at its size, so that a block waiting in the
            // writer's queue holds none of the room reserved for the worst
            // case, and the scratch buffer serves the next block at once.
            let body = Bytes::copy_from_slice(&out);
            pool::COMPRESS.give(out);
            Encoded {
                head: Bytes::new(),
                body,
            }
        }
        compressed => {
            if let Some((_, out)) = compressed {
                pool::COMPRESS.give(out);
            }
            let h = BlockHeader {
                stored_len: raw_len as u32,
                count,
                raw_len: raw_len as u32,
                codec: CODEC_NONE,
            };
            let mut head = BytesMut::with_capacity(BLOCK_HEADER_LEN + 4 + context.len());
            head.put_slice(&h.encode());
            head.put_slice(&ctx_len);
            head.put_slice(context);
            Encoded {
                head: head.freeze(),
                body: framed,
            }
        }
    }
}

/// Streams the pieces through a zstd context from the shared pool.
fn zstd_compress(pieces: &[&[u8]], raw_len: usize, level: i32) -> Option<Vec<u8>> {
    // A poisoned pool only means a compression panicked while taking or
    // returning a context; the contexts in it are still whole.
    let taken = ZSTD_C.lock().unwrap_or_else(|p| p.into_inner()).pop();
    let mut cctx = taken.unwrap_or_else(zstd::zstd_safe::CCtx::create);
    let out = zstd_compress_with(&mut cctx, pieces, raw_len, level);
    ZSTD_C.lock().unwrap_or_else(|p| p.into_inner()).push(cctx);
    out
}

fn zstd_compress_with(
    cctx: &mut zstd::zstd_safe::CCtx<'static>,
    pieces: &[&[u8]],
    raw_len: usize,
    level: i32,
) -> Option<Vec<u8>> {
    use zstd::zstd_safe::{CParameter, InBuffer, OutBuffer, ResetDirective};
    cctx.reset(ResetDirective::SessionOnly).ok()?;
    cctx.set_parameter(CParameter::CompressionLevel(level))
        .ok()?;
    // A 128 KiB window, not the 512 KiB level 1 picks for a full chunk:
    // the context buffers a window plus a block of input, so this takes
    // about 0.4 MiB off each context, and log lines repeat what is near
    // them (few matches reach further back). Readers decompress in one shot
    // and are not limited by it.
    cctx.set_parameter(CParameter::WindowLog(ZSTD_WINDOW_LOG))
        .ok()?;
    cctx.set_pledged_src_size(Some(raw_len as u64)).ok()?;
    let mut out =
        pool::COMPRESS.take_with(BLOCK_HEADER_LEN + zstd::zstd_safe::compress_bound(raw_len));
    out.resize(BLOCK_HEADER_LEN, 0);
    for p in pieces {
        let mut input = InBuffer::around(p);
        while input.pos() < p.len() {
            let pos = out.len();
            let mut output = OutBuffer::around_pos(&mut out, pos);
            cctx.compress_stream(&mut output, &mut input).ok()?;
        }
    }
    loop {
        let pos = out.len();
        let mut output = OutBuffer::around_pos(&mut out, pos);
        let left = cctx.end_stream(&mut output).ok()?;
        if left == 0 {
            break;
        }
        if out.len() == out.capacity() {
            out.reserve(left);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(events: &[&[u8]]) -> Bytes {
        let mut b = BytesMut::new();
        for e in events {
            b.put_u32_le(e.len() as u32);
            b.put_slice(e);
        }
        b.freeze()
    }

    fn stored(e: &Encoded) -> Vec<u8> {
        let mut v = e.head.to_vec();
        v.extend_from_slice(&e.body);
        v
    }

    #[test]
    fn every_codec_round_trips() {
        let line =
            b"Jun 14 15:16:01 combo sshd(pam_unix)[19939]: authentication failure; logname= uid=0";
        let evs: Vec<&[u8]> = (0..50).map(|_| &line[..]).chain([&b""[..]]).collect();
        for c in [
            Compression::None,
            Compression::Zstd { level: 1 },
            Compression::Lz4,
        ] {
            let e = encode(b"ctx", framed(&evs), evs.len() as u32, c);
            let all = stored(&e);
            assert!(blocks_are_consistent(&all, evs.len() as u32), "{c:?}");
            let (h, r) = Blocks::new(&all).next().unwrap();
            if c != Compression::None {
                assert!(all.len() < line.len() * 10, "{c:?} did not compress");
            }
            let body = open(&h, Bytes::copy_from_slice(&all[r])).unwrap();
            assert_eq!(&body.context[..], b"ctx");
            let got: Vec<&[u8]> = body.events().map(|r| &body.bytes[r]).collect();
            assert_eq!(got, evs, "{c:?}");
        }
    }

    #[test]
    fn incompressible_batches_are_stored_plain() {
        let noise: Vec<u8> = (0..4000).map(|_| rand::random::<u8>()).collect();
        let e = encode(b"", framed(&[&noise]), 1, Compression::Zstd { level: 1 });
        let all = stored(&e);
        let h = BlockHeader::decode(&all).unwrap();
        assert_eq!(h.codec, CODEC_NONE);
        assert_eq!(all.len(), BLOCK_HEADER_LEN + 4 + 4 + noise.len());
    }

    #[test]
    fn damaged_bodies_are_errors_not_panics() {
        let evs: Vec<&[u8]> = vec![b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"; 20];
        for c in [
            Compression::Zstd { level: 1 },
            Compression::Lz4,
            Compression::None,
        ] {
            let all = stored(&encode(b"c", framed(&evs), 20, c));
            let (h, r) = Blocks::new(&all).next().unwrap();
            for i in r.clone() {
                for bit in [0x01, 0x80] {
                    let mut g = all.clone();
                    g[i] ^= bit;
                    if let Ok(b) = open(&h, Bytes::copy_from_slice(&g[r.clone()])) {
                        // Only a body that still decodes whole may come back.
                        assert_eq!(b.events().count(), 20);
                    }
                }
            }
            let mut wrong = h;
            wrong.count = 21;
            assert!(open(&wrong, Bytes::copy_from_slice(&all[r])).is_err());
        }
    }
}
