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

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::Arc;

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, HistogramDataPoint, Metric, NumberDataPoint,
    SummaryDataPoint,
};

use super::encode::RequestWriter;
use super::naming::{label_name, metric_name, Kind};
#[cfg(test)]
use super::proto::WriteRequest;
use super::proto::{MetricMetadata, MetricType};
use crate::event::{
    Attribute, Context, MetricPoints, Number, NumberKind, Record, Stored, ValueRef,
};

/// Prometheus's staleness marker: a NaN with this exact bit pattern ends a
/// series (`value.StaleNaN`), as the specification writes a point flagged
/// `FLAG_NO_RECORDED_VALUE`.
pub(crate) const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;
/// `DataPointFlags.FLAG_NO_RECORDED_VALUE`.
const NO_RECORDED_VALUE: u32 = 1;

/// Why an event has no remote write 1.0 form, or `None`: the reason it
/// is dropped (and counted) under.
pub(crate) fn unsendable(ev: &Stored) -> Option<&'static str> {
    let delta = AggregationTemporality::Delta as i32;
    if let Some(m) = ev.metric_points() {
        return match m.kind {
            NumberKind::Sum {
                monotonic: true,
                temporality,
            } if temporality == delta => Some("delta_temporality"),
            _ => None,
        };
    }
    let Some(Record::Metric(m)) = ev.record() else {
        return Some("not_a_metric");
    };
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
    if let Some(m) = ev.metric_points() {
        let t = m.points().next()?.time_unix_nano;
        return Some(millis(t, ev.observed_time_unix_nano()));
    }
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

/// The encoded request for `events` (each [`unsendable`] returned `None`
/// for).
pub(crate) fn encode_request<'a>(
    events: impl ExactSizeIterator<Item = &'a Stored>,
    resource_to_labels: bool,
) -> Vec<u8> {
    let mut b = Builder {
        resource_to_labels,
        out: RequestWriter::with_capacity(events.len()),
        metadata: BTreeMap::new(),
        names: HashMap::default(),
        last_name: None,
        base: None,
        point: Vec::new(),
    };
    for ev in events {
        b.event(ev);
    }
    b.out.finish(b.metadata.values())
}

/// The request for `events`, as a message (tests read requests so).
#[cfg(test)]
pub(crate) fn write_request<'a>(
    events: impl ExactSizeIterator<Item = &'a Stored>,
    resource_to_labels: bool,
) -> WriteRequest {
    use prost::Message;
    WriteRequest::decode(encode_request(events, resource_to_labels).as_slice())
        .expect("the writer's bytes decode")
}

/// A label: its name and value, borrowed from the event where they are
/// its text as it is (the usual case), else made.
type LabelText<'a> = (Cow<'a, str>, Cow<'a, str>);

/// Which events share base labels: those of one group of one batch.
type GroupKey = (*const Context, usize);

struct Builder<'a> {
    resource_to_labels: bool,
    out: RequestWriter,
    metadata: BTreeMap<String, MetricMetadata>,
    /// Prometheus names by OTLP name, unit and kind: the events of one
    /// metric (one per point) share it.
    names: HashMap<(&'a str, &'a str, Kind), Rc<str>, xxhash_rust::xxh3::Xxh3Builder>,
    /// The last of `names` used: a metric's events come together, and
    /// comparing its name is cheaper than hashing it.
    last_name: Option<(&'a str, &'a str, Kind, Rc<str>)>,
    /// The base labels of the last event's group.
    base: Option<(Option<GroupKey>, Vec<LabelText<'a>>)>,
    /// The current point's labels, sorted by name (reused).
    point: Vec<LabelText<'a>>,
}

impl<'a> Builder<'a> {
    fn event(&mut self, ev: &'a Stored) {
        let key = ev.shared_with().map(|(c, g)| (Arc::as_ptr(c), g));
        if key.is_none() || self.base.as_ref().map(|b| b.0) != Some(key) {
            self.base = Some((key, base_labels(ev, self.resource_to_labels)));
        }
        let observed = ev.observed_time_unix_nano();
        if let Some(m) = ev.metric_points() {
            return self.points_in_place(m, observed);
        }
        let Some(Record::Metric(m)) = ev.record() else {
            return;
        };
        match &m.data {
            Some(metric::Data::Gauge(g)) => {
                for p in &g.data_points {
                    self.number(m, Kind::Gauge, p, observed);
                }
            }
            Some(metric::Data::Sum(s)) => {
                let kind = if s.is_monotonic {
                    Kind::Counter
                } else {
                    Kind::Gauge
                };
                for p in &s.data_points {
                    self.number(m, kind, p, observed);
                }
            }
            Some(metric::Data::Histogram(h)) => {
                for p in &h.data_points {
                    self.histogram(m, p, observed);
                }
            }
            Some(metric::Data::Summary(s)) => {
                for p in &s.data_points {
                    self.summary(m, p, observed);
                }
            }
            Some(metric::Data::ExponentialHistogram(_)) | None => {}
        }
    }

    /// A gauge or sum read in place: what [`Builder::number`] writes for
    /// the same points decoded.
    fn points_in_place(&mut self, m: MetricPoints<'a>, observed: u64) {
        let kind = match m.kind {
            NumberKind::Sum {
                monotonic: true, ..
            } => Kind::Counter,
            _ => Kind::Gauge,
        };
        for p in m.points() {
            let value = match p.value {
                Some(Number::Double(v)) => v,
                Some(Number::Int(v)) => v as f64,
                None => f64::NAN,
            };
            let name = self.name(m.name, m.unit, kind);
            self.labels(p.attributes().map(attribute_text));
            let ts = millis(p.time_unix_nano, observed);
            let value = stale_or(p.flags, value);
            self.meta(&name, kind, m.description, m.unit);
            self.sample(&name, None, value, ts);
        }
    }

    /// The Prometheus name of metric `name` in `unit` as `kind`, made once
    /// per request.
    fn name(&mut self, name: &'a str, unit: &'a str, kind: Kind) -> Rc<str> {
        if let Some((n, u, k, made)) = &self.last_name {
            if *k == kind && *n == name && *u == unit {
                return made.clone();
            }
        }
        let made = self
            .names
            .entry((name, unit, kind))
            .or_insert_with(|| metric_name(name, unit, kind).into())
            .clone();
        self.last_name = Some((name, unit, kind, made.clone()));
        made
    }

    fn number(&mut self, m: &'a Metric, kind: Kind, p: &'a NumberDataPoint, observed: u64) {
        let value = match p.value {
            Some(number_data_point::Value::AsDouble(v)) => v,
            Some(number_data_point::Value::AsInt(v)) => v as f64,
            None => f64::NAN,
        };
        let name = self.name(&m.name, &m.unit, kind);
        self.labels(p.attributes.iter().map(attribute_pair));
        let ts = millis(p.time_unix_nano, observed);
        let value = stale_or(p.flags, value);
        self.meta(&name, kind, &m.description, &m.unit);
        self.sample(&name, None, value, ts);
    }

    fn histogram(&mut self, m: &'a Metric, p: &'a HistogramDataPoint, observed: u64) {
        let name = self.name(&m.name, &m.unit, Kind::Histogram);
        self.labels(p.attributes.iter().map(attribute_pair));
        let ts = millis(p.time_unix_nano, observed);
        self.meta(&name, Kind::Histogram, &m.description, &m.unit);
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0u64;
        for (i, bound) in p.explicit_bounds.iter().enumerate() {
            cumulative = cumulative.saturating_add(p.bucket_counts.get(i).copied().unwrap_or(0));
            let le = le_text(*bound);
            let v = stale_or(p.flags, cumulative as f64);
            self.sample(&bucket, Some(("le", &le)), v, ts);
        }
        let count = stale_or(p.flags, p.count as f64);
        self.sample(&bucket, Some(("le", "+Inf")), count, ts);
        if let Some(sum) = p.sum {
            self.sample(&format!("{name}_sum"), None, stale_or(p.flags, sum), ts);
        }
        self.sample(&format!("{name}_count"), None, count, ts);
    }

    fn summary(&mut self, m: &'a Metric, p: &'a SummaryDataPoint, observed: u64) {
        let name = self.name(&m.name, &m.unit, Kind::Summary);
        self.labels(p.attributes.iter().map(attribute_pair));
        let ts = millis(p.time_unix_nano, observed);
        self.meta(&name, Kind::Summary, &m.description, &m.unit);
        for q in &p.quantile_values {
            let quantile = le_text(q.quantile);
            let v = stale_or(p.flags, q.value);
            self.sample(&name, Some(("quantile", &quantile)), v, ts);
        }
        self.sample(&format!("{name}_sum"), None, stale_or(p.flags, p.sum), ts);
        let count = stale_or(p.flags, p.count as f64);
        self.sample(&format!("{name}_count"), None, count, ts);
    }

    fn meta(&mut self, name: &str, kind: Kind, description: &str, unit: &str) {
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
                help: description.to_string(),
                unit: unit.to_string(),
            },
        );
    }

    /// The point's labels into `self.point`, sorted: its attributes,
    /// sanitized, then the base labels where the point has no label of
    /// that name (`job` and `instance` always the resource's, when it has
    /// them).
    fn labels(&mut self, attributes: impl Iterator<Item = (&'a str, Cow<'a, str>)> + Clone) {
        let point = &mut self.point;
        point.clear();
        sanitized(attributes, point);
        let base: &[LabelText<'a>] = self.base.as_ref().map_or(&[], |b| &b.1);
        point.retain(|(k, _)| {
            !((k == "job" || k == "instance") && base.iter().any(|(b, _)| b == k))
        });
        let own = point.len();
        for (k, v) in base {
            if !point[..own].iter().any(|(o, _)| o == k) {
                point.push((k.clone(), v.clone()));
            }
        }
        if point.len() > own {
            point.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        }
    }

    /// One sample of the series `name` with the point's labels and `extra`
    /// (`le`, `quantile`). A point attribute named like the label the
    /// expansion adds gives way to it; names are unique otherwise.
    fn sample(&mut self, name: &str, extra: Option<(&str, &str)>, value: f64, timestamp: i64) {
        // The few added labels in name order, merged into the point's
        // (already sorted) as they are written.
        let mut added = [("__name__", name), ("", "")];
        let added = match extra {
            Some(e) => {
                added[1] = e;
                added.sort_unstable_by(|a, b| a.0.cmp(b.0));
                &added[..]
            }
            None => &added[..1],
        };
        let own = self
            .point
            .iter()
            .map(|(k, v)| (k.as_ref(), v.as_ref()))
            .filter(|(k, _)| !added.iter().any(|(a, _)| a == k));
        let labels = Merge {
            a: own.peekable(),
            b: added.iter().copied().peekable(),
        };
        self.out.sample(labels, value, timestamp);
    }
}

/// Two iterators of labels sorted by name, merged into one.
struct Merge<A: Iterator, B: Iterator> {
    a: std::iter::Peekable<A>,
    b: std::iter::Peekable<B>,
}

impl<'l, A, B> Iterator for Merge<A, B>
where
    A: Iterator<Item = (&'l str, &'l str)>,
    B: Iterator<Item = (&'l str, &'l str)>,
{
    type Item = (&'l str, &'l str);

    fn next(&mut self) -> Option<Self::Item> {
        match (self.a.peek(), self.b.peek()) {
            (Some(a), Some(b)) if b.0 < a.0 => self.b.next(),
            (Some(_), _) => self.a.next(),
            (None, _) => self.b.next(),
        }
    }
}

/// The labels every point of `ev` has from its resource: `job` from
/// `service.namespace`/`service.name`, `instance` from
/// `service.instance.id`, and with `resource_to_labels` every other
/// resource attribute.
fn base_labels(ev: &Stored, resource_to_labels: bool) -> Vec<LabelText<'_>> {
    let attrs: &[KeyValue] = ev.resource().map_or(&[], |r| &r.attributes);
    let get = |k: &str| {
        attrs
            .iter()
            .find(|a| a.key == k)
            .map(|a| value_cow(a.value.as_ref()))
            .filter(|v| !v.is_empty())
    };
    let mut out: Vec<LabelText<'_>> = Vec::new();
    if let Some(name) = get("service.name") {
        let job = match get("service.namespace") {
            Some(ns) => Cow::Owned(format!("{ns}/{name}")),
            None => name,
        };
        out.push((Cow::Borrowed("job"), job));
    }
    if let Some(instance) = get("service.instance.id") {
        out.push((Cow::Borrowed("instance"), instance));
    }
    if resource_to_labels {
        let others = attrs
            .iter()
            .filter(|a| {
                !matches!(
                    a.key.as_str(),
                    "service.name" | "service.namespace" | "service.instance.id"
                )
            })
            .map(attribute_pair);
        let mut labels = Vec::new();
        sanitized(others, &mut labels);
        for (k, v) in labels {
            if !out.iter().any(|(o, _)| *o == k) {
                out.push((k, v));
            }
        }
    }
    out
}

/// Attributes as labels into `out` (empty), sorted by name: keys
/// sanitized, empty values left out (Prometheus reads an empty label as no
/// label); keys that sanitize to the same name have their values joined
/// with `;` in the order of the original keys, as the specification says.
fn sanitized<'a>(
    attributes: impl Iterator<Item = (&'a str, Cow<'a, str>)> + Clone,
    out: &mut Vec<LabelText<'a>>,
) {
    // The common case, no two keys with one label name: no map, no join.
    let mut clash = false;
    for (key, v) in attributes.clone() {
        let name = label_cow(key);
        if out.iter().any(|(n, _)| *n == name) {
            clash = true;
            break;
        }
        if !v.is_empty() {
            out.push((name, v));
        }
    }
    if !clash {
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        return;
    }
    out.clear();
    let mut by_name: BTreeMap<String, Vec<(&str, String)>> = BTreeMap::new();
    for (key, v) in attributes {
        if v.is_empty() {
            continue;
        }
        by_name
            .entry(label_name(key))
            .or_default()
            .push((key, v.into_owned()));
    }
    out.extend(by_name.into_iter().map(|(name, mut values)| {
        values.sort_by(|a, b| a.0.cmp(b.0));
        let joined: Vec<String> = values.into_iter().map(|(_, v)| v).collect();
        (Cow::Owned(name), Cow::Owned(joined.join(";")))
    }));
}

/// An attribute's key and its value as label text.
fn attribute_pair(a: &KeyValue) -> (&str, Cow<'_, str>) {
    (&a.key, value_cow(a.value.as_ref()))
}

/// [`attribute_pair`] of an attribute read in place.
fn attribute_text(a: Attribute<'_>) -> (&str, Cow<'_, str>) {
    let value = match a.value {
        ValueRef::None => Cow::Borrowed(""),
        ValueRef::Str(s) => Cow::Borrowed(s),
        ValueRef::Other(b) => {
            use prost::Message;
            // Checked when the record was read: it decodes.
            Cow::Owned(value_text(AnyValue::decode(b).ok().as_ref()))
        }
    };
    (a.key, value)
}

/// [`label_name`], borrowing a key that is a label name as it is.
fn label_cow(key: &str) -> Cow<'_, str> {
    let b = key.as_bytes();
    let plain = !b.is_empty()
        && !b[0].is_ascii_digit()
        && !key.starts_with("__")
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_');
    if plain {
        Cow::Borrowed(key)
    } else {
        Cow::Owned(label_name(key))
    }
}

/// [`value_text`], borrowing a string value.
fn value_cow(v: Option<&AnyValue>) -> Cow<'_, str> {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => Cow::Borrowed(s),
        _ => Cow::Owned(value_text(v)),
    }
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
