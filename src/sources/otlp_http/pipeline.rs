/*!
A request's body, once received within its bounds, to its durable append:
decompress (capped), bound what decoding will allocate (`cost/`) and
reserve it, decode, run the processing chain, split into one batch, and one
append. Both listeners of an OTLP source run it (`handler.rs` for HTTP, the
`otlp` source's `grpc_call.rs`), so everything it promises holds for both.
*/

use std::sync::Arc;

use tokio::time::Instant;
use tracing::{debug, error};

use super::auth::{self, ClientSubject};
use super::body;
use super::cost;
use super::decode::{self, Compression, Decoded};
use super::json;
use super::response::{Encoding, RequestError};
use super::source::{now_unix_nanos, Accepted, Source};
use super::split::{self, SplitError};
use super::APPEND_WAIT;
use crate::event::Signal;
use crate::seglog::{Batch, LogError};

/// Bodies up to this size (compressed: a quarter of it) are decoded on the
/// connection's task; larger ones on the blocking pool, so one big request
/// does not stall the other connections of a runtime worker.
const INLINE_BYTES: usize = 64 << 10;

/// A request's batch, ready to append.
struct Prepared {
    batch: Batch,
    events: u64,
    event_bytes: u64,
    body_bytes: u64,
    unknown_keys: u64,
}

/// How far [`prepare`] got.
enum Step {
    Done(Prepared),
    /// The budget has no room for decoding yet: wait for `cost` more bytes
    /// of it, then [`decode_and_split`] `data`.
    Wait {
        data: bytes::Bytes,
        cost: u64,
    },
}

/// Decompresses, bounds what decoding will allocate and reserves it, then
/// decodes and splits: CPU work, off the async workers when the body is
/// large.
fn prepare(
    src: &Source,
    signal: Signal,
    encoding: Encoding,
    compression: Compression,
    raw: bytes::Bytes,
    res: &mut body::Reservation,
    who: Who,
) -> Result<Step, RequestError> {
    let data = decode::decompress(raw, compression, src.opts.max_body_bytes, res)?;
    let room = src.budget.bytes().saturating_sub(res.held()) as u64;
    let cost = cost::decoding_cost(signal, encoding, &data, room)?;
    if !res.try_grow(cost as usize) {
        return Ok(Step::Wait { data, cost });
    }
    decode_and_split(src, signal, encoding, data, who).map(Step::Done)
}

/// Decodes and splits a body whose decoding cost is reserved.
fn decode_and_split(
    src: &Source,
    signal: Signal,
    encoding: Encoding,
    data: bytes::Bytes,
    who: Who,
) -> Result<Prepared, RequestError> {
    let unknown = json::UnknownKeys::default();
    let mut decoded: Decoded = decode::decode(signal, encoding, &data, &unknown)?;
    // Processing (issue 17): before the split, so the log stores what
    // will be sent; dropped records are not counted as decoded.
    if let (Some(p), Decoded::Logs(req)) = (&src.process, &mut decoded) {
        p.lock().unwrap_or_else(|e| e.into_inner()).logs(req);
    }
    if let Decoded::Logs(req) = &mut decoded {
        auth::stamp_subject(req, who.asks, who.subject.as_ref());
    }
    if unknown.count() > 0 {
        debug!(source = %src.name, signal = signal.as_str(), count = unknown.count(),
            first = %unknown.first().join("; "),
            "ignored OTLP/JSON keys this version does not know (a newer OTLP release's fields, or misspelt keys)");
    }
    let expected = decoded.record_count();
    // A record's event is about the record's bytes in the body plus its
    // framing (format 2), or plus a copy of its resource and scope (format
    // 1: a guess; the batch grows if it is short).
    let per_event = if crate::sources::WRITE_FORMAT_2 {
        8
    } else {
        64
    };
    let mut batch = Batch::with_capacity(data.len() + expected as usize * per_event);
    let split = split::split_as(
        decoded,
        &src.name,
        now_unix_nanos(),
        src.max_append_bytes,
        crate::sources::WRITE_FORMAT_2,
        |e| batch.push(e),
    )
    .map_err(|e| match e {
        SplitError::TooLarge { bytes, limit } => RequestError::EventsTooLarge { bytes, limit },
        e @ SplitError::NoData { .. } => RequestError::Decode(e.to_string()),
    })?;
    // The faithful-count check: every record decoded is an event in the
    // batch, and nothing else is.
    if split.events != expected || batch.len() as u64 != expected {
        return Err(RequestError::Internal(format!(
            "{expected} records were decoded but {} events were made; the request is refused \
             so that none is lost",
            split.events
        )));
    }
    let event_bytes = split.bytes + split.context.len() as u64;
    batch.set_context(split.context);
    Ok(Prepared {
        batch,
        events: split.events,
        event_bytes,
        body_bytes: data.len() as u64,
        unknown_keys: unknown.count(),
    })
}

/// What a request brings besides its body: the time its answer is due by
/// (a wait for the memory budget ends there) and who sent it.
pub(crate) struct Caller {
    pub(crate) deadline: Instant,
    pub(crate) who: Who,
}

/// Whether the listener that received a request asks for client
/// certificates, and the subject of the one its handshake verified: what
/// `tls.client.subject` says on its log records (`auth::stamp_subject`).
#[derive(Clone)]
pub(crate) struct Who {
    pub(crate) asks: bool,
    pub(crate) subject: Option<ClientSubject>,
}

impl Who {
    pub(crate) fn new(
        listener: &crate::sources::listen::Listener,
        subject: Option<ClientSubject>,
    ) -> Who {
        let asks = listener.tls.as_ref().is_some_and(|t| t.client_ca.is_some());
        Who { asks, subject }
    }
}

/// Decompresses, decodes, splits and appends one request's body (already
/// read within its bounds, its room held in `res`): the pipeline both
/// listeners of an OTLP source share. `Ok` only after the append returned.
pub(crate) async fn prepare_and_append(
    src: &Arc<Source>,
    signal: Signal,
    encoding: Encoding,
    compression: Compression,
    raw: bytes::Bytes,
    res: body::Reservation,
    Caller { deadline, who }: Caller,
) -> Result<Accepted, RequestError> {
    let inline = match compression {
        Compression::Identity => raw.len() <= INLINE_BYTES,
        _ => raw.len() <= INLINE_BYTES / 4,
    };
    let s = src.clone();
    // Who again for a decode that had to wait for the budget.
    let again = who.clone();
    let (step, mut res) = on_cpu(inline, res, move |res| {
        prepare(&s, signal, encoding, compression, raw, res, who)
    })
    .await?;
    let (prepared, res) = match step {
        Ok(Step::Wait { data, cost }) => {
            res.grow(cost as usize, body::room_by(deadline)).await?;
            let s = src.clone();
            let (p, res) = on_cpu(inline, res, move |_| {
                decode_and_split(&s, signal, encoding, data, again)
            })
            .await?;
            (p, res)
        }
        Ok(Step::Done(p)) => (Ok(p), res),
        Err(e) => (Err(e), res),
    };
    if let Err(RequestError::Internal(msg)) = &prepared {
        error!(source = %src.name, "{msg}");
    }
    let p = prepared?;
    let accepted = Accepted {
        signal,
        events: p.events,
        event_bytes: p.event_bytes,
        body_bytes: p.body_bytes,
        unknown_keys: p.unknown_keys,
    };
    if p.events == 0 {
        // An empty request is valid and answered with success (OTLP spec).
        return Ok(accepted);
    }
    let result = src.log.append_timeout(p.batch, APPEND_WAIT).await;
    // The bodies' room in the budget stands for the batch until here.
    drop(res);
    match result {
        Ok(_) => Ok(accepted),
        Err(LogError::Full { waited, .. }) => Err(RequestError::LogFull { waited }),
        Err(LogError::TooLarge { bytes, max }) => {
            Err(RequestError::EventsTooLarge { bytes, limit: max })
        }
        Err(e) => {
            if Source::may_log(&src.last_error_ms) {
                error!(source = %src.name, error = %e,
                    "cannot append OTLP data to the log; clients are told to retry later");
            }
            Err(RequestError::LogUnavailable)
        }
    }
}

/// Runs `f` on the connection's task when the body is small (`inline`),
/// else on the blocking pool, so one big request does not stall the other
/// connections of a runtime worker.
async fn on_cpu<T: Send + 'static>(
    inline: bool,
    mut res: body::Reservation,
    f: impl FnOnce(&mut body::Reservation) -> T + Send + 'static,
) -> Result<(T, body::Reservation), RequestError> {
    if inline {
        let t = f(&mut res);
        return Ok((t, res));
    }
    tokio::task::spawn_blocking(move || {
        let t = f(&mut res);
        (t, res)
    })
    .await
    .map_err(|e| RequestError::Internal(format!("decoding task failed: {e}")))
}
