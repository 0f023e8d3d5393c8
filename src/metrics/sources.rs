//! The families every source updates: events and bytes, what processing
//! did, and what the listening sources share.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::families::families;

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: String,
}

/// A source and why it refused or lost something (the `reason` values of
/// each family are listed below, next to it).
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceReasonLabels {
    pub source: String,
    pub reason: String,
}

/// `holdfast_processed_events_total`: what a source's processing chain
/// (`src/process/`) did, per rule.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProcessedLabels {
    pub source: String,
    /// The step's `name` (default `<type>_<index>`).
    pub rule: String,
    /// `unparsed`, `dropped`, `sampled_out` or `redacted`.
    pub outcome: String,
}

families! {
    /// Per-source counters.
    pub struct SourceMetrics {
        /// Events a source appended to the log (acknowledged to its input)
        pub events: Family<SourceLabels, Counter> = "holdfast_source_events";
        /// Payload bytes a source appended to the log
        pub bytes: Family<SourceLabels, Counter> = "holdfast_source_bytes";
        /// Events a processing rule marked unparsed, dropped, sampled out or redacted, by source
        /// and rule
        pub processed: Family<ProcessedLabels, Counter> = "holdfast_processed_events";
        /// Connections a listening source (otlp_http, syslog over TCP) closed to protect its
        /// slots, by reason (per_peer_limit, idle_evicted, tls_handshake_timeout,
        /// tls_handshake_failed)
        pub connections_closed: Family<SourceReasonLabels, Counter> = "holdfast_listener_closed_connections";
    }
}

/// Every `reason` of `holdfast_listener_closed_connections_total`: why
/// `src/sources/listen/` closed a connection (`slots.rs`, `tls.rs`).
pub const LISTENER_CLOSE_REASONS: [&str; 4] = [
    "per_peer_limit",
    "idle_evicted",
    "tls_handshake_timeout",
    "tls_handshake_failed",
];
