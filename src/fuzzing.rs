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

/// One file line as the file source's splitter or multiline join hands it
/// out: its kept bytes, where it starts and where the next begins, and its
/// full length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileLine {
    pub bytes: Vec<u8>,
    pub start: u64,
    pub end: u64,
    pub len: u64,
}

impl FileLine {
    fn of(l: crate::sources::file::lines::Line<'_>) -> FileLine {
        FileLine {
            bytes: l.bytes.to_vec(),
            start: l.start,
            end: l.end,
            len: l.len,
        }
    }
}

/// The file source's line splitting: `data` read from offset 0 in reads of
/// `step` bytes, at most `keep` bytes kept of a line that spans reads, and
/// the unfinished last line flushed at the end (the file went idle).
pub fn split_lines(data: &[u8], step: usize, keep: usize) -> Vec<FileLine> {
    let mut s = crate::sources::file::lines::Splitter::default();
    let mut out = Vec::new();
    let mut at = 0u64;
    for chunk in data.chunks(step.max(1)) {
        s.feed(chunk, at, keep, |l| out.push(FileLine::of(l)));
        at += chunk.len() as u64;
    }
    s.flush(|l| out.push(FileLine::of(l)));
    out
}

/// The file source's multiline join over `lines`, with `start_pattern`,
/// at most `keep` bytes per event; the pending event handed out at the end
/// (the file closed for good).
pub fn join_multiline(
    lines: &[FileLine],
    start_pattern: &regex::Regex,
    keep: usize,
) -> Vec<FileLine> {
    use crate::sources::file::lines::Line;
    let ml = crate::sources::file::Multiline {
        start_pattern: start_pattern.clone(),
        timeout: std::time::Duration::from_secs(1),
    };
    let now = std::time::Instant::now();
    let mut group = None;
    let mut out = Vec::new();
    for l in lines {
        let line = Line {
            bytes: &l.bytes,
            start: l.start,
            end: l.end,
            len: l.len,
        };
        crate::sources::file::multiline::push(&ml, &mut group, line, keep, now, |e| {
            out.push(FileLine::of(e))
        });
    }
    if let Some(g) = group {
        out.push(FileLine::of(g.as_line()));
    }
    out
}

/// One journal entry as the journald reader copies it out of sd-journal.
#[derive(Debug, Clone, Default)]
pub struct JournalEntry {
    pub cursor: String,
    pub realtime_us: u64,
    /// `NAME=value` fields, in the journal's order; the mapping keeps the
    /// last of a name, as the reader's copy does.
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The journald source's mapping of `entries` into one batch, as its
/// reader runs it: the events framed for `Batch::from_framed` (each its
/// length, then its bytes), the batch's context and each entry's id.
/// `extra` are the configured `fields`.
pub fn journald_batch(
    entries: &[JournalEntry],
    extra: &[String],
    observed_ns: u64,
) -> (Vec<u8>, Vec<u8>, Vec<crate::event::EventId>) {
    use crate::sources::journald::mapping::{entry_id, BatchEncoder, Fields};
    let mut fields = Fields::new(extra);
    let mut enc = BatchEncoder::new("journal", observed_ns);
    let mut framed = Vec::new();
    let mut ids = Vec::new();
    for e in entries {
        fields.clear();
        fields.realtime_us = e.realtime_us;
        for (name, value) in &e.fields {
            if let Some(slot) = fields.slot(name) {
                fields.set(slot, value);
            }
        }
        let id = entry_id(&e.cursor, || {
            fields.boot_id().map(|b| (b.to_vec(), e.realtime_us))
        });
        enc.encode(&fields, &id, &mut framed);
        ids.push(id);
    }
    (framed, enc.context(), ids)
}

pub use crate::sources::journald::mapping::DEFAULT_FIELDS as JOURNALD_DEFAULT_FIELDS;

/// What the `prometheus_scrape` source makes of one exposition: parsed
/// within `limits` (the source's `max_samples`, `max_labels`,
/// `max_label_size`), converted to OTLP and split into one batch as a
/// scrape does. `Ok((sample lines, data points))`, or the parser's
/// `(line, message)`.
pub fn prometheus_exposition(
    body: &str,
    openmetrics: bool,
    max_samples: usize,
    max_labels: usize,
    max_label_bytes: usize,
) -> Result<(usize, u64), (usize, String)> {
    use crate::sources::prometheus_scrape::convert::{Builder, StartTimes, TargetLabels};
    use crate::sources::prometheus_scrape::encode::Encoder;
    use crate::sources::prometheus_scrape::parse::{parse, Format, Limits};
    let format = if openmetrics {
        Format::OpenMetrics
    } else {
        Format::Text
    };
    let limits = Limits {
        max_samples,
        max_labels,
        max_label_bytes,
    };
    let e = parse(body, format, &limits).map_err(|e| (e.line, e.to_string()))?;
    let samples = e.samples;
    let target = TargetLabels {
        job: "fuzz".into(),
        instance: "127.0.0.1:9100".into(),
        labels: vec![("site".into(), "p3".into())],
        honor_labels: openmetrics,
        resource: Vec::new(),
    };
    let mut b = Builder::new(&target, Encoder::new("fuzz", 64 << 20));
    b.exposition(e, 1_700_000_000_000_000_000, &mut StartTimes::default());
    let points = b.finish().finish("fuzz", 1).map(|c| c.events).unwrap_or(0);
    Ok((samples, points))
}
