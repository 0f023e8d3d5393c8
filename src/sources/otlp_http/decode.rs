/*!
From a request's headers and body bytes to a decoded OTLP request: which
encoding and compression it declares, decompression with a hard cap, and
decoding (prost for protobuf, `json/` for JSON) with the record count
verified.

Decompression is streamed from the received bytes into a buffer that stops
one byte past `max_body_bytes`, reserving memory from the source's budget as
it grows: a gzip bomb is refused after producing at most the cap, whatever
its ratio.
*/

use std::io::Read;

use bytes::Bytes;
use flate2::read::{DeflateDecoder, MultiGzDecoder, ZlibDecoder};
use hyper::header::{HeaderMap, HeaderValue, CONTENT_ENCODING, CONTENT_TYPE};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::Metric;
use prost::Message;

use super::body::Reservation;
use super::json::{self, J};
use super::response::{Encoding, RequestError};
use crate::event::Signal;

/// The encoding a `Content-Type` header declares, if it is one we speak.
pub(crate) fn encoding_of(headers: &HeaderMap) -> Result<Encoding, RequestError> {
    let Some(v) = headers.get(CONTENT_TYPE) else {
        return Err(RequestError::ContentType("(none)".into()));
    };
    encoding_from(v).ok_or_else(|| RequestError::ContentType(echo(v.as_bytes())))
}

/// A header value quoted back in an error, cut short.
fn echo(v: &[u8]) -> String {
    String::from_utf8_lossy(v).chars().take(100).collect()
}

/// Like [`encoding_of`], without an error: for answering in the request's
/// encoding whatever else went wrong.
pub(crate) fn encoding_from(v: &HeaderValue) -> Option<Encoding> {
    let s = v.to_str().ok()?;
    let media = s.split(';').next().unwrap_or("").trim();
    if media.eq_ignore_ascii_case("application/x-protobuf")
        || media.eq_ignore_ascii_case("application/protobuf")
    {
        Some(Encoding::Protobuf)
    } else if media.eq_ignore_ascii_case("application/json") {
        Some(Encoding::Json)
    } else {
        None
    }
}

/// A `Content-Encoding` we decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compression {
    Identity,
    Gzip,
    /// HTTP's `deflate`: zlib-wrapped (RFC 1950), or raw deflate as some
    /// clients send it.
    Deflate,
}

impl Compression {
    fn name(self) -> &'static str {
        match self {
            Compression::Identity => "identity",
            Compression::Gzip => "gzip",
            Compression::Deflate => "deflate",
        }
    }
}

pub(crate) fn compression_of(headers: &HeaderMap) -> Result<Compression, RequestError> {
    let mut found = Compression::Identity;
    // Codings may be listed in one header or several; at most one that is
    // not `identity` is supported.
    for v in headers.get_all(CONTENT_ENCODING) {
        let s = v
            .to_str()
            .map_err(|_| RequestError::ContentEncoding(echo(v.as_bytes())))?;
        for coding in s.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            let c = if coding.eq_ignore_ascii_case("identity") {
                continue;
            } else if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
                Compression::Gzip
            } else if coding.eq_ignore_ascii_case("deflate") {
                Compression::Deflate
            } else {
                return Err(RequestError::ContentEncoding(echo(coding.as_bytes())));
            };
            if found != Compression::Identity {
                return Err(RequestError::ContentEncoding(echo(s.as_bytes())));
            }
            found = c;
        }
    }
    Ok(found)
}

/// Step by which decompressed output grows (and is reserved).
const INFLATE_STEP: usize = 64 << 10;

/// Decompresses `raw`, producing at most `limit` bytes; reserves what it
/// produces in `res` and fails with `Busy` when the budget has no room.
pub(crate) fn decompress(
    raw: Bytes,
    c: Compression,
    limit: u64,
    res: &mut Reservation,
) -> Result<Bytes, RequestError> {
    match c {
        Compression::Identity => Ok(raw),
        Compression::Gzip => inflate(MultiGzDecoder::new(&raw[..]), c, limit, res),
        Compression::Deflate => {
            // A zlib stream starts with CMF/FLG: method 8, and the pair is
            // a multiple of 31.
            let zlib = raw.len() >= 2
                && raw[0] & 0x0f == 8
                && (u16::from(raw[0]) << 8 | u16::from(raw[1])) % 31 == 0;
            if zlib {
                inflate(ZlibDecoder::new(&raw[..]), c, limit, res)
            } else {
                inflate(DeflateDecoder::new(&raw[..]), c, limit, res)
            }
        }
    }
}

fn inflate(
    decoder: impl Read,
    c: Compression,
    limit: u64,
    res: &mut Reservation,
) -> Result<Bytes, RequestError> {
    // One byte past the limit tells "too large" from "exactly the limit".
    let most = usize::try_from(limit + 1).unwrap_or(usize::MAX);
    let mut r = decoder.take(limit + 1);
    let mut out: Vec<u8> = Vec::new();
    let mut filled = 0;
    loop {
        if filled == out.len() {
            if out.len() >= most {
                break;
            }
            // Double, from one step, never past `most`; reserve before
            // allocating.
            let grow = out.len().max(INFLATE_STEP).min(most - out.len());
            if !res.try_grow(grow) {
                return Err(RequestError::Busy);
            }
            out.resize(out.len() + grow, 0);
        }
        match r.read(&mut out[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(RequestError::Decompress {
                    coding: c.name(),
                    detail: e.to_string(),
                })
            }
        }
    }
    out.truncate(filled);
    if filled as u64 > limit {
        return Err(RequestError::DecompressedTooLarge {
            coding: c.name(),
            limit,
        });
    }
    Ok(out.into())
}

/// The data points a metric holds, whatever its kind: what a metrics
/// request counts as records (one event each once split).
pub fn data_points(m: &Metric) -> usize {
    match &m.data {
        Some(Data::Gauge(d)) => d.data_points.len(),
        Some(Data::Sum(d)) => d.data_points.len(),
        Some(Data::Histogram(d)) => d.data_points.len(),
        Some(Data::ExponentialHistogram(d)) => d.data_points.len(),
        Some(Data::Summary(d)) => d.data_points.len(),
        None => 0,
    }
}

/// A decoded request of one of the three signals.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decoded {
    Logs(ExportLogsServiceRequest),
    Traces(ExportTraceServiceRequest),
    Metrics(ExportMetricsServiceRequest),
}

impl Decoded {
    /// Log records, spans, or metric data points.
    pub(crate) fn record_count(&self) -> u64 {
        match self {
            Decoded::Logs(r) => {
                per_scope(&r.resource_logs, |r| &r.scope_logs, |s| s.log_records.len())
            }
            Decoded::Traces(r) => {
                per_scope(&r.resource_spans, |r| &r.scope_spans, |s| s.spans.len())
            }
            Decoded::Metrics(r) => per_scope(
                &r.resource_metrics,
                |r| &r.scope_metrics,
                |s| s.metrics.iter().map(data_points).sum(),
            ),
        }
    }
}

/// `count` summed over every scope of every resource: the three requests
/// nest their records the same way.
fn per_scope<'r, R, S: 'r>(
    resources: &'r [R],
    scopes: impl Fn(&'r R) -> &'r [S],
    count: impl Fn(&'r S) -> usize,
) -> u64 {
    resources
        .iter()
        .flat_map(scopes)
        .map(|s| count(s) as u64)
        .sum()
}

pub(crate) fn request_name(signal: Signal) -> &'static str {
    match signal {
        Signal::Logs => "ExportLogsServiceRequest",
        Signal::Traces => "ExportTraceServiceRequest",
        Signal::Metrics => "ExportMetricsServiceRequest",
    }
}

/// Decodes a (decompressed) body. For JSON, the records are also counted on
/// the raw tree, and a count the typed decoding does not match is refused;
/// the keys the JSON decoder ignored are counted in `unknown` (protobuf's
/// unknown fields are skipped by prost, uncounted).
pub(crate) fn decode(
    signal: Signal,
    enc: Encoding,
    body: &[u8],
    unknown: &json::UnknownKeys,
) -> Result<Decoded, RequestError> {
    match enc {
        Encoding::Protobuf => {
            let bad = |e: prost::DecodeError| {
                RequestError::Decode(format!(
                    "the body is not a valid protobuf {}: {e}",
                    request_name(signal)
                ))
            };
            Ok(match signal {
                Signal::Logs => Decoded::Logs(ExportLogsServiceRequest::decode(body).map_err(bad)?),
                Signal::Traces => {
                    Decoded::Traces(ExportTraceServiceRequest::decode(body).map_err(bad)?)
                }
                Signal::Metrics => {
                    Decoded::Metrics(ExportMetricsServiceRequest::decode(body).map_err(bad)?)
                }
            })
        }
        Encoding::Json => {
            let json_err = |e: json::JsonError| RequestError::Decode(e.to_string());
            let tree = J::parse(body).map_err(json_err)?;
            let decoded = match signal {
                Signal::Logs => Decoded::Logs(json::logs(&tree, unknown).map_err(json_err)?),
                Signal::Traces => Decoded::Traces(json::traces(&tree, unknown).map_err(json_err)?),
                Signal::Metrics => {
                    Decoded::Metrics(json::metrics(&tree, unknown).map_err(json_err)?)
                }
            };
            let seen = json::count_records(&tree, signal);
            let decoded_count = decoded.record_count();
            if seen != decoded_count {
                return Err(RequestError::Internal(format!(
                    "the JSON holds {seen} records but {decoded_count} were decoded; the \
                     request is refused so that none is lost"
                )));
            }
            Ok(decoded)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::otlp_http::body::Budget;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Bytes {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap().into()
    }

    #[test]
    fn content_types_and_codings() {
        let mut h = HeaderMap::new();
        assert!(matches!(encoding_of(&h), Err(RequestError::ContentType(_))));
        h.insert(
            CONTENT_TYPE,
            "Application/JSON; charset=utf-8".parse().unwrap(),
        );
        assert_eq!(encoding_of(&h).unwrap(), Encoding::Json);
        h.insert(CONTENT_TYPE, "application/x-protobuf".parse().unwrap());
        assert_eq!(encoding_of(&h).unwrap(), Encoding::Protobuf);
        h.insert(CONTENT_TYPE, "text/plain".parse().unwrap());
        assert!(encoding_of(&h).is_err());

        assert_eq!(compression_of(&h).unwrap(), Compression::Identity);
        h.insert(CONTENT_ENCODING, "GZIP".parse().unwrap());
        assert_eq!(compression_of(&h).unwrap(), Compression::Gzip);
        h.insert(CONTENT_ENCODING, "identity, deflate".parse().unwrap());
        assert_eq!(compression_of(&h).unwrap(), Compression::Deflate);
        h.insert(CONTENT_ENCODING, "gzip, gzip".parse().unwrap());
        assert!(compression_of(&h).is_err());
        h.insert(CONTENT_ENCODING, "zstd".parse().unwrap());
        assert!(matches!(
            compression_of(&h),
            Err(RequestError::ContentEncoding(c)) if c == "zstd"
        ));
    }

    #[test]
    fn decompression_stops_at_the_cap() {
        let budget = Budget::with_bytes(64 << 20);
        let data = vec![b'a'; 10_000];
        let mut res = budget.empty();
        let out = decompress(gzip(&data), Compression::Gzip, 10_000, &mut res).unwrap();
        assert_eq!(&out[..], &data[..]);
        let mut res = budget.empty();
        let e = decompress(gzip(&data), Compression::Gzip, 9_999, &mut res).unwrap_err();
        assert!(matches!(e, RequestError::DecompressedTooLarge { .. }));

        // 64 gzip members of 1 MiB of zeros (concatenated members are one
        // valid body): refused after producing about the cap.
        let bomb = {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            e.write_all(&vec![0u8; 1 << 20]).unwrap();
            Bytes::from(e.finish().unwrap().repeat(64))
        };
        assert!(bomb.len() < 80 << 10, "{}", bomb.len());
        let mut res = budget.empty();
        let e = decompress(bomb, Compression::Gzip, 1 << 20, &mut res).unwrap_err();
        assert!(matches!(e, RequestError::DecompressedTooLarge { .. }));
        assert!(res.held() <= 3 << 20, "held {}", res.held());

        let mut res = budget.empty();
        let e = decompress(
            Bytes::from_static(b"not gzip"),
            Compression::Gzip,
            100,
            &mut res,
        )
        .unwrap_err();
        assert!(matches!(e, RequestError::Decompress { .. }));
    }

    #[test]
    fn deflate_accepts_zlib_and_raw() {
        let budget = Budget::with_bytes(1 << 20);
        let data = b"hello hello hello".repeat(10);
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(&data).unwrap();
        let mut d = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        d.write_all(&data).unwrap();
        for raw in [z.finish().unwrap(), d.finish().unwrap()] {
            let mut res = budget.empty();
            let out = decompress(raw.into(), Compression::Deflate, 1 << 20, &mut res).unwrap();
            assert_eq!(&out[..], &data[..]);
        }
    }

    #[test]
    fn a_busy_budget_refuses_decompression() {
        let budget = Budget::with_bytes(1000);
        let mut res = budget.empty();
        let e = decompress(gzip(b"x"), Compression::Gzip, 1 << 20, &mut res).unwrap_err();
        assert!(matches!(e, RequestError::Busy));
    }
}
