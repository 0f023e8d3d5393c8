/*!
Metrics: `ExportMetricsServiceRequest` down to the data points of each
metric kind, their exemplars, buckets and quantiles.
*/

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::{
    exemplar, exponential_histogram_data_point, metric, number_data_point, summary_data_point,
    AggregationTemporality as Temporality, Exemplar, ExponentialHistogram,
    ExponentialHistogramDataPoint, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, Summary, SummaryDataPoint,
};

use metric::Data;

use super::common::{key_value, resource, scope};
use super::scalar::{boolean, double, enumeration, id, int32, int64, string, uint32, uint64};
use super::table::{list, object, optional, top_list, unknown, OneOf, Path, UnknownKeys};
use super::tree::J;
use super::Result;

signal! {
    pub(crate) fn metrics -> ExportMetricsServiceRequest {
        "resourceMetrics" => resource_metrics: ResourceMetrics,
        "scopeMetrics" => scope_metrics: ScopeMetrics,
        "metrics" => metrics: metric,
    }
}

/// The metric kinds, which are the members of `Metric.data` (the rows of
/// the `metric` table below that are `oneof(Data::..)`); records are
/// counted by them (`count_records`), and a test holds the two together.
pub(crate) const METRIC_KINDS: &[&str] = &[
    "gauge",
    "sum",
    "histogram",
    "exponentialHistogram",
    "summary",
];

messages! {
    fn metric("a Metric") -> Metric {
        "name" => name = string,
        "description" => description = string,
        "unit" => unit = string,
        "metadata" => metadata = list(key_value),
        "gauge" => data = oneof(Data::Gauge, gauge),
        "sum" => data = oneof(Data::Sum, sum),
        "histogram" => data = oneof(Data::Histogram, histogram),
        "exponentialHistogram" => data = oneof(Data::ExponentialHistogram, exponential_histogram),
        "summary" => data = oneof(Data::Summary, summary),
    }

    fn gauge("a Gauge") -> Gauge {
        "dataPoints" => data_points = list(number_point),
    }

    fn sum("a Sum") -> Sum {
        "dataPoints" => data_points = list(number_point),
        "aggregationTemporality" => aggregation_temporality =
            enumeration(Temporality::from_str_name),
        "isMonotonic" => is_monotonic = boolean,
    }

    fn histogram("a Histogram") -> Histogram {
        "dataPoints" => data_points = list(histogram_point),
        "aggregationTemporality" => aggregation_temporality =
            enumeration(Temporality::from_str_name),
    }

    fn exponential_histogram("an ExponentialHistogram") -> ExponentialHistogram {
        "dataPoints" => data_points = list(exponential_point),
        "aggregationTemporality" => aggregation_temporality =
            enumeration(Temporality::from_str_name),
    }

    fn summary("a Summary") -> Summary {
        "dataPoints" => data_points = list(summary_point),
    }

    fn buckets("a Buckets") -> exponential_histogram_data_point::Buckets {
        "offset" => offset = int32,
        "bucketCounts" => bucket_counts = list(uint64),
    }

    fn quantile("a ValueAtQuantile") -> summary_data_point::ValueAtQuantile {
        "quantile" => quantile = double,
        "value" => value = double,
    }

    fn exemplar("an Exemplar") -> Exemplar {
        "filteredAttributes" => filtered_attributes = list(key_value),
        "timeUnixNano" => time_unix_nano = uint64,
        "asDouble" => value = oneof(exemplar::Value::AsDouble, double),
        "asInt" => value = oneof(exemplar::Value::AsInt, int64),
        "spanId" => span_id = id(8),
        "traceId" => trace_id = id(16),
    }
}

/// Every data point begins with its attributes and its two times.
macro_rules! data_points {
    ($(fn $name:ident($what:literal) -> $ty:ident { $($rows:tt)* })+) => {
        messages! {$(
            fn $name($what) -> $ty {
                "attributes" => attributes = list(key_value),
                "startTimeUnixNano" => start_time_unix_nano = uint64,
                "timeUnixNano" => time_unix_nano = uint64,
                $($rows)*
            }
        )+}
    };
}

data_points! {
    fn number_point("a NumberDataPoint") -> NumberDataPoint {
        "asDouble" => value = oneof(number_data_point::Value::AsDouble, double),
        "asInt" => value = oneof(number_data_point::Value::AsInt, int64),
        "exemplars" => exemplars = list(exemplar),
        "flags" => flags = uint32,
    }

    fn histogram_point("a HistogramDataPoint") -> HistogramDataPoint {
        "count" => count = uint64,
        "sum" => sum = optional(double),
        "bucketCounts" => bucket_counts = list(uint64),
        "explicitBounds" => explicit_bounds = list(double),
        "exemplars" => exemplars = list(exemplar),
        "flags" => flags = uint32,
        "min" => min = optional(double),
        "max" => max = optional(double),
    }

    fn exponential_point("an ExponentialHistogramDataPoint") -> ExponentialHistogramDataPoint {
        "count" => count = uint64,
        "sum" => sum = optional(double),
        "scale" => scale = int32,
        "zeroCount" => zero_count = uint64,
        "positive" => positive = optional(buckets),
        "negative" => negative = optional(buckets),
        "flags" => flags = uint32,
        "exemplars" => exemplars = list(exemplar),
        "min" => min = optional(double),
        "max" => max = optional(double),
        "zeroThreshold" => zero_threshold = double,
    }

    fn summary_point("a SummaryDataPoint") -> SummaryDataPoint {
        "count" => count = uint64,
        "sum" => sum = double,
        "quantileValues" => quantile_values = list(quantile),
        "flags" => flags = uint32,
    }
}
