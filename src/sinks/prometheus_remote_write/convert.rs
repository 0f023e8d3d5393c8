//! Stored metric points to a remote write request: each point's series
//! (name, labels) and samples, then the series of one request grouped, one
//! `TimeSeries` per label set with its samples in time order.
//!
//! What a point gives (docs/sinks-prometheus-remote-write.md has the table):
//! a gauge or a non-monotonic sum one sample; a monotonic sum one sample
//! of `<name>_total`; a histogram a cumulative `_bucket{le}` per bound and
//! `+Inf` (the count), `_sum` (when the point has one) and `_count`; a
//! summary a sample per `{quantile}`, `_sum` and `_count`. A point flagged
//! "no recorded value" is written as Prometheus's staleness marker.
//! Exponential histograms, delta sums and delta histograms have no remote
//! write 1.0 form: [`unsendable`] says so before they are sent.

use std::collections::{BTreeMap, HashMap};

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, HistogramDataPoint, Metric, NumberDataPoint,
    SummaryDataPoint,
};

use super::naming::{label_name, metric_name, Kind};
use super::proto::{Label, MetricMetadata, MetricType, Sample, TimeSeries, WriteRequest};
use crate::event::{Record, Stored};

/// Prometheus's staleness marker: a NaN with this exact bit pattern ends a
/// series (`value.StaleNaN`), as the specification writes a point flagged
/// `FLAG_NO_RECORDED_VALUE`.
pub(crate) const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;
/// `DataPointFlags.FLAG_NO_RECORDED_VALUE`.
const NO_RECORDED_VALUE: u32 = 1;

/// Why an event has no remote write 1.0 form, or `None`: the reason it
/// is dropped (and counted) under.
pub(crate) fn unsendable(ev: &Stored) -> Option<&'static str> {
    let Some(Record::Metric(m)) = ev.record() else {
        return Some("not_a_metric");
    };
    let delta = AggregationTemporality::Delta as i32;
    match &m.data {
        None => Some("no_data_point"),
        Some(metric::Data::ExponentialHistogram(_)) => Some("exponential_histogram"),
        // A delta counter or histogram has no cumulative value to write;
        // adding the deltas up would need every earlier point, which a
        // restart or a quarantine loses.
        Some(metric::Data::Sum(s)) if s.is_monotonic && s.aggregation_temporality == delta => {
            Some("delta_temporality")
        }
        Some(metric::Data::Histogram(h)) if h.aggregation_temporality == delta => {
            Some("delta_temporality")
        }
        Some(_) => None,
    }
}

/// The time of `ev`'s point in Unix milliseconds, as its samples carry it.
pub(crate) fn point_millis(ev: &Stored) -> Option<i64> {
    let Some(Record::Metric(m)) = ev.record() else {
        return None;
    };
    let t = match m.data.as_ref()? {
        metric::Data::Gauge(g) => g.data_points.first()?.time_unix_nano,
        metric::Data::Sum(s) => s.data_points.first()?.time_unix_nano,
        metric::Data::Histogram(h) => h.data_points.first()?.time_unix_nano,
        metric::Data::Summary(s) => s.data_points.first()?.time_unix_nano,
        metric::Data::ExponentialHistogram(h) => h.data_points.first()?.time_unix_nano,
    };
    Some(millis(t, ev.observed_time_unix_nano()))
}

/// The request for `events` (each [`unsendable`] returned `None` for).
pub(crate) fn write_request<'a>(
    events: impl Iterator<Item = &'a Stored>,
    resource_to_labels: bool,
) -> WriteRequest {
    let mut b = Builder::default();
    for ev in events {
        b.event(ev, resource_to_labels);
    }
    b.finish()
}

#[derive(Default)]
struct Builder {
    /// Each series' labels, once (the key), and its place in `samples`:
    /// the labels move into the request at `finish`, never cloned.
    index: HashMap<Vec<Label>, usize, xxhash_rust::xxh3::Xxh3Builder>,
    samples: Vec<Vec<Sample>>,
    metadata: BTreeMap<String, MetricMetadata>,
}

impl Builder {
    fn event(&mut self, ev: &Stored, resource_to_labels: bool) {
        let Some(Record::Metric(m)) = ev.record() else {
            return;
        };
        let base = base_labels(ev, resource_to_labels);
        let observed = ev.observed_time_unix_nano();
        match &m.data {
            Some(metric::Data::Gauge(g)) => {
                for p in &g.data_points {
                    self.number(m, Kind::Gauge, p, &base, observed);
                }
            }
            Some(metric::Data::Sum(s)) => {
                let kind = if s.is_monotonic {
                    Kind::Counter
                } else {
                    Kind::Gauge
                };
                for p in &s.data_points {
                    self.number(m, kind, p, &base, observed);
                }
            }
            Some(metric::Data::Histogram(h)) => {
                for p in &h.data_points {
                    self.histogram(m, p, &base, observed);
                }
            }
            Some(metric::Data::Summary(s)) => {
                for p in &s.data_points {
                    self.summary(m, p, &base, observed);
                }
            }
            Some(metric::Data::ExponentialHistogram(_)) | None => {}
        }
    }

    fn number(
        &mut self,
        m: &Metric,
        kind: Kind,
        p: &NumberDataPoint,
        base: &[(String, String)],
        observed: u64,
    ) {
        let value = match p.value {
            Some(number_data_point::Value::AsDouble(v)) => v,
            Some(number_data_point::Value::AsInt(v)) => v as f64,
            None => f64::NAN,
        };
        let name = metric_name(&m.name, &m.unit, kind);
        let labels = labels(base, &p.attributes);
        let ts = millis(p.time_unix_nano, observed);
        let value = stale_or(p.flags, value);
        self.meta(&name, kind, m);
        self.sample(&name, &labels, &[], value, ts);
    }

    fn histogram(
        &mut self,
        m: &Metric,
        p: &HistogramDataPoint,
        base: &[(String, String)],
        observed: u64,
    ) {
        let name = metric_name(&m.name, &m.unit, Kind::Histogram);
        let labels = labels(base, &p.attributes);
        let ts = millis(p.time_unix_nano, observed);
        self.meta(&name, Kind::Histogram, m);
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0u64;
        for (i, bound) in p.explicit_bounds.iter().enumerate() {
            cumulative = cumulative.saturating_add(p.bucket_counts.get(i).copied().unwrap_or(0));
            let le = ("le".to_string(), le_text(*bound));
            let v = stale_or(p.flags, cumulative as f64);
            self.sample(&bucket, &labels, &[le], v, ts);
        }
        let inf = ("le".to_string(), "+Inf".to_string());
        self.sample(
            &bucket,
            &labels,
            &[inf],
            stale_or(p.flags, p.count as f64),
            ts,
        );
        if let Some(sum) = p.sum {
            self.sample(
                &format!("{name}_sum"),
                &labels,
                &[],
                stale_or(p.flags, sum),
                ts,
            );
        }
        let count = stale_or(p.flags, p.count as f64);
        self.sample(&format!("{name}_count"), &labels, &[], count, ts);
    }

    fn summary(
        &mut self,
        m: &Metric,
        p: &SummaryDataPoint,
        base: &[(String, String)],
        observed: u64,
    ) {
        let name = metric_name(&m.name, &m.unit, Kind::Summary);
        let labels = labels(base, &p.attributes);
        let ts = millis(p.time_unix_nano, observed);
        self.meta(&name, Kind::Summary, m);
        for q in &p.quantile_values {
            let quantile = ("quantile".to_string(), le_text(q.quantile));
            self.sample(&name, &labels, &[quantile], stale_or(p.flags, q.value), ts);
        }
        self.sample(
            &format!("{name}_sum"),
            &labels,
            &[],
            stale_or(p.flags, p.sum),
            ts,
        );
        let count = stale_or(p.flags, p.count as f64);
        self.sample(&format!("{name}_count"), &labels, &[], count, ts);
    }

    fn meta(&mut self, name: &str, kind: Kind, m: &Metric) {
        if self.metadata.contains_key(name) {
            return;
        }
        let r#type = match kind {
            Kind::Gauge => MetricType::Gauge,
            Kind::Counter => MetricType::Counter,
            Kind::Histogram => MetricType::Histogram,
            Kind::Summary => MetricType::Summary,
        };
        self.metadata.insert(
            name.to_string(),
            MetricMetadata {
                r#type: r#type as i32,
                metric_family_name: name.to_string(),
                help: m.description.clone(),
                unit: m.unit.clone(),
            },
        );
    }

    /// One sample of the series `name` with `labels` and `extra` (`le`,
    /// `quantile`), added to that series' samples.
    fn sample(
        &mut self,
        name: &str,
        labels: &[(String, String)],
        extra: &[(String, String)],
        value: f64,
        timestamp: i64,
    ) {
        // A point attribute named like the label the expansion adds (`le`,
        // `quantile`) gives way to it; names are unique otherwise.
        let mut set: Vec<Label> = labels
            .iter()
            .filter(|(k, _)| !extra.iter().any(|(e, _)| e == k))
            .chain(extra)
            .map(|(k, v)| Label {
                name: k.clone(),
                value: v.clone(),
            })
            .collect();
        set.push(Label {
            name: "__name__".into(),
            value: name.to_string(),
        });
        set.sort_by(|a, b| a.name.cmp(&b.name));
        let sample = Sample { value, timestamp };
        let next = self.samples.len();
        let i = *self.index.entry(set).or_insert(next);
        if i == next {
            self.samples.push(Vec::with_capacity(1));
        }
        self.samples[i].push(sample);
    }

    fn finish(self) -> WriteRequest {
        // Series in the order their first sample came.
        let mut order: Vec<(usize, Vec<Label>)> = self
            .index
            .into_iter()
            .map(|(labels, i)| (i, labels))
            .collect();
        order.sort_unstable_by_key(|(i, _)| *i);
        let timeseries = order
            .into_iter()
            .zip(self.samples)
            .map(|((_, labels), mut samples)| {
                // Stable: two points of one instant keep their log order.
                samples.sort_by_key(|s| s.timestamp);
                TimeSeries { labels, samples }
            })
            .collect();
        WriteRequest {
            timeseries,
            metadata: self.metadata.into_values().collect(),
        }
    }
}

/// The labels every point of `ev` has from its resource: `job` from
/// `service.namespace`/`service.name`, `instance` from
/// `service.instance.id`, and with `resource_to_labels` every other
/// resource attribute.
fn base_labels(ev: &Stored, resource_to_labels: bool) -> Vec<(String, String)> {
    let attrs: &[KeyValue] = ev.resource().map_or(&[], |r| &r.attributes);
    let get = |k: &str| {
        attrs
            .iter()
            .find(|a| a.key == k)
            .map(|a| value_text(a.value.as_ref()))
            .filter(|v| !v.is_empty())
    };
    let mut out = Vec::new();
    if let Some(name) = get("service.name") {
        let job = match get("service.namespace") {
            Some(ns) => format!("{ns}/{name}"),
            None => name,
        };
        out.push(("job".to_string(), job));
    }
    if let Some(instance) = get("service.instance.id") {
        out.push(("instance".to_string(), instance));
    }
    if resource_to_labels {
        let others: Vec<&KeyValue> = attrs
            .iter()
            .filter(|a| {
                !matches!(
                    a.key.as_str(),
                    "service.name" | "service.namespace" | "service.instance.id"
                )
            })
            .collect();
        for (k, v) in sanitized(others.into_iter()) {
            if !out.iter().any(|(o, _)| *o == k) {
                out.push((k, v));
            }
        }
    }
    out
}

/// A point's labels: its attributes, sanitized, then the resource's where
/// the point has no label of that name (`job` and `instance` always the
/// resource's, when it has them).
fn labels(base: &[(String, String)], attributes: &[KeyValue]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = sanitized(attributes.iter())
        .into_iter()
        .filter(|(k, _)| !((k == "job" || k == "instance") && base.iter().any(|(b, _)| b == k)))
        .collect();
    for (k, v) in base {
        if !out.iter().any(|(o, _)| o == k) {
            out.push((k.clone(), v.clone()));
        }
    }
    out
}

/// Attributes as labels: keys sanitized, empty values left out (Prometheus
/// reads an empty label as no label); keys that sanitize to the same name
/// have their values joined with `;` in the order of the original keys, as
/// the specification says.
fn sanitized<'a>(attributes: impl Iterator<Item = &'a KeyValue> + Clone) -> Vec<(String, String)> {
    // The common case, no two keys with one label name: no map, no join.
    let mut out: Vec<(String, String)> = Vec::new();
    let mut clash = false;
    for a in attributes.clone() {
        let name = label_name(&a.key);
        if out.iter().any(|(n, _)| *n == name) {
            clash = true;
            break;
        }
        let v = value_text(a.value.as_ref());
        if !v.is_empty() {
            out.push((name, v));
        }
    }
    if !clash {
        out.sort_by(|a, b| a.0.cmp(&b.0));
        return out;
    }
    let mut by_name: BTreeMap<String, Vec<(&str, String)>> = BTreeMap::new();
    for a in attributes {
        let v = value_text(a.value.as_ref());
        if v.is_empty() {
            continue;
        }
        by_name
            .entry(label_name(&a.key))
            .or_default()
            .push((&a.key, v));
    }
    by_name
        .into_iter()
        .map(|(name, mut values)| {
            values.sort_by(|a, b| a.0.cmp(b.0));
            let joined: Vec<String> = values.into_iter().map(|(_, v)| v).collect();
            (name, joined.join(";"))
        })
        .collect()
}

/// An attribute value as label text: strings as they are, numbers and
/// booleans as written, arrays and maps as JSON, bytes as base64.
pub(crate) fn value_text(v: Option<&AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        None => String::new(),
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(other) => {
            let json = json_value(other);
            match json {
                serde_json::Value::String(s) => s,
                j => j.to_string(),
            }
        }
    }
}

fn json_value(v: &any_value::Value) -> serde_json::Value {
    use base64::Engine;
    use serde_json::Value as J;
    match v {
        any_value::Value::StringValue(s) => J::String(s.clone()),
        any_value::Value::BoolValue(b) => J::Bool(*b),
        any_value::Value::IntValue(i) => J::from(*i),
        any_value::Value::DoubleValue(d) => {
            serde_json::Number::from_f64(*d).map_or_else(|| J::String(d.to_string()), J::Number)
        }
        any_value::Value::BytesValue(b) => {
            J::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        any_value::Value::ArrayValue(a) => J::Array(
            a.values
                .iter()
                .map(|v| v.value.as_ref().map_or(J::Null, json_value))
                .collect(),
        ),
        // An index into a profile's string table: no text without it.
        any_value::Value::StringValueStrindex(i) => J::from(*i),
        any_value::Value::KvlistValue(kv) => J::Object(
            kv.values
                .iter()
                .map(|a| {
                    let v = a
                        .value
                        .as_ref()
                        .and_then(|v| v.value.as_ref())
                        .map_or(J::Null, json_value);
                    (a.key.clone(), v)
                })
                .collect(),
        ),
    }
}

/// A bound or quantile as Prometheus writes it (Go's shortest `'f'`
/// formatting: `0.005`, `1`, `+Inf`).
fn le_text(v: f64) -> String {
    if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

/// A point's time in Unix milliseconds; a point without one is taken at
/// the time it was observed.
fn millis(time_unix_nano: u64, observed: u64) -> i64 {
    let t = if time_unix_nano == 0 {
        observed
    } else {
        time_unix_nano
    };
    (t / 1_000_000) as i64
}

fn stale_or(flags: u32, value: f64) -> f64 {
    if flags & NO_RECORDED_VALUE != 0 {
        f64::from_bits(STALE_NAN)
    } else {
        value
    }
}
