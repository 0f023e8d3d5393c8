//! The remote write 1.0 messages (`prompb/remote.proto` and `types.proto`
//! of Prometheus), the fields this sink sends, with the field numbers of
//! the published schema. Written here with prost's derive rather than
//! generated: the schema is small and stable, and a build script would
//! cost every build for five messages.
//!
//! Requests are written by `encode.rs` straight into bytes; the messages
//! of series and samples are here for the tests, which read a request
//! back with them and compare the writer's bytes with prost's.

use prost::Message;

#[cfg(test)]
/// `prometheus.WriteRequest`. Field 2 is reserved in the schema.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
    #[prost(message, repeated, tag = "3")]
    pub metadata: Vec<MetricMetadata>,
}

#[cfg(test)]
/// `prometheus.TimeSeries`: labels sorted by name (`__name__` among them),
/// samples in time order. Exemplars (3) and native histograms (4) are not
/// sent.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
}

#[cfg(test)]
/// `prometheus.Label`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Message)]
pub(crate) struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[cfg(test)]
/// `prometheus.Sample`: the value and its time in Unix milliseconds.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Sample {
    #[prost(double, tag = "1")]
    pub value: f64,
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// `prometheus.MetricMetadata`: a family's type, help and unit. Field 3
/// is unused in the schema.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct MetricMetadata {
    #[prost(enumeration = "MetricType", tag = "1")]
    pub r#type: i32,
    #[prost(string, tag = "2")]
    pub metric_family_name: String,
    #[prost(string, tag = "4")]
    pub help: String,
    #[prost(string, tag = "5")]
    pub unit: String,
}

/// `prometheus.MetricMetadata.MetricType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub(crate) enum MetricType {
    Unknown = 0,
    Counter = 1,
    Gauge = 2,
    Histogram = 3,
    GaugeHistogram = 4,
    Summary = 5,
    Info = 6,
    Stateset = 7,
}
