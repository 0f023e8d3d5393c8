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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, EXPECT};
use hyper::{Method, Request, Response};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn};

use super::auth::{self, ClientSubject, Token};
use super::body::{self, Budget};
use super::cost;
use super::decode::{self, Compression, Decoded};
use super::json;
use super::response::{self, Body, Encoding, RequestError};
use super::split::{self, SplitError};
use super::OtlpHttpSourceSettings;
use super::APPEND_WAIT;
use crate::api::{Health, Phase};
use crate::component::ComponentContext;
use crate::event::Signal;
use crate::metrics::{
    Metrics, OtlpPathLabels, OtlpReasonLabels, OtlpRequestLabels, OtlpSignalLabels, SourceLabels,
};
use crate::seglog::format::{FRAME_HEADER_LEN, MAX_FRAME_PAYLOAD, SEGMENT_HEADER_LEN};
use crate::seglog::{Batch, Log, LogError};

/// Bodies up to this size (compressed: a quarter of it) are decoded on the
/// connection's task; larger ones on the blocking pool, so one big request
/// does not stall the other connections of a runtime worker.
const INLINE_BYTES: usize = 64 << 10;

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

/// Repeated warnings (log full, log errors) are logged at most this often.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Everything the connections of one source share.
pub(crate) struct Source {
    pub name: String,
    pub opts: OtlpHttpSourceSettings,
    log: Log,
    pub(crate) metrics: Arc<Metrics>,
    health: Arc<Health>,
    pub(crate) stop: CancellationToken,
    pub(crate) token: Option<Token>,
    pub(crate) budget: Budget,
    /// The most framed bytes one append may carry (see `seglog::Log::append`).
    max_append_bytes: usize,
    process: Processing,
    /// Counters fixed per source, created once rather than per request.
    events: [Counter; 3],
    bytes: [Counter; 3],
    unknown_keys: [Counter; 3],
    durations: [Histogram; 4],
    source_events: Counter,
    source_bytes: Counter,
    /// Milliseconds since the epoch of the last rate-limited "log full"
    /// warning and "cannot append" error.
    last_full_warning_ms: AtomicU64,
    last_error_ms: AtomicU64,
}

/// The three paths, and the label for anything else.
const PATHS: [&str; 4] = ["/v1/logs", "/v1/traces", "/v1/metrics", "other"];

fn signal_of(path: &str) -> Option<Signal> {
    match path {
        "/v1/logs" => Some(Signal::Logs),
        "/v1/traces" => Some(Signal::Traces),
        "/v1/metrics" => Some(Signal::Metrics),
        _ => None,
    }
}

fn index(s: Signal) -> usize {
    match s {
        Signal::Logs => 0,
        Signal::Traces => 1,
        Signal::Metrics => 2,
    }
}

fn now_unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// What an accepted request added to the log.
pub(crate) struct Accepted {
    signal: Signal,
    pub(crate) events: u64,
    event_bytes: u64,
    body_bytes: u64,
    /// OTLP/JSON keys the decoder ignored.
    unknown_keys: u64,
}

/// The source's processing chain (issue 17) with its counters; requests
/// take turns (a run is short, and the tallies are added once per request).
type Processing = Option<std::sync::Mutex<crate::process::Runner>>;

impl Source {
    pub(crate) fn new(
        ctx: ComponentContext,
        opts: OtlpHttpSourceSettings,
        token: Option<Token>,
    ) -> Source {
        let ComponentContext {
            name,
            log,
            metrics,
            health,
            stop,
        } = ctx;
        let o = &metrics.otlp;
        let signal =
            |fam: &prometheus_client::metrics::family::Family<OtlpSignalLabels, Counter>,
             s: Signal| {
                fam.get_or_create(&OtlpSignalLabels {
                    source: name.clone(),
                    signal: s.as_str().to_string(),
                })
                .clone()
            };
        let all = [Signal::Logs, Signal::Traces, Signal::Metrics];
        let events = all.map(|s| signal(&o.events, s));
        let bytes = all.map(|s| signal(&o.bytes, s));
        let unknown_keys = all.map(|s| signal(&o.unknown_fields, s));
        let durations = PATHS.map(|p| {
            o.duration
                .get_or_create(&OtlpPathLabels {
                    source: name.clone(),
                    path: p.to_string(),
                })
                .clone()
        });
        let labels = SourceLabels {
            source: name.clone(),
        };
        let source_events = metrics.sources.events.get_or_create(&labels).clone();
        let source_bytes = metrics.sources.bytes.get_or_create(&labels).clone();
        // Events and context; a block stored plain (compression that does
        // not pay) adds a header and the context's length.
        let max_append_bytes = (log.options().segment_bytes as usize)
            .saturating_sub(SEGMENT_HEADER_LEN + FRAME_HEADER_LEN)
            .min(MAX_FRAME_PAYLOAD)
            .saturating_sub(crate::seglog::block::BLOCK_HEADER_LEN + 4);
        let process = opts.process.as_ref().map(|c| {
            std::sync::Mutex::new(crate::process::Runner::new(c.clone(), &metrics, &name))
        });
        Source {
            process,
            budget: body::budget_for(opts.max_body_bytes),
            name,
            opts,
            log,
            metrics,
            health,
            stop,
            token,
            max_append_bytes,
            events,
            bytes,
            unknown_keys,
            durations,
            source_events,
            source_bytes,
            last_full_warning_ms: AtomicU64::new(0),
            last_error_ms: AtomicU64::new(0),
        }
    }

    pub(crate) fn draining(&self) -> bool {
        self.stop.is_cancelled() || self.health.phase() == Phase::Draining
    }

    /// Whether a repeated message whose last time is kept in `last` may be
    /// logged now.
    /// The rate-limited warning that the log is full.
    pub(crate) fn warn_full(&self) {
        if Source::may_log(&self.last_full_warning_ms) {
            warn!(
                source = %self.name,
                "the log is full (when_full = \"block\"): OTLP clients are told to retry \
                 later; a sink is not keeping up or log.max_bytes is too small"
            )
        }
    }

    pub(crate) fn may_log(last: &AtomicU64) -> bool {
        let now = (now_unix_nanos() / 1_000_000).max(1);
        let then = last.load(Ordering::Relaxed);
        now.saturating_sub(then) >= WARN_EVERY.as_millis() as u64
            && last
                .compare_exchange(then, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    fn count(&self, path: usize, status: u16, outcome: &Result<Accepted, RequestError>) {
        let o = &self.metrics.otlp;
        o.requests
            .get_or_create(&OtlpRequestLabels {
                source: self.name.clone(),
                path: PATHS[path].to_string(),
                status: status.to_string(),
            })
            .inc();
        self.tally(outcome);
    }

    /// Counts what a request added to the log, or why it was refused:
    /// the same families whichever listener (HTTP or gRPC) received it.
    pub(crate) fn tally(&self, outcome: &Result<Accepted, RequestError>) {
        let o = &self.metrics.otlp;
        match outcome {
            Ok(a) => {
                self.events[index(a.signal)].inc_by(a.events);
                self.bytes[index(a.signal)].inc_by(a.body_bytes);
                self.unknown_keys[index(a.signal)].inc_by(a.unknown_keys);
                self.source_events.inc_by(a.events);
                self.source_bytes.inc_by(a.event_bytes);
            }
            Err(e) => {
                o.rejected
                    .get_or_create(&OtlpReasonLabels {
                        source: self.name.clone(),
                        reason: e.reason().to_string(),
                    })
                    .inc();
            }
        }
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
        prepare_and_append(
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
