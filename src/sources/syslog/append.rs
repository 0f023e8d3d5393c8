//! Appending a connection's or a socket's batches, and what the source
//! counts about them. TCP waits for room (that is its back-pressure); UDP
//! cannot, and counts what a full log refused.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::counter::Counter;
use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

use super::mapping::Pending;
use super::metrics::{SyslogReasonLabels, SyslogSourceMetrics};
use super::SyslogSourceSettings;
use crate::append_retry::{self, Appended, Refusal, Retry};
use crate::backoff::Backoff;
use crate::component::ComponentContext;
use crate::metrics::{Metrics, SourceLabels};
use crate::seglog::format::{FRAME_HEADER_LEN, MAX_FRAME_PAYLOAD, SEGMENT_HEADER_LEN};
use crate::seglog::{Log, LogError};
use crate::syslog_format::parse::ParseOptions;

/// How long a TCP append waits for room before it tries again (and
/// checks for shutdown).
const APPEND_WAIT: Duration = Duration::from_secs(1);
/// How long after a failed write (disk full) the next try waits: always
/// one second.
const ERROR_BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(1));
/// At most one warning per source about a full or failing log this often.
const WARN_EVERY_MS: u64 = 10_000;

/// What to do when the log has no room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WhenNoRoom {
    /// Keep the batch and try again (TCP: the sender waits).
    Wait,
    /// Count the batch as lost (UDP).
    Drop,
}

pub(super) struct Appender {
    pub name: String,
    component: String,
    log: Log,
    metrics: Arc<Metrics>,
    events: Counter,
    bytes: Counter,
    parse_errors: Counter,
    truncated: Counter,
    /// The `syslog` sources' own families (connection errors by reason).
    own: Arc<SyslogSourceMetrics>,
    parse: ParseOptions,
    /// A batch is appended once its events take this many bytes.
    pub batch_bytes: usize,
    last_warning_ms: AtomicU64,
}

impl Appender {
    pub fn new(ctx: &ComponentContext, opts: &SyslogSourceSettings) -> Appender {
        let labels = SourceLabels {
            source: ctx.name.clone(),
        };
        let m = &ctx.metrics;
        let own = m.group::<SyslogSourceMetrics>();
        let parse_errors = own.parse_errors.get_or_create(&labels).clone();
        let truncated = own.truncated.get_or_create(&labels).clone();
        // What one append may carry (see `seglog::Log::append`), halved so
        // that a batch plus one more message of `max_message_size` fits.
        let max_append = (ctx.log.options().segment_bytes as usize)
            .saturating_sub(SEGMENT_HEADER_LEN + FRAME_HEADER_LEN)
            .min(MAX_FRAME_PAYLOAD)
            .saturating_sub(crate::seglog::block::BLOCK_HEADER_LEN + 4);
        Appender {
            name: ctx.name.clone(),
            component: format!("source:{}", ctx.name),
            log: ctx.log.clone(),
            metrics: ctx.metrics.clone(),
            events: m.sources.events.get_or_create(&labels).clone(),
            bytes: m.sources.bytes.get_or_create(&labels).clone(),
            parse_errors,
            truncated,
            own,
            parse: ParseOptions {
                time_zone: opts.time_zone,
                now_unix: 0,
            },
            batch_bytes: (max_append / 2).clamp(4 << 10, 1 << 20),
            last_warning_ms: AtomicU64::new(0),
        }
    }

    pub fn pending(&self) -> Pending {
        Pending::new(&self.name, self.parse)
    }

    pub fn connection_error(&self, reason: &str) {
        self.own
            .connection_errors
            .get_or_create(&SyslogReasonLabels {
                source: self.name.clone(),
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Appends what `p` holds (nothing if it is empty). Returns once the
    /// batch is durable, or counted as lost; with [`WhenNoRoom::Wait`] it
    /// gives up only when `stop` is cancelled.
    pub async fn flush(&self, p: &mut Pending, when: WhenNoRoom, stop: &CancellationToken) {
        if p.is_empty() {
            return;
        }
        self.parse_errors
            .inc_by(std::mem::take(&mut p.parse_errors));
        self.truncated.inc_by(std::mem::take(&mut p.truncated));
        let ready = p.take();
        let n = u64::from(ready.count);
        let how = match when {
            WhenNoRoom::Wait => Retry {
                wait_for_room: Some(APPEND_WAIT),
                retry: true,
                back_off_when_full: false,
            },
            WhenNoRoom::Drop => Retry {
                wait_for_room: Some(Duration::ZERO),
                retry: false,
                back_off_when_full: false,
            },
        };
        let mut backoff = ERROR_BACKOFF;
        let refused = |e: &LogError, _wait| match e {
            LogError::Full { .. } => {
                if self.may_warn() {
                    warn!(source = %self.name,
                        "the log is full (when_full = \"block\"): syslog connections are not \
                         read until sinks free space");
                }
            }
            e => self.append_failed(e),
        };
        match append_retry::append(
            &self.log,
            || ready.batch(),
            how,
            &mut backoff,
            stop,
            refused,
        )
        .await
        {
            Appended::Done(_) => {
                self.events.inc_by(n);
                self.bytes.inc_by(ready.event_bytes());
            }
            Appended::GaveUp(Refusal::Full, _) => self.lose("log_full", n),
            Appended::TooLarge(e) => {
                error!(source = %self.name, error = %e, events = n,
                    "syslog messages too large for one append are dropped; raise \
                     log.segment_size or lower max_message_size");
                self.lose("too_large", n);
            }
            Appended::Failed(LogError::Closed) => self.lose("log_error", n),
            Appended::GaveUp(_, e) | Appended::Failed(e) => {
                // Under `Wait`, a failed write was reported before the wait
                // that the stop cut short.
                if when == WhenNoRoom::Drop || Refusal::of(&e) == Refusal::Fatal {
                    self.append_failed(&e);
                }
                self.lose("log_error", n);
            }
        }
    }

    /// A write to the log failed: said at most once per [`WARN_EVERY_MS`].
    fn append_failed(&self, e: &LogError) {
        if self.may_warn() {
            error!(source = %self.name, error = %e,
                "cannot append syslog messages to the log");
        }
    }

    fn lose(&self, reason: &str, n: u64) {
        self.metrics.drop_events(&self.component, reason, n);
    }

    fn may_warn(&self) -> bool {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_millis() as u64)
            .max(1);
        let then = self.last_warning_ms.load(Ordering::Relaxed);
        now.saturating_sub(then) >= WARN_EVERY_MS
            && self
                .last_warning_ms
                .compare_exchange(then, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

/// Now, unix nanoseconds.
pub(super) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
