/*!
Every metric holdfast exports, defined in one place.

Names follow Prometheus conventions: `holdfast_<what>_<unit>` with `_total`
on counters (prometheus-client appends it), few label values. A lost event is
counted once, with its reason, and never for something that will still be
retried. `docs/metrics.md` lists each metric; keep the two in step.

Two kinds live here:

* counters and gauges that components update as things happen (sources,
  sinks, supervision), held in [`Metrics`];
* the log's figures, read from [`Log::stats`] at scrape time by
  [`LogCollector`], so the log's hot path updates nothing for metrics.
*/

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::seglog::{Log, FSYNC_BUCKETS_SECONDS};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabels {
    pub sink: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkReasonLabels {
    pub sink: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkStatusLabels {
    pub sink: String,
    /// `2xx`, `4xx`, `5xx`, or `error` for a request that got no response.
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DropLabels {
    /// `source:<name>`, `sink:<name>`, …
    pub component: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskLabels {
    pub task: String,
}

/// Per-source counters.
#[derive(Debug, Default)]
pub struct SourceMetrics {
    /// Events appended to the log (acknowledged).
    pub events: Family<SourceLabels, Counter>,
    /// Payload bytes of those events.
    pub bytes: Family<SourceLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OtlpRequestLabels {
    pub source: String,
    /// `/v1/logs`, `/v1/traces`, `/v1/metrics`, or `other`.
    pub path: String,
    /// The HTTP status code, like `200` or `503`.
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OtlpSignalLabels {
    pub source: String,
    /// `logs`, `traces` or `metrics`.
    pub signal: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OtlpReasonLabels {
    pub source: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OtlpPathLabels {
    pub source: String,
    pub path: String,
}

/// What the `otlp_http` sources count, per source.
#[derive(Debug)]
pub struct OtlpSourceMetrics {
    /// Requests answered, by path and status.
    pub requests: Family<OtlpRequestLabels, Counter>,
    /// Events (log records, spans, metric data points) appended, by signal.
    pub events: Family<OtlpSignalLabels, Counter>,
    /// Request body bytes (after decompression) of accepted requests, by signal.
    pub bytes: Family<OtlpSignalLabels, Counter>,
    /// Requests answered with anything but 200, by reason (`decode`,
    /// `too_large`, `log_full`, `draining`, …; see docs/sources-otlp-http.md).
    pub rejected: Family<OtlpReasonLabels, Counter>,
    /// Time from a request's head to its answer, by path.
    pub duration: Family<OtlpPathLabels, Histogram>,
}

impl Default for OtlpSourceMetrics {
    fn default() -> Self {
        OtlpSourceMetrics {
            requests: Family::default(),
            events: Family::default(),
            bytes: Family::default(),
            rejected: Family::default(),
            duration: Family::new_with_constructor(|| {
                Histogram::new([
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0,
                ])
            }),
        }
    }
}

/// Per-source figures of `file` sources (`src/sources/file/`).
#[derive(Debug, Default)]
pub struct FileSourceMetrics {
    /// Files currently matched by the globs and followed.
    pub files_watched: Family<SourceLabels, Gauge>,
    /// Of those, files holding an open descriptor.
    pub files_open: Family<SourceLabels, Gauge>,
    /// Lines read (before multiline joining).
    pub lines: Family<SourceLabels, Counter>,
    /// Bytes read from files.
    pub bytes: Family<SourceLabels, Counter>,
    /// Lines (or multiline events) cut at `max_line_bytes`.
    pub lines_truncated: Family<SourceLabels, Counter>,
    /// Lines with invalid UTF-8, kept with U+FFFD replacements.
    pub lines_invalid_utf8: Family<SourceLabels, Counter>,
    /// Files renamed, or deleted or moved out of the globs, while followed.
    pub rotations: Family<SourceLabels, Counter>,
    /// Files truncated in place (copytruncate): a new generation began.
    pub truncations: Family<SourceLabels, Counter>,
    /// Failed opens and reads of matched files.
    pub read_errors: Family<SourceLabels, Counter>,
    /// Checkpoints that could not be written, or were found damaged.
    pub checkpoint_errors: Family<SourceLabels, Counter>,
}

/// Per-sink counters and gauges.
#[derive(Debug)]
pub struct SinkMetrics {
    pub events_sent: Family<SinkLabels, Counter>,
    pub bytes_sent: Family<SinkLabels, Counter>,
    pub requests: Family<SinkStatusLabels, Counter>,
    pub retries: Family<SinkReasonLabels, Counter>,
    pub rejected: Family<SinkReasonLabels, Counter>,
    pub quarantined: Family<SinkReasonLabels, Counter>,
    pub in_flight: Family<SinkLabels, Gauge>,
    /// Requests the sink allows itself in flight now: its adaptive limit,
    /// between 1 and its `concurrency`.
    pub concurrency_limit: Family<SinkLabels, Gauge>,
    pub latency: Family<SinkLabels, Histogram>,
    /// Events the receiver already had (a 409 on an Elasticsearch `create`):
    /// delivered earlier, typically by a request whose answer was lost.
    pub duplicates: Family<SinkLabels, Counter>,
    /// Requests refused for their credentials (401/403); the events are kept.
    pub auth_failures: Family<SinkLabels, Counter>,
    /// Answers that accepted everything but carried a warning (OTLP
    /// `partial_success` with nothing rejected).
    pub receiver_warnings: Family<SinkLabels, Counter>,
    /// Records a receiver reported rejected without saying which (OTLP
    /// `partial_success`, OpenObserve `failed`); their whole requests are
    /// quarantined.
    pub partially_rejected: Family<SinkLabels, Counter>,
    /// Bytes in the sink's quarantine.
    pub quarantine_bytes: Family<SinkLabels, Gauge>,
    /// 1 while rejected events wait for room in a full quarantine (the
    /// sink's cursor is held), else 0.
    pub quarantine_full: Family<SinkLabels, Gauge>,
}

impl Default for SinkMetrics {
    fn default() -> Self {
        SinkMetrics {
            events_sent: Family::default(),
            bytes_sent: Family::default(),
            requests: Family::default(),
            retries: Family::default(),
            rejected: Family::default(),
            quarantined: Family::default(),
            in_flight: Family::default(),
            concurrency_limit: Family::default(),
            duplicates: Family::default(),
            auth_failures: Family::default(),
            receiver_warnings: Family::default(),
            partially_rejected: Family::default(),
            quarantine_bytes: Family::default(),
            quarantine_full: Family::default(),
            latency: Family::new_with_constructor(|| {
                Histogram::new([
                    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                ])
            }),
        }
    }
}

/// The metrics components update, and the registry `/metrics` encodes.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub sources: Arc<SourceMetrics>,
    /// The `file` sources' files, lines, rotations and errors.
    pub file_sources: Arc<FileSourceMetrics>,
    pub sinks: Arc<SinkMetrics>,
    /// The `otlp_http` sources' requests, events and rejections.
    pub otlp: Arc<OtlpSourceMetrics>,
    /// Every event lost for a reason other than log eviction (which the log
    /// counts per consumer): a full output directory, a record too large to
    /// store, …
    pub dropped: Family<DropLabels, Counter>,
    /// Supervised tasks restarted after a failure.
    pub task_restarts: Family<TaskLabels, Counter>,
}

impl Metrics {
    pub fn new(log: Option<Log>) -> Metrics {
        let mut registry = Registry::default();
        let sources = Arc::new(SourceMetrics::default());
        let file_sources = Arc::new(FileSourceMetrics::default());
        let sinks = Arc::new(SinkMetrics::default());
        let otlp = Arc::new(OtlpSourceMetrics::default());
        let dropped = Family::<DropLabels, Counter>::default();
        let task_restarts = Family::<TaskLabels, Counter>::default();

        registry.register(
            "holdfast_source_events",
            "Events a source appended to the log (acknowledged to its input)",
            sources.events.clone(),
        );
        registry.register_with_unit(
            "holdfast_source",
            "Payload bytes a source appended to the log",
            Unit::Bytes,
            sources.bytes.clone(),
        );
        registry.register(
            "holdfast_otlp_requests",
            "OTLP/HTTP requests answered, by path and status code",
            otlp.requests.clone(),
        );
        registry.register(
            "holdfast_otlp_accepted_events",
            "Log records, spans and metric data points an OTLP/HTTP source appended, by signal",
            otlp.events.clone(),
        );
        registry.register_with_unit(
            "holdfast_otlp_accepted",
            "Request body bytes (decompressed) of the requests an OTLP/HTTP source accepted, by signal",
            Unit::Bytes,
            otlp.bytes.clone(),
        );
        registry.register(
            "holdfast_otlp_rejected_requests",
            "OTLP/HTTP requests not accepted, by reason",
            otlp.rejected.clone(),
        );
        registry.register_with_unit(
            "holdfast_otlp_request_duration",
            "Time from an OTLP/HTTP request's head to its answer, by path",
            Unit::Seconds,
            otlp.duration.clone(),
        );
        let fs = &file_sources;
        registry.register(
            "holdfast_file_source_files_watched",
            "Files a file source follows (matched by its globs)",
            fs.files_watched.clone(),
        );
        registry.register(
            "holdfast_file_source_open_files",
            "Files a file source holds open",
            fs.files_open.clone(),
        );
        registry.register(
            "holdfast_file_source_lines",
            "Lines a file source read (before multiline joining)",
            fs.lines.clone(),
        );
        registry.register_with_unit(
            "holdfast_file_source_read",
            "Bytes a file source read from files",
            Unit::Bytes,
            fs.bytes.clone(),
        );
        registry.register(
            "holdfast_file_source_truncated_lines",
            "Lines (or multiline events) cut at max_line_bytes and marked log.record.truncated",
            fs.lines_truncated.clone(),
        );
        registry.register(
            "holdfast_file_source_invalid_utf8_lines",
            "Lines with invalid UTF-8, kept lossily and marked log.record.invalid_utf8",
            fs.lines_invalid_utf8.clone(),
        );
        registry.register(
            "holdfast_file_source_rotations",
            "Followed files renamed, deleted or moved out of the globs",
            fs.rotations.clone(),
        );
        registry.register(
            "holdfast_file_source_truncations",
            "Followed files truncated in place (copytruncate); each starts a new generation",
            fs.truncations.clone(),
        );
        registry.register(
            "holdfast_file_source_read_errors",
            "Failed opens and reads of matched files",
            fs.read_errors.clone(),
        );
        registry.register(
            "holdfast_file_source_checkpoint_errors",
            "File source checkpoints that failed to write or were found damaged",
            fs.checkpoint_errors.clone(),
        );
        registry.register(
            "holdfast_sink_sent_events",
            "Events a sink delivered (the receiver accepted each one)",
            sinks.events_sent.clone(),
        );
        registry.register_with_unit(
            "holdfast_sink_sent",
            "Bytes a sink delivered",
            Unit::Bytes,
            sinks.bytes_sent.clone(),
        );
        registry.register(
            "holdfast_sink_requests",
            "Requests a sink made, by response status class",
            sinks.requests.clone(),
        );
        registry.register(
            "holdfast_sink_retries",
            "Events a sink will send again, by reason",
            sinks.retries.clone(),
        );
        registry.register(
            "holdfast_sink_rejected_events",
            "Events a receiver rejected for good, by reason",
            sinks.rejected.clone(),
        );
        registry.register(
            "holdfast_sink_quarantined_events",
            "Events written to the quarantine, by reason",
            sinks.quarantined.clone(),
        );
        registry.register(
            "holdfast_sink_in_flight_requests",
            "Requests a sink has sent and not yet had answered",
            sinks.in_flight.clone(),
        );
        registry.register(
            "holdfast_sink_concurrency_limit",
            "Requests a sink allows itself in flight now (adaptive: between 1 and its concurrency)",
            sinks.concurrency_limit.clone(),
        );
        registry.register_with_unit(
            "holdfast_sink_request_duration",
            "Time from sending a request to having its answer",
            Unit::Seconds,
            sinks.latency.clone(),
        );
        registry.register(
            "holdfast_sink_duplicate_events",
            "Events the receiver already had (409 on create): delivered earlier, not sent twice into the index",
            sinks.duplicates.clone(),
        );
        registry.register(
            "holdfast_sink_auth_failures",
            "Requests the receiver refused for their credentials (401/403); the events are kept and retried",
            sinks.auth_failures.clone(),
        );
        registry.register(
            "holdfast_sink_receiver_warnings",
            "Answers that accepted every event but carried a warning (OTLP partial_success, nothing rejected)",
            sinks.receiver_warnings.clone(),
        );
        registry.register(
            "holdfast_sink_partially_rejected_records",
            "Records a receiver said it rejected without saying which; their whole requests were quarantined",
            sinks.partially_rejected.clone(),
        );
        registry.register_with_unit(
            "holdfast_sink_quarantine",
            "Bytes in the sink's quarantine",
            Unit::Bytes,
            sinks.quarantine_bytes.clone(),
        );
        registry.register(
            "holdfast_sink_quarantine_full",
            "1 while rejected events wait for room in a full quarantine (the sink's cursor is held)",
            sinks.quarantine_full.clone(),
        );
        registry.register(
            "holdfast_dropped_events",
            "Events lost for any reason other than log eviction, by component and reason",
            dropped.clone(),
        );
        registry.register(
            "holdfast_task_restarts",
            "Source and sink tasks restarted after a failure",
            task_restarts.clone(),
        );
        if let Some(log) = log {
            registry.register_collector(Box::new(LogCollector { log }));
        }
        Metrics {
            registry,
            sources,
            file_sources,
            sinks,
            otlp,
            dropped,
            task_restarts,
        }
    }

    /// Counts `n` events lost by `component` for `reason`.
    pub fn drop_events(&self, component: &str, reason: &str, n: u64) {
        self.dropped
            .get_or_create(&DropLabels {
                component: component.to_string(),
                reason: reason.to_string(),
            })
            .inc_by(n);
    }

    /// The Prometheus text exposition (OpenMetrics flavour).
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// Reads the log's figures at scrape time.
#[derive(Debug)]
pub struct LogCollector {
    log: Log,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log").field("dir", &self.dir()).finish()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConsumerLabels {
    consumer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EvictionLabels {
    consumer: String,
    reason: String,
}

fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    v: f64,
) -> Result<(), std::fmt::Error> {
    let m = enc.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    ConstGauge::new(v).encode(m)
}

fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    v: u64,
) -> Result<(), std::fmt::Error> {
    let m = enc.encode_descriptor(name, help, unit, MetricType::Counter)?;
    ConstCounter::new(v).encode(m)
}

impl Collector for LogCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = self.log.stats();
        let c = &s.counters;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let age = |ms: Option<u64>| ms.map_or(0.0, |t| now_ms.saturating_sub(t) as f64 / 1000.0);

        gauge(
            &mut enc,
            "holdfast_log",
            "Bytes of all segment files",
            Some(&Unit::Bytes),
            s.bytes as f64,
        )?;
        gauge(
            &mut enc,
            "holdfast_log_segments",
            "Segment files on disk",
            None,
            s.segments as f64,
        )?;
        gauge(
            &mut enc,
            "holdfast_log_oldest_event_age",
            "Age of the oldest event still in the log",
            Some(&Unit::Seconds),
            age(s.oldest_append_ms),
        )?;
        gauge(
            &mut enc,
            "holdfast_log_next_sequence",
            "Sequence number the next appended event will get",
            None,
            s.next_seq as f64,
        )?;
        counter(
            &mut enc,
            "holdfast_log_appended_events",
            "Events appended and acknowledged",
            None,
            c.appended_events,
        )?;
        counter(
            &mut enc,
            "holdfast_log_written",
            "Bytes written to segment files (payload and framing)",
            Some(&Unit::Bytes),
            c.bytes_written,
        )?;
        counter(
            &mut enc,
            "holdfast_log_write_errors",
            "Failed segment writes (the appends were refused)",
            None,
            c.write_errors,
        )?;
        counter(
            &mut enc,
            "holdfast_log_sync_errors",
            "Failed fdatasync calls",
            None,
            c.sync_errors,
        )?;
        counter(
            &mut enc,
            "holdfast_log_full_rejections",
            "Appends refused because the log stayed full under when_full = \"block\"",
            None,
            c.full_rejections,
        )?;
        counter(
            &mut enc,
            "holdfast_log_corrupt_frames",
            "Damaged frames found and skipped",
            None,
            c.corrupt_frames,
        )?;
        counter(
            &mut enc,
            "holdfast_log_torn_tails",
            "Torn tails truncated when the log was opened",
            None,
            c.torn_tails,
        )?;
        counter(
            &mut enc,
            "holdfast_log_corrupt_segment_headers",
            "Segment headers found damaged (their frames are still read and checked)",
            None,
            c.corrupt_headers,
        )?;
        counter(
            &mut enc,
            "holdfast_log_damaged_cursor_files",
            "Cursor slots found damaged when the log was opened (the other slot, or the oldest event, was used)",
            None,
            c.damaged_cursor_files,
        )?;

        let mut m = enc.encode_descriptor(
            "holdfast_log_fsync_duration",
            "Duration of fdatasync on segment data",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        let mut cumulative = 0;
        let mut buckets: Vec<(f64, u64)> = FSYNC_BUCKETS_SECONDS
            .iter()
            .zip(c.fsync_buckets)
            .map(|(&b, n)| {
                cumulative += n;
                (b, n)
            })
            .collect();
        buckets.push((f64::INFINITY, c.fsyncs.saturating_sub(cumulative)));
        m.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            c.fsync_nanos as f64 / 1e9,
            c.fsyncs,
            &buckets,
            None,
        )?;

        let mut lag = enc.encode_descriptor(
            "holdfast_consumer_lag_events",
            "Events a consumer (sink) has not yet finished",
            None,
            MetricType::Gauge,
        )?;
        for cs in &s.consumers {
            let l = ConsumerLabels {
                consumer: cs.name.clone(),
            };
            ConstGauge::new(cs.lag_events as i64).encode(lag.encode_family(&l)?)?;
        }
        let mut lag_bytes = enc.encode_descriptor(
            "holdfast_consumer_lag",
            "Bytes of log data a consumer has not yet finished",
            Some(&Unit::Bytes),
            MetricType::Gauge,
        )?;
        for cs in &s.consumers {
            let l = ConsumerLabels {
                consumer: cs.name.clone(),
            };
            ConstGauge::new(cs.lag_bytes as i64).encode(lag_bytes.encode_family(&l)?)?;
        }
        let mut oldest = enc.encode_descriptor(
            "holdfast_consumer_oldest_unread_age",
            "Age of the oldest event a consumer has not finished (0 when caught up)",
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?;
        for cs in &s.consumers {
            let l = ConsumerLabels {
                consumer: cs.name.clone(),
            };
            ConstGauge::new(age(cs.oldest_unread_ms)).encode(oldest.encode_family(&l)?)?;
        }
        let mut evicted = enc.encode_descriptor(
            "holdfast_log_evicted_events",
            "Events a consumer lost before finishing them: size (drop_oldest), age (max_age), corrupt (damaged data)",
            None,
            MetricType::Counter,
        )?;
        for cs in &s.consumers {
            for (reason, n) in &cs.lost {
                let l = EvictionLabels {
                    consumer: cs.name.clone(),
                    reason: reason.as_str().to_string(),
                };
                ConstCounter::new(*n).encode(evicted.encode_family(&l)?)?;
            }
        }
        let mut in_doubt = enc.encode_descriptor(
            "holdfast_log_evicted_in_doubt_events",
            "Evicted events a consumer had on the wire when the process was killed: delivered or not, unknown (never counted as evicted)",
            None,
            MetricType::Counter,
        )?;
        for cs in &s.consumers {
            let l = ConsumerLabels {
                consumer: cs.name.clone(),
            };
            ConstCounter::new(cs.in_doubt).encode(in_doubt.encode_family(&l)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
