/*!
A parsed exposition to OTLP metrics, as the OpenTelemetry specification's
"Prometheus and OpenMetrics Compatibility" and the Collector's Prometheus
receiver map them:

| Prometheus | OTLP |
|---|---|
| counter `x` (`x_total`) | monotonic cumulative Sum `x` |
| gauge, unknown, untyped, stateset | Gauge |
| info `x` (`x_info`) | Gauge `x_info` (value 1) |
| histogram | Histogram: bounds from `le`, per-bucket counts, sum, count (the `+Inf` bucket's when `_count` is absent) |
| gaugehistogram | a Gauge per series (`x_bucket{le}`, `x_gcount`, `x_gsum`): OTLP has no gauge histogram |
| summary | Summary: quantiles, sum, count |
| `x_created` | the start time of `x`'s points, never a series |
| `job`, `instance` | resource `service.name`, `service.instance.id` |
| other labels | point attributes |

A cumulative point needs a start time: `_created` when the target gives
it, else the first time this source saw the series ([`StartTimes`], kept
per target in memory); a counter that went down restarted, and its start
moves to just before the point.
*/

use std::borrow::Cow;
use std::collections::HashMap;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, summary_data_point::ValueAtQuantile, AggregationTemporality,
    Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
    Sum, Summary, SummaryDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use xxhash_rust::xxh3::Xxh3;

use super::parse::{self, Exposition, Family, Kind, Sample};

/// Who a collection's series are about: the target's labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetLabels {
    /// `job` → resource `service.name`.
    pub job: String,
    /// `instance` → resource `service.instance.id`.
    pub instance: String,
    /// Every other target label (`labels`, a targets file's), added to each
    /// series.
    pub labels: Vec<(String, String)>,
    /// On a clash between a scraped label and a target label, keep the
    /// scraped one (else it is renamed `exported_<name>`).
    pub honor_labels: bool,
    /// More resource attributes (`host.name` for holdfast's own metrics).
    pub resource: Vec<(String, String)>,
}

/// Start times of a target's cumulative series (see the module docs):
/// bounded by what one scrape holds, as series absent from a scrape are
/// forgotten.
#[derive(Debug, Default)]
pub struct StartTimes {
    /// Series key → (start, last value, generation last seen).
    seen: HashMap<u64, (u64, f64, u64)>,
    generation: u64,
}

impl StartTimes {
    /// The start of a series at `time` with `value` (a count).
    fn start(&mut self, key: u64, time: u64, value: f64) -> u64 {
        let generation = self.generation;
        let e = self.seen.entry(key).or_insert((time, value, generation));
        if value < e.1 {
            // Restarted: its count began again between the two points.
            e.0 = time.saturating_sub(1_000_000);
        }
        e.1 = value;
        e.2 = generation;
        e.0
    }

    fn forget_unseen(&mut self) {
        let g = self.generation;
        self.seen.retain(|_, e| e.2 == g);
        self.generation += 1;
    }
}

/// One resource's metrics, by metric name.
#[derive(Default)]
struct ResourceOut {
    metrics: Vec<Metric>,
    /// By name and type: a gauge `x` and a counter `x_total` (trimmed to
    /// `x`) are two metrics of one name, as the Collector makes them.
    by_name: HashMap<(String, Kind), usize>,
}

/// A series' resource: its `job` and `instance`, borrowed from the target
/// unless the series' own labels give them (`honor_labels`).
type Res<'t> = (Cow<'t, str>, Cow<'t, str>);

/// The request being built: metrics per (job, instance).
pub struct Builder<'t> {
    target: &'t TargetLabels,
    scope: &'static str,
    resources: Vec<((String, String), ResourceOut)>,
    /// The metric the last point went to (resource, metric, kind): a
    /// family's points come together, so most find theirs here without
    /// a lookup by name.
    last: Option<(usize, usize, Kind)>,
}

impl<'t> Builder<'t> {
    pub fn new(target: &'t TargetLabels, scope: &'static str) -> Builder<'t> {
        Builder {
            target,
            scope,
            resources: Vec::new(),
            last: None,
        }
    }

    /// Adds every family of `e`; `time` is the scrape's start (Unix ns).
    pub fn exposition(&mut self, e: Exposition, time: u64, starts: &mut StartTimes) {
        for f in e.families {
            self.family(f, time, starts);
        }
        starts.forget_unseen();
    }

    /// Adds a gauge `name` with one point at `time`, for the target alone
    /// (`up`, `scrape_duration_seconds`, `scrape_samples_scraped`).
    pub fn synthetic(&mut self, name: &str, unit: &str, value: f64, time: u64) {
        let (resource, attributes) = self.labels(Vec::new());
        let point = number(attributes, time, 0, value);
        self.push(resource, name, unit, "", Kind::Gauge, Point::Number(point));
    }

    /// The request: one ResourceMetrics per (job, instance).
    pub fn finish(self) -> ExportMetricsServiceRequest {
        let target = self.target;
        let scope = self.scope;
        let resource_metrics = self
            .resources
            .into_iter()
            .map(|((job, instance), out)| {
                let mut attributes = Vec::new();
                if !job.is_empty() {
                    attributes.push(kv("service.name", job));
                }
                if !instance.is_empty() {
                    attributes.push(kv("service.instance.id", instance));
                }
                attributes.extend(target.resource.iter().map(|(k, v)| kv(k, v.clone())));
                ResourceMetrics {
                    resource: Some(Resource {
                        attributes,
                        ..Default::default()
                    }),
                    scope_metrics: vec![ScopeMetrics {
                        scope: Some(InstrumentationScope {
                            name: scope.to_string(),
                            version: env!("CARGO_PKG_VERSION").to_string(),
                            ..Default::default()
                        }),
                        metrics: out.metrics,
                        ..Default::default()
                    }],
                    ..Default::default()
                }
            })
            .collect();
        ExportMetricsServiceRequest { resource_metrics }
    }

    fn family(&mut self, f: Family, time: u64, starts: &mut StartTimes) {
        match f.kind {
            Kind::Counter => self.counter(f, time, starts),
            Kind::Histogram => self.histogram(f, time, starts),
            Kind::Summary => self.summary(f, time, starts),
            Kind::Gauge | Kind::Unknown | Kind::StateSet | Kind::Info | Kind::GaugeHistogram => {
                let mut suffixed = String::new();
                for s in f.samples {
                    // A gauge histogram's and an info's series keep their
                    // whole names: OTLP has no type to carry them.
                    let name = if s.suffix.is_empty() {
                        &f.name
                    } else {
                        suffixed.clear();
                        suffixed.push_str(&f.name);
                        suffixed.push_str(s.suffix);
                        &suffixed
                    };
                    let t = at(&s, time);
                    // The sample's label strings move into its attributes.
                    let (resource, attributes) = self.labels(s.labels);
                    let point = number(attributes, t, 0, s.value);
                    self.push(
                        resource,
                        name,
                        &f.unit,
                        &f.help,
                        Kind::Gauge,
                        Point::Number(point),
                    );
                }
            }
        }
    }

    fn counter(&mut self, f: Family, time: u64, starts: &mut StartTimes) {
        // `x_total` is the OTLP Sum `x` (as the Collector's receiver trims it).
        let name = f.name.strip_suffix("_total").unwrap_or(&f.name);
        for group in by_series(&f.samples, None) {
            let (resource, attributes) = self.labels(group.labels.clone());
            let mut value = None;
            let mut created = None;
            let mut t = time;
            for s in &group.samples {
                match s.suffix {
                    "_created" => created = Some(seconds_to_ns(s.value)),
                    _ => {
                        value = Some(s.value);
                        t = at(s, time);
                    }
                }
            }
            let Some(value) = value else { continue };
            let start = created.unwrap_or_else(|| {
                starts.start(
                    series_key(name, (&resource.0, &resource.1), &attributes),
                    t,
                    value,
                )
            });
            let point = number(attributes, t, start, value);
            self.push(
                resource,
                name,
                &f.unit,
                &f.help,
                Kind::Counter,
                Point::Number(point),
            );
        }
    }

    fn histogram(&mut self, f: Family, time: u64, starts: &mut StartTimes) {
        for group in by_series(&f.samples, Some("le")) {
            let (resource, attributes) = self.labels(group.labels.clone());
            let mut buckets: Vec<(f64, f64)> = Vec::new();
            let (mut sum, mut count, mut created) = (None, None, None);
            let mut t = time;
            for s in &group.samples {
                match s.suffix {
                    "_bucket" => {
                        let le = s
                            .labels
                            .iter()
                            .find(|(n, _)| n == "le")
                            .and_then(|(_, v)| parse::number(v).ok());
                        if let Some(le) = le {
                            buckets.push((le, s.value));
                        }
                        t = at(s, time);
                    }
                    "_sum" => sum = Some(s.value),
                    "_count" => {
                        count = Some(s.value);
                        t = at(s, time);
                    }
                    "_created" => created = Some(seconds_to_ns(s.value)),
                    _ => {}
                }
            }
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            let inf = buckets.iter().find(|b| b.0 == f64::INFINITY).map(|b| b.1);
            let count = count.or(inf).or(buckets.last().map(|b| b.1)).unwrap_or(0.0);
            let finite: Vec<(f64, f64)> = buckets.into_iter().filter(|b| b.0.is_finite()).collect();
            let mut bucket_counts = Vec::with_capacity(finite.len() + 1);
            let mut below = 0.0;
            for (_, cumulative) in &finite {
                bucket_counts.push(as_count(cumulative - below));
                below = *cumulative;
            }
            bucket_counts.push(as_count(count - below));
            let start = created.unwrap_or_else(|| {
                starts.start(
                    series_key(&f.name, (&resource.0, &resource.1), &attributes),
                    t,
                    count,
                )
            });
            let point = HistogramDataPoint {
                attributes,
                start_time_unix_nano: start,
                time_unix_nano: t,
                count: as_count(count),
                sum,
                bucket_counts,
                explicit_bounds: finite.into_iter().map(|b| b.0).collect(),
                ..Default::default()
            };
            self.push(
                resource,
                &f.name,
                &f.unit,
                &f.help,
                Kind::Histogram,
                Point::Histogram(point),
            );
        }
    }

    fn summary(&mut self, f: Family, time: u64, starts: &mut StartTimes) {
        for group in by_series(&f.samples, Some("quantile")) {
            let (resource, attributes) = self.labels(group.labels.clone());
            let mut quantile_values = Vec::new();
            let (mut sum, mut count, mut created) = (0.0, 0.0, None);
            let mut t = time;
            for s in &group.samples {
                match s.suffix {
                    "" => {
                        let q = s
                            .labels
                            .iter()
                            .find(|(n, _)| n == "quantile")
                            .and_then(|(_, v)| parse::number(v).ok());
                        if let Some(quantile) = q {
                            quantile_values.push(ValueAtQuantile {
                                quantile,
                                value: s.value,
                            });
                        }
                        t = at(s, time);
                    }
                    "_sum" => sum = s.value,
                    "_count" => {
                        count = s.value;
                        t = at(s, time);
                    }
                    "_created" => created = Some(seconds_to_ns(s.value)),
                    _ => {}
                }
            }
            let start = created.unwrap_or_else(|| {
                starts.start(
                    series_key(&f.name, (&resource.0, &resource.1), &attributes),
                    t,
                    count,
                )
            });
            let point = SummaryDataPoint {
                attributes,
                start_time_unix_nano: start,
                time_unix_nano: t,
                count: as_count(count),
                sum,
                quantile_values,
                ..Default::default()
            };
            self.push(
                resource,
                &f.name,
                &f.unit,
                &f.help,
                Kind::Summary,
                Point::Summary(point),
            );
        }
    }

    /// A series' resource (job, instance) and attributes: its scraped
    /// labels and the target's, a clash settled by `honor_labels` as
    /// Prometheus does.
    /// Takes the scraped labels' strings into the attributes (no copy).
    fn labels(&self, mut scraped: Vec<(String, String)>) -> (Res<'t>, Vec<KeyValue>) {
        let t: &'t TargetLabels = self.target;
        let target = [("job", &t.job), ("instance", &t.instance)]
            .into_iter()
            .map(|(k, v)| (k, v.as_str()))
            .chain(t.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        // Target labels the series gets, borrowed until they become
        // attributes.
        let mut added: Vec<(&'t str, &'t str)> = Vec::new();
        for (name, value) in target {
            match scraped.iter().position(|(n, _)| n == name) {
                Some(_) if t.honor_labels => {}
                Some(i) => {
                    let mut renamed = format!("exported_{name}");
                    while scraped.iter().any(|(n, _)| *n == renamed)
                        || added.iter().any(|(n, _)| *n == renamed)
                    {
                        renamed.insert_str(0, "exported_");
                    }
                    scraped[i].0 = renamed;
                    added.push((name, value));
                }
                None if value.is_empty() => {}
                None => added.push((name, value)),
            }
        }
        let mut take = |name: &str| -> Cow<'t, str> {
            if let Some(i) = scraped.iter().position(|(n, _)| n == name) {
                return Cow::Owned(scraped.remove(i).1);
            }
            match added.iter().position(|(n, _)| *n == name) {
                Some(i) => Cow::Borrowed(added.remove(i).1),
                None => Cow::Borrowed(""),
            }
        };
        let job = take("job");
        let instance = take("instance");
        // Label names are unique here (a clash was renamed or honoured).
        let mut attributes: Vec<KeyValue> = Vec::with_capacity(scraped.len() + added.len());
        attributes.extend(scraped.into_iter().map(|(k, v)| kv_owned(k, v)));
        attributes.extend(added.into_iter().map(|(k, v)| kv(k, v.to_string())));
        attributes.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        ((job, instance), attributes)
    }

    fn push(
        &mut self,
        resource: Res<'_>,
        name: &str,
        unit: &str,
        help: &str,
        kind: Kind,
        point: Point,
    ) {
        let ri = match self
            .resources
            .iter()
            .position(|(r, _)| r.0 == resource.0 && r.1 == resource.1)
        {
            Some(i) => i,
            None => {
                let owned = (resource.0.into_owned(), resource.1.into_owned());
                self.resources.push((owned, ResourceOut::default()));
                self.resources.len() - 1
            }
        };
        let out = &mut self.resources[ri].1;
        let i = match self.last {
            Some((r, m, k)) if r == ri && k == kind && out.metrics[m].name == name => m,
            _ => *out
                .by_name
                .entry((name.to_string(), kind))
                .or_insert_with(|| {
                    out.metrics.push(Metric {
                        name: name.to_string(),
                        description: help.to_string(),
                        unit: unit.to_string(),
                        data: Some(empty(kind)),
                        ..Default::default()
                    });
                    out.metrics.len() - 1
                }),
        };
        self.last = Some((ri, i, kind));
        match (out.metrics[i].data.as_mut(), point) {
            (Some(Data::Gauge(g)), Point::Number(p)) => g.data_points.push(p),
            (Some(Data::Sum(s)), Point::Number(p)) => s.data_points.push(p),
            (Some(Data::Histogram(h)), Point::Histogram(p)) => h.data_points.push(p),
            (Some(Data::Summary(s)), Point::Summary(p)) => s.data_points.push(p),
            // Keyed by type above: a point always finds its own kind.
            _ => {}
        }
    }
}

enum Point {
    Number(NumberDataPoint),
    Histogram(HistogramDataPoint),
    Summary(SummaryDataPoint),
}

fn empty(kind: Kind) -> Data {
    let cumulative = AggregationTemporality::Cumulative as i32;
    match kind {
        Kind::Counter => Data::Sum(Sum {
            data_points: Vec::new(),
            aggregation_temporality: cumulative,
            is_monotonic: true,
        }),
        Kind::Histogram => Data::Histogram(Histogram {
            data_points: Vec::new(),
            aggregation_temporality: cumulative,
        }),
        Kind::Summary => Data::Summary(Summary {
            data_points: Vec::new(),
        }),
        _ => Data::Gauge(Gauge {
            data_points: Vec::new(),
        }),
    }
}

/// The samples of one series of a family: same labels but `except`.
struct Series<'a> {
    labels: Vec<(String, String)>,
    samples: Vec<&'a Sample>,
}

fn by_series<'a>(samples: &'a [Sample], except: Option<&str>) -> Vec<Series<'a>> {
    let mut out: Vec<Series<'a>> = Vec::new();
    let mut index: HashMap<Vec<(String, String)>, usize> = HashMap::new();
    for s in samples {
        let mut labels: Vec<(String, String)> = s
            .labels
            .iter()
            .filter(|(n, _)| Some(n.as_str()) != except)
            .cloned()
            .collect();
        labels.sort();
        let i = *index.entry(labels.clone()).or_insert_with(|| {
            out.push(Series {
                labels,
                samples: Vec::new(),
            });
            out.len() - 1
        });
        out[i].samples.push(s);
    }
    out
}

fn series_key(name: &str, resource: (&str, &str), attributes: &[KeyValue]) -> u64 {
    let mut h = Xxh3::new();
    for part in [name, resource.0, resource.1] {
        h.update(part.as_bytes());
        h.update(&[0xff]);
    }
    for a in attributes {
        h.update(a.key.as_bytes());
        h.update(&[0xfe]);
        if let Some(any_value::Value::StringValue(v)) =
            a.value.as_ref().and_then(|v| v.value.as_ref())
        {
            h.update(v.as_bytes());
        }
        h.update(&[0xff]);
    }
    h.digest()
}

fn number(attributes: Vec<KeyValue>, time: u64, start: u64, value: f64) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        start_time_unix_nano: start,
        time_unix_nano: time,
        value: Some(number_data_point::Value::AsDouble(value)),
        ..Default::default()
    }
}

/// A sample's own time, else the scrape's.
fn at(s: &Sample, scrape: u64) -> u64 {
    s.timestamp_ns.map_or(scrape, |t| t.max(0) as u64)
}

/// A `_created` value (seconds, a float) as Unix nanoseconds, rounded to
/// the microsecond: what a double holds exactly at today's epoch seconds.
fn seconds_to_ns(s: f64) -> u64 {
    if s.is_finite() && s > 0.0 {
        (s * 1e6).round() as u64 * 1000
    } else {
        0
    }
}

/// A count written as a float (negative and NaN: 0).
fn as_count(v: f64) -> u64 {
    if v.is_finite() && v > 0.0 {
        v.round() as u64
    } else {
        0
    }
}

fn kv(key: &str, value: String) -> KeyValue {
    kv_owned(key.to_string(), value)
}

fn kv_owned(key: String, value: String) -> KeyValue {
    KeyValue {
        key,
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value)),
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
