/*!
A strict OTLP/JSON decoder: the JSON mapping of the OTLP protobuf messages
(lowerCamelCase keys, hex trace and span ids, 64-bit integers as decimal
strings or numbers, enums as integers) into the prost types, accepting only
what it can represent exactly.

Why not the serde derive that `opentelemetry-proto` ships: it skips keys it
does not know (so `"log_records"` or `"logRecord"` silently yields a scope
with no records), treats an `AnyValue` with an unknown member as empty, and
keeps only the last of duplicate keys. Each of those would let holdfast
answer 200 for records it never stored. Here, every one of them is a 400
naming the JSON path:

* unknown keys (with the lowerCamelCase spelling, or the nearest known key,
  as a hint) and duplicate keys in one object;
* two members of one oneof (`stringValue` and `intValue`, `asDouble` and
  `asInt`, `gauge` and `sum`);
* a value of the wrong JSON type, `null` inside an array, an integer out of
  range or not exactly representable (write 64-bit integers as strings),
  trace ids that are not 32 hex digits and span ids that are not 16.

`null` stands for an absent field (proto3 JSON). Enum values may be integers
or their proto names (`"SPAN_KIND_SERVER"`). The input is first parsed into
a small tree ([`J`]) that keeps every key in order, so duplicates are seen;
serde_json bounds its nesting depth (128), so the recursive walk is bounded
too.
*/

use std::fmt;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::{
    exemplar, exponential_histogram_data_point, metric, number_data_point, summary_data_point,
    AggregationTemporality, Exemplar, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge,
    Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    Summary, SummaryDataPoint,
};

// First, and apart from the other modules (which rustfmt would sort ahead
// of it): its `messages!` and `signal!` macros are written for them.
#[macro_use]
mod table;

mod common;
mod logs;
mod scalar;
#[cfg(test)]
mod tests;
mod traces;
mod tree;

use common::{key_value, resource, scope};

pub(crate) use logs::logs;
use scalar::{boolean, double, enumeration, id, int32, int64, string, uint32, uint64};
use table::{list, object, optional, top, unknown, OneOf, Path};
pub(crate) use traces::traces;
pub(crate) use tree::J;

/// Why a body is not OTLP/JSON holdfast can store faithfully.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JsonError {
    /// Where, like `resourceLogs[0].scopeLogs[1].logRecords[2].body`; empty
    /// for the document as a whole.
    pub path: String,
    pub problem: String,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "invalid OTLP/JSON: {}", self.problem)
        } else {
            write!(f, "invalid OTLP/JSON at {}: {}", self.path, self.problem)
        }
    }
}

type Result<T, E = JsonError> = std::result::Result<T, E>;

// ---------------------------------------------------------------------------
// Metrics

pub(crate) fn metrics(tree: &J) -> Result<ExportMetricsServiceRequest> {
    let root = Path::Root;
    let p = root.key("resourceMetrics");
    Ok(ExportMetricsServiceRequest {
        resource_metrics: list(top(tree, "resourceMetrics")?, &p, resource_metrics)?,
    })
}

fn resource_metrics(v: &J, p: &Path<'_>) -> Result<ResourceMetrics> {
    let mut out = ResourceMetrics::default();
    for (k, v) in object(v, p, "a ResourceMetrics")? {
        let kp = p.key(k);
        match k.as_str() {
            "resource" => out.resource = optional(v, &kp, resource)?,
            "scopeMetrics" => out.scope_metrics = list(v, &kp, scope_metrics)?,
            "schemaUrl" => out.schema_url = string(v, &kp)?,
            _ => return Err(unknown(p, k, &["resource", "scopeMetrics", "schemaUrl"])),
        }
    }
    Ok(out)
}

fn scope_metrics(v: &J, p: &Path<'_>) -> Result<ScopeMetrics> {
    let mut out = ScopeMetrics::default();
    for (k, v) in object(v, p, "a ScopeMetrics")? {
        let kp = p.key(k);
        match k.as_str() {
            "scope" => out.scope = optional(v, &kp, scope)?,
            "metrics" => out.metrics = list(v, &kp, metric)?,
            "schemaUrl" => out.schema_url = string(v, &kp)?,
            _ => return Err(unknown(p, k, &["scope", "metrics", "schemaUrl"])),
        }
    }
    Ok(out)
}

/// The metric kinds, which are the members of `Metric.data`.
pub(crate) const METRIC_KINDS: &[&str] = &[
    "gauge",
    "sum",
    "histogram",
    "exponentialHistogram",
    "summary",
];

fn metric(v: &J, p: &Path<'_>) -> Result<Metric> {
    const KEYS: &[&str] = &[
        "name",
        "description",
        "unit",
        "metadata",
        "gauge",
        "sum",
        "histogram",
        "exponentialHistogram",
        "summary",
    ];
    let mut out = Metric::default();
    let mut one = OneOf::new();
    for (k, v) in object(v, p, "a Metric")? {
        let kp = p.key(k);
        match k.as_str() {
            "name" => out.name = string(v, &kp)?,
            "description" => out.description = string(v, &kp)?,
            "unit" => out.unit = string(v, &kp)?,
            "metadata" => out.metadata = list(v, &kp, key_value)?,
            kind if METRIC_KINDS.contains(&kind) => {
                if !one.take(p, k, v)? {
                    continue;
                }
                out.data = Some(match kind {
                    "gauge" => metric::Data::Gauge(gauge(v, &kp)?),
                    "sum" => metric::Data::Sum(sum(v, &kp)?),
                    "histogram" => metric::Data::Histogram(histogram(v, &kp)?),
                    "exponentialHistogram" => {
                        metric::Data::ExponentialHistogram(exponential_histogram(v, &kp)?)
                    }
                    _ => metric::Data::Summary(summary(v, &kp)?),
                });
            }
            _ => return Err(unknown(p, k, KEYS)),
        }
    }
    Ok(out)
}

fn temporality(s: &str) -> Option<i32> {
    AggregationTemporality::from_str_name(s).map(|e| e as i32)
}

fn gauge(v: &J, p: &Path<'_>) -> Result<Gauge> {
    let mut out = Gauge::default();
    for (k, v) in object(v, p, "a Gauge")? {
        match k.as_str() {
            "dataPoints" => out.data_points = list(v, &p.key(k), number_point)?,
            _ => return Err(unknown(p, k, &["dataPoints"])),
        }
    }
    Ok(out)
}

fn sum(v: &J, p: &Path<'_>) -> Result<Sum> {
    let mut out = Sum::default();
    for (k, v) in object(v, p, "a Sum")? {
        let kp = p.key(k);
        match k.as_str() {
            "dataPoints" => out.data_points = list(v, &kp, number_point)?,
            "aggregationTemporality" => {
                out.aggregation_temporality = enumeration(v, &kp, temporality)?
            }
            "isMonotonic" => out.is_monotonic = boolean(v, &kp)?,
            _ => {
                return Err(unknown(
                    p,
                    k,
                    &["dataPoints", "aggregationTemporality", "isMonotonic"],
                ))
            }
        }
    }
    Ok(out)
}

fn histogram(v: &J, p: &Path<'_>) -> Result<Histogram> {
    let mut out = Histogram::default();
    for (k, v) in object(v, p, "a Histogram")? {
        let kp = p.key(k);
        match k.as_str() {
            "dataPoints" => out.data_points = list(v, &kp, histogram_point)?,
            "aggregationTemporality" => {
                out.aggregation_temporality = enumeration(v, &kp, temporality)?
            }
            _ => return Err(unknown(p, k, &["dataPoints", "aggregationTemporality"])),
        }
    }
    Ok(out)
}

fn exponential_histogram(v: &J, p: &Path<'_>) -> Result<ExponentialHistogram> {
    let mut out = ExponentialHistogram::default();
    for (k, v) in object(v, p, "an ExponentialHistogram")? {
        let kp = p.key(k);
        match k.as_str() {
            "dataPoints" => out.data_points = list(v, &kp, exponential_point)?,
            "aggregationTemporality" => {
                out.aggregation_temporality = enumeration(v, &kp, temporality)?
            }
            _ => return Err(unknown(p, k, &["dataPoints", "aggregationTemporality"])),
        }
    }
    Ok(out)
}

fn summary(v: &J, p: &Path<'_>) -> Result<Summary> {
    let mut out = Summary::default();
    for (k, v) in object(v, p, "a Summary")? {
        match k.as_str() {
            "dataPoints" => out.data_points = list(v, &p.key(k), summary_point)?,
            _ => return Err(unknown(p, k, &["dataPoints"])),
        }
    }
    Ok(out)
}

fn number_point(v: &J, p: &Path<'_>) -> Result<NumberDataPoint> {
    const KEYS: &[&str] = &[
        "attributes",
        "startTimeUnixNano",
        "timeUnixNano",
        "asDouble",
        "asInt",
        "exemplars",
        "flags",
    ];
    let mut out = NumberDataPoint::default();
    let mut one = OneOf::new();
    for (k, v) in object(v, p, "a NumberDataPoint")? {
        let kp = p.key(k);
        match k.as_str() {
            "attributes" => out.attributes = list(v, &kp, key_value)?,
            "startTimeUnixNano" => out.start_time_unix_nano = uint64(v, &kp)?,
            "timeUnixNano" => out.time_unix_nano = uint64(v, &kp)?,
            "asDouble" => {
                if one.take(p, k, v)? {
                    out.value = Some(number_data_point::Value::AsDouble(double(v, &kp)?));
                }
            }
            "asInt" => {
                if one.take(p, k, v)? {
                    out.value = Some(number_data_point::Value::AsInt(int64(v, &kp)?));
                }
            }
            "exemplars" => out.exemplars = list(v, &kp, exemplar)?,
            "flags" => out.flags = uint32(v, &kp)?,
            _ => return Err(unknown(p, k, KEYS)),
        }
    }
    Ok(out)
}

fn histogram_point(v: &J, p: &Path<'_>) -> Result<HistogramDataPoint> {
    const KEYS: &[&str] = &[
        "attributes",
        "startTimeUnixNano",
        "timeUnixNano",
        "count",
        "sum",
        "bucketCounts",
        "explicitBounds",
        "exemplars",
        "flags",
        "min",
        "max",
    ];
    let mut out = HistogramDataPoint::default();
    for (k, v) in object(v, p, "a HistogramDataPoint")? {
        let kp = p.key(k);
        match k.as_str() {
            "attributes" => out.attributes = list(v, &kp, key_value)?,
            "startTimeUnixNano" => out.start_time_unix_nano = uint64(v, &kp)?,
            "timeUnixNano" => out.time_unix_nano = uint64(v, &kp)?,
            "count" => out.count = uint64(v, &kp)?,
            "sum" => out.sum = optional(v, &kp, double)?,
            "bucketCounts" => out.bucket_counts = list(v, &kp, uint64)?,
            "explicitBounds" => out.explicit_bounds = list(v, &kp, double)?,
            "exemplars" => out.exemplars = list(v, &kp, exemplar)?,
            "flags" => out.flags = uint32(v, &kp)?,
            "min" => out.min = optional(v, &kp, double)?,
            "max" => out.max = optional(v, &kp, double)?,
            _ => return Err(unknown(p, k, KEYS)),
        }
    }
    Ok(out)
}

fn exponential_point(v: &J, p: &Path<'_>) -> Result<ExponentialHistogramDataPoint> {
    const KEYS: &[&str] = &[
        "attributes",
        "startTimeUnixNano",
        "timeUnixNano",
        "count",
        "sum",
        "scale",
        "zeroCount",
        "positive",
        "negative",
        "flags",
        "exemplars",
        "min",
        "max",
        "zeroThreshold",
    ];
    let mut out = ExponentialHistogramDataPoint::default();
    for (k, v) in object(v, p, "an ExponentialHistogramDataPoint")? {
        let kp = p.key(k);
        match k.as_str() {
            "attributes" => out.attributes = list(v, &kp, key_value)?,
            "startTimeUnixNano" => out.start_time_unix_nano = uint64(v, &kp)?,
            "timeUnixNano" => out.time_unix_nano = uint64(v, &kp)?,
            "count" => out.count = uint64(v, &kp)?,
            "sum" => out.sum = optional(v, &kp, double)?,
            "scale" => out.scale = int32(v, &kp)?,
            "zeroCount" => out.zero_count = uint64(v, &kp)?,
            "positive" => out.positive = optional(v, &kp, buckets)?,
            "negative" => out.negative = optional(v, &kp, buckets)?,
            "flags" => out.flags = uint32(v, &kp)?,
            "exemplars" => out.exemplars = list(v, &kp, exemplar)?,
            "min" => out.min = optional(v, &kp, double)?,
            "max" => out.max = optional(v, &kp, double)?,
            "zeroThreshold" => out.zero_threshold = double(v, &kp)?,
            _ => return Err(unknown(p, k, KEYS)),
        }
    }
    Ok(out)
}

fn buckets(v: &J, p: &Path<'_>) -> Result<exponential_histogram_data_point::Buckets> {
    let mut out = exponential_histogram_data_point::Buckets::default();
    for (k, v) in object(v, p, "a Buckets")? {
        let kp = p.key(k);
        match k.as_str() {
            "offset" => out.offset = int32(v, &kp)?,
            "bucketCounts" => out.bucket_counts = list(v, &kp, uint64)?,
            _ => return Err(unknown(p, k, &["offset", "bucketCounts"])),
        }
    }
    Ok(out)
}

fn summary_point(v: &J, p: &Path<'_>) -> Result<SummaryDataPoint> {
    const KEYS: &[&str] = &[
        "attributes",
        "startTimeUnixNano",
        "timeUnixNano",
        "count",
        "sum",
        "quantileValues",
        "flags",
    ];
    let mut out = SummaryDataPoint::default();
    for (k, v) in object(v, p, "a SummaryDataPoint")? {
        let kp = p.key(k);
        match k.as_str() {
            "attributes" => out.attributes = list(v, &kp, key_value)?,
            "startTimeUnixNano" => out.start_time_unix_nano = uint64(v, &kp)?,
            "timeUnixNano" => out.time_unix_nano = uint64(v, &kp)?,
            "count" => out.count = uint64(v, &kp)?,
            "sum" => out.sum = double(v, &kp)?,
            "quantileValues" => out.quantile_values = list(v, &kp, quantile)?,
            "flags" => out.flags = uint32(v, &kp)?,
            _ => return Err(unknown(p, k, KEYS)),
        }
    }
    Ok(out)
}

fn quantile(v: &J, p: &Path<'_>) -> Result<summary_data_point::ValueAtQuantile> {
    let mut out = summary_data_point::ValueAtQuantile::default();
    for (k, v) in object(v, p, "a ValueAtQuantile")? {
        let kp = p.key(k);
        match k.as_str() {
            "quantile" => out.quantile = double(v, &kp)?,
            "value" => out.value = double(v, &kp)?,
            _ => return Err(unknown(p, k, &["quantile", "value"])),
        }
    }
    Ok(out)
}

fn exemplar(v: &J, p: &Path<'_>) -> Result<Exemplar> {
    const KEYS: &[&str] = &[
        "filteredAttributes",
        "timeUnixNano",
        "asDouble",
        "asInt",
        "spanId",
        "traceId",
    ];
    let mut out = Exemplar::default();
    let mut one = OneOf::new();
    for (k, v) in object(v, p, "an Exemplar")? {
        let kp = p.key(k);
        match k.as_str() {
            "filteredAttributes" => out.filtered_attributes = list(v, &kp, key_value)?,
            "timeUnixNano" => out.time_unix_nano = uint64(v, &kp)?,
            "asDouble" => {
                if one.take(p, k, v)? {
                    out.value = Some(exemplar::Value::AsDouble(double(v, &kp)?));
                }
            }
            "asInt" => {
                if one.take(p, k, v)? {
                    out.value = Some(exemplar::Value::AsInt(int64(v, &kp)?));
                }
            }
            "spanId" => out.span_id = id(v, &kp, 8)?,
            "traceId" => out.trace_id = id(v, &kp, 16)?,
            _ => return Err(unknown(p, k, KEYS)),
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Counting on the tree

/// Records in the tree, counted by its shape alone (not by the decoder
/// above): the elements of `resource.scope.records` arrays for logs and
/// traces, of every metric kind's `dataPoints` for metrics. Decoding must
/// arrive at the same number, or the request is refused.
pub(crate) fn count_records(tree: &J, signal: crate::event::Signal) -> u64 {
    use crate::event::Signal;
    let (resources, scopes, records) = match signal {
        Signal::Logs => ("resourceLogs", "scopeLogs", "logRecords"),
        Signal::Traces => ("resourceSpans", "scopeSpans", "spans"),
        Signal::Metrics => ("resourceMetrics", "scopeMetrics", "metrics"),
    };
    let mut n = 0u64;
    for r in tree.items(resources) {
        for s in r.items(scopes) {
            for rec in s.items(records) {
                n += match signal {
                    Signal::Metrics => METRIC_KINDS
                        .iter()
                        .filter_map(|k| rec.get(k))
                        .map(|data| data.items("dataPoints").len() as u64)
                        .sum(),
                    _ => 1,
                };
            }
        }
    }
    n
}
