//! Every counter a configured source or sink can move, created at 0 when
//! the component starts (at start-up or added by a reload), for each label value
//! it can take: Prometheus computes `increase()` only between two samples,
//! so a series born at its first event would make `increase(...) > 0`
//! miss exactly that event.
//!
//! The label values come from the lists beside each family (`*_REASONS`,
//! `STATUS_CLASSES`, `SIGNALS`); a reason missing there still counts, but
//! appears only once it happens.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::sinks::{SinkMetrics, REJECT_REASONS, RETRY_REASONS, STATUS_CLASSES};
use super::sources::{
    FileSourceMetrics, OtlpRequestLabels, SourceReasonLabels, FILE_SKIP_REASONS,
    LISTENER_CLOSE_REASONS, OTLP_REJECT_REASONS, OTLP_SIGNAL_PATHS, SIGNALS,
    SYSLOG_CONNECTION_ERRORS, SYSLOG_DROP_REASONS,
};
use super::{
    ComponentLabels, Metrics, OtlpReasonLabels, OtlpSignalLabels, SinkLabels, SinkReasonLabels,
    SinkStatusLabels, SourceLabels, FILE_SINK_DROP_REASONS, FILE_SOURCE_DROP_REASONS,
    JOURNALD_SOURCE_DROP_REASONS, SINK_DROP_REASONS,
};

/// Creates the series of `labels` in each family, at 0.
fn zero<L: Clone + std::hash::Hash + Eq>(families: &[&Family<L, Counter>], labels: &L) {
    for family in families {
        drop(family.get_or_create(labels));
    }
}

impl FileSourceMetrics {
    /// Every counter of a `file` source.
    pub(super) fn counters(&self) -> [&Family<SourceLabels, Counter>; 8] {
        [
            &self.lines,
            &self.bytes,
            &self.lines_truncated,
            &self.lines_invalid_utf8,
            &self.rotations,
            &self.truncations,
            &self.read_errors,
            &self.checkpoint_errors,
        ]
    }
}

impl SinkMetrics {
    /// Every counter of a sink labelled by the sink alone.
    pub(super) fn counters(&self) -> [&Family<SinkLabels, Counter>; 6] {
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

impl Metrics {
    /// The series of the source `name` of type `kind`, at 0.
    pub fn declare_source(&self, name: &str, kind: &str) {
        let component = format!("source:{name}");
        let labels = SourceLabels {
            source: name.to_string(),
        };
        zero(&[&self.sources.events, &self.sources.bytes], &labels);
        zero(&[&self.task_restarts], &ComponentLabels::of(&component));
        match kind {
            "file" => {
                zero(&self.file_sources.counters(), &labels);
                // Its tailer's heartbeat: 0 until a step lasts.
                drop(self.file_sources.tailer_stalled.get_or_create(&labels));
                for reason in FILE_SKIP_REASONS {
                    let labels = super::SourceReasonLabels {
                        source: name.to_string(),
                        reason: reason.to_string(),
                    };
                    zero(&[&self.file_sources.skipped], &labels);
                }
                self.declare_drops(&component, FILE_SOURCE_DROP_REASONS);
            }
            "journald" => self.declare_drops(&component, JOURNALD_SOURCE_DROP_REASONS),
            "otlp_http" => {
                self.declare_listener(name);
                for signal in SIGNALS {
                    let labels = OtlpSignalLabels {
                        source: name.to_string(),
                        signal: signal.to_string(),
                    };
                    zero(
                        &[
                            &self.otlp.events,
                            &self.otlp.bytes,
                            &self.otlp.unknown_fields,
                        ],
                        &labels,
                    );
                }
                // The status is the server's answer, open-ended; the
                // series an alert on accepted traffic needs is each signal
                // path's 200 (refusals are at 0 by reason just below).
                for path in OTLP_SIGNAL_PATHS {
                    let labels = OtlpRequestLabels {
                        source: name.to_string(),
                        path: path.to_string(),
                        status: "200".to_string(),
                    };
                    zero(&[&self.otlp.requests], &labels);
                }
                for reason in OTLP_REJECT_REASONS {
                    let labels = OtlpReasonLabels {
                        source: name.to_string(),
                        reason: reason.to_string(),
                    };
                    zero(&[&self.otlp.rejected], &labels);
                }
            }
            "syslog" => {
                self.declare_listener(name);
                zero(
                    &[
                        &self.syslog.parse_errors,
                        &self.syslog.truncated,
                        &self.syslog.budget_waits,
                    ],
                    &labels,
                );
                for reason in SYSLOG_CONNECTION_ERRORS {
                    let labels = super::SyslogReasonLabels {
                        source: name.to_string(),
                        reason: reason.to_string(),
                    };
                    zero(&[&self.syslog.connection_errors], &labels);
                }
                self.declare_drops(&component, SYSLOG_DROP_REASONS);
            }
            _ => {}
        }
    }

    /// The series of a source that listens on a TCP port (`src/sources/listen/`).
    fn declare_listener(&self, name: &str) {
        for reason in LISTENER_CLOSE_REASONS {
            let labels = SourceReasonLabels {
                source: name.to_string(),
                reason: reason.to_string(),
            };
            zero(&[&self.sources.connections_closed], &labels);
        }
    }

    /// The series of the sink `name` of type `kind`, at 0.
    pub fn declare_sink(&self, name: &str, kind: &str) {
        let component = format!("sink:{name}");
        zero(&[&self.task_restarts], &ComponentLabels::of(&component));
        let s = &self.sinks;
        let labels = SinkLabels {
            sink: name.to_string(),
        };
        if kind == "file" {
            // It writes local files: it delivers, and rotates old output
            // away; requests, retries and rejections do not happen to it.
            zero(&[&s.events_sent], &labels);
            return self.declare_drops(&component, FILE_SINK_DROP_REASONS);
        }
        zero(&s.counters(), &labels);
        for status in STATUS_CLASSES {
            let labels = SinkStatusLabels {
                sink: name.to_string(),
                status: status.to_string(),
            };
            zero(&[&s.requests], &labels);
        }
        let with_reason = |reason: &str| SinkReasonLabels {
            sink: name.to_string(),
            reason: reason.to_string(),
        };
        for reason in RETRY_REASONS {
            zero(&[&s.retries], &with_reason(reason));
        }
        for reason in REJECT_REASONS {
            zero(&[&s.rejected, &s.quarantined], &with_reason(reason));
        }
        self.declare_drops(&component, SINK_DROP_REASONS);
    }

    fn declare_drops(&self, component: &str, reasons: &[&str]) {
        for reason in reasons {
            self.drop_events(component, reason, 0);
        }
    }
}
