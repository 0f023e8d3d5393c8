/*!
Metric points a source collected itself (`host_metrics`,
`prometheus_scrape`, `internal_metrics`) to one batch for one append: the
same split as an OTLP request's metrics (`otlp_http/split.rs`), so a point
from `/proc` or a scrape is stored, read and sent exactly as a point a
client pushed over OTLP: one event per data point, what a collection's
points share (resource, scope) once in the batch's context.

A collection is one append: its points are durable together or not at all,
and a source that cannot append (the log full under `when_full = "block"`)
holds its next collection back rather than queueing collections in memory.
The batch's events are framed once into shared bytes, so that offering it
again after a refusal shares them rather than copying them (a scrape of
100,000 series is a few MiB).
*/

use bytes::BytesMut;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;

use super::otlp_http::decode::Decoded;
use super::otlp_http::split::{self, SplitError};
use crate::event::put_encoded_event;
use crate::seglog::format::{FRAME_HEADER_LEN, MAX_FRAME_PAYLOAD, SEGMENT_HEADER_LEN};
use crate::seglog::{Batch, Log};

/// The most bytes of events one append of a collection may take in `log`:
/// a segment less its header, one frame's header and a block's header.
pub(crate) fn max_append_bytes(log: &Log) -> usize {
    (log.options().segment_bytes as usize)
        .saturating_sub(SEGMENT_HEADER_LEN + FRAME_HEADER_LEN)
        .min(MAX_FRAME_PAYLOAD)
        .saturating_sub(crate::seglog::block::BLOCK_HEADER_LEN + 4)
}

/// One collection, ready to append.
#[derive(Debug)]
pub(crate) struct Collected {
    pub batch: Batch,
    /// Data points (events) in the batch.
    pub events: u64,
    /// Bytes of the encoded events and their context.
    pub bytes: u64,
}

/// Splits a collection's metrics into one batch of one event per data
/// point, observed at `observed_unix_nano`. Refuses a collection larger
/// than one append (`max_append_bytes`) and a metric with no data.
pub(crate) fn collect(
    request: ExportMetricsServiceRequest,
    source: &str,
    observed_unix_nano: u64,
    max_append_bytes: usize,
) -> Result<Collected, SplitError> {
    let mut framed = BytesMut::with_capacity(4096);
    let split = split::split_as(
        Decoded::Metrics(request),
        source,
        observed_unix_nano,
        max_append_bytes,
        super::WRITE_FORMAT_2,
        |e| put_encoded_event(e, &mut framed),
    )?;
    let bytes = split.bytes + split.context.len() as u64;
    // Framed here, one event per split event: the count is the split's.
    let batch = Batch::from_framed_trusted(framed.freeze(), split.events as u32)
        .with_context(split.context);
    Ok(Collected {
        batch,
        events: split.events,
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::metrics::v1::{
        metric::Data, number_data_point::Value, Gauge, Metric, NumberDataPoint, ResourceMetrics,
        ScopeMetrics,
    };

    fn gauge(name: &str, points: usize) -> Metric {
        Metric {
            name: name.into(),
            unit: "By".into(),
            data: Some(Data::Gauge(Gauge {
                data_points: (0..points)
                    .map(|i| NumberDataPoint {
                        time_unix_nano: 1_700_000_000_000_000_000,
                        value: Some(Value::AsInt(i as i64)),
                        ..Default::default()
                    })
                    .collect(),
            })),
            ..Default::default()
        }
    }

    fn request(metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    #[test]
    fn one_event_per_data_point() {
        let c = collect(
            request(vec![gauge("a", 3), gauge("b", 2)]),
            "host",
            1,
            1 << 20,
        )
        .expect("collect");
        assert_eq!(c.events, 5);
        assert_eq!(c.batch.len(), 5);
        assert!(c.bytes > 0);
    }

    #[test]
    fn a_collection_larger_than_one_append_is_refused() {
        let e = collect(request(vec![gauge("a", 10_000)]), "host", 1, 4096).unwrap_err();
        assert!(matches!(e, SplitError::TooLarge { .. }), "{e}");
    }
}
