//! The families sinks update, per sink: delivery, retries, rejections,
//! quarantine and the request pipeline.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::families::families;

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabels {
    pub sink: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkReasonLabels {
    pub sink: String,
    pub reason: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkStatusLabels {
    pub sink: String,
    /// `2xx`, `4xx`, `5xx`, or `error` for a request that got no response.
    pub status: String,
}

/// Every `status` of `holdfast_sink_requests_total`.
pub const STATUS_CLASSES: [&str; 5] = ["2xx", "3xx", "4xx", "5xx", "error"];
/// Every `reason` of `holdfast_sink_retries_total` (`src/sinks/delivery/retry/classify.rs`
/// and `deliver.rs` count them).
#[rustfmt::skip]
pub const RETRY_REASONS: [&str; 13] = [
    "connect", "timeout", "connection", "http_408", "http_429", "http_5xx", "item_429",
    "item_5xx", "unreadable_response", "response_too_large", "too_large_split", "auth",
    "endpoint",
];
/// Every `reason` of `holdfast_sink_rejected_events_total` and
/// `holdfast_sink_quarantined_events_total`.
#[rustfmt::skip]
pub const REJECT_REASONS: [&str; 5] = [
    "rejected", "partially_rejected", "retries_exhausted", "too_large", "invalid_event",
];

families! {
    /// Per-sink counters and gauges.
    pub struct SinkMetrics {
        /// Time from sending a request to having its answer
        pub latency: Family<SinkLabels, Histogram> = "holdfast_sink_request_duration_seconds"
            with Family::new_with_constructor(|| {
                Histogram::new([
                    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                ])
            });
        /// Events a sink delivered (the receiver accepted each one)
        pub events_sent: Family<SinkLabels, Counter> = "holdfast_sink_sent_events";
        /// Bytes a sink delivered
        pub bytes_sent: Family<SinkLabels, Counter> = "holdfast_sink_sent_bytes";
        /// Requests a sink made, by response status class
        pub requests: Family<SinkStatusLabels, Counter> = "holdfast_sink_requests";
        /// Events a sink will send again, by reason
        pub retries: Family<SinkReasonLabels, Counter> = "holdfast_sink_retries";
        /// Events a receiver rejected for good, by reason
        pub rejected: Family<SinkReasonLabels, Counter> = "holdfast_sink_rejected_events";
        /// Events written to the quarantine, by reason
        pub quarantined: Family<SinkReasonLabels, Counter> = "holdfast_sink_quarantined_events";
        /// Requests a sink has sent and not yet had answered
        pub in_flight: Family<SinkLabels, Gauge> = "holdfast_sink_in_flight_requests";
        /// Requests a sink allows itself in flight now (adaptive: between 1 and its concurrency)
        pub concurrency_limit: Family<SinkLabels, Gauge> = "holdfast_sink_concurrency_limit";
        // Events the receiver already had (a 409 on an Elasticsearch `create`): delivered earlier,
        // typically by a request whose answer was lost.
        /// Events the receiver already had (409 on create): delivered earlier, not sent twice into
        /// the index
        pub duplicates: Family<SinkLabels, Counter> = "holdfast_sink_duplicate_events";
        /// Requests the receiver refused for their credentials (401/403); the events are kept and
        /// retried
        pub auth_failures: Family<SinkLabels, Counter> = "holdfast_sink_auth_failures";
        /// Answers that accepted every event but carried a warning (OTLP partial_success, nothing
        /// rejected)
        pub receiver_warnings: Family<SinkLabels, Counter> = "holdfast_sink_receiver_warnings";
        // Records a receiver reported rejected without saying which (OTLP `partial_success`,
        // OpenObserve `failed`); their whole requests are quarantined.
        /// Records a receiver said it rejected without saying which; their whole requests were
        /// quarantined
        pub partially_rejected: Family<SinkLabels, Counter> = "holdfast_sink_partially_rejected_records";
        /// Bytes in the sink's quarantine
        pub quarantine_bytes: Family<SinkLabels, Gauge> = "holdfast_sink_quarantine_bytes";
        /// 1 while rejected events wait for room in a full quarantine (the sink's cursor is held)
        pub quarantine_full: Family<SinkLabels, Gauge> = "holdfast_sink_quarantine_full";
    }
}
