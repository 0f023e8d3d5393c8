/*!
What the connections of one OTLP source share, whichever listener (HTTP, or
the `otlp` source's gRPC) they came through: the settings, the log, the
token, the memory budget, the processing chain, and the counters, created
once per source rather than per request.
*/

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::auth::Token;
use super::body::{self, Budget};
use super::metrics::{
    OtlpPathLabels, OtlpReasonLabels, OtlpRequestLabels, OtlpSignalLabels, OtlpSourceMetrics,
};
use super::response::RequestError;
use super::OtlpHttpSourceSettings;
use crate::api::{Health, Phase};
use crate::component::ComponentContext;
use crate::event::Signal;
use crate::metrics::SourceLabels;
use crate::seglog::format::{FRAME_HEADER_LEN, MAX_FRAME_PAYLOAD, SEGMENT_HEADER_LEN};
use crate::seglog::Log;

/// Repeated warnings (log full, log errors) are logged at most this often.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Everything the connections of one source share.
pub(crate) struct Source {
    pub name: String,
    pub opts: OtlpHttpSourceSettings,
    pub(crate) log: Log,
    /// The OTLP receivers' own families.
    pub(crate) otlp: Arc<OtlpSourceMetrics>,
    pub(crate) health: Arc<Health>,
    pub(crate) stop: CancellationToken,
    pub(crate) token: Option<Token>,
    pub(crate) budget: Budget,
    /// The most framed bytes one append may carry (see `seglog::Log::append`).
    pub(crate) max_append_bytes: usize,
    pub(crate) process: Processing,
    /// Counters fixed per source, created once rather than per request.
    pub(crate) events: [Counter; 3],
    pub(crate) bytes: [Counter; 3],
    pub(crate) unknown_keys: [Counter; 3],
    pub(crate) durations: [Histogram; 4],
    pub(crate) source_events: Counter,
    pub(crate) source_bytes: Counter,
    /// Milliseconds since the epoch of the last rate-limited "log full"
    /// warning and "cannot append" error.
    pub(crate) last_full_warning_ms: AtomicU64,
    pub(crate) last_error_ms: AtomicU64,
}

/// The three paths, and the label for anything else.
pub(crate) const PATHS: [&str; 4] = ["/v1/logs", "/v1/traces", "/v1/metrics", "other"];

pub(crate) fn index(s: Signal) -> usize {
    match s {
        Signal::Logs => 0,
        Signal::Traces => 1,
        Signal::Metrics => 2,
    }
}

pub(crate) fn now_unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// What an accepted request added to the log.
pub(crate) struct Accepted {
    pub(crate) signal: Signal,
    pub(crate) events: u64,
    pub(crate) event_bytes: u64,
    pub(crate) body_bytes: u64,
    /// OTLP/JSON keys the decoder ignored.
    pub(crate) unknown_keys: u64,
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
        let otlp = metrics.group::<OtlpSourceMetrics>();
        let o = &*otlp;
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
            otlp,
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

    pub(crate) fn count(&self, path: usize, status: u16, outcome: &Result<Accepted, RequestError>) {
        let o = &self.otlp;
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
        let o = &self.otlp;
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
