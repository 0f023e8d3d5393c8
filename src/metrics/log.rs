//! The log's figures, read from [`Log::stats`] at scrape time by
//! [`LogCollector`], so the log's hot path updates nothing for metrics.
//! Each family is written once here, as a row of the table it is encoded
//! from.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use crate::seglog::{ConsumerStats, Log, FSYNC_BUCKETS_SECONDS};

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
    /// Every consumer of the log is a sink, and named after it.
    sink: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EvictionLabels {
    sink: String,
    reason: String,
}

/// One unlabelled family: name, help, unit, value.
type Row<'a, V> = (&'a str, &'a str, Option<Unit>, V);

/// Encodes one family with a sample per consumer.
fn per_consumer<M: EncodeMetric>(
    enc: &mut DescriptorEncoder,
    (name, help, unit, kind): (&str, &str, Option<Unit>, MetricType),
    consumers: &[ConsumerStats],
    value: impl Fn(&ConsumerStats) -> M,
) -> Result<(), std::fmt::Error> {
    let mut family = enc.encode_descriptor(name, help, unit.as_ref(), kind)?;
    for cs in consumers {
        let l = ConsumerLabels {
            sink: cs.name.clone(),
        };
        value(cs).encode(family.encode_family(&l)?)?;
    }
    Ok(())
}

impl Collector for LogCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = self.log.stats();
        let c = &s.counters;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let age = |ms: Option<u64>| ms.map_or(0.0, |t| now_ms.saturating_sub(t) as f64 / 1000.0);

        let gauges: [Row<f64>; 5] = [
            (
                "holdfast_log",
                "Bytes of all segment files",
                Some(Unit::Bytes),
                s.bytes as f64,
            ),
            (
                "holdfast_log_max",
                "The bound on the log's bytes ([log] max_bytes), for its fill ratio",
                Some(Unit::Bytes),
                self.log.options().max_bytes as f64,
            ),
            (
                "holdfast_log_segments",
                "Segment files on disk",
                None,
                s.segments as f64,
            ),
            (
                "holdfast_log_oldest_event_age",
                "Age of the oldest event still in the log",
                Some(Unit::Seconds),
                age(s.oldest_append_ms),
            ),
            (
                "holdfast_log_next_sequence",
                "Sequence number the next appended event will get",
                None,
                s.next_seq as f64,
            ),
        ];
        for (name, help, unit, v) in gauges {
            let m = enc.encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?;
            ConstGauge::new(v).encode(m)?;
        }
        let counters: [Row<u64>; 9] = [
            ("holdfast_log_appended_events", "Events appended and acknowledged", None, c.appended_events),
            (
                "holdfast_log_written",
                "Bytes written to segment files (payload and framing)",
                Some(Unit::Bytes),
                c.bytes_written,
            ),
            (
                "holdfast_log_write_errors",
                "Failed segment writes (the appends were refused)",
                None,
                c.write_errors,
            ),
            ("holdfast_log_sync_errors", "Failed fdatasync calls", None, c.sync_errors),
            (
                "holdfast_log_full_rejections",
                "Appends refused because the log stayed full under when_full = \"block\"",
                None,
                c.full_rejections,
            ),
            ("holdfast_log_corrupt_frames", "Damaged frames found and skipped", None, c.corrupt_frames),
            (
                "holdfast_log_torn_tails",
                "Torn tails truncated when the log was opened",
                None,
                c.torn_tails,
            ),
            (
                "holdfast_log_corrupt_segment_headers",
                "Segment headers found damaged (their frames are still read and checked)",
                None,
                c.corrupt_headers,
            ),
            (
                "holdfast_log_damaged_cursor_files",
                "Cursor slots found damaged when the log was opened (the other slot, or the oldest event, was used)",
                None,
                c.damaged_cursor_files,
            ),
        ];
        for (name, help, unit, v) in counters {
            let m = enc.encode_descriptor(name, help, unit.as_ref(), MetricType::Counter)?;
            ConstCounter::new(v).encode(m)?;
        }

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

        let gauge = |name, help, unit| (name, help, unit, MetricType::Gauge);
        per_consumer(
            &mut enc,
            gauge(
                "holdfast_consumer_lag_events",
                "Events a consumer (sink) has not yet finished",
                None,
            ),
            &s.consumers,
            |cs| ConstGauge::new(cs.lag_events as i64),
        )?;
        per_consumer(
            &mut enc,
            gauge(
                "holdfast_consumer_lag",
                "Bytes of log data a consumer has not yet finished",
                Some(Unit::Bytes),
            ),
            &s.consumers,
            |cs| ConstGauge::new(cs.lag_bytes as i64),
        )?;
        per_consumer(
            &mut enc,
            gauge(
                "holdfast_consumer_oldest_unread_age",
                "Age of the oldest event a consumer has not finished (0 when caught up)",
                Some(Unit::Seconds),
            ),
            &s.consumers,
            |cs| ConstGauge::new(age(cs.oldest_unread_ms)),
        )?;
        let mut evicted = enc.encode_descriptor(
            "holdfast_log_evicted_events",
            "Events a consumer lost before finishing them: size (drop_oldest), age (max_age), corrupt (damaged data)",
            None,
            MetricType::Counter,
        )?;
        for cs in &s.consumers {
            for (reason, n) in &cs.lost {
                let l = EvictionLabels {
                    sink: cs.name.clone(),
                    reason: reason.as_str().to_string(),
                };
                ConstCounter::new(*n).encode(evicted.encode_family(&l)?)?;
            }
        }
        per_consumer(
            &mut enc,
            (
                "holdfast_log_evicted_in_doubt_events",
                "Evicted events a consumer had on the wire when the process was killed: delivered or not, unknown (never counted as evicted)",
                None,
                MetricType::Counter,
            ),
            &s.consumers,
            |cs| ConstCounter::new(cs.in_doubt),
        )?;
        Ok(())
    }
}
