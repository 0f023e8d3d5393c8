/*!
One gRPC call, from its head to its status, through what OTLP/HTTP uses
(`otlp_http::source` and `otlp_http::pipeline`): the same token, draining,
budget, deadline, decompression cap, cost bound, decode, split and one
durable append.

What is gRPC's own is cheap and comes first: the route (a service method,
else `UNIMPLEMENTED`), `content-type: application/grpc`, the `grpc-encoding`
of a compressed message. Then the stream's body is read within
`max_body_bytes` plus the 5-byte prefix, under `request_timeout`, and must
hold exactly one length-prefixed message ([`unframe`]).
*/

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request, Response};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use tokio::time::Instant;
use tracing::debug;

use super::grpc_status::{self, GrpcBody};
use crate::event::Signal;
use crate::sources::otlp_http::auth::ClientSubject;
use crate::sources::otlp_http::body;
use crate::sources::otlp_http::decode::Compression;
use crate::sources::otlp_http::handler::DRAIN_GRACE;
use crate::sources::otlp_http::metrics::{OtlpGrpcLabels, OtlpPathLabels, OTLP_GRPC_METHODS};
use crate::sources::otlp_http::pipeline::{self, Caller, Who};
use crate::sources::otlp_http::response::{Encoding, RequestError};
use crate::sources::otlp_http::source::{Accepted, Source};

/// The length prefix of a gRPC message: a compressed flag and a
/// big-endian length.
const PREFIX: usize = 5;

/// What the gRPC listener adds to the shared source: whether it asks for
/// client certificates (for `tls.client.subject`), and its series.
pub(crate) struct Listener {
    listener: crate::sources::listen::Listener,
    /// Each method's `OK` calls and each method's (and `other`'s)
    /// durations, created once rather than looked up (labels allocated,
    /// hashed, the family locked) per call, as OTLP/HTTP's are.
    ok: [Counter; 3],
    durations: [Histogram; 4],
}

impl Listener {
    pub(crate) fn new(src: &Source, listener: crate::sources::listen::Listener) -> Listener {
        let o = &src.otlp;
        let ok = OTLP_GRPC_METHODS.map(|m| {
            o.grpc_requests
                .get_or_create(&OtlpGrpcLabels {
                    source: src.name.clone(),
                    method: m.to_string(),
                    code: crate::rpc_status::code_name(tonic::Code::Ok).to_string(),
                })
                .clone()
        });
        let durations = [
            OTLP_GRPC_METHODS[0],
            OTLP_GRPC_METHODS[1],
            OTLP_GRPC_METHODS[2],
            OTHER,
        ]
        .map(|m| {
            o.duration
                .get_or_create(&OtlpPathLabels {
                    source: src.name.clone(),
                    path: m.to_string(),
                })
                .clone()
        });
        Listener {
            listener,
            ok,
            durations,
        }
    }
}

/// The `method` label of a call to anything but the three services.
const OTHER: &str = "other";

/// The index of a service method in `OTLP_GRPC_METHODS`.
fn method_of(path: &str) -> Option<usize> {
    OTLP_GRPC_METHODS.iter().position(|m| *m == path)
}

fn signal_of(path: &str) -> Option<Signal> {
    Some([Signal::Logs, Signal::Traces, Signal::Metrics][method_of(path)?])
}

/// Answers one call. Never fails: every outcome is a status. Also says
/// whether the connection should close once the answer is out: after a
/// missing or wrong token, as OTLP/HTTP does, so a flood of
/// unauthenticated calls holds no slot for long.
pub(crate) async fn handle(
    src: Arc<Source>,
    grpc: Arc<Listener>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> (Response<GrpcBody>, bool) {
    let started = Instant::now();
    let method = method_of(req.uri().path());
    let outcome = accept(&src, &grpc, req, started).await;
    let resp = match &outcome {
        Ok(a) => {
            debug!(source = %src.name, %peer, events = a.events, "OTLP/gRPC call appended");
            grpc_status::ok()
        }
        Err(e) => {
            match e {
                RequestError::LogFull { .. } => src.warn_full(),
                RequestError::LogUnavailable | RequestError::Internal(_) => {}
                _ => debug!(source = %src.name, %peer, reason = e.reason(), error = %e,
                    "OTLP/gRPC call refused"),
            }
            grpc_status::refusal(e)
        }
    };
    let code = match &outcome {
        Ok(_) => tonic::Code::Ok,
        Err(e) => grpc_status::code_of(e),
    };
    src.tally(&outcome);
    match method {
        Some(m) if code == tonic::Code::Ok => {
            grpc.ok[m].inc();
        }
        _ => {
            src.otlp
                .grpc_requests
                .get_or_create(&OtlpGrpcLabels {
                    source: src.name.clone(),
                    method: method.map_or(OTHER, |m| OTLP_GRPC_METHODS[m]).to_string(),
                    code: crate::rpc_status::code_name(code).to_string(),
                })
                .inc();
        }
    }
    grpc.durations[method.unwrap_or(3)].observe(started.elapsed().as_secs_f64());
    let close = matches!(outcome, Err(RequestError::Unauthorized));
    (resp, close)
}

async fn accept(
    src: &Arc<Source>,
    grpc: &Listener,
    req: Request<Incoming>,
    started: Instant,
) -> Result<Accepted, RequestError> {
    let (parts, mut body) = req.into_parts();
    let (signal, coding) = head_checks(src, &parts)?;
    let limit = src.opts.max_body_bytes;
    // The client's own deadline, when shorter: past it nobody waits for
    // the answer, so no budget should be held for it.
    let timeout = parts
        .headers
        .get("grpc-timeout")
        .and_then(|v| grpc_timeout(v.as_bytes()))
        .map_or(src.opts.request_timeout, |t| {
            t.min(src.opts.request_timeout)
        });
    let deadline = started + timeout;
    let mut res = src.budget.empty();
    // A message over the limit is refused as the bytes arrive, not after.
    let read = body::read(
        &mut body,
        limit + PREFIX as u64,
        None,
        body::Framing::GrpcPrefix,
        deadline,
        timeout,
        &mut res,
    );
    let grace_over = async {
        src.stop.cancelled().await;
        tokio::time::sleep(DRAIN_GRACE).await;
    };
    let raw = tokio::select! {
        r = read => r?,
        _ = grace_over => return Err(RequestError::DrainingBody),
    };
    let (message, compressed) = unframe(raw, limit)?;
    let compression = match (compressed, coding) {
        (false, _) => Compression::Identity,
        (true, Some(c)) => c,
        (true, None) => {
            return Err(RequestError::Decode(
                "the message's compressed flag is set but the call has no grpc-encoding: send \
                 grpc-encoding: gzip with compressed messages"
                    .into(),
            ))
        }
    };
    let who = Who::new(
        &grpc.listener,
        parts.extensions.get::<ClientSubject>().cloned(),
    );
    pipeline::prepare_and_append(
        src,
        signal,
        Encoding::Protobuf,
        compression,
        message,
        res,
        Caller { deadline, who },
    )
    .await
}

/// The checks that need only the call's head, cheapest first; the
/// signal and the compression of a compressed message.
fn head_checks(
    src: &Source,
    parts: &hyper::http::request::Parts,
) -> Result<(Signal, Option<Compression>), RequestError> {
    let Some(signal) = signal_of(parts.uri.path()) else {
        return Err(RequestError::NotFound {
            path: parts.uri.path().chars().take(200).collect(),
        });
    };
    if parts.method != Method::POST {
        return Err(RequestError::Method {
            method: parts.method.to_string(),
        });
    }
    let content_type = parts.headers.get(CONTENT_TYPE);
    let is_grpc = content_type
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim())
        .is_some_and(|v| {
            v.eq_ignore_ascii_case("application/grpc")
                || v.eq_ignore_ascii_case("application/grpc+proto")
        });
    if !is_grpc {
        let shown = content_type.map_or("(none)".into(), |v| {
            String::from_utf8_lossy(v.as_bytes())
                .chars()
                .take(100)
                .collect()
        });
        return Err(RequestError::ContentType(shown));
    }
    if let Some(t) = &src.token {
        if !t.accepts(parts.headers.get(AUTHORIZATION)) {
            return Err(RequestError::Unauthorized);
        }
    }
    if src.draining() {
        return Err(RequestError::Draining);
    }
    let coding = match parts.headers.get("grpc-encoding").map(|v| v.as_bytes()) {
        None | Some(b"identity") => None,
        Some(b"gzip") => Some(Compression::Gzip),
        Some(other) => {
            return Err(RequestError::ContentEncoding(
                String::from_utf8_lossy(other).chars().take(100).collect(),
            ))
        }
    };
    Ok((signal, coding))
}

/// A `grpc-timeout` value: up to 8 digits and a unit (`H`, `M`, `S`, `m`,
/// `u`, `n`); `None` for anything else, which leaves `request_timeout`.
fn grpc_timeout(v: &[u8]) -> Option<Duration> {
    let (&unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The one message of a unary call's body, and whether it is compressed.
/// Anything else (no message, a torn prefix, a length that disagrees with
/// the bytes, a second message) is refused: a call is one request.
fn unframe(raw: Bytes, limit: u64) -> Result<(Bytes, bool), RequestError> {
    if raw.len() < PREFIX {
        return Err(RequestError::Decode(format!(
            "the call holds {} bytes, less than one gRPC message prefix (5 bytes): send one \
             length-prefixed Export*ServiceRequest",
            raw.len()
        )));
    }
    let compressed = match raw[0] {
        0 => false,
        1 => true,
        f => {
            return Err(RequestError::Decode(format!(
                "the gRPC message's compressed flag is {f}, not 0 or 1: the body is not a gRPC \
                 message"
            )))
        }
    };
    let len = u32::from_be_bytes([raw[1], raw[2], raw[3], raw[4]]) as u64;
    if len > limit {
        return Err(RequestError::BodyTooLarge { limit });
    }
    let have = (raw.len() - PREFIX) as u64;
    if have != len {
        let what = if have < len {
            "the stream ended before the whole message"
        } else {
            "more than one message (an OTLP export is unary)"
        };
        return Err(RequestError::Decode(format!(
            "the gRPC message prefix says {len} bytes but the call holds {have}: {what}"
        )));
    }
    Ok((raw.slice(PREFIX..), compressed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(flag: u8, len: u32, body: &[u8]) -> Bytes {
        let mut v = vec![flag];
        v.extend_from_slice(&len.to_be_bytes());
        v.extend_from_slice(body);
        v.into()
    }

    #[test]
    fn one_whole_message_is_unframed() {
        let (m, c) = unframe(framed(0, 3, b"abc"), 10).unwrap();
        assert_eq!(&m[..], b"abc");
        assert!(!c);
        let (m, c) = unframe(framed(1, 0, b""), 10).unwrap();
        assert!(m.is_empty());
        assert!(c);
    }

    #[test]
    fn anything_but_one_whole_message_is_refused() {
        let reason = |r: Result<(Bytes, bool), RequestError>| r.unwrap_err().reason();
        assert_eq!(reason(unframe(Bytes::from_static(b"\0\0"), 10)), "decode");
        assert_eq!(reason(unframe(framed(2, 3, b"abc"), 10)), "decode");
        assert_eq!(reason(unframe(framed(0, 4, b"abc"), 10)), "decode");
        assert_eq!(reason(unframe(framed(0, 2, b"abc"), 10)), "decode");
        assert_eq!(reason(unframe(framed(0, 11, b"abc"), 10)), "too_large");
    }

    #[test]
    fn grpc_timeouts_parse_and_nonsense_is_ignored() {
        assert_eq!(grpc_timeout(b"5S"), Some(Duration::from_secs(5)));
        assert_eq!(grpc_timeout(b"250m"), Some(Duration::from_millis(250)));
        assert_eq!(grpc_timeout(b"1H"), Some(Duration::from_secs(3600)));
        assert_eq!(
            grpc_timeout(b"99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in [&b""[..], b"S", b"5", b"5s", b"123456789S", b"-1S", b"1.5S"] {
            assert_eq!(
                grpc_timeout(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn only_the_three_export_methods_are_routes() {
        assert_eq!(signal_of(OTLP_GRPC_METHODS[0]), Some(Signal::Logs));
        assert_eq!(signal_of(OTLP_GRPC_METHODS[1]), Some(Signal::Traces));
        assert_eq!(signal_of(OTLP_GRPC_METHODS[2]), Some(Signal::Metrics));
        assert_eq!(signal_of("/v1/logs"), None);
        assert_eq!(
            signal_of("/opentelemetry.proto.collector.logs.v1.LogsService/Other"),
            None
        );
    }
}
