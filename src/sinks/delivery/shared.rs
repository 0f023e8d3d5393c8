//! What the delivery tasks of one sink share, and what they hand back to
//! the runtime: the sink's transport, policy, quarantine, metric handles
//! and channels; the log's accounting of claims and finished events.
//! Below `deliver.rs`, `quarantining.rs` and `requeue.rs`, which all work
//! on it, so that none of them imports another for it.

use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::item::{Item, Pos};
use super::limit::Limit;
use super::retry::Policy;
use super::retry_queue::Waiting;
use super::transport::Transport;
use crate::metrics::{Metrics, SinkLabels, SinkReasonLabels, SinkStatusLabels};
use crate::seglog::{Ledger, Outcome as LogOutcome};
pub(crate) use crate::sinks::quarantine::FULL_RETRY;
use crate::sinks::quarantine::{Quarantine, Record};

/// What a delivery task hands back to the runtime besides finished events.
#[derive(Debug)]
pub(crate) enum Back {
    /// Events to send again, not before a time.
    Retry(Waiting),
    /// A request found the receiver working: waits that were only backoff
    /// after it failed may end now.
    Alive,
    /// A request found the receiver down (no answer, 408, 5xx): hold every
    /// batch until this time, and probe meanwhile.
    Down { until: tokio::time::Instant },
}

/// What every delivery task of one sink shares.
pub(crate) struct Shared<T> {
    pub name: String,
    /// How requests reach the receiver.
    pub transport: T,
    pub policy: Policy,
    pub quarantine: Arc<Quarantine>,
    pub config_hash: String,
    pub metrics: Arc<Metrics>,
    /// Finished events go to the runtime, which moves the watermark.
    /// Dropped when the sink stops; a send then fails, harmlessly.
    pub done: mpsc::UnboundedSender<Vec<Pos>>,
    /// Events to retry, and news that the receiver works, to the runtime.
    /// Dropped with `done`.
    pub back: mpsc::UnboundedSender<Back>,
    /// Requests allowed in flight; every answer is reported to it.
    pub limit: Limit,
    pub stop: CancellationToken,
    /// Requests sent so far, for spreading them over endpoints.
    pub requests: AtomicUsize,
    /// Rejected events waiting for room in the quarantine.
    pub parked: std::sync::Mutex<Vec<Parked>>,
    /// The receiver's answers have been too long to read since the last
    /// readable one: logged when it starts, not for every request.
    pub answers_too_large: AtomicBool,
    pub m: SinkHandles,
    /// The log's accounting of this sink's events: claims around sends,
    /// finished events (see the module doc).
    pub ledger: Ledger,
}

/// The sink's metric handles, looked up once.
pub(crate) struct SinkHandles {
    labels: SinkLabels,
    pub(super) sent: Counter,
    pub(super) bytes: Counter,
    pub(super) duplicates: Counter,
    pub(super) auth_failures: Counter,
    pub(super) warnings: Counter,
    pub(super) partial: Counter,
    pub(super) in_flight: Gauge,
    pub(super) latency: Histogram,
    pub concurrency_limit: Gauge,
    pub quarantine_bytes: Gauge,
    pub(super) quarantine_full: Gauge,
}

impl SinkHandles {
    pub fn new(metrics: &Metrics, sink: &str) -> SinkHandles {
        let labels = SinkLabels { sink: sink.into() };
        let s = &metrics.sinks;
        SinkHandles {
            sent: s.events_sent.get_or_create(&labels).clone(),
            bytes: s.bytes_sent.get_or_create(&labels).clone(),
            duplicates: s.duplicates.get_or_create(&labels).clone(),
            auth_failures: s.auth_failures.get_or_create(&labels).clone(),
            warnings: s.receiver_warnings.get_or_create(&labels).clone(),
            partial: s.partially_rejected.get_or_create(&labels).clone(),
            in_flight: s.in_flight.get_or_create(&labels).clone(),
            latency: s.latency.get_or_create(&labels).clone(),
            concurrency_limit: s.concurrency_limit.get_or_create(&labels).clone(),
            quarantine_bytes: s.quarantine_bytes.get_or_create(&labels).clone(),
            quarantine_full: s.quarantine_full.get_or_create(&labels).clone(),
            labels,
        }
    }

    fn reason(
        &self,
        family: &prometheus_client::metrics::family::Family<SinkReasonLabels, Counter>,
        reason: &str,
        n: u64,
    ) {
        if n > 0 {
            family
                .get_or_create(&SinkReasonLabels {
                    sink: self.labels.sink.clone(),
                    reason: reason.to_string(),
                })
                .inc_by(n);
        }
    }
}

impl<T: Transport> Shared<T> {
    pub(super) fn finished(&self, done: Vec<Pos>) {
        if !done.is_empty() {
            self.ledger
                .release(&log_seqs(done.iter()), LogOutcome::Finished);
            let _ = self.done.send(done);
        }
    }

    /// Claims the log events of `batch` for sending; drops (reported
    /// finished) those the log has evicted and counted.
    pub(super) fn claim(&self, batch: &mut Vec<Item>) {
        let ok = self.ledger.claim(&log_seqs(batch.iter().map(|i| &i.pos)));
        self.drop_refused(batch, ok);
    }

    /// Releases `batch` to be sent again; drops (reported finished) the
    /// events the log evicted meanwhile and has now counted lost.
    pub(super) fn release_retry(&self, batch: &mut Vec<Item>) {
        let seqs = log_seqs(batch.iter().map(|i| &i.pos));
        let dropped = self.ledger.release(&seqs, LogOutcome::Retry);
        self.drop_refused(batch, dropped.into_iter().map(|d| !d).collect());
    }

    /// `keep` holds one flag per log event of `batch`, in order.
    fn drop_refused(&self, batch: &mut Vec<Item>, keep: Vec<bool>) {
        if keep.iter().all(|&k| k) {
            return;
        }
        let mut keep = keep.into_iter();
        let mut gone = Vec::new();
        batch.retain(|i| {
            if !matches!(i.pos, Pos::Log(_)) || keep.next().unwrap_or(true) {
                return true;
            }
            gone.push(i.pos);
            false
        });
        let _ = self.done.send(gone);
    }

    pub(super) fn count(&self, which: Which, reason: &str, n: u64) {
        let s = &self.metrics.sinks;
        let family = match which {
            Which::Retries => &s.retries,
            Which::Rejected => &s.rejected,
            Which::Quarantined => &s.quarantined,
        };
        self.m.reason(family, reason, n);
    }

    pub(super) fn status(&self, class: &str) {
        self.metrics
            .sinks
            .requests
            .get_or_create(&SinkStatusLabels {
                sink: self.name.clone(),
                status: class.to_string(),
            })
            .inc();
    }
}

#[derive(Clone, Copy)]
pub(super) enum Which {
    Retries,
    Rejected,
    Quarantined,
}

/// Rejected events waiting for room in a full quarantine (`when_full =
/// "block"`). They are not finished, so the cursor stays below them; the
/// runtime tries again every [`FULL_RETRY`] (or `backoff_max`, if shorter)
/// while the delivery tasks go on with later events, up to the window.
#[derive(Debug)]
pub(crate) struct Parked {
    pub records: Vec<Record>,
    pub positions: Vec<Pos>,
}

impl<T> Shared<T> {
    pub fn has_parked(&self) -> bool {
        !self
            .parked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }
}

/// The log sequence numbers among `pos` (replayed events have none).
pub(super) fn log_seqs<'a>(pos: impl Iterator<Item = &'a Pos>) -> Vec<u64> {
    pos.filter_map(|p| match p {
        Pos::Log(s) => Some(*s),
        Pos::Replay { .. } => None,
    })
    .collect()
}

/// Sleeps for `d`; false if the sink stops first.
pub(super) async fn pause(stop: &CancellationToken, d: std::time::Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = stop.cancelled() => false,
    }
}
