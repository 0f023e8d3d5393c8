//! Entry points for the fuzz targets in `fuzz/` and for
//! `tests/fuzz_regressions.rs`. **Not an API**: hidden from the docs, no
//! stability promise, and nothing in holdfast calls it.
//!
//! Each item is a thin wrapper over a crate-private function, so the fuzzers
//! exercise exactly the code the daemon runs; none adds logic of its own
//! beyond what the daemon does around the call. See `docs/fuzzing.md`.
#![doc(hidden)]

use bytes::Bytes;
use prost::Message;

pub use crate::event::Signal;
pub use crate::seglog::format::Damage;
pub use crate::seglog::segment::Scan;

/// The recovery scan of one segment image, as `Log::open` runs it on the
/// active segment (its format taken from its header, or from its frames
/// when the header is damaged).
pub fn scan_segment(buf: &[u8], base_seq: u64) -> Scan {
    let version = crate::seglog::format::SegmentHeader::decode(buf)
        .map(|h| h.version)
        .unwrap_or_else(|_| crate::seglog::format::detect_version(buf));
    crate::seglog::segment::scan(buf, base_seq, version)
}

/// A request body's `Content-Encoding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    Identity,
    Gzip,
    Deflate,
}

/// What the OTLP/HTTP handler makes of one request body before appending it.
#[derive(Debug, Clone)]
pub struct OtlpPrepared {
    /// Bytes after decompression.
    pub body_len: usize,
    /// Records the decoded request holds (log records, spans, data points).
    pub records: u64,
    /// The encoded envelopes, as they would be appended, in order.
    pub envelopes: Vec<Vec<u8>>,
    /// The decoded request encoded again as protobuf, so JSON and protobuf
    /// decoding of the same request can be compared.
    pub protobuf: Vec<u8>,
}

/// Decompresses (capped at `max_body_bytes`, within the budget a source with
/// that cap has), bounds the decoding's memory within that budget, decodes
/// and splits a body the way the handler's `prepare`
/// does, for the given signal and encoding. `observed_unix_nano` replaces
/// the clock so two calls can be compared; event ids are still random.
/// The error is the message the client would get.
pub fn otlp_prepare(
    signal: Signal,
    json: bool,
    compression: Compression,
    body: &[u8],
    max_body_bytes: u64,
    observed_unix_nano: u64,
) -> Result<OtlpPrepared, String> {
    use crate::seglog::format::{FRAME_HEADER_LEN, MAX_FRAME_PAYLOAD, SEGMENT_HEADER_LEN};
    use crate::sources::otlp_http::{body, cost, decode, response::Encoding, split};

    let budget = body::budget_for(max_body_bytes);
    let mut res = budget.empty();
    let c = match compression {
        Compression::Identity => decode::Compression::Identity,
        Compression::Gzip => decode::Compression::Gzip,
        Compression::Deflate => decode::Compression::Deflate,
    };
    let enc = if json {
        Encoding::Json
    } else {
        Encoding::Protobuf
    };
    let data = decode::decompress(Bytes::copy_from_slice(body), c, max_body_bytes, &mut res)
        .map_err(|e| e.to_string())?;
    let room = budget.bytes().saturating_sub(res.held()) as u64;
    cost::decoding_cost(signal, enc, &data, room).map_err(|e| e.to_string())?;
    let unknown = Default::default();
    let decoded = decode::decode(signal, enc, &data, &unknown).map_err(|e| e.to_string())?;
    let records = decoded.record_count();
    let protobuf = match &decoded {
        decode::Decoded::Logs(r) => r.encode_to_vec(),
        decode::Decoded::Traces(r) => r.encode_to_vec(),
        decode::Decoded::Metrics(r) => r.encode_to_vec(),
    };
    // The limit a log with the default 64 MiB segments gives one append.
    let limit = ((64usize << 20) - SEGMENT_HEADER_LEN - FRAME_HEADER_LEN).min(MAX_FRAME_PAYLOAD);
    let mut envelopes = Vec::new();
    split::split(decoded, "fuzz", observed_unix_nano, limit, |e| {
        envelopes.push(e.to_vec())
    })
    .map_err(|e| e.to_string())?;
    Ok(OtlpPrepared {
        body_len: data.len(),
        records,
        envelopes,
        protobuf,
    })
}
