//! The `syslog` sources' own metric families (registered through the
//! component contract, see `src/metrics/groups.rs`), the reasons they count
//! by, and the series each `syslog` source creates at 0.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::metrics::{families, zero, SourceLabels, SourceReasonLabels};

/// The labels of `holdfast_syslog_connection_errors_total`.
pub type SyslogReasonLabels = SourceReasonLabels;

/// Every `reason` of `holdfast_syslog_connection_errors_total`: why
/// `src/sources/syslog/tcp.rs` ended a connection early.
pub const SYSLOG_CONNECTION_ERRORS: [&str; 4] = ["idle_timeout", "bad_frame", "tls", "read"];
/// Every `reason` a `syslog` source drops events for.
pub const SYSLOG_DROP_REASONS: &[&str] = &["log_full", "log_error", "too_large"];

families! {
    /// Per-source figures of `syslog` sources (`src/sources/syslog/`).
    pub struct SyslogSourceMetrics {
        /// Syslog messages that did not parse, kept whole with syslog.parse_error
        pub parse_errors: Family<SourceLabels, Counter> = "holdfast_syslog_parse_errors";
        /// Syslog messages cut at max_message_size and marked log.record.truncated
        pub truncated: Family<SourceLabels, Counter> = "holdfast_syslog_truncated_messages";
        /// Syslog TCP connections ended by holdfast, by reason (idle_timeout, bad_frame, tls, read)
        pub connection_errors: Family<SyslogReasonLabels, Counter> = "holdfast_syslog_connection_errors";
        /// Times a syslog TCP connection stopped reading until the source's max_buffer_size had room
        pub budget_waits: Family<SourceLabels, Counter> = "holdfast_syslog_budget_waits";
    }
}

impl SyslogSourceMetrics {
    /// The series of the syslog receiver `name`, at 0.
    pub fn declare(&self, name: &str) {
        let labels = SourceLabels {
            source: name.to_string(),
        };
        zero(
            &[&self.parse_errors, &self.truncated, &self.budget_waits],
            &labels,
        );
        for reason in SYSLOG_CONNECTION_ERRORS {
            let labels = SyslogReasonLabels {
                source: name.to_string(),
                reason: reason.to_string(),
            };
            zero(&[&self.connection_errors], &labels);
        }
    }
}
