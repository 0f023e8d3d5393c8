//! A `/proc` + `/sys` tree in a temporary directory, a collector run on it
//! (its `root`), and questions about what it collected.

use std::path::Path;

use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, Metric, NumberDataPoint,
};

use super::{Collector, Failure, Filters, Host};
use crate::sources::host_metrics::points::Points;

/// Boot time every fixture's machine has (unix seconds).
pub const BOOT: u64 = 1_700_000_000;

pub struct Fixture {
    pub dir: tempfile::TempDir,
    filters: Filters,
}

impl Fixture {
    pub fn new() -> Fixture {
        Fixture {
            dir: tempfile::tempdir().expect("tempdir"),
            filters: Filters::default(),
        }
    }

    pub fn file(self, rel: &str, text: &str) -> Fixture {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(p.parent().expect("a parent")).expect("mkdir");
        std::fs::write(&p, text).expect("write fixture");
        self
    }

    pub fn filters(mut self, f: Filters) -> Fixture {
        self.filters = f;
        self
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    fn run(&self, c: Collector) -> (Result<(), Failure>, Points) {
        let mut host = Host::new(self.dir.path(), self.filters.clone());
        host.boot_secs = BOOT;
        let mut p = Points::default();
        p.begin(BOOT * 1_000_000_000 + 5, BOOT * 1_000_000_000);
        (host.collect(c, &mut p), p)
    }

    pub fn collect(&self, c: Collector) -> Got {
        let (r, p) = self.run(c);
        r.unwrap_or_else(|e| panic!("{c:?}: {e}"));
        Got(p.to_metrics())
    }

    pub fn collect_err(&self, c: Collector) -> Failure {
        match self.run(c).0 {
            Ok(()) => panic!("{c:?} collected from a fixture it should refuse"),
            Err(e) => e,
        }
    }
}

/// What a collector produced.
#[derive(Debug)]
pub struct Got(pub Vec<Metric>);

fn attr_string(v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        other => format!("{other:?}"),
    }
}

impl Got {
    fn metric(&self, name: &str) -> &Metric {
        self.0
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", self.names()))
    }

    pub fn names(&self) -> Vec<&str> {
        self.0.iter().map(|m| m.name.as_str()).collect()
    }

    pub fn has(&self, name: &str) -> bool {
        self.0.iter().any(|m| m.name == name)
    }

    pub fn points(&self, name: &str) -> &[NumberDataPoint] {
        match &self.metric(name).data {
            Some(Data::Sum(s)) => &s.data_points,
            Some(Data::Gauge(g)) => &g.data_points,
            other => panic!("{name}: {other:?}"),
        }
    }

    pub fn unit(&self, name: &str) -> &str {
        &self.metric(name).unit
    }

    pub fn kind(&self, name: &str) -> &'static str {
        match &self.metric(name).data {
            Some(Data::Sum(s)) if s.is_monotonic => "counter",
            Some(Data::Sum(_)) => "updowncounter",
            Some(Data::Gauge(_)) => "gauge",
            _ => "other",
        }
    }

    pub fn start(&self, name: &str) -> u64 {
        self.points(name)[0].start_time_unix_nano
    }

    /// The attributes of every point of `name`, as `key=value` strings.
    pub fn attrs(&self, name: &str) -> Vec<Vec<String>> {
        self.points(name)
            .iter()
            .map(|p| {
                p.attributes
                    .iter()
                    .map(|kv| format!("{}={}", kv.key, attr_string(&kv.value)))
                    .collect()
            })
            .collect()
    }

    /// The value of the one point of `name` with exactly `attrs`.
    pub fn value(&self, name: &str, attrs: &[(&str, &str)]) -> f64 {
        let found: Vec<&NumberDataPoint> = self
            .points(name)
            .iter()
            .filter(|p| {
                p.attributes.len() == attrs.len()
                    && attrs.iter().all(|(k, v)| {
                        p.attributes
                            .iter()
                            .any(|kv| kv.key == *k && attr_string(&kv.value) == *v)
                    })
            })
            .collect();
        assert_eq!(found.len(), 1, "{name} {attrs:?}: {:?}", self.attrs(name));
        match found[0].value {
            Some(number_data_point::Value::AsDouble(d)) => d,
            Some(number_data_point::Value::AsInt(i)) => i as f64,
            None => panic!("{name}: no value"),
        }
    }
}
