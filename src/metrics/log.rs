//! The log's figures, read from [`Log::stats`] at scrape time by
//! [`LogCollector`], so the log's hot path updates nothing for metrics.
//! Each family is written once here, at the point it is encoded.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use crate::seglog::{Log, FSYNC_BUCKETS_SECONDS};

/// Reads the log's figures at scrape time.
#[derive(Debug)]
pub struct LogCollector {
    pub(super) log: Log,
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
