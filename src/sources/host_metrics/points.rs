//! One collection's metrics as OTLP: what every collector writes into, so
//! that names, units, kinds and start times are stated once per metric and
//! every point of a collection carries the same timestamp.
//!
//! The metrics are kept between collections and only their points are
//! cleared, so a steady machine reuses the same vectors every interval.

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point::Value, AggregationTemporality, Gauge, Metric, NumberDataPoint,
    Sum,
};

/// The kind of a metric, as the semantic conventions name its instrument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A monotonic cumulative Sum (semconv "Counter").
    Counter,
    /// A non-monotonic cumulative Sum (semconv "UpDownCounter").
    UpDownCounter,
    Gauge,
}

/// An attribute value: most are strings, `cpu.logical_number` is an int.
#[derive(Debug, Clone, Copy)]
pub enum Attr<'a> {
    Str(&'a str),
    Int(i64),
}

/// The metrics of one collection.
#[derive(Debug, Default)]
pub struct Points {
    metrics: Vec<Metric>,
    /// When the collection was taken (unix ns): every point's time.
    time: u64,
    /// Boot time (unix ns): every cumulative sum's start time.
    start: u64,
}

impl Points {
    /// Starts a collection taken at `time`, for a machine booted at `start`.
    pub fn begin(&mut self, time: u64, start: u64) {
        self.time = time;
        self.start = start;
        for m in &mut self.metrics {
            match &mut m.data {
                Some(Data::Sum(s)) => s.data_points.clear(),
                Some(Data::Gauge(g)) => g.data_points.clear(),
                _ => {}
            }
        }
    }

    /// The metric `name`, created on first use; points are added through
    /// the returned [`Series`].
    pub fn metric(&mut self, name: &'static str, unit: &'static str, kind: Kind) -> Series<'_> {
        let at = match self.metrics.iter().position(|m| m.name == name) {
            Some(at) => at,
            None => {
                let data = match kind {
                    Kind::Counter | Kind::UpDownCounter => Data::Sum(Sum {
                        data_points: Vec::new(),
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                        is_monotonic: kind == Kind::Counter,
                    }),
                    Kind::Gauge => Data::Gauge(Gauge {
                        data_points: Vec::new(),
                    }),
                };
                self.metrics.push(Metric {
                    name: name.to_string(),
                    unit: unit.to_string(),
                    data: Some(data),
                    ..Default::default()
                });
                self.metrics.len() - 1
            }
        };
        let (time, start) = (self.time, self.start);
        let points = match &mut self.metrics[at].data {
            Some(Data::Sum(s)) => &mut s.data_points,
            Some(Data::Gauge(g)) => &mut g.data_points,
            _ => unreachable!("host metrics are sums and gauges"),
        };
        Series {
            points,
            time,
            // Gauges have no start: they are a reading, not an accumulation.
            start: if kind == Kind::Gauge { 0 } else { start },
        }
    }

    /// The metrics that got points this collection (a metric with no
    /// point is refused by the split, and means nothing).
    pub fn to_metrics(&self) -> Vec<Metric> {
        self.metrics
            .iter()
            .filter(|m| match &m.data {
                Some(Data::Sum(s)) => !s.data_points.is_empty(),
                Some(Data::Gauge(g)) => !g.data_points.is_empty(),
                _ => false,
            })
            .cloned()
            .collect()
    }

    /// Points in this collection.
    pub fn count(&self) -> usize {
        self.metrics
            .iter()
            .map(|m| match &m.data {
                Some(Data::Sum(s)) => s.data_points.len(),
                Some(Data::Gauge(g)) => g.data_points.len(),
                _ => 0,
            })
            .sum()
    }
}

/// Where the points of one metric go.
pub struct Series<'a> {
    points: &'a mut Vec<NumberDataPoint>,
    time: u64,
    start: u64,
}

impl Series<'_> {
    pub fn int(&mut self, attrs: &[(&'static str, Attr<'_>)], v: i64) -> &mut Self {
        self.push(attrs, Value::AsInt(v))
    }

    /// An unsigned counter, kept an int up to `i64::MAX` (a kernel counter
    /// past it wraps to negative in OTLP's signed int otherwise).
    pub fn uint(&mut self, attrs: &[(&'static str, Attr<'_>)], v: u64) -> &mut Self {
        self.push(attrs, Value::AsInt(i64::try_from(v).unwrap_or(i64::MAX)))
    }

    pub fn double(&mut self, attrs: &[(&'static str, Attr<'_>)], v: f64) -> &mut Self {
        self.push(attrs, Value::AsDouble(v))
    }

    fn push(&mut self, attrs: &[(&'static str, Attr<'_>)], v: Value) -> &mut Self {
        self.points.push(NumberDataPoint {
            attributes: attrs.iter().map(|(k, v)| kv(k, *v)).collect(),
            start_time_unix_nano: self.start,
            time_unix_nano: self.time,
            value: Some(v),
            ..Default::default()
        });
        self
    }
}

pub fn kv(key: &str, v: Attr<'_>) -> KeyValue {
    let value = match v {
        Attr::Str(s) => any_value::Value::StringValue(s.to_string()),
        Attr::Int(i) => any_value::Value::IntValue(i),
    };
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_start_at_boot_and_gauges_do_not() {
        let mut p = Points::default();
        p.begin(2_000, 1_000);
        p.metric("c", "s", Kind::Counter).double(&[], 1.5);
        p.metric("g", "1", Kind::Gauge).double(&[], 0.5);
        let m = p.to_metrics();
        let Some(Data::Sum(s)) = &m[0].data else {
            panic!("{m:?}")
        };
        assert!(s.is_monotonic);
        assert_eq!(s.data_points[0].start_time_unix_nano, 1_000);
        assert_eq!(s.data_points[0].time_unix_nano, 2_000);
        let Some(Data::Gauge(g)) = &m[1].data else {
            panic!("{m:?}")
        };
        assert_eq!(g.data_points[0].start_time_unix_nano, 0);
    }

    #[test]
    fn a_metric_without_points_this_time_is_left_out() {
        let mut p = Points::default();
        p.begin(1, 1);
        p.metric("a", "s", Kind::Counter).double(&[], 1.0);
        p.begin(2, 1);
        p.metric("b", "s", Kind::Counter).double(&[], 1.0);
        let names: Vec<_> = p.to_metrics().into_iter().map(|m| m.name).collect();
        assert_eq!(names, ["b"]);
        assert_eq!(p.count(), 1);
    }
}
