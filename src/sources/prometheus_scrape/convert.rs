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

The points go to an [`Output`] as they are made, their labels borrowed
from the parsed samples: the scrape's [`Encoder`](super::encode::Encoder)
writes each one's event into the batch at once; no OTLP request is built.
*/

use std::borrow::Cow;
use std::collections::HashMap;

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    summary_data_point::ValueAtQuantile, HistogramDataPoint, SummaryDataPoint,
};
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

/// A series' resource: its `job` and `instance`, borrowed from the target
/// or from the series' own labels (`honor_labels`).
type Res<'a> = (&'a str, &'a str);

/// A point's attributes: label name (a renamed clash is owned) and value,
/// sorted by name, each name once.
pub(crate) type Attributes<'a> = [(Cow<'a, str>, &'a str)];

/// A gauge's or counter's point, as the conversion hands it to its
/// [`Output`].
pub(crate) struct Number<'a> {
    pub attributes: &'a Attributes<'a>,
    /// 0 for a gauge.
    pub start: u64,
    pub time: u64,
    pub value: f64,
}

/// Where the conversion's points go: one batch's bytes
/// ([`Encoder`](super::encode::Encoder)) when scraping; an OTLP request
/// (`convert/reference.rs`) in tests, the reference the bytes are
/// compared with. Resources and metrics are numbered in the order they
/// are declared, from 0; a point names the ones it belongs to.
pub(crate) trait Output {
    /// Declares a resource: `job` and `instance` (each empty when absent)
    /// and `more` attributes.
    fn resource(&mut self, job: &str, instance: &str, more: &[(String, String)]);
    /// Declares a metric of resource `r`: a Gauge, a monotonic cumulative
    /// Sum (`Counter`), a cumulative Histogram or a Summary.
    fn metric(&mut self, r: usize, name: &str, help: &str, unit: &str, kind: Kind);
    fn number(&mut self, r: usize, m: usize, p: &Number<'_>);
    fn histogram(&mut self, r: usize, m: usize, p: HistogramDataPoint);
    fn summary(&mut self, r: usize, m: usize, p: SummaryDataPoint);
}

/// One resource's metrics, by name and type: a gauge `x` and a counter
/// `x_total` (trimmed to `x`) are two metrics of one name, as the
/// Collector makes them.
struct ResourceIndex {
    job: String,
    instance: String,
    by_name: HashMap<(String, Kind), usize>,
}

/// The collection being built: metrics per (job, instance), written to
/// `O` as they come.
pub struct Builder<'t, O: Output> {
    target: &'t TargetLabels,
    out: O,
    resources: Vec<ResourceIndex>,
    /// The metric the last point went to (resource, metric, kind, name): a
    /// family's points come together, so most find theirs here without
    /// a lookup by name.
    last: Option<(usize, usize, Kind)>,
    last_name: String,
}

impl<'t, O: Output> Builder<'t, O> {
    pub fn new(target: &'t TargetLabels, out: O) -> Builder<'t, O> {
        Builder {
            target,
            out,
            resources: Vec::new(),
            last: None,
            last_name: String::new(),
        }
    }

    /// Adds every family of `e`; `time` is the scrape's start (Unix ns).
    pub fn exposition(&mut self, e: Exposition, time: u64, starts: &mut StartTimes) {
        for f in &e.families {
            self.family(f, time, starts);
        }
        starts.forget_unseen();
    }

    /// Adds a gauge `name` with one point at `time`, for the target alone
    /// (`up`, `scrape_duration_seconds`, `scrape_samples_scraped`).
    pub fn synthetic(&mut self, name: &str, unit: &str, value: f64, time: u64) {
        let (resource, attributes) = self.labels(std::iter::empty());
        let (r, m) = self.metric(resource, name, unit, "", Kind::Gauge);
        let p = Number {
            attributes: &attributes,
            start: 0,
            time,
            value,
        };
        self.out.number(r, m, &p);
    }

    /// The output, every point written to it.
    pub fn finish(self) -> O {
        self.out
    }

    fn family(&mut self, f: &Family, time: u64, starts: &mut StartTimes) {
        match f.kind {
            Kind::Counter => self.counter(f, time, starts),
            Kind::Histogram => self.histogram(f, time, starts),
            Kind::Summary => self.summary(f, time, starts),
            Kind::Gauge | Kind::Unknown | Kind::StateSet | Kind::Info | Kind::GaugeHistogram => {
                let mut suffixed = String::new();
                for s in &f.samples {
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
                    let (resource, attributes) = self.labels(pairs(&s.labels));
                    let (r, m) = self.metric(resource, name, &f.unit, &f.help, Kind::Gauge);
                    let p = Number {
                        attributes: &attributes,
                        start: 0,
                        time: at(s, time),
                        value: s.value,
                    };
                    self.out.number(r, m, &p);
                }
            }
        }
    }

    fn counter(&mut self, f: &Family, time: u64, starts: &mut StartTimes) {
        // `x_total` is the OTLP Sum `x` (as the Collector's receiver trims it).
        let name = f.name.strip_suffix("_total").unwrap_or(&f.name);
        for group in by_series(&f.samples, None) {
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
            let (resource, attributes) = self.labels(group.labels.iter().copied());
            let start = created
                .unwrap_or_else(|| starts.start(series_key(name, resource, &attributes), t, value));
            let (r, m) = self.metric(resource, name, &f.unit, &f.help, Kind::Counter);
            let p = Number {
                attributes: &attributes,
                start,
                time: t,
                value,
            };
            self.out.number(r, m, &p);
        }
    }

    fn histogram(&mut self, f: &Family, time: u64, starts: &mut StartTimes) {
        for group in by_series(&f.samples, Some("le")) {
            let (resource, attributes) = self.labels(group.labels.iter().copied());
            let mut buckets: Vec<(f64, f64)> = Vec::new();
            let (mut sum, mut count, mut created) = (None, None, None);
            let mut t = time;
            for s in &group.samples {
                match s.suffix {
                    "_bucket" => {
                        let le = s
                            .labels
                            .iter()
                            .find(|(n, _)| *n == "le")
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
                starts.start(series_key(&f.name, resource, &attributes), t, count)
            });
            let point = HistogramDataPoint {
                attributes: key_values(&attributes),
                start_time_unix_nano: start,
                time_unix_nano: t,
                count: as_count(count),
                sum,
                bucket_counts,
                explicit_bounds: finite.into_iter().map(|b| b.0).collect(),
                ..Default::default()
            };
            let (r, m) = self.metric(resource, &f.name, &f.unit, &f.help, Kind::Histogram);
            self.out.histogram(r, m, point);
        }
    }

    fn summary(&mut self, f: &Family, time: u64, starts: &mut StartTimes) {
        for group in by_series(&f.samples, Some("quantile")) {
            let (resource, attributes) = self.labels(group.labels.iter().copied());
            let mut quantile_values = Vec::new();
            let (mut sum, mut count, mut created) = (0.0, 0.0, None);
            let mut t = time;
            for s in &group.samples {
                match s.suffix {
                    "" => {
                        let q = s
                            .labels
                            .iter()
                            .find(|(n, _)| *n == "quantile")
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
                starts.start(series_key(&f.name, resource, &attributes), t, count)
            });
            let point = SummaryDataPoint {
                attributes: key_values(&attributes),
                start_time_unix_nano: start,
                time_unix_nano: t,
                count: as_count(count),
                sum,
                quantile_values,
                ..Default::default()
            };
            let (r, m) = self.metric(resource, &f.name, &f.unit, &f.help, Kind::Summary);
            self.out.summary(r, m, point);
        }
    }

    /// A series' resource (job, instance) and attributes: its scraped
    /// labels and the target's, a clash settled by `honor_labels` as
    /// Prometheus does. Borrows every string but a renamed label's name.
    fn labels<'s>(
        &self,
        scraped: impl Iterator<Item = (&'s str, &'s str)>,
    ) -> (Res<'s>, Vec<(Cow<'s, str>, &'s str)>)
    where
        't: 's,
    {
        let t: &'t TargetLabels = self.target;
        let mut all = Vec::with_capacity(scraped.size_hint().0 + t.labels.len());
        all.extend(scraped.map(|(k, v)| (Cow::Borrowed(k), v)));
        let mut scraped: Vec<(Cow<'s, str>, &'s str)> = all;
        // The usual series names no target label: it keeps its labels and
        // gets the target's (the slow path below gives the same).
        let clash = scraped
            .iter()
            .any(|(n, _)| n == "job" || n == "instance" || t.labels.iter().any(|(k, _)| k == n));
        if !clash {
            let others = t.labels.iter().filter(|(_, v)| !v.is_empty());
            scraped.extend(others.map(|(k, v)| (Cow::Borrowed(k.as_str()), v.as_str())));
            scraped.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            return ((t.job.as_str(), t.instance.as_str()), scraped);
        }
        let target = [("job", &t.job), ("instance", &t.instance)]
            .into_iter()
            .map(|(k, v)| (k, v.as_str()))
            .chain(t.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        // Target labels the series gets.
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
                    scraped[i].0 = Cow::Owned(renamed);
                    added.push((name, value));
                }
                None if value.is_empty() => {}
                None => added.push((name, value)),
            }
        }
        let mut take = |name: &str| -> &'s str {
            if let Some(i) = scraped.iter().position(|(n, _)| n == name) {
                return scraped.remove(i).1;
            }
            match added.iter().position(|(n, _)| *n == name) {
                Some(i) => added.remove(i).1,
                None => "",
            }
        };
        let job = take("job");
        let instance = take("instance");
        // Label names are unique here (a clash was renamed or honoured).
        scraped.extend(added.into_iter().map(|(k, v)| (Cow::Borrowed(k), v)));
        scraped.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        ((job, instance), scraped)
    }

    /// The (resource, metric) a point of `name` and `kind` goes to,
    /// declared to the output when new.
    fn metric(
        &mut self,
        resource: Res<'_>,
        name: &str,
        unit: &str,
        help: &str,
        kind: Kind,
    ) -> (usize, usize) {
        let ri = match self
            .resources
            .iter()
            .position(|r| r.job == resource.0 && r.instance == resource.1)
        {
            Some(i) => i,
            None => {
                self.out
                    .resource(resource.0, resource.1, &self.target.resource);
                self.resources.push(ResourceIndex {
                    job: resource.0.to_string(),
                    instance: resource.1.to_string(),
                    by_name: HashMap::new(),
                });
                self.resources.len() - 1
            }
        };
        let i = match self.last {
            Some((r, m, k)) if r == ri && k == kind && self.last_name == name => m,
            _ => {
                let by_name = &mut self.resources[ri].by_name;
                let next = by_name.len();
                let i = *by_name.entry((name.to_string(), kind)).or_insert(next);
                if i == next {
                    self.out.metric(ri, name, help, unit, kind);
                }
                self.last_name.clear();
                self.last_name.push_str(name);
                i
            }
        };
        self.last = Some((ri, i, kind));
        (ri, i)
    }
}

/// A sample's labels as borrowed pairs.
fn pairs<K: AsRef<str>, V: AsRef<str>>(labels: &[(K, V)]) -> impl Iterator<Item = (&str, &str)> {
    labels.iter().map(|(k, v)| (k.as_ref(), v.as_ref()))
}

/// The samples of one series of a family: same labels but `except`.
struct Series<'a> {
    /// Sorted.
    labels: Vec<(&'a str, &'a str)>,
    samples: Vec<&'a Sample<'a>>,
}

fn by_series<'a>(samples: &'a [Sample<'a>], except: Option<&str>) -> Vec<Series<'a>> {
    let mut out: Vec<Series<'a>> = Vec::new();
    let mut index: HashMap<Vec<(&'a str, &'a str)>, usize> = HashMap::new();
    for s in samples {
        let mut labels: Vec<(&'a str, &'a str)> = pairs(&s.labels)
            .filter(|(n, _)| Some(*n) != except)
            .collect();
        labels.sort_unstable();
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

fn series_key(name: &str, resource: Res<'_>, attributes: &Attributes<'_>) -> u64 {
    let mut h = Xxh3::new();
    for part in [name, resource.0, resource.1] {
        h.update(part.as_bytes());
        h.update(&[0xff]);
    }
    for (k, v) in attributes {
        h.update(k.as_bytes());
        h.update(&[0xfe]);
        h.update(v.as_bytes());
        h.update(&[0xff]);
    }
    h.digest()
}

/// Attributes as OTLP key-values (for the points that prost encodes).
pub(crate) fn key_values(attributes: &Attributes<'_>) -> Vec<KeyValue> {
    attributes
        .iter()
        .map(|(k, v)| kv(k, v.to_string()))
        .collect()
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

/// A collection's resource attributes: `job` and `instance` as the
/// service's name and instance id (left out when empty), then `more`.
pub(crate) fn resource_attributes(
    job: &str,
    instance: &str,
    more: &[(String, String)],
) -> Vec<KeyValue> {
    let mut attributes = Vec::new();
    if !job.is_empty() {
        attributes.push(kv("service.name", job.to_string()));
    }
    if !instance.is_empty() {
        attributes.push(kv("service.instance.id", instance.to_string()));
    }
    attributes.extend(more.iter().map(|(k, v)| kv(k, v.clone())));
    attributes
}

pub(crate) fn kv(key: &str, value: String) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value)),
        }),
        ..Default::default()
    }
}

#[cfg(test)]
pub(crate) mod reference;
#[cfg(test)]
pub(crate) mod tests;
