//! Every counter a configured source or sink can move, created at 0 when
//! the component starts (at start-up or added by a reload), for each label value
//! it can take: Prometheus computes `increase()` only between two samples,
//! so a series born at its first event would make `increase(...) > 0`
//! miss exactly that event.
//!
//! The label values come from the lists beside each family (`*_REASONS`,
//! `STATUS_CLASSES`); a reason missing there still counts, but
//! appears only once it happens.
//!
//! Here are the series of the families every source or sink shares; a
//! component type's own families and their series are in its folder, and
//! each component creates its series through the component contract
//! (`declare_metrics`, `src/component/`).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::sinks::{SinkMetrics, REJECT_REASONS, RETRY_REASONS, STATUS_CLASSES};
use super::sources::{SourceReasonLabels, LISTENER_CLOSE_REASONS};
use super::{
    ComponentLabels, Metrics, SinkLabels, SinkReasonLabels, SinkStatusLabels, SourceLabels,
};

/// Creates the series of `labels` in each family, at 0.
pub fn zero<L: Clone + std::hash::Hash + Eq>(families: &[&Family<L, Counter>], labels: &L) {
    for family in families {
        drop(family.get_or_create(labels));
    }
}

impl SinkMetrics {
    /// Every counter of a sink labelled by the sink alone.
    pub fn counters(&self) -> [&Family<SinkLabels, Counter>; 6] {
        [
            &self.events_sent,
            &self.bytes_sent,
            &self.duplicates,
            &self.auth_failures,
            &self.receiver_warnings,
            &self.partially_rejected,
        ]
    }
}

impl SinkMetrics {
    /// The series of the sink `name` that sends requests to a receiver,
    /// at 0: what it sent, every status class, retry and reject reason.
    pub fn declare(&self, name: &str) {
        let labels = SinkLabels {
            sink: name.to_string(),
        };
        zero(&self.counters(), &labels);
        for status in STATUS_CLASSES {
            let labels = SinkStatusLabels {
                sink: name.to_string(),
                status: status.to_string(),
            };
            zero(&[&self.requests], &labels);
        }
        let with_reason = |reason: &str| SinkReasonLabels {
            sink: name.to_string(),
            reason: reason.to_string(),
        };
        for reason in RETRY_REASONS {
            zero(&[&self.retries], &with_reason(reason));
        }
        for reason in REJECT_REASONS {
            zero(&[&self.rejected, &self.quarantined], &with_reason(reason));
        }
    }

    /// The reasons only a sink type gives, at 0 for the sink `name`:
    /// `retries` of `holdfast_sink_retries_total`, `rejects` of
    /// `holdfast_sink_rejected_events_total` and
    /// `holdfast_sink_quarantined_events_total` (besides [`RETRY_REASONS`]
    /// and [`REJECT_REASONS`], which every network sink has).
    pub fn declare_own_reasons(&self, name: &str, retries: &[&str], rejects: &[&str]) {
        let labels = |reason: &str| SinkReasonLabels {
            sink: name.to_string(),
            reason: reason.to_string(),
        };
        for reason in retries {
            zero(&[&self.retries], &labels(reason));
        }
        for reason in rejects {
            zero(&[&self.rejected, &self.quarantined], &labels(reason));
        }
    }

    /// The one series of the sink `name` that writes local files, at 0: it
    /// delivers, and rotates old output away (`declare_sink_drops`);
    /// requests, retries and rejections do not happen to it.
    pub fn declare_local(&self, name: &str) {
        let labels = SinkLabels {
            sink: name.to_string(),
        };
        zero(&[&self.events_sent], &labels);
    }
}

impl Metrics {
    /// The series every source moves, at 0, for the source `name`; its
    /// type's own are what its `declare_metrics` (the component contract)
    /// adds from the groups above.
    pub fn declare_source(&self, name: &str) {
        let labels = SourceLabels {
            source: name.to_string(),
        };
        zero(&[&self.sources.events, &self.sources.bytes], &labels);
        zero(
            &[&self.task_restarts],
            &ComponentLabels::of(&format!("source:{name}")),
        );
    }

    /// The series of a source that listens on a TCP port (`src/sources/listen/`).
    pub fn declare_listener(&self, name: &str) {
        for reason in LISTENER_CLOSE_REASONS {
            let labels = SourceReasonLabels {
                source: name.to_string(),
                reason: reason.to_string(),
            };
            zero(&[&self.sources.connections_closed], &labels);
        }
    }

    /// The series every sink moves, at 0, for the sink `name`; its type's
    /// own come from its `declare_metrics`.
    pub fn declare_sink(&self, name: &str) {
        zero(
            &[&self.task_restarts],
            &ComponentLabels::of(&format!("sink:{name}")),
        );
    }

    /// `holdfast_dropped_events_total` of the source `name`, at 0 for each
    /// of `reasons` (its list beside the family).
    pub fn declare_source_drops(&self, name: &str, reasons: &[&str]) {
        self.declare_drops(&format!("source:{name}"), reasons);
    }

    /// `holdfast_dropped_events_total` of the sink `name`, at 0 for each of
    /// `reasons`.
    pub fn declare_sink_drops(&self, name: &str, reasons: &[&str]) {
        self.declare_drops(&format!("sink:{name}"), reasons);
    }

    fn declare_drops(&self, component: &str, reasons: &[&str]) {
        for reason in reasons {
            self.drop_events(component, reason, 0);
        }
    }
}
