/*!
One request, from its head to its answer.

The checks run cheapest first, and everything that can be refused without
the body is refused before a byte of it is read: path (404), method (405),
token (401), draining (503), content type and encoding (415), declared
length (413). Then the body is read within its bounds, decompressed,
decoded, split into one batch, and appended; only an append that returned
`Ok` is answered 200.
*/

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, EXPECT};
use hyper::{Method, Request, Response};
use tokio::time::Instant;
use tracing::debug;

use super::auth::ClientSubject;
use super::body::{self};
use super::decode::{self, Compression};
use super::pipeline::{self, Caller, Who};
use super::response::{self, Body, Encoding, RequestError};
use super::source::{index, Accepted, Source, PATHS};
use crate::event::Signal;

/// A body we refuse before reading it to its end is still read and
/// discarded, up to twice `max_body_bytes` (at least this much) and for at
/// most `DISCARD_WAIT`: clients write their whole body before reading the
/// answer, and closing on unread bytes would reset the connection under the
/// answer (a "lingering close", as web servers do).
const DISCARD_BYTES: u64 = 64 << 10;
const DISCARD_WAIT: Duration = Duration::from_secs(1);

/// Once `stop` is cancelled, a request still receiving its body has this
/// long to finish it before it is answered 503, so that shutdown is bounded
/// whatever `request_timeout` is.
pub(crate) const DRAIN_GRACE: Duration = Duration::from_secs(5);

fn signal_of(path: &str) -> Option<Signal> {
    match path {
        "/v1/logs" => Some(Signal::Logs),
        "/v1/traces" => Some(Signal::Traces),
        "/v1/metrics" => Some(Signal::Metrics),
        _ => None,
    }
}

/// Answers one request. Never fails: every outcome is a response.
pub(crate) async fn handle(
    src: Arc<Source>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Response<Body> {
    let started = Instant::now();
    let path = signal_of(req.uri().path()).map_or(PATHS.len() - 1, index);
    // Answer in the request's encoding whenever it is one we speak.
    let encoding = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(decode::encoding_from);
    let (outcome, body_unread) = accept(&src, req, started).await;
    let resp = match &outcome {
        Ok(a) => {
            debug!(source = %src.name, %peer, signal = a.signal.as_str(), events = a.events,
                "OTLP request appended");
            response::success(encoding.unwrap_or(Encoding::Protobuf))
        }
        Err(e) => {
            match e {
                RequestError::LogUnavailable | RequestError::Internal(_) => {}
                RequestError::LogFull { .. } => src.warn_full(),
                _ => debug!(source = %src.name, %peer, status = e.status().as_u16(),
                    reason = e.reason(), error = %e, "OTLP request refused"),
            }
            response::error(e, encoding, body_unread)
        }
    };
    src.count(path, resp.status().as_u16(), &outcome);
    src.durations[path].observe(started.elapsed().as_secs_f64());
    resp
}

/// Runs the checks and the append; also says whether the body was left
/// unread (the connection should then close).
async fn accept(
    src: &Arc<Source>,
    req: Request<Incoming>,
    started: Instant,
) -> (Result<Accepted, RequestError>, bool) {
    let (parts, mut body) = req.into_parts();
    let discard_limit = DISCARD_BYTES.max(2 * src.opts.max_body_bytes);
    let checked = match head_checks(src, &parts) {
        Ok(checked) => checked,
        Err(e) => {
            // A client waiting for "100 Continue" has not sent its body and
            // will not once it has the answer: nothing to discard.
            let expects_continue = parts
                .headers
                .get(EXPECT)
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
            let drained = match content_length(&parts.headers) {
                _ if expects_continue => false,
                // Nothing more is read from an unauthenticated client, and
                // its connection closes: a flood of them holds no slot.
                _ if matches!(e, RequestError::Unauthorized) => false,
                Some(n) if n > discard_limit => false,
                _ => body::discard(&mut body, discard_limit, DISCARD_WAIT).await,
            };
            // While draining, ask clients to reconnect (to the next process).
            let close = !drained || matches!(e, RequestError::Draining);
            return (Err(e), close);
        }
    };
    let (signal, encoding, compression, declared) = checked;
    let subject = parts.extensions.get::<ClientSubject>().cloned();
    let limit = src.opts.max_body_bytes;
    let deadline = started + src.opts.request_timeout;
    let mut res = src.budget.empty();
    let read = body::read(
        &mut body,
        limit,
        declared,
        body::Framing::None,
        deadline,
        src.opts.request_timeout,
        &mut res,
    );
    let grace_over = async {
        src.stop.cancelled().await;
        tokio::time::sleep(DRAIN_GRACE).await;
    };
    let outcome = tokio::select! {
        r = read => r,
        _ = grace_over => Err(RequestError::DrainingBody),
    };
    let raw = match outcome {
        Ok(raw) => raw,
        Err(e @ RequestError::BodyTooLarge { .. }) => {
            drop(res);
            let drained = body::discard(&mut body, discard_limit, DISCARD_WAIT).await;
            return (Err(e), !drained);
        }
        Err(e) => return (Err(e), true),
    };
    (
        pipeline::prepare_and_append(
            src,
            signal,
            encoding,
            compression,
            raw,
            res,
            Caller {
                deadline,
                who: Who::new(&src.opts.listener, subject),
            },
        )
        .await,
        false,
    )
}

type Checked = (Signal, Encoding, Compression, Option<u64>);

fn content_length(h: &hyper::HeaderMap) -> Option<u64> {
    h.get(CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

fn head_checks(src: &Source, parts: &hyper::http::request::Parts) -> Result<Checked, RequestError> {
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
    if let Some(t) = &src.token {
        if !t.accepts(parts.headers.get(AUTHORIZATION)) {
            return Err(RequestError::Unauthorized);
        }
    }
    if src.draining() {
        return Err(RequestError::Draining);
    }
    let encoding = decode::encoding_of(&parts.headers)?;
    let compression = decode::compression_of(&parts.headers)?;
    let declared = content_length(&parts.headers);
    if let Some(n) = declared {
        if n > src.opts.max_body_bytes {
            return Err(RequestError::DeclaredTooLarge {
                declared: n,
                limit: src.opts.max_body_bytes,
            });
        }
    }
    Ok((signal, encoding, compression, declared))
}
